import math

import keras

from keras_attn import checks
from keras_attn.layers.arguments_config import ArgumentsConfig
from keras_attn.layers.attention_base import clone_initializer
from keras_attn.layers.layer_norm import LayerNorm
from keras_attn.layers.multi_head_self_attention import MultiHeadSelfAttention
from keras_attn.layers.projection import Projection


class TransformerBlock(ArgumentsConfig, keras.layers.Layer):
    """The self-attention, feed-forward network and residual + layer-norm wiring that
    `TransformerEncoder` and `TransformerDecoder` share (not exported). Arguments are
    documented on those two classes.
    """

    # True where `num_heads` and `key_dim` size only the default self-attention (the encoder):
    # given with a `self_attention` layer they would be ignored, so they are refused.
    _sizes_only_self_attention = False

    def __init__(
        self,
        intermediate_dim,
        num_heads=None,
        key_dim=None,
        dropout=0.0,
        activation="relu",
        layer_norm_epsilon=1e-5,
        normalize_first=False,
        self_attention=None,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        seed=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        sizes = {"intermediate_dim": intermediate_dim, "num_heads": num_heads, "key_dim": key_dim}
        for name, value in sizes.items():
            if value is not None or name == "intermediate_dim":
                checks.check_positive_int(self, name, value)
        checks.check_rate(self, "dropout", dropout)
        checks.check_finite_positive_number(self, "layer_norm_epsilon", layer_norm_epsilon, "1e-5")
        checks.check_bool(self, "normalize_first", normalize_first, "True = pre-norm")
        checks.check_layer_seed(self, seed)
        if isinstance(self_attention, dict):
            # Built by `build`, in this block's name scope, so its variables keep their paths.
            self_attention = keras.layers.deserialize(
                {k: v for k, v in self_attention.items() if k != "build_config"}
            )
        if self_attention is None and num_heads is None:
            raise ValueError("Pass `num_heads` or a `self_attention` layer. Received neither.")
        if self_attention is not None:
            ok = hasattr(self_attention, "init_cache")
            checks.require(ok, "self_attention", self_attention, "a keras_attn attention layer")
            if self._sizes_only_self_attention and (num_heads, key_dim) != (None, None):
                raise ValueError(
                    "Pass `num_heads` and `key_dim`, or `self_attention`, not both. Received: "
                    f"num_heads={num_heads!r}, key_dim={key_dim!r}."
                )
        self.intermediate_dim = intermediate_dim
        self.num_heads = num_heads
        self.key_dim = key_dim
        self.dropout = dropout
        self.activation = keras.activations.get(activation)
        self.layer_norm_epsilon = layer_norm_epsilon
        self.normalize_first = normalize_first
        self.self_attention = self_attention
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.seed = seed
        self.supports_masking = True

    # ----------------------------------------------------------- sublayers
    def _dense(self, units, name, activation=None):
        return Projection(
            units,
            activation=activation,
            kernel_initializer=clone_initializer(self.kernel_initializer),
            bias_initializer=clone_initializer(self.bias_initializer),
            dtype=self.dtype_policy,
            name=name,
        )

    def _layer_norm(self, name):
        return LayerNorm(epsilon=self.layer_norm_epsilon, dtype=self.dtype_policy, name=name)

    def _dropout(self, name, offset):
        seed = None if self.seed is None else self.seed + offset
        return keras.layers.Dropout(self.dropout, seed=seed, dtype=self.dtype_policy, name=name)

    def _attention(self, attention_class, hidden_dim, name, offset):
        """An attention sublayer made by the block (seeded like `_dropout`), sized by the block's
        `num_heads` and `key_dim`, else the `self_attention` layer's, else D // num_heads."""
        num_heads = self.num_heads or self.self_attention.num_heads
        key_dim = self.key_dim
        if key_dim is None and self.self_attention is not None:
            key_dim = self.self_attention.key_dim
        if key_dim is None:
            if hidden_dim % num_heads:
                raise ValueError(
                    f"The model width {hidden_dim} is not divisible by num_heads={num_heads}. "
                    "Pass `key_dim` or change `num_heads`."
                )
            key_dim = hidden_dim // num_heads
        return attention_class(
            num_heads=num_heads,
            key_dim=key_dim,
            dropout=self.dropout,
            kernel_initializer=self.kernel_initializer,
            bias_initializer=self.bias_initializer,
            seed=None if self.seed is None else self.seed + offset,
            dtype=self.dtype_policy,
            name=name,
        )

    def _build_self_attention_and_feedforward(self, sequence_shape):
        sequence_shape = tuple(sequence_shape)  # its rank is checked by the self-attention layer
        checks.require(sequence_shape[-1] is not None, "inputs.shape", sequence_shape, "known D")
        hidden_dim = sequence_shape[-1]
        self._hidden_dim = hidden_dim
        if self.self_attention is None:
            self._self_attention_layer = self._attention(
                MultiHeadSelfAttention, hidden_dim, "self_attention", 0
            )
        else:
            self._self_attention_layer = self.self_attention
            output_dim = getattr(self.self_attention, "output_dim", None)
            if output_dim not in (None, hidden_dim):
                raise ValueError(
                    f"The self-attention and input widths must agree. Received output_dim="
                    f"{output_dim}, inputs.shape={sequence_shape}. Use output_dim=None."
                )
        # After `load_model` a nested layer arrives built: building it again
        # would create a second set of weights.
        if not self._self_attention_layer.built:
            self._self_attention_layer.build(sequence_shape)
        self._self_attention_norm = self._layer_norm("self_attention_norm")
        self._self_attention_norm.build(sequence_shape)
        self._self_attention_dropout = self._dropout("self_attention_dropout", 1)
        self._feedforward_intermediate = self._dense(
            self.intermediate_dim, "feedforward_intermediate", self.activation
        )
        self._feedforward_intermediate.build(sequence_shape)
        self._feedforward_output = self._dense(hidden_dim, "feedforward_output")
        self._feedforward_output.build(sequence_shape[:-1] + (self.intermediate_dim,))
        self._feedforward_norm = self._layer_norm("feedforward_norm")
        self._feedforward_norm.build(sequence_shape)
        self._feedforward_dropout = self._dropout("feedforward_dropout", 2)

    # ------------------------------------------------------------- wiring
    def _residual(self, x, norm, dropout, sublayer, training):
        """`norm(x + dropout(sublayer(x)))`, or pre-norm `x + dropout(sublayer(norm(x)))`; a
        tuple from `sublayer` passes its items after the first through."""
        result = sublayer(norm(x) if self.normalize_first else x)
        extras = ()
        if isinstance(result, tuple):
            result, extras = result[0], result[1:]
        y = x + dropout(result, training=training)
        if not self.normalize_first:
            y = norm(y)
        return (y,) + extras

    def _self_attention_block(self, x, training, **kwargs):
        """The self-attention sublayer with its residual; `kwargs` go to the attention layer."""

        def sublayer(h):
            return self._self_attention_layer(h, training=training, **kwargs)

        return self._residual(
            x, self._self_attention_norm, self._self_attention_dropout, sublayer, training
        )

    def _feedforward(self, x, training):
        def sublayer(h):
            return self._feedforward_output(self._feedforward_intermediate(h))

        return self._residual(
            x, self._feedforward_norm, self._feedforward_dropout, sublayer, training
        )[0]

    @staticmethod
    def _positions(shape):
        """T of a sequence (B, T, D), height * width of an image; None when not static."""
        spatial = tuple(shape)[1:-1]
        return None if None in spatial else math.prod(spatial)

    def compute_mask(self, inputs, previous_mask=None):
        return previous_mask
