import keras

from keras_attn.layers import attention_ops
from keras_attn.layers.transformer_block import TransformerBlock


@keras.saving.register_keras_serializable(package="keras_attn")
class TransformerEncoder(TransformerBlock):
    """One Transformer encoder block: self-attention, then a feed-forward
    network, each wrapped in dropout, a residual connection and layer norm.

    Stack it to encode a source sentence, a low-resolution image or any
    sequence that may be seen all at once. The self-attention layer is
    pluggable (`self_attention=LocalBlockAttention(...)` for long inputs,
    `RelativeGlobalAttention(...)` for relative positions).

    Args:
        intermediate_dim: d_ff, width of the feed-forward hidden layer.
        num_heads: heads of the default `MultiHeadSelfAttention`; must be
            omitted when `self_attention` is given (that layer's own
            `num_heads` is used).
        key_dim: per-head size of the default `MultiHeadSelfAttention`;
            defaults to D // num_heads. Must be omitted when
            `self_attention` is given, as `num_heads`.
        dropout: residual and attention dropout rate (0.1 in the paper).
        activation: feed-forward activation.
        layer_norm_epsilon: epsilon of the layer norms, a finite number > 0.
        normalize_first: bool; False = post-norm (the paper), True = pre-norm.
        self_attention: optional self-attention layer (library call contract).
        kernel_initializer, bias_initializer: of the dense sublayers.
        seed: int seed of the dropout layers.
        **kwargs: base `keras.layers.Layer` arguments.

    Call arguments:
        inputs: (B, T, D) float tensor; with a 2D `LocalBlockAttention`, an
            image (B, height, width, D), whose T = height * width positions
            (raster order) index the attention masks and scores.
        padding_mask: (B, T) bool, True = real token; (B, height, width) for
            an image. Defaults to the Keras implicit mask of `inputs`.
        attention_mask: (B, T, T) or (B, H, T, T) bool, True = may attend.
        return_attention_scores: if True, also return the self-attention
            probabilities (B, H, T, T).
        training: Python bool; enables dropout.

    Returns:
        A tensor of the shape of `inputs`, carrying the input's implicit
        mask; with `return_attention_scores=True`, `(outputs, scores)`.

    Raises:
        ValueError: on invalid arguments (see `TransformerBlock`; among them
            `num_heads` or `key_dim` given with a `self_attention` layer),
            inputs of a rank the self-attention does not take, masks of the
            wrong dtype/rank/shape.

    Example:
    >>> import keras
    >>> from keras_attn.layers import TransformerEncoder
    >>> encoder = TransformerEncoder(intermediate_dim=64, num_heads=2)
    >>> tuple(encoder(keras.random.normal((2, 7, 16))).shape)
    (2, 7, 16)

    Reference:
        Vaswani et al. 2017, "Attention Is All You Need", section 3.1.
    """

    # `num_heads` and `key_dim` size only the default self-attention: they
    # are refused with a `self_attention` layer (see `TransformerBlock`).
    _sizes_only_self_attention = True

    def build(self, inputs_shape):
        self._build_self_attention_and_feedforward(inputs_shape)
        self.built = True

    def call(
        self,
        inputs,
        padding_mask=None,
        attention_mask=None,
        return_attention_scores=False,
        training=None,
    ):
        if padding_mask is None:
            padding_mask = attention_ops.get_implicit_mask(inputs)

        def self_attention(x):
            return self._self_attention_layer(
                x,
                padding_mask=padding_mask,
                attention_mask=attention_mask,
                return_attention_scores=return_attention_scores,
                training=training,
            )

        x, *scores = self._residual(
            inputs,
            self._self_attention_norm,
            self._self_attention_dropout,
            self_attention,
            training,
        )
        outputs = self._feedforward(x, training)
        if return_attention_scores:
            return outputs, scores[0]
        return outputs

    def compute_output_spec(
        self,
        inputs,
        padding_mask=None,
        attention_mask=None,
        return_attention_scores=False,
        training=None,
    ):
        # A float or wrong-length mask is refused when the model is built.
        masks = getattr(self._self_attention_layer, "_masks", None)
        if masks is not None:
            masks(inputs, padding_mask, attention_mask, None)
        outputs = keras.KerasTensor(inputs.shape, self.compute_dtype)
        if not return_attention_scores:
            return outputs
        batch, length = inputs.shape[0], self._positions(inputs.shape)
        num_heads = self._self_attention_layer.num_heads
        return outputs, keras.KerasTensor((batch, num_heads, length, length), self.compute_dtype)

    def compute_output_shape(self, inputs_shape):
        return tuple(inputs_shape)
