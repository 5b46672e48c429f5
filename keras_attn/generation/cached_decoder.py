import inspect

import keras
import numpy as np
from keras import ops

from keras_attn import checks, keras_internals
from keras_attn.generation import arguments
from keras_attn.generation.decoder import Decoder
from keras_attn.layers import attention_ops

# The cached-layer protocol (see `CachedDecoder`): the names a layer's `call`
# may give its cache (keras-hub's names for an attention layer and for a
# decoder block) and its padding mask.
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

# Layers that act on each position on its own (given their weights), so they
# can be applied to one new position at a time. Checked with `isinstance`.
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
# Element-wise `keras.ops` recorded in a functional graph (e.g. `x + y`).
_ELEMENTWISE_OPS = {
    "Add",
    "Subtract",
    "Multiply",
    "Divide",
    "TrueDivide",
    "Negative",
    "Cast",
    "Maximum",
    "Minimum",
    "Power",
    "Sqrt",
    "Square",
    "Exp",
    "Log",
    "Abs",
    "Tanh",
    "Sigmoid",
    "Relu",
    "Gelu",
    "Silu",
    "Softplus",
    "Equal",
    "NotEqual",
    "Greater",
    "GreaterEqual",
    "Less",
    "LessEqual",
    "LogicalAnd",
    "LogicalOr",
    "LogicalNot",
}


