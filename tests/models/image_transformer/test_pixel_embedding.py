import numpy as np
import pytest

from keras_attn.models.image_transformer import PixelEmbedding, PixelPositionEncoding
from tests.test_case import run_layer_test


def test_channel_specific_tables_plus_positions():
    layer = PixelEmbedding(5, 8, image_size=(2, 2), channels=3, scale_token_embeddings=True)
    ids = np.array([[4, 0, 1, 3, 2, 2, 0], [1, 1, 1, 1, 1, 1, 1]])
    out = np.asarray(layer(ids, start_index=2))
    table = np.asarray(layer.token_embedding.embeddings)
    assert table.shape == (15, 8)  # 3 channels x 5 ids
    positions = np.asarray(PixelPositionEncoding(image_size=2, channels=3).encode(9, 8, 2))
    for b in range(2):
        for t in range(7):
            channel = (2 + t) % 3
            want = table[ids[b, t] + 5 * channel] * np.sqrt(8) + positions[t]
            np.testing.assert_allclose(out[b, t], want, atol=1e-5)
    # The same id at positions of different channels gets different vectors.
    assert not np.allclose(out[1, 0], out[1, 1] - positions[1] + positions[0])


def test_chunks_with_start_index_equal_the_full_sequence():
    layer = PixelEmbedding(257, 16, image_size=4, position="learned")
    ids = np.random.default_rng(0).integers(0, 257, (2, 49))
    full = np.asarray(layer(ids))
    pieces = [np.asarray(layer(ids[:, s : s + 5], start_index=s)) for s in range(0, 49, 5)]
    np.testing.assert_allclose(np.concatenate(pieces, axis=1), full, atol=1e-6)
    assert layer.compute_mask(ids, None) is None  # it never masks


def test_declares_its_positions_to_the_generation_engine():
    layer = PixelEmbedding(257, 8, image_size=32)
    assert layer.sequence_length == layer.max_positions == 32 * 32 * 3 + 1


def test_layer_life_cycle():
    run_layer_test(
        PixelEmbedding,
        {"vocabulary_size": 6, "embedding_dim": 8, "image_size": (2, 2), "channels": 3},
        np.array([[0, 1, 2, 3, 4, 5, 5, 4, 3, 2, 1, 0], [5] * 12], "int32"),
        expected_output_shape=(2, 12, 8),
    )


def test_errors():
    with pytest.raises(ValueError, match="`vocabulary_size` must be a positive integer"):
        PixelEmbedding(0, 8, image_size=4)
    with pytest.raises(
        ValueError,
        match=r"`embedding_dim` must be divisible by 4 for sinusoidal positions.*"
        r"Received: embedding_dim=6",
    ):
        PixelEmbedding(256, 6, image_size=4)
    with pytest.raises(ValueError, match=r"expected ndim=2, found ndim=3"):
        PixelEmbedding(256, 8, image_size=4)(np.zeros((1, 2, 3), "int32"))
    with pytest.raises(ValueError, match=r"fit the 49 positions.* Received: positions 0\.\.49\."):
        PixelEmbedding(256, 8, image_size=4)(np.zeros((1, 50), "int32"))
