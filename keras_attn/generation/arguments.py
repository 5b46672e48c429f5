"""The argument checks of `greedy_search`, `sample` and `beam_search`, run once where a value
enters (see docs/guides/decoding.md). Traced values are checked when the graph runs
(`check_in_graph`); its messages hold no quote marks, which TensorFlow escapes."""

import math
import numbers

import keras
import numpy as np
from keras import ops

from keras_attn import checks

# The largest log length penalty kept: scores log P / lp stay distinct float32 numbers.
_MAX_LOG_PENALTY = math.log(1e30)

TEMPERATURE_REQUIREMENT = "`temperature` must be a finite number > 0 (< 1 sharpens, > 1 flattens)."
TOP_K_REQUIREMENT = "`top_k` must be a positive int (the tokens kept), or None for no filter."
TENSOR_TOP_K_REQUIREMENT = "`top_k` must be >= 0 as a tensor (0 = no top-k filter)."
TOP_P_REQUIREMENT = "`top_p` must be in (0, 1] (the nucleus mass kept; 1 = no filter)."
SEED_REQUIREMENT = (
    "`seed` must be an int that fits 64 bits (-2**63 to 2**64 - 1), or an int tensor of shape () "
    "or (2,); or one seed per row, an int tensor of shape (B, 1) or (B, 2) for a prompt of B rows."
)
_CONTROLS = {  # name: (requirement, dtype, is_valid with operators a tensor takes too)
    "temperature": (TEMPERATURE_REQUIREMENT, "float32", lambda t: (t > 0.0) & (t < math.inf)),
    "top_k": (TENSOR_TOP_K_REQUIREMENT, "int32", lambda k: k >= 0),
    "top_p": (TOP_P_REQUIREMENT, "float32", lambda p: (p > 0.0) & (p <= 1.0)),  # NaN fails
}


def check_in_graph(condition, message, value):
    """`value`, refused where `condition` is False: now (a ValueError) when the condition is known,
    else when the graph runs. `message` is a string or a list of strings and scalar tensors."""
    pieces = [message] if isinstance(message, str) else list(message)
    tensors = [p for p in pieces if not isinstance(p, str)]

    def fail_unless(ok, *received):  # `received`: the values of `tensors`
        if not np.all(ok):
            values = (repr(checks.known_value(v).tolist()) for v in received)
            raise ValueError("".join(p if isinstance(p, str) else next(values) for p in pieces))

    known = checks.known_value(condition)
    if known is not None:
        fail_unless(known, *tensors)
        return value
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        with tf.control_dependencies([tf.debugging.Assert(condition, pieces, summarize=16)]):
            return tf.identity(value)
    if keras.backend.backend() == "jax":
        import jax

        jax.debug.callback(fail_unless, condition, *tensors)
    return value


def check_control(name, value, in_graph=True):
    """A sampling control (`temperature`, `top_k`, `top_p`), refused unless valid: now when
    known, else (`in_graph`) when the graph runs. A Python `top_k` is > 0."""
    requirement, dtype, is_valid = _CONTROLS[name]
    if not hasattr(value, "dtype") or isinstance(value, (numbers.Number, np.generic)):
        if name == "top_k":
            requirement, is_valid = TOP_K_REQUIREMENT, lambda k: checks.is_int(k, 1)
        if not (checks.is_number(value) and is_valid(value)):
            raise ValueError(f"{requirement} Received: {name}={value!r}.")
        return value
    kind, integer = keras.backend.standardize_dtype(value.dtype), dtype == "int32"
    if len(value.shape) or "int" not in kind and (integer or "float" not in kind):
        wanted, shape = "an integer" if integer else "a number", tuple(value.shape)
        raise ValueError(f"A tensor `{name}` must be {wanted} scalar. Received: {kind} {shape}.")
    known = checks.known_value(value)  # NumPy's: a device could flush a tiny float to 0
    if known is None and not in_graph:
        return value
    valid = is_valid(ops.cast(value, dtype) if known is None else known.astype(dtype))
    return check_in_graph(valid, [f"{requirement} Received: {name}=", value, "."], value)


