"""The music generator's `prefill` and `step` signatures: a client-driven loop that equals the
whole-loop signature token for token (issue 48)."""

import json
import textwrap

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")  # a module of TensorFlow-only tests

from keras_attn.export import export_music_generator
from keras_attn.export.streaming import PackedState
from keras_attn.generation import CachedDecoder
from keras_attn.models import translation_transformer
from tests.export.helpers import run_fresh_python
from tests.export.test_music_generator import MAX_LENGTH, _expected, _model, _request

pytestmark = pytest.mark.requires_tensorflow

# hidden 16, one layer: a (2, L, 16) cache and a (L,) mask per layer.
CACHE_WIDTH = 2 * 16 + 1

# The client loop of examples/serving/client.py, written with TensorFlow only.
_STREAM = """
def stream(signatures, request):
    width = request["primer"].shape[1] + int(request["num_steps"])
    events = np.zeros((request["primer"].shape[0], width), np.int32)
    events[:, : request["primer"].shape[1]] = request["primer"]
    out, calls = signatures["prefill"](**request), 0
    while True:
        if out["position"] < width:  # a position past the request's width is padding
            events[:, int(out["position"])] = out["events"].numpy()[:, 0]
        if out["done"]:
            return events, calls
        state = {k: out[k] for k in ("events", "cache", "finished")}
        out, calls = signatures["step"](**request, **state), calls + 1
        assert out["cache"].shape[1] == int(out["position"])
"""

REQUESTS = [
    dict(primer=[[1, 7, 9, 0], [1, 3, 0, 0]], num_steps=6),
    dict(primer=[[1]], num_steps=MAX_LENGTH - 1, top_k=0, top_p=1.0, temperature=1.5),
    dict(primer=[[1, 4, 5, 6, 7, 8], [1, 0, 0, 0, 0, 0]], num_steps=10, top_k=1, seed=3),  # greedy
    dict(primer=[[1, 7, 9, 0], [1, 3, 0, 0]], num_steps=0),
    dict(primer=[[1, 7]], num_steps=0),
    dict(primer=[[1, 5, 7], [1, 5, 7]], num_steps=8, seed=[21, -8]),  # a seed per row
]


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    model = _model()
    folder = str(tmp_path_factory.mktemp("music"))
    return model, export_music_generator(model, folder, max_length=MAX_LENGTH, max_primer_length=6)


def _stream(signatures, request):
    namespace = {"np": np}
    exec(_STREAM, namespace)
    return namespace["stream"](signatures, request)


@pytest.mark.slow
def test_streamed_events_equal_the_whole_loop_in_a_tensorflow_only_process(exported):
    model, path = exported
    requests = [{k: np.asarray(v).tolist() for k, v in r.items()} for r in REQUESTS]
    stdout = run_fresh_python(
        f"import json\nimport numpy as np\nimport tensorflow as tf  # only this\n{_STREAM}\n"
        + textwrap.dedent(f"""
        signatures = tf.saved_model.load({path!r}).signatures
        defaults = dict(temperature=0.9, top_k=8, top_p=0.95, seed=5)
        dtypes = dict(temperature=tf.float32, top_p=tf.float32)
        results = []
        for request in {requests!r}:
            request = {{k: tf.constant(v, dtypes.get(k, tf.int32))
                        for k, v in dict(defaults, **request).items()}}
            events, calls = stream(signatures, request)
            whole = signatures["serving_default"](**request)["events"].numpy()
            results.append([events.tolist(), whole.tolist(), calls])
            first = first if results[1:] else request
        # The session-based loader TF Serving uses: the first request, step by step.
        with tf.compat.v1.Session(graph=tf.Graph()) as session:
            meta = tf.compat.v1.saved_model.loader.load(session, ["serve"], {path!r})
            def run(name, feeds):
                signature = meta.signature_def[name]
                fetches = {{k: v.name for k, v in signature.outputs.items()}}
                return session.run(fetches, {{signature.inputs[k].name: v for k, v in feeds.items()}})
            request = {{k: v.numpy() for k, v in first.items()}}
            out, session_events = run("prefill", request), []
            while True:
                session_events.append(out["events"][:, 0].tolist())
                if out["done"]:
                    break
                state = {{k: out[k] for k in ("events", "cache", "finished")}}
                out = run("step", dict(request, **state))
        print(json.dumps([results, session_events]))
        """)
    )
    results, session_events = json.loads(stdout.strip().splitlines()[-1])
    streamed = np.transpose(session_events)  # positions 2 ..., the rest padding
    np.testing.assert_array_equal(streamed, np.asarray(results[0][0])[:, 2 : 2 + streamed.shape[1]])
    for request, (streamed, whole, calls) in zip(REQUESTS, results):
        np.testing.assert_array_equal(streamed, whole)
        primer, num_steps = request["primer"], request["num_steps"]
        controls = {k: v for k, v in request.items() if k not in ("primer", "num_steps")}
        if "seed" in controls and np.ndim(controls["seed"]):  # the engine's (B, 1) per-row seeds
            controls["seed"] = np.asarray(controls["seed"])[:, None]
        defaults = dict(temperature=0.9, top_k=8, top_p=0.95, seed=5)
        want = _expected(model, primer, num_steps, **dict(defaults, **controls))
        np.testing.assert_array_equal(streamed, want)
        start = min(np.count_nonzero(row) for row in primer)  # the prefill's position
        assert calls <= max(0, len(primer[0]) + num_steps - 1 - start)  # one step per position


