import math

import keras
from keras import ops

from keras_attn import checks
from keras_attn.layers import attention_ops
from keras_attn.layers.attention_base import AttentionBase, bound_call_arguments, call_results
from keras_attn.layers.attention_masks import AttentionMasks
from keras_attn.layers.attention_ops import dim
from keras_attn.layers.chunked_attention import chunked_attention
from keras_attn.layers.position_writes import write_positions


@keras.saving.register_keras_serializable(package="keras_attn")
class MultiHeadSelfAttention(AttentionBase):
    """Multi-head self-attention with a fused QKV projection and a KV cache.

    The base of `LocalBlockAttention` and `RelativeGlobalAttention`, which replace only the core.
    Cores, cache and masks: docs/guides/attention_layers.md.

    Args:
        num_heads: H, number of attention heads (positive int).
        key_dim: K, size of each head's query and key (positive int).
        value_dim: V, size of each head's value; defaults to `key_dim`.
        dropout: dropout rate on the attention probabilities, in [0, 1).
        use_bias: whether the projections have biases.
        output_dim: width of the output; defaults to the input width D.
        kernel_initializer, bias_initializer: initializers of the projections.
        seed: int seed of the attention dropout.
        chunk_size: the core: an int C (chunks, memory linear in T), None (dense) or "auto".
        **kwargs: base `keras.layers.Layer` arguments.

    Call arguments:
        inputs: (B, T, D) float tensor.
        padding_mask: (B, S) bool, True = real token (S = `max_length` with a cache).
        attention_mask: (B, T, S) or (B, H, T, S) bool, True = query t may attend to key s.
        use_causal_mask: if True, query t attends only to keys at positions <= its own.
        cache: (B, H, K + V, max_length) from `init_cache`, written at `cache_index`.
        cache_index: int or int32 scalar, position of `inputs[:, 0]` in the cache (default 0).
        return_attention_scores: if True, also return the attention probabilities.
        training: Python bool; enables dropout.

    Returns:
        `outputs` (B, T, output_dim); then, when asked for, `attention_scores` (B, H, T, S), and
        the updated `cache` when a `cache` was passed.

    Raises:
        ValueError: on invalid constructor arguments, inputs, masks, cache or `cache_index`.

    Example:
    >>> import keras
    >>> from keras_attn.layers import MultiHeadSelfAttention
    >>> layer = MultiHeadSelfAttention(num_heads=2, key_dim=8)
    >>> x = keras.random.normal((2, 5, 16))
    >>> tuple(layer(x, use_causal_mask=True).shape)
    (2, 5, 16)

    Reference:
        Vaswani et al. 2017, "Attention Is All You Need", sections 3.2.1-3.2.3.
    """

    # chunk_size="auto": the key length from which the chunked core runs, its chunk size, and
    # the key length from which causal calls run on query blocks (benchmarks/README.md).
    _auto_chunk_min_length = 2048
    _auto_chunk_size = 256
    _auto_query_block_min_length = 512

    # Whether the dense core may run the backend's fused kernel (relative logits do not fit it).
    _fused_core_fits = True

    def __init__(self, num_heads, key_dim, chunk_size="auto", **kwargs):
        super().__init__(num_heads=num_heads, key_dim=key_dim, **kwargs)
        ok = chunk_size in (None, "auto") or (type(chunk_size) is int and chunk_size >= 1)
        checks.require(ok, "chunk_size", chunk_size, 'an int >= 1, None or "auto"', owner=self)
        self.chunk_size = chunk_size
        self.input_spec = keras.layers.InputSpec(ndim=3)

    def build(self, inputs_shape):
        inputs_shape = tuple(inputs_shape)
        self._check_inputs_shape(inputs_shape)
        feature_dim = inputs_shape[-1]
        # Keras refuses inputs of another rank or width from now on.
        self.input_spec = keras.layers.InputSpec(ndim=self.input_spec.ndim, axes={-1: feature_dim})
        heads_width = self.num_heads * (2 * self.key_dim + self._value_dim)
        self.query_key_value_dense = self._make_dense(heads_width, "query_key_value", inputs_shape)
        heads_shape = inputs_shape[:-1] + (self.num_heads * self._value_dim,)
        output_dim = self.output_dim or feature_dim
        self.output_dense = self._make_dense(output_dim, "attention_output", heads_shape)
        self.dropout_layer = self._make_dropout()
        self._build_attention_core(inputs_shape)
        self.built = True

    def _build_attention_core(self, inputs_shape):
        """Hook, called at the end of `build`, for subclasses that own weights of their own."""

    def _check_inputs_shape(self, shape):
        """Its rank is the `input_spec`'s."""
        known = shape[-1:] if len(shape) == 3 else shape[1:]
        ok = None not in known and 0 not in shape[:-1]
        checks.require(ok, "inputs.shape", shape, "non-empty, with known features and sides")

    # ------------------------------------------------------------------ cache
    def init_cache(self, batch_size, max_length, dtype=None):
        """An empty key/value cache for token-by-token decoding.

        Args:
            batch_size: B, a positive int (or int scalar tensor).
            max_length: the number of positions the cache holds.
            dtype: the layer's compute dtype (the default).

        Returns:
            Zeros (B, H, key_dim + value_dim, max_length): the keys of head h in
            `cache[:, h, :key_dim]`, its values in `cache[:, h, key_dim:]`.

        Raises:
            ValueError: if a size is not positive or `dtype` is not the compute dtype.

        Example:
        >>> from keras_attn.layers import MultiHeadSelfAttention
        >>> tuple(MultiHeadSelfAttention(2, 8).init_cache(batch_size=3, max_length=5).shape)
        (3, 2, 16, 5)
        """
        self._check_cache_sizes(batch_size, max_length)
        dtype = keras.backend.standardize_dtype(dtype or self.compute_dtype)
        want = self.compute_dtype
        checks.require(dtype == want, "dtype", dtype, f"the layer's compute dtype {want}")
        return ops.zeros(self._cache_shape(batch_size, max_length), dtype=dtype)

    def _cache_shape(self, batch_size, max_length):
        """The shape of a cache (ints, or names for an error message)."""
        return (batch_size, self.num_heads, self.key_dim + self._value_dim, max_length)

    # The cache's axis of positions: (B, H, K + V, L).
    _cache_length_axis = 3

    @staticmethod
    def _check_cache_sizes(batch_size, max_length):
        """Sizes are ints (or int tensors), known ones positive."""
        for arg, value in (("batch_size", batch_size), ("max_length", max_length)):
            known = checks.static_int(value)
            ok = "int" in str(getattr(value, "dtype", "")) if known is None else known > 0
            ok = ok and not isinstance(value, bool)
            checks.require(ok, arg, value, "a positive int (or int scalar tensor)")

    # ------------------------------------------------------------------- call
    def call(
        self,
        inputs,
        padding_mask=None,
        attention_mask=None,
        use_causal_mask=False,
        cache=None,
        cache_index=None,
        return_attention_scores=False,
        training=None,
    ):
        padding_mask, attention_mask = self._masks(
            inputs, padding_mask, attention_mask, use_causal_mask, cache, cache_index
        )
        # Reshapes infer the batch (-1) and keep the other sizes static where known: constant
        # shapes, not Shape -> StridedSlice chains for a served step to run.
        spatial_shape = tuple(inputs.shape[1:-1])
        if len(spatial_shape) > 1:
            inputs = ops.reshape(inputs, (-1, math.prod(spatial_shape), inputs.shape[-1]))
        query_length = dim(inputs, 1)
        if cache is not None:
            cache_index = ops.cast(0 if cache_index is None else cache_index, "int32")
        query, key, value, cache = self._project_query_key_value(inputs, cache, cache_index)
        masks = AttentionMasks(
            padding_mask=padding_mask,
            attention_mask=attention_mask,
            use_causal_mask=use_causal_mask,
            cache_index=0 if cache is None else cache_index,
            valid_key_length=None if cache is None else cache_index + query_length,
        )
        outputs, scores = self._attend(
            query, key, value, masks, spatial_shape, return_attention_scores, training
        )
        outputs = ops.reshape(outputs, (-1, query_length, self.num_heads * self._value_dim))
        outputs = self.output_dense(outputs)
        if len(spatial_shape) > 1:
            outputs = ops.reshape(outputs, (-1,) + spatial_shape + (outputs.shape[-1],))
        scores = ops.cast(scores, self.compute_dtype) if return_attention_scores else None
        return call_results(outputs, scores, cache)

    def _check_cache(self, cache, cache_index, inputs, use_causal_mask, padding_mask):
        """A cache laid out as `init_cache` makes it, and a `cache_index` the inputs fit after."""
        batch, length = tuple(inputs.shape)[:2]
        checks.check_cache(
            cache,
            self._cache_shape(batch or "batch", "max_length"),
            f"as returned by `init_cache(batch_size={batch or 'B'}, max_length)`",
        )
        checks.check_index(0 if cache_index is None else cache_index, "cache_index")
        index = checks.static_int(cache_index) or 0  # unknown while traced: 0, the least
        checks.require(index >= 0, "cache_index", index, ">= 0")
        # The positions the cache holds, or (a rolling cache) its padding mask covers.
        mask_shape = tuple(getattr(padding_mask, "shape", ()))
        capacity = self._cache_capacity(cache) or (mask_shape[1] if len(mask_shape) == 2 else None)
        if None not in (length, capacity) and index + length > capacity:
            raise ValueError(
                "`cache_index` + input length must fit in the cache (or a rolling cache's "
                "`padding_mask`). Received: "
                f"cache_index={index}, input length {length}, cache length {capacity}. Pass a "
                f"longer one (`init_cache(batch_size, {index + length})`)."
            )

    def _masks(self, inputs, padding_mask, attention_mask, use_causal_mask, cache, cache_index):
        """The static checks of a call (run-time values are checked where they enter); returns
        its padding (B, S) and attention masks as booleans."""
        shape = tuple(inputs.shape)
        self._check_inputs_shape(shape)
        if cache is None:
            checks.require(cache_index is None, "cache_index", cache_index, "None without a cache")
        else:
            self._check_cache(cache, cache_index, inputs, use_causal_mask, padding_mask)
        queries = None if None in shape[1:-1] else math.prod(shape[1:-1])
        keys = queries if cache is None else self._cache_capacity(cache)
        if padding_mask is None and cache is None:
            padding_mask = attention_ops.get_implicit_mask(inputs)
        padding_shape = shape[:-1] if cache is None else (shape[0], keys)
        padding_mask = attention_ops.check_mask(
            padding_mask, "padding_mask", (len(padding_shape),), padding_shape
        )
        if padding_mask is not None and len(padding_shape) > 2:
            padding_mask = ops.reshape(padding_mask, (ops.shape(inputs)[0], -1))
        attention_mask = attention_ops.check_mask(
            attention_mask, "attention_mask", (3, 4), (queries, keys), shape[0], self.num_heads
        )
        return padding_mask, attention_mask

    def _project_query_key_value(self, inputs, cache, cache_index):
        """Per-head (query, key, value, cache); with a cache, keys/values of the updated one."""
        # One matmul for all projections, laid out per head as [q | k | v]
        # so that [k | v] is already in the cache's layout.
        qkv = ops.reshape(
            self.query_key_value_dense(inputs),
            (-1, dim(inputs, 1), self.num_heads, 2 * self.key_dim + self._value_dim),
        )
        if cache is None:
            # `split`, not three slices: its gradient is one concatenation, not three
            # zero-padded copies of the whole tensor.
            query, key, value = ops.split(qkv, [self.key_dim, 2 * self.key_dim], axis=-1)
            return query, key, value, None
        # Slices: TensorFlow's `split` builds its sizes from the shape in ~20 graph nodes.
        query, key_value = qkv[..., : self.key_dim], qkv[..., self.key_dim :]
        attended, cache = self._write_cache(cache, ops.cast(key_value, cache.dtype), cache_index)
        key, value = self._cached_keys_values(attended, query.dtype)
        return query, key, value, cache

    def _write_cache(self, cache, key_value, cache_index):
        """Writes [k | v] (B, T, H, K + V) at `cache_index`: (what the core reads, new cache)."""
        key_value = ops.transpose(key_value, (0, 2, 3, 1))  # (B, H, K + V, T)
        cache = write_positions(cache, key_value, cache_index, axis=3)
        return cache, cache

    def _cache_capacity(self, cache):
        """The positions a cache can hold (None: unbounded or unknown)."""
        return cache.shape[self._cache_length_axis]

    def _attend(self, query, key, value, masks, spatial_shape, return_attention_scores, training):
        """The core subclasses replace: (outputs (B, T, H, V), probabilities (B, H, T, S) or None).

        `key`, `value` are (B, S, H, K), (B, S, H, V), or with a cache (B, H, K, S), (B, H, V, S).
        """
        core, size = self._attention_core(key, masks, return_attention_scores, training)
        if core == "chunked":
            return self._attend_chunked(query, key, value, masks, size), None
        if core == "by_length":
            # The key length is known only at run time (a function traced
            # for any length): the chunked core from the crossover, so an
            # unknown length never means a (B, H, T, S) buffer.
            long_enough = ops.greater_equal(
                self._key_length(key, masks), self._auto_chunk_min_length
            )
            outputs = ops.cond(
                long_enough,
                lambda: self._attend_chunked(query, key, value, masks, size),
                lambda: self._attend_dense(query, key, value, masks, training)[0],
            )
            return outputs, None
        if core == "query_blocks":
            return self._attend_query_blocks(query, key, value, masks, size, training), None
        return self._attend_dense(query, key, value, masks, training, return_attention_scores)

    def _attend_dense(self, query, key, value, masks, training, return_probabilities=False):
        """The dense core: (outputs, probabilities (B, H, T, S) or None)."""
        key_length = self._key_length(key, masks)
        mask = masks.merged(dim(query, 1), key_length)
        return attention_ops.scaled_dot_product_attention(
            query,
            key,
            value,
            mask,
            dropout_layer=self.dropout_layer,
            training=training,
            may_have_empty_rows=masks.may_have_empty_rows,
            extra_logits=self._extra_logits(query, key_length, masks),
            cache_layout=masks.cached,
            return_probabilities=return_probabilities,
        )

    def _extra_logits(self, query, key_length, masks):
        """(B, H, T, S) logits the dense core adds to Q·Kᵀ (None here)."""
        return None

    def _attend_chunked(self, query, key, value, masks, chunk_size):
        """The chunked core (`chunked_attention`): (B, T, H, V) outputs."""
        return chunked_attention(query, key, value, masks, chunk_size)

    def _attend_query_blocks(self, query, key, value, masks, block_size, training):
        """The dense core on causal query blocks, each against the keys it can see (guide)."""
        length = query.shape[1]
        outputs = []
        for start in range(0, length, block_size):
            stop = min(length, start + block_size)
            block, _ = self._attend_dense(
                query[:, start:stop],
                key[:, :stop],
                value[:, :stop],
                masks.query_rows(start, stop),
                training,
            )
            outputs.append(block)
        return ops.concatenate(outputs, axis=1)

    @staticmethod
    def _key_length(key, masks):
        """S, of keys (B, S, H, K), or with a cache (B, H, K, S)."""
        return dim(key, -1) if masks.cached else dim(key, 1)

    def _attention_core(self, key, masks, return_attention_scores, training):
        """(core name, chunk size) of this call (guide: attention_layers.md, `chunk_size`)."""
        dropout_active = training and self.dropout_layer is not None
        if self.chunk_size is None or masks.cached or return_attention_scores:
            return "dense", None
        if self.chunk_size != "auto":
            return ("dense", None) if dropout_active else ("chunked", self.chunk_size)
        if self._fused_core_fits and attention_ops.fused_op_is_memory_linear():
            return "dense", None  # the backend's fused kernels, at any length
        key_length = key.shape[1]
        if key_length is None:
            return ("dense", None) if dropout_active else ("by_length", self._auto_chunk_size)
        chunkable = key_length >= self._auto_chunk_min_length and not dropout_active
        if chunkable and training is not False:
            return "chunked", self._auto_chunk_size
        if (
            masks.use_causal_mask
            and key_length >= self._auto_query_block_min_length
            and checks.static_int(masks.cache_index) == 0
        ):
            return "query_blocks", self._auto_chunk_size
        if chunkable:
            return "chunked", self._auto_chunk_size
        return "dense", None

    # ------------------------------------------------------- shapes and masks
    def compute_output_shape(self, inputs_shape):
        return tuple(inputs_shape[:-1]) + (self.output_dim or inputs_shape[-1],)

    def compute_output_spec(self, *args, **kwargs):
        call = bound_call_arguments(self, args, kwargs)
        inputs, cache = call["inputs"], call["cache"]
        self._masks(
            inputs,
            padding_mask=call["padding_mask"],
            attention_mask=call["attention_mask"],
            use_causal_mask=call["use_causal_mask"],
            cache=cache,
            cache_index=call["cache_index"],
        )
        shape = tuple(inputs.shape)
        outputs = keras.KerasTensor(self.compute_output_shape(shape), self.compute_dtype)
        scores = None
        if call["return_attention_scores"]:
            length = None if None in shape[1:-1] else math.prod(shape[1:-1])
            key_length = length if cache is None else cache.shape[self._cache_length_axis]
            scores_shape = (shape[0], self.num_heads, length, key_length)
            scores = keras.KerasTensor(scores_shape, self.compute_dtype)
        if cache is not None:
            cache = keras.KerasTensor(cache.shape, cache.dtype)
        return call_results(outputs, scores, cache)
