"""`LocalBlockAttention`: the public local self-attention layer.

The class holds its constructor, its checks, `init_cache` and `_attend`,
which picks the path of a call; the paths live beside it, one idea a module:

* `local_attention_windows`: the uncached pass over query blocks and their
  memory windows (1D sequences, 2D images) and the window geometry;
* `local_attention_cache`: the cache layout, the rolling cache, the 1D
  cached step and prefill;
* `local_attention_raster`: block-raster sequences (`image_size`), full
  pass and cached steps;
* `blocking`: cutting positions into blocks and overlapping windows.

docs/guides/local_attention.md explains the windows and the caches.
"""

import keras

from keras_attn import checks
from keras_attn.layers.local_attention_cache import LocalCacheMixin
from keras_attn.layers.local_attention_raster import BlockRasterMixin
from keras_attn.layers.local_attention_windows import LocalWindowsMixin
from keras_attn.layers.multi_head_self_attention import MultiHeadSelfAttention


@keras.saving.register_keras_serializable(package="keras_attn")
class LocalBlockAttention(
    LocalWindowsMixin, LocalCacheMixin, BlockRasterMixin, MultiHeadSelfAttention
):
    """Local self-attention over query blocks and their memory flange (1D/2D).

    Positions are cut into query blocks; a query attends only to its block
    plus `memory_flange` positions around it (before it only, when causal):
    linear in the length, a drop-in `MultiHeadSelfAttention` for long
    sequences and images. docs/guides/local_attention.md explains the
    windows of each mode, the padding to whole blocks and the caches.

    Args:
        num_heads: H, number of attention heads (positive int).
        key_dim: K, size of each head's query and key (positive int).
        block_size: an int: 1D, sequences (B, T, D); a pair `(bh, bw)`: 2D,
            images (B, height, width, D). Positive.
        memory_flange: an int (1D) or `(fh, fw)` (2D), non-negative, how far
            before (and, not causal, after) its block a query looks; defaults
            to `block_size`.
        rolling_cache: (1D only) True: `init_cache` keeps only the last
            W = block + flange positions; calls must then go forward.
        image_size: None, or `(height, width)`, multiples of a pair
            `block_size`: the layer takes pixel sequences (B, T, D) in
            block-raster order instead of images, and has a cache.
        **kwargs: the other arguments of `MultiHeadSelfAttention`
            (`chunk_size` None or "auto" only) and of `keras.layers.Layer`.

    Call arguments:
        inputs: (B, T, D); (B, height, width, D) for a pair `block_size`;
            (B, T, D), T <= height * width + 1, with `image_size`.
        padding_mask: bool, `True` = real key: (B, T), (B, height, width)
            for images, (B, max_length) with a cache; default: the implicit one.
        attention_mask: (B, T, S) or (B, H, T, S) bool, AND-ed with the window.
        use_causal_mask: causal in raster order (1D), block-raster order (2D).
        cache: from `init_cache`, with `use_causal_mask=True`, 1D or with
            `image_size`. A step reads only the cached positions of its window.
        cache_index: int or int32 scalar, absolute position of `inputs[:, 0]`.
        return_attention_scores: also return the dense scores (O(T * S)).
        training: Python bool; enables dropout.

    Returns:
        `outputs` (B, T, output_dim) or (B, height, width, output_dim); then,
        when asked for, `attention_scores` (B, H, T, S) float, zero outside
        each window (S = max_length with a cache, W + T with a rolling one);
        then the updated `cache` when a `cache` was passed.

    Raises:
        ValueError: on invalid sizes, a 2D `rolling_cache`, inputs of the
            wrong rank or too long for `image_size`, a cache without
            `use_causal_mask=True` (or 2D without `image_size`).

    Example:
    >>> import keras
    >>> from keras_attn.layers import LocalBlockAttention
    >>> layer = LocalBlockAttention(num_heads=2, key_dim=8, block_size=4)
    >>> tuple(layer(keras.random.normal((2, 13, 16)), use_causal_mask=True).shape)
    (2, 13, 16)

    Reference:
        Parmar et al. 2018, "Image Transformer", section 3.2; block-raster
        order as tensor2tensor's `common_attention.masked_local_attention_2d`.
    """

    def __init__(
        self,
        num_heads,
        key_dim,
        block_size,
        memory_flange=None,
        rolling_cache=False,
        image_size=None,
        **kwargs,
    ):
        chunk_size = kwargs.setdefault("chunk_size", None)
        checks.require(
            chunk_size in (None, "auto"),
            "chunk_size",
            chunk_size,
            'None or "auto" (this core is already linear in the length)',
        )
        super().__init__(num_heads=num_heads, key_dim=key_dim, **kwargs)
        checks.check_bool(self, "rolling_cache", rolling_cache, "True = keep the last W only")
        self.rolling_cache = rolling_cache
        block = self._as_sizes("block_size", block_size, lowest=1)
        flange = (
            block
            if memory_flange is None
            else self._as_sizes("memory_flange", memory_flange, lowest=0)
        )
        self.block_size = block[0] if len(block) == 1 else block
        self.memory_flange = (
            None if memory_flange is None else (flange[0] if len(flange) == 1 else flange)
        )
        self._block = block
        self._flange = flange
        if len(flange) != len(block) or (rolling_cache and len(block) == 2):
            raise ValueError(
                f"{type(self).__name__}: `memory_flange` must have the rank of `block_size` (int: "
                "1D, pair: 2D), and `rolling_cache` is 1D only. Received: block_size="
                f"{block_size!r}, memory_flange={memory_flange!r}, rolling_cache={rolling_cache}."
            )
        self.image_size = self._check_image_size(image_size)
        self._input_ranks = (3,) if self.image_size else (2 + len(block),)
        self._inputs_layout = (
            "(batch, length, features) of pixels in block-raster order (drop `image_size` for "
            "images)"
            if self.image_size
            else (
                "(batch, length, features)"
                if len(block) == 1
                else "(batch, height, width, features)"
            )
            + f" for block_size={self.block_size!r} (an int: 1D, sequences; a pair: 2D, images)"
        )

    def _check_image_size(self, image_size):
        """None, or (height, width) for block-raster sequences: 2D blocks
        only, sides multiples of the block's."""
        if image_size is None:
            return None
        height, width = checks.check_image_size(image_size, owner=self)
        if len(self._block) != 2 or height % self._block[0] or width % self._block[1]:
            raise ValueError(
                f"{type(self).__name__}: `image_size` needs a pair `block_size` that "
                f"divides its sides. Received: image_size={(height, width)}, "
                f"block_size={self.block_size!r}. Pad the image, or pick another "
                "block."
            )
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
        checks.require(
            all(checks.is_int(v, lowest) for v in sizes),
            name,
            value,
            f"an int (1D) or a pair of ints (2D), each >= {lowest}",
        )
        return tuple(int(v) for v in sizes)

    def _check_inputs_shape(self, shape):
        if self.image_size and (shape[1] or 0) > self._max_positions:
            raise ValueError(
                f"{type(self).__name__} with image_size={self.image_size} takes at "
                f"most {self._max_positions} positions. Received inputs of shape "
                f"{shape}."
            )
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
            checks.require(
                (checks.static_int(max_length) or 0) <= most,
                "max_length",
                max_length,
                f"<= {most} (image_size={self.image_size}: pixels + 1)",
            )
        if not self.rolling_cache:
            return super().init_cache(batch_size, max_length, dtype)
        self._check_cache_sizes(batch_size, max_length)
        return super().init_cache(batch_size, self._rolling_length, dtype)

    def _check_cache_supported(self, use_causal_mask):
        if not use_causal_mask or (len(self._block) != 1 and self.image_size is None):
            raise ValueError(
                f"{type(self).__name__} has a `cache` only with use_causal_mask=True, and in 2D "
                f"only with `image_size`. Received: use_causal_mask={use_causal_mask}, block_size="
                f"{self.block_size!r}, image_size={self.image_size}."
            )

    def _check_cache(self, cache, cache_index, inputs, use_causal_mask, padding_mask):
        self._check_cache_supported(use_causal_mask)
        super()._check_cache(cache, cache_index, inputs, use_causal_mask, padding_mask)
        positions = cache.shape[1]
        rolling = self.rolling_cache
        most = self._rolling_length if rolling else self.image_size and self._max_positions
        if positions and most and (positions > most or rolling and positions < most):
            raise ValueError(
                f"{type(self).__name__}: `cache` must have {'exactly' if rolling else 'at most'} "
                f"{most} positions, as `init_cache` makes. Received: cache.shape={cache.shape}."
            )

    def _attend(self, query, key, value, masks, spatial_shape, return_attention_scores, training):
        """The core of each mode: block-raster sequences
        (`local_attention_raster`), a 1D cache (`local_attention_cache`),
        or the uncached pass over blocks of 1D sequences and 2D images
        (`local_attention_windows`)."""
        if self.image_size is not None:
            return self._attend_block_raster(
                query, key, value, masks, return_attention_scores, training
            )
        if masks.cached:
            return self._attend_cached(query, key, value, masks, return_attention_scores, training)
        return self._attend_blocks(
            query, key, value, masks, spatial_shape, return_attention_scores, training
        )
