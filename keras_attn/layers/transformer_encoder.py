import keras

from keras_attn.layers import attention_ops
from keras_attn.layers.transformer_block import TransformerBlock


@keras.saving.register_keras_serializable(package="keras_attn")
class TransformerEncoder(TransformerBlock):
    """One Transformer encoder block: self-attention, then a feed-forward network, each wrapped
    in dropout, a residual connection and layer norm.

    Args:
        intermediate_dim: d_ff, width of the feed-forward hidden layer.
        num_heads: heads of the default `MultiHeadSelfAttention`; omit with `self_attention`.
        key_dim: per-head size of the default layer (default D // num_heads); as `num_heads`.
        dropout: residual and attention dropout rate, in [0, 1).
        activation: feed-forward activation.
        layer_norm_epsilon: epsilon of the layer norms, a finite number > 0.
        normalize_first: bool; False = post-norm (the paper), True = pre-norm.
        self_attention: optional keras_attn self-attention layer (e.g. `LocalBlockAttention`).
        kernel_initializer, bias_initializer, seed: of the dense and dropout sublayers.
        **kwargs: base `keras.layers.Layer` arguments.

    Call arguments:
        inputs: (B, T, D) float tensor; (B, height, width, D) with a 2D `LocalBlockAttention`.
        padding_mask: (B, T) or (B, height, width) bool, True = real token (default: implicit).
        attention_mask: (B, T, T) or (B, H, T, T) bool, True = may attend.
        return_attention_scores: if True, also return the probabilities (B, H, T, T).
        training: Python bool; enables dropout.

    Returns:
        A tensor of the shape of `inputs`; with `return_attention_scores=True`, `(outputs, scores)`.

    Raises:
        ValueError: on invalid arguments (`num_heads` with `self_attention`), inputs or masks.

    Example:
    >>> import keras
    >>> from keras_attn.layers import TransformerEncoder
    >>> encoder = TransformerEncoder(intermediate_dim=64, num_heads=2)
    >>> tuple(encoder(keras.random.normal((2, 7, 16))).shape)
    (2, 7, 16)

    Reference:
        Vaswani et al. 2017, "Attention Is All You Need", section 3.1.
    """

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

        x, *scores = self._self_attention_block(
            inputs,
            training,
            padding_mask=padding_mask,
            attention_mask=attention_mask,
            return_attention_scores=return_attention_scores,
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
        # The self-attention layer's spec refuses a float or wrong-length mask when the model is
        # built, and gives the scores'.
        attention = self._self_attention_layer.compute_output_spec(
            inputs, padding_mask, attention_mask, return_attention_scores=return_attention_scores
        )
        outputs = keras.KerasTensor(inputs.shape, self.compute_dtype)
        return (outputs, attention[1]) if return_attention_scores else outputs

    def compute_output_shape(self, inputs_shape):
        return tuple(inputs_shape)
