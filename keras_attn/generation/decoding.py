"""What the decoding strategies share: the decoder argument, the prompt
layout, and the token-by-token loop of greedy search and sampling.

Prompt layout (all strategies). Prompts are *right-padded* to one width P
(`pad_token_id` after each row's tokens) and every row keeps the absolute
positions of its own tokens, so positions, relative distances and local
blocks are those of the row alone. The prompt is prefilled in one pass (all
P positions at once through the caches), then the loop runs one position
`i` per step for the whole batch, from the shortest prompt length on. At
position `i` a row whose prompt is longer still takes its own prompt token
(its cache entry is recomputed from the same prefix, so it is unchanged);
the other rows take the strategy's choice. Each row therefore gets exactly
the tokens it would get alone, and one scalar cache index serves the batch
(what the layers' caches and XLA want). Left padding was rejected: it would
shift absolute positions and local-attention blocks per row.
"""

import keras
import numpy as np
from keras import ops

from keras_attn.generation import arguments


def as_decoder(model):
    """Returns `model` as a decoder object (`CachedDecoder` for a
    `keras.Model`; objects with the decoder protocol are returned as they
    are).

    Raises:
        ValueError: if `model` is neither.
    """
    from keras_attn.generation.cached_decoder import CachedDecoder

    if isinstance(model, keras.Model):
        return CachedDecoder(model)
    protocol = ("initial_state", "repeat_state", "reorder_state")
    if callable(model) and all(hasattr(model, name) for name in protocol):
        return model
    raise ValueError(
        "Expected a functional `keras.Model` or a decoder object (`CachedDecoder`, "
        "`RecomputingDecoder`, or one with `initial_state`, `__call__`, `repeat_state`, "
        f"`reorder_state`). Received: {model!r}."
    )


def vocabulary_size(decoder):
    """V, the width of the decoder's logits, when known before it runs.

    Read from the decoder's `vocabulary_size` attribute (`CachedDecoder`,
    `RecomputingDecoder`), else from the single output of its `model`, if
    any; None for other decoder objects (their logits tell it after the
    prefill).
    """
    size = getattr(decoder, "vocabulary_size", None)
    if size is not None:
        return size
    try:
        (logits,) = decoder.model.outputs
        size = logits.shape[-1]
    except (AttributeError, TypeError, ValueError, IndexError):
        return None
    return size if isinstance(size, int) else None


def input_vocabulary_size(decoder):
    """The number of ids the decoder's token input takes, when the layers
    that read it say so: a Keras `Embedding`'s `input_dim`, a keras_attn
    embedding's `vocabulary_size` (the smallest, if several). It can exceed
    the logits' width: an Image Transformer embeds 257 ids (256 intensities
    and the start token) and predicts 256. None when no such layer reads
    the tokens (e.g. a decoder object without a model).
    """
    embedding_bound = getattr(decoder, "_embedding_bound", None)
    bound = None if embedding_bound is None else embedding_bound(decoder.token_input)
    return None if bound is None else bound[0]


def prepare_prompt(prompt, max_length, pad_token_id, prompt_lengths, input_vocabulary_size=None):
    """Checks and lays out a right-padded prompt (see `arguments.check_prompt`).

    Args:
        prompt: (B, P) int token ids, right-padded with `pad_token_id`.
        max_length: L >= P, static int.
        pad_token_id: int.
        prompt_lengths: optional (B,) int; defaults to the number of
            non-pad tokens of each row.
        input_vocabulary_size: the number of ids the token input takes,
            when known (`input_vocabulary_size`): the ids the model reads
            (each row's tokens within its length) must lie in [0, it), and
            be >= 0 in any case.

    Returns:
        `(tokens, lengths, prompt_mask, start, width)`: tokens (B, L) int32
        (the prompt, pad after each row's length), lengths (B,) int32 in
        [1, P], prompt_mask (B, L) bool (True inside the prompt), start =
        min(lengths) int32 scalar (first position generated for some row),
        width = P (int).
    """
    prompt = arguments.check_prompt(prompt, max_length)
    width = prompt.shape[1]
    if prompt_lengths is None:
        lengths = ops.sum(ops.cast(ops.not_equal(prompt, pad_token_id), "int32"), axis=1)
    else:
        arguments.check_prompt_lengths(prompt_lengths, prompt)
        lengths = ops.cast(ops.reshape(prompt_lengths, (-1,)), "int32")
    # A row needs one token to predict from: an empty row starts from its
    # first (pad) token.
    lengths = ops.clip(lengths, 1, width)
    prompt_mask = ops.less(ops.arange(max_length, dtype="int32")[None, :], lengths[:, None])
    prompt = ops.where(prompt_mask[:, :width], prompt, ops.cast(pad_token_id, "int32"))
    size = input_vocabulary_size  # No quote marks: TensorFlow escapes them in an assertion.
    requirement = (
        f"`prompt` must hold token ids in [0, {size}), the ids the token embedding of "
        "the model takes: map unknown tokens to an id of the vocabulary."
        if size
        else "`prompt` must hold token ids >= 0 (ids of the vocabulary of the model)."
    )
    prompt = arguments.check_ids(prompt, 0, size, requirement)
    tokens = ops.pad(prompt, [[0, 0], [0, max_length - width]], constant_values=pad_token_id)
    return tokens, lengths, prompt_mask, ops.min(lengths), width


