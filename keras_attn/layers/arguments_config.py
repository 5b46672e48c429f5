"""`get_config` written once: a keras_attn layer's config is its `__init__` arguments."""

import functools
import inspect

import keras

_PACKAGE = __name__.split(".")[0] + "."  # "keras_attn."


class ArgumentsConfig:
    """Mixin (before the Keras base class) whose `get_config` is the base layer's plus every
    named `__init__` argument of the keras_attn classes in the MRO, read from the attribute of
    the same name (initializers, activations and layers serialized as Keras does). A user's
    subclass adds its own arguments in its own `get_config`, as with any Keras layer.

    Raises:
        AttributeError: from `get_config`, when a keras_attn layer has no attribute for an
            argument.

    Example:
    >>> from keras_attn.layers import SinusoidalPositionEncoding
    >>> SinusoidalPositionEncoding(max_wavelength=100).get_config()["max_wavelength"]
    100
    """

    def get_config(self):
        config = super().get_config()
        for name in _argument_names(type(self)):
            if not hasattr(self, name):
                raise AttributeError(
                    f"{type(self).__name__} has no attribute for argument `{name}`."
                )
            config[name] = _serialize(getattr(self, name))
        return config


@functools.cache
def _argument_names(cls):
    """The named `__init__` parameters of the keras_attn classes in the MRO of `cls`."""
    names = []
    for klass in cls.__mro__:
        if not klass.__module__.startswith(_PACKAGE) or "__init__" not in vars(klass):
            continue
        for p in inspect.signature(klass.__init__).parameters.values():
            if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                if p.name not in names:
                    names.append(p.name)
    return tuple(names)


def _serialize(value):
    if isinstance(value, keras.layers.Layer):
        return keras.layers.serialize(value)
    if isinstance(value, keras.initializers.Initializer):
        return keras.initializers.serialize(value)
    if callable(value):
        return keras.activations.serialize(value)
    return value
