import keras
from keras import ops

from keras_attn import checks
from keras_attn.layers.arguments_config import ArgumentsConfig
from keras_attn.layers.attention_base import clone_initializer
from keras_attn.layers.low_resolution_raster import LowResolutionRaster, RasterGeometry


@keras.saving.register_keras_serializable(package="keras_attn")
class LowResolutionEmbedding(RasterGeometry, ArgumentsConfig, keras.layers.Layer):
    """Embeds, at each position of a high-resolution raster sequence, the
    low-resolution image's intensity there.

    The super-resolution decoder's direct route to its input. Position `p`
    of a high-resolution sequence of channel intensities in raster order
    (`keras_attn.preprocessing.images`) is the intensity of channel `p %
    channels` at pixel (row, column); this layer looks up, in a
    channel-specific table, the low-resolution intensity of the same
    channel at that pixel, and returns that vector (to be added to the
    decoder's input embeddings, as position encodings are):

    * `interpolation="nearest"`: the low-resolution pixel that covers
      (row, column), i.e. the 4x4 block it was averaged from when
      upscaling 8x8 -> 32x32;
    * `interpolation="bicubic"`: the low-resolution image upsampled with
      `keras.ops.image.resize(..., "bicubic")`, rounded to 0..255.

    Cross-attention alone must *learn* to find the right low-resolution
    pixel before the decoder can follow its input; on a CPU budget the
    decoder learns the unconditional image prior long before that. With
    this embedding every position sees its low-resolution value from the
    first step, and the decoder refines it.

    The layer is position-aware (a `start_index` call argument, like
    `PixelEmbedding`), so `keras_attn.generation.CachedDecoder` hands it the
    absolute position of each decoding step; `low_resolution` does not
    depend on the generated tokens, so the engine computes it once.

    Args:
        embedding_dim: D, the output width.
        image_size: high-resolution (height, width), or one int for a
            square.
        low_resolution_size: low-resolution (height, width) or one int;
            each side must divide the high-resolution one.
        channels: colour channels per pixel (3 for RGB).
        num_intensities: intensity values per channel (256).
        interpolation: "nearest" (default) or "bicubic", see above.
        scale_embeddings: multiply the vectors by √D (as `PixelEmbedding`
            with `scale_token_embeddings=True`).
        embeddings_initializer: initializer of the tables.
        **kwargs: base `keras.layers.Layer` arguments.

    Call arguments:
        inputs: (B, T) decoder token ids; only its length T is
            read (T <= height * width * channels + 1; the position after
            the image's last intensity repeats the last one).
        low_resolution: (B, h * w * channels) int intensities in 0 ..
            num_intensities - 1, the raster sequence of the low-resolution
            image.
        start_index: int or int32 scalar, the absolute position of
            `inputs[:, 0]` (the cache index during decoding). Defaults to 0.

    Returns:
        (B, T, D) embeddings in the compute dtype.

    Raises:
        ValueError: on invalid arguments (non-positive sizes, a
            low-resolution side that does not divide the high-resolution
            one, an unknown `interpolation`, a `scale_embeddings` that is
            not a bool); `inputs` that are not (B, T); a `low_resolution`
            input that is not (B, h * w * channels). Intensities and
            positions are the model's: `super_resolution_transformer`
            embeds both inputs first (`PixelEmbedding` refuses them).

    Example:
    >>> import keras
    >>> from keras_attn.layers import LowResolutionEmbedding
    >>> embed = LowResolutionEmbedding(16, image_size=8, low_resolution_size=2)
    >>> low = keras.ops.ones((2, 12), "int32")
    >>> tuple(embed(keras.ops.zeros((2, 192), "int32"), low).shape)
    (2, 192, 16)

    Reference:
        Parmar et al. 2018, "Image Transformer", section 5.2 (super
        resolution); the direct conditioning on the covering low-resolution
        value is this library's addition, in the spirit of the
        conditioning network of Dahl et al. 2017, "Pixel Recursive Super
        Resolution" (per-pixel logits from the low-resolution image).
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

    def call(self, inputs, low_resolution, start_index=0):
        self.raster.check_batch(low_resolution, inputs, "inputs")
        ids = self.raster.channel_value_ids(low_resolution, ops.shape(inputs)[1], start_index)
        embeddings = self.embedding(ids)
        if self.scale_embeddings:
            embeddings = embeddings * ops.cast(self.embedding_dim**0.5, embeddings.dtype)
        return embeddings

    def compute_output_shape(self, inputs_shape, low_resolution_shape=None):
        return (inputs_shape[0], inputs_shape[1], self.embedding_dim)