def check_max_length(max_length):
    """Refuses a `max_length` that is not a positive Python int (a static shape)."""
    valid = isinstance(max_length, int) and checks.is_int(max_length, 1)
    checks.require(valid, "max_length", max_length, "a positive Python int (a static shape)")


def check_vocabulary_ids(vocabulary_size, end_token_id, pad_token_id, suppressed_token_ids):
    """Refuses an end id (or None) or padding id outside [0, V) (V: the logits' width, None
    while unknown); returns `check_suppressed_token_ids`'s tuple."""
    for name, value in (("end_token_id", end_token_id), ("pad_token_id", pad_token_id)):
        known = None if isinstance(value, bool) else checks.static_int(value)
        valid = known is not None and 0 <= known < (vocabulary_size or math.inf)
        none = ", or None" if name == "end_token_id" else ""
        expected = f"a token id, an int in [0, {vocabulary_size or 'V'}){none}"
        checks.require(valid or none and value is None, name, value, expected)
    return check_suppressed_token_ids(suppressed_token_ids, end_token_id, vocabulary_size)


def check_suppressed_token_ids(suppressed_token_ids, end_token_id=None, vocabulary_size=None):
    """The ids never generated, a sorted tuple (empty for None), refused unless ids of [0, V)
    that leave one to generate, without the end id."""
    if suppressed_token_ids is None:
        return ()
    given, size = suppressed_token_ids, vocabulary_size or math.inf
    try:
        ids = {None} if isinstance(given, (str, bytes)) else set(given)
    except TypeError:  # not iterable, or unhashable items
        ids = {None}
    valid = all(checks.is_int(i, 0, size - 1) for i in ids) and len(ids) < size
    expected = f"ids of the model's vocabulary [0, {vocabulary_size or 'V'}) that leave one to "
    checks.require(
        valid, "suppressed_token_ids", given, expected + "generate, a list of ints, or None"
    )
    if checks.static_int(end_token_id) in ids:
        raise ValueError(
            f"`end_token_id` cannot be suppressed (rows could never end): remove it from "
            f"`suppressed_token_ids`. Received: {end_token_id}, {given!r}."
        )
    return tuple(sorted(int(i) for i in ids))


def check_beam_arguments(num_beams, length_penalty_alpha, max_length=None):
    """Refuses a `num_beams` that is not a positive int, and a `length_penalty_alpha` that is not
    a finite number >= 0 or whose penalty at `max_length` leaves float32."""
    valid = type(num_beams) is int and num_beams >= 1  # not a bool, not a NumPy int
    checks.require(valid, "num_beams", num_beams, "a positive int")
    alpha = length_penalty_alpha
    valid = checks.is_number(alpha, 0) and math.isfinite(alpha)
    checks.require(valid, "length_penalty_alpha", alpha, "a number >= 0 and finite (0.6 usual)")
    if not checks.is_int(max_length, 1):
        return  # at export, or refused by `check_max_length`
    log_length = math.log((5.0 + max_length) / 6.0)
    if alpha * log_length > _MAX_LOG_PENALTY:
        raise ValueError(
            f"`length_penalty_alpha` is too large for float32 scores at max_length={max_length}. "
            f"Use at most {_MAX_LOG_PENALTY / log_length:.3g} here. Received: "
            f"length_penalty_alpha={alpha!r}."
        )


def check_seed(seed):
    """Refuses a seed other than an int of 64 bits or an int tensor of shape (), (1,), (2,),
    (R, 1) or (R, 2) (a float would be truncated, a larger int wrapped)."""
    if checks.is_int(seed, -(2**63), 2**64 - 1):
        return
    dtype, shape = ("int", None) if checks.is_int(seed) else _dtype_and_shape(seed)[1:]
    per_row = shape is not None and len(shape) == 2 and shape[1] in (1, 2)
    if "int" in dtype and (shape in ((), (1,), (2,)) or per_row):
        return
    received = dtype if shape is None else f"dtype {dtype}, shape {shape}"
    raise ValueError(f"{SEED_REQUIREMENT} Received: seed={seed!r:.80} ({received}).")


