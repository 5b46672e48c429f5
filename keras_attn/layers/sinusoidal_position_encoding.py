import math

import keras
from keras import ops

from keras_attn import checks
from keras_attn.layers.arguments_config import ArgumentsConfig


@keras.saving.register_keras_serializable(package="keras_attn")
class SinusoidalPositionEncoding(ArgumentsConfig, keras.layers.Layer):
    """Fixed sine/cosine position encoding of Vaswani et al. 2017.

    Returns the encoding to add to the inputs (as keras-hub's
    `SinusoidalPositionEncoding`), not the sum, so it composes with any
    embedding:

        PE(pos, 2i)     = sin(pos / max_wavelength^(2i / D))
        PE(pos, 2i + 1) = cos(pos / max_wavelength^(2i / D))

    It has no weights and works at any length, which makes it the baseline
    absolute position signal for generating past the training length.

    Args:
        max_wavelength: the longest wavelength, a finite number >= 1;
            10000 in the paper.
        **kwargs: base `keras.layers.Layer` arguments.

    Call arguments:
        inputs: (B, T, D) tensor; only its shape is used.
        start_index: int or int32 scalar, the absolute position of
            `inputs[:, 0]` (the cache index during decoding). Defaults to 0.

    Returns:
        (B, T, D) encoding in the layer's compute dtype (broadcast over B).

    Raises:
        ValueError: on a `max_wavelength` that is not a finite number >= 1;
            inputs not (B, T, D) with D even; a `start_index` that is not an
            integer scalar, or is known and negative.

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
        checks.require(
            features is not None and features % 2 == 0,
            "inputs.shape[-1]",
            features,
            "a known, even number of features (sine/cosine pairs)",
        )

    def call(self, inputs, start_index=0):
        length = ops.shape(inputs)[1]
        check_positions(start_index, length)
        encoding = sinusoids(length, inputs.shape[-1], start_index, self.max_wavelength)
        encoding = ops.cast(encoding, self.compute_dtype)
        return ops.broadcast_to(encoding[None], ops.shape(inputs))

    def compute_output_shape(self, inputs_shape):
        return inputs_shape


def check_max_wavelength(value):
    """Refuses a `max_wavelength` that is not a finite number >= 1: below 1
    the frequencies grow with the feature index, and 1e-300 overflows
    float32 into NaN."""
    checks.require(
        checks.is_number(value, 1) and value < math.inf,
        "max_wavelength",
        value,
        "a finite number >= 1 (the longest wavelength, in positions; 10000 in the paper)",
    )


def check_positions(start_index, length, limit=None, table=""):
    """Refuses a `start_index` that is not an integer scalar and, known
    now, positions `start_index .. start_index + length - 1` below 0 or, with
    a `limit`, past it (`table` says what holds them and how to fix it).
    Traced positions are the caller's (the generation loops keep them in
    range)."""
    checks.check_index(start_index, "start_index")
    start, length = checks.static_int(start_index), checks.static_int(length)
    if start is not None and (start < 0 or None not in (length, limit) and start + length > limit):
        raise ValueError(
            f"Positions (from `start_index`) must be >= 0{table and ' and fit '}"
            f"{table}. Received: positions {start}..{start + (length or 1) - 1}."
        )


def sinusoids(length, dim, start_index=0, max_wavelength=10000):
    """The (length, dim) float32 sinusoid table for positions
    `start_index .. start_index + length - 1` (sin on even, cos on odd
    features). See `SinusoidalPositionEncoding`; `sinusoids_at` for
    positions that are not consecutive."""
    positions = ops.arange(length, dtype="int32") + ops.cast(start_index, "int32")
    return sinusoids_at(positions, dim, max_wavelength)


def sinusoids_at(positions, dim, max_wavelength=10000):
    """The sinusoid encoding of arbitrary (possibly fractional) positions.

    The one home of the formula of `SinusoidalPositionEncoding`:
    feature 2i of position p is sin(p / max_wavelength^(2i / dim)) and
    feature 2i + 1 its cos (Vaswani et al. 2017, section 3.5).

    Args:
        positions: (T,) positions, any real dtype (cast to float32).
        dim: even number of features D.
        max_wavelength: the longest wavelength, a finite number >= 1.

    Returns:
        (T, D) float32 table.

    Example:
    >>> import numpy as np
    >>> table = sinusoids_at(np.array([0.0, 1.5]), 4)
    >>> np.round(np.asarray(table, "float64"), 3).tolist()
    [[0.0, 1.0, 0.0, 1.0], [0.997, 0.071, 0.015, 1.0]]
    """
    positions = ops.cast(positions, "float32")
    pair_index = ops.cast(ops.arange(dim, dtype="int32") // 2, "float32")
    inverse_frequency = ops.power(float(max_wavelength), -2.0 * pair_index / float(dim))
    angles = positions[:, None] * inverse_frequency[None, :]
    is_even = ops.equal(ops.arange(dim, dtype="int32") % 2, 0)
    return ops.where(is_even[None, :], ops.sin(angles), ops.cos(angles))
