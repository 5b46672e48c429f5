import numpy as np
import pytest

from keras_attn.layers import SinusoidalPositionEncoding, TokenAndPositionEmbedding
from tests.test_case import run_layer_test, traced


def test_sinusoids_match_the_paper_formula():
    layer = SinusoidalPositionEncoding()
    out = np.asarray(layer(np.zeros((2, 5, 6), "float32"), start_index=3))
    want = np.zeros((5, 6))
    for pos in range(5):
        for i in range(3):
            angle = (pos + 3) / 10000 ** (2 * i / 6)
            want[pos, 2 * i], want[pos, 2 * i + 1] = np.sin(angle), np.cos(angle)
    np.testing.assert_allclose(out[0], want, atol=1e-5)
    np.testing.assert_allclose(out[1], want, atol=1e-5)


def test_learned_positions_and_mask():
    run_layer_test(
        TokenAndPositionEmbedding,
        {"vocabulary_size": 11, "embedding_dim": 8, "sequence_length": 6, "mask_zero": True},
        np.array([[1, 2, 3, 0, 0, 0], [4, 5, 6, 7, 8, 9]], "int32"),
        expected_output_shape=(2, 6, 8),
        run_mixed_precision=False,
        run_fit=False,
    )
    layer = TokenAndPositionEmbedding(
        11, 8, sequence_length=6, mask_zero=True, scale_token_embeddings=True
    )
    ids = np.array([[3, 0]])
    out = np.asarray(layer(ids, start_index=2))
    tokens = np.asarray(layer.token_embedding.embeddings)
    positions = np.asarray(layer.position_embedding.embeddings)
    np.testing.assert_allclose(out[0, 0], tokens[3] * np.sqrt(8) + positions[2], atol=1e-6)
    np.testing.assert_allclose(out[0, 1], tokens[0] * np.sqrt(8) + positions[3], atol=1e-6)
    np.testing.assert_array_equal(np.asarray(layer.compute_mask(ids)), [[True, False]])


def test_sinusoidal_positions_work_past_any_table():
    layer = TokenAndPositionEmbedding(11, 8, position="sinusoidal")
    out = np.asarray(layer(np.ones((1, 3), "int32"), start_index=5000))
    assert np.isfinite(out).all()


TABLE_MESSAGE = (
    r"Positions \(from `start_index`\) must be >= 0 and fit the learned position table of 4 "
    r"rows: raise `sequence_length`\. Received: positions {}\.\.{}\."
)


def test_positions_beyond_the_learned_table():
    layer = TokenAndPositionEmbedding(11, 8, sequence_length=4)
    with pytest.raises(ValueError, match=TABLE_MESSAGE.format(2, 5)):
        layer(np.ones((1, 4), "int32"), start_index=2)
    # Traced positions are the caller's to check (the generation loops keep
    # them in the table): the layer clamps them to its last row, never
    # gathering out of range.
    embed = traced(lambda ids, start: layer(ids, start_index=start))
    last = np.asarray(layer(np.ones((1, 1), "int32"), start_index=3))
    np.testing.assert_allclose(
        np.asarray(embed(np.ones((1, 1), "int32"), np.int32(3))), last, atol=1e-6
    )
    np.testing.assert_allclose(
        np.asarray(embed(np.ones((1, 1), "int32"), np.int32(9))), last, atol=1e-6
    )


def test_errors():
    with pytest.raises(ValueError, match="sequence_length` must be a positive integer"):
        TokenAndPositionEmbedding(10, 8)
    with pytest.raises(ValueError, match=r"position` must be one of \('learned', 'sinusoidal'\)"):
        TokenAndPositionEmbedding(10, 8, 4, position="rotary")
    with pytest.raises(ValueError, match="`embedding_dim` must be even for sinusoidal positions"):
        TokenAndPositionEmbedding(10, 7, position="sinusoidal")
    with pytest.raises(ValueError, match=r"expected ndim=2, found ndim=3"):
        TokenAndPositionEmbedding(10, 8, 4)(np.ones((1, 2, 3), "int32"))


def test_sinusoidal_encoding_refuses_start_indices_as_token_and_position_embedding_does():
    x = np.zeros((1, 2, 8), "float32")
    layer = SinusoidalPositionEncoding()
    # A float was truncated to 1, a negative index silently encoded.
    with pytest.raises(
        ValueError, match=r"`start_index` must be an integer scalar .*Received: start_index=1\.5"
    ):
        layer(x, start_index=1.5)
    with pytest.raises(
        ValueError,
        match=r"Positions \(from `start_index`\) must be >= 0\. Received: positions -1\.\.0\.",
    ):
        layer(x, start_index=-1)
    # Integer scalars of any kind are still positions.
    want = np.asarray(layer(x, start_index=3))
    for start in (np.int64(3), np.array(3, "int32")):
        np.testing.assert_allclose(np.asarray(layer(x, start_index=start)), want)


@pytest.mark.parametrize(
    "max_wavelength", [float("nan"), float("inf"), True, "x", 0, -2.0, None, 0.5, 1e-300]
)
def test_sinusoidal_encoding_refuses_a_max_wavelength_that_is_not_a_finite_number_from_1(
    max_wavelength,
):
    # 1e-300 gave NaN: 1e-300 ** -0.75 overflows float32.
    with pytest.raises(
        ValueError,
        match=r"^`max_wavelength` must be a finite number >= 1 .*Received: max_wavelength=",
    ):
        SinusoidalPositionEncoding(max_wavelength=max_wavelength)


@pytest.mark.parametrize("max_wavelength", [float("nan"), float("inf"), True, "x", 0, 1e-300])
def test_token_and_position_embedding_refuses_a_max_wavelength_that_is_not_a_finite_number_from_1(
    max_wavelength,
):
    with pytest.raises(ValueError, match=r"`max_wavelength` must be a finite number >= 1"):
        TokenAndPositionEmbedding(10, 8, position="sinusoidal", max_wavelength=max_wavelength)
