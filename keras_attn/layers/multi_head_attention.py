import keras
from keras import ops

from keras_attn import checks
from keras_attn.layers import attention_ops
from keras_attn.layers.attention_base import AttentionBase, bound_call_arguments


@keras.saving.register_keras_serializable(package="keras_attn")
class MultiHeadAttention(AttentionBase):
    """Multi-head attention of a query sequence over a separate key/value sequence.

    The cross-attention of encoder-decoder Transformers: each query position
    attends to every position of `value` (and `key`, which defaults to
    `value`). For a sequence attending to itself use `MultiHeadSelfAttention`,
    whose fused projection and cache are made for that case.

    The keys and values of a fixed memory (an encoder output) can be
    projected once with `compute_cache` and reused at every decoding step.

    Args:
        num_heads: H, number of attention heads (positive int).
        key_dim: K, size of each head's query and key (positive int).
        value_dim: V, size of each head's value; defaults to `key_dim`.
        dropout: dropout rate on the attention probabilities, in [0, 1).
        use_bias: whether the projections have biases.
        output_dim: width of the output; defaults to the query width D.
        kernel_initializer: initializer of the projection kernels.
        bias_initializer: initializer of the projection biases.
        seed: int seed of the attention dropout.
        **kwargs: base `keras.layers.Layer` arguments.

    Call arguments:
        query: (B, T, D) float tensor.
        value: (B, S, Dv) float tensor; may be None when `cache` is given.
        key: (B, S, Dk) float tensor; defaults to `value`.
        attention_mask: (B, T, S) or (B, H, T, S) bool, True = may attend.
        value_padding_mask: (B, S) bool, True = real key/value position.
            Defaults to the Keras implicit mask of `value`.
        cache: (B, H, K + V, S) keys and values from `compute_cache`; when
            given, `key` and `value` are not projected again.
        return_attention_scores: if True, also return the probabilities.
        training: Python bool; enables dropout.

    Returns:
        `outputs` (B, T, output_dim), and `attention_scores` (B, H, T, S)
        when `return_attention_scores=True`. The query's implicit mask is
        propagated to the outputs.

    Raises:
        ValueError: on invalid constructor arguments; inputs that are not
            rank 3; empty batches or sequences; `query`, `value`, `key` (or
            `cache`) with different batch sizes, or `key` and `value` of
            different lengths; masks that are not boolean/integer or of the
            wrong rank or shape; a cache of the wrong shape; neither
            `value` nor `cache`.

    Example:
    >>> import keras
    >>> from keras_attn.layers import MultiHeadAttention
    >>> layer = MultiHeadAttention(num_heads=2, key_dim=8)
    >>> query, memory = keras.random.normal((2, 4, 16)), keras.random.normal((2, 7, 12))
    >>> tuple(layer(query, memory).shape)
    (2, 4, 16)

    Reference:
        Vaswani et al. 2017, "Attention Is All You Need", sections 3.2.2-3.2.3
        ("encoder-decoder attention").
    """

    def build(self, query_shape, value_shape=None, key_shape=None):
        query_shape = tuple(query_shape)
        self._check_rank("query", query_shape)
        if value_shape is None:
            raise ValueError(
                "MultiHeadAttention needs `value` (the sequence to attend to) "
                "to build its key/value projections. Received no value: call "
                "it once as `layer(query, value)` before using a cache."
            )
        value_shape = tuple(value_shape)
        self._check_rank("value", value_shape)
        key_shape = value_shape if key_shape is None else tuple(key_shape)
        self._check_rank("key", key_shape)
        self._query_dim = query_shape[-1]
        self.query_dense = self._make_dense(self.num_heads * self.key_dim, "query")
        self.query_dense.build(query_shape)
        self.key_dense = self._make_dense(self.num_heads * self.key_dim, "key")
        self.key_dense.build(key_shape)
        self.value_dense = self._make_dense(self.num_heads * self._value_dim, "value")
        self.value_dense.build(value_shape)
        self.output_dense = self._make_dense(self.output_dim or query_shape[-1], "attention_output")
        self.output_dense.build(query_shape[:-1] + (self.num_heads * self._value_dim,))
        self.dropout_layer = self._make_dropout()
        self.built = True

    def _check_rank(self, name, shape):
        if len(shape) != 3 or shape[-1] is None:
            raise ValueError(
                f"MultiHeadAttention expects `{name}` of shape (batch, length, "
                f"features) with known features. Received: {name}.shape={shape}."
            )
        if shape[0] == 0:
            raise ValueError(
                f"MultiHeadAttention received an empty batch ({name}.shape="
                f"{shape}). Pass at least one example."
            )
        if shape[1] == 0:
            raise ValueError(
                f"MultiHeadAttention received an empty sequence ({name}.shape="
                f"{shape}). Pass at least one position."
            )

    @staticmethod
    def _check_same(dimension, axis, named_tensors, hint):
        """Raises unless the sizes of `axis` agree across the named tensors:
        now where known, in the graph (TensorFlow) where one is known only
        at run time. Returns the first tensor, depending on that check."""
        names = " and ".join(n for n, _ in named_tensors)
        sizes = {t.shape[axis] for _, t in named_tensors if t.shape[axis] is not None}
        if len(sizes) > 1:
            shapes = ", ".join(f"{n}.shape={tuple(t.shape)}" for n, t in named_tensors)
            raise ValueError(
                f"MultiHeadAttention needs the same {dimension} for "
                f"{names}. Received: {shapes}. {hint}"
            )
        first = named_tensors[0][1]
        if keras.backend.backend() != "tensorflow" or all(
            t.shape[axis] is not None for _, t in named_tensors
        ):
            return first
        traced = [(n, ops.shape(t)[axis]) for n, t in named_tensors]
        message = []
        for i, (n, size) in enumerate(traced):
            lead = f", {n}" if i else (
                f"MultiHeadAttention needs the same {dimension} for {names}. Received: {n}"
            )
            message += [f"{lead} {dimension} ", size]
        message.append(f". {hint}")
        same = ops.all(ops.stack([ops.equal(traced[0][1], size) for _, size in traced[1:]]))
        return checks.check_in_graph(same, message, first)

    def compute_cache(self, value, key=None):
        """Projects a memory sequence once into keys and values.

        Args:
            value: (B, S, Dv) tensor (e.g. the encoder output).
            key: optional (B, S, Dk) tensor; defaults to `value`.

        Returns:
            (B, H, key_dim + value_dim, S) tensor in the layer's compute
            dtype, heads first and positions last as
            `MultiHeadSelfAttention.init_cache`: the keys of head h in
            `[:, h, :key_dim]`, its values in `[:, h, key_dim:]`.
        """
        if not self.built:
            raise ValueError(
                "MultiHeadAttention.compute_cache needs a built layer. Call "
                "the layer once on (query, value), or `build` it."
            )
        key, value = self._project_memory(value, key)
        return ops.transpose(ops.concatenate([key, value], axis=-1), (0, 2, 3, 1))

    def _project_memory(self, value, key=None):
        """Checked projections of the memory: keys (B, S, H, K), values (B, S, H, V)."""
        key = value if key is None else key
        self._check_rank("value", tuple(value.shape))
        self._check_rank("key", tuple(key.shape))
        for dimension, axis in (("batch size", 0), ("length", 1)):
            key = self._check_same(
                dimension, axis, [("key", key), ("value", value)],
                "`key` and `value` must describe the same positions.",
            )
        batch_size, length = ops.shape(value)[0], ops.shape(value)[1]
        key = ops.reshape(self.key_dense(key), (batch_size, length, self.num_heads, self.key_dim))
        value = ops.reshape(
            self.value_dense(value), (batch_size, length, self.num_heads, self._value_dim)
        )
        return key, value

    def call(
        self,
        query,
        value=None,
        key=None,
        attention_mask=None,
        value_padding_mask=None,
        cache=None,
        return_attention_scores=False,
        training=None,
    ):
        self._check_rank("query", tuple(query.shape))
        if cache is None:
            if value is None:
                raise ValueError(
                    "MultiHeadAttention needs `value` (the sequence to attend "
                    "to) or a `cache` from `compute_cache`. Received neither."
                )
            memory_name, memory, key_length = "value", value, ops.shape(value)[1]
        else:
            checks.check_cache(
                cache, ("batch", self.num_heads, self.key_dim + self._value_dim, "length"),
                "as returned by `compute_cache`",
            )
            memory_name, memory, key_length = "cache", cache, ops.shape(cache)[-1]
        query = self._check_same(
            "batch size", 0, [("query", query), (memory_name, memory)],
            "Each query sequence attends to the memory of its own example: "
            "pass one memory per query sequence.",
        )
        value_padding_mask, attention_mask = self._check_masks(
            query, value, value_padding_mask, attention_mask, key_length
        )
        batch_size, query_length = ops.shape(query)[0], ops.shape(query)[1]
        projected_query = ops.reshape(
            self.query_dense(query), (batch_size, query_length, self.num_heads, self.key_dim)
        )
        if cache is None:
            # Without a cache the memory is projected in the sequence layout:
            # no concatenation or transpose into a cache's layout.
            key, value = self._project_memory(value, key)
            key_length = ops.shape(key)[1]
        else:
            key, value = self._cached_keys_values(cache, projected_query.dtype)
            key_length = ops.shape(key)[-1]
        mask = attention_ops.merge_masks(
            batch_size, query_length, key_length,
            key_padding_mask=value_padding_mask,
            attention_mask=attention_mask,
        )
        outputs, scores = attention_ops.scaled_dot_product_attention(
            projected_query, key, value, mask,
            dropout_layer=self.dropout_layer, training=training,
            cache_layout=cache is not None,
        )
        outputs = self.output_dense(
            ops.reshape(outputs, (batch_size, query_length, self.num_heads * self._value_dim))
        )
        if return_attention_scores:
            return outputs, ops.cast(scores, self.compute_dtype)
        return outputs

    def _check_masks(self, query, value, value_padding_mask, attention_mask, key_length):
        """Validates the masks (default padding mask: the value's implicit
        one); symbolic inputs get the checks of what is known when built."""
        if value_padding_mask is None and value is not None:
            value_padding_mask = attention_ops.get_implicit_mask(value)
        value_padding_mask = attention_ops.check_mask(
            value_padding_mask, "value_padding_mask", 2, (ops.shape(query)[0], key_length)
        )
        attention_mask = attention_ops.check_mask(
            attention_mask, "attention_mask", (3, 4), (ops.shape(query)[1], key_length),
            batch_size=ops.shape(query)[0], num_heads=self.num_heads,
        )
        return value_padding_mask, attention_mask

    def compute_output_shape(self, query_shape, value_shape=None, key_shape=None):
        return tuple(query_shape[:-1]) + (self.output_dim or query_shape[-1],)

    def compute_output_spec(self, *args, **kwargs):
        arguments = bound_call_arguments(self, args, kwargs)
        query, cache = arguments["query"], arguments["cache"]
        value, return_attention_scores = arguments["value"], arguments["return_attention_scores"]
        memory = cache.shape[-1] if cache is not None else (value.shape[1] if value is not None else None)
        self._check_masks(query, value, arguments["value_padding_mask"], arguments["attention_mask"], memory)
        outputs = keras.KerasTensor(
            self.compute_output_shape(tuple(query.shape)), self.compute_dtype
        )
        if not return_attention_scores:
            return outputs
        key_length = cache.shape[-1] if cache is not None else value.shape[1]
        scores = keras.KerasTensor(
            (query.shape[0], self.num_heads, query.shape[1], key_length),
            self.compute_dtype,
        )
        return outputs, scores

    def compute_mask(self, query, previous_mask=None):
        return previous_mask
