import keras
from keras import ops

from keras_attn import checks
from keras_attn.layers import attention_ops
from keras_attn.layers.attention_base import bound_call_arguments
from keras_attn.layers.multi_head_attention import MultiHeadAttention
from keras_attn.layers.transformer_block import TransformerBlock


@keras.saving.register_keras_serializable(package="keras_attn")
class TransformerDecoder(TransformerBlock):
    """One Transformer decoder block: causal self-attention, optional cross-attention, feed-forward.

    The cross-attention is built by the first call with an `encoder_sequence`; both have caches.

    Args:
        intermediate_dim: d_ff, width of the feed-forward hidden layer.
        num_heads: heads of the self- and cross-attention (default: `self_attention`'s).
        key_dim: per-head size; defaults to D // num_heads.
        dropout: residual and attention dropout rate, in [0, 1).
        activation: feed-forward activation.
        layer_norm_epsilon: epsilon of the layer norms, a finite number > 0.
        normalize_first: bool; False = post-norm (the paper), True = pre-norm.
        self_attention: optional keras_attn self-attention layer (e.g. `RelativeGlobalAttention`).
        kernel_initializer, bias_initializer: of the dense sublayers.
        seed: int seed of the dropout layers.
        **kwargs: base `keras.layers.Layer` arguments.

    Call arguments:
        decoder_sequence: (B, T, D) float tensor ((B, height, width, D) with 2D local attention).
        encoder_sequence: (B, S, De) float tensor, or None.
        decoder_padding_mask: (B, T) bool, True = real token; (B, max_length) with a cache.
        encoder_padding_mask: (B, S) bool; defaults to the implicit mask of `encoder_sequence`.
        use_causal_mask: True (default) = position t sees positions <= t.
        self_attention_cache: the self-attention layer's cache from `init_cache`.
        cache_index: int or int32 scalar, position of `decoder_sequence[:, 0]` in the cache.
        cross_attention_cache: (B, H, K + V, S) from `compute_cross_attention_cache`.
        return_attention_scores: if True, also return a dict of the probabilities.
        training: Python bool; enables dropout.

    Returns:
        `outputs` of the shape of `decoder_sequence`; with a self-attention cache,
        `(outputs, self_attention_cache[, cross_attention_cache])`; the scores dict last.

    Raises:
        ValueError: on invalid arguments, masks or caches, or an unexpected `encoder_sequence`.

    Example:
    >>> import keras
    >>> from keras_attn.layers import TransformerDecoder
    >>> decoder = TransformerDecoder(intermediate_dim=64, num_heads=2)
    >>> target, source = keras.random.normal((2, 4, 16)), keras.random.normal((2, 7, 16))
    >>> tuple(decoder(target, source).shape)
    (2, 4, 16)

    Reference:
        Vaswani et al. 2017, "Attention Is All You Need", section 3.1.
    """

    def build(self, decoder_sequence_shape, encoder_sequence_shape=None):
        self._build_self_attention_and_feedforward(decoder_sequence_shape)
        self._cross_attention_layer = None
        if encoder_sequence_shape is not None:
            decoder_sequence_shape = tuple(decoder_sequence_shape)
            # The queries of an image are its pixels, in raster order.
            query_shape = (
                decoder_sequence_shape[0],
                self._positions(decoder_sequence_shape),
                self._hidden_dim,
            )
            self._cross_attention_layer = self._attention(
                MultiHeadAttention, self._hidden_dim, "cross_attention", 3
            )
            self._cross_attention_layer.build(query_shape, tuple(encoder_sequence_shape))
            self._cross_attention_norm = self._layer_norm("cross_attention_norm")
            self._cross_attention_norm.build(decoder_sequence_shape)
            self._cross_attention_dropout = self._dropout("cross_attention_dropout", 4)
        self.built = True

    def init_cache(self, batch_size, max_length, dtype=None):
        """The self-attention layer's empty cache (its `init_cache`)."""
        if not self.built:
            raise ValueError("TransformerDecoder.init_cache needs a built block: call it first.")
        return self._self_attention_layer.init_cache(batch_size, max_length, dtype)

    @property
    def rolling_cache(self):
        """Whether the self-attention cache keeps only the last positions (written in order)."""
        return bool(getattr(self.self_attention, "rolling_cache", False))

    def compute_cross_attention_cache(self, encoder_sequence):
        """The cross-attention keys and values (B, H, K + V, S) of the encoder sequence."""
        self._check_cross_attention(True)
        return self._cross_attention_layer.compute_cache(encoder_sequence)

    def _check_cross_attention(self, wanted):
        if wanted != (self._cross_attention_layer is not None):
            built, fix = ("without", "no") if wanted else ("with", "an")
            raise ValueError(
                f"This TransformerDecoder was built {built} cross-attention: pass {fix} "
                "`encoder_sequence` (or `cross_attention_cache`)."
            )

    def call(
        self,
        decoder_sequence,
        encoder_sequence=None,
        decoder_padding_mask=None,
        encoder_padding_mask=None,
        use_causal_mask=True,
        self_attention_cache=None,
        cache_index=None,
        cross_attention_cache=None,
        return_attention_scores=False,
        training=None,
    ):
        cached = self_attention_cache is not None
        with_cross = encoder_sequence is not None or cross_attention_cache is not None
        self._check_call(with_cross, self_attention_cache, cache_index)
        decoder_padding_mask, encoder_padding_mask = self._masks(
            decoder_sequence,
            encoder_sequence,
            decoder_padding_mask,
            encoder_padding_mask,
            self_attention_cache,
            cross_attention_cache,
        )

        cache = {"cache": self_attention_cache, "cache_index": cache_index} if cached else {}
        x, *extras = self._self_attention_block(
            decoder_sequence,
            training,
            padding_mask=decoder_padding_mask,
            use_causal_mask=use_causal_mask,
            return_attention_scores=return_attention_scores,
            **cache,
        )
        scores = {}
        if return_attention_scores:
            scores["self_attention"] = extras.pop(0)

        if with_cross:
            if cross_attention_cache is None and cached:
                cross_attention_cache = self._cross_attention_layer.compute_cache(encoder_sequence)
            x, *cross_scores = self._cross_attention_block(
                x,
                encoder_sequence,
                encoder_padding_mask,
                cross_attention_cache,
                return_attention_scores,
                training,
            )
            if return_attention_scores:
                scores["cross_attention"] = cross_scores[0]

        outputs = self._feedforward(x, training)
        results = (outputs,)
        if cached:
            results += (extras[0],)
            if with_cross:
                results += (cross_attention_cache,)
        if return_attention_scores:
            results += (scores,)
        return results[0] if len(results) == 1 else results

    def _check_call(self, with_cross, self_attention_cache, cache_index):
        self._check_cross_attention(with_cross)
        ok = self_attention_cache is not None or cache_index is None
        checks.require(ok, "cache_index", cache_index, "None without a `self_attention_cache`")

    def _masks(
        self,
        decoder_sequence,
        encoder_sequence,
        decoder_padding_mask,
        encoder_padding_mask,
        self_attention_cache,
        cross_attention_cache,
    ):
        """The padding masks as checked booleans, defaulting to the implicit ones."""
        cached, batch = self_attention_cache is not None, decoder_sequence.shape[0]
        if decoder_padding_mask is None and not cached:
            decoder_padding_mask = attention_ops.get_implicit_mask(decoder_sequence)
        if encoder_sequence is not None and encoder_padding_mask is None:
            encoder_padding_mask = attention_ops.get_implicit_mask(encoder_sequence)
        memory = (
            cross_attention_cache.shape[-1]
            if cross_attention_cache is not None
            else (None if encoder_sequence is None else encoder_sequence.shape[1])
        )
        encoder_padding_mask = attention_ops.check_mask(
            encoder_padding_mask, "encoder_padding_mask", (2,), (batch, memory)
        )
        positions = (
            tuple(decoder_sequence.shape[1:-1])
            if not cached
            else (self._ask_self_attention("_cache_capacity", self_attention_cache),)
        )
        decoder_padding_mask = attention_ops.check_mask(
            decoder_padding_mask,
            "decoder_padding_mask",
            (1 + len(positions),),
            (batch,) + positions,
        )
        return decoder_padding_mask, encoder_padding_mask

    def _ask_self_attention(self, hook, cache):
        """The self-attention layer's `hook(cache)` (`_cache_length`, `_cache_capacity`) or None."""
        method = getattr(self._self_attention_layer, hook, None)
        return method(cache) if method is not None else None

    def _cross_attention_block(
        self,
        x,
        encoder_sequence,
        encoder_padding_mask,
        cross_attention_cache,
        return_attention_scores,
        training,
    ):
        """Cross-attention sublayer with its residual: `x`, then its scores if asked for."""

        def cross_attention(x):
            # An image's pixels are the queries, in raster order.
            image_shape = tuple(x.shape[1:]) if len(x.shape) > 3 else None
            if image_shape is not None:
                x = ops.reshape(x, (ops.shape(x)[0], -1, x.shape[-1]))
            result = self._cross_attention_layer(
                x,
                encoder_sequence,
                value_padding_mask=encoder_padding_mask,
                cache=cross_attention_cache,
                return_attention_scores=return_attention_scores,
                training=training,
            )
            if image_shape is None:
                return result
            outputs, *scores = result if return_attention_scores else (result,)
            return (ops.reshape(outputs, (ops.shape(x)[0],) + image_shape), *scores)

        return self._residual(
            x, self._cross_attention_norm, self._cross_attention_dropout, cross_attention, training
        )

    def compute_output_shape(self, decoder_sequence_shape, encoder_sequence_shape=None):
        return tuple(decoder_sequence_shape)

    def compute_output_spec(self, *args, **kwargs):
        arguments = bound_call_arguments(self, args, kwargs)
        decoder_sequence, encoder_sequence = (
            arguments["decoder_sequence"],
            arguments["encoder_sequence"],
        )
        self_attention_cache = arguments["self_attention_cache"]
        cross_attention_cache = arguments["cross_attention_cache"]
        return_attention_scores = arguments["return_attention_scores"]
        with_cross = encoder_sequence is not None or cross_attention_cache is not None
        self._check_call(with_cross, self_attention_cache, arguments["cache_index"])
        self._masks(
            decoder_sequence,
            encoder_sequence,
            arguments["decoder_padding_mask"],
            arguments["encoder_padding_mask"],
            self_attention_cache,
            cross_attention_cache,
        )

        def spec(shape, dtype=None):
            return keras.KerasTensor(tuple(shape), dtype or self.compute_dtype)

        batch, length = decoder_sequence.shape[0], self._positions(decoder_sequence.shape)
        results = (spec(decoder_sequence.shape),)
        memory_length = (
            cross_attention_cache.shape[-1]
            if cross_attention_cache is not None
            else (None if encoder_sequence is None else encoder_sequence.shape[1])
        )
        num_heads = self._self_attention_layer.num_heads
        if self_attention_cache is not None:
            results += (spec(self_attention_cache.shape, self_attention_cache.dtype),)
            if with_cross:
                if cross_attention_cache is not None:
                    shape, dtype = cross_attention_cache.shape, cross_attention_cache.dtype
                else:
                    cross = self._cross_attention_layer
                    shape = (
                        batch,
                        cross.num_heads,
                        cross.key_dim + cross._value_dim,
                        memory_length,
                    )
                    dtype = None
                results += (spec(shape, dtype),)
        if return_attention_scores:
            key_length = (
                self._ask_self_attention("_cache_length", self_attention_cache)
                if self_attention_cache is not None
                else length
            )
            scores = {"self_attention": spec((batch, num_heads, length, key_length))}
            if with_cross:
                scores["cross_attention"] = spec(
                    (batch, self._cross_attention_layer.num_heads, length, memory_length)
                )
            results += (scores,)
        return results[0] if len(results) == 1 else results
