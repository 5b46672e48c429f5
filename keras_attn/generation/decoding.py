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

from keras_attn import checks


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
        "Expected a functional `keras.Model` or a decoder object "
        "(`CachedDecoder`, `RecomputingDecoder`, or one with `initial_state`, "
        f"`__call__`, `repeat_state`, `reorder_state`). Received: {model!r}."
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


def check_token_ids(end_token_id, pad_token_id, vocabulary_size):
    """Refuses an end or padding id outside the vocabulary [0, V) (see
    `checks.check_token_id`); nothing is checked while V is None."""
    checks.check_token_id("end_token_id", end_token_id, vocabulary_size)
    checks.check_token_id("pad_token_id", pad_token_id, vocabulary_size)


def prepare_prompt(prompt, max_length, pad_token_id, prompt_lengths, input_vocabulary_size=None):
    """Validates and lays out a right-padded prompt.

    Args:
        prompt: (B, P) int token ids, right-padded with `pad_token_id`.
        max_length: L >= P, static int.
        pad_token_id: int.
        prompt_lengths: optional (B,) int; defaults to the number of
            non-pad tokens of each row.
        input_vocabulary_size: the number of ids the token input takes,
            when known (`input_vocabulary_size`): the ids the model reads
            (each row's tokens within its length) must lie in [0, it), and
            be >= 0 in any case; checked now when the prompt is known, else
            inside the graph (see `checks.check_prompt_ids`).

    Returns:
        `(tokens, lengths, prompt_mask, start, width)`: tokens (B, L) int32
        (the prompt, pad after each row's length), lengths (B,) int32 in
        [1, P], prompt_mask (B, L) bool (True inside the prompt), start =
        min(lengths) int32 scalar (first position generated for some row),
        width = P (int).

    Raises:
        ValueError: if the prompt is not a rank-2 integer tensor of static
            width 1 <= P <= max_length, its batch size is 0 (a batch known
            only at run time is checked in the graph, once per call),
            `prompt_lengths` is not (B,) integers in [0, P] (values checked
            when known), or it holds negative ids or ids not below
            `input_vocabulary_size` (see `checks.check_prompt_ids`).
    """
    checks.check_max_length(
        max_length, "the total length of the returned sequences (prompt included), a static shape"
    )
    if not hasattr(prompt, "dtype") or not hasattr(prompt, "shape"):
        try:
            prompt = ops.convert_to_tensor(prompt)
        except (ValueError, TypeError) as error:  # None, ragged lists
            raise ValueError(
                "`prompt` must be integer token ids of shape (batch, prompt_length), "
                "right-padded with pad_token_id (rows of one length). Received: "
                f"{prompt!r:.80} ({type(error).__name__}: {error})"
            ) from None
    dtype = keras.backend.standardize_dtype(prompt.dtype)
    if "int" not in dtype or len(prompt.shape) != 2:
        raise ValueError(
            "`prompt` must be integer token ids of shape (batch, prompt_length), "
            f"right-padded with pad_token_id. Received dtype {dtype} and shape "
            f"{tuple(prompt.shape)}."
        )
    width = prompt.shape[1]
    if width is None or width < 1 or width > max_length:
        raise ValueError(
            "The prompt's width must be static and in [1, max_length]: pad "
            "prompts to a fixed width (and pass `prompt_lengths`), with at "
            "least one (start) token per row. Received: prompt.shape="
            f"{tuple(prompt.shape)}, max_length={max_length}."
        )
    prompt = checks.check_batch_not_empty("prompt", checks.check_int32_ids("prompt", prompt))
    if prompt_lengths is None:
        lengths = ops.sum(ops.cast(ops.not_equal(prompt, pad_token_id), "int32"), axis=1)
    else:
        _check_prompt_lengths(prompt_lengths, prompt, width)
        lengths = ops.cast(ops.reshape(prompt_lengths, (-1,)), "int32")
    # A row needs one token to predict from: an empty row starts from its
    # first (pad) token.
    lengths = ops.clip(lengths, 1, width)
    tokens = prompt
    if width < max_length:
        tokens = ops.pad(prompt, [[0, 0], [0, max_length - width]], constant_values=pad_token_id)
    prompt_mask = ops.less(ops.arange(max_length, dtype="int32")[None, :], lengths[:, None])
    tokens = ops.where(prompt_mask, tokens, ops.cast(pad_token_id, "int32"))
    tokens = checks.check_prompt_ids(tokens, input_vocabulary_size, width)
    return tokens, lengths, prompt_mask, ops.min(lengths), width


