import numpy as np
import pytest

from keras_attn.models.image_transformer import LowResolutionEmbedding
from tests.test_case import run_layer_test


def _low_image(seed=0, size=(2, 3), channels=3, batch=2):
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, (batch, size[0] * size[1] * channels)).astype("int32")


def test_nearest_embeds_the_covering_low_resolution_intensity():
    # 2x3 low-resolution RGB image under a 4x6 image: each low pixel covers 2x2.
    layer = LowResolutionEmbedding(8, image_size=(4, 6), low_resolution_size=(2, 3))
    low = _low_image()
    out = np.asarray(layer(np.zeros((2, 72), "int32"), low))
    table = np.asarray(layer.embedding.embeddings)
    assert table.shape == (3 * 256, 8)
    for b in range(2):
        for p in range(72):
            pixel, channel = divmod(p, 3)
            row, column = divmod(pixel, 6)
            covering = ((row // 2) * 3 + column // 2) * 3 + channel
            want = table[channel * 256 + low[b, covering]] * np.sqrt(8)
            np.testing.assert_allclose(out[b, p], want, atol=1e-5)


def test_decoding_steps_with_start_index_equal_the_full_sequence():
    layer = LowResolutionEmbedding(8, image_size=(4, 6), low_resolution_size=(2, 3))
    low = _low_image(1)
    # 73 positions: the shifted decoder input of a whole image plus one.
    full = np.asarray(layer(np.zeros((2, 73), "int32"), low))
    steps = [np.asarray(layer(np.zeros((2, 1), "int32"), low, start_index=t)) for t in range(73)]
    np.testing.assert_allclose(np.concatenate(steps, axis=1), full, atol=1e-6)
    # The position after the last intensity repeats the last one.
    np.testing.assert_allclose(full[:, 72], full[:, 71], atol=1e-6)


def test_bicubic_embeds_the_rounded_bicubic_upsampling():
    pytest.importorskip("tensorflow")
    from keras_attn.preprocessing import images

    layer = LowResolutionEmbedding(
        4,
        image_size=8,
        low_resolution_size=2,
        channels=3,
        interpolation="bicubic",
        scale_embeddings=False,
    )
    low = _low_image(2, size=(2, 2))
    out = np.asarray(layer(np.zeros((2, 192), "int32"), low))
    table = np.asarray(layer.embedding.embeddings)
    upsampled = images.upsample_bicubic(low.reshape(2, 2, 2, 3).astype(np.uint8), 8).reshape(2, -1)
    channels = np.arange(192) % 3
    np.testing.assert_allclose(out, table[channels * 256 + upsampled.astype(int)], atol=1e-6)


def test_layer_life_cycle():
    run_layer_test(
        LowResolutionEmbedding,
        {"embedding_dim": 8, "image_size": (4, 4), "low_resolution_size": (2, 2), "channels": 1},
        np.zeros((2, 16), "int32"),
        call_kwargs={"low_resolution": np.array([[0, 50, 100, 255], [7, 7, 7, 7]], "int32")},
        expected_output_shape=(2, 16, 8),
    )


def test_errors():
    with pytest.raises(ValueError, match="`embedding_dim` must be a positive integer"):
        LowResolutionEmbedding(0, image_size=8, low_resolution_size=2)
    with pytest.raises(
        ValueError,
        match=r"`image_size` must be a multiple of `low_resolution_size`=\(3, 3\) on each "
        r"side\. Received: image_size=\(8, 8\)\.",
    ):
        LowResolutionEmbedding(8, image_size=8, low_resolution_size=3)
    with pytest.raises(ValueError, match=r"`interpolation` must be one of.*'area'"):
        LowResolutionEmbedding(8, image_size=8, low_resolution_size=2, interpolation="area")
    with pytest.raises(
        ValueError,
        match=r"^LowResolutionEmbedding: `scale_embeddings` must be True or False "
        r".*Received: scale_embeddings='no'\.$",
    ):
        LowResolutionEmbedding(8, image_size=8, low_resolution_size=2, scale_embeddings="no")
    layer = LowResolutionEmbedding(8, image_size=8, low_resolution_size=2)
    with pytest.raises(
        ValueError,
        match=r"`low_resolution.shape` must be \(1, 12\): one 2x2x3 image in raster "
        r"order per row of `inputs`\. Received: low_resolution.shape=\(1, 10\)",
    ):
        layer(np.zeros((1, 192), "int32"), np.zeros((1, 10), "int32"))


def test_inputs_must_be_batch_and_length():
    # Rank-1 inputs were reported as a batch mismatch.
    layer = LowResolutionEmbedding(8, image_size=4, low_resolution_size=2, channels=1, name="low")
    low = np.arange(4, dtype="int32")[None] * 50
    with pytest.raises(
        ValueError, match=r"expected ndim=2, found ndim=1\. Full shape received: \(17,\)"
    ):
        layer(np.zeros((17,), "int32"), low)
    assert layer(np.zeros((1, 17), "int32"), low).shape == (1, 17, 8)


@pytest.mark.requires_tensorflow
def test_bicubic_runs_under_xla():
    # TensorFlow's bicubic resize has no XLA kernel; the layer's linear form does.
    import tensorflow as tf

    layer = LowResolutionEmbedding(4, image_size=8, low_resolution_size=2, interpolation="bicubic")
    low = _low_image(3, size=(2, 2))
    eager = np.asarray(layer(np.zeros((2, 5), "int32"), low, start_index=7))
    compiled = tf.function(lambda x, y: layer(x, y, start_index=7), jit_compile=True)
    np.testing.assert_allclose(
        np.asarray(compiled(np.zeros((2, 5), "int32"), low)), eager, atol=1e-6
    )