class CachedDecoder(Decoder):
    """Runs a functional keras_attn model one new position at a time, with caches.

    The adapter every generation function uses (`greedy_search`, `sample`,
    `beam_search`). It reads the functional graph of `model` once: the
    *decoder path* (every layer between the token input and the logits) is
    replayed position-wise, and the *encoder path* (everything the decoder
    path reads that does not depend on the tokens, e.g. the encoder of a
    translation model) is run once per batch in `initial_state`.

    The engine knows no layer classes. A layer on the decoder path is
    replayed by what its `call` signature and methods declare (the
    protocol; keras_attn's layers follow it, and so can yours):

    * **cached** layers have `init_cache(batch_size, max_length)` and a
      `call` that takes `cache_index` and the cache as `cache` (an attention
      layer: `MultiHeadSelfAttention`, `LocalBlockAttention`,
      `RelativeGlobalAttention`) or `self_attention_cache` (a block:
      `TransformerDecoder`), and returns `(outputs, new_cache, ...)` when
      given one. Each step calls `layer(sequence, cache=..., cache_index=i,
      use_causal_mask=True, training=False)`, plus its padding-mask buffer
      as `padding_mask` / `decoder_padding_mask` when the call takes one. If
      the graph gave it an `encoder_sequence`, the layer also has
      `compute_cross_attention_cache(encoder_sequence)` and a
      `cross_attention_cache` argument: the engine computes that cache once
      per batch and passes it with `encoder_padding_mask`. The graph must
      have called it with `use_causal_mask=True` (where the call takes it),
      and only its first output may lead to the logits. Keras hands the
      implicit mask of an input only to an argument named `mask`, so a
      padding-mask argument must fall back to it when None (as keras_attn's
      layers do, with `attention_ops.get_implicit_mask`), or the full model
      would not mask what the engine masks. A cached layer that also takes
      `start_index` gets `start_index=cache_index` as a position-aware one.
      One whose cache keeps only the last positions says so with
      `rolling_cache = True` (positions are then written in order, never
      again: see `keeps_every_position`);
    * **position-aware** layers take a `start_index` call argument (the
      absolute position of the first input position): they are replayed
      with all their recorded arguments and `start_index=cache_index` (plus
      any Python int they were given); their arguments that do not depend
      on the tokens are computed once. One with a bounded range of positions
      says so with a `max_positions` attribute (int, or None when
      unbounded), which `check_max_length` checks `max_length` against;
    * **position-wise** layers (Dense, Embedding, Dropout,
      LayerNormalization on the last axis, activations, Add/Multiply/...,
      element-wise ops) are applied as recorded, in inference mode.

    Anything else (an encoder block, which is not causal, a convolution) is
    refused with an error naming the layer.

    Decoder padding masks are kept as in the full model: the padding mask
    of each cached layer (its explicit `decoder_padding_mask` /
    `padding_mask` argument, replayed position-wise, or else the Keras
    implicit mask of its input, e.g. tokens != 0 from an embedding with
    `mask_zero=True`) is written into a (B, max_length) buffer next to its
    cache, so a generated padding id is masked exactly as the full model
    masks it. Position-by-position decoding therefore equals the full
    model's logits (to float tolerance) for every self-attention type.

    State: a dict of fixed-shape tensors, batch first, so decoding loops
    compile under `tf.function(jit_compile=True)`:
    `{"caches": (one cache per cached layer, in graph order, as its
    `init_cache` returns it: (B, H, K + V, max_length) for global
    self-attention, (B, max_length, H, K + V) for a local one, (B, W, H,
    K + V) for a rolling local one), "padding_masks": (one (B, max_length)
    bool buffer per cached layer that has a padding mask), "memory":
    (pairs (cross-attention cache (B, H, K + V, S), encoder padding mask
    (B, S) bool) and other encoder-side tensors the decoder path reads)}`.
    The beams of a row share its "memory".

    The generation functions run any `Decoder` (`initial_state`,
    `__call__`, `repeat_state`, `reorder_state`).

    Args:
        model: a functional `keras.Model` whose single output is the
            next-token logits (B, T, V), built from keras_attn blocks and
            position-wise layers.
        token_input: name of the token-id input. Defaults to the only input
            of a one-input model, else the input named `decoder_tokens`.

    Raises:
        ValueError: if `model` is not a built functional model with one
            output; if the token input cannot be found; if a layer on the
            decoder path cannot be replayed position by position (the
            message names the layer and what is unexpected: a layer that
            mixes positions without a cache (e.g. `TransformerEncoder`), a
            non-causal self-attention, an argument the engine cannot replay
            (e.g. an attention mask), an encoder sequence that depends on the
            tokens, or a layer not known to be position-wise).

    Example:
    >>> import keras
    >>> from keras_attn.generation import CachedDecoder
    >>> from keras_attn.models import translation_transformer
    >>> model = translation_transformer(50, num_layers=1, hidden_dim=16,
    ...                                 num_heads=2, intermediate_dim=32)
    >>> decoder = CachedDecoder(model)
    >>> state = decoder.initial_state(2, 8, {"encoder_tokens": keras.ops.ones((2, 5), "int32")})
    >>> logits, state = decoder(keras.ops.ones((2, 1), "int32"), 0, state)
    >>> tuple(logits.shape)
    (2, 1, 50)

    Reference:
        Vaswani et al. 2017, "Attention Is All You Need", section 3
        (auto-regressive decoding; the cache reuses the keys and values of
        earlier positions instead of recomputing them).
    """

    shared_state_keys = ("memory",)

    def __init__(self, model, token_input=None):
        functional = keras_internals.is_functional(model)
        shapes = [tuple(o.shape) for o in model.outputs] if functional else None
        if not functional or len(shapes) != 1 or len(shapes[0]) != 3 or shapes[0][-1] is None:
            raise ValueError(
                "CachedDecoder needs a functional `keras.Model` (it reads the graph; for a "
                "subclassed model, use `RecomputingDecoder`) with a single output, the logits "
                f"(batch, length, vocabulary). Received: {model!r:.80}, output shapes {shapes}."
            )
        self._logits_tensor = model.outputs[0]
        self.vocabulary_size = shapes[0][-1]
        super().__init__(model, token_input)
        self._token_tensor = self._input_names[self.token_input]
        self._dynamic = {}
        self._plan_graph()

    # ------------------------------------------------------------ planning
    def _is_dynamic(self, tensor):
        """Whether `tensor` depends on the token input (memoised DFS)."""
        key = id(tensor)
        if key in self._dynamic:
            return self._dynamic[key]
        node = keras_internals.producing_node(tensor)
        if node is None:
            result = tensor is self._token_tensor
        else:
            result = any(self._is_dynamic(t) for t in node.input_tensors)
        self._dynamic[key] = result
        return result

    def _plan_graph(self):
        self._steps = []  # decoder-path nodes in topological order
        self._static_nodes = []  # encoder-path nodes, topological order
        self._memory_specs = []  # what `initial_state` computes, in order
        self._static_slots = {}  # id(static tensor) -> memory index
        self._num_caches = 0
        self._num_masks = 0
        planned = set()
        planned_static = set()

        static_inputs = set()

        def plan_static(tensor):
            node = keras_internals.producing_node(tensor)
            if node is None:
                static_inputs.add(id(tensor))
                return
            if id(node) in planned_static:
                return
            planned_static.add(id(node))
            for t in node.input_tensors:
                plan_static(t)
            self._static_nodes.append(node)

        def need_static(tensor):
            """Registers a static tensor read by the decoder path as memory."""
            if id(tensor) not in self._static_slots:
                plan_static(tensor)
                self._static_slots[id(tensor)] = len(self._memory_specs)
                self._memory_specs.append(("tensor", tensor))
            return self._static_slots[id(tensor)]

        def visit(tensor):
            if not self._is_dynamic(tensor):
                need_static(tensor)
                return
            node = keras_internals.producing_node(tensor)
            if node is None:
                return
            if _cached_call(node.operation) and tensor is not node.outputs[0]:
                raise ValueError(
                    f"CachedDecoder: a second output of '{node.operation.name}' (e.g. attention "
                    "scores) leads to the logits; only hidden states are replayed with caches. "
                    "Build the generation model without `return_attention_scores=True` there."
                )
            if id(node) in planned:
                return
            planned.add(id(node))
            step = self._make_step(node, plan_static)
            for t in step["reads"]:
                visit(t)
            self._steps.append(step)

        visit(self._logits_tensor)
        # Slots in execution order (steps were created before their inputs).
        for step in self._steps:
            if step["kind"] == "cached":
                step["cache"] = self._num_caches
                self._num_caches += 1
            if step.get("mask") is not None:
                step["mask"] = self._num_masks
                self._num_masks += 1
        self._static_inputs = {
            name: t for name, t in self._input_names.items() if id(t) in static_inputs
        }
        self._mark_tail()

    def _make_step(self, node, plan_static):
        """Plans how one decoder-path node is replayed (its step dict)."""
        op = node.operation
        name = f"'{op.name}' ({type(op).__name__})"
        step = {"node": node, "op": op, "reads": list(node.input_tensors), "kind": "positionwise"}
        call = _cached_call(op)
        if call is not None:
            return self._plan_cached_step(step, name, call, plan_static)
        if _is_position_aware(op):
            return self._plan_position_step(step, name)
        if _is_positionwise(op):
            return step
        raise ValueError(
            f"CachedDecoder: layer {name}, between `{self.token_input}` and the logits, is not "
            "known to act on each position on its own. Supported: cached layers (`init_cache`, "
            "`cache`, `cache_index`; an encoder block is not causal), position-aware layers "
            "(`start_index`) and position-wise ones (Dense...). Else, use `RecomputingDecoder`."
        )

    def _plan_cached_step(self, step, name, call, plan_static):
        """A cached layer (see the protocol): its cache, its padding mask and,
        with cross-attention, the encoder side as memory."""
        op, parameters = step["op"], call["parameters"]
        given = _given_arguments(op, step["node"])
        if "mask" in parameters:
            raise ValueError(
                f"CachedDecoder: {name} takes Keras' `mask` call argument, which Keras fills with "
                "its input's implicit mask (B, T), not the cache's (B, max_length). Rename it "
                "`padding_mask`, falling back to the implicit mask when it is None."
            )
        replayed = _REPLAYED_ARGUMENTS | {call["sequence"], call["padding_mask"], "start_index"}
        for arg, value in given.items():
            if arg not in replayed and value is not None:
                raise ValueError(
                    f"CachedDecoder: {name} is called with `{arg}` in the model graph, but only "
                    "the sequence, its padding mask and the encoder inputs are replayed. Build the "
                    f"generation model without `{arg}`."
                )
        if "use_causal_mask" in parameters:
            causal = given.get("use_causal_mask", parameters["use_causal_mask"].default)
            if causal is not True:
                raise ValueError(
                    f"CachedDecoder: {name} is called with use_causal_mask="
                    f"{causal!r}; decoding token by token needs causal attention."
                )
        sequence = given[call["sequence"]]
        if not self._is_dynamic(sequence):
            raise ValueError(
                f"CachedDecoder: the `{call['sequence']}` of {name} does not depend "
                f"on `{self.token_input}`; the decoder path must run through it."
            )
        step.update(kind="cached", call=call, sequence=sequence, reads=[sequence])
        if "start_index" in parameters:
            step["start_index"] = self._recorded_start(name, given, parameters)
        self._plan_padding_mask(step, name, given.get(call["padding_mask"]), call["padding_mask"])
        if given.get("encoder_sequence") is not None:
            self._plan_cross_attention(step, name, given, plan_static)
        return step

    def _plan_cross_attention(self, step, name, given, plan_static):
        """Cross-attention of a cached layer: its cache and the encoder
        padding mask become memory, computed once per batch."""
        op = step["op"]
        if "cross_attention_cache" not in step["call"]["parameters"] or not callable(
            getattr(op, "compute_cross_attention_cache", None)
        ):
            raise ValueError(
                f"CachedDecoder: {name} is given an `encoder_sequence` but has no "
                "`compute_cross_attention_cache` and `cross_attention_cache`."
            )
        encoder_sequence, mask = given["encoder_sequence"], given.get("encoder_padding_mask")
        for arg, value in (("encoder_sequence", encoder_sequence), ("encoder_padding_mask", mask)):
            if value is not None and self._is_dynamic(value):
                raise ValueError(
                    f"CachedDecoder: the `{arg}` of {name} depends on "
                    f"`{self.token_input}`; it must depend on the other inputs only."
                )
        step["memory"] = len(self._memory_specs)
        self._memory_specs.append(("cross_cache", op, encoder_sequence, mask))
        plan_static(encoder_sequence)
        if mask is not None:
            plan_static(mask)

    def _plan_position_step(self, step, name):
        """A position-aware layer. The protocol: a `start_index` call argument
        (the absolute position of the first input position). Replayed with all
        its recorded arguments; tensors that do not depend on the tokens (e.g.
        a conditioning image) become memory, computed once."""
        signature = inspect.signature(step["op"].call)
        given = _given_arguments(step["op"], step["node"])
        start = self._recorded_start(name, given, signature.parameters)
        step.update(kind="position", start_index=start, signature=signature)
        return step

    @staticmethod
    def _recorded_start(name, given, parameters):
        """The Python int `start_index` a layer was called with in the graph."""
        start = checks.static_int(given.get("start_index", parameters["start_index"].default))
        if start is None:
            raise ValueError(
                f"CachedDecoder: {name} is called with a tensor `start_index`; "
                "expected a Python int (the engine adds the cache index to it)."
            )
        return start

    def _plan_padding_mask(self, step, name, explicit, arg):
        """Where the padding mask of a cached layer comes from: its explicit
        argument (replayed), the implicit mask of its input, or none."""
        step["mask"] = None
        if arg is None:  # the layer takes no padding mask
            return
        if explicit is not None:
            if not self._is_dynamic(explicit):
                raise ValueError(
                    f"CachedDecoder: the `{arg}` of {name} does not depend on "
                    f"`{self.token_input}`; expected a mask of the decoder tokens."
                )
            step["mask"], step["mask_tensor"] = True, explicit
            step["reads"].append(explicit)
        elif attention_ops.get_implicit_mask(step["sequence"]) is not None:
            step["mask"], step["mask_tensor"] = True, None

    def _mark_tail(self):
        """Marks the position-wise steps after the last sequence-mixing one:
        when only the last position's logits are wanted (prefill), they run
        on that position alone."""
        consumers = {}
        for step in self._steps:
            for t in step["reads"]:
                consumers.setdefault(id(t), []).append(step)
        produced_by = {}
        for step in self._steps:
            for t in step["node"].outputs:
                produced_by[id(t)] = step
        for step in reversed(self._steps):
            downstream = [c for t in step["node"].outputs for c in consumers.get(id(t), [])]
            step["tail"] = step["kind"] == "positionwise" and all(c["tail"] for c in downstream)
        self._produced_by = produced_by

    # ------------------------------------------------------------- protocol
    def check_max_length(self, max_length):
        """Refuses a `max_length` that is not a positive int or that a
        position-aware layer cannot encode. The searches call it before
        they pad the prompt to `max_length` (a huge one would otherwise
        exhaust memory first); call it before `initial_state`, which trusts
        its caller.

        Raises:
            ValueError: naming the layer and the positions it encodes.
        """
        arguments.check_max_length(max_length)
        for step in self._steps:
            limit = getattr(step["op"], "max_positions", None) if "start_index" in step else None
            if limit is not None and step["start_index"] + max_length > limit:
                raise ValueError(
                    f"max_length={max_length} does not fit layer '{step['op'].name}', which "
                    f"encodes {limit} positions (`max_positions`): generate at most "
                    f"{limit - step['start_index']}."
                )

    def initial_state(self, batch_size, max_length, inputs=None):
        """Runs the encoder path once and allocates the empty caches.

        Args:
            batch_size: B, an int or int32 scalar tensor (dynamic batch sizes
                are fine inside `tf.function`).
            max_length: L, a static int: the number of positions the caches
                hold (prompt plus generated tokens), as `check_max_length`
                accepts it (the generation functions call it).
            inputs: the model's other inputs (everything but the token
                input), a dict by input name, e.g. `{"encoder_tokens": (B, S)
                int}`; a single tensor is accepted when exactly one is needed.
                None for decoder-only models.

        Returns:
            The state dict `{"caches": tuple, "padding_masks": tuple,
            "memory": tuple}` (see the class docstring).

        Raises:
            ValueError: if `inputs` are not the model's other inputs, for
                `batch_size` rows (see `Decoder._other_inputs`).
        """
        values = self._encoder_values(inputs, batch_size)
        memory = []
        for spec in self._memory_specs:
            if spec[0] == "tensor":
                memory.append(values[id(spec[1])])
            else:
                _, op, sequence, mask = spec
                sequence_value = values[id(sequence)]
                if mask is None:
                    mask_value = attention_ops.get_implicit_mask(sequence_value)
                    if mask_value is None:
                        mask_value = ops.ones(ops.shape(sequence_value)[:2], "bool")
                else:
                    mask_value = values[id(mask)]
                mask_value = ops.cast(mask_value, "bool")
                memory.append((op.compute_cross_attention_cache(sequence_value), mask_value))
        caches = []
        for step in self._steps:
            if step["kind"] == "cached":
                caches.append(step["op"].init_cache(batch_size, max_length))
        masks = tuple(ops.zeros((batch_size, max_length), "bool") for _ in range(self._num_masks))
        return {"caches": tuple(caches), "padding_masks": masks, "memory": tuple(memory)}

    def _encoder_values(self, inputs, batch_size=None):
        given = self._other_inputs(inputs, self._static_inputs, batch_size)
        values = {id(self._static_inputs[name]): value for name, value in given.items()}
        for node in self._static_nodes:
            args, kwargs = keras_internals.call_arguments(node, values)
            outputs = _call(node.operation, args, kwargs)
            for t, y in zip(node.outputs, keras.tree.flatten(outputs)):
                values[id(t)] = y
        return values

    def __call__(self, token_ids, cache_index, state, logits_index=None):
        """Runs `token_ids` at positions `cache_index ...` through the caches.

        Args:
            token_ids: (B, T) int tokens at absolute positions
                `cache_index .. cache_index + T - 1` (T = prompt length for
                the prefill, 1 for a decoding step).
            cache_index: int or int32 scalar tensor.
            state: from `initial_state` (or a previous call).
            logits_index: optional int / int32 scalar: return only the logits
                of `token_ids[:, logits_index]` (the position-wise layers
                after the last attention block then run on that position
                alone, which saves a (B, T, V) buffer during the prefill).

        Returns:
            `(logits, state)`: logits (B, T, V) float (or (B, 1, V) with
            `logits_index`), and the state with updated caches.

        Raises:
            ValueError: if `token_ids` is not (B, T) integers, `cache_index`
                is not an integer scalar, or B differs from the state's batch
                size (when both are known); and the cached layers' errors
                (e.g. positions past the caches).
        """
        self._check_step(token_ids, cache_index, state)
        memory = state["memory"]
        caches = list(state["caches"])
        masks = list(state["padding_masks"])
        values = {id(self._token_tensor): token_ids}
        for spec, value in zip(self._memory_specs, memory):
            if spec[0] == "tensor":
                values[id(spec[1])] = value
        gathered = {}

        def tail_value(tensor):
            if id(tensor) in gathered:
                return gathered[id(tensor)]
            value = values[id(tensor)]
            producer = self._produced_by.get(id(tensor))
            if (
                logits_index is not None
                and self._is_dynamic(tensor)
                and not (producer is not None and producer["tail"])
            ):
                value = _take_position(value, logits_index)
            gathered[id(tensor)] = value
            return value

        for step in self._steps:
            kind, op = step["kind"], step["op"]
            if kind == "positionwise":
                lookup = values
                if step["tail"]:
                    lookup = {id(t): tail_value(t) for t in step["node"].input_tensors}
                args, kwargs = keras_internals.call_arguments(step["node"], lookup)
                outputs = _call(op, args, kwargs)
            elif kind == "position":
                args, kwargs = keras_internals.call_arguments(step["node"], values)
                bound = step["signature"].bind(*args, **kwargs)
                bound.arguments["start_index"] = (
                    ops.cast(cache_index, "int32") + step["start_index"]
                )
                outputs = op(*bound.args, **bound.kwargs)
            else:  # cached
                outputs, caches[step["cache"]] = self._cached_step(
                    step, values, masks, caches[step["cache"]], cache_index, memory
                )
            produced = step["node"].outputs
            if kind == "cached":  # only the hidden states (checked in planning)
                produced = produced[:1]
            for t, y in zip(produced, keras.tree.flatten(outputs)):
                if step.get("tail") and logits_index is not None:
                    gathered[id(t)] = y
                values[id(t)] = y
        logits = (
            tail_value(self._logits_tensor)
            if logits_index is not None
            else (values[id(self._logits_tensor)])
        )
        return logits, {"caches": tuple(caches), "padding_masks": tuple(masks), "memory": memory}

    @property
    def keeps_every_position(self):
        """False when a cached layer's cache keeps only the last positions
        (`rolling_cache = True`): see `Decoder.keeps_every_position`."""
        return not any(
            getattr(step["op"], "rolling_cache", False)
            for step in self._steps
            if step["kind"] == "cached"
        )

    def _check_step(self, token_ids, cache_index, state):
        checks.check_index(cache_index, "cache_index")
        tokens = token_ids if hasattr(token_ids, "shape") else np.asarray(token_ids)
        dtype, shape = keras.backend.standardize_dtype(tokens.dtype), tuple(tokens.shape)
        held = {x.shape[0] for x in keras.tree.flatten((state["caches"], state["padding_masks"]))}
        if (
            len(shape) != 2
            or "int" not in dtype
            or None not in (shape[0], *held)
            and {shape[0]} != held
        ):
            raise ValueError(
                "CachedDecoder: `token_ids` must be integer token ids of shape (batch, length), for "
                f"the batch of the state: {sorted(held, key=str)} (make it with `initial_state("
                f"batch_size, ...)`). Received dtype {dtype} and shape {shape}."
            )

    def _cached_step(self, step, values, masks, cache, cache_index, memory):
        """Calls a cached layer on the new positions; returns (outputs, cache)."""
        call = step["call"]
        kwargs = {call["cache"]: cache, "cache_index": cache_index}
        if call["padding_mask"] is not None:
            kwargs[call["padding_mask"]] = self._update_mask(step, values, masks, cache_index)
        if "use_causal_mask" in call["parameters"]:
            kwargs["use_causal_mask"] = True
        if "start_index" in step:
            kwargs["start_index"] = ops.cast(cache_index, "int32") + step["start_index"]
        if "memory" in step:
            cross_cache, mask = memory[step["memory"]]
            kwargs.update(encoder_padding_mask=mask, cross_attention_cache=cross_cache)
        results = _call(step["op"], (values[id(step["sequence"])],), kwargs)
        if not isinstance(results, (tuple, list)) or len(results) < 2:
            raise ValueError(
                f"CachedDecoder: layer '{step['op'].name}' ({type(step['op']).__name__}) has "
                f"`init_cache`, but called with a cache it returned {type(results).__name__} "
                "instead of `(outputs, new_cache, ...)`."
            )
        return results[0], results[1]

    @staticmethod
    def _update_mask(step, values, masks, cache_index):
        """Writes the padding mask of the new positions into the layer's
        (B, max_length) buffer; returns the buffer (None without a mask)."""
        if step["mask"] is None:
            return None
        sequence = values[id(step["sequence"])]
        if step["mask_tensor"] is not None:
            new = values[id(step["mask_tensor"])]
        else:
            new = attention_ops.get_implicit_mask(sequence)
            if new is None:
                new = ops.ones(ops.shape(sequence)[:2], "bool")
        if keras.backend.standardize_dtype(new.dtype) != "bool":
            new = ops.not_equal(new, 0)
        buffer = ops.slice_update(masks[step["mask"]], (0, cache_index), new)
        masks[step["mask"]] = buffer
        return buffer


