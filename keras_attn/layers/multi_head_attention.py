import keras
from keras import ops

from keras_attn import checks
from keras_attn.layers import attention_ops
from keras_attn.layers.attention_base import AttentionBase, bound_call_arguments
from keras_attn.layers.attention_masks import AttentionMasks
from keras_attn.layers.attention_ops import dim


@keras.saving.register_keras_serializable(package="keras_attn")
class MultiHeadAttention(AttentionBase):
    """Multi-head attention of a query sequence over a separate key/value sequence.

    `compute_cache` projects a fixed memory (an encoder output) once for every decoding step.

    Args:
        num_heads: H, number of attention heads (positive int).
        key_dim: K, size of each head's query and key (positive int).
        value_dim: V, size of each head's value; defaults to `key_dim`.
        dropout: dropout rate on the attention probabilities, in [0, 1).
        use_bias: whether the projections have biases.
        output_dim: width of the output; defaults to the query width D.
        kernel_initializer, bias_initializer: initializers of the projections.
        seed: int seed of the attention dropout.
        **kwargs: base `keras.layers.Layer` arguments.

    Call arguments:
        query: (B, T, D) float tensor.
        value: (B, S, Dv) float tensor; may be None when `cache` is given.
        key: (B, S, Dk) float tensor; defaults to `value`.
        attention_mask: (B, T, S) or (B, H, T, S) bool, True = may attend.
        value_padding_mask: (B, S) bool, True = real position; defaults to `value`'s implicit mask.
        cache: (B, H, K + V, S) keys and values from `compute_cache`, used instead of `value`.
        return_attention_scores: if True, also return the probabilities.
        training: Python bool; enables dropout.

    Returns:
        `outputs` (B, T, output_dim), and `attention_scores` (B, H, T, S) when asked for.

    Raises:
        ValueError: on invalid arguments, inputs, masks or cache, or neither `value` nor `cache`.

    Example:
    >>> import keras
    >>> from keras_attn.layers import MultiHeadAttention
    >>> layer = MultiHeadAttention(num_heads=2, key_dim=8)
    >>> query, memory = keras.random.normal((2, 4, 16)), keras.random.normal((2, 7, 12))
    >>> tuple(layer(query, memory).shape)
    (2, 4, 16)

    Reference:
        Vaswani et al. 2017, "Attention Is All You Need", sections 3.2.2-3.2.3.
    """

    def build(self, query_shape, value_shape=None, key_shape=None):
        if value_shape is None:
            raise ValueError("MultiHeadAttention needs `value` on its first call (it builds then).")
        query_shape, value_shape = tuple(query_shape), tuple(value_shape)
        key_shape = value_shape if key_shape is None else tuple(key_shape)
        key_width, value_width = self.num_heads * self.key_dim, self.num_heads * self._value_dim
        self.query_dense = self._make_dense(key_width, "query", query_shape)
        self.key_dense = self._make_dense(key_width, "key", key_shape)
        self.value_dense = self._make_dense(value_width, "value", value_shape)
        heads_shape = query_shape[:-1] + (value_width,)
        output_dim = self.output_dim or query_shape[-1]
        self.output_dense = self._make_dense(output_dim, "attention_output", heads_shape)
        self.dropout_layer = self._make_dropout()
        self.built = True

    def compute_cache(self, value, key=None):
        """Projects a memory sequence once into keys and values.

        Args:
            value: (B, S, Dv) tensor (e.g. the encoder output).
            key: optional (B, S, Dk) tensor; defaults to `value`.

        Returns:
            (B, H, key_dim + value_dim, S): keys in `[:, h, :key_dim]`, values after.
        """
        if not self.built:
            raise ValueError("MultiHeadAttention.compute_cache needs a built layer: call it first.")
        self._check_call(None, value, key, None)
        key, value = self._project_memory(value, key)
        return ops.transpose(ops.concatenate([key, value], axis=-1), (0, 2, 3, 1))

    def _project_memory(self, value, key=None):
        """Keys (B, S, H, K) and values (B, S, H, V) of the memory."""
        key = value if key is None else key
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
        value_padding_mask, attention_mask = self._masks(
            query, value, key, attention_mask, value_padding_mask, cache
        )
        query_length = dim(query, 1)
        projected_query = ops.reshape(
            self.query_dense(query), (-1, query_length, self.num_heads, self.key_dim)
        )
        if cache is None:
            # Without a cache the memory is projected in the sequence layout:
            # no concatenation or transpose into a cache's layout.
            key, value = self._project_memory(value, key)
            key_length = dim(key, 1)
        else:
            key, value = self._cached_keys_values(cache, projected_query.dtype)
            key_length = dim(key, -1)
        masks = AttentionMasks(padding_mask=value_padding_mask, attention_mask=attention_mask)
        mask = masks.merged(query_length, key_length)
        outputs, scores = attention_ops.scaled_dot_product_attention(
            projected_query,
            key,
            value,
            mask,
            dropout_layer=self.dropout_layer,
            training=training,
            cache_layout=cache is not None,
            return_probabilities=return_attention_scores,
        )
        outputs = self.output_dense(
            ops.reshape(outputs, (-1, query_length, self.num_heads * self._value_dim))
        )
        if return_attention_scores:
            return outputs, ops.cast(scores, self.compute_dtype)
        return outputs

    def _check_call(self, query, value, key, cache):
        """The static checks of a call's tensors (`query` None: `compute_cache`'s)."""
        if value is None and cache is None:
            raise ValueError("MultiHeadAttention needs `value` or a `cache`. Received neither.")
        tensors = {"query": query, "value": value, "key": value if key is None else key}
        shapes = {name: tuple(t.shape) for name, t in tensors.items() if t is not None}
        for name, shape in shapes.items():
            ok = len(shape) == 3 and shape[-1] is not None and 0 not in shape[:2]
            checks.require(ok, f"{name}.shape", shape, "(batch, length, features), non-empty")
        if cache is not None:
            layout = ("batch", self.num_heads, self.key_dim + self._value_dim, "length")
            checks.check_cache(cache, layout, "as returned by `compute_cache`")
            shapes = {"query": shapes.get("query"), "cache": tuple(cache.shape)}
        lengths = {shapes[name][1] for name in ("key", "value") if name in shapes} - {None}
        if len({shape[0] for shape in shapes.values() if shape} - {None}) > 1 or len(lengths) > 1:
            raise ValueError(
                f"MultiHeadAttention needs one batch size for {' and '.join(shapes)}, and one "
                f"length for key and value. Received shapes {shapes}."
            )

    def _masks(self, query, value, key, attention_mask, value_padding_mask, cache):
        """The static checks of a call; returns its masks as booleans, the padding mask
        defaulting to `value`'s."""
        self._check_call(query, value, key, cache)
        keys = value.shape[1] if cache is None else cache.shape[-1]
        if value_padding_mask is None and value is not None:
            value_padding_mask = attention_ops.get_implicit_mask(value)
        value_padding_mask = attention_ops.check_mask(
            value_padding_mask, "value_padding_mask", (2,), (query.shape[0], keys)
        )
        attention_mask = attention_ops.check_mask(
            attention_mask,
            "attention_mask",
            (3, 4),
            (query.shape[1], keys),
            query.shape[0],
            self.num_heads,
        )
        return value_padding_mask, attention_mask

    def compute_output_shape(self, query_shape, value_shape=None, key_shape=None):
        return tuple(query_shape[:-1]) + (self.output_dim or query_shape[-1],)

    def compute_output_spec(self, *args, **kwargs):
        call = bound_call_arguments(self, args, kwargs)
        query, value, cache = call["query"], call["value"], call["cache"]
        self._masks(
            query,
            value,
            key=call["key"],
            attention_mask=call["attention_mask"],
            value_padding_mask=call["value_padding_mask"],
            cache=cache,
        )
        output_shape = self.compute_output_shape(tuple(query.shape))
        outputs = keras.KerasTensor(output_shape, self.compute_dtype)
        if not call["return_attention_scores"]:
            return outputs
        key_length = value.shape[1] if cache is None else cache.shape[-1]
        scores_shape = (query.shape[0], self.num_heads, query.shape[1], key_length)
        return outputs, keras.KerasTensor(scores_shape, self.compute_dtype)
