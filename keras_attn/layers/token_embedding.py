import keras

from keras_attn import checks


@keras.saving.register_keras_serializable(package="keras_attn")
class TokenEmbedding(keras.layers.Embedding):
    """`keras.layers.Embedding` that refuses ids outside its table.

    A Keras `Embedding` given an id >= `input_dim` fails inside TensorFlow's
    gather with an index error, and on JAX returns a row of NaN without a
    word; a negative id reads another row on both. This layer is
    `keras.layers.Embedding` in every way (arguments, weights and their
    paths, `mask_zero`, LoRA, quantization, saving) but one: its `call`
    first checks that ids known now (eager) lie in [0, `input_dim`). Traced
    ids are checked where they enter: the generation functions' prompts and
    inputs, and the exported signatures. The library's models embed tokens
    without positions (the Music Transformer, whose relative attention
    supplies them) and class labels with it.

    Args:
        input_dim: V, the number of ids (rows of the table), positive int.
        output_dim: D, the embedding width, positive int.
        **kwargs: the other `keras.layers.Embedding` arguments
            (`embeddings_initializer`, `mask_zero`, ..., `dtype`, `name`).

    Call arguments:
        inputs: integer ids of any shape (B, T) or (B,), in [0, V). Whole
            floats are cast to int32 as Keras does.

    Returns:
        (..., D) float tensor: the rows of the table. With `mask_zero=True`
        the Keras mask is `inputs != 0`.

    Raises:
        ValueError: on an id outside [0, V) known now; the errors of
            `keras.layers.Embedding` otherwise.

    Example:
    >>> import numpy as np
    >>> from keras_attn.layers import TokenEmbedding
    >>> embed = TokenEmbedding(20, 4, mask_zero=True)
    >>> tuple(embed(np.array([[5, 19, 0]])).shape)
    (1, 3, 4)
    >>> try:
    ...     embed.call(np.array([[5, 20]]))
    ... except ValueError as error:
    ...     print(str(error)[:71])
    TokenEmbedding token_embedding: token ids must lie in [0, 20), the rows

    Reference:
        Vaswani et al. 2017, "Attention Is All You Need", section 3.4
        (embeddings).
    """

    def call(self, inputs):
        check_ids(
            self,
            "token ids",
            inputs,
            self.input_dim,
            "Map unknown tokens to an id of the "
            "vocabulary, or build the layer with a larger input_dim.",
        )
        return super().call(inputs)


def check_ids(layer, what, ids, size, fix):
    """Refuses ids known now (eager) outside [0, `size`), the rows of
    `layer`'s table: a gather reads another row (negative ids), fails
    (TensorFlow) or gives NaN (JAX) there."""
    known = checks.known_value(ids)
    if known is not None and known.size and not 0 <= known.min() <= known.max() < size:
        raise ValueError(
            f"{type(layer).__name__} {layer.name}: {what} must lie in [0, {size}), "
            f"the rows of its table. {fix} Received: {what} from {known.min()} to "
            f"{known.max()}."
        )
