import keras
import numpy as np
from keras import ops

from keras_attn.layers import attention_ops
from keras_attn.layers.attention_base import clone_initializer
from keras_attn.layers.pixel_position_encoding import _as_image_size

INTERPOLATIONS = ("nearest", "bicubic")


@keras.saving.register_keras_serializable(package="keras_attn")
class LowResolutionEmbedding(keras.layers.Layer):
    """Embeds, at each position of a high-resolution raster sequence, the
    low-resolution image's intensity there.

    The super-resolution decoder's direct route to its input. Position `p`
    of a high-resolution sequence of channel intensities in raster order
    (`keras_attn.preprocessing.images`) is the intensity of channel `p %
    channels` at pixel (row, column); this layer looks up, in a
    channel-specific table, the low-resolution intensity of the same
    channel at that pixel, and returns that vector (to be added to the
    decoder's input embeddings, as position encodings are):

    * `interpolation="nearest"`: the low-resolution pixel that covers
      (row, column), i.e. the 4x4 block it was averaged from when
      upscaling 8x8 -> 32x32;
    * `interpolation="bicubic"`: the low-resolution image upsampled with
      `keras.ops.image.resize(..., "bicubic")`, rounded to 0..255.

    Cross-attention alone must *learn* to find the right low-resolution
    pixel before the decoder can follow its input; on a CPU budget the
    decoder learns the unconditional image prior long before that. With
    this embedding every position sees its low-resolution value from the
    first step, and the decoder refines it.

    The layer is position-aware (a `start_index` call argument, like
    `PixelEmbedding`), so `keras_attn.generation.CachedDecoder` hands it the
    absolute position of each decoding step; `low_resolution` does not
    depend on the generated tokens, so the engine computes it once.

    Args:
        embedding_dim: D, the output width.
        image_size: high-resolution (height, width), or one int for a
            square.
        low_resolution_size: low-resolution (height, width) or one int;
            each side must divide the high-resolution one.
        channels: colour channels per pixel (3 for RGB).
        num_intensities: intensity values per channel (256).
        interpolation: "nearest" (default) or "bicubic", see above.
        scale_embeddings: multiply the vectors by √D (as `PixelEmbedding`
            with `scale_token_embeddings=True`).
        embeddings_initializer: initializer of the tables.
        **kwargs: base `keras.layers.Layer` arguments.

    Call arguments:
        inputs: (B, T) or (B, T, D) decoder sequence; only its length T is
            read (T <= height * width * channels + 1; the position after
            the image's last intensity repeats the last one).
        low_resolution: (B, h * w * channels) int intensities in 0 ..
            num_intensities - 1, the raster sequence of the low-resolution
            image.
        start_index: int or int32 scalar, the absolute position of
            `inputs[:, 0]` (the cache index during decoding). Defaults to 0.

    Returns:
        (B, T, D) embeddings in the compute dtype.

    Raises:
        ValueError: on invalid arguments (non-positive sizes, a
            low-resolution side that does not divide the high-resolution
            one, an unknown `interpolation`), or a `low_resolution` input
            whose length is not h * w * channels.

    Example:
    >>> embed = LowResolutionEmbedding(16, image_size=8, low_resolution_size=2)
    >>> low = keras.ops.ones((2, 12), "int32")
    >>> tuple(embed(keras.ops.zeros((2, 192), "int32"), low).shape)
    (2, 192, 16)

    Reference:
        Parmar et al. 2018, "Image Transformer", section 5.2 (super
        resolution); the direct conditioning on the covering low-resolution
        value is this library's addition, in the spirit of the
        conditioning network of Dahl et al. 2017, "Pixel Recursive Super
        Resolution" (per-pixel logits from the low-resolution image).
    """

    def __init__(
        self,
        embedding_dim,
        image_size,
        low_resolution_size,
        channels=3,
        num_intensities=256,
        interpolation="nearest",
        scale_embeddings=True,
        embeddings_initializer="uniform",
        **kwargs,
    ):
        super().__init__(**kwargs)
        attention_ops.check_positive_int(self, "embedding_dim", embedding_dim)
        attention_ops.check_positive_int(self, "channels", channels)
        attention_ops.check_positive_int(self, "num_intensities", num_intensities)
        self.image_size = _as_image_size(self, image_size)
        self.low_resolution_size = _as_image_size(self, low_resolution_size)
        if any(big % small for big, small in zip(self.image_size, self.low_resolution_size)):
            raise ValueError(
                f"{type(self).__name__}: each side of `image_size` must be a multiple "
                f"of the same side of `low_resolution_size`. Received: "
                f"image_size={self.image_size}, low_resolution_size="
                f"{self.low_resolution_size}."
            )
        if interpolation not in INTERPOLATIONS:
            raise ValueError(
                f"{type(self).__name__}: `interpolation` must be one of "
                f"{INTERPOLATIONS}. Received: interpolation={interpolation!r}."
            )
        self.embedding_dim = embedding_dim
        self.channels = channels
        self.num_intensities = num_intensities
        self.interpolation = interpolation
        self.scale_embeddings = scale_embeddings
        self.embeddings_initializer = keras.initializers.get(embeddings_initializer)
        # Fixed weights of the bicubic upsampling, made once (not state: they
        # follow from the sizes).
        self._bicubic_matrices = tuple(
            _bicubic_weights(small, big).astype("float32")
            for small, big in zip(self.low_resolution_size, self.image_size)
        )
        self.embedding = keras.layers.Embedding(
            num_intensities * channels,
            embedding_dim,
            embeddings_initializer=clone_initializer(self.embeddings_initializer),
            dtype=self.dtype_policy,
            name="intensity_embedding",
        )

    @property
    def num_positions(self):
        """Intensities of the high-resolution image (height * width *
        channels)."""
        return self.image_size[0] * self.image_size[1] * self.channels

    def build(self, inputs_shape=None, low_resolution_shape=None):
        self.embedding.build()
        self.built = True

    def _check_length(self, low_resolution):
        low_height, low_width = self.low_resolution_size
        length = low_height * low_width * self.channels
        if len(low_resolution.shape) != 2 or low_resolution.shape[-1] not in (None, length):
            raise ValueError(
                f"{type(self).__name__}: `low_resolution` must be (batch, {length}), the "
                f"raster sequence of a {low_height}x{low_width}x{self.channels} image. "
                f"Received: low_resolution.shape={tuple(low_resolution.shape)}."
            )

    def _covering(self, positions):
        """High-resolution raster positions -> the raster index of the same
        channel of the low-resolution pixel covering them."""
        height, width = self.image_size
        low_height, low_width = self.low_resolution_size
        pixel, channel = positions // self.channels, positions % self.channels
        row, column = pixel // width, pixel % width
        low_pixel = (row // (height // low_height)) * low_width + column // (width // low_width)
        return low_pixel * self.channels + channel

    def _upsampled(self, low_resolution):
        """(B, h*w*C) low-resolution raster -> (B, H*W*C) int32 raster of
        its bicubic upsampling.

        Bicubic upsampling is linear: one (H, h) and one (W, w) matrix of
        cubic-convolution weights, applied with an einsum. That equals
        `tf.image.resize(..., "bicubic")` (tested), runs under XLA, where
        TensorFlow's bicubic resize has no kernel, and is the same on
        every backend.
        """
        self._check_length(low_resolution)
        low_height, low_width = self.low_resolution_size
        image = ops.reshape(low_resolution, (-1, low_height, low_width, self.channels))
        rows, columns = self._bicubic_matrices
        image = ops.einsum("ih,bhwc,jw->bijc", rows, ops.cast(image, "float32"), columns)
        image = ops.cast(ops.clip(ops.round(image), 0, self.num_intensities - 1), "int32")
        return ops.reshape(image, (-1, self.num_positions))

    def call(self, inputs, low_resolution, start_index=0):
        length = ops.shape(inputs)[1]
        positions = ops.arange(length, dtype="int32") + ops.cast(start_index, "int32")
        positions = ops.minimum(positions, self.num_positions - 1)
        if self.interpolation == "nearest":
            # Gather straight from the low-resolution raster: a decoding step
            # then reads one value instead of upsampling the whole image.
            self._check_length(low_resolution)
            values = ops.take(ops.cast(low_resolution, "int32"), self._covering(positions), axis=1)
        else:
            values = ops.take(self._upsampled(low_resolution), positions, axis=1)
        ids = values + ((positions % self.channels) * self.num_intensities)[None, :]
        embeddings = self.embedding(ids)
        if self.scale_embeddings:
            embeddings = embeddings * ops.cast(self.embedding_dim**0.5, embeddings.dtype)
        return embeddings

    def compute_output_shape(self, inputs_shape, low_resolution_shape=None):
        return (inputs_shape[0], inputs_shape[1], self.embedding_dim)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "embedding_dim": self.embedding_dim,
                "image_size": self.image_size,
                "low_resolution_size": self.low_resolution_size,
                "channels": self.channels,
                "num_intensities": self.num_intensities,
                "interpolation": self.interpolation,
                "scale_embeddings": self.scale_embeddings,
                "embeddings_initializer": keras.initializers.serialize(
                    self.embeddings_initializer
                ),
            }
        )
        return config


def _bicubic_weights(size_in, size_out):
    """(size_out, size_in) weights of 1D bicubic upsampling: Keys' cubic
    convolution (a = -0.5), half-pixel centres, taps outside the image
    dropped and the rest renormalised (TensorFlow's `resize_bicubic` with
    `half_pixel_centers=True`)."""

    def cubic(x):
        x = abs(x)
        if x <= 1:
            return 1.5 * x**3 - 2.5 * x**2 + 1
        if x < 2:
            return -0.5 * x**3 + 2.5 * x**2 - 4 * x + 2
        return 0.0

    weights = np.zeros((size_out, size_in))
    for i in range(size_out):
        x = (i + 0.5) * size_in / size_out - 0.5
        taps = [j for j in range(int(np.floor(x)) - 1, int(np.floor(x)) + 3) if 0 <= j < size_in]
        values = np.array([cubic(x - j) for j in taps])
        weights[i, taps] = values / values.sum()
    return weights
