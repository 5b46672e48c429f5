"""2D local attention over sequences of pixels in block-raster order (`image_size` given).

Layout, windows, caches and an example: docs/guides/local_attention.md.
"""

from keras import ops

from keras_attn.layers import blocking
from keras_attn.layers.local_attention_windows import (
    local_attention,
    scatter_rows,
    step_masks,
    window_masks,
    window_slot,
)


class BlockRasterMixin:
    """Block-raster sequences of `LocalBlockAttention`: a mixin of that class only."""

    # Block-raster cached steps read contiguous runs of the cache
    # (`_attend_raster_step`); False: the element gather of the window's
    # slots, which stays for caches of dynamic length (benchmarks compare).
    _read_runs = True

    def _attend_block_raster(self, query, key, value, masks, return_attention_scores, training):
        """Block-raster attention, full pass or cached (`value` None: `key` is the cache)."""
        length = blocking.dims(query)[1]
        key_length = blocking.dims(key)[1]
        static = isinstance(length, int) and isinstance(key_length, int)
        step = masks.cached and static and length <= self._block[0] * self._block[1]
        if step and self._read_runs:
            return self._attend_raster_step(query, key, masks, return_attention_scores, training)
        start = ops.cast(masks.cache_index, "int32") if masks.cached else 0

        def heads_first(x):  # (B, G, R, H, ·) -> (B, H, G, R, ·)
            return ops.transpose(x, (0, 3, 1, 2, 4))

        query_groups, block_ids, query_rows, structure, kept = self._raster_query_groups(
            query, start, masks
        )
        memory = self._raster_memory(block_ids, masks.use_causal_mask)  # (G, M)
        mask = self._raster_mask(memory, start + length, structure, query_rows, masks)
        memory_index = ops.clip(memory, 0, key_length - 1)
        if value is None:
            memory_keys, memory_values = self._split_keys_values(
                ops.take(key, memory_index, axis=1), query.dtype
            )
        else:
            memory_keys = ops.take(key, memory_index, axis=1)
            memory_values = ops.take(value, memory_index, axis=1)
        # A query past the image (position height * width) sees no key.
        inside_image = isinstance(key_length, int) and key_length < self._max_positions
        outputs, probs = local_attention(
            heads_first(query_groups),
            heads_first(memory_keys),
            heads_first(memory_values),
            mask,
            self.dropout_layer,
            training,
            masks.may_have_empty_rows or not inside_image,
        )

        def ungroup(x):  # (B, H, G, R, ·) -> (B, H, T, ·)
            x_dims = blocking.dims(x)
            x = ops.reshape(x, x_dims[:2] + [x_dims[2] * x_dims[3], x_dims[4]])
            if isinstance(kept, slice):
                return x[:, :, kept]
            return x if kept is None else ops.take(x, kept, axis=2)

        outputs = ops.transpose(ungroup(outputs), (0, 2, 1, 3))
        scores = None
        if return_attention_scores:
            query_positions = start + ops.arange(length, dtype="int32")
            slot, inside = self._raster_window_slots(
                query_positions, ops.arange(key_length, dtype="int32"), masks.use_causal_mask
            )
            scores = scatter_rows(ungroup(probs), slot, inside)
        return outputs, scores

    def _raster_query_groups(self, query, start, masks):
        """(groups, block_ids, query_rows, structure, kept) of the queries (B, T, H, K)."""
        block_length = self._block[0] * self._block[1]
        batch, length = blocking.dims(query)[:2]
        if masks.cached and isinstance(length, int) and length <= block_length:
            positions = start + ops.arange(length, dtype="int32")
            structure = self._structure_rows(positions % block_length)[:, None]
            return (
                query[:, :, None],
                positions // block_length,
                ops.arange(length, dtype="int32")[:, None],
                structure,
                None,
            )
        lead = start % block_length if masks.cached else 0
        count = blocking.num_blocks(
            length + (block_length - 1 if masks.cached else 0), block_length
        )
        if masks.cached:
            rows = ops.arange(count * block_length, dtype="int32") - lead
            query_index = ops.clip(rows, 0, length - 1)
            grouped = ops.take(query, query_index, axis=1)
            kept = lead + ops.arange(length, dtype="int32")
        else:
            query_index = ops.minimum(ops.arange(count * block_length, dtype="int32"), length - 1)
            grouped = blocking.pad_to_multiple(query, block_length, axis=1)
            kept = slice(0, length)
        groups = ops.reshape(grouped, [batch, count, block_length] + blocking.dims(query)[2:])
        block_ids = start // block_length + ops.arange(count, dtype="int32")
        structure = self._structure_mask(masks.use_causal_mask)  # (Q, M) or None
        if structure is not None:
            structure = structure[None]
        return groups, block_ids, ops.reshape(query_index, (count, block_length)), structure, kept

    def _raster_mask(self, memory, end, structure, query_rows, masks):
        """(B or 1, H or 1, G, R, M) bool: the window slots each grouped query may attend to."""
        mask = ops.logical_and(ops.greater_equal(memory, 0), ops.less(memory, end))[
            None, None, :, None, :
        ]
        if structure is not None:
            mask = ops.logical_and(mask, structure[None, None])
        return window_masks(mask, masks, memory, query_rows)

    def _raster_geometry(self, causal):
        """(grid width in blocks, window (before, after) per axis, window height, width)."""
        (bh, bw) = self._block
        before, after = self._window(causal)
        return (
            self.image_size[1] // bw,
            before,
            before[0] + bh + after[0],
            before[1] + bw + after[1],
        )

    def _raster_memory(self, block_ids, causal):
        """(G, M) int32 block-raster positions of the window slots of `block_ids`, -1 outside."""
        height, width = self.image_size
        (bh, bw) = self._block
        grid_width, before, window_h, window_w = self._raster_geometry(causal)
        slots = ops.arange(window_h * window_w, dtype="int32")[None, :]
        block_ids = block_ids[:, None]
        row = (block_ids // grid_width) * bh - before[0] + slots // window_w
        col = (block_ids % grid_width) * bw - before[1] + slots % window_w
        _, inside = window_slot((row, col), (height, width))
        # A block past the image (the position after its last pixel) has
        # no memory, though the window above it would reach into the image.
        inside = ops.logical_and(inside, ops.less(block_ids, (height // bh) * grid_width))
        position = ((row // bh) * grid_width + col // bw) * (bh * bw) + (row % bh) * bw + col % bw
        return ops.where(inside, position, -1)

    def _raster_window_slots(self, query_positions, key_positions, causal):
        """As `_window_slots` over block-raster positions: ((T, S) int32 slots, (T, S) bool)."""
        (bh, bw) = self._block
        grid_width, before, window_h, window_w = self._raster_geometry(causal)
        query_block = query_positions // (bh * bw)
        top = (query_block // grid_width) * bh - before[0]
        left = (query_block % grid_width) * bw - before[1]
        key_block, inner = key_positions // (bh * bw), key_positions % (bh * bw)
        key_row = (key_block // grid_width) * bh + inner // bw
        key_col = (key_block % grid_width) * bw + inner % bw
        deltas = (key_row[None, :] - top[:, None], key_col[None, :] - left[:, None])
        return window_slot(deltas, (window_h, window_w))

    def _raster_step_runs(self, first_block, length, cache_length):
        """(starts, sizes): the contiguous cache runs a step's window covers (guide: local)."""
        (bh, bw), (fh, fw) = self._block, self._flange
        block_length = bh * bw
        grid_width = self.image_size[1] // bw
        rows_above, side = -(-fh // bh), -(-fw // bw)
        extra = 1 if length > 1 else 0
        sizes = [(2 * side + 1 + extra) * block_length] * rows_above
        sizes.append((side + 1 + extra) * block_length)
        if sum(sizes) >= cache_length:
            return [ops.convert_to_tensor(0, "int32")], [cache_length]
        starts = []
        for run, size in enumerate(sizes):
            block = first_block - (rows_above - run) * grid_width - side
            starts.append(ops.clip(block * block_length, 0, cache_length - size))
        return starts, sizes

    def _raster_step_mask(self, positions, fresh, query_positions, masks):
        """(B or 1, H or 1, 1, T, N) bool: which of the N positions read each query may see."""
        (bh, bw) = self._block
        height, width = self.image_size
        _, mask = self._raster_window_slots(query_positions, positions, causal=True)
        # A query past the image (its block past the last) sees no key.
        query_block = query_positions // (bh * bw)
        query_ok = ops.less(query_block, (height // bh) * (width // bw))[:, None]
        mask = ops.logical_and(mask, ops.logical_and(query_ok, fresh[None, :]))
        mask = ops.logical_and(mask, ops.less_equal(positions[None, :], query_positions[:, None]))
        return step_masks(mask[None, None, None], masks, positions)

    def _attend_raster_step(self, query, cache, masks, return_attention_scores, training):
        """Cached step of T <= one block's queries over the cache runs covering the window."""
        length = blocking.dims(query)[1]
        cache_dims = blocking.dims(cache)
        cache_length = cache_dims[1]
        start = ops.cast(masks.cache_index, "int32")
        query_positions = start + ops.arange(length, dtype="int32")
        starts, sizes = self._raster_step_runs(
            start // (self._block[0] * self._block[1]), length, cache_length
        )
        runs, positions, fresh = [], [], []
        read_end = ops.convert_to_tensor(0, "int32")
        for run_start, size in zip(starts, sizes):
            run_shape = [cache_dims[0], size] + cache_dims[2:]
            runs.append(ops.slice(cache, [0, run_start, 0, 0], run_shape))
            run_positions = run_start + ops.arange(size, dtype="int32")
            positions.append(run_positions)
            fresh.append(ops.greater_equal(run_positions, read_end))
            read_end = ops.maximum(read_end, run_start + size)
        read = runs[0] if len(runs) == 1 else ops.concatenate(runs, axis=1)
        positions = ops.concatenate(positions, axis=0)
        mask = self._raster_step_mask(
            positions, ops.concatenate(fresh, axis=0), query_positions, masks
        )
        keys, values = self._split_keys_values(read, query.dtype)
        # Masked slots get zero weight; zero their values too, so that what
        # the runs read outside the window (even inf or NaN) cannot leak.
        seen = ops.any(mask, axis=(1, 2, 3))  # (B or 1, N)
        values = ops.where(seen[:, :, None, None], values, ops.zeros_like(values[:1, :1]))

        def one_block(x):  # (B, T or N, H, ·) -> (B, H, 1, T or N, ·)
            return ops.transpose(x, (0, 2, 1, 3))[:, :, None]

        inside_image = cache_length < self._max_positions
        outputs, probs = local_attention(
            one_block(query),
            one_block(keys),
            one_block(values),
            mask,
            self.dropout_layer,
            training,
            masks.may_have_empty_rows or not inside_image,
        )
        outputs = ops.transpose(outputs[:, :, 0], (0, 2, 1, 3))
        scores = None
        if return_attention_scores:
            # Dense (B, H, T, L): each read position's probability at its place in the cache (a
            # position read twice has probability 0 the second time: not `fresh`).
            spread = ops.one_hot(positions, cache_length, dtype=probs.dtype)  # (N, L)
            scores = ops.einsum("bhtn,nl->bhtl", probs[:, :, 0], spread)
        return outputs, scores
