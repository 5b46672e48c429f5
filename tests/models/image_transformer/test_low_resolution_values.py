import keras
import numpy as np
import pytest

from keras_attn.models.image_transformer import (
    LowResolutionEmbedding,
    LowResolutionLogitBias,
    LowResolutionValues,
)


def _low_image(seed, size=(2, 3), channels=3, batch=2):
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, (batch, size[0] * size[1] * channels)).astype("int32")


def test_nearest_values_hand_computed():
    # One channel, a 2x2 image under a 4x4 one: each value covers a 2x2 block (a = 4 pixels).
    layer = LowResolutionValues(
        image_size=4, low_resolution_size=2, channels=1, interpolation="nearest"
    )
    out = np.asarray(layer(np.array([[10, 20, 30, 40]], "int32")))
    assert out.shape == (1, 16, 4)
    covering = np.array([10, 10, 20, 20, 10, 10, 20, 20, 30, 30, 40, 40, 30, 30, 40, 40])
    pixels_left = np.array([4, 3, 4, 3, 2, 1, 2, 1] * 2)
    np.testing.assert_array_equal(out[0, :, 0], covering)  # b = L
    np.testing.assert_array_equal(out[0, :, 1], 4 * covering)  # a * L
    np.testing.assert_array_equal(out[0, :, 2], covering * pixels_left)  # R: b summed on
    np.testing.assert_array_equal(out[0, :, 3], pixels_left)


def test_bicubic_values_are_the_upsampling_and_its_remaining_block_sums():
    tf = pytest.importorskip("tensorflow")
    layer = LowResolutionValues(image_size=4, low_resolution_size=2, channels=1)
    low = np.array([[0, 255, 255, 0]], "int32")
    out = np.asarray(layer(low))
    upsampled = tf.image.resize(low.reshape(1, 2, 2, 1).astype("float32"), (4, 4), "bicubic")
    b = np.clip(upsampled.numpy(), 0, 255).reshape(4, 4)
    np.testing.assert_allclose(out[0, :, 0], b.reshape(-1), atol=1e-4)
    # Position 4 (row 1, column 0): the rest of the top-left block is (1, 0) and (1, 1).
    np.testing.assert_allclose(out[0, 4, 2], b[1, 0] + b[1, 1], atol=1e-4)
    np.testing.assert_allclose(out[0, 0, 2], b[:2, :2].sum(), atol=1e-4)


@pytest.mark.parametrize("interpolation", ["nearest", "bicubic"])
def test_given_values_equal_the_per_call_computation(interpolation):
    sizes = dict(image_size=(4, 6), low_resolution_size=(2, 3), interpolation=interpolation)
    low = _low_image(0)
    values = LowResolutionValues(**sizes)(low)
    rng = np.random.default_rng(1)
    bias = LowResolutionLogitBias(**sizes, prior_scale=8.0)
    bias.build()
    bias.offset_bias.assign(rng.normal(size=(3, 511)).astype("float32"))
    logits = rng.normal(size=(2, 73, 256)).astype("float32")
    tokens = rng.integers(0, 256, (2, 73)).astype("int32")
    options = dict(
        block_sums=rng.uniform(0, 600, (2, 73)).astype("float32"),
        previous_intensities=tokens,
        left_intensities=np.roll(tokens, 2, axis=1),
        previous_block_sums=rng.uniform(0, 600, (2, 73)).astype("float32"),
    )
    embedding = LowResolutionEmbedding(8, **sizes)
    for t in (0, 5, 40, 72):  # decoding steps, as a cached decoder calls them
        step = {name: value[:, t : t + 1] for name, value in options.items()}
        computed = np.asarray(bias(logits[:, t : t + 1], low, start_index=t, **step))
        given = bias(logits[:, t : t + 1], low, start_index=t, **step, low_resolution_values=values)
        np.testing.assert_array_equal(np.asarray(given), computed)
        computed = np.asarray(embedding(tokens[:, t : t + 1], low, start_index=t))
        given = embedding(tokens[:, t : t + 1], low, start_index=t, low_resolution_values=values)
        np.testing.assert_array_equal(np.asarray(given), computed)
    full = bias(logits, low, **options, low_resolution_values=values)
    np.testing.assert_array_equal(np.asarray(full), np.asarray(bias(logits, low, **options)))
    # The options move the value: the bias differs from the plain one's.
    assert not np.array_equal(np.asarray(full), np.asarray(bias(logits, low)))


def test_the_embedding_reads_the_values_in_float32_under_a_mixed_policy():
    # Autocast to bfloat16, bicubic values round to other intensities (23 of 384 here).
    keras.config.set_dtype_policy("mixed_bfloat16")
    sizes = dict(image_size=8, low_resolution_size=2, interpolation="bicubic")
    low = _low_image(0, size=(2, 2))
    values = LowResolutionValues(**sizes, dtype="float32")(low)
    embedding = LowResolutionEmbedding(8, **sizes)
    tokens = np.zeros((2, 192), "int32")
    given = embedding(tokens, low, low_resolution_values=values)
    assert keras.backend.standardize_dtype(given.dtype) == "bfloat16"
    computed = embedding(tokens, low)
    np.testing.assert_array_equal(np.asarray(given, "float32"), np.asarray(computed, "float32"))
