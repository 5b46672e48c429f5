"""The generation functions' argument checks: what `greedy_search`, `sample`
and `beam_search` check at their top (values known at call time), and the
prompt and model inputs, checked once in the prefill (a traced value once
when the graph runs: TensorFlow `InvalidArgumentError`, not under XLA,
which has no assertion; JAX `JaxRuntimeError` wrapping the ValueError).
No quote marks in the in-graph messages: TensorFlow escapes them."""

import math
import numbers

import keras
import numpy as np
from keras import ops

from keras_attn import checks

# The largest length penalty kept: scores log P / lp stay distinct float32
# numbers (a penalty of 1e31 or more sent them to -0.0 or NaN).
_MAX_LOG_PENALTY = math.log(1e30)

TEMPERATURE_REQUIREMENT = (
    "`temperature` must be a finite number > 0 (1 = sample the predicted distribution as is, "
    "< 1 sharpens it, > 1 flattens it)."
)
TOP_K_REQUIREMENT = (
    "`top_k` must be a positive int (the number of most likely tokens kept), or None for no "
    "top-k filter."
)
TENSOR_TOP_K_REQUIREMENT = (
    "`top_k` must be >= 0 when given as a tensor (k most likely tokens kept; 0 = no top-k filter)."
)
TOP_P_REQUIREMENT = "`top_p` must be in (0, 1] (the nucleus mass kept; 1 = no nucleus filter)."
_CONTROLS = {  # name: (requirement, dtype, is_valid written with operators a tensor takes too)
    "temperature": (TEMPERATURE_REQUIREMENT, "float32", lambda t: (t > 0.0) & (t < math.inf)),
    "top_k": (TENSOR_TOP_K_REQUIREMENT, "int32", lambda k: k >= 0),
    "top_p": (TOP_P_REQUIREMENT, "float32", lambda p: (p > 0.0) & (p <= 1.0)),  # NaN fails
}


def check_in_graph(condition, message, value):
    """`value`, failing when the graph runs where `condition` is False; `message` is
    a string or a list of strings and scalar tensors (shown at run time)."""
    pieces = [message] if isinstance(message, str) else list(message)
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        with tf.control_dependencies([tf.debugging.Assert(condition, pieces, summarize=16)]):
            return tf.identity(value)
    if keras.backend.backend() == "jax":
        import jax

        def fail_unless(ok, *received):
            if not np.all(ok):
                received = iter(received)
                raise ValueError(
                    "".join(
                        p if isinstance(p, str) else repr(np.asarray(next(received)).tolist())
                        for p in pieces
                    )
                )

        jax.debug.callback(fail_unless, condition, *(p for p in pieces if not isinstance(p, str)))
    return value


def check_control(name, value, in_graph=True):
    """A sampling control (`temperature`, `top_k` or `top_p`), refused unless valid: now
    when known, else (`in_graph`) once when the graph runs. A Python `top_k` is > 0."""
    requirement, dtype, is_valid = _CONTROLS[name]
    if not hasattr(value, "dtype") or isinstance(value, (numbers.Number, np.generic)):
        if name == "top_k":
            requirement, is_valid = TOP_K_REQUIREMENT, lambda k: checks.is_int(k, 1)
        if not (checks.is_number(value) and is_valid(value)):
            raise ValueError(f"{requirement} Received: {name}={value!r}.")
        return value
    kind, integer = keras.backend.standardize_dtype(value.dtype), dtype == "int32"
    if len(value.shape) or "int" not in kind and (integer or "float" not in kind):
        wanted = "an integer" if integer else "a number"
        raise ValueError(
            f"A tensor `{name}` must be {wanted} scalar (rank 0). Received dtype "
            f"{kind}, shape {tuple(value.shape)}."
        )
    known = checks.known_value(value)
    if known is not None and not is_valid(known.astype(dtype)):
        raise ValueError(f"{requirement} Received: {name}={known.item()!r}.")
    if known is not None or not in_graph:
        return value
    return check_in_graph(
        is_valid(ops.cast(value, dtype)), [f"{requirement} Received: {name}=", value, "."], value
    )


def check_max_length(max_length):
    """Refuses a `max_length` that is not a positive Python int."""
    checks.require(
        isinstance(max_length, int) and checks.is_int(max_length, 1),
        "max_length",
        max_length,
        "a positive Python int: the length of the sequences generated "
        "(prompt included), a static shape",
    )


