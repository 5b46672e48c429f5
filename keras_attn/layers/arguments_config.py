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


class ArgumentsConfig:
    """Mixin giving a Keras layer the `get_config` of the convention.

    Put it before the Keras base class (`class L(ArgumentsConfig,
    keras.layers.Layer)`). The config is the base layer's (name, dtype,
    trainable) plus, for every named `__init__` argument of the class and of
    the keras_attn classes its `**kwargs` reach, the attribute of that name:
    initializers, activations and layers serialized as Keras does, every
    other value as it is.

    A layer that keeps some arguments elsewhere (e.g. in a helper object)
    overrides `_argument_value(name)`.

    Raises:
        AttributeError: from `get_config`, naming the argument, when the
            layer stores no attribute for it (a layer that breaks the
            convention fails on first save, not on reload).

    Example:
    >>> import keras
    >>> class Scale(ArgumentsConfig, keras.layers.Layer):
    ...     def __init__(self, factor=2.0, **kwargs):
    ...         super().__init__(**kwargs)
    ...         self.factor = factor
    >>> Scale(3.0, name="scale").get_config()["factor"]
    3.0
    """

    def get_config(self):
        config = super().get_config()
        for name in _argument_names(type(self)):
            config[name] = _serialize(self._argument_value(name))
        return config

    def _argument_value(self, name):
        try:
            return getattr(self, name)
        except AttributeError:
            raise AttributeError(
                f"{type(self).__name__} has no attribute `{name}` for its "
                f"`__init__` argument `{name}`: the config is read from the "
                "attributes named after the arguments."
            ) from None


@functools.cache
def _argument_names(cls):
    """The named `__init__` parameters of `cls` and of the classes below it
    that its `**kwargs` reach, stopping at Keras's own classes."""
    names = []
    for klass in cls.__mro__:
        if klass.__module__.startswith("keras.") or klass is object:
            break
        if "__init__" not in vars(klass):
            continue
        parameters = inspect.signature(klass.__init__).parameters.values()
        for p in parameters:
            if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                if p.name not in names:
                    names.append(p.name)
        if not any(p.kind == p.VAR_KEYWORD for p in parameters):
            break
    return tuple(names)


def _serialize(value):
    if isinstance(value, keras.layers.Layer):
        return keras.layers.serialize(value)
    if isinstance(value, keras.initializers.Initializer):
        return keras.initializers.serialize(value)
    if callable(value):
        return keras.activations.serialize(value)
    return value
