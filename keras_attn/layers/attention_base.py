import inspect

import keras
from keras import ops

from keras_attn import checks
from keras_attn.layers.arguments_config import ArgumentsConfig
from keras_attn.layers.projection import Projection


def clone_initializer(initializer):
    """A fresh copy of `initializer` for one sublayer, as `keras.layers.MultiHeadAttention`
    makes: one shared initializer object would give its sublayers identical kernels."""
    if not isinstance(initializer, keras.initializers.Initializer):
        return initializer
    return initializer.__class__.from_config(initializer.get_config())


def bound_call_arguments(layer, args, kwargs):
    """The arguments of `layer.call(*args, **kwargs)` by name, defaults filled in (for
    `compute_output_spec`, so the call signature is written once)."""
    bound = inspect.signature(layer.call).bind(*args, **kwargs)
    bound.apply_defaults()
    return bound.arguments


def call_results(*results):
    """A call's results less the Nones (those not asked for): one alone, else a tuple."""
    results = tuple(result for result in results if result is not None)
    return results[0] if len(results) == 1 else results


class AttentionBase(ArgumentsConfig, keras.layers.Layer):
    """Constructor arguments, config and sublayers of the attention layers (not exported);
    the arguments are documented on `MultiHeadSelfAttention` and `MultiHeadAttention`."""

    def __init__(
        self,
        num_heads,
        key_dim,
        value_dim=None,
        dropout=0.0,
        use_bias=True,
        output_dim=None,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        seed=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        optional = {"value_dim": value_dim, "output_dim": output_dim}
        for name, value in {"num_heads": num_heads, "key_dim": key_dim, **optional}.items():
            if value is not None or name not in optional:
                checks.check_positive_int(self, name, value)
        checks.check_rate(self, "dropout", dropout)
        checks.check_bool(self, "use_bias", use_bias, "True = the projections have biases")
        checks.check_layer_seed(self, seed)
        self.num_heads = num_heads
        self.key_dim = key_dim
        self.value_dim = value_dim
        self.dropout = dropout
        self.use_bias = use_bias
        self.output_dim = output_dim
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.seed = seed
        self.supports_masking = True
        self._value_dim = value_dim or key_dim

    def _make_dense(self, units, name, inputs_shape):
        """A projection to `units` features, built for inputs of `inputs_shape`."""
        dense = Projection(
            units,
            use_bias=self.use_bias,
            kernel_initializer=clone_initializer(self.kernel_initializer),
            bias_initializer=clone_initializer(self.bias_initializer),
            dtype=self.dtype_policy,
            name=name,
        )
        dense.build(inputs_shape)
        return dense

    def _cached_keys_values(self, cache, dtype):
        """The keys (B, H, K, L) and values (B, H, V, L) of a (B, H, K + V, L) cache."""
        cache = ops.cast(cache, dtype)  # slices, not split: any axis may be unknown here
        return cache[:, :, : self.key_dim], cache[:, :, self.key_dim :]

    def _make_dropout(self):
        if not self.dropout:
            return None
        return keras.layers.Dropout(
            self.dropout, seed=self.seed, dtype=self.dtype_policy, name="attention_dropout"
        )
