"""The cache of `LocalBlockAttention` and its 1D cached paths (docs/guides/local_attention.md).

Example:
>>> from keras_attn.layers import LocalBlockAttention
>>> rolling = LocalBlockAttention(2, 8, block_size=4, memory_flange=4, rolling_cache=True)
>>> tuple(rolling.init_cache(batch_size=1, max_length=10_000).shape)  # W = 4 + 4 positions
(1, 8, 2, 16)
"""

import numpy as np
from keras import ops

from keras_attn.layers import blocking
from keras_attn.layers.attention_ops import dim
from keras_attn.layers.local_attention_windows import (
    local_attention,
    scatter_cache_rows,
    step_masks,
    window_masks,
)
from keras_attn.layers.position_writes import write_positions


class LocalCacheMixin:
    """The cache and the 1D cached paths of `LocalBlockAttention` (a mixin of it only)."""

    @property
    def _rolling_length(self):
        """W = block + flange: the positions a causal 1D step can read."""
        return self._block[0] + self._flange[0]

    def _cache_shape(self, batch_size, max_length):
        return (batch_size, max_length, self.num_heads, self.key_dim + self._value_dim)

    # The cache's axis of positions: (B, L, H, K + V).
    _cache_length_axis = 1

    def _cache_capacity(self, cache):
        return None if self.rolling_cache else super()._cache_capacity(cache)

    def _write_cache(self, cache, key_value, cache_index):
        if not self.rolling_cache:
            cache = write_positions(cache, key_value, cache_index, axis=1)
            return cache, cache
        # The queries read [old W positions | new T]; the cache keeps the
        # last W of them, oldest first.
        attended = ops.concatenate([cache, key_value], axis=1)
        return attended, attended[:, -self._rolling_length :]

    def _cached_keys_values(self, cache, dtype):
        # A step reads only its window: hand the core the cache itself
        # (keys and values side by side, `value` None) and split what it
        # reads, instead of casting and splitting all L positions at every
        # step (two copies of the cache: most of a step's time at L = 3072
        # without XLA).
        return cache, None

    def _split_keys_values(self, key_value, dtype):
        """[k | v] read from the cache (·, K + V) -> keys (·, K), values (·, V)."""
        key_value = ops.cast(key_value, dtype)
        return key_value[..., : self.key_dim], key_value[..., self.key_dim :]

    def _attend_cached(self, query, key, value, masks, return_attention_scores, training):
        """Causal 1D attention of T new queries over the cache `key`, reading their windows only."""
        length, cache_length = dim(query, 1), dim(key, 1)
        # Absolute position of the first key slot: 0, or for a rolling cache
        # that of the oldest position it kept.
        key_offset = masks.cache_index - self._rolling_length if self.rolling_cache else 0
        static = isinstance(length, int) and isinstance(cache_length, int)
        if static and length <= self._block[0]:
            attend = self._attend_cached_step
        else:
            attend = self._attend_cached_prefill
        return attend(query, key, masks, key_offset, return_attention_scores, training)

    def _cached_window_start(self, query_positions):
        """First cache position of each query's window: its block start minus the flange."""
        (b,), (f,) = self._block, self._flange
        return (query_positions // b) * b - f

    def _attend_cached_step(self, query, key, masks, key_offset, return_attention_scores, training):
        """Decoding step (T <= block, static T and L) over one slice of the cache `key`."""
        cache_index = masks.cache_index
        (b,), (f,) = self._block, self._flange
        length, cache_length = query.shape[1], key.shape[1]
        window = min(length + b - 1 + f, cache_length)
        if self.rolling_cache or window == cache_length:
            # The window ends at the cache's end (a rolling cache ends at the last query): a
            # static slice.
            start = cache_length - window
            window_cache = key[:, start:]
        else:
            start = ops.clip(cache_index + length - window, 0, cache_length - window)
            sizes = [dim(key, 0), window, dim(key, 2), dim(key, 3)]
            window_cache = ops.slice(key, [0, start, 0, 0], sizes)

        # Mask (T, W), broadcast against the logits (B, H, 1, T, W): query t sees key w from its
        # window start to itself. The index tables are constants.
        query_positions = ops.add(cache_index, np.arange(length, dtype="int32")[:, None])
        key_positions = ops.add(key_offset + start, np.arange(window, dtype="int32"))
        mask = ops.logical_and(
            ops.greater_equal(
                key_positions, ops.maximum(self._cached_window_start(query_positions), 0)
            ),
            ops.less_equal(key_positions, query_positions),
        )
        mask = step_masks(mask, masks, key_positions)

        def one_block(x):  # (B, T, H, ·) -> (B, H, 1, T, ·)
            return ops.expand_dims(ops.transpose(x, (0, 2, 1, 3)), 2)

        # One transpose of the window, split after it.
        window_keys, window_values = self._split_keys_values(one_block(window_cache), query.dtype)
        outputs, probs = local_attention(
            one_block(query),
            window_keys,
            window_values,
            mask,
            self.dropout_layer,
            training,
            masks.may_have_empty_rows,
        )
        outputs = ops.transpose(ops.squeeze(outputs, 2), (0, 2, 1, 3))
        scores = None
        if return_attention_scores:
            window_start = ops.broadcast_to(start, (length,))
            scores = scatter_cache_rows(ops.squeeze(probs, 2), window_start, cache_length)
        return outputs, scores

    def _attend_cached_prefill(
        self, query, key, masks, key_offset, return_attention_scores, training
    ):
        """Prefill of a long chunk: blocked attention over the cache blocks it touches."""
        cache_index = masks.cache_index
        (b,), (f,) = self._block, self._flange
        batch, length = blocking.dims(query)[:2]
        cache_length = blocking.dims(key)[1]
        first_block_start = (cache_index // b) * b
        lead = cache_index - first_block_start
        count = blocking.num_blocks(length + b - 1, b)
        query_index = ops.clip(ops.arange(count * b, dtype="int32") - lead, 0, length - 1)

        def blocks_heads_first(x):  # (B, N, Q, H, ·) -> (B, H, N, Q, ·)
            return ops.transpose(x, (0, 3, 1, 2, 4))

        query_blocks = ops.reshape(
            ops.take(query, query_index, axis=1), [batch, count, b] + blocking.dims(query)[2:]
        )
        memory_positions = (
            first_block_start
            - f
            + ops.arange(count, dtype="int32")[:, None] * b
            + ops.arange(f + b, dtype="int32")[None, :]
        )
        memory_index = ops.clip(memory_positions - key_offset, 0, cache_length - 1)
        key_ok = ops.logical_and(
            ops.greater_equal(memory_positions, ops.maximum(key_offset, 0)),
            ops.less(memory_positions, key_offset + cache_length),
        )
        mask = ops.logical_and(
            key_ok[None, None, :, None, :], self._structure_mask(True)[None, None, None]
        )
        query_rows = ops.reshape(query_index, (count, b))
        mask = window_masks(mask, masks, memory_positions, query_rows)
        memory_keys, memory_values = self._split_keys_values(
            ops.take(key, memory_index, axis=1), query.dtype
        )
        outputs, probs = local_attention(
            blocks_heads_first(query_blocks),
            blocks_heads_first(memory_keys),
            blocks_heads_first(memory_values),
            mask,
            self.dropout_layer,
            training,
            masks.may_have_empty_rows,
        )
        kept = lead + ops.arange(length, dtype="int32")
        outputs = ops.transpose(outputs, (0, 2, 3, 1, 4))  # (B, N, Q, H, V)
        outputs = ops.reshape(outputs, [batch, count * b] + blocking.dims(outputs)[3:])
        outputs = ops.take(outputs, kept, axis=1)
        scores = None
        if return_attention_scores:
            rows = ops.reshape(probs, blocking.dims(probs)[:2] + [count * b, f + b])
            rows = ops.take(rows, kept, axis=2)
            query_positions = cache_index + ops.arange(length, dtype="int32")
            window_start = self._cached_window_start(query_positions) - key_offset
            scores = scatter_cache_rows(rows, window_start, cache_length)
        return outputs, scores
