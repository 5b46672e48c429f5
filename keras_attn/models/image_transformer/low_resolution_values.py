import keras

from keras_attn.layers.arguments_config import ArgumentsConfig
from keras_attn.models.image_transformer.low_resolution_raster import (
    LowResolutionRaster,
    RasterGeometry,
)


@keras.saving.register_keras_serializable(package="keras_attn")
class LowResolutionValues(RasterGeometry, ArgumentsConfig, keras.layers.Layer):
    """The low-resolution image's values at every position of the high-resolution raster.

    At each position `p`: the interpolated value `b[p]` (the covering value `L[p]` for nearest),
    the block's total `a * L[p]` (its `a` pixels at the input value), `R[p]`, the sum of `b` over
    the rest of the block from `p` on, and `r[p]`, the block's pixels from `p` on (the terms of
    the consistent value, docs/guides/image_transformer.md). `LowResolutionEmbedding` and `LowResolutionLogitBias` read them
    (`low_resolution_values=`); they depend on the low-resolution image only, so
    `keras_attn.generation.CachedDecoder` computes them once per request instead of at each
    step (the bicubic upsampling and its block sums).

    Args:
        image_size: high-resolution (height, width), or one int.
        low_resolution_size: low-resolution (height, width) or one int; divides `image_size`.
        channels: colour channels per pixel.
        num_intensities: N, intensity values per channel (the upsampling is clipped to N - 1).
        interpolation: "nearest" or "bicubic".
        **kwargs: base `keras.layers.Layer` arguments (`dtype` defaults to "float32").

    Call arguments:
        low_resolution: (B, h * w * C) int intensities, the low-resolution raster sequence.

    Returns:
        (B, H * W * C, 4) float32: `b`, `a * L`, `R` and `r` on the last axis.

    Raises:
        ValueError: as `LowResolutionEmbedding` for bad sizes or `interpolation`.

    Example:
    >>> import keras
    >>> from keras_attn.models.image_transformer import LowResolutionValues
    >>> values = LowResolutionValues(image_size=4, low_resolution_size=2, channels=1,
    ...                              interpolation="nearest")
    >>> out = values(keras.ops.array([[10, 20, 30, 40]]))
    >>> keras.ops.convert_to_numpy(out[0, 1:3]).tolist()  # a block's top right, the next's top left
    [[10.0, 40.0, 30.0, 3.0], [20.0, 80.0, 80.0, 4.0]]

    Reference:
        Parmar et al. 2018, "Image Transformer", section 5.2.
    """

    def __init__(
        self,
        image_size,
        low_resolution_size,
        channels=3,
        num_intensities=256,
        interpolation="bicubic",
        **kwargs,
    ):
        # The values are float32 whatever the policy: a 16-bit `a * L` (up to 16 * 255) rounds.
        super().__init__(**{"dtype": "float32", **kwargs})
        self.raster = LowResolutionRaster(
            image_size, low_resolution_size, channels, num_intensities, interpolation
        )
        low_height, low_width = self.raster.low_resolution_size
        width = low_height * low_width * self.raster.channels
        self.input_spec = keras.layers.InputSpec(ndim=2, axes={-1: width})

    def call(self, low_resolution):
        return self.raster.values(low_resolution)

    def compute_output_shape(self, low_resolution_shape):
        return (low_resolution_shape[0], self.num_positions, 4)