def _cached_call(op):
    """The protocol view of a cached layer's `call` (see `CachedDecoder`):
    `{"parameters", "sequence", "cache", "padding_mask"}` argument names, or
    None for a layer that is not cached (no `init_cache`).

    Raises:
        ValueError: if it has `init_cache` but its call takes no cache.
    """
    if not isinstance(op, keras.layers.Layer) or not callable(getattr(op, "init_cache", None)):
        return None
    parameters = inspect.signature(op.call).parameters
    cache = next((a for a in CACHE_ARGUMENTS if a in parameters), None)
    if cache is None or "cache_index" not in parameters:
        raise ValueError(
            f"CachedDecoder: layer '{op.name}' ({type(op).__name__}) has `init_cache` but its "
            f"`call` does not take a cache (one of {list(CACHE_ARGUMENTS)}) and `cache_index`. "
            f"Received call arguments {list(parameters)}."
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


def _is_position_aware(op):
    """A layer whose `call` takes `start_index` (see `CachedDecoder`)."""
    call = getattr(op, "call", None)
    if not isinstance(op, keras.layers.Layer) or call is None:
        return False
    return "start_index" in inspect.signature(call).parameters


def _is_positionwise(op):
    if isinstance(op, _POSITIONWISE_LAYERS):
        return True
    if isinstance(op, _LAST_AXIS_LAYERS):
        axis = getattr(op, "axis", -1)
        axes = list(axis) if isinstance(axis, (list, tuple)) else [axis]
        rank = None
        nodes = keras_internals.inbound_nodes(op)
        if nodes and nodes[0].outputs:
            rank = len(nodes[0].outputs[0].shape)
        return all(a == -1 or (rank is not None and a == rank - 1) for a in axes)
    if not isinstance(op, keras.layers.Layer):
        return keras_internals.is_keras_op(op) and type(op).__name__ in _ELEMENTWISE_OPS
    return False


def _call(op, args, kwargs):
    if keras_internals.call_has_training_arg(op):
        kwargs = dict(kwargs, training=False)
    return op(*args, **kwargs)


def _take_position(x, index):
    """x[:, index:index + 1] for a (possibly traced) scalar index."""
    index = ops.reshape(ops.cast(index, "int32"), (1,))
    return ops.take(x, index, axis=1)
