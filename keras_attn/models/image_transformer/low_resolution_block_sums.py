import keras
from keras import ops

from keras_attn.layers.arguments_config import ArgumentsConfig
from keras_attn.layers.attention_ops import dim
from keras_attn.models.image_transformer.low_resolution_raster import (
    LowResolutionRaster,
    RasterGeometry,
)
from keras_attn.models.image_transformer.pixel_position_encoding import (
    positions_from,
)


@keras.saving.register_keras_serializable(package="keras_attn")
class LowResolutionBlockSums(RasterGeometry, ArgumentsConfig, keras.layers.Layer):
    """For each position of a super resolver's output, the sum of the intensities already
    generated in its low-resolution block (same channel).

    Read from the decoder input (the token at `p` is the intensity at `p - 1`); the start token
    counts as nothing. `LowResolutionLogitBias(block_sums=...)` turns it into the value that keeps
    each block at its input's average (docs/guides/image_transformer.md). A cached layer of
    `keras_attn.generation.CachedDecoder`: the cache holds the running sum of every block.

    Args:
        image_size: (height, width) of the generated image, or one int.
        low_resolution_size: (height, width) of the input image, or one int.
        channels: colour channels per pixel.
        num_intensities: N, intensity values per channel; the id N (start token) counts as 0.
        **kwargs: base `keras.layers.Layer` arguments (the builder passes `dtype="float32"`).

    Call arguments:
        decoder_tokens: (B, T) int, the decoder input at positions `cache_index ...`.
        cache: None, or the (B, h * w * C) float32 sums from `init_cache` or the last call.
        cache_index: int or int32 scalar, the absolute position of `decoder_tokens[:, 0]`.

    Returns:
        (B, T) float32 sums; with a cache, `(sums, new_cache)`.

    Raises:
        ValueError: on invalid sizes (as `LowResolutionEmbedding`); `decoder_tokens` not (B, T).

    Example:
    >>> import keras
    >>> from keras_attn.models.image_transformer import LowResolutionBlockSums
    >>> sums = LowResolutionBlockSums(image_size=4, low_resolution_size=2, channels=1)
    >>> tokens = keras.ops.array([[256, 10, 20, 30, 40, 50, 60, 70, 80]])
    >>> keras.ops.convert_to_numpy(sums(tokens)).tolist()
    [[0.0, 10.0, 0.0, 30.0, 30.0, 80.0, 70.0, 140.0, 0.0]]

    Reference:
        The consistency of Dahl et al. 2017, "Pixel Recursive Super Resolution" (section 5),
        made an input of the super resolver of Parmar et al. 2018 (section 5.2).
    """

    def __init__(self, image_size, low_resolution_size, channels=3, num_intensities=256, **kwargs):
        super().__init__(**kwargs)
        self.raster = LowResolutionRaster(
            image_size, low_resolution_size, channels, num_intensities, "nearest"
        )
        low_height, low_width = self.low_resolution_size
        self.num_blocks = low_height * low_width * channels
        self.input_spec = keras.layers.InputSpec(ndim=2)

    def init_cache(self, batch_size, max_length=None):
        """(B, h * w * C) float32 zeros; `max_length` is accepted for the cache protocol."""
        return ops.zeros((batch_size, self.num_blocks), "float32")

    def call(self, decoder_tokens, cache=None, cache_index=0):
        length = dim(decoder_tokens, 1)
        positions = positions_from(cache_index, length)
        # The token at position p is the intensity at p - 1 (none at p = 0).
        previous = positions - 1
        counts = (previous >= 0) & (previous < self.raster.num_positions)
        tokens = ops.cast(decoder_tokens, "int32")
        counts = counts & (tokens < self.num_intensities)
        values = ops.where(counts, ops.cast(tokens, "float32"), 0.0)
        token_blocks = self.raster.covering_index(ops.clip(previous, 0, self.num_positions - 1))
        running = ops.cumsum(
            ops.expand_dims(values, -1) * ops.one_hot(token_blocks, self.num_blocks), axis=1
        )
        if cache is not None:
            running = running + ops.cast(cache, "float32")[:, None, :]
        # Sum at p over its own block: tokens up to p are intensities before p.
        own_blocks = self.raster.covering_index(self.raster.positions(length, cache_index))
        sums = ops.sum(running * ops.one_hot(own_blocks, self.num_blocks), axis=-1)
        if cache is None:
            return sums
        return sums, running[:, -1, :]

    def compute_output_spec(self, decoder_tokens, cache=None, cache_index=0):
        sums = keras.KerasTensor(tuple(decoder_tokens.shape), dtype="float32")
        if cache is None:
            return sums
        return sums, keras.KerasTensor(tuple(cache.shape), dtype="float32")
