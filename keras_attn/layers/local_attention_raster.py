"""Block-raster sequences: 2D local attention over pixels in block-raster order.

With `image_size=(height, width)` (and a pair `block_size` dividing it),
`LocalBlockAttention` takes sequences (B, T, D) whose position i is pixel i
of the image in *block-raster* order: blocks in raster order over the block
grid, pixels in raster order inside a block. It is the layout of 2D-local
generation: a token-sequence model that `keras_attn.generation` decodes with
a cache, each step reading only the cached positions around its window, so
a whole image takes time linear in its pixels. A sequence may stop early
(a prefix of the image) and may have one position more than the image (a
start token shifts the image right by one); that last position sees no key.

Query blocks are a plain reshape of the sequence, and each block gathers
its window through a table of positions (`_raster_memory`): the full pass,
a cached prefill, and a step over a cache of dynamic length. A cached step
of at most one block's queries over a cache of static length reads instead
one contiguous run of the cache per block-row of its window
(`_raster_step_runs`), and masks what the runs hold outside the window
(`_raster_step_mask`). docs/guides/local_attention.md draws the windows.

Example (a 4x6 image in 2x3 blocks, full pass and pixel by pixel):
>>> import keras
>>> from keras_attn.layers import LocalBlockAttention
>>> raster = LocalBlockAttention(2, 8, block_size=(2, 3),
...                              memory_flange=(2, 3), image_size=(4, 6))
>>> pixels = keras.random.normal((1, 24, 16))
>>> full = raster(pixels, use_causal_mask=True)
>>> cache = raster.init_cache(batch_size=1, max_length=24)
>>> steps = []
>>> for i in range(24):
...     y, cache = raster(pixels[:, i:i + 1], cache=cache, cache_index=i,
...                       use_causal_mask=True)
...     steps.append(y)
>>> bool(keras.ops.all(keras.ops.isclose(
...     keras.ops.concatenate(steps, axis=1), full, atol=1e-5)))
True
"""

from keras import ops

from keras_attn.layers import blocking
from keras_attn.layers.local_attention_windows import (
    local_attention,
    scatter_rows,
    take_positions,
)


