import keras

from keras_attn import checks


@keras.saving.register_keras_serializable(package="keras_attn")
class TokenEmbedding(keras.layers.Embedding):
    """`keras.layers.Embedding` that refuses ids known now (eager) outside [0, `input_dim`).

    There Keras's gather fails (TensorFlow), gives NaN (JAX) or reads another row (negative ids).
    Traced ids are checked where they enter (generation, exports). Arguments, call and mask are
    `keras.layers.Embedding`'s.

    Raises:
        ValueError: on an id outside [0, input_dim) known now.

    Example:
    >>> import numpy as np
    >>> from keras_attn.layers import TokenEmbedding
    >>> embed = TokenEmbedding(20, 4, mask_zero=True)
    >>> tuple(embed(np.array([[5, 19, 0]])).shape)
    (1, 3, 4)

    Reference:
        Vaswani et al. 2017, "Attention Is All You Need", section 3.4.
    """

    def call(self, inputs):
        check_ids(self, "token ids", inputs, self.input_dim, "Map unknown tokens to known ids.")
        return super().call(inputs)


def check_ids(layer, what, ids, size, fix):
    """Refuses ids known now outside [0, `size`), the rows of `layer`'s table."""
    known = checks.known_value(ids)
    if known is not None and known.size and not 0 <= known.min() <= known.max() < size:
        raise ValueError(
            f"{type(layer).__name__} {layer.name}: {what} must lie in [0, {size}), the rows of "
            f"its table. {fix} Received: {what} from {known.min()} to {known.max()}."
        )
