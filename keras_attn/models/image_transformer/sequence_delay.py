import keras
import numpy as np
from keras import ops

from keras_attn import checks
from keras_attn.layers.arguments_config import ArgumentsConfig
from keras_attn.layers.attention_ops import dim


@keras.saving.register_keras_serializable(package="keras_attn")
class SequenceDelay(ArgumentsConfig, keras.layers.Layer):
    """The input sequence delayed by `delay` positions, a causal layer with a cache.

        outputs[:, t] = inputs[:, t - delay]  (t >= delay),  fill_value  (t < delay)

    The super resolver reads the pixel to the left (the decoder input delayed by C - 1) and the
    block sums one position back through it. A cached layer of
    `keras_attn.generation.CachedDecoder`: the cache holds the last `delay` inputs.

    Args:
        delay: positions to delay by, an int >= 1.
        fill_value: the output at the first `delay` positions: a finite number the layer's dtype
            holds.
        **kwargs: base `keras.layers.Layer` arguments (`dtype="int32"` for integer tokens).

    Call arguments:
        inputs: (B, T, ...) tensor of any dtype, positions `cache_index ...`.
        cache: None, or the (B, delay, ...) inputs before them, from `init_cache` or the last
            call.
        cache_index: the absolute position of `inputs[:, 0]` (the cache protocol; not read).

    Returns:
        (B, T, ...) delayed inputs in their dtype; with a cache, `(outputs, new_cache)`.

    Raises:
        ValueError: on a `delay` that is not an int >= 1, a `fill_value` the dtype does not
            hold, inputs of rank < 2, a cache whose static shape is not (B, delay, ...).

    Example:
    >>> import keras
    >>> from keras_attn.models.image_transformer import SequenceDelay
    >>> delay = SequenceDelay(delay=2, fill_value=-1, dtype="int32")
    >>> tokens = keras.ops.array([[5, 6, 7, 8]], "int32")
    >>> keras.ops.convert_to_numpy(delay(tokens)).tolist()
    [[-1, -1, 5, 6]]
    >>> cache = delay.init_cache(batch_size=1)
    >>> step, cache = delay(tokens[:, :3], cache=cache, cache_index=0)
    >>> step, cache = delay(tokens[:, 3:], cache=cache, cache_index=3)
    >>> keras.ops.convert_to_numpy(step).tolist()
    [[6]]
    """

    def __init__(self, delay, fill_value=0, **kwargs):
        super().__init__(**kwargs)
        checks.check_positive_int(self, "delay", delay)
        dtype = keras.backend.standardize_dtype(self.compute_dtype)
        number = checks.is_number(fill_value)
        with np.errstate(all="ignore"):  # an overflowing cast is what is refused
            held = np.asarray(float(fill_value) if number else np.nan).astype(dtype)
        checks.require(
            number
            and np.isfinite(held.astype("float64"))
            and ("int" not in dtype or held == fill_value),
            "fill_value",
            fill_value,
            f"a finite real number that the layer's dtype {dtype} holds (whole and in range for "
            "integers)",
        )
        self.delay = delay
        self.fill_value = fill_value
        self.input_spec = keras.layers.InputSpec(min_ndim=2)
        self._feature_shape = None

    def build(self, inputs_shape=None):
        if inputs_shape is not None:
            self._feature_shape = tuple(inputs_shape[2:])

    def init_cache(self, batch_size, max_length=None):
        """(B, delay, ...) `fill_value`; `max_length` is accepted for the cache protocol."""
        shape = (batch_size, self.delay) + (self._feature_shape or ())
        return ops.full(shape, self.fill_value, self.compute_dtype)

    def call(self, inputs, cache=None, cache_index=0):
        length = dim(inputs, 1)
        if cache is None:
            shape = (ops.shape(inputs)[0], self.delay) + tuple(ops.shape(inputs)[2:])
            history = ops.concatenate([ops.full(shape, self.fill_value, inputs.dtype), inputs], 1)
            return history[:, :length]
        shape, wanted = tuple(cache.shape), (inputs.shape[0], self.delay) + tuple(inputs.shape[2:])
        ok = not checks.static_shape_mismatch(shape, wanted)
        expected = f"(batch, delay={self.delay}, ...) as `init_cache` returns"
        checks.require(ok, "cache.shape", shape, expected)
        history = ops.concatenate([ops.cast(cache, inputs.dtype), inputs], axis=1)
        return history[:, :length], history[:, length:]

    def compute_output_spec(self, inputs, cache=None, cache_index=0):
        outputs = keras.KerasTensor(tuple(inputs.shape), dtype=inputs.dtype)
        if cache is None:
            return outputs
        return outputs, keras.KerasTensor(tuple(cache.shape), dtype=inputs.dtype)