class BlockRasterMixin:
    """Block-raster sequences (`image_size` given) of `LocalBlockAttention`.

    A mixin of that class only: it reads the layer's `_block`, `_flange`,
    `image_size`, `_max_positions`, `dropout_layer`, and its `_window`,
    `_structure_mask`, `_structure_rows` (`local_attention_windows`) and
    `_split_keys_values` (`local_attention_cache`).
    """

    # Block-raster cached steps read contiguous runs of the cache
    # (`_attend_raster_step`); False: the element gather of the window's
    # slots, which stays for caches of dynamic length (benchmarks compare).
    _read_runs = True

    def _attend_block_raster(self, query, key, value, masks, return_attention_scores, training):
        """2D local attention over a sequence in block-raster order
        (`image_size` given), full pass or cached.

        The queries are grouped (`_raster_query_groups`) and each group
        gathers the memory window of its block through `_raster_memory`;
        a cached step of at most one block's length (static cache length)
        reads contiguous runs of the cache instead (`_attend_raster_step`).
        `key` is (B, S, H, K) with `value` (B, S, H, V), or the cache
        (B, L, H, K + V) with `value` None.
        """
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
        """Groups the queries (B, T, H, K) of block-raster mode.

        In the full pass and a cached prefill, one group per query block
        touched (a plain reshape of the sequence, padded to whole blocks,
        as the 1D prefill); in a cached step of at most one block's length
        that gathers (a cache of dynamic length; `_attend_raster_step`
        otherwise), one group per query, so that a step reads the M slots
        of its window, never the whole cache.

        Returns:
            (groups (B, G, R, H, K), block_ids (G,) int32, query_rows (G, R)
            int32 index of each grouped query in the input, structure
            (G or 1, R, M) bool causal mask inside the window or None,
            kept: what of the G * R grouped rows are the T queries — None
            (all), a slice, or (T,) int32 indices).
        """
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
        """(B or 1, H or 1, G, R, M) bool: which window slots `memory` (G, M)
        each grouped query (`query_rows` (G, R)) may attend to — slots in
        the image and before `end` (keys past the input, or not yet written
        to the cache, are masked), AND the causal `structure`, the padding
        mask and the attention mask gathered at those slots."""
        mask = ops.logical_and(ops.greater_equal(memory, 0), ops.less(memory, end))[
            None, None, :, None, :
        ]
        if structure is not None:
            mask = ops.logical_and(mask, structure[None, None])
        if masks.padding_mask is not None:
            mask = ops.logical_and(
                mask, take_positions(masks.padding_mask, memory, 1)[:, None, :, None, :]
            )
        attention_mask = masks.attention_mask
        if attention_mask is not None:
            if len(attention_mask.shape) == 3:
                attention_mask = attention_mask[:, None]
            group_dims = blocking.dims(query_rows)
            rows = ops.take(attention_mask, ops.reshape(query_rows, (-1,)), axis=2)
            mask_dims = blocking.dims(rows)
            rows = ops.reshape(rows, mask_dims[:2] + group_dims + mask_dims[3:])
            columns = ops.clip(memory, 0, mask_dims[3] - 1)[None, None, :, None, :]
            mask = ops.logical_and(mask, ops.take_along_axis(rows, columns, axis=-1))
        return mask

    def _raster_geometry(self, causal):
        """(grid width in blocks, window (before, after) per axis, window
        height, window width) of block-raster mode."""
        (bh, bw) = self._block
        before, after = self._window(causal)
        return (
            self.image_size[1] // bw,
            before,
            before[0] + bh + after[0],
            before[1] + bw + after[1],
        )

    def _raster_memory(self, block_ids, causal):
        """(G, M) int32: the block-raster position of every slot of the
        memory window of blocks `block_ids` (G,) (slots in raster order over
        the window, as `overlapping_blocks` lays them out), -1 outside the
        image."""
        height, width = self.image_size
        (bh, bw) = self._block
        grid_width, before, window_h, window_w = self._raster_geometry(causal)
        slots = ops.arange(window_h * window_w, dtype="int32")[None, :]
        block_ids = block_ids[:, None]
        row = (block_ids // grid_width) * bh - before[0] + slots // window_w
        col = (block_ids % grid_width) * bw - before[1] + slots % window_w
        inside = ops.logical_and(
            ops.logical_and(ops.greater_equal(row, 0), ops.less(row, height)),
            ops.logical_and(ops.greater_equal(col, 0), ops.less(col, width)),
        )
        # A block past the image (the position after its last pixel) has
        # no memory, though the window above it would reach into the image.
        inside = ops.logical_and(inside, ops.less(block_ids, (height // bh) * grid_width))
        position = ((row // bh) * grid_width + col // bw) * (bh * bw) + (row % bh) * bw + col % bw
        return ops.where(inside, position, -1)

    def _raster_window_slots(self, query_positions, key_positions, causal):
        """As `_window_slots`, over block-raster positions: for queries at
        `query_positions` (T,) and keys at `key_positions` (S,), the key's
        slot in the query block's window and whether it lies there ((T, S)
        int32, (T, S) bool). Builds dense scores, and the window part of a
        cached step's mask over the runs it reads."""
        (bh, bw) = self._block
        grid_width, before, window_h, window_w = self._raster_geometry(causal)
        query_block = query_positions // (bh * bw)
        top = (query_block // grid_width) * bh - before[0]
        left = (query_block % grid_width) * bw - before[1]
        key_row, key_col = self._raster_pixel(key_positions)
        delta_row = key_row[None, :] - top[:, None]
        delta_col = key_col[None, :] - left[:, None]
        inside = ops.logical_and(
            ops.logical_and(ops.greater_equal(delta_row, 0), ops.less(delta_row, window_h)),
            ops.logical_and(ops.greater_equal(delta_col, 0), ops.less(delta_col, window_w)),
        )
        return delta_row * window_w + delta_col, inside

    def _raster_pixel(self, position):
        """Block-raster positions (any shape, int32) -> (row, column) of
        their pixels (row height for the position past the image)."""
        (bh, bw) = self._block
        grid_width = self.image_size[1] // bw
        block, inner = position // (bh * bw), position % (bh * bw)
        return ((block // grid_width) * bh + inner // bw, (block % grid_width) * bw + inner % bw)

    def _raster_step_runs(self, first_block, length, cache_length):
        """The contiguous ranges of the cache that a cached step of `length`
        <= one block's queries, the first in block `first_block`, reads.

        In block-raster order the blocks of one block-row are consecutive,
        so the blocks covering a window are one run of block ids per
        block-row of the window: the ceil(fh / bh) block-rows above, from
        ceil(fw / bw) blocks left to as many right of the query block, and
        its own block-row up to the block (right of it is the future). A
        chunk that reaches the next block reads one block more per run;
        where that block starts the next block-row, each run covers the
        next block-row's part of that block's window (the runs of the block
        ids just after). Starts are clamped into the cache; runs longer
        than it in all give one run, the whole cache.

        Returns:
            (starts: list of R int32 scalars, nondecreasing, sizes: list of
            R ints), R = ceil(fh / bh) + 1 or 1.
        """
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
        """(B or 1, H or 1, 1, T, N) bool: which of the N cache positions
        read (`positions` (N,), `fresh` (N,) False where a run repeats a
        position of an earlier one) each query at `query_positions` (T,)
        may attend to: in its block's window, at or before it in
        block-raster order (that is the causal structure: the rows above
        and the left flange come before the block, the right flange of its
        rows after), in the image, and allowed by the padding and attention
        masks."""
        (bh, bw) = self._block
        height, width = self.image_size
        _, mask = self._raster_window_slots(query_positions, positions, causal=True)
        # A query past the image (its block past the last) sees no key.
        query_block = query_positions // (bh * bw)
        query_ok = ops.less(query_block, (height // bh) * (width // bw))[:, None]
        mask = ops.logical_and(mask, ops.logical_and(query_ok, fresh[None, :]))
        mask = ops.logical_and(mask, ops.less_equal(positions[None, :], query_positions[:, None]))
        mask = mask[None, None, None]
        if masks.padding_mask is not None:
            mask = ops.logical_and(
                mask, take_positions(masks.padding_mask, positions, 1)[:, None, None, None, :]
            )
        attention_mask = masks.attention_mask
        if attention_mask is not None:
            if len(attention_mask.shape) == 3:
                attention_mask = attention_mask[:, None]
            mask = ops.logical_and(mask, take_positions(attention_mask, positions, 3)[:, :, None])
        return mask

    def _attend_raster_step(self, query, cache, masks, return_attention_scores, training):
        """Cached step of T <= one block's queries (B, T, H, K) in
        block-raster mode: attends over the contiguous runs of the cache
        (B, L, H, K + V) that cover the window (`_raster_step_runs`), read
        with dynamic slices instead of an element gather of the window's
        (fh + bh) * (bw + 2 fw) slots; the positions read outside the
        window, or twice, are masked (`_raster_step_mask`) and their values
        zeroed, so the result depends on the window's slots only."""
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
        mask = self._raster_step_mask(
            ops.concatenate(positions, axis=0),
            ops.concatenate(fresh, axis=0),
            query_positions,
            masks,
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
            scores = self._raster_step_scores(probs[:, :, 0], starts, sizes, cache_length)
        return outputs, scores

    def _raster_step_scores(self, probs, starts, sizes, cache_length):
        """Dense (B, H, T, L) scores from the probabilities (B, H, T, N) of
        a step over the runs `starts`, `sizes`: position s takes the slot
        of the first run that holds it (the others are masked)."""
        position = ops.arange(cache_length, dtype="int32")
        slot = ops.zeros((cache_length,), "int32")
        found = ops.zeros((cache_length,), "bool")
        offset = 0
        for run_start, size in zip(starts, sizes):
            here = ops.logical_and(
                ops.logical_and(
                    ops.greater_equal(position, run_start), ops.less(position, run_start + size)
                ),
                ops.logical_not(found),
            )
            slot = ops.where(here, offset + position - run_start, slot)
            found = ops.logical_or(found, here)
            offset += size
        length = blocking.dims(probs)[2]
        return scatter_rows(
            probs,
            ops.broadcast_to(slot, (length, cache_length)),
            ops.broadcast_to(found, (length, cache_length)),
        )
