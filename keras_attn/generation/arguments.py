"""The generation functions' argument checks: what `greedy_search`, `sample`
and `beam_search` check at their top (values known at call time), and the
prompt and model inputs, checked once in the prefill (a traced value once
when the graph runs: TensorFlow `InvalidArgumentError`, not under XLA,
which has no assertion; JAX `JaxRuntimeError` wrapping the ValueError)."""

import math
import numbers

import keras
import numpy as np
from keras import ops

from keras_attn import checks

# The largest length penalty kept: scores log P / lp stay distinct float32
# numbers (a penalty of 1e31 or more sent them to -0.0 or NaN).
_MAX_LOG_PENALTY = math.log(1e30)


def check_max_length(max_length):
    """Refuses a `max_length` that is not a positive Python int."""
    if isinstance(max_length, bool) or not isinstance(max_length, int) or max_length < 1:
        raise ValueError(
            "`max_length` must be a positive Python int: the length of the sequences "
            f"generated (prompt included), a static shape. Received: max_length={max_length!r}."
        )


def check_vocabulary_ids(vocabulary_size, end_token_id, pad_token_id, suppressed_token_ids):
    """Refuses an end id (or None) or padding id that is not an int in [0, V),
    V the width of the logits (None: not known yet), and suppressed ids that
    do not fit it; returns the suppressed ids, a sorted tuple."""
    for name, value in (("end_token_id", end_token_id), ("pad_token_id", pad_token_id)):
        known = checks.static_int(value)
        if (value is not None or name == "pad_token_id") and (
            isinstance(value, bool) or known is None or not 0 <= known < (vocabulary_size or math.inf)
        ):
            raise ValueError(
                f"`{name}` must be a token id, an int in [0, {vocabulary_size or 'V'}) (V: the width "
                f"of the model's logits){', or None' if name == 'end_token_id' else ''}. "
                f"Received: {name}={value!r}."
            )
    return checks.check_suppressed_token_ids(suppressed_token_ids, end_token_id, vocabulary_size)


def check_seed(seed):
    """Refuses a seed other than an int of 64 bits or an int tensor of shape
    (), (1,) or (2,) (a float would be truncated, a larger int wrapped)."""
    if isinstance(seed, numbers.Integral) and not isinstance(seed, bool):
        if -(2**63) <= seed < 2**64:
            return
        received = "int"
    else:
        try:
            array = seed if hasattr(seed, "shape") else np.asarray(seed)
            dtype = keras.backend.standardize_dtype(array.dtype)
            received = f"dtype {dtype}, shape {tuple(array.shape)}"
        except (ValueError, TypeError):
            dtype, received = "", type(seed).__name__
        if "int" in dtype and tuple(array.shape) in ((), (1,), (2,)):
            return
    raise ValueError(
        "`seed` must be an int that fits 64 bits (-2**63 to 2**64 - 1), or an int tensor of "
        "shape () or (2,): the same seed draws the same tokens. Pass e.g. seed=42. "
        f"Received: seed={seed!r:.80} ({received})."
    )


def check_length_penalty(alpha, max_length):
    """Refuses an `alpha` whose penalty at `max_length` leaves float32 (after
    `checks.check_beam_arguments`)."""
    largest = alpha * math.log((5.0 + max_length) / 6.0)
    if largest > _MAX_LOG_PENALTY:
        raise ValueError(
            "`length_penalty_alpha` is too large for float32 scores: the penalty "
            f"((5 + |Y|) / 6) ** alpha reaches e^{largest:.3g} at max_length={max_length}, and "
            "log P / lp then loses every difference between beams. Use at most "
            f"{_MAX_LOG_PENALTY / math.log((5.0 + max_length) / 6.0):.3g} here (0.6 in "
            f"Vaswani et al. 2017). Received: length_penalty_alpha={alpha!r}."
        )


def check_prompt(prompt, max_length):
    """The prompt as an int32 tensor, refused unless integer ids (B, P) that
    fit int32, of a static width 1 <= P <= max_length, with B > 0."""
    try:
        prompt = prompt if hasattr(prompt, "shape") else ops.convert_to_tensor(prompt)
        dtype, shape = keras.backend.standardize_dtype(prompt.dtype), tuple(prompt.shape)
    except (ValueError, TypeError):  # None, ragged lists
        dtype, shape = type(prompt).__name__, None
    if "int" not in dtype or len(shape or ()) != 2 or not 1 <= (shape[1] or 0) <= max_length:
        raise ValueError(
            "`prompt` must be integer token ids of shape (batch, prompt_length), right-padded "
            "with pad_token_id to a static width in [1, max_length] (pass `prompt_lengths` for "
            f"rows of other lengths). Received: {prompt!r:.80} (dtype {dtype}, shape {shape}), "
            f"max_length={max_length}."
        )
    prompt = check_ids(prompt, -(2**31), 2**31, "`prompt` must hold ids that fit int32, the "
                       "dtype the model reads them in (a cast would wrap larger ones).")
    return checks.check_batch_not_empty("prompt", ops.cast(prompt, "int32"))


def check_prompt_lengths(prompt_lengths, prompt):
    """Refuses `prompt_lengths` other than (B,) integers in [0, P] (their
    values when known)."""
    lengths = prompt_lengths if hasattr(prompt_lengths, "dtype") else np.asarray(prompt_lengths)
    dtype, shape = keras.backend.standardize_dtype(lengths.dtype), tuple(lengths.shape)
    known, (batch, width) = checks.known_value(lengths), prompt.shape
    if (
        "int" not in dtype or len(shape) != 1 or None not in (batch, shape[0]) and shape[0] != batch
        or known is not None and ((known < 0) | (known > width)).any()
    ):
        raise ValueError(
            f"`prompt_lengths` must be integers in [0, {width}] (the prompt's width) of shape "
            f"(batch,), one per prompt row. Received: prompt_lengths="
            f"{prompt_lengths if known is None else known.tolist()!r:.80} "
            f"(dtype {dtype}, shape {shape}) for a prompt of shape {tuple(prompt.shape)}."
        )


def check_ids(ids, low, high, requirement):
    """`ids` (an integer tensor), refused unless in [low, high) (None: no
    bound): now when known, else once when the graph runs. Bounds the
    dtype's range guarantees are not checked."""
    bounds = np.iinfo(keras.backend.standardize_dtype(ids.dtype))
    low = bounds.min if low is None else max(low, bounds.min)
    top = bounds.max if high is None else min(high - 1, bounds.max)
    if (low, top) == (bounds.min, bounds.max) or 0 in tuple(ids.shape):
        return ids
    known = checks.known_value(ids)
    if known is not None:
        if known.size and (known.min() < low or known.max() > top):
            raise ValueError(f"{requirement} Received: ids from {known.min()} to {known.max()}.")
        return ids
    lowest, highest = ops.min(ids), ops.max(ids)
    return checks.check_in_graph(
        ops.logical_and(lowest >= int(low), highest <= int(top)),
        [f"{requirement} Received: ids from ", lowest, " to ", highest, "."], ids,
    )
