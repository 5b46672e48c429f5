import numpy as np
import pytest

from keras_attn.models.image_transformer import PixelEmbedding, PixelPositionEncoding
from tests.test_case import run_layer_test


def _sinusoid(value, dim):
    out = np.zeros(dim)
    for i in range(dim // 2):
        angle = value / 10000 ** (2 * i / dim)
        out[2 * i], out[2 * i + 1] = np.sin(angle), np.cos(angle)
    return out


def test_sinusoidal_half_row_half_column_and_channel():
    # A 2 x 3 image with 3 channels: 18 positions (+1 after the image).
    layer = PixelPositionEncoding(image_size=(2, 3), channels=3)
    out = np.asarray(layer(np.zeros((2, 5, 8), "float32"), start_index=7))
    for t in range(5):
        p = 7 + t
        row, column_channel = p // 9, p % 9  # 9 = width * channels
        want = np.concatenate([_sinusoid(row, 4), _sinusoid(column_channel, 4)])
        np.testing.assert_allclose(out[0, t], want, atol=1e-5)
        np.testing.assert_allclose(out[1, t], want, atol=1e-5)
    # Position p = 10: row 1, column 0, channel 1 -> column_channel 1.
    np.testing.assert_allclose(out[0, 3, 4:], _sinusoid(1, 4), atol=1e-6)


def test_learned_tables_and_the_position_after_the_image():
    layer = PixelPositionEncoding(image_size=2, channels=3, position="learned")
    out = np.asarray(layer(np.zeros((1, 13, 6), "float32")))
    rows = np.asarray(layer._row_embedding.embeddings)
    columns = np.asarray(layer._column_channel_embedding.embeddings)
    assert rows.shape == (2, 3) and columns.shape == (6, 3)
    for p in range(12):
        np.testing.assert_allclose(out[0, p], np.concatenate([rows[p // 6], columns[p % 6]]))
    # Position 12 (after the image, fed by the sampling loop): last row repeated.
    np.testing.assert_allclose(out[0, 12], np.concatenate([rows[1], columns[0]]))


@pytest.mark.parametrize("position", ["sinusoidal", "learned"])
def test_layer_life_cycle(position):
    run_layer_test(
        PixelPositionEncoding,
        {"image_size": (2, 2), "channels": 3, "position": position},
        np.zeros((2, 12, 8), "float32"),
        expected_output_shape=(2, 12, 8),
        run_fit=position == "learned",
    )


def test_errors():
    with pytest.raises(ValueError, match=r"`image_size` must be a positive int or a pair"):
        PixelPositionEncoding(image_size=(0, 4))
    with pytest.raises(ValueError, match='`position` must be "sinusoidal" or "learned"'):
        PixelPositionEncoding(image_size=4, position="rotary")
    with pytest.raises(
        ValueError,
        match=r"`inputs.shape\[-1\]` must be divisible by 4 for sinusoidal positions.*"
        r"Received: inputs.shape\[-1\]=6",
    ):
        PixelPositionEncoding(image_size=4)(np.zeros((1, 3, 6), "float32"))
    with pytest.raises(
        ValueError,
        match=r"must be >= 0 and fit the 13 positions of a 2x2 image.* Received: positions 10\.\.13\.",
    ):
        PixelPositionEncoding(image_size=2)(np.zeros((1, 4, 8), "float32"), start_index=10)
    with pytest.raises(ValueError, match=r"expected ndim=3, found ndim=2"):
        PixelPositionEncoding(image_size=2)(np.zeros((1, 4), "float32"))


def test_coordinate_scale_places_low_resolution_pixels_on_the_fine_grid():
    layer = PixelPositionEncoding(image_size=2, channels=3, coordinate_scale=4)
    out = np.asarray(layer(np.zeros((1, 12, 8), "float32")))
    # Position 4: row 0, column 1, channel 1 -> row 1.5, column 5.5 on the
    # 8x8 grid, column_channel 5.5 * 3 + 1 = 17.5.
    np.testing.assert_allclose(
        out[0, 4], np.concatenate([_sinusoid(1.5, 4), _sinusoid(17.5, 4)]), atol=1e-5
    )
    # Every coarse pixel sits at the centre of the 4x4 block it was averaged
    # from: row 4 i + 1.5, column 4 j + 1.5 (fine grid), channel unchanged.
    for p in range(12):
        i, j, channel = p // 6, (p // 3) % 2, p % 3
        want = np.concatenate(
            [_sinusoid(4 * i + 1.5, 4), _sinusoid((4 * j + 1.5) * 3 + channel, 4)]
        )
        np.testing.assert_allclose(out[0, p], want, atol=1e-5)
    with pytest.raises(
        ValueError,
        match=r"`coordinate_scale` must be .*and 1 with learned positions.*coordinate_scale=4",
    ):
        PixelPositionEncoding(image_size=2, position="learned", coordinate_scale=4)
    with pytest.raises(
        ValueError, match=r"`coordinate_scale` must be a finite number > 0 that keeps"
    ):
        PixelPositionEncoding(image_size=2, coordinate_scale=0)


def test_start_index_must_be_an_integer_scalar():
    # 1.5 was truncated to position 1, as TokenAndPositionEmbedding refuses.
    with pytest.raises(
        ValueError, match=r"`start_index` must be an integer scalar .*Received: start_index=1\.5"
    ):
        PixelPositionEncoding(image_size=2)(np.zeros((1, 2, 8), "float32"), start_index=1.5)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), True, "x", 0, None])
@pytest.mark.parametrize("name", ["max_wavelength", "coordinate_scale"])
def test_max_wavelength_and_coordinate_scale_must_be_finite_positive_numbers(name, value):
    bound = ">= 1" if name == "max_wavelength" else "> 0"
    with pytest.raises(
        ValueError, match=rf"^`{name}` must be a finite number {bound} .*Received: {name}="
    ):
        PixelPositionEncoding(image_size=2, **{name: value})
    # PixelEmbedding passes both to its PixelPositionEncoding.
    with pytest.raises(ValueError, match=rf"`{name}` must be a finite number {bound}"):
        PixelEmbedding(4, 8, image_size=2, **{name: value})


def test_extreme_wavelengths_and_scales_are_refused_not_turned_into_nan():
    # Both gave a NaN encoding: 1e-300 ** -0.75 and 3 * 1e300 overflow float32.
    with pytest.raises(
        ValueError,
        match=r"`max_wavelength` must be a finite number >= 1 .*Received: max_wavelength=1e-300",
    ):
        PixelPositionEncoding(image_size=2, max_wavelength=1e-300)
    with pytest.raises(
        ValueError,
        match=r"keeps the scaled pixel coordinates below 2\*\*24.*Received: coordinate_scale=1e\+300\. "
        r"Use the upscaling factor.*image_size=\(4, 4\), channels=3",
    ):
        PixelPositionEncoding(image_size=4, channels=3, coordinate_scale=1e300)
    # The largest scale below the bound still gives a finite encoding.
    layer = PixelPositionEncoding(image_size=4, channels=3, coordinate_scale=1e6, max_wavelength=1)
    out = np.asarray(layer(np.zeros((1, 49, 8), "float32")))
    assert np.isfinite(out).all()
