import keras
from keras import ops

from keras_attn import checks
from keras_attn.layers import attention_ops
from keras_attn.layers.attention_base import bound_call_arguments, call_results
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
        decoder_padding_mask, encoder_padding_mask = self._masks(
            decoder_sequence,
            encoder_sequence,
            decoder_padding_mask,
            encoder_padding_mask,
            self_attention_cache,
            cache_index,
            cross_attention_cache,
        )
        cached = self_attention_cache is not None
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

        if encoder_sequence is not None or cross_attention_cache is not None:
            if cross_attention_cache is None and cached:
                cross_attention_cache = self._cross_attention_layer.compute_cache(encoder_sequence)

            def cross_attention(h):
                image = len(h.shape) > 3  # its pixels are the queries, in raster order
                queries = ops.reshape(h, (ops.shape(h)[0], -1, h.shape[-1])) if image else h
                result = self._cross_attention_layer(
                    queries,
                    encoder_sequence,
                    value_padding_mask=encoder_padding_mask,
                    cache=cross_attention_cache,
                    return_attention_scores=return_attention_scores,
                    training=training,
                )
                outputs, *cross_scores = result if return_attention_scores else (result,)
                outputs = ops.reshape(outputs, ops.shape(h)) if image else outputs
                return (outputs, *cross_scores)

            x, *cross_scores = self._residual(
                x,
                self._cross_attention_norm,
                self._cross_attention_dropout,
                cross_attention,
                training,
            )
            if return_attention_scores:
                scores["cross_attention"] = cross_scores[0]

        outputs = self._feedforward(x, training)
        caches = (extras[0], cross_attention_cache) if cached else ()
        return call_results(outputs, *caches, scores or None)

    def _masks(
        self,
        decoder_sequence,
        encoder_sequence=None,
        decoder_padding_mask=None,
        encoder_padding_mask=None,
        self_attention_cache=None,
        cache_index=None,
        cross_attention_cache=None,
    ):
        """The static checks of a call; returns its padding masks as booleans, defaulting to the
        implicit ones."""
        self._check_cross_attention(
            encoder_sequence is not None or cross_attention_cache is not None
        )
        memory = None if encoder_sequence is None else encoder_sequence.shape[1]
        if cross_attention_cache is not None:
            memory = cross_attention_cache.shape[-1]
        cached, batch = self_attention_cache is not None, decoder_sequence.shape[0]
        ok = cached or cache_index is None
        checks.require(ok, "cache_index", cache_index, "None without a `self_attention_cache`")
        if decoder_padding_mask is None and not cached:
            decoder_padding_mask = attention_ops.get_implicit_mask(decoder_sequence)
        if encoder_sequence is not None and encoder_padding_mask is None:
            encoder_padding_mask = attention_ops.get_implicit_mask(encoder_sequence)
        encoder_padding_mask = attention_ops.check_mask(
            encoder_padding_mask, "encoder_padding_mask", (2,), (batch, memory)
        )
        positions = tuple(decoder_sequence.shape[1:-1])
        if cached:
            positions = (self._self_attention_layer._cache_capacity(self_attention_cache),)
        decoder_padding_mask = attention_ops.check_mask(
            decoder_padding_mask,
            "decoder_padding_mask",
            (1 + len(positions),),
            (batch,) + positions,
        )
        return decoder_padding_mask, encoder_padding_mask

    def compute_output_shape(self, decoder_sequence_shape, encoder_sequence_shape=None):
        return tuple(decoder_sequence_shape)

    def compute_output_spec(self, *args, **kwargs):
        call = bound_call_arguments(self, args, kwargs)
        sequence, memory = call["decoder_sequence"], call["encoder_sequence"]
        self_cache, cross_cache = call["self_attention_cache"], call["cross_attention_cache"]
        self._masks(
            sequence,
            memory,
            decoder_padding_mask=call["decoder_padding_mask"],
            encoder_padding_mask=call["encoder_padding_mask"],
            self_attention_cache=self_cache,
            cache_index=call["cache_index"],
            cross_attention_cache=cross_cache,
        )

        def spec(shape, dtype=None):
            return keras.KerasTensor(tuple(shape), dtype or self.compute_dtype)

        batch, length = sequence.shape[0], self._positions(sequence.shape)
        results = [spec(sequence.shape)]
        if self_cache is not None:
            results.append(spec(self_cache.shape, self_cache.dtype))
        with_cross = memory is not None or cross_cache is not None
        if with_cross:
            cross = self._cross_attention_layer
            memory_length = memory.shape[1] if cross_cache is None else cross_cache.shape[-1]
        if with_cross and self_cache is not None:
            if cross_cache is None:
                layout = (cross.num_heads, cross.key_dim + cross._value_dim, memory_length)
                cross_cache = spec((batch,) + layout)
            results.append(spec(cross_cache.shape, cross_cache.dtype))
        if call["return_attention_scores"]:
            attention = self._self_attention_layer
            key_length = (
                length if self_cache is None else self_cache.shape[attention._cache_length_axis]
            )
            scores = {"self_attention": spec((batch, attention.num_heads, length, key_length))}
            if with_cross:
                scores["cross_attention"] = spec((batch, cross.num_heads, length, memory_length))
            results.append(scores)
        return call_results(*results)
