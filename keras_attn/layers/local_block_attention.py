import dataclasses

import keras
from keras import ops

from keras_attn import checks
from keras_attn.layers import attention_ops, blocking
from keras_attn.layers.multi_head_self_attention import MultiHeadSelfAttention


@keras.saving.register_keras_serializable(package="keras_attn")
class LocalBlockAttention(MultiHeadSelfAttention):
    """Local self-attention over query blocks and their memory flange (1D/2D).

    The positions are split into non-overlapping query blocks; every query
    of a block attends only to that block's memory: the block itself plus a
    margin of `memory_flange` positions around it. Time and memory grow
    linearly with the sequence length (or the number of pixels) instead of
    quadratically, so it is the layer for long sequences and images
    (Image Transformer), as a drop-in replacement of
    `MultiHeadSelfAttention` in `TransformerEncoder`/`TransformerDecoder`.

    Which keys a query sees (positions 0-based; a block is `b` long and
    starts at a multiple of `b`; `f` is the flange):

    * 1D, `use_causal_mask=False`: the keys of its own block and the `f`
      positions before and after it: [start - f, start + b + f).
    * 1D, `use_causal_mask=True` (raster order): the `f` positions before
      its block and the keys of its own block up to itself:
      [start - f, query]. With `b` >= length this is full causal attention.
    * 2D (inputs (B, height, width, D), block (bh, bw), flange (fh, fw)),
      `use_causal_mask=False`: the rectangle of its block extended by `fh`
      rows above and below and `fw` columns left and right.
    * 2D, `use_causal_mask=True`: the generation order is *block raster*
      (blocks in raster order over the block grid, pixels in raster order
      inside a block), as in the paper's masked 2D local attention. A query
      in the block with top-left pixel (r0, c0) sees
      - the `fh` rows above the block, r0 - fh <= r < r0, over columns
        c0 - fw <= c < c0 + bw + fw (top-left, top and top-right flange);
      - in the block's own rows, the `fw` columns to its left,
        c0 - fw <= c < c0 (the previous block of the row);
      - inside the block, the pixels up to itself in raster order.
      It never sees the right flange of its own rows (the next block).
      This is causal in block-raster order, not in plain raster order.

    Block-raster sequences (`image_size` given, 2D only): the layer takes
    sequences (B, T, D) whose position i is pixel i of an image of
    `image_size` in block-raster order, instead of images, with the same
    windows as above. Query blocks are then a plain reshape of the sequence
    and each block gathers its window through a table of positions. This
    is the layout of 2D-local generation: a token-sequence model (embedding
    (B, T) -> blocks -> logits) that `keras_attn.generation` decodes with a
    cache, each step reading only the cached blocks around its window (one
    contiguous run of positions per block-row of the window), so a whole
    image takes time linear in its pixels. A sequence may stop early (a
    prefix of the image) and may have one position more than the image: a
    start token shifts the image right by one, and generation feeds the
    last pixel too; that position past the image sees no key (zero output).

    Blocks are anchored at position 0 (or pixel (0, 0)). Lengths and image
    sides not divisible by the block are padded inside the layer; padded
    keys are masked and the padded queries dropped, so the result equals
    full attention with the equivalent band/block mask on the unpadded
    inputs.

    Masks follow the library convention (boolean, `True` = may attend /
    real token). Masking is done with `where` on float32 logits: a query
    with no visible key gets an all-zero output and finite gradients in
    float32, mixed_float16 and mixed_bfloat16.

    Args:
        num_heads: H, number of attention heads (positive int).
        key_dim: K, size of each head's query and key (positive int).
        block_size: length of a query block. An int gives 1D local
            attention over sequences (B, T, D); a pair `(bh, bw)` gives 2D
            local attention over images (B, height, width, D). Positive.
        memory_flange: how far before (and, when not causal, after) the
            query block a query may look, in positions: an int for 1D, a
            pair `(fh, fw)` (rows, columns) for 2D; non-negative. Defaults
            to `block_size` (the previous block, as in the paper's 1D
            masked setting).
        rolling_cache: (1D only) False (default): `init_cache` holds every position
            (B, max_length, H, K + V). True (1D causal decoding): it holds
            only the last W = `block_size + memory_flange` positions, the
            most a query can see, (B, W, H, K + V) whatever `max_length`:
            generating a sequence of any length takes constant cache memory
            and each step copies W rows, not max_length. Its slots hold the
            W positions before the call's `cache_index`, so calls must go
            forward, each starting where the last one ended: writing a
            position again (going back) is not supported and not detected
            (the generation functions take care of it).
        image_size: None (default), or a pair (height, width) of positive
            ints, 2D `block_size` only, each a multiple of the block's side:
            the layer then takes sequences of pixels of that image in
            block-raster order (see above), and has a cache.
        **kwargs: the other arguments of `MultiHeadSelfAttention`
            (`value_dim`, `dropout`, `use_bias`, `output_dim`,
            `kernel_initializer`, `bias_initializer`, `seed`), and the base
            `keras.layers.Layer` arguments (`name`, `dtype`, ...).

    Call arguments:
        inputs: (B, T, D) for an int `block_size`; (B, height, width, D)
            for a pair, height and width static; (B, T, D) for a pair with
            `image_size`, T <= height * width + 1 positions in block-raster
            order.
        padding_mask: `True` = real token, applied to the keys: (B, T) in
            1D and with `image_size`, (B, height, width) for images; with a
            cache, (B, max_length) over absolute positions (also with a
            rolling cache).
            Defaults to the Keras implicit mask of `inputs` (no cache).
        attention_mask: (B, T, S) or (B, H, T, S) bool, `True` = query t may
            attend to key s (2D: t and s are raster indices over the image;
            block-raster positions with `image_size`).
            It is AND-ed with the local window: only its entries inside the
            window are read (gathered per block), so it cannot widen the
            window. Passing it costs the O(T * S) of the mask itself.
        use_causal_mask: causal local attention as described above (raster
            order in 1D, block-raster order in 2D).
        cache: (B, max_length, H, K + V) tensor from `init_cache`; 1D, or
            2D with `image_size` (slot i = block-raster position i, any
            chunk: single pixels, part of a block, several blocks), with
            `use_causal_mask=True` only. In 2D a step of T <= bh * bw
            queries reads, with dynamic slices, one contiguous run of
            cached positions per block-row of its window (the blocks from
            ceil(fw / bw) left to as many right of its block; in its own
            block-row up to the block), and masks what they hold outside
            the window; a longer chunk gathers the windows' slots. In 1D
            the new keys/values are written at `cache_index`; each query
            attends only to its window, sliced out of the cache
            (`block_size + memory_flange + T - 1` keys for a chunk of
            T <= block_size tokens), so the attention work of a decoding
            step does not grow with the position. With
            `rolling_cache=True`, (B, W, H, K + V): the last W positions
            before `cache_index`, oldest first.
        cache_index: int or int32 scalar tensor, absolute position of
            `inputs[:, 0]`. Defaults to 0. Blocks are aligned to absolute
            positions, so cached decoding equals the full forward pass.
        return_attention_scores: if True, also return the attention
            probabilities as the standard dense (B, H, T, S) tensor, zero
            outside each query's window. Building it costs O(B * H * T * S)
            memory (quadratic in T): ask for it only to inspect attention.
        training: Python bool; enables dropout.

    Returns:
        `outputs` with the shape of `inputs` except the last axis,
        `output_dim` (B, T, output_dim) or (B, height, width, output_dim);
        then, when asked for, `attention_scores` (B, H, T, S) float
        probabilities before dropout (T = S = height * width in 2D; S =
        max_length with a cache; with a rolling cache S = W + T, column j
        being position `cache_index - W + j`); then the updated `cache`
        (B, max_length or W, H, K + V) when a `cache` was passed. With
        `image_size`, T = S = the sequence's length (S = max_length with a
        cache), over block-raster positions.

    Raises:
        ValueError: on invalid sizes (`block_size`, `memory_flange`,
            `image_size`), a 2D `rolling_cache`, inputs of the wrong rank or
            longer than `image_size` allows, a cache without
            `use_causal_mask=True` (or 2D without `image_size`), and as
            `MultiHeadSelfAttention`. A `block_size` longer than the
            sequence is valid (one block: full attention).

    Example:
    >>> import keras
    >>> from keras_attn.layers import LocalBlockAttention
    >>> layer = LocalBlockAttention(num_heads=2, key_dim=8, block_size=4,
    ...                             memory_flange=4)
    >>> x = keras.random.normal((2, 13, 16))
    >>> tuple(layer(x, use_causal_mask=True).shape)
    (2, 13, 16)
    >>> cache = layer.init_cache(batch_size=2, max_length=13)
    >>> y, cache = layer(x[:, :1], cache=cache, cache_index=0,
    ...                  use_causal_mask=True)
    >>> rolling = LocalBlockAttention(num_heads=2, key_dim=8, block_size=4,
    ...                               memory_flange=4, rolling_cache=True)
    >>> tuple(rolling.init_cache(batch_size=2, max_length=10_000).shape)
    (2, 8, 2, 16)
    >>> image = keras.random.normal((1, 10, 7, 16))
    >>> tuple(LocalBlockAttention(2, 8, block_size=(4, 4),
    ...                           memory_flange=(2, 2))(image).shape)
    (1, 10, 7, 16)

    Block-raster sequences over a 4x6 image, full pass and pixel by pixel:
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

    Reference:
        Parmar et al. 2018, "Image Transformer", section 3.2 (local
        self-attention: 1D and 2D query blocks with a memory flange; the
        block-raster order of masked 2D local attention is tensor2tensor's
        `common_attention.masked_local_attention_2d`).
    """

    # Block-raster cached steps read contiguous runs of the cache
    # (`_attend_raster_step`); False: the element gather of the window's
    # slots, which stays for caches of dynamic length (benchmarks compare).
    _read_runs = True

    def __init__(self, num_heads, key_dim, block_size, memory_flange=None, rolling_cache=False,
                 image_size=None, **kwargs):
        chunk_size = kwargs.setdefault("chunk_size", None)
        checks.require(chunk_size in (None, "auto"), "chunk_size", chunk_size,
                       'None or "auto" (this core is already linear in the length)')
        super().__init__(num_heads=num_heads, key_dim=key_dim, **kwargs)
        checks.check_bool(self, "rolling_cache", rolling_cache, "True = keep the last W only")
        self.rolling_cache = rolling_cache
        block = self._as_sizes("block_size", block_size, lowest=1)
        flange = block if memory_flange is None else self._as_sizes(
            "memory_flange", memory_flange, lowest=0)
        self.block_size = block[0] if len(block) == 1 else block
        self.memory_flange = (
            None if memory_flange is None else (flange[0] if len(flange) == 1 else flange))
        self._block = block
        self._flange = flange
        if len(flange) != len(block) or (rolling_cache and len(block) == 2):
            raise ValueError(
                f"{type(self).__name__}: `memory_flange` must have the rank of `block_size` (int: "
                "1D, pair: 2D), and `rolling_cache` is 1D only. Received: block_size="
                f"{block_size!r}, memory_flange={memory_flange!r}, rolling_cache={rolling_cache}.")
        self.image_size = self._check_image_size(image_size)
        self._input_ranks = (3,) if self.image_size else (2 + len(block),)
        self._inputs_layout = (
            "(batch, length, features) of pixels in block-raster order (drop `image_size` for "
            "images)"
            if self.image_size else
            ("(batch, length, features)" if len(block) == 1 else "(batch, height, width, features)")
            + f" for block_size={self.block_size!r} (an int: 1D, sequences; a pair: 2D, images)")

    def _check_image_size(self, image_size):
        """None, or (height, width) for block-raster sequences: 2D blocks
        only, sides multiples of the block's."""
        if image_size is None:
            return None
        height, width = checks.check_image_size(image_size, owner=self)
        if len(self._block) != 2 or height % self._block[0] or width % self._block[1]:
            raise ValueError(f"{type(self).__name__}: `image_size` needs a pair `block_size` that "
                             f"divides its sides. Received: image_size={(height, width)}, "
                             f"block_size={self.block_size!r}. Pad the image, or pick another "
                             "block.")
        return (height, width)

    @property
    def _max_positions(self):
        """Positions a block-raster sequence may have: the image's pixels,
        plus one past it (a start token shifts the image right by one;
        generation feeds that last position, whose window is empty)."""
        height, width = self.image_size
        return height * width + 1

    def _as_sizes(self, name, value, lowest):
        """int -> (int,); a pair of ints -> tuple; each >= `lowest`."""
        sizes = tuple(value) if isinstance(value, (tuple, list)) and len(value) == 2 else (value,)
        checks.require(all(checks.is_int(v, lowest) for v in sizes), name, value,
                       f"an int (1D) or a pair of ints (2D), each >= {lowest}")
        return tuple(int(v) for v in sizes)

    def _check_inputs_shape(self, shape):
        if self.image_size and (shape[1] or 0) > self._max_positions:
            raise ValueError(f"{type(self).__name__} with image_size={self.image_size} takes at "
                             f"most {self._max_positions} positions. Received inputs of shape "
                             f"{shape}.")
        super()._check_inputs_shape(shape)

    def init_cache(self, batch_size, max_length, dtype=None):
        """As `MultiHeadSelfAttention.init_cache`, for causal decoding: 1D,
        or 2D with `image_size` (slot i = block-raster position i); but
        positions first: zeros of shape (B, max_length, H, key_dim +
        value_dim) ((B, block + flange, H, key_dim + value_dim) with
        `rolling_cache`), keys `cache[..., :key_dim]`, values
        `cache[..., key_dim:]`. A step reads only its window, a few
        contiguous runs of positions, so this layout suits it.

        Raises:
            ValueError: 2D without `image_size`; sizes not positive or
                above the image's pixels plus one.
        """
        self._check_cache_supported(True)
        if self.image_size:
            most = self._max_positions
            checks.require((checks.static_int(max_length) or 0) <= most, "max_length", max_length,
                           f"<= {most} (image_size={self.image_size}: pixels + 1)")
        if not self.rolling_cache:
            return super().init_cache(batch_size, max_length, dtype)
        self._check_cache_sizes(batch_size, max_length)
        return super().init_cache(batch_size, self._rolling_length, dtype)

    @property
    def _rolling_length(self):
        """W = block + flange: the positions a causal 1D step can read."""
        return self._block[0] + self._flange[0]

    def _cache_shape(self, batch_size, max_length):
        return (batch_size, max_length, self.num_heads, self.key_dim + self._value_dim)

    # The cache's axis of positions: (B, L, H, K + V).
    _cache_length_axis = 1

    def _cache_capacity(self, cache):
        return None if self.rolling_cache else self._cache_length(cache)

    def _write_cache(self, cache, key_value, cache_index):
        if not self.rolling_cache:
            cache = ops.slice_update(cache, (0, cache_index, 0, 0), key_value)
            return cache, cache
        # The queries read [old W positions | new T]; the cache keeps the
        # last W of them, oldest first.
        attended = ops.concatenate([cache, key_value], axis=1)
        return attended, attended[:, -self._rolling_length:]

    def _check_cache_supported(self, use_causal_mask):
        if not use_causal_mask or (len(self._block) != 1 and self.image_size is None):
            raise ValueError(
                f"{type(self).__name__} has a `cache` only with use_causal_mask=True, and in 2D "
                f"only with `image_size`. Received: use_causal_mask={use_causal_mask}, block_size="
                f"{self.block_size!r}, image_size={self.image_size}.")

    def _check_cache(self, cache, cache_index, inputs, use_causal_mask, padding_mask):
        self._check_cache_supported(use_causal_mask)
        super()._check_cache(cache, cache_index, inputs, use_causal_mask, padding_mask)
        positions = cache.shape[1]
        rolling = self.rolling_cache
        most = self._rolling_length if rolling else self.image_size and self._max_positions
        if positions and most and (positions > most or rolling and positions < most):
            raise ValueError(
                f"{type(self).__name__}: `cache` must have {'exactly' if rolling else 'at most'} "
                f"{most} positions, as `init_cache` makes. Received: cache.shape={cache.shape}.")

    # ----------------------------------------------------------- attention
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
        """(Q, M) bool: which memory slots of a block's window a query slot
        of that block may see, before padding; None when all."""
        if not use_causal_mask:
            return None
        if len(self._block) == 1:
            (b,), (f,) = self._block, self._flange
            query = ops.arange(b, dtype="int32")[:, None]
            memory = ops.arange(f + b, dtype="int32")[None, :]
            return ops.less_equal(memory - f, query)
        return self._structure_rows(ops.arange(self._block[0] * self._block[1], dtype="int32"))

    def _structure_rows(self, query_slots):
        """The rows of the 2D causal `_structure_mask` of the query slots
        `query_slots` (T,) inside their blocks: (T, M) bool, built directly
        (a decoding step needs one row, not the (Q, M) mask)."""
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

    def _attend(self, query, key, value, masks, spatial_shape, return_attention_scores, training):
        if self.image_size is not None:
            return self._attend_block_raster(query, key, value, masks, return_attention_scores,
                                             training)
        if masks.cached:
            return self._attend_cached(query, key, value, masks, return_attention_scores, training)
        padding_mask, attention_mask = masks.padding_mask, masks.attention_mask
        block = self._block
        before, after = self._window(masks.use_causal_mask)
        batch = blocking.dims(query)[0]
        heads = self.num_heads
        if len(block) == 1:
            spatial = [blocking.dims(query)[1]]
        else:
            spatial = list(spatial_shape)
        length = spatial[0] if len(block) == 1 else spatial[0] * spatial[1]

        # Head-major layout (B * H, *spatial, ·): the block matmuls then run
        # on contiguous batches, with no transpose of the large logits.
        def heads_first(x):
            x = ops.transpose(x, (0, 2, 1, 3))
            return ops.reshape(x, [batch * heads] + spatial + [x.shape[-1]])

        def split_heads(x):
            return ops.reshape(x, [batch, heads] + blocking.dims(x)[1:])

        query_blocks = split_heads(blocking.blockify(heads_first(query), block))
        key_memory = split_heads(
            blocking.overlapping_blocks(heads_first(key), block, before, after))
        value_memory = split_heads(
            blocking.overlapping_blocks(heads_first(value), block, before, after))

        # Raster index of every memory slot, -1 outside the input: (N, M).
        positions = ops.reshape(ops.arange(length, dtype="int32"), [1] + spatial)
        memory_positions = blocking.overlapping_blocks(
            positions, block, before, after, constant_values=-1
        )[0]

        # Masks are laid out as the logits: (B, H, N, Q, M).
        if padding_mask is not None:
            key_ok = blocking.overlapping_blocks(
                ops.reshape(padding_mask, [batch] + spatial), block, before, after,
                constant_values=False,
            )[:, None, :, None, :]
        else:
            key_ok = ops.greater_equal(memory_positions, 0)[None, None, :, None, :]
        mask = key_ok
        structure = self._structure_mask(masks.use_causal_mask)
        if structure is not None:
            mask = ops.logical_and(mask, structure[None, None, None])
        if attention_mask is not None:
            mask = ops.logical_and(
                mask,
                self._gather_attention_mask(attention_mask, spatial, memory_positions, length),
            )

        outputs, probs = _local_attention(query_blocks, key_memory, value_memory, mask,
                                          self.dropout_layer, training, masks.may_have_empty_rows)

        def merge_heads(x):  # (B, H, N, Q, ·) -> (B, H, T, ·)
            x = ops.reshape(x, [batch * heads] + blocking.dims(x)[2:])
            x = blocking.unblockify(x, block, spatial)
            return ops.reshape(x, [batch, heads, length, x.shape[-1]])

        outputs = ops.transpose(merge_heads(outputs), (0, 2, 1, 3))
        scores = None
        if return_attention_scores:
            slot, inside = self._window_slots(spatial, before, after)
            scores = _scatter_rows(merge_heads(probs), slot, inside)
        return outputs, scores

    def _gather_attention_mask(self, attention_mask, spatial, memory_positions, key_length):
        """(B, [H,] T, S) -> (B, H or 1, N, Q, M): the entries of each query
        block's rows at its memory slots."""
        if len(attention_mask.shape) == 3:
            attention_mask = attention_mask[:, None]
        mask_dims = blocking.dims(attention_mask)
        rows = ops.reshape(attention_mask, [mask_dims[0] * mask_dims[1]] + spatial + [mask_dims[3]])
        rows = blocking.blockify(rows, self._block, False)
        rows = ops.reshape(rows, mask_dims[:2] + blocking.dims(rows)[1:])
        columns = ops.clip(memory_positions, 0, key_length - 1)
        return ops.take_along_axis(rows, columns[None, None, :, None, :], axis=-1)

    def _window_slots(self, spatial, before, after):
        """For every (query, key) pair of raster indices: the key's slot in
        the query block's memory window, and whether it lies in the window.
        Returns ((T, S) int32, (T, S) bool). Only used to build dense scores."""
        if len(self._block) == 1:
            (b,), (f_before,), (f_after,) = self._block, before, after
            positions = ops.arange(spatial[0], dtype="int32")
            origin = (positions // b) * b - f_before
            slot = positions[None, :] - origin[:, None]
            inside = ops.logical_and(ops.greater_equal(slot, 0),
                                     ops.less(slot, f_before + b + f_after))
            return slot, inside
        height, width = spatial
        (bh, bw) = self._block
        window_h = before[0] + bh + after[0]
        window_w = before[1] + bw + after[1]
        positions = ops.arange(height * width, dtype="int32")
        row, col = positions // width, positions % width
        delta_row = row[None, :] - ((row // bh) * bh - before[0])[:, None]
        delta_col = col[None, :] - ((col // bw) * bw - before[1])[:, None]
        inside = ops.logical_and(
            ops.logical_and(ops.greater_equal(delta_row, 0), ops.less(delta_row, window_h)),
            ops.logical_and(ops.greater_equal(delta_col, 0), ops.less(delta_col, window_w)),
        )
        return delta_row * window_w + delta_col, inside

    # ------------------------------------------- block-raster sequences (2D)
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
            query, start, masks)
        memory = self._raster_memory(block_ids, masks.use_causal_mask)  # (G, M)
        mask = self._raster_mask(memory, start + length, structure, query_rows, masks)
        memory_index = ops.clip(memory, 0, key_length - 1)
        if value is None:
            memory_keys, memory_values = self._split_keys_values(
                ops.take(key, memory_index, axis=1), query.dtype)
        else:
            memory_keys = ops.take(key, memory_index, axis=1)
            memory_values = ops.take(value, memory_index, axis=1)
        # A query past the image (position height * width) sees no key.
        inside_image = isinstance(key_length, int) and key_length < self._max_positions
        outputs, probs = _local_attention(
            heads_first(query_groups), heads_first(memory_keys), heads_first(memory_values),
            mask, self.dropout_layer, training,
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
                query_positions, ops.arange(key_length, dtype="int32"), masks.use_causal_mask)
            scores = _scatter_rows(ungroup(probs), slot, inside)
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
            return (query[:, :, None], positions // block_length,
                    ops.arange(length, dtype="int32")[:, None], structure, None)
        lead = start % block_length if masks.cached else 0
        count = blocking.num_blocks(length + (block_length - 1 if masks.cached else 0),
                                    block_length)
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
        mask = ops.logical_and(
            ops.greater_equal(memory, 0), ops.less(memory, end)
        )[None, None, :, None, :]
        if structure is not None:
            mask = ops.logical_and(mask, structure[None, None])
        if masks.padding_mask is not None:
            mask = ops.logical_and(
                mask, _take_positions(masks.padding_mask, memory, 1)[:, None, :, None, :])
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
        return (self.image_size[1] // bw, before, before[0] + bh + after[0],
                before[1] + bw + after[1])

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
        inside = ops.logical_and(ops.logical_and(ops.greater_equal(row, 0), ops.less(row, height)),
                                 ops.logical_and(ops.greater_equal(col, 0), ops.less(col, width)))
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
        return ((block // grid_width) * bh + inner // bw,
                (block % grid_width) * bw + inner % bw)

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
                mask, _take_positions(masks.padding_mask, positions, 1)[:, None, None, None, :])
        attention_mask = masks.attention_mask
        if attention_mask is not None:
            if len(attention_mask.shape) == 3:
                attention_mask = attention_mask[:, None]
            mask = ops.logical_and(mask, _take_positions(attention_mask, positions, 3)[:, :, None])
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
        starts, sizes = self._raster_step_runs(start // (self._block[0] * self._block[1]), length,
                                               cache_length)
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
        mask = self._raster_step_mask(ops.concatenate(positions, axis=0),
                                      ops.concatenate(fresh, axis=0), query_positions, masks)
        keys, values = self._split_keys_values(read, query.dtype)
        # Masked slots get zero weight; zero their values too, so that what
        # the runs read outside the window (even inf or NaN) cannot leak.
        seen = ops.any(mask, axis=(1, 2, 3))  # (B or 1, N)
        values = ops.where(seen[:, :, None, None], values, ops.zeros_like(values[:1, :1]))

        def one_block(x):  # (B, T or N, H, ·) -> (B, H, 1, T or N, ·)
            return ops.transpose(x, (0, 2, 1, 3))[:, :, None]

        inside_image = cache_length < self._max_positions
        outputs, probs = _local_attention(
            one_block(query), one_block(keys), one_block(values), mask, self.dropout_layer,
            training, masks.may_have_empty_rows or not inside_image,
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
                ops.logical_and(ops.greater_equal(position, run_start),
                                ops.less(position, run_start + size)),
                ops.logical_not(found),
            )
            slot = ops.where(here, offset + position - run_start, slot)
            found = ops.logical_or(found, here)
            offset += size
        length = blocking.dims(probs)[2]
        return _scatter_rows(probs, ops.broadcast_to(slot, (length, cache_length)),
                             ops.broadcast_to(found, (length, cache_length)))

    def _cached_keys_values(self, cache, dtype):
        # A step reads only its window: hand the core the cache itself
        # (keys and values side by side, `value` None) and split what it
        # reads, instead of casting and splitting all L positions at every
        # step (two copies of the cache: most of a step's time at L = 3072
        # without XLA).
        return cache, None

    def _split_keys_values(self, key_value, dtype):
        """[k | v] read from the cache (·, K + V) -> keys (·, K), values (·, V)."""
        return ops.split(ops.cast(key_value, dtype), [self.key_dim], axis=-1)

    def _attend_cached(self, query, key, value, masks, return_attention_scores, training):
        """Causal 1D attention of T new queries at `cache_index` over the
        cache (B, L, H, K + V) (`key`; `value` is None), reading only the
        keys and values of their windows."""
        length = blocking.dims(query)[1]
        cache_length = blocking.dims(key)[1]
        attention_mask = masks.attention_mask
        if attention_mask is not None and len(attention_mask.shape) == 3:
            attention_mask = attention_mask[:, None]
        cache_index = ops.cast(masks.cache_index, "int32")
        masks = dataclasses.replace(masks, attention_mask=attention_mask, cache_index=cache_index)
        # Absolute position of the first key slot: 0, or for a rolling cache
        # that of the oldest position it kept.
        key_offset = cache_index - self._rolling_length if self.rolling_cache else 0
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

    def _attend_cached_step(self, query, key, masks, key_offset, return_attention_scores,
                            training):
        """Decoding step (T <= block): attends over one dynamic slice of the
        cache `key` (B, L, H, K + V), whose slot j holds position
        `key_offset + j`."""
        padding_mask, attention_mask = masks.padding_mask, masks.attention_mask
        cache_index = masks.cache_index
        (b,), (f,) = self._block, self._flange
        length = blocking.dims(query)[1]
        cache_length = blocking.dims(key)[1]
        window = length + b - 1 + f
        if cache_length <= window:
            window, start = cache_length, ops.convert_to_tensor(0, "int32")
        else:
            start = ops.clip(cache_index - key_offset + length - window, 0, cache_length - window)
        x_dims = blocking.dims(key)
        window_cache = ops.slice(key, [0, start, 0, 0], [x_dims[0], window] + x_dims[2:])

        query_positions = cache_index + ops.arange(length, dtype="int32")
        key_positions = key_offset + start + ops.arange(window, dtype="int32")
        visible = ops.logical_and(
            ops.greater_equal(key_positions[None, :],
                              ops.maximum(self._cached_window_start(query_positions), 0)[:, None]),
            ops.less_equal(key_positions[None, :], query_positions[:, None]),
        )
        mask = visible[None, None, None]  # (1, 1, 1, T, W)
        if padding_mask is not None:
            mask = ops.logical_and(
                mask, _take_positions(padding_mask, key_positions, 1)[:, None, None, None, :])
        if attention_mask is not None:
            columns = _take_positions(attention_mask, key_positions, 3)
            mask = ops.logical_and(mask, columns[:, :, None])

        def one_block(x):  # (B, T, H, ·) -> (B, H, 1, T, ·)
            return ops.transpose(x, (0, 2, 1, 3))[:, :, None]

        window_keys, window_values = self._split_keys_values(window_cache, query.dtype)
        outputs, probs = _local_attention(
            one_block(query), one_block(window_keys), one_block(window_values), mask,
            self.dropout_layer, training, masks.may_have_empty_rows,
        )
        outputs = ops.transpose(outputs[:, :, 0], (0, 2, 1, 3))
        scores = None
        if return_attention_scores:
            window_start = ops.broadcast_to(start, (length,))
            scores = _scatter_cache_rows(probs[:, :, 0], window_start, cache_length)
        return outputs, scores

    def _attend_cached_prefill(self, query, key, masks, key_offset, return_attention_scores,
                               training):
        """Prefill of a long chunk: blocked attention over the cache blocks it
        touches (slot j of the cache `key` holds position `key_offset + j`)."""
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

        query_blocks = ops.reshape(ops.take(query, query_index, axis=1),
                                   [batch, count, b] + blocking.dims(query)[2:])
        memory_positions = (
            first_block_start - f
            + ops.arange(count, dtype="int32")[:, None] * b
            + ops.arange(f + b, dtype="int32")[None, :]
        )
        memory_index = ops.clip(memory_positions - key_offset, 0, cache_length - 1)
        mask = self._cached_prefill_mask(memory_positions, key_offset, cache_length,
                                         masks.padding_mask, masks.attention_mask, query_index)
        memory_keys, memory_values = self._split_keys_values(ops.take(key, memory_index, axis=1),
                                                             query.dtype)
        outputs, probs = _local_attention(
            blocks_heads_first(query_blocks),
            blocks_heads_first(memory_keys),
            blocks_heads_first(memory_values),
            mask, self.dropout_layer, training, masks.may_have_empty_rows,
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
            scores = _scatter_cache_rows(rows, window_start, cache_length)
        return outputs, scores

    def _cached_prefill_mask(
        self, memory_positions, key_offset, cache_length, padding_mask,
        attention_mask, query_index,
    ):
        """(B|1, H|1, N, Q, M) mask of a prefill's query blocks over their
        memory (absolute positions; the cache holds `key_offset ..
        key_offset + cache_length - 1`)."""
        count = blocking.dims(memory_positions)[0]
        key_ok = ops.logical_and(ops.greater_equal(memory_positions, ops.maximum(key_offset, 0)),
                                 ops.less(memory_positions, key_offset + cache_length))
        mask = ops.logical_and(key_ok[None, None, :, None, :],
                               self._structure_mask(True)[None, None, None])
        if padding_mask is not None:
            mask = ops.logical_and(
                mask, _take_positions(padding_mask, memory_positions, 1)[:, None, :, None, :])
        if attention_mask is not None:
            rows = ops.take(attention_mask, query_index, axis=2)
            mask_dims = blocking.dims(rows)
            rows = ops.reshape(
                rows, mask_dims[:2] + [count, self._block[0], mask_dims[3]]
            )  # (B, H, N, Q, S)
            columns = ops.clip(memory_positions, 0, mask_dims[3] - 1)
            mask = ops.logical_and(
                mask, ops.take_along_axis(rows, columns[None, None, :, None, :], axis=-1))
        return mask


def _local_attention(query, key, value, mask, dropout_layer, training, may_have_empty_rows):
    """Attention inside each block: softmax(Q·Kᵀ/√K)·V over its memory.

    Args:
        query: (B, H, N, Q, K) query blocks.
        key: (B, H, N, M, K); value: (B, H, N, M, V) memory blocks.
        mask: bool broadcastable to (B, H, N, Q, M), True = may attend.
        dropout_layer, training: attention dropout.
        may_have_empty_rows: see `attention_ops.masked_softmax`.

    Returns:
        (outputs (B, H, N, Q, V) in the value's dtype, probabilities
        (B, H, N, Q, M) float32 before dropout).
    """
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


def _take_positions(mask, positions, axis):
    """The entries of a mask at absolute `positions` along `axis` (clipped
    into the mask: positions outside it are masked by the caller)."""
    last = blocking.dims(mask)[axis] - 1
    return ops.take(mask, ops.clip(positions, 0, last), axis=axis)


def _scatter_rows(rows, slot, inside):
    """Dense (B, H, T, S) scores from per-query window rows (B, H, T, M):
    entry (t, s) is rows[t, slot[t, s]] where `inside`, else 0."""
    window = rows.shape[-1]
    index = ops.clip(slot, 0, window - 1)[None, None]
    return ops.where(inside[None, None], ops.take_along_axis(rows, index, axis=-1), 0.0)


def _scatter_cache_rows(rows, window_start, cache_length):
    """Dense (B, H, T, L) scores from rows (B, H, T, W) of windows at `window_start`."""
    slot = ops.arange(cache_length, dtype="int32")[None, :] - window_start[:, None]
    inside = ops.logical_and(ops.greater_equal(slot, 0), ops.less(slot, rows.shape[-1]))
    return _scatter_rows(rows, slot, inside)
