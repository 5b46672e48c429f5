import keras
from keras import ops


@keras.saving.register_keras_serializable(package="keras_attn")
class Projection(keras.layers.Dense):
    """Internal: `keras.layers.Dense` computing `inputs @ kernel - (-bias)`.

    The same numbers as `Dense` (negation is exact), but XLA on CPUs does not fuse the
    subtraction into the matrix-vector product, which keeps single-position decoding fast
    (figures: benchmarks/README.md). The library's projections and logits use it; its
    registered name stays `keras_attn>Projection` so saved models load.

    Example:
    >>> import keras
    >>> import numpy as np
    >>> from keras_attn.layers.projection import Projection
    >>> layer = Projection(3, bias_initializer="ones")
    >>> x = np.ones((2, 1, 4), "float32")
    >>> y = keras.ops.convert_to_numpy(layer(x))
    >>> bool(np.allclose(y, x @ keras.ops.convert_to_numpy(layer.kernel) + 1.0))
    True
    """

    def call(self, inputs, training=None):
        x = ops.matmul(inputs, self.kernel)
        if self.bias is not None:
            x = ops.subtract(x, ops.negative(self.bias))
        if self.activation is not None:
            x = self.activation(x)
        return x
