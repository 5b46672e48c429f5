"""Argument checks shared by the preprocessing entry points."""

import math
import numbers


def is_int(value, low=-math.inf, high=math.inf):
    """Whether `value` is an integer (NumPy's too, not a bool) in [low, high]."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool) and low <= value <= high


def is_number(value, low=-math.inf, high=math.inf):
    """Whether `value` is a real number (not a bool, not NaN) in [low, high]."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and low <= value <= high


def require(condition, name, value, expected, fix=""):
    """Raises "`name` must be `expected`. Received: name=value. `fix`" unless `condition`."""
    if not condition:
        raise ValueError(f"`{name}` must be {expected}. Received: {name}={value!r}. {fix}".rstrip())
