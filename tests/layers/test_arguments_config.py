"""`ArgumentsConfig`: a keras_attn layer's config is its constructor
arguments, read back from attributes; a user's subclass is left to its own
`get_config`, as with any Keras layer."""

import keras
import numpy as np
import pytest

from keras_attn.layers import (
    MultiHeadSelfAttention,
    SinusoidalPositionEncoding,
    TokenAndPositionEmbedding,
    TransformerDecoder,
)


def _extra(layer):
    """The config entries beyond keras.layers.Layer's, in order."""
    base = keras.layers.Layer().get_config()
    return {k: v for k, v in layer.get_config().items() if k not in base}


def test_arguments_in_signature_order_serialized_as_keras_does():
    attention = MultiHeadSelfAttention(num_heads=2, key_dim=4, name="attention")
    decoder = TransformerDecoder(
        8,
        num_heads=2,
        activation="gelu",
        self_attention=attention,
        kernel_initializer=keras.initializers.Constant(0.5),
    )
    extra = _extra(decoder)
    assert extra["activation"] == "gelu"
    assert extra["kernel_initializer"] == keras.initializers.serialize(
        keras.initializers.Constant(0.5)
    )
    assert extra["self_attention"] == keras.layers.serialize(attention)
    assert list(extra) == [  # TransformerBlock's signature (the decoder adds none)
        "intermediate_dim",
        "num_heads",
        "key_dim",
        "dropout",
        "activation",
        "layer_norm_epsilon",
        "normalize_first",
        "self_attention",
        "kernel_initializer",
        "bias_initializer",
        "seed",
    ]
    assert _extra(SinusoidalPositionEncoding(max_wavelength=100)) == {"max_wavelength": 100}


class _ScaledAttention(MultiHeadSelfAttention):
    """A user's subclass that keeps its argument privately and writes its
    own get_config (the usual Keras pattern)."""

    def __init__(self, output_scale=1.0, **kwargs):
        super().__init__(**kwargs)
        self._output_scale = output_scale

    def call(self, inputs, **kwargs):
        return super().call(inputs, **kwargs) * self._output_scale

    def get_config(self):
        config = super().get_config()
        config["output_scale"] = self._output_scale
        return config


def test_a_user_subclass_keeps_its_own_get_config():
    layer = _ScaledAttention(output_scale=3.0, num_heads=2, key_dim=4)
    config = layer.get_config()
    assert config["output_scale"] == 3.0 and config["num_heads"] == 2
    x = np.random.default_rng(0).normal(size=(1, 3, 8)).astype("float32")
    restored = _ScaledAttention.from_config(config)
    restored.build(x.shape)
    layer.build(x.shape)
    restored.set_weights(layer.get_weights())
    np.testing.assert_allclose(restored(x), layer(x), rtol=1e-6)
    np.testing.assert_allclose(layer(x), 3.0 * MultiHeadSelfAttention.call(layer, x), rtol=1e-6)


def test_a_missing_attribute_names_the_argument():
    layer = TokenAndPositionEmbedding(10, 4, 6)
    object.__delattr__(layer, "mask_zero")
    with pytest.raises(
        AttributeError, match="TokenAndPositionEmbedding has no attribute for argument `mask_zero`"
    ):
        layer.get_config()
