import keras
from keras import ops

from keras_attn import checks
from keras_attn.layers.arguments_config import ArgumentsConfig
from keras_attn.layers.attention_base import clone_initializer
from keras_attn.layers.attention_ops import dim
from keras_attn.layers.token_embedding import check_ids
from keras_attn.models.image_transformer.pixel_position_encoding import (
    PixelPositionEncoding,
    positions_from,
)


@keras.saving.register_keras_serializable(package="keras_attn")
class PixelEmbedding(ArgumentsConfig, keras.layers.Layer):
    """Channel-specific intensity embeddings plus 2D position encodings.

    The id at position `p` of a raster sequence of channel intensities is looked up in the table
    of channel `p % channels`, then the `PixelPositionEncoding` of `p` is added. The table follows
    the position, so a decoder input shifted right by one uses the tables in rotated order:
    `vocabulary_size=257` for a decoder input (with the start token 256), 256 for an encoder
    input. Position-aware (`start_index`) for `keras_attn.generation.CachedDecoder`; never masks.

    Args:
        vocabulary_size: ids per channel (positive int).
        embedding_dim: D (divisible by 4 for sinusoidal positions, by 2 for learned).
        image_size: (height, width) or one int.
        channels: colour channels per pixel.
        position: "sinusoidal" or "learned" (see `PixelPositionEncoding`).
        scale_token_embeddings: multiply the intensity vectors by √D.
        embeddings_initializer: initializer of the tables.
        max_wavelength: longest wavelength of sinusoidal positions (a finite number >= 1).
        coordinate_scale: distance between pixel centres (see `PixelPositionEncoding`).
        **kwargs: base `keras.layers.Layer` arguments.

    Call arguments:
        inputs: (B, T) int ids in `[0, vocabulary_size)`, T <= height * width * channels + 1.
        start_index: int or int32 scalar, the absolute position of `inputs[:, 0]`.

    Returns:
        (B, T, D) embeddings in the compute dtype.

    Raises:
        ValueError: on invalid arguments; inputs not (B, T); ids outside the table or
            positions outside the image, where known.

    Example:
    >>> import keras
    >>> from keras_attn.models.image_transformer import PixelEmbedding
    >>> embed = PixelEmbedding(257, 64, image_size=32)
    >>> tuple(embed(keras.ops.full((2, 3072), 256, "int32")).shape)
    (2, 3072, 64)

    Reference:
        Parmar et al. 2018, "Image Transformer", section 3.1.
    """

    def __init__(
        self,
        vocabulary_size,
        embedding_dim,
        image_size,
        channels=3,
        position="sinusoidal",
        scale_token_embeddings=False,
        embeddings_initializer="uniform",
        max_wavelength=10000,
        coordinate_scale=1.0,
        **kwargs,
    ):
        super().__init__(**kwargs)
        checks.check_sizes(
            vocabulary_size=vocabulary_size, embedding_dim=embedding_dim, channels=channels
        )
        checks.check_bool(
            self,
            "scale_token_embeddings",
            scale_token_embeddings,
            "True = intensity embeddings times √D",
        )
        self.vocabulary_size = vocabulary_size
        self.embedding_dim = embedding_dim
        self.channels = channels
        self.position = position
        self.scale_token_embeddings = scale_token_embeddings
        self.embeddings_initializer = keras.initializers.get(embeddings_initializer)
        self.max_wavelength = max_wavelength
        self.coordinate_scale = coordinate_scale
        self.input_spec = keras.layers.InputSpec(ndim=2)
        self.token_embedding = keras.layers.Embedding(
            vocabulary_size * channels,
            embedding_dim,
            embeddings_initializer=clone_initializer(self.embeddings_initializer),
            dtype=self.dtype_policy,
            name="token_embedding",
        )
        # It checks the image size, the positions' arguments and their width.
        self.position_encoding = PixelPositionEncoding(
            image_size=image_size,
            channels=channels,
            position=position,
            max_wavelength=max_wavelength,
            coordinate_scale=coordinate_scale,
            embeddings_initializer=clone_initializer(self.embeddings_initializer),
            dtype=self.dtype_policy,
            name="position_encoding",
        )
        self.position_encoding._check_width(embedding_dim, "embedding_dim")
        self.image_size = self.position_encoding.image_size

    @property
    def sequence_length(self):
        """Positions accepted: height * width * channels + 1 (an image behind a start token)."""
        return self.position_encoding.num_positions

    max_positions = sequence_length  # the name `CachedDecoder` reads

    def build(self, inputs_shape=None):
        self.token_embedding.build()
        self.position_encoding.build((None, None, self.embedding_dim))
        self.built = True

    def call(self, inputs, start_index=0):
        # Checked before the channel offset makes them ids of another channel's table.
        check_ids(
            self,
            "intensity ids",
            inputs,
            self.vocabulary_size,
            "Pass intensities (and "
            "a start token) below vocabulary_size, as images.decoder_inputs makes them.",
        )
        positions = positions_from(start_index, dim(inputs, 1))
        table = positions % self.channels
        ids = ops.cast(inputs, "int32") + table * self.vocabulary_size
        embeddings = self.token_embedding(ids)
        if self.scale_token_embeddings:
            embeddings = embeddings * ops.cast(self.embedding_dim**0.5, embeddings.dtype)
        return embeddings + self.position_encoding(embeddings, start_index=start_index)

    def compute_output_shape(self, inputs_shape):
        return tuple(inputs_shape) + (self.embedding_dim,)
