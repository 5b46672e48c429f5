"""Deterministic decoding: greedy search and beam search over a cached decoder."""

from keras import ops

from keras_attn import checks
from keras_attn.generation import arguments, decoding

_NEG_INF = float("-inf")


def greedy_search(
    model,
    prompt,
    max_length,
    end_token_id=None,
    pad_token_id=0,
    prompt_lengths=None,
    inputs=None,
    suppressed_token_ids=None,
):
    """Generates by taking the most likely next token at every step.

    The prompt is prefilled in one pass, then one cached step runs per new
    position; a step costs the same at every position (the caches have a
    fixed size). Written with `keras.ops` and `ops.while_loop` on fixed
    shapes, so it runs eagerly and inside `tf.function(jit_compile=True)`
    (batch size may be dynamic, `max_length` is static; prompts padded to a
    fixed width with their lengths given do not retrace).

    Prompts of different lengths share a batch right-padded: each row keeps
    its own positions and gets the tokens it would get alone (see
    `keras_attn.generation.decoding`).

    Args:
        model: a functional `keras.Model` (adapted with `CachedDecoder`) or
            a decoder object (`CachedDecoder`, `RecomputingDecoder`).
        prompt: (B, P) int token ids, right-padded with `pad_token_id`; each
            row holds at least one token (e.g. the start token). For a
            translation model this is the decoder's start, e.g. (B, 1) of
            the start-of-sentence id.
        max_length: L, static int >= P: length of the returned sequences,
            prompt included (also the cache size).
        end_token_id: a row stops after generating this id (the prompt's own
            end tokens do not count); later positions get `pad_token_id`.
            None = always generate to `max_length`.
        pad_token_id: id of padding (0 in keras_attn models).
        prompt_lengths: (B,) int prompt lengths in [0, P] (0: the row
            starts from its first token); defaults to the number of tokens
            != `pad_token_id` per row.
        inputs: the model's other inputs by name, e.g.
            `{"encoder_tokens": (B, S) int}` for a translation model; None for
            decoder-only models.
        suppressed_token_ids: ids that are never generated (probability
            zero at every step; the prompt may hold them), a list of Python
            ints: the ids the model's builder states, e.g.
            `keras_attn.models.MUSIC_SUPPRESSED_TOKEN_IDS` (padding, start)
            or `(tokenizer.pad_id, tokenizer.start_id)` for translation.
            None = every id may be generated.

    Returns:
        (B, L) int32 tokens: the prompt, the generated tokens (end token
        included), then `pad_token_id`.

    Raises:
        ValueError: if the model cannot be adapted (see `CachedDecoder`);
            `max_length` is not a positive int (or too long for a position
            table); the prompt is not (B, P) integers with static
            1 <= P <= max_length and B > 0; `prompt_lengths` is not (B,)
            integers in [0, P]; `end_token_id` / `pad_token_id` lie outside
            the vocabulary [0, V) (V: the width of the logits);
            `suppressed_token_ids` hold ids outside it, the end id or every
            id; `inputs` are not the model's other inputs; or the ids of the
            prompt (within each row's length) or of an input an embedding
            reads lie outside that embedding. Values known only when a graph
            runs (a traced prompt, its batch, the inputs' ids and rows) are
            checked there, once, before the loop: TensorFlow raises
            `InvalidArgumentError` (not under XLA, which has no assertion),
            JAX a `JaxRuntimeError` wrapping the ValueError.

    Example:
    >>> import keras
    >>> from keras_attn.generation import greedy_search
    >>> from keras_attn.models import music_transformer
    >>> lm = music_transformer(40, num_layers=1, hidden_dim=16, num_heads=2,
    ...                        intermediate_dim=32, max_relative_position=8)
    >>> prompts = keras.ops.array([[1, 7, 9, 3], [1, 4, 0, 0]])  # right-padded
    >>> tokens = greedy_search(lm, prompts, max_length=10, end_token_id=2)
    >>> tuple(tokens.shape)
    (2, 10)

    Reference:
        Vaswani et al. 2017, "Attention Is All You Need", section 3
        (auto-regressive generation).
    """

    def choose(logits, position):
        return ops.argmax(logits, axis=-1)

    return decoding.token_loop(
        model,
        prompt,
        max_length,
        choose,
        end_token_id,
        pad_token_id,
        prompt_lengths,
        inputs,
        suppressed_token_ids,
    )


