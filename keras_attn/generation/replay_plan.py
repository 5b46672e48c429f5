"""How `CachedDecoder` replays a functional model: which layer runs how, read once from the graph
(the cached-layer protocol is in docs/guides/decoding.md)."""

import inspect

import keras

from keras_attn import checks, keras_internals
from keras_attn.layers import attention_ops

# The names a cached layer's `call` may give its cache (keras-hub's names for an attention layer
# and for a decoder block) and its padding mask.
CACHE_ARGUMENTS = ("cache", "self_attention_cache")
PADDING_MASK_ARGUMENTS = ("padding_mask", "decoder_padding_mask")
# Call arguments of a cached layer that the engine replays or supplies itself.
_REPLAYED_ARGUMENTS = {
    "use_causal_mask",
    "training",
    "return_attention_scores",
    "encoder_sequence",
    "encoder_padding_mask",
}
# Layers that act on each position on its own (given their weights). Checked with `isinstance`.
_POSITIONWISE_LAYERS = (
    keras.layers.Dense,
    keras.layers.Embedding,
    keras.layers.Dropout,
    keras.layers.GaussianDropout,
    keras.layers.GaussianNoise,
    keras.layers.AlphaDropout,
    keras.layers.Activation,
    keras.layers.ReLU,
    keras.layers.LeakyReLU,
    keras.layers.ELU,
    keras.layers.Add,
    keras.layers.Subtract,
    keras.layers.Multiply,
    keras.layers.Average,
    keras.layers.Maximum,
    keras.layers.Minimum,
    keras.layers.Identity,
    keras.layers.Rescaling,
)
# Layers that are position-wise only when they act on the feature axis.
_LAST_AXIS_LAYERS = (
    keras.layers.LayerNormalization,
    keras.layers.RMSNormalization,
    keras.layers.UnitNormalization,
    keras.layers.Softmax,
    keras.layers.Concatenate,
)
# Element-wise `keras.ops` recorded in a functional graph (e.g. `x + y`), by class name.
_ELEMENTWISE_OPS = frozenset(
    "Add Subtract Multiply Divide TrueDivide Negative Maximum Minimum Power Sqrt Square Abs Cast "
    "Exp Log Tanh Sigmoid Relu Gelu Silu Softplus "
    "Equal NotEqual Greater GreaterEqual Less LessEqual LogicalAnd LogicalOr LogicalNot".split()
)


