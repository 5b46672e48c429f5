import keras
import numpy as np
import pytest

from keras_attn.layers.projection import Projection
from tests.test_case import gradients, run_layer_test


def _pair(**kwargs):
    """A Projection and a keras Dense with the same weights."""
    projection = Projection(5, bias_initializer="random_normal", **kwargs)
    dense = keras.layers.Dense(5, **kwargs)
    projection.build((None, 4))
    dense.build((None, 4))
    dense.set_weights(projection.get_weights())
    return projection, dense


def test_bit_identical_to_dense_with_the_same_weights():
    # x - (-b) is the IEEE addition x + b: outputs and gradients are equal
    # to the last bit, with and without bias or activation.
    x = np.random.default_rng(0).normal(size=(2, 3, 4)).astype("float32")
    for kwargs in ({}, {"activation": "relu"}, {"use_bias": False}):
        projection, dense = _pair(**kwargs)
        np.testing.assert_array_equal(np.asarray(projection(x)), np.asarray(dense(x)))
        loss = lambda layer: lambda x: (keras.ops.sum(keras.ops.square(layer(x))), None)  # noqa: E731
        _, want = gradients(loss(dense), [x], dense)
        _, got = gradients(loss(projection), [x], projection)
        for g, w in zip(got, want):
            np.testing.assert_array_equal(np.asarray(g), np.asarray(w))


def test_hand_computed_values():
    layer = Projection(2, kernel_initializer="ones", bias_initializer="ones")
    np.testing.assert_array_equal(
        np.asarray(layer(np.array([[1.0, 2.0, 3.0]], "float32"))), [[7.0, 7.0]]
    )


def test_layer_lifecycle():
    run_layer_test(
        Projection,
        {"units": 6, "activation": "gelu"},
        np.ones((2, 3, 4), "float32"),
        expected_output_shape=(2, 3, 6),
        expected_num_trainable_weights=2,
        expected_num_seed_generators=0,
    )


@pytest.mark.requires_tensorflow
def test_one_matmul_in_the_tensorflow_graph_of_a_decoding_step():
    # A (B, 1, D) input with B unknown, as a served decoding step: one MatMul and constant shapes,
    # where `ops.matmul` of the rank-3 input made a Tensordot (Shape, GatherV2, Prod, Pack, ...).
    import tensorflow as tf

    layer = Projection(6)
    layer.build((None, 1, 4))
    step = tf.function(layer, input_signature=[tf.TensorSpec((None, 1, 4), tf.float32)])
    ops = [node.op for node in step.get_concrete_function().graph.as_graph_def().node]
    assert ops.count("MatMul") == 1
    assert not {"Shape", "Prod", "GatherV2", "Pack", "Transpose"} & set(ops)
    x = np.random.default_rng(1).normal(size=(3, 1, 4)).astype("float32")
    np.testing.assert_allclose(np.asarray(step(x)), np.asarray(layer(x)), rtol=1e-6)
