"""`ArgumentsConfig`: the config is the constructor arguments, read back from
attributes; what it serializes and how it fails."""

import keras
import pytest

from keras_attn.layers.arguments_config import ArgumentsConfig


class _Base(ArgumentsConfig, keras.layers.Layer):
    def __init__(self, units, activation="relu", initializer="zeros", **kwargs):
        super().__init__(**kwargs)
        self.units = units
        self.activation = keras.activations.get(activation)
        self.initializer = keras.initializers.get(initializer)


class _Child(_Base):
    def __init__(self, units, inner=None, *args, **kwargs):
        super().__init__(units, **kwargs)
        self.inner = inner


class _Closed(_Base):
    """No **kwargs: the arguments of `_Base` are not reachable."""

    def __init__(self, size):
        super().__init__(units=size, name="closed")
        self.size = size


class _Forgetful(ArgumentsConfig, keras.layers.Layer):
    def __init__(self, rate, **kwargs):
        super().__init__(**kwargs)


def test_config_holds_every_argument_serialized_as_keras_does():
    inner = keras.layers.Dense(3, name="inner")
    layer = _Child(4, inner=inner, activation="gelu",
                   initializer=keras.initializers.Constant(0.5), name="child")
    config = layer.get_config()
    base = keras.layers.Layer().get_config()
    extra = {k: v for k, v in config.items() if k not in base}
    assert extra == {
        "units": 4,
        "activation": "gelu",
        "initializer": keras.initializers.serialize(keras.initializers.Constant(0.5)),
        "inner": keras.layers.serialize(inner),
    }
    assert list(extra) == ["units", "inner", "activation", "initializer"]  # signature order
    restored = _Child.from_config(config)
    assert restored.get_config() == config


def test_arguments_stop_where_kwargs_stop():
    config = _Closed(5).get_config()
    assert config["size"] == 5
    assert "units" not in config and "activation" not in config


def test_a_missing_attribute_names_the_argument():
    with pytest.raises(AttributeError, match="_Forgetful has no attribute `rate`"):
        _Forgetful(0.1).get_config()
