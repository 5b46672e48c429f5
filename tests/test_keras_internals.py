"""Pins every Keras behaviour `keras_attn.keras_internals` relies on.

The adapter was written against Keras 3.15.1. When one of these tests fails
after a Keras upgrade, its message says what Keras changed; fix the adapter
(only) and keep these tests passing. Backend-neutral (keras.ops / NumPy).
"""

import keras
import numpy as np
from keras import ops

from keras_attn import keras_internals as ki

CHANGED = f"Keras {keras.__version__} changed (keras_internals targets 3.15.1): "


class _Shift(keras.layers.Layer):
    """A position-aware layer: `start_index` is a plain Python argument."""

    def call(self, inputs, start_index=0):
        return inputs + ops.cast(start_index, inputs.dtype)


class _NoTraining(keras.layers.Layer):
    def call(self, inputs):
        return inputs


class _WithTraining(keras.layers.Layer):
    def call(self, inputs, training=None):
        return inputs


def test_functional_models_are_recognised():
    x = keras.Input((3,))
    functional = keras.Model(x, keras.layers.Dense(2)(x))
    assert ki.is_functional(functional), (
        CHANGED + "a functional keras.Model no longer has `_nodes_by_depth`."
    )

    class Subclassed(keras.Model):
        def call(self, inputs):
            return inputs

    assert not ki.is_functional(Subclassed()), (
        CHANGED + "a subclassed keras.Model now has `_nodes_by_depth`."
    )
    assert not ki.is_functional(object())


def test_producing_node_and_its_fields():
    x = keras.Input((4, 3), name="tokens")
    dense = keras.layers.Dense(5)
    h = dense(x)
    y = _Shift()(h, start_index=3)
    assert ki.producing_node(x) is None, (
        CHANGED + "the `_keras_history` node of a `keras.Input` is no longer "
        "an input node (`Node.is_input`)."
    )
    assert ki.producing_node(np.zeros((2, 3))) is None
    node = ki.producing_node(h)
    assert node is not None and node.operation is dense, (
        CHANGED + "`tensor._keras_history.operation._inbound_nodes"
        "[node_index]` no longer is the node of the call that produced it."
    )
    assert list(node.input_tensors) == [x] and list(node.outputs) == [h], (
        CHANGED + "`Node.input_tensors` / `Node.outputs` no longer list the "
        "call's KerasTensor inputs / outputs."
    )
    args, kwargs = ki.call_arguments(ki.producing_node(y))
    assert len(args) == 1 and args[0] is h and kwargs == {"start_index": 3}, (
        CHANGED + "`Node.arguments.args/kwargs` no longer hold the recorded "
        f"call arguments, Python ints included. Got args={args}, kwargs={kwargs}."
    )
    value = np.ones((2, 4, 5), "float32")
    args, kwargs = ki.call_arguments(ki.producing_node(y), {id(h): value})
    assert args[0] is value and kwargs == {"start_index": 3}, (
        CHANGED + "`Node.arguments.fill_in({id(tensor): value})` no longer "
        "substitutes values for KerasTensors (and keeps other arguments)."
    )


def test_inbound_nodes_lists_calls_in_order():
    layer = keras.layers.LayerNormalization()
    a, b = keras.Input((4, 3)), keras.Input((3,))
    ya, yb = layer(a), layer(b)
    nodes = ki.inbound_nodes(layer)
    assert len(nodes) == 2 and nodes[0].outputs[0] is ya and nodes[1].outputs[0] is yb, (
        CHANGED + "`Layer._inbound_nodes` no longer lists one node per call, in call order."
    )
    assert ki.producing_node(yb) is nodes[1] and len(nodes[0].outputs[0].shape) == 3


def test_keras_ops_are_recognised_by_module():
    x = keras.Input((3,))
    for tensor, name in ((x + 1.0, "Add"), (ops.exp(x), "Exp"), (x * x, "Multiply")):
        op = ki.producing_node(tensor).operation
        assert ki.is_keras_op(op), (
            CHANGED + f"the operation of a `keras.ops` call ({type(op).__module__}."
            f"{type(op).__name__}) no longer lives under "
            f"'{ki.KERAS_OPS_MODULE_PREFIX}'."
        )
        assert type(op).__name__ == name, (
            CHANGED + f"the `keras.ops` operation class for {name} is now "
            f"{type(op).__name__} (see cached_decoder._ELEMENTWISE_OPS)."
        )
    assert not ki.is_keras_op(keras.layers.Dense(2))


def test_training_argument_detection():
    for layer, expected in (
        (keras.layers.Dropout(0.5), True),
        (_WithTraining(), True),
        (_NoTraining(), False),
    ):
        assert ki.call_has_training_arg(layer) is expected, (
            CHANGED + f"`Layer._call_has_training_arg` of {type(layer).__name__} "
            f"is no longer {expected}."
        )
    assert not ki.call_has_training_arg(ki.producing_node(keras.Input((2,)) + 1.0).operation)


def test_mask_set_on_a_tensor_is_read_back():
    x = ops.ones((2, 3))
    assert ki.get_mask(x) is None
    mask = ops.convert_to_tensor(np.array([[True, False, True], [True, True, False]]))
    assert ki.set_mask(x, mask) is x
    assert ki.get_mask(x) is not None and np.array_equal(
        np.asarray(ki.get_mask(x)), np.asarray(mask)
    ), (
        CHANGED + "`keras.src.backend.common.masking.get_keras_mask` no longer "
        "returns the mask given to `set_keras_mask`."
    )
    ki.set_mask(x, None)
    assert ki.get_mask(x) is None, CHANGED + "`set_keras_mask(x, None)` no longer clears it."


def test_embedding_mask_zero_propagates_the_implicit_mask():
    tokens = np.array([[3, 1, 0, 0], [2, 0, 0, 0]], "int32")
    embedding = keras.layers.Embedding(5, 2, mask_zero=True)
    assert np.array_equal(np.asarray(ki.get_mask(embedding(tokens))), tokens != 0), (
        CHANGED + "an Embedding(mask_zero=True) output no longer carries the "
        "implicit mask tokens != 0 (`_keras_mask`)."
    )
    symbolic = embedding(keras.Input((4,), dtype="int32"))
    mask = ki.get_mask(symbolic)
    assert mask is not None and tuple(mask.shape) == (None, 4), (
        CHANGED + "a symbolic Embedding(mask_zero=True) output no longer "
        "carries a (batch, length) implicit mask."
    )


def test_loss_reduces_over_the_mask_only():
    class Identity(keras.losses.Loss):
        def call(self, y_true, y_pred):
            return ki.set_mask(y_pred + 0.0, ops.not_equal(y_true, 0))

    y_true = np.array([[1, 1, 0], [1, 0, 0]], "int32")
    y_pred = np.array([[1.0, 2.0, 100.0], [3.0, 100.0, 100.0]], "float32")
    value = float(Identity()(y_true, y_pred))
    assert np.isclose(value, 2.0), (
        CHANGED + "`keras.losses.Loss` no longer averages over the entries of "
        f"the implicit mask set on `call`'s result only (got {value}, want 2.0)."
    )
