"""`LocalBlockAttention`; its paths are mixins, see docs/guides/local_attention.md."""

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
    """Local self-attention: a query sees its block plus `memory_flange` positions around it
    (before it only, when causal). Linear in the length; docs/guides/local_attention.md.

    Args:
        num_heads: H, number of attention heads (positive int).
        key_dim: K, size of each head's query and key (positive int).
        block_size: an int (1D, sequences (B, T, D)) or a pair (2D, images (B, height, width, D)).
        memory_flange: an int or a pair >= 0, how far around its block a query looks.
        rolling_cache: (1D only) True: `init_cache` keeps only the last block + flange positions.
        image_size: None, or (height, width): inputs are pixel sequences in block-raster order.
        **kwargs: `MultiHeadSelfAttention` (`chunk_size` None or "auto") and `Layer` arguments.

    Call arguments:
        inputs: (B, T, D), or (B, height, width, D) for a pair `block_size` without `image_size`.
        padding_mask: bool, True = real key: (B, T), (B, height, width), or (B, max_length).
        attention_mask: (B, T, S) or (B, H, T, S) bool, AND-ed with the window.
        use_causal_mask: causal in raster order (1D), block-raster order (2D).
        cache: from `init_cache`, with `use_causal_mask=True`, 1D or with `image_size`.
        cache_index: int or int32 scalar, absolute position of `inputs[:, 0]`.
        return_attention_scores: also return the dense scores (O(T * S)).
        training: Python bool; enables dropout.

    Returns:
        `outputs` (B, T, output_dim) or (B, height, width, output_dim); then, when asked for,
        `attention_scores` (B, H, T, S), zero outside each window; then the updated `cache`.

    Raises:
        ValueError: on invalid sizes or inputs, a cache without `use_causal_mask=True`.

    Example:
    >>> import keras
    >>> from keras_attn.layers import LocalBlockAttention
    >>> layer = LocalBlockAttention(num_heads=2, key_dim=8, block_size=4)
    >>> tuple(layer(keras.random.normal((2, 13, 16)), use_causal_mask=True).shape)
    (2, 13, 16)

    Reference:
        Parmar et al. 2018, "Image Transformer", section 3.2.
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
        checks.require(chunk_size in (None, "auto"), "chunk_size", chunk_size, 'None or "auto"')
        super().__init__(num_heads=num_heads, key_dim=key_dim, **kwargs)
        checks.check_bool(self, "rolling_cache", rolling_cache, "True = keep the last W only")
        self.rolling_cache = rolling_cache
        self._block = self._as_sizes("block_size", block_size, lowest=1)
        flange = block_size if memory_flange is None else memory_flange
        self._flange = self._as_sizes("memory_flange", flange, lowest=0)
        self.block_size = self._block[0] if len(self._block) == 1 else self._block
        self.memory_flange = None if memory_flange is None else self._flange
        if memory_flange is not None and len(self._flange) == 1:
            self.memory_flange = self._flange[0]
        if len(self._flange) != len(self._block) or (rolling_cache and len(self._block) == 2):
            raise ValueError(
                "`memory_flange` must have the rank of `block_size`, and `rolling_cache` is 1D "
                f"only. Received: block_size={block_size!r}, memory_flange={memory_flange!r}, "
                f"rolling_cache={rolling_cache}."
            )
        self.image_size = None
        if image_size is not None:
            self.image_size = checks.check_image_size(image_size, owner=self)
            sides = zip(self.image_size, self._block)
            fits = len(self._block) == 2 and not any(n % b for n, b in sides)
            want = f"divisible by a pair `block_size` (here {self.block_size!r})"
            checks.require(fits, "image_size", image_size, want)
        rank = 3 if self.image_size else 2 + len(self._block)
        self.input_spec = keras.layers.InputSpec(ndim=rank)

    @property
    def _max_positions(self):
        """A block-raster sequence's positions: the pixels plus one (a start token)."""
        height, width = self.image_size
        return height * width + 1

    def _as_sizes(self, name, value, lowest):
        """int -> (int,); a pair of ints -> tuple; each >= `lowest`."""
        sizes = tuple(value) if isinstance(value, (tuple, list)) and len(value) == 2 else (value,)
        ok = all(checks.is_int(v, lowest) for v in sizes)
        checks.require(ok, name, value, f"an int (1D) or a pair of ints (2D), each >= {lowest}")
        return tuple(int(v) for v in sizes)

    def _check_inputs_shape(self, shape):
        most = self.image_size and self._max_positions
        ok = not most or (shape[1] or 0) <= most
        checks.require(ok, "inputs.shape", shape, f"at most {most} positions (pixels + 1)")
        super()._check_inputs_shape(shape)

    def init_cache(self, batch_size, max_length, dtype=None):
        """As `MultiHeadSelfAttention.init_cache`, but positions first: zeros (B, max_length, H,
        key_dim + value_dim), or (B, block + flange, H, key_dim + value_dim) with `rolling_cache`.

        Raises:
            ValueError: 2D without `image_size`; sizes not positive or above the pixels plus one.
        """
        self._check_cache_supported(True)
        if self.image_size:
            most = self._max_positions
            ok = (checks.static_int(max_length) or 0) <= most
            checks.require(ok, "max_length", max_length, f"<= {most} (the pixels + 1)")
        if not self.rolling_cache:
            return super().init_cache(batch_size, max_length, dtype)
        self._check_cache_sizes(batch_size, max_length)
        return super().init_cache(batch_size, self._rolling_length, dtype)

    def _check_cache_supported(self, use_causal_mask):
        if not use_causal_mask or (len(self._block) != 1 and self.image_size is None):
            raise ValueError(
                f"{type(self).__name__} has a `cache` only with use_causal_mask=True, and in 2D "
                f"only with `image_size`. Received: use_causal_mask={use_causal_mask}, "
                f"block_size={self.block_size!r}, image_size={self.image_size}."
            )

    def _check_cache(self, cache, cache_index, inputs, use_causal_mask, padding_mask):
        self._check_cache_supported(use_causal_mask)
        super()._check_cache(cache, cache_index, inputs, use_causal_mask, padding_mask)
        positions, rolling = cache.shape[1], self.rolling_cache
        most = self._rolling_length if rolling else self.image_size and self._max_positions
        if positions and most and (positions > most or rolling and positions < most):
            raise ValueError(
                f"`cache` must have {'exactly' if rolling else 'at most'} {most} positions, as "
                f"`init_cache` makes. Received: cache.shape={tuple(cache.shape)}."
            )

    def _attend(self, query, key, value, masks, spatial_shape, return_attention_scores, training):
        """The core of each mode: block-raster, 1D cached, or blocks (uncached)."""
        if self.image_size is not None:
            return self._attend_block_raster(
                query, key, value, masks, return_attention_scores, training
            )
        if masks.cached:
            return self._attend_cached(query, key, value, masks, return_attention_scores, training)
        return self._attend_blocks(
            query, key, value, masks, spatial_shape, return_attention_scores, training
        )