def length_penalty(length, alpha):
    """GNMT length penalty lp(Y) = ((5 + |Y|) / 6) ** alpha.

    Args:
        length: |Y|, number of generated tokens (end token included), an int
            or int tensor.
        alpha: the exponent (0 = no normalisation; 0.6 in Vaswani et al.).

    Returns:
        float32 tensor of the shape of `length`.

    Raises:
        Nothing of its own: `length` and `alpha` are not validated.

    Example:
    >>> import keras
    >>> from keras_attn.generation.search import length_penalty
    >>> lengths = keras.ops.array([1, 7, 19])  # (5 + |Y|) / 6 = 1, 2, 4
    >>> keras.ops.convert_to_numpy(length_penalty(lengths, 1.0)).tolist()
    [1.0, 2.0, 4.0]
    >>> penalty = keras.ops.convert_to_numpy(length_penalty(lengths, 0.6))
    >>> [round(float(value), 4) for value in penalty]  # 1, 2 ** 0.6, 4 ** 0.6
    [1.0, 1.5157, 2.2974]

    Reference:
        Wu et al. 2016, "Google's Neural Machine Translation System",
        section 7, equation 14.
    """
    length = ops.cast(length, "float32")
    return ops.power((5.0 + length) / 6.0, alpha)


def beam_search(
    model,
    prompt,
    max_length,
    num_beams=4,
    length_penalty_alpha=0.6,
    end_token_id=None,
    pad_token_id=0,
    prompt_lengths=None,
    inputs=None,
    return_all_beams=False,
    suppressed_token_ids=None,
):
    """Generates the most likely sequence found by beam search.

    Each row keeps `num_beams` hypotheses. At every step each live
    hypothesis is extended by every token, a hypothesis that has produced
    `end_token_id` is kept frozen (extended by `pad_token_id` at no cost),
    and the `num_beams` extensions with the best score
    log P(Y) / lp(|Y|) survive, with the GNMT length penalty
    lp(|Y|) = ((5 + |Y|) / 6) ** alpha and |Y| the number of generated
    tokens, end token included (frozen hypotheses keep their length). The
    result is the surviving hypothesis with the best score; a hypothesis
    that reaches `max_length` without an end token competes with its
    length. The search stops when every hypothesis of every row has ended or
    at `max_length`. With one beam this is greedy search; with enough beams
    to keep every hypothesis it is exact search. No coverage penalty
    (GNMT's beta = 0).

    The prompt is prefilled once per row, then the caches, the encoder's
    cross-attention keys/values and its padding mask are repeated per beam;
    at each step the self-attention caches follow their beams
    (`reorder_state`). Prompts of different lengths: as `greedy_search`
    (the prompt part of every beam is forced, at no cost).

    Args:
        model: a functional `keras.Model` or a decoder object.
        prompt: (B, P) int, right-padded (see `greedy_search`).
        max_length: L, static int >= P (prompt included).
        num_beams: K, positive int (4 in Vaswani et al. 2017).
        length_penalty_alpha: alpha, a finite number >= 0 (0.6 in Vaswani
            et al. 2017; 0 = plain log-probability).
        end_token_id: id that ends a hypothesis, or None.
        pad_token_id: padding id, written after the end token.
        prompt_lengths: (B,) int; defaults to the non-pad count per row.
        inputs: the model's other inputs by name (e.g. `encoder_tokens`).
        return_all_beams: also return every final beam and its score.
        suppressed_token_ids: ids never generated (see `greedy_search`): the
            step distribution is renormalised over the other ids.

    Returns:
        (B, L) int32 best sequences (prompt included). With
        `return_all_beams=True`, `(best, beams, scores)`: beams (B, K, L)
        int32 sorted best first, scores (B, K) float32 log P / lp (`-inf`
        for beams that never held a distinct hypothesis, when fewer than K
        exist; such beams are filler that holds `pad_token_id` where it
        took no token, never a suppressed id).

    Raises:
        ValueError: if `num_beams` is not a positive int,
            `length_penalty_alpha` is not a finite number >= 0 or so large
            that the penalty at `max_length` exceeds 1e30 (float32 scores
            would lose every difference), `return_all_beams` is not a bool,
            or for the reasons of `greedy_search`.

    Example:
    >>> import keras
    >>> from keras_attn.generation import beam_search
    >>> from keras_attn.models import translation_transformer
    >>> model = translation_transformer(50, num_layers=1, hidden_dim=16,
    ...                                 num_heads=2, intermediate_dim=32)
    >>> source = keras.ops.array([[5, 6, 7, 2]])
    >>> tokens = beam_search(model, keras.ops.array([[1]]), max_length=8, num_beams=4,
    ...                      end_token_id=2, inputs={"encoder_tokens": source})
    >>> tuple(tokens.shape)
    (1, 8)

    Reference:
        Wu et al. 2016, "Google's Neural Machine Translation System:
        Bridging the Gap between Human and Machine Translation", section 7
        (beam search, length normalisation lp = ((5 + |Y|) / 6) ** alpha).
        Vaswani et al. 2017, "Attention Is All You Need", section 6.1
        (beam size 4, alpha = 0.6).
    """
    arguments.check_beam_arguments(num_beams, length_penalty_alpha, max_length)
    checks.check_bool(
        None, "return_all_beams", return_all_beams, "True = also return every beam and its score"
    )
    decoder, suppressed, (tokens, lengths, prompt_mask, start, _), logits, state = (
        decoding.start_search(
            model,
            prompt,
            max_length,
            end_token_id,
            pad_token_id,
            prompt_lengths,
            inputs,
            suppressed_token_ids,
        )
    )
    vocabulary_size = logits.shape[-1]
    suppress = decoding.suppressor(suppressed, vocabulary_size)
    beams = num_beams
    batch_size = ops.shape(tokens)[0]
    state = decoder.repeat_state(state, beams)
    logits = ops.repeat(logits, beams, axis=0)
    sequences, log_probs, generated, finished = _first_beams(tokens, beams)
    pad = ops.cast(pad_token_id, "int32")
    frozen_extension = _certain_token_log_probs(vocabulary_size, pad)  # (V,)
    rows = ops.arange(batch_size, dtype="int32")[:, None] * beams

    def cond(index, sequences, log_probs, generated, finished, logits, state):
        # Done when every beam has ended or holds no hypothesis.
        done = ops.all(ops.logical_or(finished, ops.equal(log_probs, _NEG_INF)))
        return ops.logical_and(ops.less(index, max_length), ops.logical_not(done))

    def body(index, sequences, log_probs, generated, finished, logits, state):
        step_log_probs = ops.reshape(
            ops.log_softmax(suppress(logits), axis=-1), (batch_size, beams, vocabulary_size)
        )
        forced = ops.take(prompt_mask, index, axis=1)  # (B,)
        forced_token = ops.take(tokens, index, axis=1)
        candidate_log_probs = log_probs[..., None] + _extension_log_probs(
            step_log_probs, finished, forced, forced_token, frozen_extension
        )  # (B, K, V)
        length_now = ops.maximum(index - lengths + 1, 0)  # (B,)
        candidate_length = ops.where(finished, generated, length_now[:, None])  # (B, K)
        beam, token, log_probs = _best_candidates(
            candidate_log_probs, candidate_length, length_penalty_alpha
        )
        token = _fill_empty_beams(token, log_probs, forced, forced_token, pad)
        generated = ops.take_along_axis(candidate_length, beam, axis=1)
        finished = _end_beams(
            ops.take_along_axis(finished, beam, axis=1), token, forced, end_token_id
        )
        sequences = ops.take_along_axis(sequences, beam[..., None], axis=1)
        sequences = ops.slice_update(sequences, (0, 0, index), token[..., None])
        state = decoder.reorder_state(state, ops.reshape(rows + beam, (-1,)))
        step_logits, state = decoder(ops.reshape(token, (-1, 1)), index, state)
        logits = ops.cast(step_logits[:, 0], "float32")
        return index + 1, sequences, log_probs, generated, finished, logits, state

    _, sequences, log_probs, generated, _, _, _ = ops.while_loop(
        cond,
        body,
        (start, sequences, log_probs, generated, finished, logits, state),
        maximum_iterations=max_length,
    )
    best, sequences, scores = _rank_beams(sequences, log_probs, generated, length_penalty_alpha)
    if return_all_beams:
        return best, sequences, scores
    return best


