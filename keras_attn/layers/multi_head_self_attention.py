import math

import keras
from keras import ops

from keras_attn import checks
from keras_attn.layers import attention_ops
from keras_attn.layers.attention_base import AttentionBase, bound_call_arguments
from keras_attn.layers.attention_masks import AttentionMasks
from keras_attn.layers.chunked_attention import chunked_attention


@keras.saving.register_keras_serializable(package="keras_attn")
class MultiHeadSelfAttention(AttentionBase):
    """Multi-head self-attention with a fused QKV projection and a KV cache.

    Each position of `inputs` is projected once into a query, a key and a
    value per head (one matmul of width `num_heads * (2 * key_dim +
    value_dim)`); every head computes softmax(Q·Kᵀ/√key_dim)·V over the whole
    sequence; the heads are concatenated and projected back to `output_dim`.

    Use it wherever a sequence attends to itself: Transformer encoders
    (non-causal), decoders and language models (`use_causal_mask=True`,
    with the cache for fast generation). It is also the base of
    `LocalBlockAttention` and `RelativeGlobalAttention`, which share its
    constructor arguments, call contract and cache, and replace only the
    attention core.

    Masks are boolean with `True` = may attend (padding masks: `True` = real
    token). Masking is done with `where` on float32 logits, so a query with
    no visible key gets an all-zero output and finite gradients, in float32,
    mixed_float16 and mixed_bfloat16 alike.

    Args:
        num_heads: H, number of attention heads (positive int).
        key_dim: K, size of each head's query and key (positive int).
        value_dim: V, size of each head's value; defaults to `key_dim`.
        dropout: dropout rate on the attention probabilities, in [0, 1).
        use_bias: whether the projections have biases.
        output_dim: width of the output; defaults to the input width D.
        kernel_initializer: initializer of the projection kernels.
        bias_initializer: initializer of the projection biases.
        seed: int seed of the attention dropout, for reproducible runs.
        chunk_size: which attention core runs. An int C >= 1: compute
            attention over chunks of C queries and C keys with an online
            softmax and a gradient that recomputes each chunk
            (`keras_attn.layers.chunked_attention`), so no (B, H, T, S)
            buffer is made and training memory grows linearly in T; the
            results equal the dense core's to float tolerance. None: always
            the dense core. "auto" (default), from the key length S when it
            is known when the call is traced: causal calls from S = 512
            run the dense core on blocks of 256 queries, each against only
            the keys it can see (half the work of one dense call, equal
            results), except in training (`training` not False) from
            S = 2048, where chunks of 256 keep memory linear in S; other
            calls run chunks of 256 from S = 2048; the dense core below.
            When S is unknown at tracing (`fit` retraced after batches of
            two lengths, `model.export()`, a None-length signature), the
            choice is made at run time: chunks of 256 from S = 2048, the
            dense core below (`ops.cond`), so memory stays linear in S.
            Measured on a 2-core CPU at S = 2048: the chunked core takes
            0.84x the dense fwd+bwd time
            (`benchmarks/long_sequence_benchmark.py --crossover`); on the
            query blocks the forward takes 0.63-0.80x the time of keras'
            `MultiHeadAttention` with its causal mask (0.86-0.96x for
            `RelativeGlobalAttention`;
            `benchmarks/relative_global_attention_benchmark.py`). Whatever the
            choice, the dense core runs for decoding with a cache and with
            `return_attention_scores=True`; the chunked core has no dropout,
            so while dropout is active the query blocks (causal, S known)
            or the dense core run instead. The query blocks draw their dropout
            masks block by block: the same rate and distribution as the
            dense core, but for a given `seed` not the same masks. `LocalBlockAttention` takes only None or
            "auto" (already linear in T).
        **kwargs: base `keras.layers.Layer` arguments (`name`, `dtype`, ...).

    Call arguments:
        inputs: (B, T, D) float tensor.
        padding_mask: (B, S) bool, `True` = real token, applied to the keys.
            Without a cache S = T; with a cache S is the cache length
            (`max_length`), i.e. the padding of the whole cached sequence.
            For image inputs (B, height, width, D) of subclasses, the mask
            is (B, height, width).
            Defaults to the Keras implicit mask of `inputs` (e.g. from an
            `Embedding(mask_zero=True)`) when no cache is used.
        attention_mask: (B, T, S) or (B, H, T, S) bool, `True` = query t may
            attend to key s. Combined with the other masks by logical AND.
        use_causal_mask: if True, query t (at absolute position
            `cache_index + t`) attends only to keys at positions <= its own.
        cache: (B, H, K + V, max_length) tensor from `init_cache`; the
            keys/values of `inputs` are written at `cache_index`, and
            attention runs over the cache. Slots not written yet are masked.
            Gradients flow through a cached call on JAX (equal to the full
            pass's); on TensorFlow they do not: the cache is written with
            `keras.ops.slice_update`, TensorFlow's `XlaDynamicUpdateSlice`,
            which has no registered gradient (`LookupError` from the tape;
            keras-hub's cached attention shares it). Train without a cache.
        cache_index: int or int32 scalar tensor, absolute position of
            `inputs[:, 0]` in the cache. Defaults to 0; only with a `cache`.
        return_attention_scores: if True, also return the attention
            probabilities.
        training: Python bool; enables dropout.

    Returns:
        `outputs` (B, T, output_dim); then, in this order and only when asked
        for: `attention_scores` (B, H, T, S) (the probabilities, before
        dropout; exactly zero where masked), and the updated `cache`
        (B, H, K + V, max_length) when a `cache` was passed.

    Raises:
        ValueError: on invalid constructor arguments, inputs, masks, cache
            or `cache_index` (static checks, when the call is traced). Values
            known only at run time are checked where they enter (generation
            functions, exporters): a direct traced call must keep
            `cache_index` in `[0, max_length - T]`.

    Example:
    >>> import keras
    >>> from keras_attn.layers import MultiHeadSelfAttention
    >>> layer = MultiHeadSelfAttention(num_heads=2, key_dim=8)
    >>> x = keras.random.normal((2, 5, 16))
    >>> tuple(layer(x, use_causal_mask=True).shape)
    (2, 5, 16)
    >>> cache = layer.init_cache(batch_size=2, max_length=5)
    >>> y, cache = layer(x[:, :1], cache=cache, cache_index=0, use_causal_mask=True)

    Reference:
        Vaswani et al. 2017, "Attention Is All You Need", sections 3.2.1-3.2.3.
    """

    # Input rank(s) accepted by `call` and their layout, for the messages;
    # subclasses with 2D inputs change them.
    _input_ranks = (3,)
    _inputs_layout = "(batch, length, features)"
    # chunk_size="auto": the key length from which the chunked core runs, and
    # its chunk size (measured: `long_sequence_benchmark.py --crossover`).
    _auto_chunk_min_length = 2048
    _auto_chunk_size = 256
    # chunk_size="auto", causal calls: the key length from which the dense
    # core runs on blocks of `_auto_chunk_size` queries, each against only
    # the keys it can see. Measured on 2 cores (keras MHA = 1): at T = 512
    # the forward takes 0.89x (MHSA) and 1.06x (relative) on blocks, 0.96x
    # and 1.19x dense; forward + backward are at parity (1.03 / 1.18 vs
    # 1.00 / 1.19); from T = 1024 blocks win both (benchmarks/README.md).
    _auto_query_block_min_length = 512

    def __init__(self, num_heads, key_dim, chunk_size="auto", **kwargs):
        super().__init__(num_heads=num_heads, key_dim=key_dim, **kwargs)
        ok = chunk_size in (None, "auto") or (type(chunk_size) is int and chunk_size >= 1)
        checks.require(
            ok,
            "chunk_size",
            chunk_size,
            'an int >= 1, None or "auto"',
            "(A NumPy integer: int(chunk_size).)",
        )
        self.chunk_size = chunk_size

    def build(self, inputs_shape):
        inputs_shape = tuple(inputs_shape)
        self._check_inputs_shape(inputs_shape)
        feature_dim = inputs_shape[-1]
        # Keras refuses inputs of another width from now on.
        self.input_spec = keras.layers.InputSpec(axes={-1: feature_dim})
        heads_width = self.num_heads * (2 * self.key_dim + self._value_dim)
        self.query_key_value_dense = self._make_dense(heads_width, "query_key_value")
        self.query_key_value_dense.build(inputs_shape)
        self.output_dense = self._make_dense(self.output_dim or feature_dim, "attention_output")
        self.output_dense.build(inputs_shape[:-1] + (self.num_heads * self._value_dim,))
        self.dropout_layer = self._make_dropout()
        self._build_attention_core(inputs_shape)
        self.built = True

    def _build_attention_core(self, inputs_shape):
        """Hook for subclasses that own weights of their own (e.g. relative
        position embeddings). Called at the end of `build`."""

    def _check_inputs_shape(self, shape):
        if (
            len(shape) not in self._input_ranks
            or shape[-1] is None
            or 0 in shape[:-1]
            or (len(shape) > 3 and None in shape[1:-1])
        ):
            raise ValueError(
                f"{type(self).__name__} expects inputs of shape {self._inputs_layout}, none empty, "
                f"features (and an image's sides) known. Received inputs of shape {shape}."
            )

    # ------------------------------------------------------------------ cache
    def init_cache(self, batch_size, max_length, dtype=None):
        """Returns an empty key/value cache for token-by-token decoding.

        Args:
            batch_size: B.
            max_length: the number of positions the cache can hold.
            dtype: dtype of the cache; defaults to the layer's compute dtype.

        Returns:
            Zeros of shape (B, H, key_dim + value_dim, max_length): heads
            first and positions last, the keys of head h in
            `cache[:, h, :key_dim]` and its values in `cache[:, h, key_dim:]`,
            position i in `cache[..., i]`. In this layout a decoding step
            reads each head's keys and values as contiguous (K, S) and
            (V, S) matrices, in place: a matrix-vector product per head.

        Raises:
            ValueError: if `batch_size` or `max_length` is not a positive
                int (or int tensor), or `dtype` is not the layer's compute
                dtype (Keras casts floating call arguments to it, so a cache
                of another dtype would come back in the compute dtype).
        """
        self._check_cache_sizes(batch_size, max_length)
        dtype = keras.backend.standardize_dtype(dtype or self.compute_dtype)
        checks.require(
            dtype == self.compute_dtype,
            "dtype",
            dtype,
            f"the layer's compute dtype {self.compute_dtype}",
            "For float16, make the layer with dtype='mixed_float16'.",
        )
        return ops.zeros(self._cache_shape(batch_size, max_length), dtype=dtype)

    def _cache_shape(self, batch_size, max_length):
        """The shape of a cache of `max_length` positions for `batch_size`
        sequences (the two are placed as given: ints, or names in the
        shape an error message shows)."""
        return (batch_size, self.num_heads, self.key_dim + self._value_dim, max_length)

    # The cache's axis of positions: (B, H, K + V, L).
    _cache_length_axis = 3

    def _cache_length(self, cache):
        """The number of positions (slots) a cache has (None while traced
        with an unknown length)."""
        return cache.shape[self._cache_length_axis]

    @staticmethod
    def _check_cache_sizes(batch_size, max_length):
        """Sizes are ints (or int tensors), known ones positive."""
        for arg, value in (("batch_size", batch_size), ("max_length", max_length)):
            known = checks.static_int(value)
            ok = "int" in str(getattr(value, "dtype", "")) if known is None else known > 0
            checks.require(
                ok and not isinstance(value, bool),
                arg,
                value,
                "a positive int (or int scalar tensor)",
            )

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
        self._check_call(inputs, padding_mask, cache, cache_index, use_causal_mask)
        padding_mask, attention_mask = self._masks(inputs, padding_mask, attention_mask, cache)
        spatial_shape, batch_size = tuple(inputs.shape[1:-1]), ops.shape(inputs)[0]
        if len(spatial_shape) > 1:
            inputs = ops.reshape(inputs, (batch_size, -1, inputs.shape[-1]))
        query_length = ops.shape(inputs)[1]
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
        outputs = ops.reshape(outputs, (batch_size, query_length, self.num_heads * self._value_dim))
        outputs = self.output_dense(outputs)
        if len(spatial_shape) > 1:
            outputs = ops.reshape(outputs, (batch_size,) + spatial_shape + (outputs.shape[-1],))

        results = (outputs,)
        if return_attention_scores:
            results += (ops.cast(scores, self.compute_dtype),)
        if cache is not None:
            results += (cache,)
        return results[0] if len(results) == 1 else results

    def _check_call(self, inputs, padding_mask, cache, cache_index, use_causal_mask):
        """The static checks of a call (its inputs' shape, a cache and its
        index); sizes known only at run time are checked where they enter
        (the generation functions, the exporters)."""
        self._check_inputs_shape(tuple(inputs.shape))
        if cache is None:
            checks.require(
                cache_index is None,
                "cache_index",
                cache_index,
                "None without a `cache` (it is the inputs' position in the cache)",
                "Pass a cache, or drop `cache_index`.",
            )
        else:
            self._check_cache(cache, cache_index, inputs, use_causal_mask, padding_mask)

    def _check_cache(self, cache, cache_index, inputs, use_causal_mask, padding_mask):
        """A cache of the `init_cache` layout for the inputs' batch, and an
        integer `cache_index` from which the inputs fit in it (subclasses may
        refuse a cache for the call, e.g. without `use_causal_mask`)."""
        batch, length = tuple(inputs.shape)[:2]
        checks.check_cache(
            cache,
            self._cache_shape(batch or "batch", "max_length"),
            f"as returned by `init_cache(batch_size={batch or 'B'}, max_length)`",
        )
        checks.check_index(0 if cache_index is None else cache_index, "cache_index")
        index = checks.static_int(cache_index) or 0  # unknown while traced: 0, the least
        checks.require(index >= 0, "cache_index", index, ">= 0 (the position of the first input)")
        # The positions the cache holds, or (a rolling cache) its padding mask covers.
        mask_shape = tuple(getattr(padding_mask, "shape", ()))
        capacity = self._cache_capacity(cache) or (mask_shape[1] if len(mask_shape) == 2 else None)
        if None not in (length, capacity) and index + length > capacity:
            raise ValueError(
                "`cache_index` + input length must fit in the cache (a rolling cache: in "
                f"`padding_mask`). Received: cache_index={index}, input length {length}, cache "
                f"length {capacity}. Pass a longer one (`init_cache(batch_size, "
                f"{index + length})`)."
            )

    def _masks(self, inputs, padding_mask, attention_mask, cache):
        """The call's masks as booleans, checked (`attention_ops.check_mask`):
        the padding mask (default: the implicit one, without a cache) over
        the keys, (B, S), an image's (B, height, width) flattened."""
        shape = tuple(inputs.shape)
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
        batch_size, query_length = ops.shape(inputs)[0], ops.shape(inputs)[1]
        qkv = ops.reshape(
            self.query_key_value_dense(inputs),
            (batch_size, query_length, self.num_heads, 2 * self.key_dim + self._value_dim),
        )
        if cache is None:
            # `split`, not three slices: the gradient of a split is one
            # concatenation, while each slice's gradient is a zero-padded
            # copy of the whole (B, T, H, 2K + V) tensor, summed after
            # (measured 1.2-1.3x slower fwd+bwd without XLA at T = 256-512).
            query, key, value = ops.split(qkv, [self.key_dim, 2 * self.key_dim], axis=-1)
            return query, key, value, None
        query, key_value = ops.split(qkv, [self.key_dim], axis=-1)
        attended, cache = self._write_cache(cache, ops.cast(key_value, cache.dtype), cache_index)
        key, value = self._cached_keys_values(attended, query.dtype)
        return query, key, value, cache

    def _write_cache(self, cache, key_value, cache_index):
        """Writes the new positions' [k | v] (B, T, H, K + V) into the cache;
        returns (what the attention core reads, the updated cache): here
        both are the cache with the new columns at `cache_index`."""
        key_value = ops.transpose(key_value, (0, 2, 3, 1))  # (B, H, K + V, T)
        cache = ops.slice_update(cache, (0, 0, 0, cache_index), key_value)
        return cache, cache

    def _cache_capacity(self, cache):
        """The positions a cache can hold (its length; None = unbounded or
        unknown while tracing)."""
        return self._cache_length(cache)

    def _attend(self, query, key, value, masks, spatial_shape, return_attention_scores, training):
        """The attention core: what subclasses replace.

        Args:
            query: (B, T, H, K) projected queries (the input flattened to a
                sequence when it had spatial dimensions).
            key: (B, S, H, K); value: (B, S, H, V). With a cache, what
                `_cached_keys_values` returns: for this layer, keys (B, H, K,
                S) and values (B, H, V, S) in the cache's layout, S the
                cache length.
            masks: the call's `AttentionMasks` (padding, attention and
                causal masks, cache index, filled cache length).
            spatial_shape: the input's dimensions between batch and
                features: (T,) or (height, width).
            return_attention_scores: whether probabilities are needed.
            training: dropout switch.

        Returns:
            `(outputs, probabilities)`: (B, T, H, V) and (B, H, T, S) float32
            (may be None when not requested).
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
                lambda: ops.cast(
                    self._attend_dense(query, key, value, masks, training)[0], value.dtype
                ),
            )
            return outputs, None
        if core == "query_blocks":
            return self._attend_query_blocks(query, key, value, masks, size, training), None
        return self._attend_dense(query, key, value, masks, training)

    def _attend_dense(self, query, key, value, masks, training):
        """The dense core: (outputs, probabilities (B, H, T, S))."""
        key_length = self._key_length(key, masks)
        mask = masks.merged(ops.shape(query)[0], ops.shape(query)[1], key_length)
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
        )

    def _extra_logits(self, query, key_length, masks):
        """(B, H, T, S) logits the dense core adds to Q·Kᵀ (None here;
        `RelativeGlobalAttention` adds its relative-position logits)."""
        return None

    def _attend_chunked(self, query, key, value, masks, chunk_size):
        """The chunked core (`chunked_attention`): (B, T, H, V) outputs."""
        return chunked_attention(query, key, value, masks, chunk_size)

    def _attend_query_blocks(self, query, key, value, masks, block_size, training):
        """The dense core run on blocks of `block_size` queries of an
        uncached causal call, block [start, stop) against keys 0 .. stop - 1,
        the only ones it can see: about half the products, logits and
        softmax of one dense call (the blocks above the diagonal are never
        made), and equal outputs. Needs a static sequence length (the blocks
        are unrolled). (B, T, H, V) outputs."""
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
        return ops.shape(key)[-1] if masks.cached else ops.shape(key)[1]

    def _attention_core(self, key, masks, return_attention_scores, training):
        """The core this call runs, and its chunk or block size (see
        `chunk_size`): ("dense", None), ("chunked", C) or ("query_blocks",
        C), or ("by_length", C): chunked or dense chosen at run time. The
        dense core always with a cache or scores asked for. With "auto",
        from the static key length S: causal calls from S = 512 on query
        blocks, except in training from S = 2048 (where the chunked core
        keeps memory linear in S); other calls chunked from S = 2048. S
        unknown when traced (`fit` retraced for varying lengths, an export,
        a None-length signature): "by_length", chunked from S = 2048 at run
        time. The chunked core has no dropout: the dense core (or query
        blocks) runs instead while dropout is active."""
        dropout_active = training and self.dropout_layer is not None
        if self.chunk_size is None or masks.cached or return_attention_scores:
            return "dense", None
        if self.chunk_size != "auto":
            return ("dense", None) if dropout_active else ("chunked", self.chunk_size)
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
        arguments = bound_call_arguments(self, args, kwargs)
        inputs, cache = arguments["inputs"], arguments["cache"]
        return_attention_scores = arguments["return_attention_scores"]
        shape = tuple(inputs.shape)
        padding_mask = arguments["padding_mask"]
        self._check_call(
            inputs, padding_mask, cache, arguments["cache_index"], arguments["use_causal_mask"]
        )
        self._masks(inputs, padding_mask, arguments["attention_mask"], cache)
        outputs = keras.KerasTensor(self.compute_output_shape(shape), self.compute_dtype)
        results = (outputs,)
        if return_attention_scores:
            length = None if None in shape[1:-1] else math.prod(shape[1:-1])
            key_length = self._cache_length(cache) if cache is not None else length
            results += (
                keras.KerasTensor(
                    (shape[0], self.num_heads, length, key_length), self.compute_dtype
                ),
            )
        if cache is not None:
            results += (keras.KerasTensor(cache.shape, cache.dtype),)
        return results[0] if len(results) == 1 else results

    def compute_mask(self, inputs, previous_mask=None):
        return previous_mask
