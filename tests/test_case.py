"""The shared layer test: one function that runs a layer through everything
a Keras user will do with it, checking values at each step; and `gradients`,
the backend-neutral gradient used by the gradient checks."""

import os
import tempfile

import keras
import numpy as np


def property_examples(count):
    """Hypothesis examples of a property test: `count` on TensorFlow, a
    third of it (at least 5) on other backends. JAX compiles every new
    shape an example draws, so one example costs seconds there; the
    TensorFlow run checks the full count, the JAX run that the backend's
    own paths hold on a sample."""
    if keras.backend.backend() == "tensorflow":
        return count
    return max(5, count // 3)


def traced(function):
    """`function` traced as the backend traces (`tf.function` on TensorFlow,
    `jax.jit` on JAX), for checks that only run on traced values; skips the
    test on backends with no traced values."""
    import pytest

    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        return tf.function(function)
    if backend == "jax":
        import jax

        return jax.jit(function)
    pytest.skip(f"no traced values on {backend}")


def gradients(fn, inputs, variables):
    """Gradients of `fn` on the current Keras backend: `tf.GradientTape` on
    TensorFlow, `jax.grad` on JAX, so gradient checks (finite gradients on
    fully masked rows, ...) run on every backend the suite runs on.

    Args:
        fn: `fn(*inputs)` returns `(loss, aux)`: a float scalar to
            differentiate, and anything to hand back with the gradients
            (the outputs, say).
        inputs: float arrays, differentiated (others: close over them).
        variables: a list of Keras variables, or a layer / model whose
            trainable weights are differentiated. A layer that is not built
            yet is built by one call of `fn` first (on JAX the weights must
            exist before differentiating).

    Returns:
        `(aux, grads)`: grads are backend tensors, one per input, then one
        per variable.
    """
    inputs = [keras.ops.convert_to_tensor(x) for x in inputs]
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        with tf.GradientTape() as tape:
            tape.watch(inputs)
            loss, aux = fn(*inputs)
        if isinstance(variables, keras.layers.Layer):
            variables = variables.trainable_weights
        grads = tape.gradient(loss, inputs + list(variables))
        # Dense, as on JAX (a gather's gradient comes as IndexedSlices).
        return aux, [g if g is None else tf.convert_to_tensor(g) for g in grads]
    if backend == "jax":
        import jax

        if isinstance(variables, keras.layers.Layer):
            if not variables.built:
                fn(*inputs)
            variables = variables.trainable_weights
        variables = list(variables)

        def pure(input_values, variable_values):
            # Reads of the variables inside `fn` see the traced values.
            with keras.StatelessScope(state_mapping=list(zip(variables, variable_values))):
                return fn(*input_values)

        (_, aux), (input_grads, variable_grads) = jax.value_and_grad(
            pure, argnums=(0, 1), has_aux=True
        )(inputs, [v.value for v in variables])
        return aux, list(input_grads) + list(variable_grads)
    if backend == "torch":
        import torch

        inputs = [x.detach().requires_grad_(x.is_floating_point()) for x in inputs]
        if isinstance(variables, keras.layers.Layer):
            if not variables.built:
                fn(*inputs)
            variables = variables.trainable_weights
        targets = inputs + [v.value for v in variables]
        loss, aux = fn(*inputs)
        grads = torch.autograd.grad(loss, targets, allow_unused=True)
        # Unused inputs get zeros, as on JAX.
        return aux, [torch.zeros_like(t) if g is None else g for t, g in zip(targets, grads)]
    raise NotImplementedError(f"`gradients` has no implementation for the {backend!r} backend.")


def decode_in_chunks(layer, x, chunks, cache, attention_mask=None, **call_kwargs):
    """Runs `x` (B, T, D) through a self-attention layer's cache, `chunks`
    positions per call (causal, scores asked for), from `cache_index` 0.
    `attention_mask` (B, [H,] T, S), if given, passes each call the rows of
    its queries.

    Returns:
        NumPy (outputs (B, sum(chunks), ·), scores (B, H, sum(chunks), S)),
        concatenated over the calls.
    """
    outputs, score_rows, index = [], [], 0
    for size in chunks:
        if attention_mask is not None:
            call_kwargs["attention_mask"] = attention_mask[..., index : index + size, :]
        y, scores, cache = layer(
            x[:, index : index + size],
            cache=cache,
            cache_index=index,
            use_causal_mask=True,
            return_attention_scores=True,
            **call_kwargs,
        )
        outputs.append(np.asarray(y))
        score_rows.append(np.asarray(scores))
        index += size
    return np.concatenate(outputs, axis=1), np.concatenate(score_rows, axis=2)


def run_layer_test(
    layer_cls,
    init_kwargs,
    input_data,
    call_kwargs=None,
    expected_output_shape=None,
    expected_num_trainable_weights=None,
    expected_num_seed_generators=None,
    run_mixed_precision=True,
    run_saved_model=True,
    run_fit=True,
):
    """Runs `layer_cls(**init_kwargs)` through the life of a Keras layer.

    1. `get_config` / `from_config` round trip gives the same config.
    2. Eager call: output shape, finite values; the trainable-weight and
       seed-generator counts.
    3. Functional model over symbolic inputs: same values as the eager layer.
    4. One `fit` step changes the weights and gives a finite loss.
    5. `.keras` save / load: identical outputs, the class is restored.
    6. Fresh instance from config + `set_weights`: identical outputs (no
       silently re-initialised sublayer).
    7. Mixed precision (mixed_float16, mixed_bfloat16): finite outputs close
       to float32 with the same weights.
    8. SavedModel export (`model.export`) reloaded with `tf.saved_model.load`:
       same values (on the TensorFlow backend only).

    Args:
        layer_cls: the layer class.
        init_kwargs: constructor arguments.
        input_data: a NumPy array (the first call argument), or a dict of
            them by call-argument name (e.g. `{"query": q, "value": v}`,
            `{"decoder_sequence": x, "encoder_sequence": m}`): each becomes a
            named `keras.Input` of the model.
        call_kwargs: other call arguments (constants, not symbolic inputs).
        expected_output_shape: checked against the eager output.
        expected_num_trainable_weights: checked after the first call.
        expected_num_seed_generators: `keras.random.SeedGenerator`s the layer
            and its sublayers own (dropout), checked after the first call.
        run_mixed_precision, run_saved_model, run_fit: switch steps off.

    Returns:
        The float32 model used (inputs -> layer outputs).
    """
    call_kwargs = call_kwargs or {}
    named = isinstance(input_data, dict)
    arrays = input_data if named else {"inputs": input_data}
    batch_size = len(next(iter(arrays.values())))

    def functional(layer):
        inputs = {
            name: keras.Input(shape=x.shape[1:], dtype=str(x.dtype), name=name)
            for name, x in arrays.items()
        }
        if named:
            return keras.Model(inputs, layer(**inputs, **call_kwargs))
        return keras.Model(inputs["inputs"], layer(inputs["inputs"], **call_kwargs))

    def eager(layer):
        if named:
            return np.asarray(layer(**input_data, **call_kwargs))
        return np.asarray(layer(input_data, **call_kwargs))

    # 1. Config round trip.
    layer = layer_cls(**init_kwargs)
    config = layer.get_config()
    clone = layer_cls.from_config(config)
    assert clone.get_config() == config, (clone.get_config(), config)

    # 2 + 3. Functional model, then eager call of the same layer.
    model = functional(layer)
    model_out = np.asarray(model(input_data))
    eager_out = eager(layer)
    if expected_output_shape is not None:
        assert eager_out.shape == tuple(expected_output_shape), eager_out.shape
    assert np.isfinite(eager_out).all()
    np.testing.assert_allclose(model_out, eager_out, rtol=1e-5, atol=1e-5)
    if expected_num_trainable_weights is not None:
        assert len(layer.trainable_weights) == expected_num_trainable_weights, [
            w.path for w in layer.trainable_weights
        ]
    if expected_num_seed_generators is not None:
        seed_states = [v for v in layer.non_trainable_variables if "seed_generator" in v.path]
        assert len(seed_states) == expected_num_seed_generators, [v.path for v in seed_states]

    # 4. One fit step.
    if run_fit:
        before = [np.array(w) for w in model.trainable_weights]
        model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
        history = model.fit(
            input_data, np.ones_like(eager_out), epochs=1, batch_size=batch_size, verbose=0
        )
        assert np.isfinite(history.history["loss"][0])
        after = [np.array(w) for w in model.trainable_weights]
        assert any(not np.allclose(b, a) for b, a in zip(before, after)), "fit changed nothing"
        model_out = np.asarray(model(input_data))

    with tempfile.TemporaryDirectory() as tmp:
        # 5. .keras round trip.
        path = os.path.join(tmp, "model.keras")
        model.save(path)
        reloaded = keras.saving.load_model(path)
        assert any(isinstance(x, layer_cls) for x in reloaded.layers)
        np.testing.assert_allclose(
            np.asarray(reloaded(input_data)), model_out, rtol=1e-5, atol=1e-5
        )

        # 6. Fresh instance from the config, weights set explicitly.
        fresh_model = functional(layer_cls.from_config(layer.get_config()))
        assert len(fresh_model.weights) == len(model.weights)
        fresh_model.set_weights(model.get_weights())
        np.testing.assert_allclose(
            np.asarray(fresh_model(input_data)), model_out, rtol=1e-5, atol=1e-5
        )

        # 7. Mixed precision, same weights.
        if run_mixed_precision:
            for policy, tolerance in (("mixed_float16", 2e-2), ("mixed_bfloat16", 1e-1)):
                mixed_model = functional(
                    layer_cls.from_config({**layer.get_config(), "dtype": policy})
                )
                mixed_model.set_weights(model.get_weights())
                out = np.asarray(mixed_model(input_data)).astype("float32")
                assert np.isfinite(out).all(), policy
                scale = max(1.0, float(np.abs(model_out).max()))
                np.testing.assert_allclose(out, model_out, atol=tolerance * scale, err_msg=policy)

        # 8. SavedModel: TensorFlow's format, checked on TensorFlow only.
        if run_saved_model and keras.backend.backend() == "tensorflow":
            import tensorflow as tf

            export_dir = os.path.join(tmp, "export")
            model.export(export_dir, verbose=False)
            served = tf.saved_model.load(export_dir)
            np.testing.assert_allclose(
                np.asarray(served.serve(input_data)), model_out, rtol=1e-4, atol=1e-4
            )
    return model
