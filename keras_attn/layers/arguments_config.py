"""`get_config` written once: a layer's config is its constructor arguments.

The convention of DESIGN.md ("store each `__init__` argument as a public
attribute of the same name; `get_config` = base config + exactly those
arguments") made every layer write the same dictionary of `self.x` entries.
`ArgumentsConfig` builds it from the `__init__` signatures instead, so a new
argument needs its attribute and nothing else.
"""

import functools
import inspect

import keras

_PACKAGE = __name__.split(".")[0] + "."  # "keras_attn."


class ArgumentsConfig:
    """Mixin giving keras_attn's layers the `get_config` of the convention.

    Put it before the Keras base class (`class L(ArgumentsConfig,
    keras.layers.Layer)`). The config is the base layer's (name, dtype,
    trainable) plus every named `__init__` argument of the keras_attn
    classes in the layer's MRO, read from the attribute of that name:
    initializers, activations and layers serialized as Keras does, every
    other value as it is.

    A user's subclass is not read: like any Keras subclass it adds its own
    arguments in its own `get_config` (calling `super().get_config()`),
    from wherever it keeps them.

    Raises:
        AttributeError: from `get_config`, naming the argument, when a
            keras_attn layer stores no attribute for it (a layer that breaks
            the convention fails on its first save, not on reload).

    Example:
    >>> from keras_attn.layers import SequenceDelay
    >>> config = SequenceDelay(delay=2, name="delay").get_config()
    >>> config["delay"], config["fill_value"]
    (2, 0)
    """

    def get_config(self):
        config = super().get_config()
        for name in _argument_names(type(self)):
            if not hasattr(self, name):
                raise AttributeError(
                    f"{type(self).__name__} has no attribute `{name}` for its "
                    f"`__init__` argument `{name}`: the config reads it there."
                )
            config[name] = _serialize(getattr(self, name))
        return config


@functools.cache
def _argument_names(cls):
    """The named `__init__` parameters of the keras_attn classes in the MRO
    of `cls`, most derived first."""
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