def check_seed_rows(key, prompt):
    """`key` (a checked seed's (R, 1) words), refused unless R is 1 or the prompt's rows: now
    when both are known, else when the graph runs."""
    try:
        batch = ops.shape(prompt)[0] if hasattr(prompt, "shape") else np.shape(prompt)[0]
    except (ValueError, TypeError, IndexError):  # ragged, None, a scalar: `check_prompt` refuses
        return key
    rows = ops.shape(key)[0]
    valid = ops.logical_or(ops.equal(rows, 1), ops.equal(rows, batch))
    message = f"{SEED_REQUIREMENT} Received: a seed of shape (R, 1) or (R, 2) with R = "
    return check_in_graph(valid, [message, rows, ", for a prompt of ", batch, " rows."], key)


def check_prompt(prompt, max_length):
    """The prompt as an int32 tensor, refused unless integer ids (B, P) that fit int32, of a
    static width 1 <= P <= max_length, with B > 0."""
    prompt, dtype, shape = _dtype_and_shape(prompt, ops.convert_to_tensor)
    if "int" not in dtype or len(shape or ()) != 2 or not 1 <= (shape[1] or 0) <= max_length:
        raise ValueError(
            "`prompt` must be integer token ids of shape (batch, prompt_length), right-padded "
            "with pad_token_id to a static width in [1, max_length]. Received: "
            f"{prompt!r:.80} (dtype {dtype}, shape {shape}), max_length={max_length}."
        )
    prompt = check_ids(prompt, -(2**31), 2**31, "`prompt` must hold ids that fit int32.")
    rows = ops.shape(prompt)[0]
    message = ["`prompt` must hold at least one row. Received: prompt.shape=(", rows]
    return ops.cast(check_in_graph(rows > 0, message + [f", {shape[1]})."], prompt), "int32")


def check_prompt_lengths(prompt_lengths, prompt):
    """Refuses `prompt_lengths` other than (B,) integers in [0, P] (values when known)."""
    lengths = prompt_lengths if hasattr(prompt_lengths, "dtype") else np.asarray(prompt_lengths)
    dtype, shape = keras.backend.standardize_dtype(lengths.dtype), tuple(lengths.shape)
    known, (batch, width) = checks.known_value(lengths), prompt.shape
    rows_differ = len(shape) == 1 and None not in (batch, shape[0]) and shape[0] != batch
    outside = known is not None and ((known < 0) | (known > width)).any()
    if "int" not in dtype or len(shape) != 1 or rows_differ or outside:
        received = prompt_lengths if known is None else known.tolist()
        raise ValueError(
            f"`prompt_lengths` must be integers in [0, {width}] of shape (batch,). Received: "
            f"prompt_lengths={received!r:.80} (dtype {dtype}, shape {shape})."
        )


def _dtype_and_shape(value, convert=np.asarray):
    """`(value as an array, its dtype, its shape)`, or `(value, its type's name, None)` when it
    is no array (None, ragged lists, strings)."""
    try:
        array = value if hasattr(value, "shape") else convert(value)
        return array, keras.backend.standardize_dtype(array.dtype), tuple(array.shape)
    except (ValueError, TypeError):
        return value, type(value).__name__, None


def check_ids(ids, low, high, requirement):
    """`ids` (an integer tensor), refused unless in [low, high): now when known, else when the
    graph runs. Bounds the dtype's range guarantees are not checked."""
    bounds = np.iinfo(keras.backend.standardize_dtype(ids.dtype))
    low, top = max(low, bounds.min), min(high - 1, bounds.max)
    if (low, top) == (bounds.min, bounds.max) or 0 in tuple(ids.shape):
        return ids
    known = checks.known_value(ids)  # NumPy's: a JAX array could wrap int64 ids around
    lowest, highest = (ops.min(ids), ops.max(ids)) if known is None else (known.min(), known.max())
    valid = ops.logical_and(lowest >= low, highest <= top)
    message = [f"{requirement} Received: ids from ", lowest, " to ", highest, "."]
    return check_in_graph(valid, message, ids)


def check_batch_size(name, value, batch_size):
    """A model input, refused unless it has `batch_size` rows (an int or scalar tensor): now when
    both are known, else when the graph runs."""
    rows = ops.shape(value)[0]
    message = f"The model input {name} must have one row per prompt row. Received: {name} with "
    message = [f"{message}batch size ", rows, ", expected ", batch_size, "."]
    return check_in_graph(ops.equal(rows, batch_size), message, value)
