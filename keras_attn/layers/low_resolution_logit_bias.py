import keras
import numpy as np
from keras import ops

from keras_attn import checks
from keras_attn.layers.arguments_config import ArgumentsConfig
from keras_attn.layers.low_resolution_raster import LowResolutionRaster, RasterGeometry


@keras.saving.register_keras_serializable(package="keras_attn")
class LowResolutionLogitBias(RasterGeometry, ArgumentsConfig, keras.layers.Layer):
    """Adds to each intensity's logits a learned log-prior over its offset
    from the low-resolution value at that position.

    A super resolver's output intensity is, most of the time, near the
    low-resolution image's value there. A 256-way output layer has to learn
    that separately for each of the 256 values ("value v predicts v, v±1,
    ..."); this layer learns it once, as one weight per channel and offset:

        logits[b, t, k] += offset_bias[channel(t), k - value[b, t] + N - 1]

    with N = `num_intensities` and `value[b, t]` the low-resolution
    intensity at position t (the covering pixel, or the rounded bicubic
    upsampling; `LowResolutionEmbedding` explains the layout).

    With `prior_scale=b` the weights start as the log-density of a Laplace
    distribution, -|offset| / b (in nats; b in intensity levels), so an
    untrained model already samples near its input and training refines
    the prior together with the rest of the model.

    Three optional call inputs move the value the offsets count from:
    `block_sums` (the block-consistent value, so samples keep each block at
    its input's average), `previous_intensities` (green and blue follow
    the residual of the pixel's channel before them, as colours of natural
    images do) and `left_intensities` (red follows the residual of the
    pixel to its left). Measured on CIFAR-10 8x8 -> 32x32 (3,000 training
    images), the entropy of the offsets, i.e. the bits/dim of the best
    context-free prior: 6.14 from the bicubic value, 5.90 from the
    consistent value, 4.20 with the channel residual for green and blue,
    4.05 with the left residual for red too. (Zero weights, the
    identity, learn slowly: an optimizer moves each weight by about the
    learning rate per step, and the prior spans several nats.)

    Position-aware like `LowResolutionEmbedding` (a `start_index` call
    argument), so `keras_attn.generation.CachedDecoder` can decode a model
    that ends with it.

    Args:
        image_size: high-resolution (height, width), or one int for a
            square.
        low_resolution_size: low-resolution (height, width) or one int;
            each side must divide the high-resolution one.
        channels: colour channels per pixel (3 for RGB).
        num_intensities: N, intensity values per channel (256).
        interpolation: "bicubic" (default) or "nearest": where the offsets
            are counted from.
        prior_scale: b > 0, the initial Laplace scale in intensity levels,
            or None (default) to start from `bias_initializer`.
        bias_initializer: initializer of the (channels, 2N - 1) weights
            when `prior_scale` is None.
        max_correction: None (default), or a bound in intensity levels > 0
            on the per-pixel correction towards the block-consistent value
            (with `block_sums`; see `LowResolutionRaster.consistent_values`).
        **kwargs: base `keras.layers.Layer` arguments (the model builders
            pass `dtype="float32"`, as for their logits).

    Call arguments:
        logits: (B, T, N) float logits of the intensities at positions
            `start_index .. start_index + T - 1` (T <= H * W * C + 1; the
            position after the last intensity repeats the last one).
        low_resolution: (B, h * w * C) int intensities in 0 .. N - 1, the
            raster sequence of the low-resolution image.
        start_index: int or int32 scalar, the absolute position of
            `logits[:, 0]` (the cache index during decoding). Defaults to 0.
        block_sums: optional (B, T) float, from `LowResolutionBlockSums`:
            the sum of the intensities generated before each position in
            its low-resolution block. With it the offsets count from the
            *consistent* value instead: the interpolated value plus the
            block's remaining deficit (4x4 times the low-resolution value,
            minus what was generated, minus the interpolated values still
            to come) spread over the pixels still to come, so the prior
            steers each block towards the average its input demands (see
            `LowResolutionRaster.consistent_values`).
        previous_intensities: optional (B, T) int, the intensity at the
            position before each (the decoder's input tokens). With it a
            pixel's second and later channels count their offsets from the
            interpolated value plus the previous channel's residual
            (generated minus interpolated): colours move together
            (`LowResolutionRaster.previous_channel_values`).
        left_intensities: optional (B, T) int, with `block_sums`: the
            intensity of the same channel of the pixel to the left (the
            decoder input delayed by C - 1, `SequenceDelay`). With it the
            offsets count from the consistent value plus 0.75 times the
            left pixel's residual from its own consistent value
            (`LowResolutionRaster.left_residual_values`): neighbours deviate
            from a smooth upsampling together. With `previous_intensities`
            too, only a pixel's first channel uses it.
        previous_block_sums: optional (B, T) float, with `block_sums` and
            `previous_intensities`: the block sums one position back
            (`SequenceDelay` of `block_sums`). With it a pixel's second and
            later channels count from their own consistent value plus the
            previous channel's residual from *its* consistent value
            (`LowResolutionRaster.previous_channel_consistent_values`), so
            every channel keeps its block at the input's average.

    Returns:
        (B, T, N) logits plus the offset bias, in the logits' dtype.

    Raises:
        ValueError: on invalid sizes or `interpolation` (as
            `LowResolutionEmbedding`), a bias table over 2 GiB
            (4 * N^2 * (C + 1) bytes), logits that are not (B, T, N), a
            `low_resolution` input as `LowResolutionEmbedding` refuses it.
            The float logits, the optional inputs and the positions are
            the model's: `super_resolution_transformer` wires them.

    Example:
    >>> import keras
    >>> from keras_attn.layers import LowResolutionLogitBias
    >>> bias = LowResolutionLogitBias(image_size=8, low_resolution_size=2)
    >>> logits = keras.ops.zeros((2, 192, 256))
    >>> low = keras.ops.full((2, 12), 100, "int32")
    >>> tuple(bias(logits, low).shape)
    (2, 192, 256)

    Reference:
        A learned prior in the spirit of the conditioning network of Dahl et
        al. 2017, "Pixel Recursive Super Resolution" (per-pixel logits from
        the low-resolution image, added to the autoregressive network's);
        used with the Image Transformer (Parmar et al. 2018, section 5.2).
    """

    def __init__(
        self,
        image_size,
        low_resolution_size,
        channels=3,
        num_intensities=256,
        interpolation="bicubic",
        prior_scale=None,
        bias_initializer="zeros",
        max_correction=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.raster = LowResolutionRaster(
            image_size, low_resolution_size, channels, num_intensities, interpolation
        )
        # Every call gathers a (C * N, N) float32 table from an (N, N) int32
        # offset matrix: N = 65536 would ask for tens of GiB.
        checks.require(
            4 * num_intensities**2 * (channels + 1) <= 2**31,
            "num_intensities",
            num_intensities,
            f"small enough for a bias table of at most 2 GiB "
            f"(4 * N^2 * (channels + 1) bytes, channels={channels})",
            "Use 8-bit intensities (num_intensities=256).",
        )
        for name, value in (("prior_scale", prior_scale), ("max_correction", max_correction)):
            checks.require(
                value is None or checks.is_number(value) and value > 0,
                name,
                value,
                "a number > 0 (in intensity levels) or None",
            )
        self.input_spec = keras.layers.InputSpec(ndim=3, axes={-1: num_intensities})
        self.prior_scale = prior_scale
        self.max_correction = max_correction
        self.bias_initializer = keras.initializers.get(bias_initializer)
        # offsets[v, k] = k - v + N - 1: row v of the bias table, made once.
        n = num_intensities
        self._offsets = (np.arange(n)[None, :] - np.arange(n)[:, None] + n - 1).astype("int32")

    def build(self, logits_shape=None, low_resolution_shape=None):
        self.offset_bias = self.add_weight(
            name="offset_bias",
            shape=(self.channels, 2 * self.num_intensities - 1),
            initializer=self.bias_initializer
            if self.prior_scale is None
            else self._laplace_log_prior,
        )
        self.built = True

    def _laplace_log_prior(self, shape, dtype=None):
        offsets = np.arange(shape[1]) - (self.num_intensities - 1)
        prior = np.broadcast_to(-np.abs(offsets) / self.prior_scale, shape)
        return ops.convert_to_tensor(prior, dtype=dtype or "float32")

    def call(
        self,
        logits,
        low_resolution,
        start_index=0,
        block_sums=None,
        previous_intensities=None,
        left_intensities=None,
        previous_block_sums=None,
    ):
        self.raster.check_batch(low_resolution, logits, "logits")
        # (C, N, N) -> (C * N, N): the bias rows of every channel and value;
        # one row gather per position (its gradient is a row scatter-add).
        table = ops.take(self.offset_bias, self._offsets, axis=1)
        table = ops.reshape(table, (self.channels * self.num_intensities, self.num_intensities))
        ids = self.raster.channel_value_ids(
            low_resolution,
            ops.shape(logits)[1],
            start_index,
            block_sums,
            previous_intensities,
            self.max_correction,
            left_intensities,
            previous_block_sums,
        )
        return logits + ops.cast(ops.take(table, ids, axis=0), logits.dtype)

    def compute_output_shape(self, logits_shape, low_resolution_shape=None, *args, **kwargs):
        return tuple(logits_shape)
