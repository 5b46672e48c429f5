import keras
from keras import ops

from keras_attn.layers.attention_ops import dim


@keras.saving.register_keras_serializable(package="keras_attn")
class Projection(keras.layers.Dense):
    """Internal: `keras.layers.Dense` computing `inputs @ kernel - (-bias)`.

    The same numbers as `Dense` (negation is exact), but XLA on CPUs does not fuse the
    subtraction into the matrix-vector product, which keeps single-position decoding fast
    (figures: benchmarks/README.md). The product is one 2D matmul of the positions flattened:
    TensorFlow lowers a (B, T, D) `ops.matmul` to a Tensordot of ~20 graph nodes, which a served
    decoding step without XLA runs one by one. The library's projections and logits use it; its
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
        # (..., D) -> (N, D) @ (D, E) -> (..., E); the leading sizes static where known, the
        # first inferred (-1): a constant shape rather than a Shape -> Pack chain.
        leading = [-1] + [dim(inputs, axis) for axis in range(1, len(inputs.shape) - 1)]
        x = ops.matmul(ops.reshape(inputs, (-1, inputs.shape[-1])), self.kernel)
        x = ops.reshape(x, leading + [self.units])
        if self.bias is not None:
            x = ops.subtract(x, ops.negative(self.bias))
        if self.activation is not None:
            x = self.activation(x)
        return x
