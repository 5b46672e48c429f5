"""The uncached pass of `LocalBlockAttention` and its window geometry (1D and 2D).

Query blocks attend to their memory windows only; docs/guides/local_attention.md draws them.

Example (1D causal, block 2, flange 1: a window is the position before
its block and the block; its first query does not see the second):
>>> import keras
>>> from keras_attn.layers import LocalBlockAttention
>>> layer = LocalBlockAttention(num_heads=1, key_dim=2, block_size=2, memory_flange=1)
>>> keras.ops.convert_to_numpy(layer._structure_mask(True)).astype(int).tolist()
[[1, 1, 0], [1, 1, 1]]
"""

import math

from keras import ops

from keras_attn.layers import attention_ops, blocking


class LocalWindowsMixin:
    """The uncached pass and window geometry of `LocalBlockAttention` (a mixin of it only)."""

    def _window(self, use_causal_mask):
        """(before, after) flange per axis of the memory of a query block."""
        before = self._flange
        if not use_causal_mask:
            return before, self._flange
        if len(self._block) == 1:
            return before, (0,)
        # Block raster: the rows above reach right of the block too.
        return before, (0, self._flange[1])

    def _structure_mask(self, use_causal_mask):
        """(Q, M) bool: the window slots a query slot of a block may see; None when all."""
        if not use_causal_mask:
            return None
        if len(self._block) == 1:
            (b,), (f,) = self._block, self._flange
            query = ops.arange(b, dtype="int32")[:, None]
            memory = ops.arange(f + b, dtype="int32")[None, :]
            return ops.less_equal(memory - f, query)
        return self._structure_rows(ops.arange(self._block[0] * self._block[1], dtype="int32"))

    def _structure_rows(self, query_slots):
        """(T, M) bool rows of the 2D causal `_structure_mask` of `query_slots`, built directly."""
        (bh, bw), (fh, fw) = self._block, self._flange
        width = bw + 2 * fw
        query = query_slots[:, None]
        memory = ops.arange((fh + bh) * width, dtype="int32")[None, :]
        row = memory // width - fh  # row inside the block; < 0 above it
        col = memory % width - fw  # column inside the block
        above = ops.less(row, 0)
        left = ops.less(col, 0)
        inside = ops.logical_and(ops.greater_equal(col, 0), ops.less(col, bw))
        earlier = ops.less_equal(row * bw + col, query)
        return ops.logical_or(above, ops.logical_or(left, ops.logical_and(inside, earlier)))

    def _attend_blocks(
        self, query, key, value, masks, spatial_shape, return_attention_scores, training
    ):
        """The uncached pass: query blocks against their memory windows."""
        block = self._block
        before, after = self._window(masks.use_causal_mask)
        batch = blocking.dims(query)[0]
        heads = self.num_heads
        spatial = [blocking.dims(query)[1]] if len(block) == 1 else list(spatial_shape)
        length = math.prod(spatial)

        # Head-major layout (B * H, *spatial, ·): the block matmuls then run
        # on contiguous batches, with no transpose of the large logits.
        def heads_first(x):
            x = ops.transpose(x, (0, 2, 1, 3))
            return ops.reshape(x, [batch * heads] + spatial + [x.shape[-1]])

        def split_heads(x):
            return ops.reshape(x, [batch, heads] + blocking.dims(x)[1:])

        def memory(x):
            return split_heads(blocking.overlapping_blocks(heads_first(x), block, before, after))

        query_blocks = split_heads(blocking.blockify(heads_first(query), block))
        mask = self._blocks_mask(masks, spatial, length, before, after)
        outputs, probs = local_attention(
            query_blocks,
            memory(key),
            memory(value),
            mask,
            self.dropout_layer,
            training,
            masks.may_have_empty_rows,
        )

        def merge_heads(x):  # (B, H, N, Q, ·) -> (B, H, T, ·)
            x = ops.reshape(x, [batch * heads] + blocking.dims(x)[2:])
            x = blocking.unblockify(x, block, spatial)
            return ops.reshape(x, [batch, heads, length, x.shape[-1]])

        outputs = ops.transpose(merge_heads(outputs), (0, 2, 1, 3))
        scores = None
        if return_attention_scores:
            slot, inside = self._window_slots(spatial, before, after)
            scores = scatter_rows(merge_heads(probs), slot, inside)
        return outputs, scores

    def _blocks_mask(self, masks, spatial, length, before, after):
        """(B or 1, H or 1, N, Q, M) bool mask of the uncached pass."""
        # Raster index of every query slot (N, Q; 0 past the input, cropped later) and memory
        # slot (N, M; -1 outside the input).
        positions = ops.reshape(ops.arange(length, dtype="int32"), [1] + spatial)
        query_rows = blocking.blockify(positions, self._block)[0]
        memory = blocking.overlapping_blocks(positions, self._block, before, after, -1)[0]
        mask = ops.greater_equal(memory, 0)[None, None, :, None, :]
        structure = self._structure_mask(masks.use_causal_mask)
        if structure is not None:
            mask = ops.logical_and(mask, structure[None, None, None])
        return window_masks(mask, masks, memory, query_rows)

    def _window_slots(self, spatial, before, after):
        """((T, S) int32 slot, (T, S) bool inside) of each key in each query's window."""
        positions = ops.arange(math.prod(spatial), dtype="int32")
        deltas, windows = [], []
        for axis, (size, block) in enumerate(zip(spatial, self._block)):
            coordinate = positions // math.prod(spatial[axis + 1 :]) % size
            corner = (coordinate // block) * block - before[axis]  # of the query's window
            deltas.append(coordinate[None, :] - corner[:, None])
            windows.append(before[axis] + block + after[axis])
        return window_slot(deltas, windows)


def window_slot(deltas, windows):
    """(slot, inside): the raster index in a window of sides `windows` of the offsets `deltas`
    (one per axis) from its corner, and whether they fall inside it."""
    slot, inside = 0, True
    for delta, window in zip(deltas, windows):
        within = ops.logical_and(ops.greater_equal(delta, 0), ops.less(delta, window))
        inside = ops.logical_and(inside, within)
        slot = slot * window + delta
    return slot, inside


def local_attention(query, key, value, mask, dropout_layer, training, may_have_empty_rows):
    """Query blocks (B, H, N, Q, K) over memory (B, H, N, M, ·): (outputs, probabilities)."""
    scale = 1.0 / float(query.shape[-1]) ** 0.5
    # float32 logits, as in the dense core: the cast of the small operands
    # is cheaper than that of the logits and keeps sharp weights accurate.
    query = ops.cast(query, "float32") * scale
    key = ops.cast(key, "float32")
    logits = ops.einsum("bhnqk,bhnmk->bhnqm", query, key)
    probs = attention_ops.masked_softmax(logits, mask, may_have_empty_rows=may_have_empty_rows)
    weights = ops.cast(probs, value.dtype)
    if dropout_layer is not None:
        weights = dropout_layer(weights, training=training)
    return ops.einsum("bhnqm,bhnmv->bhnqv", weights, value), probs


def window_masks(mask, masks, memory, query_rows):
    """`mask` (B|1, H|1, G, R, M) AND the padding and attention masks of `masks` where query
    group g's rows `query_rows[g]` (G, R) meet its window slots at key positions `memory[g]`
    (G, M); positions outside a mask are clipped (`mask` blocks them)."""
    if masks.padding_mask is not None:
        padding = take_positions(masks.padding_mask, memory, 1)  # (B, G, M)
        mask = ops.logical_and(mask, padding[:, None, :, None, :])
    if masks.attention_mask is not None:
        rows = ops.take(masks.attention_mask, ops.reshape(query_rows, (-1,)), axis=2)
        mask_dims = blocking.dims(rows)
        rows = ops.reshape(rows, mask_dims[:2] + blocking.dims(query_rows) + mask_dims[3:])
        columns = ops.clip(memory, 0, mask_dims[3] - 1)[None, None, :, None, :]
        mask = ops.logical_and(mask, ops.take_along_axis(rows, columns, axis=-1))
    return mask


def step_masks(mask, masks, positions):
    """`mask` (broadcastable to (B, H, 1, T, N)) AND the padding and attention masks of a cached step's T
    queries at the N key `positions` it reads."""
    if masks.padding_mask is not None:
        padding = take_positions(masks.padding_mask, positions, 1)  # (B, N)
        mask = ops.logical_and(mask, padding[:, None, None, None, :])
    if masks.attention_mask is not None:
        attention = take_positions(masks.attention_mask, positions, 3)  # (B, H, T, N)
        mask = ops.logical_and(mask, attention[:, :, None])
    return mask


def take_positions(mask, positions, axis):
    """The entries of a mask at `positions` along `axis` (clipped; the caller masks outside)."""
    last = blocking.dims(mask)[axis] - 1
    return ops.take(mask, ops.clip(positions, 0, last), axis=axis)


def scatter_rows(rows, slot, inside):
    """Dense (B, H, T, S) scores: rows[t, slot[t, s]] where `inside`, else 0."""
    window = rows.shape[-1]
    index = ops.clip(slot, 0, window - 1)[None, None]
    return ops.where(inside[None, None], ops.take_along_axis(rows, index, axis=-1), 0.0)


def scatter_cache_rows(rows, window_start, cache_length):
    """Dense (B, H, T, L) scores from rows (B, H, T, W) of windows at `window_start`."""
    slot = ops.arange(cache_length, dtype="int32")[None, :] - window_start[:, None]
    inside = ops.logical_and(ops.greater_equal(slot, 0), ops.less(slot, rows.shape[-1]))
    return scatter_rows(rows, slot, inside)
