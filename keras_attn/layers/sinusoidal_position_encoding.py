import math

import keras
import numpy as np
from keras import ops

from keras_attn import checks
from keras_attn.layers.arguments_config import ArgumentsConfig


@keras.saving.register_keras_serializable(package="keras_attn")
class SinusoidalPositionEncoding(ArgumentsConfig, keras.layers.Layer):
    """Fixed sine/cosine position encoding, to add to the inputs (it returns the encoding).

    PE(pos, 2i) = sin(pos / max_wavelength^(2i / D)), PE(pos, 2i + 1) = the cos of the same.

    Args:
        max_wavelength: the longest wavelength, a finite number >= 1; 10000 in the paper.
        **kwargs: base `keras.layers.Layer` arguments.

    Call arguments:
        inputs: (B, T, D) tensor, D even; only its shape is used.
        start_index: int or int32 scalar, the position of `inputs[:, 0]` (default 0).

    Returns:
        (B, T, D) encoding in the layer's compute dtype.

    Raises:
        ValueError: on a bad `max_wavelength`, inputs or a negative `start_index`.

    Example:
    >>> import keras
    >>> from keras_attn.layers import SinusoidalPositionEncoding
    >>> x = keras.ops.zeros((2, 10, 16))
    >>> tuple((x + SinusoidalPositionEncoding()(x)).shape)
    (2, 10, 16)

    Reference:
        Vaswani et al. 2017, "Attention Is All You Need", section 3.5.
    """

    def __init__(self, max_wavelength=10000, **kwargs):
        super().__init__(**kwargs)
        check_max_wavelength(max_wavelength)
        self.max_wavelength = max_wavelength
        self.supports_masking = True
        self.input_spec = keras.layers.InputSpec(ndim=3)

    def build(self, inputs_shape):
        features = inputs_shape[-1]
        ok = features is not None and features % 2 == 0
        checks.require(ok, "inputs.shape[-1]", features, "known and even (sine/cosine pairs)")

    def call(self, inputs, start_index=0):
        length = ops.shape(inputs)[1]
        check_positions(start_index, length)
        encoding = sinusoids(length, inputs.shape[-1], start_index, self.max_wavelength)
        encoding = ops.cast(encoding, self.compute_dtype)
        return ops.broadcast_to(encoding[None], ops.shape(inputs))

    def compute_output_shape(self, inputs_shape):
        return inputs_shape


def check_max_wavelength(value):
    """Refuses a `max_wavelength` that is not a finite number >= 1."""
    ok = checks.is_number(value, 1) and value < math.inf
    checks.require(ok, "max_wavelength", value, "a finite number >= 1 (10000 in the paper)")


def check_positions(start_index, length, limit=None, table=""):
    """Refuses a `start_index` that is not an integer scalar and, known now, positions below 0
    or past `limit` (`table`: what holds them and the fix). Traced ones are the caller's."""
    checks.check_index(start_index, "start_index")
    start, length = checks.static_int(start_index), checks.static_int(length)
    if start is not None and (start < 0 or None not in (length, limit) and start + length > limit):
        raise ValueError(
            f"Positions (from `start_index`) must be >= 0{table and ' and fit '}"
            f"{table}. Received: positions {start}..{start + (length or 1) - 1}."
        )


def sinusoids(length, dim, start_index=0, max_wavelength=10000):
    """The (length, dim) float32 table of positions `start_index ..` (see `sinusoids_at`)."""
    positions = ops.arange(length, dtype="int32") + ops.cast(start_index, "int32")
    return sinusoids_at(positions, dim, max_wavelength)


def sinusoids_at(positions, dim, max_wavelength=10000):
    """The (..., dim) float32 sinusoid encoding of (...) positions (e.g. (T,); fractional too):
    feature 2i is sin(p / max_wavelength^(2i / dim)), feature 2i + 1 its cos.

    Example:
    >>> import numpy as np
    >>> table = sinusoids_at(np.array([0.0, 1.5]), 4)
    >>> np.round(np.asarray(table, "float64"), 3).tolist()
    [[0.0, 1.0, 0.0, 1.0], [0.997, 0.071, 0.015, 1.0]]
    """
    positions = ops.cast(positions, "float32")
    # The integer parts are constants; the power stays an op of the backend, whose float32
    # result is not NumPy's in the last bit.
    pair_index = ops.convert_to_tensor(np.arange(dim) // 2, "float32")
    inverse_frequency = ops.power(float(max_wavelength), -2.0 * pair_index / float(dim))
    angles = ops.expand_dims(positions, -1) * inverse_frequency
    is_even = np.arange(dim) % 2 == 0
    return ops.where(is_even, ops.sin(angles), ops.cos(angles))
