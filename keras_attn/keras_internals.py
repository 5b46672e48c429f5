"""The one place keras_attn touches Keras private APIs (written against Keras 3.15.1).

Everything else goes through these functions; `tests/test_keras_internals.py`
pins each behaviour relied on, so a Keras upgrade that changes one fails there
with a message naming the change. The `Node`s returned here are read only
through `operation`, `input_tensors` and `outputs` (pinned by that test too).
"""

import keras

try:  # No public API gets or sets the implicit mask in Keras 3.15.
    from keras.src.backend.common.masking import get_keras_mask, set_keras_mask
except ImportError:  # pragma: no cover - other Keras layouts

    def get_keras_mask(x):
        return getattr(x, "_keras_mask", None)

    def set_keras_mask(x, mask):
        x._keras_mask = mask


KERAS_OPS_MODULE_PREFIX = "keras.src.ops"


def is_functional(model):
    """Args: model: any object. Returns: whether it is a functional
    `keras.Model` (one with a graph of nodes, `_nodes_by_depth`)."""
    return isinstance(model, keras.Model) and hasattr(model, "_nodes_by_depth")


def producing_node(tensor):
    """Args: tensor: a KerasTensor. Returns: the `Node` of the layer or op
    call that produced it (`_keras_history`), or None for a graph input."""
    history = getattr(tensor, "_keras_history", None)
    if history is None or history.operation is None:
        return None
    node = history.operation._inbound_nodes[history.node_index]
    return None if node.is_input else node  # an `InputLayer`: an entry point


def inbound_nodes(operation):
    """Args: operation: a layer or op. Returns: the list of `Node`s of its
    calls in functional graphs, in call order (`_inbound_nodes`)."""
    return operation._inbound_nodes


def call_arguments(node, values=None):
    """Args: node: a `Node`; values: optional dict id(KerasTensor) -> value.
    Returns: the `(args, kwargs)` the call was recorded with, or, with
    `values`, those with every KerasTensor replaced by `values[id(t)]`."""
    if values is None:
        return node.arguments.args, node.arguments.kwargs
    return node.arguments.fill_in(values)


def is_keras_op(operation):
    """Args: operation: a node's operation. Returns: whether it is one of
    the `keras.ops` operations (e.g. `Add` for `x + y`), by module."""
    return type(operation).__module__.startswith(KERAS_OPS_MODULE_PREFIX)


def call_has_training_arg(layer):
    """Args: layer: any object. Returns: whether it is a Layer whose `call`
    takes `training` (`_call_has_training_arg`)."""
    return bool(getattr(layer, "_call_has_training_arg", False))


def get_mask(x):
    """Args: x: a tensor. Returns: its implicit Keras mask (`_keras_mask`,
    e.g. set by an Embedding with `mask_zero=True`), or None."""
    return get_keras_mask(x)


def set_mask(x, mask):
    """Args: x: a tensor; mask: a boolean tensor or None. Sets (in place)
    the implicit Keras mask of `x`. Returns: `x`."""
    set_keras_mask(x, mask)
    return x
