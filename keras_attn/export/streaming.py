"""A decoding loop one position per call, its state as tensors: signatures a client drives
(TF Serving has no streaming RPC; examples/serving/README.md)."""

import math

import keras
import tensorflow as tf

from keras_attn.generation import decoding, sampling


class PackedState:
    """A `CachedDecoder` state as float32 tensors with positions on axis 1: the caches and their
    padding masks as `cache` (B, L, C), an encoder-decoder's memory (the cross-attention keys,
    values and source mask of each layer) as `memory` (B, S, M); each cache and mask is flattened
    into C or M. A step reads only the cache positions before its own.

    Args:
        decoder: a `CachedDecoder`.
        max_length: L, the positions cached.
        memory_inputs: for a model with inputs besides the tokens (an encoder), a function
            `n -> inputs`: the other inputs by name for one row of n source positions; None for
            a model with the token input only.

    Raises:
        ValueError: if the model has other inputs and no `memory_inputs`, or a cache or mask
            has no positions axis of size L (a rolling cache keeps only its last positions), or
            a memory entry no source positions axis.

    Example:
    >>> from keras_attn.export.streaming import PackedState
    >>> from keras_attn.generation import CachedDecoder
    >>> from keras_attn.models import music_transformer
    >>> decoder = CachedDecoder(music_transformer(40, num_layers=2, hidden_dim=16, num_heads=2,
    ...                                           intermediate_dim=32, max_relative_position=8))
    >>> packed = PackedState(decoder, max_length=12)
    >>> packed.width  # per layer: keys and values (2 x 16) and a padding-mask bit
    66
    >>> tuple(packed.pack(decoder.initial_state(3, 12)).shape)
    (3, 12, 66)
    """

    def __init__(self, decoder, max_length, memory_inputs=None):
        names = [t.name for t in decoder.model.inputs]
        if len(names) != 1 and memory_inputs is None:
            raise ValueError(
                f"Streaming a model with inputs besides the tokens needs `memory_inputs`, the "
                f"other inputs of n source positions. Received: inputs {names}."
            )

        def state(length, source_length):
            inputs = None if memory_inputs is None else memory_inputs(source_length)
            state = decoder.initial_state(1, length, inputs)
            return (state["caches"], state["padding_masks"]), state["memory"]

        (full, full_memory), (short, short_memory) = state(max_length, 2), state(max_length - 1, 1)
        self._cache = _Columns(full, short, max_length, "caches")
        self._memory = _Columns(full_memory, short_memory, 2, "an encoder memory")
        self.max_length = max_length
        self.sizes, self.width = self._cache.sizes, self._cache.width
        self.memory_sizes, self.memory_width = self._memory.sizes, self._memory.width

    def pack(self, state):
        """The caches and masks of `state` as `cache` (B, L, C) float32."""
        return self._cache.pack((state["caches"], state["padding_masks"]))

    def pack_memory(self, state):
        """The memory of `state` as (B, S, M) float32."""
        return self._memory.pack(state["memory"])

    def padded(self, cache):
        """`cache` (B, n, C) as a step takes it: zero-padded to (B, L, C), a static shape."""
        full = tf.pad(cache, [[0, 0], [0, self.max_length - tf.shape(cache)[1]], [0, 0]])
        return tf.ensure_shape(full, (None, self.max_length, self.width))

    def unpack(self, packed, memory=None):
        """The decoder state of `cache` (B, L, C) and `memory` (B, S, M) float32 (None: none)."""
        caches, masks = self._cache.unpack(packed)
        memory = () if memory is None else self._memory.unpack(memory)
        return {"caches": caches, "padding_masks": masks, "memory": memory}


class _Columns:
    """A structure of tensors that each have one positions axis besides the batch, as one
    (B, N, C) float32 tensor; `full` and `short` are examples of N and N - 1 positions."""

    def __init__(self, full, short, length, what):
        self._structure, self._layouts = full, []
        for leaf, other in zip(keras.tree.flatten(full), keras.tree.flatten(short)):
            axes = [a for a, (n, m) in enumerate(zip(leaf.shape, other.shape)) if n != m]
            if len(axes) != 1 or axes[0] == 0 or leaf.shape[axes[0]] != length:
                raise ValueError(
                    f"Streaming needs {what} with one positions axis; received a state entry of "
                    f"shape {tuple(leaf.shape)}. Pass `streaming=False`."
                )
            rest = [n for a, n in enumerate(leaf.shape) if a not in (0, axes[0])]
            self._layouts.append((axes[0], rest, leaf.dtype))
        self.sizes = [math.prod(rest) for _, rest, _ in self._layouts]
        self.width = sum(self.sizes)

    def pack(self, structure):
        columns = []
        for leaf, (axis, _, _), size in zip(
            keras.tree.flatten(structure), self._layouts, self.sizes
        ):
            leaf = tf.experimental.numpy.moveaxis(leaf, axis, 1)
            columns.append(tf.cast(tf.reshape(leaf, [-1, _length(leaf), size]), "float32"))
        return tf.concat(columns, axis=-1)

    def unpack(self, packed):
        leaves, length = [], _length(packed)
        for column, (axis, rest, dtype) in zip(tf.split(packed, self.sizes, -1), self._layouts):
            leaf = tf.reshape(column, [-1, length] + rest)
            leaves.append(tf.cast(tf.experimental.numpy.moveaxis(leaf, 1, axis), dtype))
        return keras.tree.pack_sequence_as(self._structure, leaves)


