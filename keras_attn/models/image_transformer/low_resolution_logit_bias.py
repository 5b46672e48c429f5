import keras
import numpy as np
from keras import ops

from keras_attn import checks
from keras_attn.layers.arguments_config import ArgumentsConfig
from keras_attn.layers.attention_ops import dim
from keras_attn.models.image_transformer.low_resolution_raster import (
    LowResolutionRaster,
    RasterGeometry,
)


@keras.saving.register_keras_serializable(package="keras_attn")
class LowResolutionLogitBias(RasterGeometry, ArgumentsConfig, keras.layers.Layer):
    """Adds a learned log-prior over each intensity's offset from the low-resolution value.

    `logits[b, t, k] += offset_bias[channel(t), k - value[b, t] + N - 1]`; the optional call
    inputs move `value` (docs/guides/image_transformer.md).

    Args:
        image_size: high-resolution (height, width), or one int.
        low_resolution_size: low-resolution (height, width) or one int; divides `image_size`.
        channels: colour channels per pixel.
        num_intensities: N, intensity values per channel.
        interpolation: "bicubic" or "nearest": where the offsets count from.
        prior_scale: b > 0, the initial Laplace scale in intensity levels, or None.
        bias_initializer: initializer of the (channels, 2N - 1) weights when `prior_scale` is None.
        max_correction: None, or a bound > 0 on the per-pixel consistency correction.
        **kwargs: base `keras.layers.Layer` arguments (the builder passes `dtype="float32"`).

    Call arguments:
        logits: (B, T, N) float logits at positions `start_index ...` (T <= H * W * C + 1).
        low_resolution: (B, h * w * C) int intensities, the low-resolution raster sequence.
        start_index: int or int32 scalar, the absolute position of `logits[:, 0]`.
        block_sums: optional (B, T) float from `LowResolutionBlockSums`.
        previous_intensities: optional (B, T) int, the intensity one position back.
        left_intensities: optional (B, T) int, with `block_sums`: the pixel to the left.
        previous_block_sums: optional (B, T) float, the block sums one position back.
        low_resolution_values: optional (B, H * W * C, 4) float32 from a `LowResolutionValues`
            of the same sizes and interpolation: read instead of being computed from
            `low_resolution` (a decoder then computes them once, not at each step).

    Returns:
        (B, T, N) logits plus the offset bias, in the logits' dtype.

    Raises:
        ValueError: for bad sizes, `interpolation`, `prior_scale`, `max_correction` or inputs.

    Example:
    >>> import keras
    >>> from keras_attn.models.image_transformer import LowResolutionLogitBias
    >>> bias = LowResolutionLogitBias(image_size=8, low_resolution_size=2)
    >>> logits = keras.ops.zeros((2, 192, 256))
    >>> low = keras.ops.full((2, 12), 100, "int32")
    >>> tuple(bias(logits, low).shape)
    (2, 192, 256)

    Reference:
        After Dahl et al. 2017, "Pixel Recursive Super Resolution"; Parmar et al. 2018, 5.2.
    """

    def __init__(
        self,
        image_size,
        low_resolution_size,
        channels=3,
        num_intensities=256,
        interpolation="bicubic",
        prior_scale=None,
        bias_initializer="zeros",
        max_correction=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.raster = LowResolutionRaster(
            image_size, low_resolution_size, channels, num_intensities, interpolation
        )
        # A call on more than one position gathers a (C * N, N) float32 table from an (N, N)
        # int32 offset matrix.
        checks.require(
            4 * num_intensities**2 * (channels + 1) <= 2**31,
            "num_intensities",
            num_intensities,
            f"small enough for a bias table of at most 2 GiB (4 * N^2 * (channels + 1) bytes, "
            f"channels={channels})",
            "Use 8-bit intensities (num_intensities=256).",
        )
        for name, value in (("prior_scale", prior_scale), ("max_correction", max_correction)):
            checks.require(
                value is None or checks.is_number(value) and value > 0,
                name,
                value,
                "a number > 0 (in intensity levels) or None",
            )
        self.input_spec = keras.layers.InputSpec(ndim=3, axes={-1: num_intensities})
        self.prior_scale = prior_scale
        self.max_correction = max_correction
        self.bias_initializer = keras.initializers.get(bias_initializer)
        # offsets[v, k] = k - v + N - 1: row v of the bias table, made once.
        n = num_intensities
        self._offsets = (np.arange(n)[None, :] - np.arange(n)[:, None] + n - 1).astype("int32")

    def build(self, logits_shape=None, low_resolution_shape=None):
        self.offset_bias = self.add_weight(
            name="offset_bias",
            shape=(self.channels, 2 * self.num_intensities - 1),
            initializer=self.bias_initializer
            if self.prior_scale is None
            else self._laplace_log_prior,
        )
        self.built = True

    def _laplace_log_prior(self, shape, dtype=None):
        offsets = np.arange(shape[1]) - (self.num_intensities - 1)
        prior = np.broadcast_to(-np.abs(offsets) / self.prior_scale, shape)
        return ops.convert_to_tensor(prior, dtype=dtype or "float32")

    def call(
        self,
        logits,
        low_resolution,
        start_index=0,
        block_sums=None,
        previous_intensities=None,
        left_intensities=None,
        previous_block_sums=None,
        low_resolution_values=None,
    ):
        self.raster.check_batch(low_resolution, logits, "logits")
        values = low_resolution_values
        if values is None:
            values = self.raster.values(low_resolution)
        ids = self.raster.channel_value_ids(
            values,
            dim(logits, 1),
            start_index,
            block_sums,
            previous_intensities,
            self.max_correction,
            left_intensities,
            previous_block_sums,
        )
        n = self.num_intensities
        if logits.shape[1] == 1:
            # A decoding step reads its N biases straight from the weights:
            # offset_bias[c, N - 1 - v + k] for k < N, instead of building the whole
            # table below at every step (benchmarks/README.md, served generation).
            channel, value = ids // n, ids % n
            first = channel * (2 * n - 1) + n - 1 - value
            index = ops.expand_dims(first, -1) + np.arange(n, dtype="int32")
            bias = ops.take(ops.reshape(self.offset_bias, (-1,)), index, axis=0)
        else:
            # (C, N, N) -> (C * N, N): the bias rows of every channel and value;
            # one row gather per position (its gradient is a row scatter-add, faster
            # in training than the scalar scatter of the path above).
            table = ops.take(self.offset_bias, self._offsets, axis=1)
            bias = ops.take(ops.reshape(table, (self.channels * n, n)), ids, axis=0)
        return logits + ops.cast(bias, logits.dtype)

    def compute_output_shape(self, logits_shape, low_resolution_shape=None, *args, **kwargs):
        return tuple(logits_shape)
