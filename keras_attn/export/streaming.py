"""`sample`'s loop one position per call, its state as tensors: signatures a client drives
(TF Serving has no streaming RPC; examples/serving/README.md)."""

import keras
import tensorflow as tf

from keras_attn.generation import decoding, sampling


class PackedState:
    """A decoder-only `CachedDecoder` state as one (B, L, C) float32 tensor, positions on axis 1
    (each cache and mask flattened into C); a step reads only the positions before its own.

    Args:
        decoder: a `CachedDecoder` of a model with the token input only.
        max_length: L, the positions cached.

    Raises:
        ValueError: if the model has other inputs, or a cache or mask has no positions axis
            of size L (a rolling cache keeps only its last positions).

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

    def __init__(self, decoder, max_length):
        if len(decoder.model.inputs) != 1:
            names = [t.name for t in decoder.model.inputs]
            raise ValueError(
                f"Streaming needs a model with one input, the tokens. Received: {names}."
            )
        full, short = decoder.initial_state(1, max_length), decoder.initial_state(1, max_length - 1)
        self._structure = (full["caches"], full["padding_masks"])
        self._layouts = []
        for leaf, other in zip(keras.tree.flatten(self._structure), keras.tree.flatten(short)):
            axes = [a for a, (n, m) in enumerate(zip(leaf.shape, other.shape)) if n != m]
            if len(axes) != 1 or axes[0] == 0 or leaf.shape[axes[0]] != max_length:
                raise ValueError(
                    f"Streaming needs caches with one positions axis of size max_length; "
                    f"received a state entry of shape {tuple(leaf.shape)}. Pass `streaming=False`."
                )
            rest = [n for a, n in enumerate(leaf.shape) if a not in (0, axes[0])]
            self._layouts.append((axes[0], rest, leaf.dtype))
        self.max_length = max_length
        self.sizes = [max(1, _product(rest)) for _, rest, _ in self._layouts]
        self.width = sum(self.sizes)

    def pack(self, state):
        """The state as (B, L, C) float32."""
        columns = []
        for leaf, (axis, rest, _) in zip(keras.tree.flatten(state), self._layouts):
            leaf = tf.experimental.numpy.moveaxis(leaf, axis, 1)
            columns.append(
                tf.cast(tf.reshape(leaf, [-1, self.max_length, _product(rest)]), "float32")
            )
        return tf.concat(columns, axis=-1)

    def unpack(self, packed):
        """The decoder state of a (B, L, C) float32 tensor."""
        leaves = []
        for column, (axis, rest, dtype) in zip(tf.split(packed, self.sizes, -1), self._layouts):
            leaf = tf.reshape(column, [-1, self.max_length] + rest)
            leaves.append(tf.cast(tf.experimental.numpy.moveaxis(leaf, 1, axis), dtype))
        caches, masks = keras.tree.pack_sequence_as(self._structure, leaves)
        return {"caches": caches, "padding_masks": masks, "memory": ()}


def _product(values):
    result = 1
    for value in values:
        result *= value
    return result


class TokenStream:
    """`sample`'s loop cut into a prefill and steps: each picks the token of one position.

    Args:
        decoder: a decoder-only decoder (`CachedDecoder` or a wrapper of one).
        packed: the `PackedState` of its state.
        vocabulary_size: V, the logits' width.
        suppressed: checked ids never sampled (`arguments.check_suppressed_token_ids`).
        end_token_id: int, a row finishes after choosing it.
        pad_token_id: int, the prompt's padding and what a finished row gets.
    """

    def __init__(self, decoder, packed, vocabulary_size, suppressed, end_token_id, pad_token_id):
        self.decoder, self.packed = decoder, packed
        self.suppress = decoding.suppressor(suppressed, vocabulary_size)
        self.end_token_id, self.pad_token_id = end_token_id, pad_token_id

    def prefill(self, prompt, lengths, controls):
        """Runs the prompt and picks the token of position `min(lengths)`.

        Args:
            prompt: (B, P) int32, right-padded, P static.
            lengths: (B,) int32 tokens per row, >= 1.
            controls: `(temperature, top_k, top_p, seed)`: scalars, seed (1, 1) or (B, 1).

        Returns:
            `(token (B,) int32, position () int32, packed (B, L, C) float32, finished (B,) bool)`.
        """
        tokens, _, prompt_mask, start, width = self._layout(prompt, lengths)
        logits, state = decoding.prefill(
            self.decoder, tokens, width, start, self.packed.max_length, None
        )
        finished = tf.zeros_like(prompt_mask[:, 0])
        token, finished = self._choose(logits, start, tokens, prompt_mask, finished, controls)
        return token, start, self.packed.pack(state), finished

    def step(self, prompt, lengths, controls, token, position, packed, finished):
        """Feeds `token` at `position` and picks the token of `position + 1`.

        Args:
            prompt, lengths, controls: as `prefill`.
            token: (B,) int32, the token of `position` (the last one picked).
            position: () int32 in [1, L - 2].
            packed: (B, L, C) float32, the positions before `position` filled; finished: (B,) bool.

        Returns:
            `(token (B,) int32, packed (B, L, C) float32, finished (B,) bool)`.
        """
        tokens, _, prompt_mask, _, _ = self._layout(prompt, lengths)
        logits, state = self.decoder(token[:, None], position, self.packed.unpack(packed))
        logits = tf.cast(logits[:, 0], "float32")
        token, finished = self._choose(
            logits, position + 1, tokens, prompt_mask, finished, controls
        )
        return token, self.packed.pack(state), finished

    def _layout(self, prompt, lengths):
        return decoding.prepare_prompt(prompt, self.packed.max_length, self.pad_token_id, lengths)

    def _choose(self, logits, position, tokens, prompt_mask, finished, controls):
        """The body of `decoding.token_loop` up to the decoder call."""
        chosen = tf.cast(sample_choice(self.suppress(logits), position, *controls), "int32")
        forced = tf.gather(prompt_mask, position, axis=1)
        pad = tf.constant(self.pad_token_id, "int32")
        token = tf.where(
            forced, tf.gather(tokens, position, axis=1), tf.where(finished, pad, chosen)
        )
        ended = tf.logical_and(tf.logical_not(forced), tf.equal(token, self.end_token_id))
        return token, tf.logical_or(finished, ended)


def sample_choice(logits, position, temperature, top_k, top_p, seed):
    """The (B,) int64 token `sample` draws at `position` () from `logits` (B, V) float32 (the
    suppressed ids `-inf`): temperature, top_k, top_p scalars; seed (1, 1) or (B, 1) int32."""
    key = sampling.seed_key(seed)
    return sampling.choose_token(logits, position, temperature, key, top_k, top_p)
