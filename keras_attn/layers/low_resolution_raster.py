"""Where a high-resolution raster position sits on the low-resolution image.

The geometry shared by `LowResolutionEmbedding` and `LowResolutionLogitBias`
(one home): the low-resolution intensity at each position of a
high-resolution raster sequence of channel intensities
(`keras_attn.preprocessing.images` layout), by the covering pixel
("nearest") or by bicubic upsampling. Internal; not a layer.
"""

import numpy as np
from keras import ops

from keras_attn.checks import check_image_size, check_positive_int

INTERPOLATIONS = ("nearest", "bicubic")


class LowResolutionRaster:
    """Low-resolution intensities at high-resolution raster positions.

    Args:
        owner: the layer using it (named in error messages).
        image_size: high-resolution (height, width), or one int.
        low_resolution_size: low-resolution (height, width), or one int;
            each side must divide the high-resolution one.
        channels: colour channels per pixel.
        num_intensities: intensity values per channel.
        interpolation: "nearest" or "bicubic".

    Raises:
        ValueError: on non-positive sizes, a low-resolution side that does
            not divide the high-resolution one, an unknown `interpolation`.
    """

    def __init__(self, owner, image_size, low_resolution_size, channels, num_intensities,
                 interpolation):
        name = type(owner).__name__
        check_positive_int(owner, "channels", channels)
        check_positive_int(owner, "num_intensities", num_intensities)
        self.owner_name = name
        self.image_size = check_image_size(image_size, owner=owner)
        self.low_resolution_size = check_image_size(low_resolution_size, "low_resolution_size", owner)
        if any(big % small for big, small in zip(self.image_size, self.low_resolution_size)):
            raise ValueError(
                f"{name}: each side of `image_size` must be a multiple "
                f"of the same side of `low_resolution_size`. Received: "
                f"image_size={self.image_size}, low_resolution_size="
                f"{self.low_resolution_size}."
            )
        if interpolation not in INTERPOLATIONS:
            raise ValueError(
                f"{name}: `interpolation` must be one of "
                f"{INTERPOLATIONS}. Received: interpolation={interpolation!r}."
            )
        self.channels = channels
        self.num_intensities = num_intensities
        self.interpolation = interpolation
        # Fixed weights of the bicubic upsampling, made once (not state: they
        # follow from the sizes).
        self._bicubic_matrices = tuple(
            _bicubic_weights(small, big).astype("float32")
            for small, big in zip(self.low_resolution_size, self.image_size)
        )

    @property
    def num_positions(self):
        """Intensities of the high-resolution image (H * W * C)."""
        return self.image_size[0] * self.image_size[1] * self.channels

    def positions(self, length, start_index=0):
        """(length,) int32 absolute positions from `start_index`; the
        positions past the image's last intensity repeat the last one."""
        positions = ops.arange(length, dtype="int32") + ops.cast(start_index, "int32")
        return ops.minimum(positions, self.num_positions - 1)

    def check_length(self, low_resolution):
        low_height, low_width = self.low_resolution_size
        length = low_height * low_width * self.channels
        if len(low_resolution.shape) != 2 or low_resolution.shape[-1] not in (None, length):
            raise ValueError(
                f"{self.owner_name}: `low_resolution` must be (batch, {length}), the "
                f"raster sequence of a {low_height}x{low_width}x{self.channels} image. "
                f"Received: low_resolution.shape={tuple(low_resolution.shape)}."
            )

    def values(self, low_resolution, positions):
        """(B, h*w*C) low-resolution raster, (T,) positions -> (B, T) int32
        low-resolution intensities there (same channel)."""
        self.check_length(low_resolution)
        if self.interpolation == "nearest":
            # Gather straight from the low-resolution raster: a decoding step
            # then reads one value instead of upsampling the whole image.
            return ops.take(ops.cast(low_resolution, "int32"), self._covering(positions), axis=1)
        return ops.take(self._upsampled(low_resolution), positions, axis=1)

    def channel_value_ids(self, low_resolution, length, start_index=0):
        """(B, h*w*C) low-resolution raster -> (B, length) int32 ids
        `channel * num_intensities + value` of positions `start_index ..
        start_index + length - 1`: the row of a per-channel table (C * N
        rows) that both low-resolution layers look up."""
        positions = self.positions(length, start_index)
        values = self.values(low_resolution, positions)
        return values + ((positions % self.channels) * self.num_intensities)[None, :]

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
        low_height, low_width = self.low_resolution_size
        image = ops.reshape(low_resolution, (-1, low_height, low_width, self.channels))
        rows, columns = self._bicubic_matrices
        image = ops.einsum("ih,bhwc,jw->bijc", rows, ops.cast(image, "float32"), columns)
        image = ops.cast(ops.clip(ops.round(image), 0, self.num_intensities - 1), "int32")
        return ops.reshape(image, (-1, self.num_positions))


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
