"""Deterministic decoding: greedy search and beam search over a cached decoder."""

from keras import ops

from keras_attn import checks
from keras_attn.generation import arguments, decoding
from keras_attn.layers.position_writes import write_positions

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

    Prefill, then one cached step per position in an XLA-compilable loop; right-padded rows get
    the tokens they would get alone (docs/guides/decoding.md).

    Args:
        model: a functional `keras.Model` (run by a `CachedDecoder`) or a decoder object.
        prompt: (B, P) int token ids, right-padded with `pad_token_id`, at least one per row.
        max_length: L, static int >= P: length of the returned sequences, prompt included.
        end_token_id: a row stops after generating it (then padding); None = never stop.
        pad_token_id: id of padding (0 in keras_attn models).
        prompt_lengths: (B,) int in [0, P]; defaults to the count of ids != `pad_token_id`.
        inputs: the model's other inputs by name, e.g. `{"encoder_tokens": (B, S) int}`.
        suppressed_token_ids: ids never generated (a list of ints), or None.

    Returns:
        (B, L) int32 tokens: the prompt, the generated tokens (end included), then padding.

    Raises:
        ValueError: for a model `CachedDecoder` refuses, or an argument outside the above.

    Example:
    >>> import keras
    >>> from keras_attn.generation import greedy_search
    >>> from keras_attn.models import music_transformer
    >>> lm = music_transformer(40, num_layers=1, hidden_dim=16, num_heads=2, intermediate_dim=32)
    >>> prompts = keras.ops.array([[1, 7, 9, 3], [1, 4, 0, 0]])  # right-padded
    >>> tokens = greedy_search(lm, prompts, max_length=10, end_token_id=2)
    >>> tuple(tokens.shape)
    (2, 10)

    Reference:
        Vaswani et al. 2017, "Attention Is All You Need", section 3.
    """

    def choose(logits, position):
        return ops.argmax(logits, axis=-1)

    return decoding.token_loop(
        choose,
        model,
        prompt,
        max_length,
        end_token_id,
        pad_token_id,
        prompt_lengths,
        inputs,
        suppressed_token_ids,
    )


def length_penalty(length, alpha):
    """GNMT length penalty lp(Y) = ((5 + |Y|) / 6) ** alpha.

    Args:
        length: |Y|, the generated tokens (end included), an int or int tensor.
        alpha: the exponent (0 = no normalisation; 0.6 in Vaswani et al.).

    Returns:
        float32 tensor of the shape of `length`.

    Example:
    >>> import keras
    >>> from keras_attn.generation import length_penalty
    >>> round(float(length_penalty(7, 0.6)), 4)  # 2 ** 0.6
    1.5157

    Reference:
        Wu et al. 2016, "Google's Neural Machine Translation System", section 7, equation 14.
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

    Keeps the `num_beams` best hypotheses by log P(Y) / lp(|Y|) (docs/guides/decoding.md).

    Args:
        model: a functional `keras.Model` or a decoder object.
        prompt: (B, P) int, right-padded (see `greedy_search`).
        max_length: L, static int >= P (prompt included).
        num_beams: K, positive int (4 in Vaswani et al. 2017).
        length_penalty_alpha: alpha, a finite number >= 0 (0.6 in Vaswani et al. 2017).
        end_token_id: id that ends a hypothesis, or None.
        pad_token_id: padding id, written after the end token.
        prompt_lengths: (B,) int; defaults to the non-pad count per row.
        inputs: the model's other inputs by name (e.g. `encoder_tokens`).
        return_all_beams: also return every final beam and its score.
        suppressed_token_ids: ids never generated (see `greedy_search`).

    Returns:
        (B, L) int32 best sequences. With `return_all_beams=True`, `(best, beams, scores)`:
        beams (B, K, L) int32 best first, scores (B, K) float32 (`-inf` for empty beams).

    Raises:
        ValueError: for a bad `num_beams`, `length_penalty_alpha` or `return_all_beams`, or as
            `greedy_search`.

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
        Wu et al. 2016, "Google's Neural Machine Translation System", section 7.
    """
    arguments.check_beam_arguments(num_beams, length_penalty_alpha, max_length)
    checks.check_bool(None, "return_all_beams", return_all_beams, "True = also every beam")
    search = decoding.start_search(
        model,
        prompt,
        max_length,
        end_token_id,
        pad_token_id,
        prompt_lengths,
        inputs,
        suppressed_token_ids,
    )
    decoder, suppressed, (tokens, lengths, prompt_mask, start, _), logits, state = search
    vocabulary_size, batch_size = logits.shape[-1], ops.shape(tokens)[0]
    suppress = decoding.suppressor(suppressed, vocabulary_size)
    vocabulary = ops.arange(vocabulary_size, dtype="int32")
    pad = ops.cast(pad_token_id, "int32")
    rows = ops.arange(batch_size, dtype="int32")[:, None] * num_beams
    state = decoder.repeat_state(state, num_beams)
    logits = ops.repeat(logits, num_beams, axis=0)
    sequences = ops.repeat(tokens[:, None, :], num_beams, axis=1)
    # Only beam 0 is live at first: the K copies of the prompt are one hypothesis, not K.
    first = ops.where(ops.equal(ops.arange(num_beams), 0), 0.0, _NEG_INF)
    log_probs = first + ops.zeros((batch_size, 1))
    generated = ops.zeros((batch_size, num_beams), "int32")
    finished = ops.zeros((batch_size, num_beams), "bool")

    def cond(index, sequences, log_probs, generated, finished, logits, state):
        # Done when every beam has ended or holds no hypothesis.
        done = ops.all(ops.logical_or(finished, ops.equal(log_probs, _NEG_INF)))
        return ops.logical_and(ops.less(index, max_length), ops.logical_not(done))

    def body(index, sequences, log_probs, generated, finished, logits, state):
        step_log_probs = ops.reshape(
            ops.log_softmax(suppress(logits), axis=-1), (batch_size, num_beams, vocabulary_size)
        )
        # The next token is certain inside the prompt (the prompt's) and after the end (padding).
        forced = ops.take(prompt_mask, index, axis=1)[:, None]  # (B, 1)
        certain_token = ops.where(forced, ops.take(tokens, index, axis=1)[:, None], pad)
        certain = ops.where(ops.equal(vocabulary, certain_token[..., None]), 0.0, _NEG_INF)
        extension = ops.where(ops.logical_or(forced, finished)[..., None], certain, step_log_probs)
        length_now = ops.maximum(index - lengths + 1, 0)  # (B,)
        candidate_length = ops.where(finished, generated, length_now[:, None])  # (B, K)
        beam, token, log_probs = _best_candidates(
            log_probs[..., None] + extension, candidate_length, length_penalty_alpha
        )
        # A beam holding no hypothesis (fewer than K exist) took a -inf candidate, maybe a
        # suppressed id: it gets the certain token.
        token = ops.where(ops.equal(log_probs, _NEG_INF), certain_token, token)
        generated = ops.take_along_axis(candidate_length, beam, axis=1)
        finished = ops.take_along_axis(finished, beam, axis=1)
        if end_token_id is not None:
            ended = ops.logical_and(ops.logical_not(forced), ops.equal(token, end_token_id))
            finished = ops.logical_or(finished, ended)
        sequences = ops.take_along_axis(sequences, beam[..., None], axis=1)
        sequences = write_positions(sequences, token[..., None], index, axis=2)
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


def _best_candidates(candidate_log_probs, candidate_length, length_penalty_alpha):
    """(beam, token, log_probs) (B, K) of the K best-scoring of the K * V candidates."""
    batch_size, beams, vocabulary_size = ops.shape(candidate_log_probs)
    keys = candidate_log_probs / length_penalty(candidate_length, length_penalty_alpha)[..., None]
    flat = (batch_size, beams * vocabulary_size)
    _, flat_index = ops.top_k(ops.reshape(keys, flat), beams)
    flat_index = ops.cast(flat_index, "int32")
    log_probs = ops.take_along_axis(ops.reshape(candidate_log_probs, flat), flat_index, axis=1)
    return flat_index // vocabulary_size, flat_index % vocabulary_size, log_probs


def _rank_beams(sequences, log_probs, generated, length_penalty_alpha):
    """(best, sequences, scores): the final beams sorted by log P / lp, best first."""
    scores = log_probs / length_penalty(generated, length_penalty_alpha)
    scores, order = ops.top_k(scores, ops.shape(scores)[1])
    sequences = ops.take_along_axis(sequences, ops.cast(order, "int32")[..., None], axis=1)
    return sequences[:, 0], sequences, scores
