"""Generic argument checks shared across keras_attn: positive ints, sizes,
rates, bools, seeds, image sizes, indices, static shapes and values.

Each raises a ValueError naming the argument, what was received and what is
expected. A check that serves one area lives with it (sampling, beams and
prompts in `generation/arguments.py`, requests in `export/`, MIDI limits in
`preprocessing/`). This module imports nothing from keras_attn.
"""

import math
import numbers
import operator

import keras
import numpy as np


def is_int(value, low=-math.inf, high=math.inf):
    """Whether `value` is an integer (NumPy's too, not a bool) in [low, high]."""
    return (
        isinstance(value, numbers.Integral) and not isinstance(value, bool) and low <= value <= high
    )


def is_number(value, low=-math.inf, high=math.inf):
    """Whether `value` is a real number (not a bool, not NaN) in [low, high]."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and low <= value <= high


def require(condition, name, value, expected, fix=""):
    """Raises "`name` must be `expected`. Received: name=value. `fix`" unless `condition`."""
    if not condition:
        raise ValueError(f"`{name}` must be {expected}. Received: {name}={value!r}. {fix}".rstrip())


def static_int(value):
    """`value` as a Python int when known now (not a symbolic tensor), else None."""
    try:
        # `operator.index`, not `int`: AutoGraph rewrites `int(tensor)` into a cast.
        return None if value is None else operator.index(value)
    except Exception:  # each backend's symbolic tensors refuse in their own way
        return None


def known_value(value):
    """`value` as a NumPy array when known now (not a traced tensor), else None."""
    if isinstance(value, (numbers.Number, np.generic, np.ndarray)):
        return np.asarray(value)
    try:
        return np.asarray(keras.ops.convert_to_numpy(value))
    except Exception:  # each backend refuses symbolic values its own way
        return None


def _prefix(owner):
    return "" if owner is None else f"{type(owner).__name__}: "


def _python_int_hint(name, value):
    """What to do about a positive NumPy integer (a config must hold Python ints)."""
    if is_int(value, 1) and not isinstance(value, int):
        return (
            f" It is a {type(value).__module__}.{type(value).__name__}: pass a "
            f"Python int, e.g. `{name}=int({name})`."
        )
    return ""


def _is_python_int(value, low):
    return isinstance(value, int) and not isinstance(value, bool) and value >= low


def check_positive_int(owner, name, value):
    """Refuses a `name` of layer `owner` that is not a positive Python int."""
    if not _is_python_int(value, 1):
        raise ValueError(
            f"{_prefix(owner)}`{name}` must be a positive integer. "
            f"Received: {name}={value!r}.{_python_int_hint(name, value)}"
        )


def check_sizes(**sizes):
    """Refuses the first keyword value that is not a positive Python int."""
    for name, value in sizes.items():
        check_positive_int(None, name, value)


def check_heads_divide(hidden_dim, num_heads):
    """Refuses a `num_heads` that does not divide `hidden_dim` (D = H x key_dim)."""
    if hidden_dim % num_heads:
        raise ValueError(
            f"`hidden_dim` ({hidden_dim}) must be divisible by `num_heads` "
            f"({num_heads}): each head gets hidden_dim // num_heads features."
        )


def check_finite_positive_number(owner, name, value, meaning):
    """Refuses a `value` that is not a finite real number > 0 (`meaning`: what it is)."""
    if not is_number(value) or not 0 < value < math.inf:
        raise ValueError(
            f"{_prefix(owner)}`{name}` must be a finite number > 0 ({meaning}). "
            f"Received: {name}={value!r}."
        )


def check_rate(owner, name, value):
    """Refuses a rate (a dropout) outside [0, 1)."""
    if not is_number(value, 0.0) or not float(value) < 1.0:
        raise ValueError(
            f"{_prefix(owner)}`{name}` must be a number in [0, 1). Received: {name}={value!r}."
        )


def check_bool(owner, name, value, meaning):
    """Refuses a flag that is not a Python bool (`meaning`: what True means)."""
    if not isinstance(value, bool):
        hint = f" Pass `{name}=bool({name})`." if isinstance(value, np.bool_) else ""
        raise ValueError(
            f"{_prefix(owner)}`{name}` must be True or False ({meaning}). "
            f"Received: {name}={value!r}.{hint}"
        )


def check_layer_seed(owner, seed):
    """Refuses a layer's dropout `seed` other than None or a Python int."""
    if not (seed is None or _is_python_int(seed, -math.inf)):
        raise ValueError(
            f"{_prefix(owner)}`seed` must be None or an int (the seed of the "
            f"dropout, for reproducible runs). Received: seed={seed!r}."
            f"{_python_int_hint('seed', seed)}"
        )


def check_image_size(image_size, name="image_size", owner=None):
    """`(height, width)` from a positive int (square) or a pair of positive ints."""
    pair = image_size if isinstance(image_size, (tuple, list)) else (image_size, image_size)
    if len(pair) != 2 or not all(is_int(v, 1) for v in pair):
        raise ValueError(
            f"{_prefix(owner)}`{name}` must be a positive int or a pair of positive "
            f"ints (height, width). Received: {name}={image_size!r}."
        )
    return tuple(int(v) for v in pair)


def check_index(value, name):
    """Refuses a position that is not an integer scalar (int or rank-0 int tensor)."""
    tensor = hasattr(value, "dtype") and hasattr(value, "shape")
    dtype = keras.backend.standardize_dtype(value.dtype) if tensor else None
    if not (is_int(value) or tensor and "int" in dtype and len(value.shape) == 0):
        described = (
            f"{type(value).__name__} of dtype {dtype} and shape {tuple(value.shape)}"
            if tensor
            else type(value).__name__
        )
        raise ValueError(
            f"`{name}` must be an integer scalar (a Python int or a rank-0 int32 tensor): an "
            f"absolute position. Received: {name}={value!r} ({described})."
        )


def static_shape_mismatch(shape, expected):
    """Whether static `shape` cannot be `expected` (non-int entries and None match any size).

    >>> static_shape_mismatch((2, None, 8), ("batch", 5, 8)), static_shape_mismatch((2, 5), (3, None))
    (False, True)
    """
    return len(shape) != len(expected) or any(
        isinstance(want, int) and got is not None and got != want
        for got, want in zip(shape, expected)
    )


def check_cache(cache, expected_shape, origin):
    """Refuses a cache that is not a floating tensor of `expected_shape` (names: any size)."""
    shape = tuple(getattr(cache, "shape", ()))
    if not shape or static_shape_mismatch(shape, expected_shape):
        raise ValueError(
            f"`cache` must have shape ({', '.join(map(str, expected_shape))}) {origin}. "
            f"Received: cache.shape={shape or type(cache).__name__}."
        )
    dtype = keras.backend.standardize_dtype(cache.dtype)
    if "float" not in dtype:
        raise ValueError(
            f"`cache` must be a floating-point tensor {origin}. Received: cache.dtype={dtype}."
        )