def _first_beams(tokens, beams):
    """(sequences, log_probs, generated, finished) of K prompt copies, only beam 0 live."""
    batch_size = ops.shape(tokens)[0]
    sequences = ops.repeat(tokens[:, None, :], beams, axis=1)
    # Only beam 0 is live at first: the K copies of the prompt are one
    # hypothesis, not K.
    first_beam = ops.arange(beams, dtype="int32")[None, :] == 0
    log_probs = ops.where(ops.broadcast_to(first_beam, (batch_size, beams)), 0.0, _NEG_INF)
    generated = ops.zeros((batch_size, beams), "int32")
    finished = ops.zeros((batch_size, beams), "bool")
    return sequences, log_probs, generated, finished


def _certain_token_log_probs(vocabulary_size, token):
    """Log-probabilities (..., V): 0 for `token`, -inf for every other id."""
    vocabulary = ops.arange(vocabulary_size, dtype="int32")
    return ops.where(ops.equal(vocabulary, token), 0.0, _NEG_INF)


def _extension_log_probs(step_log_probs, finished, forced, forced_token, frozen_extension):
    """Log-probs (B, K, V) of extending each beam: padding if finished, prompt if forced."""
    vocabulary_size = step_log_probs.shape[-1]
    extension = ops.where(finished[..., None], frozen_extension[None, None, :], step_log_probs)
    forced_extension = _certain_token_log_probs(vocabulary_size, forced_token[:, None])  # (B, V)
    return ops.where(forced[:, None, None], forced_extension[:, None, :], extension)


