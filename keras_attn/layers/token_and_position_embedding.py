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

    Token vectors are optionally scaled by √D, then the position signal is added. With
    `mask_zero=True` id 0 is padding and the implicit mask (True = real token) is attached.
    Ids outside the table and positions past a learned table are refused when known at the call;
    traced positions are clamped to the table.

    Args:
        vocabulary_size: number of token ids (positive int).
        embedding_dim: D (positive int; even for sinusoidal positions).
        sequence_length: rows of the learned position table (required for "learned").
        position: `"learned"` or `"sinusoidal"`.
        mask_zero: whether id 0 is padding.
        scale_token_embeddings: multiply token vectors by √D.
        embeddings_initializer: initializer of the token (and learned position) tables.
        max_wavelength: longest wavelength of sinusoidal positions (a finite number >= 1).
        **kwargs: base `keras.layers.Layer` arguments.

    Call arguments:
        inputs: (B, T) integer token ids.
        start_index: int or int32 scalar, the position of `inputs[:, 0]` (default 0).

    Returns:
        (B, T, D) embeddings in the compute dtype.

    Raises:
        ValueError: on invalid arguments, inputs not (B, T), ids outside the table, or a
            `start_index` that is not an integer scalar, negative, or runs past the table.

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
        kinds = ("learned", "sinusoidal")
        checks.require(position in kinds, "position", position, f"one of {kinds}")
        even = learned or embedding_dim % 2 == 0
        checks.require(even, "embedding_dim", embedding_dim, "even for sinusoidal positions")
        checks.check_bool(self, "mask_zero", mask_zero, "True = id 0 is padding")
        checks.check_bool(self, "scale_token_embeddings", scale_token_embeddings, "times √D")
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
        # For the message of a position past the learned table.
        table = f"the learned position table of {sequence_length} rows: raise `sequence_length`"
        self._table = table if learned else ""
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
        """Positions the layer can encode (None: any); `CachedDecoder` checks lengths against it."""
        return self.sequence_length if self.position == "learned" else None

    def call(self, inputs, start_index=0):
        length = ops.shape(inputs)[1]
        check_ids(
            self, "token ids", inputs, self.vocabulary_size, "Map unknown tokens to known ids."
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
