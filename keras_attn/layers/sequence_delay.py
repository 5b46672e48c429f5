import keras
import numpy as np
from keras import ops

from keras_attn import checks
from keras_attn.layers.arguments_config import ArgumentsConfig


@keras.saving.register_keras_serializable(package="keras_attn")
class SequenceDelay(ArgumentsConfig, keras.layers.Layer):
    """The input sequence delayed by a fixed number of positions: what the
    sequence held `delay` positions back, at every position.

        outputs[:, t] = inputs[:, t - delay]    (t >= delay)
        outputs[:, t] = fill_value              (t <  delay)

    A causal layer with a cache, so an autoregressive model can read a
    token from further back than its input position without attention:
    the Image Transformer's super resolver reads the red intensity of the
    pixel to the left (three positions back in raster order, i.e. its
    decoder input token delayed by 2) to centre its prior on red
    (`LowResolutionLogitBias(left_intensities=...)`).

    A cached layer in the sense of `keras_attn.generation.CachedDecoder`:
    `init_cache` gives the last `delay` inputs, (B, delay, ...) filled with
    `fill_value`, and a call with `cache` and `cache_index` returns the
    delayed chunk and the new cache, so decoding one position at a time
    equals the full pass. The cache does not grow with the output.

    Args:
        delay: positions to delay by, an int >= 1.
        fill_value: the output at the first `delay` positions (0): a finite
            real number that the layer's dtype holds (a whole number in
            range for an integer dtype; at most 65504 in size for float16).
        **kwargs: base `keras.layers.Layer` arguments (for integer tokens,
            pass `dtype="int32"`: the fill and the cache take that dtype).

    Call arguments:
        inputs: (B, T, ...) tensor of any dtype, positions
            `cache_index .. cache_index + T - 1`.
        cache: None, or the (B, delay, ...) inputs before them, from
            `init_cache` or the previous call.
        cache_index: int or int32 scalar, the absolute position of
            `inputs[:, 0]` (the cache protocol; the cache already holds what
            came before, so it is not read). Defaults to 0.

    Returns:
        (B, T, ...) delayed inputs, in the inputs' dtype; with a cache,
        `(outputs, new_cache)`.

    Raises:
        ValueError: on a `delay` that is not an int >= 1, a `fill_value`
            that is not a finite number the layer's dtype holds, inputs of
            rank < 2, or a cache whose static shape is not (B, delay, ...)
            for the inputs.

    Example:
    >>> import keras
    >>> from keras_attn.layers import SequenceDelay
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
            "a finite real "
            f"number that the layer's dtype {dtype} holds (whole and in range for integers)",
        )
        self.delay = delay
        self.fill_value = fill_value
        self.input_spec = keras.layers.InputSpec(min_ndim=2)
        self._feature_shape = None

    def build(self, inputs_shape=None):
        if inputs_shape is not None:
            self._feature_shape = tuple(inputs_shape[2:])

    def init_cache(self, batch_size, max_length=None):
        """(B, delay, ...) `fill_value`: nothing seen yet. `max_length` is
        accepted for the cache protocol; the cache does not grow with it."""
        shape = (batch_size, self.delay) + (self._feature_shape or ())
        return ops.full(shape, self.fill_value, self.compute_dtype)

    def call(self, inputs, cache=None, cache_index=0):
        length = ops.shape(inputs)[1]
        if cache is None:
            shape = (ops.shape(inputs)[0], self.delay) + tuple(ops.shape(inputs)[2:])
            history = ops.concatenate([ops.full(shape, self.fill_value, inputs.dtype), inputs], 1)
            return history[:, :length]
        shape, wanted = tuple(cache.shape), (inputs.shape[0], self.delay) + tuple(inputs.shape[2:])
        checks.require(
            not checks.static_shape_mismatch(shape, wanted),
            "cache.shape",
            shape,
            f"(batch, delay={self.delay}, ...) as `init_cache` returns",
        )
        history = ops.concatenate([ops.cast(cache, inputs.dtype), inputs], axis=1)
        return history[:, :length], history[:, length:]

    def compute_output_spec(self, inputs, cache=None, cache_index=0):
        outputs = keras.KerasTensor(tuple(inputs.shape), dtype=inputs.dtype)
        if cache is None:
            return outputs
        return outputs, keras.KerasTensor(tuple(cache.shape), dtype=inputs.dtype)
