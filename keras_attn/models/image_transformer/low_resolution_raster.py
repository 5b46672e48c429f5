"""Internal: where a high-resolution raster position sits on the low-resolution image.

The geometry shared by the `LowResolution*` layers; the formulas are derived in
docs/guides/image_transformer.md.
"""

import numpy as np
from keras import ops

from keras_attn.checks import check_image_size, check_sizes, require, static_shape_mismatch
from keras_attn.models.image_transformer.pixel_position_encoding import positions_from

INTERPOLATIONS = ("nearest", "bicubic")
# How much of the left pixel's residual the prior centre follows (measured on CIFAR-10).
LEFT_RESIDUAL_WEIGHT = 0.75


class LowResolutionRaster:
    """Low-resolution intensities at high-resolution raster positions.

    Args:
        image_size, low_resolution_size: (height, width) or one int; the second divides the first.
        channels, num_intensities: colour channels per pixel, intensity values per channel.
        interpolation: "nearest" or "bicubic".

    Raises:
        ValueError: on non-positive sizes, a low-resolution side that does not divide the
            high-resolution one, an unknown `interpolation` (the layers' constructor checks).
    """

    def __init__(self, image_size, low_resolution_size, channels, num_intensities, interpolation):
        check_sizes(channels=channels, num_intensities=num_intensities)
        self.image_size = check_image_size(image_size)
        self.low_resolution_size = check_image_size(low_resolution_size, "low_resolution_size")
        sides = zip(self.image_size, self.low_resolution_size)
        require(
            not any(big % small for big, small in sides),
            "image_size",
            self.image_size,
            f"a multiple of `low_resolution_size`={self.low_resolution_size} on each side",
        )
        require(
            interpolation in INTERPOLATIONS,
            "interpolation",
            interpolation,
            f"one of {INTERPOLATIONS}",
        )
        self.channels = channels
        self.num_intensities = num_intensities
        self.interpolation = interpolation
        # Fixed weights of the bicubic upsampling (not state: they follow from the sizes).
        self._bicubic_matrices = tuple(
            _bicubic_weights(small, big).astype("float32")
            for small, big in zip(self.low_resolution_size, self.image_size)
        )
        # Per-position constants of the geometry, read with one gather (a decoding step would
        # otherwise rebuild them from the position with a dozen integer ops each).
        every = np.arange(self.num_positions)
        self._covering = self._covering_formula(every).astype("int32")
        self._pixels_left = (self.block_area - self._order_formula(every)).astype("float32")

    @property
    def num_positions(self):
        """Intensities of the high-resolution image (H * W * C)."""
        return self.image_size[0] * self.image_size[1] * self.channels

    def positions(self, length, start_index=0):
        """(length,) int32 positions from `start_index`; past the image, the last one."""
        return ops.minimum(positions_from(start_index, length), self.num_positions - 1)

    def check_batch(self, low_resolution, reference, reference_name):
        """Refuses, where static, a `low_resolution` that is not (B, h * w * C) for `reference`."""
        (low_height, low_width), shape = self.low_resolution_size, tuple(low_resolution.shape)
        wanted = (reference.shape[0], low_height * low_width * self.channels)
        require(
            not static_shape_mismatch(shape, wanted),
            "low_resolution.shape",
            shape,
            f"{wanted}: one {low_height}x{low_width}x{self.channels} image in raster order "
            f"per row of `{reference_name}`",
        )

    def values(self, low_resolution):
        """(B, h*w*C) int intensities -> (B, H*W*C, 4) float32: at each high-resolution
        position `p`, the interpolated value `b[p]` (the covering value `L[p]` for nearest), the
        block's total `a * L[p]` (its `a` pixels at the input value), `R[p]`, the sum of `b` over
        the rest of the block from `p` on, and `r[p]`, the block's pixels from `p` on. They
        depend on the low-resolution image only (`r` not even on it): a decoder computes them
        once (`LowResolutionValues`), and a step reads them with one gather."""
        low = ops.take(ops.cast(low_resolution, "float32"), self._covering, axis=1)
        pixels_left = ops.broadcast_to(self._pixels_left[None, :], ops.shape(low))
        if self.interpolation == "nearest":
            # Every pixel of the block interpolates to L.
            interpolated, remaining = low, low * pixels_left
        else:
            interpolated = self._upsampled(low_resolution)
            remaining = self._remaining_sums(interpolated)
        return ops.stack([interpolated, self.block_area * low, remaining, pixels_left], axis=-1)

    def channel_value_ids(
        self,
        values,
        length,
        start_index=0,
        block_sums=None,
        previous_intensities=None,
        max_correction=None,
        left_intensities=None,
        previous_block_sums=None,
    ):
        """(B, H*W*C, 4) `values` -> (B, length) int32 rows `channel * N + value` of a
        per-channel table, at positions `start_index ...`. The optional (B, length) inputs
        pick the value as `LowResolutionLogitBias` documents them."""
        positions = self.positions(length, start_index)
        channel = positions % self.channels

        def centre(at, sums):
            """(B, T) float: the interpolated value `b[p]` at `at`, or its consistent value
            `c[p]` given the block sums `sums` before each position."""
            if sums is None:
                return self._interpolated(values, at)
            return self._consistent(values, at, sums, max_correction)

        value = consistent = centre(positions, block_sums)
        if block_sums is not None and left_intensities is not None:
            # `c[p] + 0.75 * (x[p - C] - c[p - C])`.
            residual = self._left_residual(
                values, positions, block_sums, left_intensities, max_correction
            )
            value = value + LEFT_RESIDUAL_WEIGHT * residual
        ids = self._intensities(value)
        if previous_intensities is not None and self.channels > 1:
            # Green and blue follow the channel before: `c[p] + (x[p - 1] - c[p - 1])`, from
            # the consistent values when both block sums are given, else the interpolated.
            both = block_sums is not None and previous_block_sums is not None
            here = consistent if both else centre(positions, None)
            there = centre(ops.maximum(positions - 1, 0), previous_block_sums if both else None)
            following = self._intensities(here + self._clipped(previous_intensities) - there)
            ids = ops.where(channel > 0, following, ids)
        return ids + channel * self.num_intensities

    @property
    def block_area(self):
        """High-resolution pixels per low-resolution pixel (16 for 4x)."""
        (height, width), (low_height, low_width) = self.image_size, self.low_resolution_size
        return (height // low_height) * (width // low_width)

    def _intensities(self, value):
        """Float values -> int32 intensities, rounded and clipped."""
        return ops.cast(ops.clip(ops.round(value), 0, self.num_intensities - 1), "int32")

    def _clipped(self, intensities):
        """Int intensities -> float32, clipped to [0, N - 1]."""
        return ops.cast(ops.clip(intensities, 0, self.num_intensities - 1), "float32")

    def _interpolated(self, values, positions):
        """(B, T) float32 interpolated values `b[p]` at (T,) `positions`, from `values(...)`."""
        return ops.take(values[..., 0], positions, axis=1)

    def _consistent(self, values, positions, block_sums, max_correction):
        """(B, T) float32 `b[p] + (a * L - s - R[p]) / r[p]`: the interpolated value corrected
        so each block averages to its input value, the block's deficit spread over its `r`
        pixels left. `values` are `values(...)`; `block_sums` (B, T) is `s`, the block's sum
        before each position (`LowResolutionBlockSums`); `max_correction` bounds the
        correction."""
        at = ops.take(values, positions, axis=1)
        interpolated, total, remaining, pixels_left = ops.unstack(at, axis=-1)
        deficit = total - ops.cast(block_sums, "float32") - remaining
        correction = deficit / pixels_left
        if max_correction is not None:
            correction = ops.clip(correction, -max_correction, max_correction)
        return interpolated + correction

    def _left_residual(self, values, positions, block_sums, left_intensities, max_correction):
        """(B, T) float `x[p - C] - c[p - C]`: the left pixel's residual from its consistent
        value (from its interpolated value across a block's left edge; 0 in the first column).
        `left_intensities` (B, T) int is `x[p - C]`."""
        width, block_width = self.image_size[1], self.image_size[1] // self.low_resolution_size[1]
        column = (positions // self.channels) % width
        left_positions = ops.maximum(positions - self.channels, 0)
        left = self._clipped(left_intensities)
        left_consistent = self._consistent(
            values, left_positions, ops.cast(block_sums, "float32") - left, max_correction
        )
        left_interpolated = self._interpolated(values, left_positions)
        same_block = (column % block_width > 0)[None, :]
        residual = left - ops.where(same_block, left_consistent, left_interpolated)
        return ops.where((column > 0)[None, :], residual, 0.0)

    def _remaining_sums(self, raster):
        """(B, H*W*C) float -> (B, H*W*C): the sum of its block's values from each position on."""
        height, width = self.image_size
        low_height, low_width = self.low_resolution_size
        fy, fx = height // low_height, width // low_width
        x = ops.reshape(raster, (-1, low_height, fy, low_width, fx, self.channels))
        x = ops.reshape(
            ops.transpose(x, (0, 1, 3, 5, 2, 4)),
            (-1, low_height, low_width, self.channels, fy * fx),
        )
        x = ops.flip(ops.cumsum(ops.flip(x, axis=-1), axis=-1), axis=-1)
        x = ops.reshape(x, (-1, low_height, low_width, self.channels, fy, fx))
        return ops.reshape(ops.transpose(x, (0, 1, 4, 2, 5, 3)), (-1, self.num_positions))

    def covering_index(self, positions):
        """(T,) positions in `[0, H*W*C)` -> (T,) int32 raster index of the covering
        low-resolution intensity."""
        return ops.take(self._covering, positions, axis=0)

    def _covering_formula(self, positions):
        """`covering_index` of (T,) numpy positions, computed."""
        height, width = self.image_size
        low_height, low_width = self.low_resolution_size
        pixel, channel = positions // self.channels, positions % self.channels
        row, column = pixel // width, pixel % width
        low_pixel = (row // (height // low_height)) * low_width + column // (width // low_width)
        return low_pixel * self.channels + channel

    def _order_formula(self, positions):
        """(T,) numpy positions -> pixels of the same block before each (raster order)."""
        height, width = self.image_size
        low_height, low_width = self.low_resolution_size
        pixel = positions // self.channels
        row, column = pixel // width, pixel % width
        block_width = width // low_width
        return (row % (height // low_height)) * block_width + column % block_width

    def _upsampled(self, low_resolution):
        """(B, h*w*C) -> (B, H*W*C) float32 bicubic upsampling, clipped to [0, N - 1]: two
        matrices of cubic weights in an einsum, equal to `tf.image.resize(..., "bicubic")`
        (before rounding) and compiled by XLA on every backend."""
        low_height, low_width = self.low_resolution_size
        image = ops.reshape(low_resolution, (-1, low_height, low_width, self.channels))
        rows, columns = self._bicubic_matrices
        image = ops.einsum("ih,bhwc,jw->bijc", rows, ops.cast(image, "float32"), columns)
        image = ops.clip(image, 0, self.num_intensities - 1)
        return ops.reshape(image, (-1, self.num_positions))


class RasterGeometry:
    """Mixin: the sizes of a layer that holds a `LowResolutionRaster` as `self.raster`."""

    image_size = property(
        lambda self: self.raster.image_size, doc="(height, width) of the high-resolution image."
    )
    low_resolution_size = property(
        lambda self: self.raster.low_resolution_size,
        doc="(height, width) of the low-resolution image.",
    )
    channels = property(lambda self: self.raster.channels, doc="Colour channels per pixel.")
    num_intensities = property(
        lambda self: self.raster.num_intensities, doc="Intensity values per channel."
    )
    interpolation = property(lambda self: self.raster.interpolation, doc='"nearest" or "bicubic".')
    num_positions = property(
        lambda self: self.raster.num_positions,
        doc="Intensities of the high-resolution image (H * W * C).",
    )


def _bicubic_weights(size_in, size_out):
    """(size_out, size_in) 1D bicubic weights: Keys' cubic (a = -0.5), half-pixel centres,
    outside taps dropped and the rest renormalised (TensorFlow's `resize_bicubic`)."""

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
