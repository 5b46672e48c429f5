"""The strategies under `jax.jit` (XLA) on the JAX backend: token for token
the eager result, with the weights passed in as state (`compile_generation`)
so that a compiled function follows weight updates."""

import keras
import numpy as np
import pytest

from keras_attn.generation import (
    CachedDecoder,
    RecomputingDecoder,
    beam_search,
    compile_generation,
    greedy_search,
    sample,
)
from tests.generation import tiny_models

pytestmark = pytest.mark.skipif(
    keras.backend.backend() != "jax", reason="jax.jit needs KERAS_BACKEND=jax"
)


def _assert_equal(got, want):
    for g, w in zip(got, want):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w))


def test_jitted_strategies_equal_eager_encoder_decoder():
    model = tiny_models.sharpen(tiny_models.translation_model(num_layers=1), 2.0)
    decoder = CachedDecoder(model)

    def run(source, prompt, seed):
        inputs = {"encoder_tokens": source}
        return (
            greedy_search(decoder, prompt, 8, end_token_id=4, inputs=inputs),
            beam_search(decoder, prompt, 8, num_beams=3, end_token_id=4, inputs=inputs),
            sample(decoder, prompt, 8, seed=seed, top_p=0.9, end_token_id=4, inputs=inputs),
        )

    args = (tiny_models.SOURCE, np.ones((2, 1), "int32"), np.array([7, 0], "int32"))
    eager = run(*args)
    _assert_equal(compile_generation(run, decoder)(*args), eager)


@pytest.mark.parametrize(
    "kind",
    [
        kind if kind == "multi_head" else pytest.param(kind, marks=pytest.mark.slow)
        for kind in tiny_models.KINDS
    ],
)
def test_jitted_decoder_only_every_attention_type(kind):
    model = tiny_models.sharpen(tiny_models.language_model(kind, num_layers=2), 2.0)
    prompt = np.array([[3, 4, 0, 0], [7, 1, 9, 2]], "int32")

    def run(prompt):
        return tiny_models.three_strategies(model, prompt)

    eager = run(prompt)
    _assert_equal(compile_generation(run, model)(prompt), eager)
    # A plain `jax.jit` closing over the model gives the same tokens too
    # (the weights then become constants of the program).
    import jax

    _assert_equal(jax.jit(run)(prompt), eager)


def test_compiled_generation_follows_weight_updates_and_traces_once():
    model = tiny_models.sharpen(tiny_models.language_model(num_layers=1), 2.0)
    traces = []

    def run(prompt, prompt_lengths):
        traces.append(1)
        return greedy_search(model, prompt, 10, prompt_lengths=prompt_lengths)

    compiled = compile_generation(run, model)
    prompts = [
        (np.array([[3, 4, 0, 0], [7, 1, 9, 2]], "int32"), np.array([2, 4], "int32")),
        (np.array([[5, 0, 0, 0], [8, 8, 2, 0]], "int32"), np.array([1, 3], "int32")),
    ]
    before = [np.asarray(compiled(*p)) for p in prompts]
    for p, got in zip(prompts, before):
        np.testing.assert_array_equal(got, np.asarray(run(*p)))
    # New weights (as after `fit`): the compiled function uses them, without
    # retracing, and still equals eager decoding.
    tiny_models.sharpen(model, -3.0)
    traced = len(traces)
    after = [np.asarray(compiled(*p)) for p in prompts]
    assert len(traces) == traced
    for p, got in zip(prompts, after):
        np.testing.assert_array_equal(got, np.asarray(run(*p)))
    assert any((a != b).any() for a, b in zip(after, before))
    # One trace for both prompt batches (same shapes), plus the eager runs.
    assert traced == 1 + len(prompts)


def test_jitted_recomputing_decoder_equals_cached():
    model = tiny_models.sharpen(tiny_models.language_model(num_layers=1), 2.0)
    prompt = np.array([[3, 4, 0], [7, 1, 9]], "int32")

    def run(prompt):
        return (
            greedy_search(RecomputingDecoder(model), prompt, 9),
            beam_search(RecomputingDecoder(model), prompt, 9, num_beams=2),
        )

    want = (greedy_search(model, prompt, 9), beam_search(model, prompt, 9, num_beams=2))
    _assert_equal(compile_generation(run, model)(prompt), want)


def test_compile_generation_errors():
    with pytest.raises(ValueError, match="`fn` must be a callable"):
        compile_generation(3, tiny_models.language_model(num_layers=1))
    for models, received in (
        ("model", "'model'"),
        (keras.layers.Dense(3, name="head"), "built=False"),
        ([], r"\[\]"),
        ((), r"\(\)"),
    ):
        # With no model the weights became constants of the program: after
        # set_weights it kept generating with the old ones.
        with pytest.raises(
            ValueError,
            match=r"`models` must be the built Keras models \(or layers, or "
            rf"decoders with a `model`\).*Received: models=.*{received}",
        ):
            compile_generation(lambda: None, models)
