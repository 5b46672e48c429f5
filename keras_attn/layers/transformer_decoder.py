import keras
from keras import ops

from keras_attn import checks
from keras_attn.layers import attention_ops
from keras_attn.layers.attention_base import bound_call_arguments
from keras_attn.layers.multi_head_attention import MultiHeadAttention
from keras_attn.layers.transformer_block import TransformerBlock


@keras.saving.register_keras_serializable(package="keras_attn")
class TransformerDecoder(TransformerBlock):
    """One Transformer decoder block: causal self-attention, optional
    cross-attention to an encoder sequence, and a feed-forward network, each
    wrapped in dropout, a residual connection and layer norm.

    Without an encoder sequence it is the block of a decoder-only language
    model (the Music Transformer, the Image Transformer's decoder); with one
    it is the decoder of an encoder-decoder model (translation, super
    resolution). The cross-attention sublayer is built when the block is
    first called with an `encoder_sequence`, and is masked with the encoder's
    padding mask. Both attentions have caches for token-by-token decoding.
    With a 2D `LocalBlockAttention` it decodes images (B, height, width, D),
    as `TransformerEncoder` encodes them; cross-attention then reads the
    image's pixels as a sequence of height * width queries (raster order).

    Args:
        intermediate_dim: d_ff, width of the feed-forward hidden layer.
        num_heads: heads of the default self-attention and of the
            cross-attention; may be omitted when `self_attention` is given
            (its `num_heads` is used).
        key_dim: per-head size; defaults to D // num_heads.
        dropout: residual and attention dropout rate (0.1 in the paper).
        activation: feed-forward activation.
        layer_norm_epsilon: epsilon of the layer norms.
        normalize_first: False = post-norm (the paper), True = pre-norm.
        self_attention: optional self-attention layer (library call
            contract), e.g. `RelativeGlobalAttention(...)`.
        kernel_initializer, bias_initializer: of the dense sublayers.
        seed: int seed of the dropout layers.
        **kwargs: base `keras.layers.Layer` arguments.

    Call arguments:
        decoder_sequence: (B, T, D) float tensor; with a 2D
            `LocalBlockAttention`, an image (B, height, width, D), whose
            T = height * width pixels (raster order) index the scores.
        encoder_sequence: (B, S, De) float tensor, or None (decoder-only, or
            when `cross_attention_cache` is given).
        decoder_padding_mask: (B, T) bool, True = real token (without a
            cache); (B, height, width) for an image; with a self-attention
            cache, (B, max_length) over the whole cached sequence. Defaults
            to the implicit mask of `decoder_sequence` when no cache is used.
        encoder_padding_mask: (B, S) bool, True = real source token. Defaults
            to the implicit mask of `encoder_sequence`.
        use_causal_mask: True (default) = position t sees positions <= t.
        self_attention_cache: the self-attention layer's cache from
            `init_cache` ((B, H, K + V, max_length) for
            `MultiHeadSelfAttention`).
        cache_index: int or int32 scalar, absolute position of
            `decoder_sequence[:, 0]`; only with a `self_attention_cache`.
        cross_attention_cache: (B, H, K + V, S), the encoder's projected keys
            and values. Computed from `encoder_sequence` (and returned) when a
            self-attention cache is given and this is None.
        return_attention_scores: if True, also return the attention
            probabilities as a dict: `"self_attention"` (B, H, T, T or
            max_length) and, with cross-attention, `"cross_attention"`
            (B, H, T, S) — e.g. to plot which source words a target word
            looked at. A SavedModel signature takes only flat outputs: to
            export a model that returns them, give each its own output
            (`keras.Model(inputs, {"outputs": y, **scores})`), not the dict
            nested in a list.
        training: Python bool; enables dropout.

    Returns:
        `outputs`, of the shape of `decoder_sequence` ((B, T, D) or
        (B, height, width, D)), without a self-attention cache; with one,
        `(outputs, self_attention_cache)`, plus `cross_attention_cache` as a
        third item when the block has cross-attention. With
        `return_attention_scores=True` the scores dict is appended last.

    Raises:
        ValueError: on invalid arguments (see `TransformerBlock`); an
            encoder sequence or cross cache given to a block built without
            cross-attention (or the reverse); masks of the wrong
            dtype/rank/known shape; `cache_index` without
            `self_attention_cache`; and as the attention sublayers.

    Example:
    >>> import keras
    >>> from keras_attn.layers import TransformerDecoder
    >>> decoder = TransformerDecoder(intermediate_dim=64, num_heads=2)
    >>> target, source = keras.random.normal((2, 4, 16)), keras.random.normal((2, 7, 16))
    >>> tuple(decoder(target, source).shape)
    (2, 4, 16)
    >>> cache = decoder.init_cache(batch_size=2, max_length=4)
    >>> y, cache, memory = decoder(target[:, :1], source, self_attention_cache=cache, cache_index=0)

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
        """The self-attention cache: see `MultiHeadSelfAttention.init_cache`.

        Returns:
            Its empty cache: zeros of shape (B, H, K + V, max_length) for
            `MultiHeadSelfAttention` and `RelativeGlobalAttention`, (B,
            max_length, H, K + V) for `LocalBlockAttention`, (B, W, H,
            K + V) for a rolling one (see `rolling_cache`).
        """
        if not self.built:
            raise ValueError("TransformerDecoder.init_cache needs a built block: call it first.")
        return self._self_attention_layer.init_cache(batch_size, max_length, dtype)

    @property
    def rolling_cache(self):
        """Whether the self-attention cache keeps only the last positions
        (`LocalBlockAttention(rolling_cache=True)`): positions must then be
        written in order, never again."""
        return bool(getattr(self.self_attention, "rolling_cache", False))

    def compute_cross_attention_cache(self, encoder_sequence):
        """Projects the encoder sequence once into the cross-attention keys
        and values, (B, H, K + V, S) (see `MultiHeadAttention.compute_cache`)."""
        self._check_cross_attention(True)
        return self._cross_attention_layer.compute_cache(encoder_sequence)

    def _check_cross_attention(self, wanted):
        if wanted != (self._cross_attention_layer is not None):
            raise ValueError(
                f"This TransformerDecoder {'has' if not wanted else 'was built without'} "
                "cross-attention (built by the first call with an `encoder_sequence`): pass "
                f"{'an' if not wanted else 'no'} `encoder_sequence` or `cross_attention_cache`."
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

        def self_attention(x):
            kwargs = {}
            if cached:
                kwargs = {"cache": self_attention_cache, "cache_index": cache_index}
            return self._self_attention_layer(
                x,
                padding_mask=decoder_padding_mask,
                use_causal_mask=use_causal_mask,
                return_attention_scores=return_attention_scores,
                training=training,
                **kwargs,
            )

        x, *extras = self._residual(
            decoder_sequence,
            self._self_attention_norm,
            self._self_attention_dropout,
            self_attention,
            training,
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
        checks.require(
            self_attention_cache is not None or cache_index is None,
            "cache_index",
            cache_index,
            "None without a `self_attention_cache`",
            "Pass the cache, or drop `cache_index`.",
        )

    def _masks(
        self,
        decoder_sequence,
        encoder_sequence,
        decoder_padding_mask,
        encoder_padding_mask,
        self_attention_cache,
        cross_attention_cache,
    ):
        """The padding masks as booleans, checked (`attention_ops.check_mask`),
        defaulting to the implicit ones. The decoder's has the layout of the
        positions, (B, T) or an image's (B, height, width); with a cache,
        (B, the positions the cache holds) (any number for a rolling one)."""
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
        """What the self-attention layer's cache hook says of `cache`:
        `_cache_length` (its positions, as the layer lays it out) or
        `_cache_capacity` (the positions it can hold; None for a rolling
        cache or one unknown). None when the layer has no such hook."""
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
