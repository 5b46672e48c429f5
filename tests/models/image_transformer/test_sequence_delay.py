import re

import keras
import numpy as np
import pytest

from keras_attn.models.image_transformer import SequenceDelay
from tests.test_case import run_layer_test


def test_hand_computed_delay_and_fill():
    layer = SequenceDelay(delay=2, fill_value=-1, dtype="int32")
    out = np.asarray(layer(np.array([[5, 6, 7, 8], [1, 2, 3, 4]], "int32")))
    np.testing.assert_array_equal(out, [[-1, -1, 5, 6], [-1, -1, 1, 2]])


@pytest.mark.parametrize("chunk", [1, 3, 7])
def test_cached_chunks_equal_the_full_pass(chunk):
    # Features after the time axis are delayed with it.
    rng = np.random.default_rng(0)
    inputs = rng.normal(size=(2, 7, 3)).astype("float32")
    layer = SequenceDelay(delay=3)
    full = np.asarray(layer(inputs))
    np.testing.assert_array_equal(full[:, 3:], inputs[:, :4])
    np.testing.assert_array_equal(full[:, :3], 0.0)
    cache = layer.init_cache(2, 7)
    assert tuple(cache.shape) == (2, 3, 3)
    pieces = []
    for start in range(0, 7, chunk):
        out, cache = layer(inputs[:, start : start + chunk], cache=cache, cache_index=start)
        pieces.append(np.asarray(out))
    np.testing.assert_array_equal(np.concatenate(pieces, axis=1), full)
    # The cache ends holding the last `delay` inputs.
    np.testing.assert_array_equal(np.asarray(cache), inputs[:, -3:])


def test_integer_tokens_keep_their_dtype_in_the_cache():
    layer = SequenceDelay(delay=1, fill_value=256, dtype="int32")
    tokens = np.array([[3, 4]], "int32")
    layer(tokens)
    cache = layer.init_cache(1)
    assert "int32" in str(cache.dtype) and np.asarray(cache).tolist() == [[256]]
    out, cache = layer(tokens[:, :1], cache=cache, cache_index=0)
    assert np.asarray(out).tolist() == [[256]] and np.asarray(cache).tolist() == [[3]]


def test_layer_life_cycle():
    run_layer_test(
        SequenceDelay,
        dict(delay=2),
        np.random.default_rng(1).normal(size=(2, 5, 4)).astype("float32"),
        expected_output_shape=(2, 5, 4),
        expected_num_trainable_weights=0,
        run_fit=False,
    )


def test_errors():
    for delay in (0, -1, 1.5):
        with pytest.raises(ValueError, match=r"delay"):
            SequenceDelay(delay=delay)
    with pytest.raises(
        ValueError, match=r"expected min_ndim=2, found ndim=1\. Full shape received: \(4,\)"
    ):
        SequenceDelay(delay=1)(np.zeros((4,), "float32"))
    layer = SequenceDelay(delay=2)
    with pytest.raises(
        ValueError,
        match=r"`cache.shape` must be \(batch, delay=2, \.\.\.\).*"
        r"cache.shape=\(1, 3\)",
    ):
        layer(np.zeros((1, 1), "float32"), cache=np.zeros((1, 3), "float32"), cache_index=0)
    # Another batch or feature size failed in a concatenation.
    tokens = np.zeros((2, 1, 4), "float32")
    with pytest.raises(
        ValueError,
        match=r"`cache.shape` must be \(batch, delay=2, \.\.\.\).*cache.shape=\(2, 2, 5\)",
    ):
        layer(tokens, cache=np.zeros((2, 2, 5), "float32"), cache_index=0)
    with pytest.raises(
        ValueError,
        match=r"`cache.shape` must be \(batch, delay=2, \.\.\.\).*cache.shape=\(3, 2, 4\)",
    ):
        layer(tokens, cache=np.zeros((3, 2, 4), "float32"), cache_index=0)


@pytest.mark.parametrize("fill_value", [float("nan"), float("inf"), None, "x", [1, 2], True])
def test_fill_value_must_be_a_finite_number(fill_value):
    with pytest.raises(
        ValueError,
        match=r"^`fill_value` must be a finite real number that the layer's dtype float32 "
        r"holds .*Received: fill_value=",
    ):
        SequenceDelay(2, fill_value=fill_value)


def test_fill_value_must_fit_an_integer_dtype():
    tokens = np.ones((1, 4), "int32")
    # A cast would read 1.7 as 1 and wrap 2**40 to 0.
    for fill_value in (1.7, 2**40, -(2**31) - 1):
        with pytest.raises(
            ValueError,
            match=r"must be a finite real number that the layer's dtype int32 "
            r"holds \(whole and in range for integers\)\. "
            rf"Received: fill_value={fill_value}\.",
        ):
            SequenceDelay(2, fill_value=fill_value, dtype="int32")
    # A whole float is a whole number; float inputs take any value their dtype holds.
    np.testing.assert_array_equal(SequenceDelay(2, fill_value=-1.0)(tokens), [[-1, -1, 1, 1]])
    np.testing.assert_allclose(
        SequenceDelay(1, fill_value=1.7)(np.ones((1, 2), "float32")), [[1.7, 1.0]]
    )


@pytest.mark.parametrize(
    "dtype, fill_value", [("float32", 1e300), ("float16", 1e6), ("bfloat16", -1e39)]
)
def test_fill_value_must_fit_a_float_dtype(dtype, fill_value):
    # The cast made these infinite: the first outputs were inf.
    inputs = keras.ops.ones((1, 4), dtype)
    with pytest.raises(
        ValueError,
        match=rf"must be a finite real number that the layer's dtype {dtype} holds "
        rf".*Received: fill_value={re.escape(str(fill_value))}\.",
    ):
        SequenceDelay(2, fill_value=fill_value, dtype=dtype)
    out = SequenceDelay(2, fill_value=-5.0, dtype=dtype)(inputs)
    out = keras.ops.convert_to_numpy(keras.ops.cast(out, "float32"))
    np.testing.assert_array_equal(out, [[-5, -5, 1, 1]])
