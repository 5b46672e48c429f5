"""Generic argument checks shared across keras_attn.

Each raises one ValueError: "`name` must be <expected>. Received: name=<value>. <fix>". A check
that serves one area lives with it (`generation/arguments.py`, `export/`, `preprocessing/`).
This module imports nothing from keras_attn.
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


def require(condition, name, value, expected, fix="", owner=None):
    """Raises "[Owner: ]`name` must be `expected`. Received: name=value. `fix`" unless `condition`."""
    if not condition:
        prefix = "" if owner is None else f"{type(owner).__name__}: "
        message = f"{prefix}`{name}` must be {expected}. Received: {name}={value!r}. {fix}"
        raise ValueError(message.rstrip())


def static_int(value):
    """`value` as a Python int when known now (not a symbolic tensor), else None."""
    try:
        # `operator.index`, not `int`: AutoGraph rewrites `int(tensor)` into a cast.
        return None if value is None else operator.index(value)
    except Exception:  # each backend's symbolic tensors refuse in their own way
        return None


def known_value(value):
    """`value` as a NumPy array when known now (not a traced tensor), else None."""
    try:
        return np.asarray(keras.ops.convert_to_numpy(value))
    except Exception:  # each backend refuses symbolic values its own way
        return None


def _int_hint(name, value):
    """The fix for a NumPy integer where a config needs a Python int."""
    numpy_int = is_int(value) and type(value) is not int
    return f"Pass a Python int: `{name}=int({name})`." if numpy_int else ""


def check_positive_int(owner, name, value):
    """Refuses a `name` of layer `owner` that is not a positive Python int."""
    ok = type(value) is int and value >= 1
    require(ok, name, value, "a positive integer", _int_hint(name, value), owner)


def check_sizes(**sizes):
    """Refuses the first keyword value that is not a positive Python int."""
    for name, value in sizes.items():
        check_positive_int(None, name, value)


def check_heads_divide(hidden_dim, num_heads):
    """Refuses a `num_heads` that does not divide `hidden_dim` (D = H x key_dim)."""
    if hidden_dim % num_heads:
        raise ValueError(
            f"`hidden_dim` ({hidden_dim}) must be divisible by `num_heads` ({num_heads})."
        )


def check_finite_positive_number(owner, name, value, meaning):
    """Refuses a `value` that is not a finite real number > 0 (`meaning`: what it is)."""
    ok = is_number(value) and 0 < value < math.inf
    require(ok, name, value, f"a finite number > 0 ({meaning})", owner=owner)


def check_rate(owner, name, value):
    """Refuses a rate (a dropout) outside [0, 1)."""
    require(is_number(value, 0.0) and value < 1, name, value, "a number in [0, 1)", owner=owner)


def check_bool(owner, name, value, meaning):
    """Refuses a flag that is not a Python bool (`meaning`: what True means)."""
    fix = f"Pass `{name}=bool({name})`." if isinstance(value, np.bool_) else ""
    require(isinstance(value, bool), name, value, f"True or False ({meaning})", fix, owner)


def check_layer_seed(owner, seed):
    """Refuses a layer's dropout `seed` other than None or a Python int."""
    ok = seed is None or type(seed) is int
    require(ok, "seed", seed, "None or an int (the dropout seed)", _int_hint("seed", seed), owner)


def check_image_size(image_size, name="image_size", owner=None):
    """`(height, width)` from a positive int (square) or a pair of positive ints."""
    pair = image_size if isinstance(image_size, (tuple, list)) else (image_size, image_size)
    ok = len(pair) == 2 and all(is_int(v, 1) for v in pair)
    require(ok, name, image_size, "a positive int or a pair of positive ints", owner=owner)
    return tuple(int(v) for v in pair)


def check_index(value, name):
    """Refuses a position that is not an integer scalar (int or rank-0 int tensor)."""
    dtype = keras.backend.standardize_dtype(value.dtype) if hasattr(value, "dtype") else None
    shape = tuple(getattr(value, "shape", ()))
    if not (is_int(value) or dtype and "int" in dtype and shape == ()):
        described = f", dtype {dtype}, shape {shape}" if dtype else ""
        raise ValueError(
            f"`{name}` must be an integer scalar (an int or a rank-0 int32 tensor). "
            f"Received: {name}={value!r} ({type(value).__name__}{described})."
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
    layout = f"({', '.join(map(str, expected_shape))}) {origin}"
    ok = shape and not static_shape_mismatch(shape, expected_shape)
    require(ok, "cache.shape", shape or type(cache).__name__, layout)
    dtype = keras.backend.standardize_dtype(cache.dtype)
    require("float" in dtype, "cache.dtype", dtype, f"floating-point, {origin}")
