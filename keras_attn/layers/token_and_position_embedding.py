import keras
from keras import ops

from keras_attn import checks
from keras_attn.layers.arguments_config import ArgumentsConfig
from keras_attn.layers.attention_base import clone_initializer
from keras_attn.layers.sinusoidal_position_encoding import (
    check_max_wavelength,
    check_positions,
    sinusoids,
)
from keras_attn.layers.token_embedding import check_ids


@keras.saving.register_keras_serializable(package="keras_attn")
class TokenAndPositionEmbedding(ArgumentsConfig, keras.layers.Layer):
    """Token embedding plus a learned or sinusoidal position encoding.

    The input of every sequence model in the library: token ids become
    vectors, optionally scaled by √D (Vaswani et al. 2017, section 3.4), and
    the position signal is added. With `mask_zero=True` id 0 is padding and
    the Keras implicit mask (True = real token) is attached to the output, so
    the attention layers downstream mask it without being told.

    Ids outside the table, and positions beyond a learned table, are
    refused where they are known when the layer is called (eagerly, or a
    static length traced: a `ValueError`). Traced values are checked where
    they enter (the generation functions, the exported signatures); the
    layer clamps traced positions to the table (negative ones to row 0)
    instead of gathering out of range. Sinusoidal positions work at any
    length.

    Args:
        vocabulary_size: number of token ids (positive int).
        embedding_dim: D (positive int; even for sinusoidal positions).
        sequence_length: rows of the learned position table (required for
            `position="learned"`; unused for `"sinusoidal"`, but checked
            when given).
        position: `"learned"` or `"sinusoidal"`.
        mask_zero: whether id 0 is padding.
        scale_token_embeddings: multiply token vectors by √D.
        embeddings_initializer: initializer of the token (and learned
            position) tables.
        max_wavelength: longest wavelength of sinusoidal positions (a
            finite number >= 1).
        **kwargs: base `keras.layers.Layer` arguments.

    Call arguments:
        inputs: (B, T) integer token ids.
        start_index: int or int32 scalar, absolute position of `inputs[:, 0]`
            (the cache index during decoding). Defaults to 0.

    Returns:
        (B, T, D) embeddings in the compute dtype, with an implicit mask when
        `mask_zero=True`.

    Raises:
        ValueError: on invalid arguments; inputs that are not (B, T); ids
            outside the table or a `start_index` that is not an integer
            scalar, negative, or (learned) runs past the table, known now.

    Example:
    >>> import keras
    >>> from keras_attn.layers import TokenAndPositionEmbedding
    >>> embed = TokenAndPositionEmbedding(1000, 32, sequence_length=64, mask_zero=True)
    >>> tuple(embed(keras.ops.array([[5, 7, 0]])).shape)
    (1, 3, 32)

    Reference:
        Vaswani et al. 2017, sections 3.4-3.5; learned positions as in
        Gehring et al. 2017.
    """

    def __init__(
        self,
        vocabulary_size,
        embedding_dim,
        sequence_length=None,
        position="learned",
        mask_zero=False,
        scale_token_embeddings=False,
        embeddings_initializer="uniform",
        max_wavelength=10000,
        **kwargs,
    ):
        super().__init__(**kwargs)
        learned = position == "learned"
        sizes = dict(vocabulary_size=vocabulary_size, embedding_dim=embedding_dim)
        if learned or sequence_length is not None:
            sizes["sequence_length"] = sequence_length
        checks.check_sizes(**sizes)
        checks.require(
            position in ("learned", "sinusoidal"), "position", position, '"learned" or "sinusoidal"'
        )
        if not learned and embedding_dim % 2:
            raise ValueError(
                "Sinusoidal positions need an even `embedding_dim`. "
                f"Received: embedding_dim={embedding_dim}."
            )
        checks.check_bool(self, "mask_zero", mask_zero, "True = id 0 is padding")
        checks.check_bool(
            self,
            "scale_token_embeddings",
            scale_token_embeddings,
            "True = token embeddings times √D",
        )
        check_max_wavelength(max_wavelength)
        self.vocabulary_size = vocabulary_size
        self.embedding_dim = embedding_dim
        self.sequence_length = sequence_length
        self.position = position
        self.mask_zero = mask_zero
        self.scale_token_embeddings = scale_token_embeddings
        self.embeddings_initializer = keras.initializers.get(embeddings_initializer)
        self.max_wavelength = max_wavelength
        self.supports_masking = True
        self.input_spec = keras.layers.InputSpec(ndim=2)
        self._table = (
            (  # for the message of a position past the learned table
                f"the learned position table of {sequence_length} rows: truncate the sequence to "
                "`sequence_length` tokens or build the layer with a larger `sequence_length`"
            )
            if learned
            else ""
        )
        self.token_embedding = self._embedding(vocabulary_size, "token_embedding")
        self.position_embedding = None
        if learned:
            self.position_embedding = self._embedding(sequence_length, "position_embedding")

    def _embedding(self, input_dim, name):
        # The token and learned position tables differ only in their rows.
        return keras.layers.Embedding(
            input_dim,
            self.embedding_dim,
            embeddings_initializer=clone_initializer(self.embeddings_initializer),
            dtype=self.dtype_policy,
            name=name,
        )

    def build(self, inputs_shape=None):
        self.token_embedding.build()
        if self.position_embedding is not None:
            self.position_embedding.build()
        self.built = True

    @property
    def max_positions(self):
        """Positions the layer can encode: `sequence_length` with a learned
        table, None (unbounded) with sinusoids. `CachedDecoder` checks a
        generation length against it (its position-aware protocol)."""
        return self.sequence_length if self.position == "learned" else None

    def call(self, inputs, start_index=0):
        length = ops.shape(inputs)[1]
        check_ids(
            self,
            "token ids",
            inputs,
            self.vocabulary_size,
            "Map unknown tokens to an id "
            "of the vocabulary, or build the layer with a larger vocabulary_size.",
        )
        check_positions(start_index, length, self.max_positions, self._table)
        embeddings = self.token_embedding(inputs)
        if self.scale_token_embeddings:
            embeddings = embeddings * ops.cast(self.embedding_dim**0.5, embeddings.dtype)
        if self.position_embedding is not None:
            positions = ops.arange(length, dtype="int32") + ops.cast(start_index, "int32")
            positions = ops.clip(positions, 0, self.sequence_length - 1)
            position_vectors = self.position_embedding(positions)
        else:
            position_vectors = ops.cast(
                sinusoids(length, self.embedding_dim, start_index, self.max_wavelength),
                embeddings.dtype,
            )
        return embeddings + position_vectors[None]

    def compute_mask(self, inputs, previous_mask=None):
        if not self.mask_zero:
            return None
        return ops.not_equal(inputs, 0)

    def compute_output_shape(self, inputs_shape):
        return tuple(inputs_shape) + (self.embedding_dim,)