class ReplayPlan:
    """The steps `CachedDecoder` replays, read once from a functional graph.

    Attributes: `steps` (the decoder-path steps, a dict each, in execution order), `static_nodes`
    (the encoder-path nodes, in order), `memory_specs` (what `initial_state` computes), `static_inputs`
    (`{name: KerasTensor}` the encoder path reads), `num_masks`.

    Args:
        logits: the model's output, a KerasTensor (B, T, V).
        input_names: `{name: KerasTensor}`, the model's inputs.
        token_input: the name of the token input.

    Raises:
        ValueError: naming a decoder-path layer that cannot be replayed position by position.
    """

    def __init__(self, logits, input_names, token_input):
        self.token_input, self._tokens = token_input, input_names[token_input]
        self.steps, self.static_nodes, self.memory_specs = [], [], []
        self._dynamic, self._static_slots = {}, {}
        self._planned, self._planned_static, self._static_input_ids = set(), set(), set()
        self._visit(logits)
        num_caches = self.num_masks = 0
        for step in self.steps:  # slots in execution order
            if step["kind"] == "cached":
                step["cache"], num_caches = num_caches, num_caches + 1
            if step.get("mask") is not None:
                step["mask"], self.num_masks = self.num_masks, self.num_masks + 1
        ids = self._static_input_ids
        self.static_inputs = {name: t for name, t in input_names.items() if id(t) in ids}
        self._mark_tail()

    def is_dynamic(self, tensor):
        """Whether `tensor` depends on the token input (memoised)."""
        key = id(tensor)
        if key not in self._dynamic:
            node = keras_internals.producing_node(tensor)
            inputs = () if node is None else node.input_tensors
            self._dynamic[key] = tensor is self._tokens or any(map(self.is_dynamic, inputs))
        return self._dynamic[key]

    def _plan_static(self, tensor):
        node = keras_internals.producing_node(tensor)
        if node is None:
            self._static_input_ids.add(id(tensor))
        elif id(node) not in self._planned_static:
            self._planned_static.add(id(node))
            for t in node.input_tensors:
                self._plan_static(t)
            self.static_nodes.append(node)

    def _visit(self, tensor):
        if not self.is_dynamic(tensor):  # a static tensor the decoder path reads: memory
            if id(tensor) not in self._static_slots:
                self._plan_static(tensor)
                self._static_slots[id(tensor)] = len(self.memory_specs)
                self.memory_specs.append(("tensor", tensor))
            return
        node = keras_internals.producing_node(tensor)
        if node is not None and _cached_call(node.operation) and tensor is not node.outputs[0]:
            raise ValueError(
                f"CachedDecoder: a second output of '{node.operation.name}' (e.g. attention "
                "scores) leads to the logits. Build the model without `return_attention_scores`."
            )
        if node is None or id(node) in self._planned:
            return
        self._planned.add(id(node))
        step = self._make_step(node)
        for t in step["reads"]:
            self._visit(t)
        self.steps.append(step)

    def _make_step(self, node):
        """Plans how one decoder-path node is replayed (its step dict)."""
        op = node.operation
        name = f"'{op.name}' ({type(op).__name__})"
        step = {"node": node, "op": op, "reads": list(node.input_tensors), "kind": "positionwise"}
        call = _cached_call(op)
        if call is not None:
            return self._plan_cached_step(step, name, call)
        if _is_position_aware(op):
            signature = inspect.signature(op.call)
            start = _recorded_start(name, _given_arguments(op, node), signature.parameters)
            return dict(step, kind="position", start_index=start, signature=signature)
        if _is_positionwise(op, node):
            return step
        raise ValueError(
            f"CachedDecoder: layer {name}, between `{self.token_input}` and the logits, is not "
            "known to act on each position on its own (an encoder block is not causal): see "
            "docs/guides/decoding.md for the layers replayed, or use `RecomputingDecoder`."
        )

    def _plan_cached_step(self, step, name, call):
        """A cached layer: its cache, its padding mask and, with cross-attention, memory."""
        op, parameters = step["op"], call["parameters"]
        given = _given_arguments(op, step["node"])
        if "mask" in parameters:
            raise ValueError(
                f"CachedDecoder: {name} takes Keras' `mask` call argument, the input's mask, not "
                "the cache's. Rename it `padding_mask`, falling back to the implicit mask."
            )
        replayed = _REPLAYED_ARGUMENTS | {call["sequence"], call["padding_mask"], "start_index"}
        extra = [arg for arg, value in given.items() if arg not in replayed and value is not None]
        if extra:
            raise ValueError(f"CachedDecoder: {name} is called with `{extra[0]}`, not replayed.")
        if "use_causal_mask" in parameters:
            causal = given.get("use_causal_mask", parameters["use_causal_mask"].default)
            if causal is not True:
                raise ValueError(
                    f"CachedDecoder: {name} has use_causal_mask={causal}; needs causal."
                )
        sequence = given[call["sequence"]]
        if not self.is_dynamic(sequence):
            raise ValueError(f"CachedDecoder: the input of {name} must depend on the tokens.")
        step.update(kind="cached", call=call, sequence=sequence, reads=[sequence], mask=None)
        if "start_index" in parameters:
            step["start_index"] = _recorded_start(name, given, parameters)
        arg = call["padding_mask"]
        explicit = given.get(arg)
        if arg is not None and explicit is not None:
            if not self.is_dynamic(explicit):
                raise ValueError(f"CachedDecoder: the padding mask of {name} must be the tokens'.")
            step.update(mask=True, mask_tensor=explicit)
            step["reads"].append(explicit)
        elif arg is not None and attention_ops.get_implicit_mask(sequence) is not None:
            step.update(mask=True, mask_tensor=None)
        if given.get("encoder_sequence") is not None:
            self._plan_cross_attention(step, name, given)
        return step

    def _plan_cross_attention(self, step, name, given):
        """Cross-attention: its cache and the encoder padding mask become memory."""
        op = step["op"]
        sequence, mask = given["encoder_sequence"], given.get("encoder_padding_mask")
        has_cache = callable(getattr(op, "compute_cross_attention_cache", None))
        if not has_cache or "cross_attention_cache" not in step["call"]["parameters"]:
            raise ValueError(f"CachedDecoder: {name} has no `compute_cross_attention_cache`.")
        if any(t is not None and self.is_dynamic(t) for t in (sequence, mask)):
            raise ValueError(f"CachedDecoder: the encoder inputs of {name} depend on the tokens.")
        step["memory"] = len(self.memory_specs)
        self.memory_specs.append(("cross_cache", op, sequence, mask))
        for tensor in (sequence, mask):
            if tensor is not None:
                self._plan_static(tensor)

    def _mark_tail(self):
        """Marks the tail: the position-wise steps after the last sequence-mixing one, read only
        by the tail (when one position's logits are wanted, they run on it alone)."""
        consumers = {}
        for step in self.steps:
            for t in step["reads"]:
                consumers.setdefault(id(t), []).append(step)
        for step in reversed(self.steps):
            downstream = [c for t in step["node"].outputs for c in consumers.get(id(t), [])]
            step["tail"] = step["kind"] == "positionwise" and all(c["tail"] for c in downstream)