def _fill_empty_beams(token, log_probs, forced, forced_token, pad):
    """Gives the prompt token or padding to beams that hold no hypothesis."""
    # Such a beam (fewer than K hypotheses exist) took a -inf candidate,
    # maybe a suppressed id.
    return ops.where(
        ops.equal(log_probs, _NEG_INF),
        ops.where(forced[:, None], forced_token[:, None], pad),
        token,
    )


def _end_beams(finished, token, forced, end_token_id):
    """Also marks as finished the beams that took the end token outside the prompt."""
    if end_token_id is None:
        return finished
    ended = ops.logical_and(ops.logical_not(forced)[:, None], ops.equal(token, end_token_id))
    return ops.logical_or(finished, ended)


def _best_candidates(candidate_log_probs, candidate_length, length_penalty_alpha):
    """(beam, token, log_probs) (B, K) of the K best-scoring of the K * V candidates."""
    batch_size, beams, vocabulary_size = ops.shape(candidate_log_probs)
    penalty = length_penalty(candidate_length, length_penalty_alpha)
    keys = candidate_log_probs / penalty[..., None]
    _, flat_index = ops.top_k(ops.reshape(keys, (batch_size, beams * vocabulary_size)), beams)
    flat_index = ops.cast(flat_index, "int32")
    log_probs = ops.take_along_axis(
        ops.reshape(candidate_log_probs, (batch_size, beams * vocabulary_size)),
        flat_index,
        axis=1,
    )
    return flat_index // vocabulary_size, flat_index % vocabulary_size, log_probs


def _rank_beams(sequences, log_probs, generated, length_penalty_alpha):
    """(best, sequences, scores): the final beams sorted by log P / lp, best first."""
    scores = log_probs / length_penalty(generated, length_penalty_alpha)
    scores, order = ops.top_k(scores, ops.shape(scores)[1])
    sequences = ops.take_along_axis(sequences, ops.cast(order, "int32")[..., None], axis=1)
    return sequences[:, 0], sequences, scores
