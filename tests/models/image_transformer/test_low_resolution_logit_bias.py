import numpy as np
import pytest

from keras_attn.models.image_transformer import LowResolutionLogitBias
from tests.test_case import run_layer_test


def _low_image(seed=0, size=(2, 3), channels=3, batch=2):
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, (batch, size[0] * size[1] * channels)).astype("int32")


def _layer_with_random_bias(**kwargs):
    layer = LowResolutionLogitBias(**kwargs)
    layer.build()
    rng = np.random.default_rng(5)
    layer.offset_bias.assign(rng.normal(size=layer.offset_bias.shape).astype("float32"))
    return layer


class _Reference:
    """NumPy geometry of an 8x8 RGB image over a 2x2 one (blocks of 4x4):
    the bicubic image, each position's channel, column, block and order in
    its block, and the consistent value c(q, s) = b + (16 L - s - sum of b
    from q to the block's end) / (pixels left)."""

    def __init__(self, low):
        import tensorflow as tf

        self.low = low
        upsampled = tf.image.resize(low.reshape(2, 2, 2, 3).astype("float32"), (8, 8), "bicubic")
        self.bicubic = np.clip(np.asarray(upsampled), 0, 255).reshape(2, -1)
        self.positions = np.arange(192)
        pixel, self.channel = self.positions // 3, self.positions % 3
        row, self.column = pixel // 8, pixel % 8
        self.block = ((row // 4) * 2 + self.column // 4) * 3 + self.channel
        self.order = (row % 4) * 4 + self.column % 4

    def consistent(self, b, q, s):
        remaining = self.bicubic[b, (self.block == self.block[q]) & (self.order >= self.order[q])]
        return self.bicubic[b, q] + (16 * self.low[b, self.block[q]] - s - remaining.sum()) / (
            16 - self.order[q]
        )

    def assert_bias_at(self, layer, out, value):
        """`out` = the layer's bias rows at the rounded, clipped `value`."""
        value = np.clip(np.round(value), 0, 255).astype(int)
        index = np.arange(256)[None, None, :] - value[..., None] + 255
        bias = np.asarray(layer.offset_bias)
        np.testing.assert_allclose(out, bias[self.channel[None, :, None], index], atol=1e-6)


def test_adds_the_bias_of_each_offset_from_the_covering_value():
    layer = _layer_with_random_bias(
        image_size=(4, 6), low_resolution_size=(2, 3), interpolation="nearest"
    )
    low = _low_image()
    logits = np.random.default_rng(1).normal(size=(2, 72, 256)).astype("float32")
    out = np.asarray(layer(logits, low))
    bias = np.asarray(layer.offset_bias)
    for b in range(2):
        for p in (0, 1, 5, 17, 40, 71):
            pixel, channel = divmod(p, 3)
            row, column = divmod(pixel, 6)
            value = low[b, ((row // 2) * 3 + column // 2) * 3 + channel]
            # Intensity k gets the weight of offset k - value (index + 255).
            want = logits[b, p] + bias[channel, np.arange(256) - value + 255]
            np.testing.assert_allclose(out[b, p], want, atol=1e-5)


def test_hand_computed_offsets_on_one_channel():
    # One channel, 2 intensities: weights for offsets -1, 0, +1.
    layer = LowResolutionLogitBias(
        image_size=2, low_resolution_size=1, channels=1, num_intensities=2, interpolation="nearest"
    )
    layer.build()
    layer.offset_bias.assign(np.array([[10.0, 20.0, 30.0]], "float32"))
    logits = np.zeros((2, 4, 2), "float32")
    out = np.asarray(layer(logits, np.array([[0], [1]], "int32")))
    # Value 0: intensities 0, 1 are offsets 0, +1; value 1: offsets -1, 0.
    np.testing.assert_array_equal(out[0], [[20.0, 30.0]] * 4)
    np.testing.assert_array_equal(out[1], [[10.0, 20.0]] * 4)


def test_starts_as_the_identity():
    layer = LowResolutionLogitBias(image_size=8, low_resolution_size=2)
    logits = np.random.default_rng(2).normal(size=(2, 192, 256)).astype("float32")
    np.testing.assert_array_equal(np.asarray(layer(logits, _low_image(size=(2, 2)))), logits)


def test_laplace_prior_start():
    layer = LowResolutionLogitBias(
        image_size=2,
        low_resolution_size=1,
        channels=2,
        num_intensities=3,
        interpolation="nearest",
        prior_scale=2.0,
    )
    layer.build()
    # Offsets -2..2 -> -|offset| / 2, for each channel.
    np.testing.assert_allclose(np.asarray(layer.offset_bias), [[-1, -0.5, 0, -0.5, -1]] * 2)
    out = np.asarray(layer(np.zeros((1, 8, 3), "float32"), np.array([[2, 0]], "int32")))
    np.testing.assert_allclose(out[0, 0], [-1, -0.5, 0])  # channel 0, value 2
    np.testing.assert_allclose(out[0, 1], [0, -0.5, -1])  # channel 1, value 0


def test_decoding_steps_with_start_index_equal_the_full_sequence():
    layer = _layer_with_random_bias(image_size=(4, 6), low_resolution_size=(2, 3))
    low = _low_image(3)
    logits = np.random.default_rng(4).normal(size=(2, 73, 256)).astype("float32")
    full = np.asarray(layer(logits, low))
    steps = [np.asarray(layer(logits[:, t : t + 1], low, start_index=t)) for t in range(73)]
    np.testing.assert_allclose(np.concatenate(steps, axis=1), full, atol=1e-6)


def test_bicubic_counts_offsets_from_the_rounded_bicubic_upsampling():
    pytest.importorskip("tensorflow")
    from keras_attn.preprocessing import images

    layer = _layer_with_random_bias(image_size=8, low_resolution_size=2)
    low = _low_image(6, size=(2, 2))
    out = np.asarray(layer(np.zeros((2, 192, 256), "float32"), low))
    upsampled = images.upsample_bicubic(low.reshape(2, 2, 2, 3).astype(np.uint8), 8).reshape(2, -1)
    bias = np.asarray(layer.offset_bias)
    channels = np.arange(192) % 3
    index = np.arange(256)[None, None, :] - upsampled[..., None].astype(int) + 255
    np.testing.assert_allclose(out, bias[channels[None, :, None], index], atol=1e-6)


def test_consistent_value_spreads_the_block_deficit_hand_computed():
    # One 2x2 block, one channel, low-resolution value 100 (block sum 400).
    # Generated 120, 90, 110: the prior's peak (argmax) at each position is
    # 100 + (400 - sum so far - 100 * pixels left) / pixels left.
    layer = LowResolutionLogitBias(
        image_size=2, low_resolution_size=1, channels=1, interpolation="nearest", prior_scale=4.0
    )
    sums = np.array([[0.0, 120.0, 210.0, 320.0]], "float32")
    out = np.asarray(
        layer(np.zeros((1, 4, 256), "float32"), np.array([[100]], "int32"), block_sums=sums)
    )
    assert out.argmax(-1).tolist() == [[100, 93, 95, 80]]  # 93.3, 95.0, 80.0 exactly


def test_consistent_value_corrects_the_bicubic_upsampling():
    pytest.importorskip("tensorflow")
    layer = _layer_with_random_bias(image_size=8, low_resolution_size=2)
    low = _low_image(7, size=(2, 2))
    rng = np.random.default_rng(8)
    sums = rng.integers(0, 16 * 255, (2, 192)).astype("float32")
    out = np.asarray(layer(np.zeros((2, 192, 256), "float32"), low, block_sums=sums))
    # NumPy: b + (16 L - s - sum of b from here to the block's end) / left.
    ref = _Reference(low)
    value = np.array([[ref.consistent(b, p, sums[b, p]) for p in ref.positions] for b in range(2)])
    ref.assert_bias_at(layer, out, value)


def test_max_correction_bounds_the_consistency_correction_hand_computed():
    # The block of test_consistent_value_spreads_the_block_deficit_hand_computed
    # with generated 160, 90, 110: corrections 0, -20, -25, -60 levels; capped
    # at 10 levels the peaks are 100, 90, 90, 90.
    layer = LowResolutionLogitBias(
        image_size=2,
        low_resolution_size=1,
        channels=1,
        interpolation="nearest",
        prior_scale=4.0,
        max_correction=10,
    )
    sums = np.array([[0.0, 160.0, 250.0, 360.0]], "float32")
    out = np.asarray(
        layer(np.zeros((1, 4, 256), "float32"), np.array([[100]], "int32"), block_sums=sums)
    )
    assert out.argmax(-1).tolist() == [[100, 90, 90, 90]]


@pytest.mark.parametrize("interpolation", ["nearest", "bicubic"])
def test_previous_channel_residual_moves_green_and_blue_with_the_channel_before(interpolation):
    tf = pytest.importorskip("tensorflow")
    layer = _layer_with_random_bias(
        image_size=8, low_resolution_size=2, interpolation=interpolation
    )
    low = _low_image(9, size=(2, 2))
    rng = np.random.default_rng(10)
    previous = rng.integers(0, 256, (2, 192)).astype("int32")
    previous[:, 0] = 256  # the start token: position 0 is red and does not read it
    out = np.asarray(layer(np.zeros((2, 192, 256), "float32"), low, previous_intensities=previous))
    # NumPy: red at its interpolated value; green and blue at theirs plus
    # the position before's residual (previous intensity minus interpolated).
    method = "nearest" if interpolation == "nearest" else "bicubic"
    upsampled = tf.image.resize(low.reshape(2, 2, 2, 3).astype("float32"), (8, 8), method)
    interpolated = np.clip(np.asarray(upsampled), 0, 255).reshape(2, -1)
    channel = np.arange(192) % 3
    value = np.round(interpolated)
    shifted = interpolated[:, 1:] + previous[:, 1:] - interpolated[:, :-1]
    value[:, 1:] = np.where(channel[1:] > 0, np.round(shifted), value[:, 1:])
    value = np.clip(value, 0, 255).astype(int)
    bias = np.asarray(layer.offset_bias)
    index = np.arange(256)[None, None, :] - value[..., None] + 255
    np.testing.assert_allclose(out, bias[channel[None, :, None], index], atol=1e-6)
    steps = [
        np.asarray(
            layer(
                np.zeros((2, 1, 256), "float32"),
                low,
                start_index=t,
                previous_intensities=previous[:, t : t + 1],
            )
        )
        for t in (0, 1, 2, 100)
    ]
    np.testing.assert_allclose(np.concatenate(steps, axis=1), out[:, [0, 1, 2, 100]], atol=1e-6)


def test_left_residual_centres_each_channel_on_its_left_neighbour_numpy_reference():
    pytest.importorskip("tensorflow")
    layer = _layer_with_random_bias(image_size=8, low_resolution_size=2)
    low = _low_image(11, size=(2, 2))
    rng = np.random.default_rng(12)
    sums = rng.integers(0, 16 * 255, (2, 192)).astype("float32")
    left = rng.integers(0, 256, (2, 192)).astype("int32")
    out = np.asarray(
        layer(np.zeros((2, 192, 256), "float32"), low, block_sums=sums, left_intensities=left)
    )
    # NumPy, position by position: c(q, s) = b + (16 L - s - remaining) / left;
    # value = c(p, s_p) + 0.75 r with r the left pixel's residual: from its own
    # consistent value c(p - 3, s_p - x_left) inside a block, from its bicubic
    # value across a block's left edge, none in the first column.
    ref = _Reference(low)
    value = np.zeros((2, 192))
    for b in range(2):
        for p in ref.positions:
            residual = 0.0
            if ref.column[p] % 4:
                residual = left[b, p] - ref.consistent(b, p - 3, sums[b, p] - left[b, p])
            elif ref.column[p]:
                residual = left[b, p] - ref.bicubic[b, p - 3]
            value[b, p] = ref.consistent(b, p, sums[b, p]) + 0.75 * residual
    ref.assert_bias_at(layer, out, value)
    steps = [
        np.asarray(
            layer(
                np.zeros((2, 1, 256), "float32"),
                low,
                start_index=t,
                block_sums=sums[:, t : t + 1],
                left_intensities=left[:, t : t + 1],
            )
        )
        for t in (0, 3, 12, 100)
    ]
    np.testing.assert_allclose(np.concatenate(steps, axis=1), out[:, [0, 3, 12, 100]], atol=1e-6)


def test_previous_channel_consistent_value_numpy_reference():
    pytest.importorskip("tensorflow")
    layer = _layer_with_random_bias(image_size=8, low_resolution_size=2)
    low = _low_image(13, size=(2, 2))
    rng = np.random.default_rng(14)
    sums = rng.integers(0, 16 * 255, (2, 192)).astype("float32")
    before_sums = rng.integers(0, 16 * 255, (2, 192)).astype("float32")
    previous = rng.integers(0, 256, (2, 192)).astype("int32")
    out = np.asarray(
        layer(
            np.zeros((2, 192, 256), "float32"),
            low,
            block_sums=sums,
            previous_intensities=previous,
            previous_block_sums=before_sums,
        )
    )
    # NumPy: red at c(p, s_p); green and blue at c(p, s_p) + x[p-1] - c(p-1, s'_p).
    ref = _Reference(low)
    value = np.array(
        [
            [
                ref.consistent(b, p, sums[b, p])
                + (
                    previous[b, p] - ref.consistent(b, p - 1, before_sums[b, p])
                    if ref.channel[p]
                    else 0
                )
                for p in ref.positions
            ]
            for b in range(2)
        ]
    )
    ref.assert_bias_at(layer, out, value)


def test_left_residual_hand_computed_on_one_channel():
    # 4x2 over 2x1, one channel, nearest: the top block is pixels 0, 1 (row
    # 0) and 2, 3 (row 1), L = 100, so 400 in all. Generated 120, 90, 100:
    # pixel 1 (left 120 in its block): c = 100 + (400 - 120 - 300) / 3 =
    # 93.33, the left pixel's c = 100 (nothing before it), residual 20, peak
    # 93.33 + 15 = 108; pixel 2 is in the first column: c = 100 + (400 - 210
    # - 200) / 2 = 95; pixel 3: c = 100 + (400 - 310 - 100) = 90, its left
    # pixel's c = 95 (sum 210), residual 5, peak 93.75 -> 94.
    layer = LowResolutionLogitBias(
        image_size=(4, 2),
        low_resolution_size=(2, 1),
        channels=1,
        interpolation="nearest",
        prior_scale=4.0,
    )
    sums = np.array([[0.0, 120.0, 210.0, 310.0]], "float32")
    left = np.array([[0, 120, 0, 100]], "int32")
    out = np.asarray(
        layer(
            np.zeros((1, 4, 256), "float32"),
            np.array([[100, 50]], "int32"),
            block_sums=sums,
            left_intensities=left,
        )
    )
    assert out.argmax(-1).tolist() == [[100, 108, 95, 94]]


def test_layer_life_cycle():
    run_layer_test(
        LowResolutionLogitBias,
        {
            "image_size": (4, 4),
            "low_resolution_size": (2, 2),
            "channels": 1,
            "num_intensities": 8,
            "prior_scale": 3.0,
            "max_correction": 2.0,
        },
        np.zeros((2, 16, 8), "float32"),
        call_kwargs={"low_resolution": np.array([[0, 5, 7, 1], [3, 3, 3, 3]], "int32")},
        expected_output_shape=(2, 16, 8),
    )


def test_one_trainable_weight():
    layer = LowResolutionLogitBias(image_size=4, low_resolution_size=2, channels=3)
    layer(np.zeros((1, 48, 256), "float32"), np.zeros((1, 12), "int32"))
    assert [tuple(w.shape) for w in layer.trainable_weights] == [(3, 511)]


def test_errors():
    with pytest.raises(
        ValueError,
        match=r"`image_size` must be a multiple of `low_resolution_size`=\(3, 3\) on each "
        r"side\. Received: image_size=\(8, 8\)\.",
    ):
        LowResolutionLogitBias(image_size=8, low_resolution_size=3)
    with pytest.raises(ValueError, match=r"`interpolation` must be one of.*'area'"):
        LowResolutionLogitBias(image_size=8, low_resolution_size=2, interpolation="area")
    with pytest.raises(
        ValueError,
        match=r"`prior_scale` must be a number > 0 \(in intensity levels\) or None.*prior_scale=0",
    ):
        LowResolutionLogitBias(image_size=8, low_resolution_size=2, prior_scale=0)
    with pytest.raises(
        ValueError,
        match=r"`max_correction` must be a number > 0 \(in intensity levels\) or None.*max_correction=-1",
    ):
        LowResolutionLogitBias(image_size=8, low_resolution_size=2, max_correction=-1)
    with pytest.raises(ValueError, match=r"max_correction=True"):
        LowResolutionLogitBias(image_size=8, low_resolution_size=2, max_correction=True)
    # A NumPy MemoryError (32 GiB) before; int32 table ids past 2**31 too.
    for num_intensities in (65536, 2**31):
        with pytest.raises(
            ValueError,
            match=r"`num_intensities` must be small enough for a bias table of at most 2 GiB "
            rf".*Received: num_intensities={num_intensities}\. Use 8-bit intensities",
        ):
            LowResolutionLogitBias(
                image_size=8, low_resolution_size=2, num_intensities=num_intensities
            )
    layer = LowResolutionLogitBias(image_size=8, low_resolution_size=2)
    with pytest.raises(
        ValueError, match=r"expected axis -1 of input shape to have value 256, .*\(1, 192, 10\)"
    ):
        layer(np.zeros((1, 192, 10), "float32"), np.zeros((1, 12), "int32"))
    with pytest.raises(
        ValueError,
        match=r"`low_resolution.shape` must be \(1, 12\).*Received: low_resolution.shape=\(1, 10\)",
    ):
        layer(np.zeros((1, 192, 256), "float32"), np.zeros((1, 10), "int32"))


def test_optional_inputs_combine():
    # `super_resolution_transformer` wires these (and refuses the left
    # residual without the consistency it corrects).
    layer = LowResolutionLogitBias(image_size=4, low_resolution_size=2, channels=1, name="bias")
    logits, low = np.zeros((1, 16, 256), "float32"), np.full((1, 4), 100, "int32")
    sums, ints = np.zeros((1, 16), "float32"), np.zeros((1, 16), "int32")
    assert layer(logits, low, block_sums=sums, left_intensities=ints).shape == (1, 16, 256)
    assert layer(
        logits, low, block_sums=sums, previous_intensities=ints, previous_block_sums=sums
    ).shape == (1, 16, 256)
