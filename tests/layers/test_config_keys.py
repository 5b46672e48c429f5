"""The convention "`get_config` = base config + exactly the `__init__` arguments"
(docs/guides/attention_layers.md, Configs), checked for every public layer at once."""

import importlib
import inspect

import keras
import pytest

from keras_attn import layers

# The image layers live with their model (`keras_attn.models` exports a function of that name).
image_layers = importlib.import_module("keras_attn.models.image_transformer")
_IMAGE_LAYERS = {name for name in image_layers.__all__ if name[0].isupper() and name[1].islower()}

# The smallest arguments each public layer accepts.
_REQUIRED = {
    "LayerNorm": {},
    "LocalBlockAttention": dict(num_heads=2, key_dim=4, block_size=4),
    "LowResolutionBlockSums": dict(image_size=8, low_resolution_size=4),
    "LowResolutionEmbedding": dict(embedding_dim=8, image_size=8, low_resolution_size=4),
    "LowResolutionLogitBias": dict(image_size=8, low_resolution_size=4),
    "LowResolutionValues": dict(image_size=8, low_resolution_size=4),
    "MultiHeadAttention": dict(num_heads=2, key_dim=4),
    "MultiHeadSelfAttention": dict(num_heads=2, key_dim=4),
    "PixelEmbedding": dict(vocabulary_size=10, embedding_dim=8, image_size=4),
    "PixelPositionEncoding": dict(image_size=4),
    "RelativeGlobalAttention": dict(num_heads=2, key_dim=4, max_relative_position=4),
    "SequenceDelay": dict(delay=2),
    "SinusoidalPositionEncoding": {},
    "TokenAndPositionEmbedding": dict(vocabulary_size=10, embedding_dim=8, sequence_length=4),
    "TokenEmbedding": dict(input_dim=10, output_dim=4),
    "TransformerDecoder": dict(intermediate_dim=8, num_heads=2),
    "TransformerEncoder": dict(intermediate_dim=8, num_heads=2),
}


def _init_arguments(cls):
    """The named `__init__` parameters of `cls` and of the keras_attn classes
    its `**kwargs` reach, down to `keras.layers.Layer`."""
    names = set()
    for klass in cls.__mro__:
        if klass is keras.layers.Layer:
            break
        if not issubclass(klass, keras.layers.Layer) or "__init__" not in vars(klass):
            continue  # a mixin (LocalBlockAttention's pieces) or no constructor of its own
        parameters = inspect.signature(klass.__init__).parameters
        names |= {
            name
            for name, p in parameters.items()
            if name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        }
        if not any(p.kind == p.VAR_KEYWORD for p in parameters.values()):
            break
    return names


def test_every_public_layer_is_listed():
    assert set(_REQUIRED) == set(layers.__all__) | _IMAGE_LAYERS


@pytest.mark.parametrize("name", sorted(_REQUIRED))
def test_get_config_holds_exactly_the_init_arguments(name):
    cls = getattr(image_layers if name in _IMAGE_LAYERS else layers, name)
    layer = cls(**_REQUIRED[name])
    base = set(keras.layers.Layer().get_config())
    init_owner = next(k for k in cls.__mro__ if "__init__" in vars(k))
    if init_owner.__module__.startswith("keras."):
        # A keras layer with another `call` (TokenEmbedding: Embedding): its config is its
        # keras base's, whose own convention it keeps.
        expected = set(init_owner(**_REQUIRED[name]).get_config())
        assert set(layer.get_config()) == expected
    else:
        assert set(layer.get_config()) - base == _init_arguments(cls)
    restored = cls.from_config(layer.get_config())
    assert restored.get_config() == layer.get_config()
