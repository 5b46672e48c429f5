import keras
from keras import ops

from keras_attn import checks
from keras_attn.layers.arguments_config import ArgumentsConfig
from keras_attn.layers.attention_base import clone_initializer
from keras_attn.layers.attention_ops import dim
from keras_attn.models.image_transformer.low_resolution_raster import (
    LowResolutionRaster,
    RasterGeometry,
)


@keras.saving.register_keras_serializable(package="keras_attn")
class LowResolutionEmbedding(RasterGeometry, ArgumentsConfig, keras.layers.Layer):
    """Embeds, at each position of a high-resolution raster sequence, the low-resolution
    image's intensity there, from one table per channel.

    Added to the super-resolution decoder's input so every position sees its input value from
    the first training step (docs/guides/image_transformer.md). Position-aware (`start_index`)
    for `keras_attn.generation.CachedDecoder`.

    Args:
        embedding_dim: D, the output width.
        image_size: high-resolution (height, width), or one int.
        low_resolution_size: low-resolution (height, width) or one int; divides `image_size`.
        channels: colour channels per pixel.
        num_intensities: intensity values per channel.
        interpolation: "nearest" (the covering pixel) or "bicubic" (the rounded upsampling).
        scale_embeddings: multiply the vectors by √D.
        embeddings_initializer: initializer of the tables.
        **kwargs: base `keras.layers.Layer` arguments.

    Call arguments:
        inputs: (B, T) decoder token ids; only T is read (T <= H * W * C + 1).
        low_resolution: (B, h * w * C) int intensities, the low-resolution raster sequence.
        start_index: int or int32 scalar, the absolute position of `inputs[:, 0]`.
        low_resolution_values: optional (B, H * W * C, 4) float32 from a `LowResolutionValues`
            of the same sizes and interpolation: read instead of being computed from
            `low_resolution` (a decoder then computes them once, not at each step).

    Returns:
        (B, T, D) embeddings in the compute dtype.

    Raises:
        ValueError: on non-positive sizes, a low-resolution side that does not divide the
            high-resolution one, an unknown `interpolation`, a non-bool `scale_embeddings`;
            `inputs` not (B, T); `low_resolution` not (B, h * w * C).

    Example:
    >>> import keras
    >>> from keras_attn.models.image_transformer import LowResolutionEmbedding
    >>> embed = LowResolutionEmbedding(16, image_size=8, low_resolution_size=2)
    >>> low = keras.ops.ones((2, 12), "int32")
    >>> tuple(embed(keras.ops.zeros((2, 192), "int32"), low).shape)
    (2, 192, 16)

    Reference:
        Parmar et al. 2018, "Image Transformer", section 5.2; this library's direct
        conditioning, after Dahl et al. 2017, "Pixel Recursive Super Resolution".
    """

    def __init__(
        self,
        embedding_dim,
        image_size,
        low_resolution_size,
        channels=3,
        num_intensities=256,
        interpolation="nearest",
        scale_embeddings=True,
        embeddings_initializer="uniform",
        **kwargs,
    ):
        # `low_resolution_values` stays float32 under a mixed policy: cast to half precision,
        # its interpolated values would round to other intensities.
        kwargs["autocast"] = False
        super().__init__(**kwargs)
        checks.check_positive_int(self, "embedding_dim", embedding_dim)
        checks.check_bool(self, "scale_embeddings", scale_embeddings, "True = vectors times √D")
        self.raster = LowResolutionRaster(
            image_size, low_resolution_size, channels, num_intensities, interpolation
        )
        self.embedding_dim = embedding_dim
        self.scale_embeddings = scale_embeddings
        self.embeddings_initializer = keras.initializers.get(embeddings_initializer)
        self.input_spec = keras.layers.InputSpec(ndim=2)
        self.embedding = keras.layers.Embedding(
            num_intensities * channels,
            embedding_dim,
            embeddings_initializer=clone_initializer(self.embeddings_initializer),
            dtype=self.dtype_policy,
            name="intensity_embedding",
        )

    def build(self, inputs_shape=None, low_resolution_shape=None):
        self.embedding.build()
        self.built = True

    def call(self, inputs, low_resolution, start_index=0, low_resolution_values=None):
        self.raster.check_batch(low_resolution, inputs, "inputs")
        values = low_resolution_values
        if values is None:
            values = self.raster.values(low_resolution)
        ids = self.raster.channel_value_ids(values, dim(inputs, 1), start_index)
        embeddings = self.embedding(ids)
        if self.scale_embeddings:
            embeddings = embeddings * ops.cast(self.embedding_dim**0.5, embeddings.dtype)
        return embeddings

    def compute_output_shape(
        self, inputs_shape, low_resolution_shape=None, low_resolution_values_shape=None
    ):
        return (inputs_shape[0], inputs_shape[1], self.embedding_dim)