def _length(x):
    """The size of axis 1: static when known."""
    return x.shape[1] if x.shape[1] is not None else tf.shape(x)[1]


class TokenStream:
    """`decoding.token_loop` cut into a prefill and steps: each picks the token of one position.

    Args:
        decoder: a `CachedDecoder`.
        packed: the `PackedState` of its state.
        suppressed: checked ids never sampled (`arguments.check_suppressed_token_ids`).
        end_token_id: int, a row finishes after choosing it.
        pad_token_id: int, the prompt's padding and what a finished row gets.
        choose: `(logits (B, V) float32, position, *controls) -> (B,) int`, the token choice
            (e.g. `sample_choice`).
    """

    def __init__(self, decoder, packed, suppressed, end_token_id, pad_token_id, choose):
        self.decoder, self.packed, self.choose = decoder, packed, choose
        self.suppress = decoding.suppressor(suppressed, decoder.vocabulary_size)
        self.end_token_id, self.pad_token_id = end_token_id, pad_token_id

    def prefill(self, prompt, lengths, controls, inputs=None):
        """Runs the prompt (an encoder-decoder's encoder on `inputs`, its other inputs by name,
        first) and picks the token of position `min(lengths)`.

        Args:
            prompt: (B, P) int32, right-padded, P static.
            lengths: (B,) int32 tokens per row, >= 1.
            controls: the `choose` arguments after the position; for `sample_choice`
                `sampling_controls(temperature, top_k, top_p, seed, max_length)`.
            inputs: None for a model with the token input only.

        Returns:
            `(token (B,) int32, position () int32, packed (B, L, C) float32, memory (B, S, M)
            float32 (None without `inputs`), finished (B,) bool)`.
        """
        tokens, _, prompt_mask, start, width = self._layout(prompt, lengths)
        logits, state = decoding.prefill(
            self.decoder, tokens, width, start, self.packed.max_length, inputs
        )
        finished = tf.zeros_like(prompt_mask[:, 0])
        token, finished = self._choose(logits, start, tokens, prompt_mask, finished, controls)
        memory = None if inputs is None else self.packed.pack_memory(state)
        return token, start, self.packed.pack(state), memory, finished

    def step(self, prompt, lengths, controls, token, position, packed, finished, memory=None):
        """Feeds `token` at `position` and picks the token of `position + 1`.

        Args:
            prompt, lengths, controls: as `prefill`.
            token: (B,) int32, the token of `position` (the last one picked).
            position: () int32 in [1, L - 2].
            packed: (B, L, C) float32, the positions before `position` filled; finished: (B,) bool.
            memory: (B, S, M) float32 from `prefill`, or None.

        Returns:
            `(token (B,) int32, packed (B, L, C) float32, finished (B,) bool)`.
        """
        tokens, _, prompt_mask, _, _ = self._layout(prompt, lengths)
        state = self.packed.unpack(packed, memory)
        logits, state = self.decoder(token[:, None], position, state)
        logits = tf.cast(logits[:, 0], "float32")
        token, finished = self._choose(
            logits, position + 1, tokens, prompt_mask, finished, controls
        )
        return token, self.packed.pack(state), finished

    def _layout(self, prompt, lengths):
        return decoding.prepare_prompt(prompt, self.packed.max_length, self.pad_token_id, lengths)

    def _choose(self, logits, position, tokens, prompt_mask, finished, controls):
        """The body of `decoding.token_loop` up to the decoder call."""
        chosen = self.choose(self.suppress(logits), position, *controls)
        return decoding.place_token(
            chosen, position, tokens, prompt_mask, finished, self.end_token_id, self.pad_token_id
        )


def sampling_controls(temperature, top_k, top_p, seed, max_length):
    """A call's controls as `sample_choice` takes them: the seed (1, 1) or (B, 1) int32 hashed
    to the noise keys of positions 0 .. max_length - 1 (`sampling.position_keys`), once per call
    and outside its decoding loop, so that each step gathers its own; (temperature, top_k, top_p,
    keys (R, max_length, 2) int32)."""
    key = sampling.seed_key(seed)
    keys = sampling.position_keys(key, tf.range(max_length))
    return temperature, top_k, top_p, keys


def sample_choice(logits, position, temperature, top_k, top_p, keys):
    """The (B,) int token `sample` draws at `position` () from `logits` (B, V) float32 (the
    suppressed ids `-inf`): temperature, top_k, top_p scalars; keys from `sampling_controls`."""
    return sampling.choose_token(logits, position, temperature, keys, top_k, top_p)


def greedy_or_sample_choice(logits, position, temperature, top_k, top_p, keys):
    """`sample_choice`, except `top_k` 1: greedy search's argmax (ties to the lowest id), not
    the noise's pick among tied logits; (B,) int32."""
    return tf.cond(
        tf.equal(top_k, 1),
        lambda: tf.argmax(logits, axis=-1, output_type="int32"),
        lambda: tf.cast(sample_choice(logits, position, temperature, top_k, top_p, keys), "int32"),
    )