def test_signatures_state_layout_and_bytes_per_position(exported):
    _, path = exported
    signatures = tf.saved_model.load(path).signatures
    assert sorted(signatures.keys()) == ["generate", "prefill", "serving_default", "step"]
    step = signatures["step"].structured_input_signature[1]
    assert {k: (v.dtype, v.shape.as_list()) for k, v in step.items() if k in "events cache"} == {
        "events": (tf.int32, [None, 1]),
        "cache": (tf.float32, [None, None, CACHE_WIDTH]),
    }
    assert step["finished"].dtype == tf.bool
    out = signatures["prefill"](**_request([[1, 7, 9, 0], [1, 3, 0, 0]], 6))
    assert int(out["position"]) == 2  # the shortest primer's length
    assert out["cache"].shape == (2, 2, CACHE_WIDTH)  # 4 * 33 = 132 bytes per row and position
    assert out["events"].shape == (2, 1) and out["events"].numpy()[0, 0] == 9  # forced: primer
    assert out["finished"].numpy().tolist() == [False, False] and not out["done"]
    packed = PackedState(CachedDecoder(_model()), MAX_LENGTH)
    assert packed.width == CACHE_WIDTH and packed.sizes == [32, 1]
    # Without streaming: the whole-loop signatures only.
    plain = export_music_generator(
        _model(), str(path) + "_plain", max_length=MAX_LENGTH, streaming=False
    )
    assert "step" not in tf.saved_model.load(plain).signatures


def test_jit_compiled_streaming_equals_its_whole_loop(exported, tmp_path):
    model, _ = exported
    path = export_music_generator(
        model, str(tmp_path), max_length=MAX_LENGTH, max_primer_length=6, jit_compile=True
    )
    signatures = tf.saved_model.load(path).signatures
    request = _request([[1, 7, 9, 0], [1, 3, 0, 0]], 6)
    events, _ = _stream(signatures, request)
    np.testing.assert_array_equal(events, signatures["serving_default"](**request)["events"])


@pytest.mark.parametrize(
    "change, message",
    [
        (dict(cache=np.zeros((3, 2, CACHE_WIDTH))), r"`finished`, `primer` need the same rows"),
        (dict(finished=[False]), r"need the same rows. Received:\] \[2\] \[2\] \[1\] \[2\]"),
        (dict(cache=np.zeros((2, 0, CACHE_WIDTH))), r"`cache` must hold 1 to 14 positions.*\[0\]"),
        (dict(cache=np.zeros((2, 15, CACHE_WIDTH))), r"must hold 1 to 14 positions.*\[15\]"),
        (dict(events=[[40], [3]]), r"`events` ids must be in \[0, 40\)"),
        (dict(primer=[[1, 0, 5], [1, 3, 0]]), "rows must be right-padded"),
    ],
)
def test_bad_step_requests_get_clear_errors(exported, change, message):
    signatures = tf.saved_model.load(exported[1]).signatures
    request = _request([[1, 7, 9], [1, 3, 0]], 6)
    state = {k: v for k, v in signatures["prefill"](**request).items() if k in ("events", "cache")}
    state["finished"] = tf.constant([False, False])
    for name, value in change.items():
        if name == "primer":
            request["primer"] = tf.constant(value, tf.int32)
        else:
            state[name] = tf.constant(value, state[name].dtype)
    with pytest.raises(tf.errors.InvalidArgumentError, match=message):
        signatures["step"](**request, **state)


def test_a_model_with_other_inputs_streams_only_with_its_memory_inputs():
    model = translation_transformer(30, num_layers=1, hidden_dim=8, num_heads=2, intermediate_dim=8)
    with pytest.raises(ValueError, match="inputs besides the tokens needs `memory_inputs`"):
        PackedState(CachedDecoder(model), 8)
