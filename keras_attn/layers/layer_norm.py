import keras
from keras import ops

from keras_attn import checks


@keras.saving.register_keras_serializable(package="keras_attn")
class LayerNorm(keras.layers.LayerNormalization):
    """`keras.layers.LayerNormalization` over the last axis, in fewer graph nodes.

    The same weights (`gamma`, `beta`), config and formula as the Keras layer (statistics in at
    least float32), written as one `ops.moments` and a few elementwise ops: TensorFlow lowers
    `ops.layer_normalization` to ~22 graph nodes, 16 here, and a served decoding step without
    XLA runs them one by one. The library's blocks use it; a `LayerNormalization` saved by a
    block loads into it (same weight paths).

    Args:
        epsilon: added to the variance.
        **kwargs: the other `keras.layers.LayerNormalization` arguments; `axis` must be the
            last one, with `center` and `scale` on and `rms_scaling` off (the defaults).

    Call arguments:
        inputs: (..., D) tensor.

    Returns:
        (..., D) in the compute dtype: `(inputs - mean) / sqrt(variance + epsilon) * gamma +
        beta` over the last axis.

    Raises:
        ValueError: from `build`, another axis or normalization option.

    Example:
    >>> import numpy as np
    >>> from keras_attn.layers import LayerNorm
    >>> x = np.array([[1.0, 2.0, 3.0]], "float32")
    >>> np.round(keras.ops.convert_to_numpy(LayerNorm(epsilon=0.0)(x)), 4)
    array([[-1.2247,  0.    ,  1.2247]], dtype=float32)

    Reference:
        Ba et al. 2016, "Layer Normalization".
    """

    def build(self, input_shape):
        axis = tuple(self.axis) if isinstance(self.axis, (list, tuple)) else (self.axis,)
        options = (axis, self.center, self.scale, self.rms_scaling)
        ok = options in (((-1,), True, True, False), ((len(input_shape) - 1,), True, True, False))
        expected = "((-1,), True, True, False): the last axis, centered and scaled"
        checks.require(ok, "(axis, center, scale, rms_scaling)", options, expected, owner=self)
        super().build(input_shape)

    def call(self, inputs):
        # float32 statistics for 16-bit inputs, as the Keras layer computes them.
        x = ops.cast(inputs, keras.backend.result_type(inputs.dtype, "float32"))
        mean, variance = ops.moments(x, axes=-1, keepdims=True)
        inv = ops.rsqrt(variance + self.epsilon) * ops.cast(self.gamma, x.dtype)
        # x * inv + (beta - mean * inv): the Keras layer's order of operations.
        outputs = x * inv + (ops.cast(self.beta, x.dtype) - mean * inv)
        return ops.cast(outputs, self.compute_dtype)
