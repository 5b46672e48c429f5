import inspect

import keras
from keras import ops

from keras_attn import keras_internals
from keras_attn.layers import attention_ops
from keras_attn.layers.multi_head_self_attention import MultiHeadSelfAttention
from keras_attn.layers.token_and_position_embedding import TokenAndPositionEmbedding
from keras_attn.layers.transformer_decoder import TransformerDecoder
from keras_attn.layers.transformer_encoder import TransformerEncoder

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
    "Add", "Subtract", "Multiply", "Divide", "TrueDivide", "Negative", "Cast",
    "Maximum", "Minimum", "Power", "Sqrt", "Square", "Exp", "Log", "Abs",
    "Tanh", "Sigmoid", "Relu", "Gelu", "Silu", "Softplus",
    "Equal", "NotEqual", "Greater", "GreaterEqual", "Less", "LessEqual",
    "LogicalAnd", "LogicalOr", "LogicalNot",
}


class CachedDecoder:
    """Runs a functional keras_attn model one new position at a time, with caches.

    The adapter every generation function uses (`greedy_search`, `sample`,
    `beam_search`). It reads the functional graph of `model` once: the
    *decoder path* (every layer between the token input and the logits) is
    replayed position-wise, and the *encoder path* (everything the decoder
    path reads that does not depend on the tokens, e.g. the encoder of a
    translation model) is run once per batch in `initial_state`. On the
    decoder path

    * position-aware layers, those whose `call` takes a `start_index`
      argument (`TokenAndPositionEmbedding`, `SinusoidalPositionEncoding`,
      `PixelEmbedding`, `LowResolutionEmbedding`, or a layer of your own),
      are replayed with all their recorded arguments and
      `start_index=cache_index` (plus any Python int they were given);
      their arguments that do not depend on the tokens are computed once;
    * every `TransformerDecoder` gets its self-attention cache and
      `cache_index`, and, with cross-attention, the encoder's projected
      keys/values (computed once) and the encoder padding mask (the Keras
      implicit mask of its `encoder_sequence`, i.e. source tokens != 0 for
      the library's models, exactly what the full model uses);
    * a self-attention layer called directly (`MultiHeadSelfAttention`,
      `LocalBlockAttention`, `RelativeGlobalAttention`, with
      `use_causal_mask=True`) gets its cache and `cache_index`;
    * position-wise layers (Dense, Embedding, Dropout, LayerNormalization,
      activations, Add/Multiply/..., element-wise ops) are applied as
      recorded, in inference mode.

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
    `{"caches": (one (B, max_length, H, K + V) self-attention cache per
    cached layer, in graph order), "padding_masks": (one (B, max_length)
    bool buffer per cached layer that has a padding mask), "memory":
    (pairs (cross-attention cache (B, S, H, K + V), encoder padding mask
    (B, S) bool) and other encoder-side tensors the decoder path reads)}`.

    The protocol the generation functions rely on (a custom decoder object
    with these four methods works too): `initial_state`, `__call__`,
    `repeat_state`, `reorder_state`.

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
            message names the layer and what is unexpected: a
            `TransformerEncoder`, a non-causal self-attention, an attention
            mask, an encoder sequence that depends on the tokens, or a layer
            not known to be position-wise).

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

    def __init__(self, model, token_input=None):
        if not keras_internals.is_functional(model):
            raise ValueError(
                "CachedDecoder needs a functional `keras.Model` (built with "
                "`keras.Input` and layer calls), whose graph it can read. "
                f"Received: {model!r}. Wrap subclassed models' layers in a "
                "functional model, or use `RecomputingDecoder`."
            )
        self.model = model
        outputs = model.outputs
        if len(outputs) != 1 or len(outputs[0].shape) != 3 or outputs[0].shape[-1] is None:
            raise ValueError(
                "CachedDecoder needs a model with a single output, the logits "
                "of shape (batch, length, vocabulary). Received outputs with "
                f"shapes {[tuple(o.shape) for o in outputs]}."
            )
        self._logits_tensor = outputs[0]
        self.vocabulary_size = outputs[0].shape[-1]
        self._input_names = input_names(model)
        self.token_input = find_token_input(self._input_names, token_input, type(self).__name__)
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
            if isinstance(node.operation, TransformerDecoder) and tensor is not node.outputs[0]:
                raise ValueError(
                    f"CachedDecoder: the attention scores of decoder block "
                    f"'{node.operation.name}' feed the logits. Only its hidden "
                    "states can be replayed with caches; build the generation "
                    "model without `return_attention_scores=True` on that path."
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
            if step["kind"] in ("decoder", "self_attention"):
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
        if isinstance(op, TransformerEncoder):
            raise ValueError(
                f"CachedDecoder: layer {name} is on the path from "
                f"`{self.token_input}` to the logits. An encoder block is not "
                "causal (every position sees every other), so the model cannot "
                "be decoded one token at a time. Use TransformerDecoder blocks "
                "on the decoder side."
            )
        if isinstance(op, TransformerDecoder):
            return self._plan_decoder_step(step, name, plan_static)
        if isinstance(op, MultiHeadSelfAttention):
            return self._plan_self_attention_step(step, name)
        if _is_position_aware(op):
            return self._plan_position_step(step, name)
        if _is_positionwise(op):
            return step
        raise ValueError(
            f"CachedDecoder: layer {name} is on the path from "
            f"`{self.token_input}` to the logits and is not known to act on "
            "each position on its own, so it cannot be replayed one token at a "
            "time. Supported on the decoder path: position-aware layers "
            "(a `start_index` call argument), TransformerDecoder, causal "
            "self-attention layers, and position-wise layers (Dense, Embedding, "
            "Dropout, LayerNormalization on the last axis, activations, "
            "Add/Multiply/...). Decode such a model with `RecomputingDecoder`."
        )

    def _plan_decoder_step(self, step, name, plan_static):
        """A `TransformerDecoder` call: self-attention cache, padding mask
        and, with cross-attention, the encoder side as memory."""
        op = step["op"]
        bound = _bind(op, step["node"])
        _refuse_given(name, bound, ("self_attention_cache", "cache_index", "cross_attention_cache"))
        if bound["use_causal_mask"] is not True:
            raise ValueError(
                f"CachedDecoder: decoder block {name} is called with "
                f"use_causal_mask={bound['use_causal_mask']!r}; token-by-token "
                "decoding needs causal self-attention (use_causal_mask=True)."
            )
        sequence = bound["decoder_sequence"]
        if not self._is_dynamic(sequence):
            raise ValueError(
                f"CachedDecoder: the `decoder_sequence` of {name} does not "
                f"depend on `{self.token_input}`. Expected the decoder path "
                "to run through it."
            )
        step.update(kind="decoder", sequence=sequence, reads=[sequence])
        self._plan_padding_mask(step, name, bound["decoder_padding_mask"], "decoder_padding_mask")
        encoder_sequence = bound["encoder_sequence"]
        if encoder_sequence is not None:
            for arg in ("encoder_sequence", "encoder_padding_mask"):
                if bound[arg] is not None and self._is_dynamic(bound[arg]):
                    raise ValueError(
                        f"CachedDecoder: the `{arg}` of {name} depends on "
                        f"`{self.token_input}`. Cross-attention must read an "
                        "encoder output computed from the other inputs only."
                    )
            step["memory"] = len(self._memory_specs)
            mask = bound["encoder_padding_mask"]
            self._memory_specs.append(("cross_cache", op, encoder_sequence, mask))
            plan_static(encoder_sequence)
            if mask is not None:
                plan_static(mask)
        return step

    def _plan_self_attention_step(self, step, name):
        """A causal self-attention layer called directly: cache and padding mask."""
        bound = _bind(step["op"], step["node"])
        _refuse_given(name, bound, ("cache", "cache_index", "attention_mask"))
        inputs = bound["inputs"]
        if bound["use_causal_mask"] is not True:
            raise ValueError(
                f"CachedDecoder: self-attention layer {name} on the decoder "
                f"path is called with use_causal_mask={bound['use_causal_mask']!r}. "
                "Token-by-token decoding needs use_causal_mask=True."
            )
        if bound["return_attention_scores"]:
            raise ValueError(
                f"CachedDecoder: self-attention layer {name} returns its "
                "attention scores; the decoder path must carry only hidden "
                "states. Build the generation model without them."
            )
        step.update(kind="self_attention", sequence=inputs, reads=[inputs])
        self._plan_padding_mask(step, name, bound["padding_mask"], "padding_mask")
        return step

    def _plan_position_step(self, step, name):
        """A position-aware layer. The protocol: a `start_index` call argument
        (the absolute position of the first input position). Replayed with all
        its recorded arguments; tensors that do not depend on the tokens (e.g.
        a conditioning image) become memory, computed once."""
        op = step["op"]
        bound = _bind(op, step["node"])
        start = attention_ops.static_int(bound["start_index"])
        if start is None:
            raise ValueError(
                f"CachedDecoder: {name} is called with a tensor `start_index`; "
                "expected a Python int (the engine adds the cache index to it)."
            )
        step.update(kind="position", start_index=start, signature=inspect.signature(op.call))
        return step

    def _plan_padding_mask(self, step, name, explicit, arg):
        """Where the padding mask of a cached layer comes from: its explicit
        argument (replayed), the implicit mask of its input, or none."""
        step["mask"] = None
        if explicit is not None:
            if not self._is_dynamic(explicit):
                raise ValueError(
                    f"CachedDecoder: the `{arg}` of {name} does not depend on "
                    f"`{self.token_input}`; expected a (batch, length) mask of "
                    "the decoder tokens."
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
            downstream = [
                c for t in step["node"].outputs for c in consumers.get(id(t), [])
            ]
            step["tail"] = step["kind"] == "positionwise" and all(c["tail"] for c in downstream)
        self._produced_by = produced_by

    # ------------------------------------------------------------- protocol
    def initial_state(self, batch_size, max_length, inputs=None):
        """Runs the encoder path once and allocates the empty caches.

        Args:
            batch_size: B, an int or int32 scalar tensor (dynamic batch sizes
                are fine inside `tf.function`).
            max_length: L, a static int: the number of positions the caches
                hold (prompt plus generated tokens).
            inputs: the model's other inputs (everything but the token
                input), a dict by input name, e.g. `{"encoder_tokens": (B, S)
                int}`; a single tensor is accepted when exactly one is needed.
                None for decoder-only models.

        Returns:
            The state dict `{"caches": tuple, "padding_masks": tuple,
            "memory": tuple}` (see the class docstring).

        Raises:
            ValueError: if `max_length` is not a positive int, an input the
                encoder path needs is missing, or `max_length` exceeds a
                learned position table.
        """
        if isinstance(max_length, bool) or not isinstance(max_length, int) or max_length <= 0:
            raise ValueError(
                "`max_length` must be a positive Python int (the cache size is "
                f"a static shape). Received: max_length={max_length!r}."
            )
        for step in self._steps:
            op = step["op"]
            if isinstance(op, TokenAndPositionEmbedding) and op.position == "learned":
                if step["start_index"] + max_length > op.sequence_length:
                    raise ValueError(
                        f"max_length={max_length} does not fit the learned "
                        f"position table of layer '{op.name}' "
                        f"({op.sequence_length} positions). Generate at most "
                        f"{op.sequence_length - step['start_index']} positions."
                    )
        values = self._encoder_values(inputs)
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
            if step["kind"] in ("decoder", "self_attention"):
                caches.append(step["op"].init_cache(batch_size, max_length))
        masks = tuple(
            ops.zeros((batch_size, max_length), "bool") for _ in range(self._num_masks)
        )
        return {"caches": tuple(caches), "padding_masks": masks, "memory": tuple(memory)}

    def _encoder_values(self, inputs):
        needed = dict(self._static_inputs)
        if not needed:
            return {}
        if not isinstance(inputs, dict):
            if inputs is not None and len(needed) == 1:
                inputs = {next(iter(needed)): inputs}
            else:
                raise ValueError(
                    f"This model needs the inputs {sorted(needed)} besides "
                    f"`{self.token_input}`: pass them as `inputs={{name: tensor}}`. "
                    f"Received: inputs={type(inputs).__name__}."
                )
        missing = sorted(set(needed) - set(inputs))
        if missing:
            raise ValueError(
                f"Missing model inputs {missing} (needed by the encoder path). "
                f"Received inputs for {sorted(inputs)}."
            )
        values = {}
        for name, tensor in needed.items():
            values[id(tensor)] = ops.convert_to_tensor(inputs[name], dtype=tensor.dtype)
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
        """
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
            if logits_index is not None and self._is_dynamic(tensor) and not (
                producer is not None and producer["tail"]
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
            elif kind == "self_attention":
                padding_mask = self._update_mask(step, values, masks, cache_index)
                outputs, caches[step["cache"]] = op(
                    values[id(step["sequence"])], padding_mask=padding_mask,
                    use_causal_mask=True, cache=caches[step["cache"]],
                    cache_index=cache_index, training=False,
                )
            else:  # decoder
                kwargs = {}
                if "memory" in step:
                    cross_cache, mask = memory[step["memory"]]
                    kwargs = {"encoder_padding_mask": mask, "cross_attention_cache": cross_cache}
                results = op(
                    values[id(step["sequence"])],
                    decoder_padding_mask=self._update_mask(step, values, masks, cache_index),
                    self_attention_cache=caches[step["cache"]], cache_index=cache_index,
                    training=False, **kwargs,
                )
                # Only the hidden states: attention scores, if the graph asked
                # for them, are not on the path to the logits (checked above).
                outputs, caches[step["cache"]] = results[0], results[1]
            produced = step["node"].outputs
            if kind == "decoder":
                produced = produced[:1]
            for t, y in zip(produced, keras.tree.flatten(outputs)):
                if step.get("tail") and logits_index is not None:
                    gathered[id(t)] = y
                values[id(t)] = y
        logits = tail_value(self._logits_tensor) if logits_index is not None else (
            values[id(self._logits_tensor)]
        )
        return logits, {"caches": tuple(caches), "padding_masks": tuple(masks), "memory": memory}

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

    def repeat_state(self, state, num_beams):
        """Repeats every row `num_beams` times (row b becomes rows
        b * num_beams ... b * num_beams + num_beams - 1): caches, encoder
        keys/values and encoder padding masks.

        Args:
            state: a state of batch size B.
            num_beams: K, a positive int.

        Returns:
            The state with batch size B * K.
        """
        return keras.tree.map_structure(lambda x: ops.repeat(x, num_beams, axis=0), state)

    def reorder_state(self, state, indices):
        """Gathers the rows of the self-attention caches and their padding
        masks (beam reordering); the encoder memory is shared by the beams
        of a row and left as it is.

        Args:
            state: a state of batch size N.
            indices: (N,) int rows to take.

        Returns:
            The reordered state.
        """
        return {
            "caches": tuple(ops.take(c, indices, axis=0) for c in state["caches"]),
            "padding_masks": tuple(ops.take(m, indices, axis=0) for m in state["padding_masks"]),
            "memory": state["memory"],
        }


def find_token_input(input_names, token_input, owner):
    """Returns the name of the token input among `input_names` (see
    `CachedDecoder`); raises a ValueError naming the inputs otherwise."""
    names = list(input_names)
    if token_input is not None:
        if token_input not in input_names:
            raise ValueError(
                f"{owner}: `token_input` must name one of the model's inputs "
                f"{names}. Received: token_input={token_input!r}."
            )
        return token_input
    if len(names) == 1:
        return names[0]
    if "decoder_tokens" in input_names:
        return "decoder_tokens"
    raise ValueError(
        f"{owner} cannot tell which of the model's inputs {names} holds the "
        "tokens to generate. Pass `token_input=<name>`."
    )


def input_names(model):
    """Maps each input name to its KerasTensor (dict keys for dict inputs)."""
    structure = model.input
    if isinstance(structure, dict):
        return dict(structure)
    flat = keras.tree.flatten(structure)
    return {t.name: t for t in flat}


def _bind(op, node):
    signature = inspect.signature(op.call)
    args, kwargs = keras_internals.call_arguments(node)
    bound = signature.bind(*args, **kwargs)
    bound.apply_defaults()
    return bound.arguments


def _refuse_given(name, bound, arguments):
    for arg in arguments:
        if bound.get(arg) is not None:
            raise ValueError(
                f"CachedDecoder: {name} is called with `{arg}` in the model "
                "graph. The engine supplies caches itself and cannot replay "
                f"a layer given `{arg}`; build the model without it."
            )


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
