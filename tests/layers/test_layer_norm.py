import keras
import numpy as np
import pytest

from keras_attn.layers import LayerNorm
from tests.test_case import run_layer_test


def _numpy_layer_norm(x, gamma, beta, epsilon):
    x = x.astype("float64")
    mean = x.mean(-1, keepdims=True)
    variance = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(variance + epsilon) * gamma + beta


def _weights(width, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.normal(size=width).astype("float32"), rng.normal(size=width).astype("float32")]


def test_matches_numpy_and_the_keras_layer_with_the_same_weights():
    x = (np.random.default_rng(1).normal(size=(2, 3, 16)) * 3 + 1).astype("float32")
    gamma, beta = _weights(16)
    norm, keras_norm = LayerNorm(epsilon=1e-5), keras.layers.LayerNormalization(epsilon=1e-5)
    for layer in (norm, keras_norm):
        layer.build(x.shape)
        layer.set_weights([gamma, beta])
    got = keras.ops.convert_to_numpy(norm(x))
    np.testing.assert_allclose(got, _numpy_layer_norm(x, gamma, beta, 1e-5), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got, keras.ops.convert_to_numpy(keras_norm(x)), rtol=0, atol=1e-6)


def test_float16_inputs_get_float32_statistics():
    # Values whose squares overflow float16 (65504): the statistics must be float32.
    x = np.array([[300.0, 310.0, 290.0, 305.0]], "float16")
    norm = LayerNorm(epsilon=1e-5, dtype="float16")
    norm.build(x.shape)
    got = keras.ops.convert_to_numpy(norm(x)).astype("float32")
    want = _numpy_layer_norm(x, np.ones(4), np.zeros(4), 1e-5)
    np.testing.assert_allclose(got, want, atol=2e-3)


def test_weights_keep_the_keras_layer_names():
    norm = LayerNorm(name="feedforward_norm")
    norm.build((None, 8))
    assert [w.path for w in norm.weights] == ["feedforward_norm/gamma", "feedforward_norm/beta"]


@pytest.mark.parametrize("kwargs", [{"axis": 1}, {"center": False}, {"scale": False}])
def test_refuses_what_it_does_not_compute(kwargs):
    with pytest.raises(ValueError, match="the last axis, centered and scaled"):
        LayerNorm(**kwargs).build((None, 3, 8))


def test_layer_life():
    run_layer_test(
        LayerNorm,
        {"epsilon": 1e-5},
        np.random.default_rng(0).normal(size=(2, 3, 8)).astype("float32"),
        expected_output_shape=(2, 3, 8),
        expected_num_trainable_weights=2,
    )
