import inspect

import keras
from keras import ops

from keras_attn import checks
from keras_attn.layers.arguments_config import ArgumentsConfig
from keras_attn.layers.projection import Projection


def clone_initializer(initializer):
    """A fresh copy of `initializer` for one sublayer, as
    `keras.layers.MultiHeadAttention` makes.

    An initializer object repeats its draw: an unseeded one fixes its seed
    when it is made (so does the one `keras.initializers.get("glorot_uniform")`
    returns), and one object shared by several sublayers would give them
    identical kernels (query = key = value projections). A copy made from
    the config of an unseeded initializer draws a seed of its own; a
    seeded one keeps its seed, as the user asked. A plain function (which
    `keras.initializers.get` accepts) is returned as it is.
    """
    if not isinstance(initializer, keras.initializers.Initializer):
        return initializer
    return initializer.__class__.from_config(initializer.get_config())


def bound_call_arguments(layer, args, kwargs):
    """The arguments of `layer.call(*args, **kwargs)` by name, defaults filled
    in: what `compute_output_spec(self, *args, **kwargs)` reads, so the call
    signature is written once, on `call`.

    Args:
        layer: the layer.
        args, kwargs: the arguments Keras passes on (KerasTensors or values).

    Returns:
        A dict from each parameter name of `layer.call` to its value.
    """
    bound = inspect.signature(layer.call).bind(*args, **kwargs)
    bound.apply_defaults()
    return bound.arguments


class AttentionBase(ArgumentsConfig, keras.layers.Layer):
    """Constructor arguments, config and sublayer factories shared by every
    attention layer of the library (not exported: use a concrete layer).

    The arguments (`num_heads`, `key_dim`, `value_dim`, `dropout`,
    `use_bias`, `output_dim`, `kernel_initializer`, `bias_initializer`,
    `seed`) are documented on the public layers, `MultiHeadSelfAttention`
    and `MultiHeadAttention`, and mean what they mean in
    `keras.layers.MultiHeadAttention`. Each projection gets its own copy of
    an initializer (see `clone_initializer`).

    Raises:
        ValueError: if a size is not a positive integer or `dropout` is not
            in [0, 1).
    """

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

    def _make_dense(self, units, name):
        return Projection(
            units,
            use_bias=self.use_bias,
            kernel_initializer=clone_initializer(self.kernel_initializer),
            bias_initializer=clone_initializer(self.bias_initializer),
            dtype=self.dtype_policy,
            name=name,
        )

    def _cached_keys_values(self, cache, dtype):
        """The keys (B, H, K, L) and values (B, H, V, L) of a cache laid out
        heads first, (B, H, K + V, L) (`MultiHeadSelfAttention.init_cache`,
        `MultiHeadAttention.compute_cache`), read in place."""
        cache = ops.cast(cache, dtype)  # slices, not split: any axis may be unknown here
        return cache[:, :, : self.key_dim], cache[:, :, self.key_dim :]

    def _make_dropout(self):
        if not self.dropout:
            return None
        return keras.layers.Dropout(
            self.dropout, seed=self.seed, dtype=self.dtype_policy, name="attention_dropout"
        )