def prefill(decoder, tokens, width, start, max_length, inputs):
    """Runs the prompt through the caches: the whole width P in one pass.

    The generation loop then goes on from `start` = the shortest prompt's
    length, writing again the positions [start, P) that longer rows take
    from their prompt. A decoder that cannot write a position twice
    (`keeps_every_position=False`: rolling caches, which keep the last
    positions only, in order) gets the one-pass prefill only when every
    prompt has the full width; otherwise positions [0, start) one at a
    time.

    Returns:
        `(logits, state)`: logits (B, V) float32 at position `start - 1` (the
        prediction of position `start`), and the state filled up to `start`
        (or further, with positions the loop writes again).
    """
    batch_size = ops.shape(tokens)[0]
    state = decoder.initial_state(batch_size, max_length, inputs)

    def whole_prompt():
        return decoder(tokens[:, :width], 0, state, logits_index=start - 1)

    def position_by_position():
        logits, first = decoder(tokens[:, :1], 0, state)

        def body(index, logits, state):
            token = ops.take(tokens, ops.reshape(index, (1,)), axis=1)
            logits, state = decoder(token, index, state)
            return index + 1, logits, state

        _, logits, last = ops.while_loop(
            lambda index, logits, state: ops.less(index, start),
            body,
            (ops.ones((), "int32"), logits, first),
            maximum_iterations=width - 1,
        )
        return logits, last

    if width == 1 or getattr(decoder, "keeps_every_position", True):
        logits, state = whole_prompt()
    else:
        logits, state = ops.cond(ops.equal(start, width), whole_prompt, position_by_position)
    return ops.cast(logits[:, 0], "float32"), state


def start_search(
    model,
    prompt,
    max_length,
    end_token_id,
    pad_token_id,
    prompt_lengths,
    inputs,
    suppressed_token_ids,
):
    """The start of every search, where its arguments are checked, once: the
    decoder (`as_decoder`); the end, padding and suppressed ids against the
    vocabulary (before the prefill when the decoder tells its size, else
    from the prefill's logits); `max_length` (by the decoder's
    `check_max_length` where it has one), before the prompt is padded to
    it; the prompt and its ids (`prepare_prompt`); the model's other inputs
    (in the decoder's `initial_state`, in the prefill).

    Returns:
        `(decoder, suppressed ids, prepare_prompt's tuple, logits, state)`,
        logits and state as `prefill` returns them.
    """
    decoder = as_decoder(model)
    size = vocabulary_size(decoder)
    suppressed = arguments.check_vocabulary_ids(
        size, end_token_id, pad_token_id, suppressed_token_ids
    )
    getattr(decoder, "check_max_length", arguments.check_max_length)(max_length)
    prepared = prepare_prompt(
        prompt, max_length, pad_token_id, prompt_lengths, input_vocabulary_size(decoder)
    )
    tokens, _, _, first, width = prepared
    logits, state = prefill(decoder, tokens, width, first, max_length, inputs)
    if size is None:  # a decoder object of unknown vocabulary: its logits tell
        arguments.check_vocabulary_ids(
            logits.shape[-1], end_token_id, pad_token_id, suppressed_token_ids
        )
    return decoder, suppressed, prepared, logits, state


def token_loop(
    model,
    prompt,
    max_length,
    choose,
    end_token_id,
    pad_token_id,
    prompt_lengths,
    inputs,
    suppressed_token_ids=None,
):
    """The loop of greedy search and sampling.

    Args:
        choose: `choose(logits (B, V) float32, position int32 scalar) ->
            (B,) int` token chosen for `position`; the suppressed ids'
            logits are already `-inf`.
        (others: see `greedy_search`.)

    Returns:
        (B, max_length) int32 tokens.
    """
    decoder, suppressed, (tokens, _, prompt_mask, first, _), logits, state = start_search(
        model,
        prompt,
        max_length,
        end_token_id,
        pad_token_id,
        prompt_lengths,
        inputs,
        suppressed_token_ids,
    )
    suppress = suppressor(suppressed, logits.shape[-1])
    pad = ops.cast(pad_token_id, "int32")
    finished = ops.zeros_like(prompt_mask[:, 0])

    def cond(index, tokens, finished, logits, state):
        return ops.logical_and(ops.less(index, max_length), ops.logical_not(ops.all(finished)))

    def body(index, tokens, finished, logits, state):
        chosen = ops.cast(choose(suppress(logits), index), "int32")
        forced = ops.take(prompt_mask, index, axis=1)
        next_token = ops.where(
            forced, ops.take(tokens, index, axis=1), ops.where(finished, pad, chosen)
        )
        tokens = ops.slice_update(tokens, (0, index), next_token[:, None])
        if end_token_id is not None:
            ended = ops.logical_and(ops.logical_not(forced), ops.equal(next_token, end_token_id))
            finished = ops.logical_or(finished, ended)
        step_logits, state = decoder(next_token[:, None], index, state)
        return index + 1, tokens, finished, ops.cast(step_logits[:, 0], "float32"), state

    _, tokens, _, _, _ = ops.while_loop(
        cond, body, (first, tokens, finished, logits, state), maximum_iterations=max_length
    )
    return tokens


def suppressor(suppressed, vocabulary_size):
    """The function giving the suppressed ids probability zero.

    Args:
        suppressed: checked ids (`arguments.check_vocabulary_ids`).
        vocabulary_size: V, static (the logits' last axis).

    Returns:
        `suppress(logits (..., V)) -> logits` with `-inf` at the suppressed
        ids (the identity when there are none).
    """
    if not suppressed:
        return lambda logits: logits

    def suppress(logits):
        if vocabulary_size is not None:
            # A small (V,) constant: one `where` per step.
            blocked = np.zeros((vocabulary_size,), bool)
            blocked[list(suppressed)] = True
        else:
            ids = ops.arange(ops.shape(logits)[-1], dtype="int32")[:, None]
            blocked = ops.any(ops.equal(ids, np.array(suppressed, "int32")[None, :]), axis=1)
        return ops.where(blocked, float("-inf"), logits)

    return suppress
