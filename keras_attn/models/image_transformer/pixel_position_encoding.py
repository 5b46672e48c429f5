import keras
from keras import ops

from keras_attn import checks
from keras_attn.layers.arguments_config import ArgumentsConfig
from keras_attn.layers.attention_base import clone_initializer
from keras_attn.layers.attention_ops import dim, positions
from keras_attn.layers.sinusoidal_position_encoding import (
    check_max_wavelength,
    check_positions,
    sinusoids_at,
)


@keras.saving.register_keras_serializable(package="keras_attn")
class PixelPositionEncoding(ArgumentsConfig, keras.layers.Layer):
    """2D position encoding of an image's channel intensities in raster order.

    Position `p` has the coordinates `row = p // (width * channels)` and `column_channel =
    p % (width * channels)`; half of the D features encode each, with sinusoids (sin on even,
    cos on odd features) or learned tables. Positions `0 .. H * W * C` are accepted (an image
    behind a start token; a learned row table repeats its last row there). With
    `coordinate_scale` s (sinusoidal only), pixel (row, column) sits at `((row + 0.5) * s - 0.5,
    (column + 0.5) * s - 0.5)`: a low-resolution image encoded with the upscaling factor gets
    the coordinates of the image it was made from (docs/guides/image_transformer.md).

    Args:
        image_size: (height, width), or one int.
        channels: colour channels per pixel.
        position: "sinusoidal" (D divisible by 4) or "learned" (D even).
        max_wavelength: longest wavelength of the sinusoids (a finite number >= 1).
        coordinate_scale: finite positive distance between pixel centres; 1.0 = pixel indices.
            The scaled coordinates must stay below 2**24.
        embeddings_initializer: initializer of the learned tables.
        **kwargs: base `keras.layers.Layer` arguments.

    Call arguments:
        inputs: (B, T, D) embeddings; only the shape is used.
        start_index: int or int32 scalar, the absolute position of `inputs[:, 0]`.

    Returns:
        (B, T, D) encoding in the compute dtype (broadcast over B).

    Raises:
        ValueError: on invalid arguments (a `coordinate_scale` other than 1 with learned
            positions among them); inputs not (B, T, D) with D divisible by 4 (sinusoidal) or
            2 (learned); a non-integer `start_index`; known positions outside `0 .. H * W * C`.

    Example:
    >>> import keras
    >>> from keras_attn.models.image_transformer import PixelPositionEncoding
    >>> encoding = PixelPositionEncoding(image_size=32, channels=3)
    >>> x = keras.ops.zeros((2, 3072, 64))
    >>> tuple((x + encoding(x)).shape)
    (2, 3072, 64)

    Reference:
        Parmar et al. 2018, "Image Transformer", section 3.1.
    """

    def __init__(
        self,
        image_size,
        channels=3,
        position="sinusoidal",
        max_wavelength=10000,
        coordinate_scale=1.0,
        embeddings_initializer="uniform",
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.image_size = checks.check_image_size(image_size, owner=self)
        checks.check_positive_int(self, "channels", channels)
        check_max_wavelength(max_wavelength)
        ok = position in ("sinusoidal", "learned")
        checks.require(ok, "position", position, '"sinusoidal" or "learned"')
        # Float32 tells neighbouring positions apart only below 2**24.
        extent = max(self.image_size[0], self.image_size[1] * channels)
        checks.require(
            checks.is_number(coordinate_scale)
            and 0 < coordinate_scale * extent < 2**24
            and (position == "sinusoidal" or coordinate_scale == 1),
            "coordinate_scale",
            coordinate_scale,
            "a finite number > 0 that keeps the scaled pixel "
            "coordinates below 2**24, and 1 with learned positions",
            f"Use the upscaling factor (4 for 8x8 -> 32x32); image_size={self.image_size}, "
            f"channels={channels}, position={position!r}.",
        )
        self.channels = channels
        self.position = position
        self._table = (  # for the message of a position outside the image
            f"the {self.num_positions} positions of a {self.image_size[0]}x{self.image_size[1]} "
            f"image with {channels} channels plus its start token (build the layer with the "
            "right `image_size` and `channels`)"
        )
        self.max_wavelength = max_wavelength
        self.coordinate_scale = coordinate_scale
        self.embeddings_initializer = keras.initializers.get(embeddings_initializer)
        self.supports_masking = True
        self.input_spec = keras.layers.InputSpec(ndim=3)

    @property
    def num_positions(self):
        """Positions accepted: height * width * channels + 1."""
        height, width = self.image_size
        return height * width * self.channels + 1

    max_positions = num_positions  # the name `CachedDecoder` reads

    def _check_width(self, width, name="inputs.shape[-1]"):
        multiple = 4 if self.position == "sinusoidal" else 2
        ok = width is not None and width % multiple == 0
        halves = "half encodes the row, half the column and channel"
        expected = f"divisible by {multiple} for {self.position} positions ({halves})"
        checks.require(ok, name, width, expected)

    def build(self, inputs_shape):
        self._check_width(inputs_shape[-1])
        if self.position == "learned":
            height, width = self.image_size
            self._row_embedding = self._learned_table(height, inputs_shape[-1], "row_embedding")
            self._column_channel_embedding = self._learned_table(
                width * self.channels, inputs_shape[-1], "column_channel_embedding"
            )
        self.built = True

    def _learned_table(self, rows, dim, name):
        """A built learned table of `rows` vectors, half the width `dim`."""
        table = keras.layers.Embedding(
            rows,
            dim // 2,
            embeddings_initializer=clone_initializer(self.embeddings_initializer),
            dtype=self.dtype_policy,
            name=name,
        )
        table.build()
        return table

    def call(self, inputs, start_index=0):
        length = dim(inputs, 1)
        check_positions(start_index, length, self.num_positions, self._table)
        encoding = ops.cast(self.encode(length, inputs.shape[-1], start_index), self.compute_dtype)
        return ops.broadcast_to(encoding, ops.shape(inputs))

    def encode(self, length, dim, start_index=0):
        """The (length, dim) encoding of positions `start_index ...`."""
        positions = positions_from(start_index, length)
        _, width = self.image_size
        row = positions // (width * self.channels)
        column_channel = positions % (width * self.channels)
        if self.position == "learned":
            row = ops.minimum(row, self.image_size[0] - 1)
            return ops.concatenate(
                [self._row_embedding(row), self._column_channel_embedding(column_channel)],
                axis=-1,
            )
        half = dim // 2
        row = ops.cast(row, "float32")
        column_channel = ops.cast(column_channel, "float32")
        if self.coordinate_scale != 1:
            scale = float(self.coordinate_scale)
            column = ops.floor(column_channel / self.channels)
            channel = column_channel - column * self.channels
            row = (row + 0.5) * scale - 0.5
            column_channel = ((column + 0.5) * scale - 0.5) * self.channels + channel
        # (T, 2, D / 2) -> (T, D): the row's sinusoids, then the column and channel's.
        both = sinusoids_at(ops.stack([row, column_channel], axis=-1), half, self.max_wavelength)
        return ops.reshape(both, (-1, dim))

    def compute_output_shape(self, inputs_shape):
        return tuple(inputs_shape)


def positions_from(start_index, length):
    """(length,) int32 positions `start_index ...`; for an int `length`, one constant plus
    `start_index` (a decoding step's graph builds no range)."""
    return ops.add(ops.cast(start_index, "int32"), positions(length))
