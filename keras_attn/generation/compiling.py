"""Compiling a generation function with the backend's XLA compiler."""

import functools

import keras


def compile_generation(fn, models):
    """Compiles a generation function with the backend's XLA compiler.

    TensorFlow: `tf.function(fn, jit_compile=True, autograph=False)`. JAX: `jax.jit` with the
    models' weights passed as state on every call (a plain `jax.jit` would keep the weights of
    its trace after `fit`). Other backends: `fn`, eagerly (docs/guides/decoding.md).

    Args:
        fn: a function of tensors calling the generation functions; close over what must be
            static (`max_length`, `num_beams`, the ids, a Python `top_k`).
        models: the built `keras.Model` (or layer, or decoder) whose weights `fn` reads, or a
            list of them.

    Returns:
        A function with `fn`'s signature and results, compiled.

    Raises:
        ValueError: if `fn` is not callable, or `models` is not one or more built Keras layers.

    Example:
    >>> import keras
    >>> from keras_attn.generation import compile_generation, greedy_search
    >>> from keras_attn.models import translation_transformer
    >>> model = translation_transformer(50, num_layers=1, hidden_dim=16,
    ...                                 num_heads=2, intermediate_dim=32)
    >>> def translate(source, start):
    ...     return greedy_search(model, start, max_length=10, end_token_id=2,
    ...                          inputs={"encoder_tokens": source})
    >>> translate = compile_generation(translate, model)
    >>> tokens = translate(keras.ops.array([[5, 6, 7, 2]]), keras.ops.array([[1]]))
    >>> tuple(tokens.shape)
    (1, 10)
    """
    if not callable(fn):
        raise ValueError(f"`fn` must be a callable. Received: fn={fn!r}.")
    variables = _variables(models)
    backend = keras.backend.backend()
    if backend == "jax":
        return _jax_compile(fn, variables)
    if backend == "tensorflow":
        import tensorflow as tf

        return tf.function(fn, jit_compile=True, autograph=False)
    return fn


def _jax_compile(fn, variables):
    import jax

    def stateless(values, args, kwargs):
        with keras.StatelessScope(state_mapping=list(zip(variables, values))):
            return fn(*args, **kwargs)

    compiled = jax.jit(stateless)

    @functools.wraps(fn)
    def call(*args, **kwargs):
        return compiled([variable.value for variable in variables], args, kwargs)

    return call


def _variables(models):
    given = models if isinstance(models, (list, tuple)) else [models]
    layers = [getattr(model, "model", model) for model in given]
    if not layers or not all(isinstance(x, keras.layers.Layer) and x.built for x in layers):
        raise ValueError(
            "`models` must be the built Keras models (or layers, or decoders with a `model`) "
            f"whose weights `fn` reads: build one by calling it. Received: models={models!r}."
        )
    # `variables` includes non-trainable ones and seed-generator states; shared ones count once.
    unique = {id(variable): variable for layer in layers for variable in layer.variables}
    return list(unique.values())