def _cached_call(op):
    """`{"parameters", "sequence", "cache", "padding_mask"}` argument names of a cached layer's
    `call`, or None for a layer without `init_cache`."""
    if not isinstance(op, keras.layers.Layer) or not callable(getattr(op, "init_cache", None)):
        return None
    parameters = inspect.signature(op.call).parameters
    cache = next((a for a in CACHE_ARGUMENTS if a in parameters), None)
    if cache is None or "cache_index" not in parameters:
        raise ValueError(
            f"CachedDecoder: layer '{op.name}' has `init_cache` but its `call` does not take a "
            f"cache ({list(CACHE_ARGUMENTS)}) and `cache_index`. Received: {list(parameters)}."
        )
    return {
        "parameters": parameters,
        "sequence": next(iter(parameters)),
        "cache": cache,
        "padding_mask": next((a for a in PADDING_MASK_ARGUMENTS if a in parameters), None),
    }


def _given_arguments(op, node):
    """The arguments a graph node's call was recorded with, by name."""
    args, kwargs = keras_internals.call_arguments(node)
    return dict(inspect.signature(op.call).bind(*args, **kwargs).arguments)


def _recorded_start(name, given, parameters):
    """The Python int `start_index` a layer was called with in the graph."""
    start = checks.static_int(given.get("start_index", parameters["start_index"].default))
    if start is None:
        raise ValueError(f"CachedDecoder: {name} must be given a Python int `start_index`.")
    return start


def _is_position_aware(op):
    """A layer whose `call` takes `start_index`."""
    return (
        isinstance(op, keras.layers.Layer)
        and "start_index" in inspect.signature(op.call).parameters
    )


def _is_positionwise(op, node):
    """Whether the layer or op of `node` acts on each position on its own."""
    if isinstance(op, _LAST_AXIS_LAYERS):
        axes = op.axis if isinstance(op.axis, (list, tuple)) else [op.axis]
        return all(axis in (-1, len(node.outputs[0].shape) - 1) for axis in axes)
    if isinstance(op, keras.layers.Layer):
        return isinstance(op, _POSITIONWISE_LAYERS)
    return keras_internals.is_keras_op(op) and type(op).__name__ in _ELEMENTWISE_OPS
