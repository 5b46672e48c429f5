import keras
import numpy as np
from keras import ops

from keras_attn import checks, keras_internals
from keras_attn.generation import arguments
from keras_attn.generation.decoder import Decoder
from keras_attn.generation.replay_plan import ReplayPlan
from keras_attn.layers import attention_ops
from keras_attn.layers.position_writes import write_positions


class CachedDecoder(Decoder):
    """Runs a functional keras_attn model one new position at a time, with caches.

    Layers are replayed by what their `call` declares, so your own layers decode too; the
    protocol and the state: docs/guides/decoding.md.

    Args:
        model: a functional `keras.Model` whose single output is the next-token logits (B, T, V).
        token_input: the token input's name (default: the only input, else `decoder_tokens`).

    Raises:
        ValueError: for a model that is not functional with one (B, T, V) output, or a layer
            that cannot be replayed position by position.

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
        Vaswani et al. 2017, "Attention Is All You Need", section 3.
    """

    shared_state_keys = ("memory",)

    def __init__(self, model, token_input=None):
        functional = keras_internals.is_functional(model)
        shapes = [tuple(o.shape) for o in model.outputs] if functional else None
        if not functional or len(shapes) != 1 or len(shapes[0]) != 3 or shapes[0][-1] is None:
            raise ValueError(
                "CachedDecoder needs a functional `keras.Model` with a single output, the logits "
                f"(batch, length, vocabulary) (else use `RecomputingDecoder`). Received: "
                f"{model!r:.80}, output shapes {shapes}."
            )
        self.vocabulary_size = shapes[0][-1]
        super().__init__(model, token_input)
        self._plan = ReplayPlan(model.outputs[0], self._input_names, self.token_input)
        # False when a cached layer keeps only the last positions (`rolling_cache = True`).
        cached = [step["op"] for step in self._plan.steps if step["kind"] == "cached"]
        self.keeps_every_position = not any(getattr(op, "rolling_cache", False) for op in cached)

    def check_max_length(self, max_length):
        """Refuses a `max_length` that is not a positive int or past a layer's `max_positions`."""
        arguments.check_max_length(max_length)
        for step in self._plan.steps:
            limit = getattr(step["op"], "max_positions", None) if "start_index" in step else None
            if limit is not None and step["start_index"] + max_length > limit:
                raise ValueError(
                    f"max_length={max_length} does not fit layer '{step['op'].name}', which "
                    f"encodes {limit} positions: generate at most {limit - step['start_index']}."
                )

    def initial_state(self, batch_size, max_length, inputs=None):
        """Runs the encoder path once and allocates the empty caches.

        Args:
            batch_size: B, an int or int32 scalar tensor.
            max_length: L, a static int that `check_max_length` accepts: the positions cached.
            inputs: the model's other inputs by name (e.g. `encoder_tokens`), or None.

        Returns:
            `{"caches": tuple, "padding_masks": tuple, "memory": tuple}` (see the guide).

        Raises:
            ValueError: if `inputs` are not the model's other inputs, of `batch_size` rows.
        """
        values = self._encoder_values(inputs, batch_size)
        memory = []
        for spec in self._plan.memory_specs:
            if spec[0] == "tensor":
                memory.append(values[id(spec[1])])
            else:
                _, op, sequence, mask = spec
                encoded = values[id(sequence)]
                mask = _padding_mask(encoded) if mask is None else values[id(mask)]
                memory.append((op.compute_cross_attention_cache(encoded), ops.cast(mask, "bool")))
        cached = [step["op"] for step in self._plan.steps if step["kind"] == "cached"]
        caches = tuple(op.init_cache(batch_size, max_length) for op in cached)
        masks = tuple(
            ops.zeros((batch_size, max_length), "bool") for _ in range(self._plan.num_masks)
        )
        return {"caches": caches, "padding_masks": masks, "memory": tuple(memory)}

    def _encoder_values(self, inputs, batch_size=None):
        given = self._other_inputs(inputs, self._plan.static_inputs, batch_size)
        values = {id(self._plan.static_inputs[name]): value for name, value in given.items()}
        for node in self._plan.static_nodes:
            args, kwargs = keras_internals.call_arguments(node, values)
            outputs = _call(node.operation, args, kwargs)
            for t, y in zip(node.outputs, keras.tree.flatten(outputs)):
                values[id(t)] = y
        return values

    def __call__(self, token_ids, cache_index, state, logits_index=None):
        """Runs `token_ids` at positions `cache_index ...` through the caches.

        Args:
            token_ids: (B, T) int tokens at positions `cache_index .. cache_index + T - 1`.
            cache_index: int or int32 scalar tensor.
            state: from `initial_state` (or a previous call).
            logits_index: optional int or int32 scalar: only the logits of that position.

        Returns:
            `(logits, state)`: logits (B, T, V) (or (B, 1, V) with `logits_index`), the new state.

        Raises:
            ValueError: for `token_ids` not (B, T) ints of the state's batch, or a bad index.
        """
        self._check_step(token_ids, cache_index, state)
        memory = state["memory"]
        caches = list(state["caches"])
        masks = list(state["padding_masks"])
        values = {id(self._input_names[self.token_input]): token_ids}
        for spec, value in zip(self._plan.memory_specs, memory):
            if spec[0] == "tensor":
                values[id(spec[1])] = value
        first_position = ops.cast(cache_index, "int32")
        # With `logits_index`, the tail steps (see `ReplayPlan`) run on that one position.
        cut, tail = logits_index is not None, {}

        def at_index(tensor):
            if id(tensor) not in tail:
                value = values[id(tensor)]
                dynamic = self._plan.is_dynamic(tensor)
                tail[id(tensor)] = _take_position(value, logits_index) if dynamic else value
            return tail[id(tensor)]

        for step in self._plan.steps:
            kind, op, on_tail = step["kind"], step["op"], cut and step["tail"]
            if kind == "positionwise":
                lookup = (
                    {id(t): at_index(t) for t in step["node"].input_tensors} if on_tail else values
                )
                args, kwargs = keras_internals.call_arguments(step["node"], lookup)
                outputs = _call(op, args, kwargs)
            elif kind == "position":
                args, kwargs = keras_internals.call_arguments(step["node"], values)
                bound = step["signature"].bind(*args, **kwargs)
                bound.arguments["start_index"] = first_position + step["start_index"]
                outputs = op(*bound.args, **bound.kwargs)
            else:  # cached
                outputs, caches[step["cache"]] = self._cached_step(
                    step, values, masks, caches[step["cache"]], cache_index, memory
                )
            produced = step["node"].outputs
            if kind == "cached":  # only the hidden states (checked in planning)
                produced = produced[:1]
            for t, y in zip(produced, keras.tree.flatten(outputs)):
                (tail if on_tail else values)[id(t)] = y
        output = self.model.outputs[0]
        logits = at_index(output) if cut else values[id(output)]
        return logits, {"caches": tuple(caches), "padding_masks": tuple(masks), "memory": memory}

    def _check_step(self, token_ids, cache_index, state):
        checks.check_index(cache_index, "cache_index")
        tokens = token_ids if hasattr(token_ids, "shape") else np.asarray(token_ids)
        dtype, shape = keras.backend.standardize_dtype(tokens.dtype), tuple(tokens.shape)
        held = {x.shape[0] for x in keras.tree.flatten((state["caches"], state["padding_masks"]))}
        other_batch = len(shape) == 2 and None not in (shape[0], *held) and {shape[0]} != held
        if len(shape) != 2 or "int" not in dtype or other_batch:
            raise ValueError(
                "CachedDecoder: `token_ids` must be integer token ids (batch, length) for the "
                f"state's batch {sorted(held, key=str)}. Received: {dtype} {shape}."
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
                f"CachedDecoder: layer '{step['op'].name}' has `init_cache`, but given a cache it "
                f"returned {type(results).__name__} instead of `(outputs, new_cache, ...)`."
            )
        return results[0], results[1]

    @staticmethod
    def _update_mask(step, values, masks, cache_index):
        """Writes the new positions' padding mask into the layer's buffer (None without a mask)."""
        if step["mask"] is None:
            return None
        if step["mask_tensor"] is None:
            new = _padding_mask(values[id(step["sequence"])])
        else:
            new = ops.cast(values[id(step["mask_tensor"])], "bool")
        masks[step["mask"]] = write_positions(masks[step["mask"]], new, cache_index, axis=1)
        return masks[step["mask"]]


def _padding_mask(sequence):
    """The implicit mask of `sequence` (B, T, ...), else all True (B, T) bool."""
    mask = attention_ops.get_implicit_mask(sequence)
    return ops.ones(ops.shape(sequence)[:2], "bool") if mask is None else ops.cast(mask, "bool")


def _call(op, args, kwargs):
    if keras_internals.call_has_training_arg(op):
        kwargs = dict(kwargs, training=False)
    return op(*args, **kwargs)


def _take_position(x, index):
    """x[:, index:index + 1] for a (possibly traced) scalar index."""
    index = ops.reshape(ops.cast(index, "int32"), (1,))
    return ops.take(x, index, axis=1)
