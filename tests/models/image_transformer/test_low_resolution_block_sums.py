import numpy as np
import pytest

from keras_attn.models.image_transformer import LowResolutionBlockSums
from tests.test_case import run_layer_test

# A 4x6 RGB image over a 2x3 one: blocks of 2x2 pixels, 72 intensities.
SIZES = {"image_size": (4, 6), "low_resolution_size": (2, 3), "channels": 3}


def _tokens(seed=0, batch=2, length=73):
    rng = np.random.default_rng(seed)
    tokens = rng.integers(0, 256, (batch, length)).astype("int32")
    tokens[:, 0] = 256  # the start token
    return tokens


def _reference(tokens, image_size=(4, 6), low_resolution_size=(2, 3), channels=3):
    """Loops: for each position, the intensities before it in its block."""
    (height, width), (low_height, low_width) = image_size, low_resolution_size
    fy, fx = height // low_height, width // low_width

    def block(p):
        pixel, channel = divmod(min(p, height * width * channels - 1), channels)
        row, column = divmod(pixel, width)
        return (row // fy, column // fx, channel)

    intensities = tokens[:, 1:]  # x_q = token at q + 1
    out = np.zeros(tokens.shape, "float64")
    for p in range(tokens.shape[1]):
        for q in range(min(p, height * width * channels)):
            if block(q) == block(p):
                out[:, p] += intensities[:, q]
    return out


def test_sums_equal_a_loop_over_earlier_intensities_of_the_same_block():
    tokens = _tokens()
    out = np.asarray(LowResolutionBlockSums(**SIZES)(tokens))
    np.testing.assert_array_equal(out, _reference(tokens))


def test_hand_computed_sums_on_one_channel():
    # 4x4 over 2x2, one channel: row 0 is blocks 0, 0, 1, 1; row 1 the same.
    layer = LowResolutionBlockSums(image_size=4, low_resolution_size=2, channels=1)
    tokens = np.array([[256, 10, 20, 30, 40, 50, 60, 70, 80]], "int32")
    # p=5 (block 0): x0 + x1 + x4 = 10 + 20 + 50; p=8 (block 2): nothing yet.
    np.testing.assert_array_equal(np.asarray(layer(tokens)), [[0, 10, 0, 30, 30, 80, 70, 140, 0]])


@pytest.mark.parametrize("chunk", [1, 5, 73])
def test_cached_chunks_equal_the_full_pass(chunk):
    layer = LowResolutionBlockSums(**SIZES)
    tokens = _tokens(1)
    full = np.asarray(layer(tokens))
    cache = layer.init_cache(2, 73)
    assert tuple(cache.shape) == (2, 18)
    pieces = []
    for start in range(0, 73, chunk):
        sums, cache = layer(tokens[:, start : start + chunk], cache=cache, cache_index=start)
        pieces.append(np.asarray(sums))
    np.testing.assert_array_equal(np.concatenate(pieces, axis=1), full)
    # The cache ends holding every block's total.
    totals = tokens[:, 1:].reshape(2, 2, 2, 3, 2, 3).sum(axis=(2, 4)).reshape(2, 18)
    np.testing.assert_array_equal(np.asarray(cache), totals)


def test_start_token_and_ids_past_the_intensities_count_as_nothing():
    layer = LowResolutionBlockSums(image_size=2, low_resolution_size=1, channels=1)
    out = np.asarray(layer(np.array([[256, 256, 7, 9]], "int32")))
    np.testing.assert_array_equal(out, [[0, 0, 7, 16]])


def test_layer_life_cycle():
    run_layer_test(
        LowResolutionBlockSums,
        dict(SIZES, dtype="float32"),
        _tokens(2, length=72),
        expected_output_shape=(2, 72),
        expected_num_trainable_weights=0,
        run_fit=False,
    )


def test_errors():
    with pytest.raises(
        ValueError,
        match=r"`image_size` must be a multiple of `low_resolution_size`=\(3, 3\) on each "
        r"side\. Received: image_size=\(8, 8\)\.",
    ):
        LowResolutionBlockSums(image_size=8, low_resolution_size=3)
    layer = LowResolutionBlockSums(**SIZES)
    with pytest.raises(
        ValueError, match=r"expected ndim=2, found ndim=3\. Full shape received: \(2, 5, 1\)"
    ):
        layer(np.zeros((2, 5, 1), "int32"))


def test_the_position_after_the_image_is_still_one():
    # The whole image behind the start token: position H * W * C.
    layer = LowResolutionBlockSums(**SIZES)
    sums, _ = layer(_tokens(length=1), cache=layer.init_cache(2), cache_index=72)
    assert sums.shape == (2, 1)
