"""What the decoding strategies share: the decoder argument, the right-padded prompt layout,
the prefill and the token loop of greedy search and sampling (docs/guides/decoding.md)."""

import keras
import numpy as np
from keras import ops

from keras_attn.generation import arguments
from keras_attn.layers.position_writes import write_positions


def as_decoder(model):
    """`model` as a decoder: `CachedDecoder` for a `keras.Model`, a decoder object as it is."""
    from keras_attn.generation.cached_decoder import CachedDecoder

    if isinstance(model, keras.Model):
        return CachedDecoder(model)
    protocol = ("initial_state", "repeat_state", "reorder_state")
    if callable(model) and all(hasattr(model, name) for name in protocol):
        return model
    raise ValueError(
        "Expected a functional `keras.Model` or a decoder object (see `Decoder`). "
        f"Received: {model!r:.80}."
    )


def input_vocabulary_size(decoder):
    """The number of ids the decoder's token input takes when an embedding reading it says so
    (it can exceed V: an Image Transformer embeds its start token too), else None."""
    embedding_bound = getattr(decoder, "_embedding_bound", None)
    bound = None if embedding_bound is None else embedding_bound(decoder.token_input)
    return None if bound is None else bound[0]


def prepare_prompt(prompt, max_length, pad_token_id, prompt_lengths, input_vocabulary_size=None):
    """Checks and lays out a right-padded prompt.

    Args:
        prompt: (B, P) int token ids, right-padded with `pad_token_id`.
        max_length: L >= P, static int (checked).
        pad_token_id: int.
        prompt_lengths: optional (B,) int; defaults to the non-pad count of each row.
        input_vocabulary_size: the ids the token input takes, when known.

    Returns:
        `(tokens, lengths, prompt_mask, start, width)`: tokens (B, L) int32, lengths (B,) int32
        in [1, P], prompt_mask (B, L) bool, start = min(lengths) int32 scalar, width = P.
    """
    prompt = arguments.check_prompt(prompt, max_length)
    width = prompt.shape[1]
    if prompt_lengths is None:
        lengths = ops.sum(ops.cast(ops.not_equal(prompt, pad_token_id), "int32"), axis=1)
    else:
        arguments.check_prompt_lengths(prompt_lengths, prompt)
        lengths = ops.cast(ops.reshape(prompt_lengths, (-1,)), "int32")
    # A row needs one token to predict from: an empty row starts from its first (pad) token.
    lengths = ops.clip(lengths, 1, width)
    prompt_mask = ops.less(ops.arange(max_length, dtype="int32")[None, :], lengths[:, None])
    prompt = ops.where(prompt_mask[:, :width], prompt, ops.cast(pad_token_id, "int32"))
    size = input_vocabulary_size
    ids = f"in [0, {size}), the ids the model embeds" if size else ">= 0"
    prompt = arguments.check_ids(prompt, 0, size or 2**31, f"`prompt` must hold token ids {ids}.")
    tokens = ops.pad(prompt, [[0, 0], [0, max_length - width]], constant_values=pad_token_id)
    return tokens, lengths, prompt_mask, ops.min(lengths), width


def prefill(decoder, tokens, width, start, max_length, inputs):
    """Runs the prompt through the caches: the whole width P in one pass, or, for a decoder
    that cannot write a position twice and unequal prompts, [0, start) one at a time.

    Returns:
        `(logits, state)`: logits (B, V) float32 predicting position `start`, the state.
    """
    state = decoder.initial_state(ops.shape(tokens)[0], max_length, inputs)

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
    """The start of every search, where the arguments all strategies share are checked, once:
    the decoder, the ids against the vocabulary, `max_length` (before the prompt is padded to
    it), the prompt, the model's other inputs (in the prefill).

    Returns:
        `(decoder, suppressed ids, prepare_prompt's tuple, logits, state)`, as `prefill`'s.
    """
    decoder = as_decoder(model)
    size = getattr(decoder, "vocabulary_size", None)  # V, when known before the decoder runs
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


def token_loop(choose, model, prompt, max_length, end_token_id, pad_token_id, *others):
    """The loop of greedy search and sampling: (B, max_length) int32 tokens.

    `choose(logits (B, V) float32, position int32 scalar) -> (B,) int` picks the token of
    `position`, the suppressed ids' logits already `-inf`; the others as `start_search`'s.
    """
    search = start_search(model, prompt, max_length, end_token_id, pad_token_id, *others)
    decoder, suppressed, (tokens, _, prompt_mask, first, _), logits, state = search
    suppress = suppressor(suppressed, logits.shape[-1])
    finished = ops.zeros_like(prompt_mask[:, 0])

    def cond(index, tokens, finished, logits, state):
        return ops.logical_and(ops.less(index, max_length), ops.logical_not(ops.all(finished)))

    def body(index, tokens, finished, logits, state):
        chosen = choose(suppress(logits), index)
        next_token, finished = place_token(
            chosen, index, tokens, prompt_mask, finished, end_token_id, pad_token_id
        )
        tokens = write_positions(tokens, next_token[:, None], index, axis=1)
        step_logits, state = decoder(next_token[:, None], index, state)
        return index + 1, tokens, finished, ops.cast(step_logits[:, 0], "float32"), state

    _, tokens, _, _, _ = ops.while_loop(
        cond, body, (first, tokens, finished, logits, state), maximum_iterations=max_length
    )
    return tokens


def place_token(chosen, position, tokens, prompt_mask, finished, end_token_id, pad_token_id):
    """The token of `position` once chosen: the prompt's own token where the prompt reaches
    `position`, padding in a finished row, else `chosen`; a row finishes on choosing the end id.

    The one rule of the token loop, also run by the exported streaming step (keras.ops only).

    Args:
        chosen: (B,) int, the strategy's pick.
        position: int32 scalar.
        tokens: (B, L) int32 and prompt_mask: (B, L) bool, as `prepare_prompt` lays them out.
        finished: (B,) bool, the rows that ended before `position`.
        end_token_id: int or None (rows never end).
        pad_token_id: int.

    Returns:
        `(token (B,) int32, finished (B,) bool)`.

    Example:
    >>> from keras import ops
    >>> from keras_attn.generation.decoding import place_token
    >>> tokens = ops.array([[5, 6, 0], [5, 0, 0], [5, 0, 0]], "int32")
    >>> mask = ops.array([[True, True, False], [True, False, False], [True, False, False]])
    >>> token, finished = place_token(ops.array([2, 2, 9]), 1, tokens, mask,
    ...                               ops.array([False, False, True]), 2, 0)
    >>> ops.convert_to_numpy(token).tolist(), ops.convert_to_numpy(finished).tolist()
    ([6, 2, 0], [False, True, True])
    """
    forced = ops.take(prompt_mask, position, axis=1)
    pad = ops.cast(pad_token_id, "int32")
    chosen = ops.where(finished, pad, ops.cast(chosen, "int32"))
    token = ops.where(forced, ops.take(tokens, position, axis=1), chosen)
    if end_token_id is not None:
        ended = ops.logical_and(ops.logical_not(forced), ops.equal(token, end_token_id))
        finished = ops.logical_or(finished, ended)
    return token, finished


def suppressor(suppressed, vocabulary_size):
    """`suppress(logits (..., V)) -> logits` with `-inf` at the `suppressed` (checked) ids."""
    if not suppressed:
        return lambda logits: logits
    blocked = np.zeros((vocabulary_size,), bool)  # a small (V,) constant: one `where` per step
    blocked[list(suppressed)] = True
    return lambda logits: ops.where(blocked, float("-inf"), logits)