def check_vocabulary_ids(vocabulary_size, end_token_id, pad_token_id, suppressed_token_ids):
    """Refuses an end id (or None) or padding id outside [0, V), V the width of the
    logits (None: not known yet); returns the checked suppressed ids."""
    for name, value in (("end_token_id", end_token_id), ("pad_token_id", pad_token_id)):
        known = checks.static_int(value)
        checks.require(
            value is None
            and name == "end_token_id"
            or not isinstance(value, bool)
            and known is not None
            and 0 <= known < (vocabulary_size or math.inf),
            name,
            value,
            f"a token id, an int in [0, {vocabulary_size or 'V'}) (V: the width of the model's "
            f"logits){', or None' if name == 'end_token_id' else ''}",
        )
    return check_suppressed_token_ids(suppressed_token_ids, end_token_id, vocabulary_size)


def check_suppressed_token_ids(suppressed_token_ids, end_token_id=None, vocabulary_size=None):
    """The ids never generated, a sorted tuple (empty for None), refused unless ids of
    [0, V) that leave one to generate, without the end id."""
    if suppressed_token_ids is None:
        return ()
    given = suppressed_token_ids
    try:
        ids = {None} if isinstance(given, (str, bytes)) else set(given)
    except TypeError:  # not iterable, or unhashable items
        ids = {None}
    size = vocabulary_size or math.inf
    checks.require(
        all(checks.is_int(i, 0, size - 1) for i in ids) and len(ids) < size,
        "suppressed_token_ids",
        suppressed_token_ids,
        f"ids of the model's vocabulary [0, {vocabulary_size or 'V'}) that leave one "
        "to generate (e.g. padding and start: ids the model never generates), a list "
        "of ints, or None",
    )
    if checks.static_int(end_token_id) in ids:
        raise ValueError(
            "`end_token_id` cannot be suppressed: rows could never end. Remove it from "
            f"`suppressed_token_ids`. Received: end_token_id={end_token_id}, "
            f"suppressed_token_ids={suppressed_token_ids!r}."
        )
    return tuple(sorted(int(i) for i in ids))


def check_beam_arguments(num_beams, length_penalty_alpha, max_length=None):
    """Refuses a `num_beams` that is not a positive int, and a `length_penalty_alpha` that
    is not a finite number >= 0 or whose penalty at `max_length` leaves float32."""
    checks.require(
        isinstance(num_beams, int) and checks.is_int(num_beams, 1),
        "num_beams",
        num_beams,
        "a positive int",
    )
    alpha = length_penalty_alpha
    checks.require(
        checks.is_number(alpha, 0) and math.isfinite(alpha),
        "length_penalty_alpha",
        alpha,
        "a number >= 0 and finite (0.6 in Vaswani et al. 2017; 0 = rank by log-probability alone)",
    )
    if not checks.is_int(max_length, 1):
        return  # at export, or refused by `check_max_length`
    largest = alpha * math.log((5.0 + max_length) / 6.0)
    if largest > _MAX_LOG_PENALTY:
        raise ValueError(
            "`length_penalty_alpha` is too large for float32 scores: the penalty "
            f"((5 + |Y|) / 6) ** alpha reaches e^{largest:.3g} at max_length={max_length}, and "
            "log P / lp then loses every difference between beams. Use at most "
            f"{_MAX_LOG_PENALTY / math.log((5.0 + max_length) / 6.0):.3g} here (0.6 in "
            f"Vaswani et al. 2017). Received: length_penalty_alpha={alpha!r}."
        )


SEED_REQUIREMENT = (
    "`seed` must be an int that fits 64 bits (-2**63 to 2**64 - 1), or an int tensor of shape () "
    "or (2,): the same seed draws the same tokens; or one seed per row, an int tensor of shape "
    "(B, 1) or (B, 2) for a prompt of B rows."
)


