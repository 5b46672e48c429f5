"""Compiling a generation function with the backend's XLA compiler."""

import functools

import keras


def compile_generation(fn, models):
    """Compiles a generation function with the backend's compiler (XLA).

    The strategies (`greedy_search`, `sample`, `beam_search`) are written
    with `keras.ops` loops over fixed-shape caches, so a function calling
    them compiles as one XLA program. What differs between backends is how
    a compiled function sees the model's weights, and that is what this
    helper takes care of:

    * TensorFlow: `tf.function(fn, jit_compile=True, autograph=False)`;
      the weights are `tf.Variable`s, read by reference.
    * JAX: `jax.jit` of `fn` run in a `keras.StatelessScope` that maps the
      models' variables to values passed in as an argument (the keras
      `stateless_call` pattern). A plain `jax.jit(fn)` also runs, but it
      bakes the weights into the program as constants at trace time: after
      `fit` or `set_weights` it would keep generating with the old weights
      (and large models compile slower). Here the current weights are
      passed on every call; the program is traced once per input shape.
    * Other backends (torch, numpy): `fn` itself, run eagerly.

    Args:
        fn: a function of tensors (prompts, source tokens, a seed...)
            calling the generation functions. Close over what must be
            static (a Python value the loop's shapes depend on):
            `max_length`, `num_beams`, `end_token_id`, `pad_token_id`,
            `suppressed_token_ids`, Python `top_k`. Its arguments are
            traced: pass arrays (on JAX a Python number becomes a traced
            scalar, and a Python `top_k` would take the run-time `top_k`
            path).
        models: the `keras.Model` (or layer) whose weights `fn` reads, or a
            list of them; a `CachedDecoder` / `RecomputingDecoder` stands
            for its `model`. Built, so that its variables exist.

    Returns:
        A function with `fn`'s signature and results, compiled (see above).

    Raises:
        ValueError: if `fn` is not callable, or `models` is not one or more
            built Keras layers (or decoders with a `model`).

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
        # Only reached when TensorFlow is the Keras backend (hence already
        # imported): the module stays importable without TensorFlow.
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
    # On JAX, the weights of a model not named would be constants of the
    # program: after `fit` or `set_weights` it would generate with the old ones.
    if not layers or not all(isinstance(x, keras.layers.Layer) and x.built for x in layers):
        raise ValueError(
            "`models` must be the built Keras models (or layers, or decoders with a `model`) "
            "whose weights the generation function reads, at least one, so that it sees their "
            f"current values; build a model by calling it once. Received: models={models!r}."
        )
    variables, seen = [], set()
    for layer in layers:
        # `variables` includes non-trainable ones and seed-generator states.
        for variable in layer.variables:
            if id(variable) not in seen:
                seen.add(id(variable))
                variables.append(variable)
    return variables
