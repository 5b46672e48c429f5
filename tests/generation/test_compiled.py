"""The strategies inside `tf.function`: XLA, and a graph with tensor inputs
(dynamic batch, fixed prompt width) that traces once, as an export needs."""

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")  # a module of TensorFlow-only tests

from keras_attn.generation import beam_search, greedy_search, sample
from tests.generation import tiny_models

pytestmark = pytest.mark.requires_tensorflow


def test_xla_compiled_strategies_equal_eager():
    model = tiny_models.sharpen(tiny_models.translation_model(num_layers=1), 2.0)
    prompt = np.ones((2, 1), "int32")
    kwargs = dict(end_token_id=4, inputs={"encoder_tokens": tiny_models.SOURCE})

    def run(source, prompt):
        kwargs["inputs"] = {"encoder_tokens": source}
        return (
            greedy_search(model, prompt, 8, **kwargs),
            beam_search(model, prompt, 8, num_beams=3, **kwargs),
            sample(model, prompt, 8, seed=7, top_p=0.9, **kwargs),
        )

    eager = run(tiny_models.SOURCE, prompt)
    # autograph=False as in `keras.export.ExportArchive` (and faster to trace).
    compiled = tf.function(run, jit_compile=True, autograph=False)(
        tf.constant(tiny_models.SOURCE), tf.constant(prompt)
    )
    for want, got in zip(eager, compiled):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


@pytest.mark.slow
@pytest.mark.parametrize("kind", tiny_models.KINDS)
def test_xla_decoder_only_every_attention_type(kind):
    model = tiny_models.sharpen(tiny_models.language_model(kind, num_layers=2), 2.0)
    prompt = np.array([[3, 4, 0, 0], [7, 1, 9, 2]], "int32")

    def run(prompt):
        return tiny_models.three_strategies(model, prompt)

    eager = run(prompt)
    compiled = tf.function(run, jit_compile=True)(tf.constant(prompt))
    for want, got in zip(eager, compiled):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


def test_graph_with_tensor_inputs_traces_once_for_every_prompt_length_and_batch():
    model = tiny_models.language_model("relative", num_layers=1)
    traces = []

    @tf.function(
        input_signature=[
            tf.TensorSpec((None, 6), tf.int32, name="prompt"),
            tf.TensorSpec((None,), tf.int32, name="prompt_lengths"),
            tf.TensorSpec((2,), tf.int32, name="seed"),
        ]
    )
    def generate(prompt, prompt_lengths, seed):
        traces.append(1)
        return (
            greedy_search(model, prompt, 12, end_token_id=5, prompt_lengths=prompt_lengths),
            sample(model, prompt, 12, seed=seed, top_k=4, prompt_lengths=prompt_lengths),
        )

    batches = [
        (np.array([[3, 4, 0, 0, 0, 0], [7, 1, 9, 2, 6, 8]], "int32"), [2, 6]),
        (
            np.array([[3, 0, 0, 0, 0, 0], [7, 1, 9, 2, 0, 0], [8, 8, 2, 0, 0, 0]], "int32"),
            [1, 4, 3],
        ),
    ]
    for i, (prompt, lengths) in enumerate(batches):
        greedy, sampled = generate(prompt, np.array(lengths, "int32"), np.array([9, 0], "int32"))
        want_greedy = greedy_search(model, prompt, 12, end_token_id=5)
        np.testing.assert_array_equal(np.asarray(greedy), np.asarray(want_greedy))
        if i == 0:
            want_sampled = sample(model, prompt, 12, seed=9, top_k=4)
            np.testing.assert_array_equal(np.asarray(sampled), np.asarray(want_sampled))
    assert len(traces) == 1


def _assertions(concrete_function):
    """Assert ops of a traced function: (inside while-loop bodies, elsewhere)."""
    graph = concrete_function.graph.as_graph_def()
    in_loops = elsewhere = 0
    for function in graph.library.function:
        count = sum(node.op == "Assert" for node in function.node_def)
        if function.signature.name.startswith("while_body"):
            in_loops += count
        else:
            elsewhere += count
    return in_loops, elsewhere + sum(node.op == "Assert" for node in graph.node)


def test_decoding_steps_carry_no_run_time_checks_the_prefill_keeps_them():
    # The loops make every step's arguments themselves: the run-time values
    # (prompt, model inputs, their batch) are checked once, in the prefill,
    # not at each position of a served model.
    model = tiny_models.translation_model(num_layers=1)
    spec = [tf.TensorSpec((None, None), tf.int32), tf.TensorSpec((None, 1), tf.int32)]

    def strategies(source, prompt):
        inputs = {"encoder_tokens": source}
        return (
            greedy_search(model, prompt, 8, end_token_id=4, inputs=inputs),
            beam_search(model, prompt, 8, num_beams=2, end_token_id=4, inputs=inputs),
            sample(model, prompt, 8, seed=3, end_token_id=4, inputs=inputs),
        )

    traced = tf.function(strategies, autograph=False).get_concrete_function(*spec)
    in_loops, elsewhere = _assertions(traced)
    assert in_loops == 0
    assert elsewhere >= 3  # at least one prefill check per strategy
    # The traced graph equals eager decoding.
    args = (tiny_models.SOURCE, np.ones((2, 1), "int32"))
    for got, want in zip(traced(*[tf.constant(a) for a in args]), strategies(*args)):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


@pytest.mark.slow
def test_export_archive_endpoint_reloads_and_generates(tmp_path):
    # The exporters' path: `keras.export.ExportArchive` tracks the model and
    # serves the loops with tensor inputs (dynamic batch and source length).
    import keras

    model = tiny_models.translation_model(num_layers=1)

    def generate(source, prompt, seed):
        inputs = {"encoder_tokens": source}
        return {
            "greedy": greedy_search(model, prompt, 8, end_token_id=4, inputs=inputs),
            "beam": beam_search(model, prompt, 8, num_beams=3, end_token_id=4, inputs=inputs),
            "sample": sample(model, prompt, 8, seed=seed, top_p=0.9, end_token_id=4, inputs=inputs),
        }

    archive = keras.export.ExportArchive()
    archive.track(model)
    archive.add_endpoint(
        "generate",
        generate,
        input_signature=[
            tf.TensorSpec((None, None), tf.int32),
            tf.TensorSpec((None, 1), tf.int32),
            tf.TensorSpec((2,), tf.int32),
        ],
    )
    archive.write_out(str(tmp_path / "1"))
    loaded = tf.saved_model.load(str(tmp_path / "1"))
    args = (tiny_models.SOURCE, np.ones((2, 1), "int32"), np.array([3, 0], "int32"))
    got, want = loaded.generate(*args), generate(*args)
    for name in want:
        np.testing.assert_array_equal(np.asarray(got[name]), np.asarray(want[name]))


def test_prompt_lengths_of_unknown_size_are_taken_beside_a_known_batch():
    # A traced (None,) `prompt_lengths` beside a (2, 4) prompt: its rows are not known yet,
    # so they are not refused as different (they were, before the fix).
    model = tiny_models.language_model("relative", num_layers=1)
    prompt = np.array([[3, 4, 9, 0], [7, 1, 0, 0]], "int32")
    generate = tf.function(
        lambda lengths: greedy_search(model, prompt, 8, prompt_lengths=lengths),
        input_signature=[tf.TensorSpec((None,), tf.int32)],
    )
    eager = greedy_search(model, prompt, 8, prompt_lengths=np.array([3, 2], "int32"))
    np.testing.assert_array_equal(generate(tf.constant([3, 2])), eager)