def check_seed(seed):
    """Refuses a seed other than an int of 64 bits or an int tensor of shape
    (), (1,), (2,), (R, 1) or (R, 2) (a float would be truncated, a larger int
    wrapped); the rows of a per-row seed are checked by `check_seed_rows`."""
    if checks.is_int(seed, -(2**63), 2**64 - 1):
        return
    received = "int"
    if not checks.is_int(seed):
        try:
            array = seed if hasattr(seed, "shape") else np.asarray(seed)
            dtype = keras.backend.standardize_dtype(array.dtype)
            shape = tuple(array.shape)
            received = f"dtype {dtype}, shape {shape}"
        except (ValueError, TypeError):
            dtype, shape, received = "", None, type(seed).__name__
        if "int" in dtype and (shape in ((), (1,), (2,)) or len(shape) == 2 and shape[1] in (1, 2)):
            return
    raise ValueError(
        f"{SEED_REQUIREMENT} Pass e.g. seed=42. Received: seed={seed!r:.80} ({received})."
    )


def check_seed_rows(key, prompt):
    """`key` (the (R, 2) words of a checked seed), refused unless R is 1 (one
    seed for the batch) or the prompt's rows B (one seed per row): now when
    both are known, else once when the graph runs. A prompt without a shape
    is left to `check_prompt`."""
    rows = key.shape[0]
    try:
        batch = prompt.shape[0] if hasattr(prompt, "shape") else np.shape(prompt)[0]
    except (ValueError, TypeError, IndexError):  # ragged, None, a scalar: refused later
        return key
    requirement = f"{SEED_REQUIREMENT} Received: a seed of shape (R, 1) or (R, 2) with R = "
    if rows == 1 or rows is not None and rows == batch:
        return key
    if None not in (rows, batch):
        raise ValueError(f"{requirement}{rows}, for a prompt of {batch} rows.")
    rows, batch = ops.shape(key)[0], ops.shape(prompt)[0]
    return check_in_graph(
        ops.logical_or(ops.equal(rows, 1), ops.equal(rows, batch)),
        [requirement, rows, ", for a prompt of ", batch, " rows."],
        key,
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
    prompt = check_ids(
        prompt,
        -(2**31),
        2**31,
        "`prompt` must hold ids that fit int32, the "
        "dtype the model reads them in (a cast would wrap larger ones).",
    )
    empty = (
        "`prompt` must hold at least one row (batch size >= 1): there is nothing to "
        "generate for an empty batch. Received: prompt.shape="
    )
    if shape[0] == 0:
        raise ValueError(f"{empty}{shape}.")
    prompt = ops.cast(prompt, "int32")
    if shape[0] is not None:
        return prompt
    rows = ops.shape(prompt)[0]
    return check_in_graph(rows > 0, [f"{empty}(", rows, f", {shape[1]})."], prompt)


def check_prompt_lengths(prompt_lengths, prompt):
    """Refuses `prompt_lengths` other than (B,) integers in [0, P] (their
    values when known)."""
    lengths = prompt_lengths if hasattr(prompt_lengths, "dtype") else np.asarray(prompt_lengths)
    dtype, shape = keras.backend.standardize_dtype(lengths.dtype), tuple(lengths.shape)
    known, (batch, width) = checks.known_value(lengths), prompt.shape
    if (
        "int" not in dtype
        or len(shape) != 1
        or None not in (batch, shape[0])
        and shape[0] != batch
        or known is not None
        and ((known < 0) | (known > width)).any()
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
    return check_in_graph(
        ops.logical_and(lowest >= int(low), highest <= int(top)),
        [f"{requirement} Received: ids from ", lowest, " to ", highest, "."],
        ids,
    )


def check_batch_size(name, value, batch_size):
    """A model input, refused unless it has `batch_size` rows (an int or scalar tensor;
    None: a symbolic trace, not checked): now when both are known, else in the graph."""
    requirement = (
        f"The model input {name} must have one row per sequence decoded (the prompt's "
        "rows, or `initial_state`'s batch_size): pass it for the same rows. "
        f"Received: {name} with batch size "
    )
    rows, expected = value.shape[0], checks.static_int(batch_size)
    if None not in (rows, expected) and rows != expected:
        raise ValueError(f"{requirement}{rows}, expected {expected}.")
    if batch_size is None or None not in (rows, expected) or ops.shape(value)[0] is None:
        return value
    rows = ops.shape(value)[0]
    return check_in_graph(
        ops.equal(rows, batch_size), [requirement, rows, ", expected ", batch_size, "."], value
    )