def _check_prompt_lengths(prompt_lengths, prompt, width):
    """Integer (B,) lengths in [0, P] (0: the row starts from its first
    token); their values are checked when known (eagerly), else clipped."""
    if not hasattr(prompt_lengths, "dtype"):
        prompt_lengths = np.asarray(prompt_lengths)
    dtype = keras.backend.standardize_dtype(prompt_lengths.dtype)
    batch = prompt.shape[0]
    shape = tuple(prompt_lengths.shape)
    if "int" not in dtype or len(shape) != 1 or (
        None not in (batch, shape[0]) and shape[0] != batch
    ):
        raise ValueError(
            "`prompt_lengths` must be integers of shape (batch,), one length "
            f"per prompt row. Received dtype {dtype} and shape {shape} for a "
            f"prompt of shape {tuple(prompt.shape)}."
        )
    known = checks.known_value(prompt_lengths)
    if known is not None and ((known < 0) | (known > width)).any():
        raise ValueError(
            f"`prompt_lengths` must be in [0, {width}] (the prompt's width). "
            f"Received: prompt_lengths={known.tolist()}."
        )


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
            logits, state = step(decoder, token, index, state)
            return index + 1, logits, state

        _, logits, last = ops.while_loop(
            lambda index, logits, state: ops.less(index, start), body,
            (ops.ones((), "int32"), logits, first), maximum_iterations=width - 1,
        )
        return logits, last

    if width == 1 or getattr(decoder, "keeps_every_position", True):
        logits, state = whole_prompt()
    else:
        logits, state = ops.cond(ops.equal(start, width), whole_prompt, position_by_position)
    return ops.cast(logits[:, 0], "float32"), state


def step(decoder, tokens, index, state):
    """One decoding step of a generation loop: `decoder(tokens, index,
    state)` without the layers' run-time checks (`checks.checked_by_caller`).

    The loop makes every argument of the step itself: `index` stays below
    the `max_length` the caches were made for, the tokens and the state
    keep the batch they were made with, and the prompt, the caches and the
    model's own inputs (an encoder output, its padding mask) went through
    the layers' checks once in the prefill. Checking them again at every
    position cost a served (non-XLA) step a dozen assertions.

    Args:
        decoder: a decoder object (see `as_decoder`).
        tokens: (B, 1) int32, the tokens of position `index`.
        index: int32 scalar, their position.
        state: the decoder's state.

    Returns:
        `(logits (B, 1, V), state)`, as the decoder returns them.
    """
    with checks.checked_by_caller():
        return decoder(tokens, index, state)


def checked_prefill(decoder, prompt, max_length, end_token_id, pad_token_id, prompt_lengths, inputs):
    """The start of every search: the end and padding ids checked against
    the vocabulary (before the prefill when the decoder tells its size, else
    from the prefill's logits), the prompt laid out and its ids checked
    (`prepare_prompt`), then the prefill (where the decoder's
    `initial_state` checks the model's other inputs, see
    `Decoder._other_inputs`).

    Returns:
        `(prepare_prompt's tuple, logits, state)`, as `prefill` returns them.

    Raises:
        ValueError: see `check_token_ids`, `prepare_prompt` and the
            decoder's `initial_state`.
    """
    size = vocabulary_size(decoder)
    check_token_ids(end_token_id, pad_token_id, size)
    if hasattr(decoder, "check_max_length"):  # before the prompt is padded to it
        decoder.check_max_length(max_length)
    prepared = prepare_prompt(
        prompt, max_length, pad_token_id, prompt_lengths, input_vocabulary_size(decoder)
    )
    tokens, _, _, start, width = prepared
    logits, state = prefill(decoder, tokens, width, start, max_length, inputs)
    if size is None:  # a decoder object of unknown vocabulary: its logits tell
        check_token_ids(end_token_id, pad_token_id, logits.shape[-1])
    return prepared, logits, state

def token_loop(decoder, prompt, max_length, choose, end_token_id, pad_token_id,
               prompt_lengths, inputs, suppressed_token_ids=None):
    """The loop of greedy search and sampling.

    Args:
        choose: `choose(logits (B, V) float32, position int32 scalar) ->
            (B,) int` token chosen for `position`; the suppressed ids'
            logits are already `-inf`.
        (others: see `greedy_search`.)

    Returns:
        (B, max_length) int32 tokens.
    """
    decoder = as_decoder(decoder)
    suppressed = checks.check_suppressed_token_ids(suppressed_token_ids, end_token_id)
    (tokens, _, prompt_mask, start, width), logits, state = checked_prefill(
        decoder, prompt, max_length, end_token_id, pad_token_id, prompt_lengths, inputs
    )
    suppress = suppressor(suppressed, logits.shape[-1])
    pad = ops.cast(pad_token_id, "int32")
    finished = ops.zeros_like(prompt_mask[:, 0])

    def cond(index, tokens, finished, logits, state):
        return ops.logical_and(
            ops.less(index, max_length), ops.logical_not(ops.all(finished))
        )

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
        step_logits, state = step(decoder, next_token[:, None], index, state)
        return index + 1, tokens, finished, ops.cast(step_logits[:, 0], "float32"), state

    _, tokens, _, _, _ = ops.while_loop(
        cond, body, (start, tokens, finished, logits, state), maximum_iterations=max_length
    )
    return tokens


def suppressor(suppressed, vocabulary_size):
    """The function giving the suppressed ids probability zero.

    Args:
        suppressed: ids from `checks.check_suppressed_token_ids`.
        vocabulary_size: V, static (the logits' last axis).

    Returns:
        `suppress(logits (..., V)) -> logits` with `-inf` at the suppressed
        ids (the identity when there are none).

    Raises:
        ValueError: if the ids do not fit the vocabulary (see
            `checks.check_suppressed_token_ids`).
    """
    if not suppressed:
        return lambda logits: logits
    checks.check_suppressed_token_ids(suppressed, vocabulary_size=vocabulary_size)

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
