import json
import os
import textwrap

import keras
import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")  # a module of TensorFlow-only tests
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from keras_attn.export import export_music_generator
from keras_attn.generation import sample
from keras_attn.models import MUSIC_SUPPRESSED_TOKEN_IDS, music_transformer
from tests.export.helpers import run_fresh_python

pytestmark = pytest.mark.requires_tensorflow

VOCABULARY = 40
MAX_LENGTH = 16
END = 2


def _model(attention="relative"):
    # Fixed weights: the module fixtures build it before the per-test seed reset, and whether
    # two rows' samples differ (test_a_seed_per_row_is_checked) depends on them.
    keras.utils.set_random_seed(0)
    model = music_transformer(
        VOCABULARY,
        num_layers=1,
        hidden_dim=16,
        num_heads=2,
        intermediate_dim=32,
        dropout=0.1,
        max_relative_position=6,
        attention=attention,
    )
    # Peaked distributions, so the samples follow the logits.
    kernel, bias = model.get_layer("logits").get_weights()
    model.get_layer("logits").set_weights([kernel * 3.0, bias * 3.0])
    return model


def _request(primer, num_steps=6, temperature=0.9, top_k=8, top_p=0.95, seed=5):
    return dict(
        primer=tf.constant(np.asarray(primer, "int32")),
        num_steps=tf.constant(num_steps, tf.int32),
        temperature=tf.constant(temperature, tf.float32),
        top_k=tf.constant(top_k, tf.int32),
        top_p=tf.constant(top_p, tf.float32),
        seed=tf.constant(seed, tf.int32),
    )


def _expected(model, primer, num_steps, temperature=0.9, top_k=8, top_p=0.95, seed=5):
    """The engine's samples for the request, cut and padded as documented."""
    primer = np.asarray(primer, "int32")
    full = np.asarray(
        sample(
            model,
            primer,
            MAX_LENGTH,
            seed=seed,
            temperature=temperature,
            top_k=top_k or None,
            top_p=top_p,
            end_token_id=END,
            suppressed_token_ids=MUSIC_SUPPRESSED_TOKEN_IDS,
        )
    )
    width = primer.shape[1] + num_steps
    limits = (primer != 0).sum(axis=1) + num_steps
    events = full[:, :width]
    return np.where(np.arange(width)[None, :] < limits[:, None], events, 0)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    model = _model()
    path = export_music_generator(
        model,
        str(tmp_path_factory.mktemp("music")),
        version=3,
        max_length=MAX_LENGTH,
        max_primer_length=6,
    )
    return model, path


@pytest.fixture(scope="module", params=[False, True], ids=["graph", "xla"])
def served(exported, request, tmp_path_factory):
    if not request.param:
        return tf.saved_model.load(exported[1]).signatures["serving_default"]
    # XLA has no assertions: the request must be checked before the loop.
    path = export_music_generator(
        exported[0],
        str(tmp_path_factory.mktemp("music_xla")),
        max_length=MAX_LENGTH,
        max_primer_length=6,
        jit_compile=True,
    )
    return tf.saved_model.load(path).signatures["serving_default"]


def test_round_trip_equals_the_engine_for_every_primer_length(exported, served):
    model, path = exported
    assert path.endswith(os.path.join("", "3"))
    generate = served
    # One signature (traced once at export) serves several primer widths
    # and batch sizes, rows of different lengths included.
    for primer, num_steps in (
        ([[1, 7, 9, 0], [1, 3, 0, 0]], 6),
        ([[1]], 9),
        ([[1, 4, 5, 6, 7, 8], [1, 0, 0, 0, 0, 0], [1, 9, 0, 0, 0, 0]], 10),
    ):
        events = generate(**_request(primer, num_steps))["events"].numpy()
        np.testing.assert_array_equal(events, _expected(model, primer, num_steps))
        assert events.dtype == np.int32
        assert events.shape == (len(primer), len(primer[0]) + num_steps)
    # Same seed, same events; another seed, other events.
    primer = [[1, 7, 9, 0], [1, 3, 0, 0]]
    first = generate(**_request(primer, 8, seed=21))["events"].numpy()
    np.testing.assert_array_equal(generate(**_request(primer, 8, seed=21))["events"].numpy(), first)
    assert (generate(**_request(primer, 8, seed=22))["events"].numpy() != first).any()
    # num_steps=0 returns the primer; top_k=1 is greedy whatever the seed.
    np.testing.assert_array_equal(generate(**_request(primer, 0))["events"].numpy(), primer)
    greedy = [generate(**_request([[1, 7]], 8, top_k=1, seed=s))["events"].numpy() for s in (1, 2)]
    np.testing.assert_array_equal(greedy[0], greedy[1])


def test_signature_is_readable_by_clients(served):
    signature = served
    inputs = signature.structured_input_signature[1]
    shapes = {
        name: None if spec.shape.rank is None else spec.shape.as_list()
        for name, spec in inputs.items()
    }
    assert {name: (spec.dtype, shapes[name]) for name, spec in inputs.items()} == {
        "primer": (tf.int32, [None, None]),
        "num_steps": (tf.int32, []),
        "temperature": (tf.float32, []),
        "top_k": (tf.int32, []),
        "top_p": (tf.float32, []),
        "seed": (tf.int32, None),  # a scalar, or one seed per row (B,)
    }
    assert signature.structured_outputs["events"].dtype == tf.int32


@pytest.mark.parametrize(
    "change, message",
    [
        (
            dict(primer=np.zeros((1, 0), "int32")),
            "`primer` needs rows of at least one event",
        ),
        (
            dict(primer=np.zeros((0, 2), "int32")),
            r"`primer` needs rows of at least one event.*events per row:\] \[\]",
        ),
        (dict(primer=[[1, 2, 3, 4, 5, 6, 7]]), "`primer` is too wide: at most 6 events"),
        (
            dict(primer=[[1, VOCABULARY]]),
            r"`primer` ids must be in \[0, 40\). Received min, max:\] \[1\] \[40\]",
        ),
        (dict(primer=[[1, -3]]), r"`primer` ids must be in \[0, 40\)"),
        (
            dict(primer=[[1, 4], [0, 0]]),
            r"at least one event. Received events per row:\] \[2 0\]",
        ),
        (dict(primer=[[1, 0, 5]]), "rows must be right-padded"),
        (
            dict(num_steps=-1),
            r"`num_steps` must be in \[0, 16 - width\]. Received:\] \[-1\] \[2\]",
        ),
        (
            dict(num_steps=MAX_LENGTH - 1),
            r"`num_steps` must be in \[0, 16 - width\]",
        ),
        # width + num_steps wrapped around in int32 and passed: empty events.
        (
            dict(num_steps=2**31 - 1),
            r"`num_steps` must be in \[0, 16 - width\]",
        ),
        (dict(temperature=0.0), r"`temperature` must be finite and > 0. Received:\] \[0\]"),
        (
            dict(temperature=float("nan")),
            r"`temperature` must be finite and > 0. Received:\] \[nan\]",
        ),
        (dict(top_k=-2), r"`top_k` must be >= 0 .*Received:\] \[-2\]"),
        (dict(top_p=1.5), r"`top_p` must be in \(0, 1\] .*Received:\] \[1.5\]"),
    ],
)
def test_bad_requests_get_clear_errors(served, change, message):
    generate = served
    request = {"primer": [[1, 7]], **change}
    with pytest.raises(tf.errors.InvalidArgumentError, match=message):
        generate(**_request(**request))
    # The model still serves afterwards.
    assert generate(**_request([[1, 7]], 3))["events"].shape == (1, 5)


@pytest.fixture(scope="module")
def eager_to_pad(tmp_path_factory):
    """An exported untrained model that favours padding and start: without
    suppression its events hold 0s inside rows (an invalid primer)."""
    model = _model()
    kernel, bias = model.get_layer("logits").get_weights()
    bias[list(MUSIC_SUPPRESSED_TOKEN_IDS)] += 4.0
    model.get_layer("logits").set_weights([kernel, bias])
    path = export_music_generator(
        model, str(tmp_path_factory.mktemp("pad")), max_length=MAX_LENGTH, max_primer_length=8
    )
    return model, tf.saved_model.load(path).signatures["serving_default"]


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**31 - 1),
    num_steps=st.integers(1, 5),
    temperature=st.floats(0.5, 2.0),
    top_k=st.integers(0, VOCABULARY),
    top_p=st.floats(0.1, 1.0),
    body=st.lists(st.integers(3, VOCABULARY - 1), max_size=2),
)
def test_output_never_holds_a_suppressed_id_and_is_a_valid_primer(
    eager_to_pad, seed, num_steps, temperature, top_k, top_p, body
):
    model, generate = eager_to_pad
    primer = [[1] + body + [0] * (2 - len(body)), [1, 0, 0]]
    request = dict(
        num_steps=num_steps, temperature=temperature, top_k=top_k, top_p=top_p, seed=seed
    )
    events = generate(**_request(primer, **request))["events"].numpy()
    for row, prompt, length in zip(events, primer, (1 + len(body), 1)):
        np.testing.assert_array_equal(row[:length], prompt[:length])
        generated = row[length:]
        ends = np.flatnonzero(generated == END)
        cut = ends[0] + 1 if ends.size else num_steps
        assert not np.isin(generated[:cut], MUSIC_SUPPRESSED_TOKEN_IDS).any(), row
        assert (generated[cut:] == 0).all(), row  # after the end token or the steps: padding
    # Fed back, the output is accepted (it used to be refused: "no 0
    # between events") and each row is continued after its events.
    again = generate(**_request(events, **dict(request, num_steps=1)))["events"].numpy()
    for row, continued in zip(events, again):
        length = int((row != 0).sum())
        np.testing.assert_array_equal(continued[:length], row[:length])
        assert continued[length] not in MUSIC_SUPPRESSED_TOKEN_IDS


def test_export_errors(tmp_path):
    model = _model()
    with pytest.raises(
        ValueError,
        match=r"`max_primer_length` must be an int in \[1, max_length=8\). Received: max_primer_length=8\.",
    ):
        export_music_generator(model, str(tmp_path), max_length=8, max_primer_length=8)
    with pytest.raises(
        ValueError,
        match=r"`end_token_id` must be an event id in \[1, 40\)",
    ):
        export_music_generator(model, str(tmp_path), max_length=8, end_token_id=40)
    with pytest.raises(ValueError, match="`version` must be a positive integer"):
        export_music_generator(model, str(tmp_path), version=0)
    with pytest.raises(ValueError, match=r"`max_length` must be an int in \[2, 2\*\*31\)"):
        export_music_generator(model, str(tmp_path), max_length=1)
    with pytest.raises(
        ValueError,
        match=r"`max_length` must be an int in \[2, 2\*\*31\)\. Received: max_length=2147483648\.",
    ):
        export_music_generator(model, str(tmp_path), max_length=2**31)
    with pytest.raises(ValueError, match="`end_token_id` cannot be suppressed"):
        export_music_generator(model, str(tmp_path), max_length=8, suppressed_token_ids=(1, END))
    with pytest.raises(ValueError, match=r"must be ids of the model's vocabulary \[0, 40\)"):
        export_music_generator(model, str(tmp_path), max_length=8, suppressed_token_ids=(1, 40))
    os.makedirs(tmp_path / "1")
    with pytest.raises(ValueError, match="already exists"):
        export_music_generator(model, str(tmp_path), max_length=8)


_FRESH_PROCESS = """
    import json, sys
    import numpy as np
    import tensorflow as tf

    feeds = dict(primer=np.array([[1, 7, 9, 0], [1, 3, 0, 0]], np.int32), num_steps=np.int32(6),
                 temperature=np.float32(0.9), top_k=np.int32(8), top_p=np.float32(0.95),
                 seed=np.int32(5))
    generate = tf.saved_model.load(path).signatures["serving_default"]
    tf2 = generate(**{k: tf.constant(v) for k, v in feeds.items()})["events"].numpy().tolist()
    # The session-based loader, the path TF Serving takes.
    with tf.compat.v1.Session(graph=tf.Graph()) as session:
        meta = tf.compat.v1.saved_model.loader.load(session, ["serve"], path)
        signature = meta.signature_def["serving_default"]
        feed = {signature.inputs[k].name: v for k, v in feeds.items()}
        v1 = session.run(signature.outputs["events"].name, feed).tolist()
        bad = dict(feed)
        bad[signature.inputs["primer"].name] = np.array([[1, 400]], np.int32)
        try:
            session.run(signature.outputs["events"].name, bad)
            error = None
        except tf.errors.InvalidArgumentError as e:
            error = e.message
        again = session.run(signature.outputs["events"].name, feed).tolist()
    loaded = sorted(m for m, module in sys.modules.items()
                    if module is not None and m.split(".")[0] in ("keras", "keras_attn"))
    print(json.dumps({"tf2": tf2, "v1": v1, "error": error, "again": again, "modules": loaded}))
"""


@pytest.mark.slow
@pytest.mark.parametrize("attention", ["relative", "absolute"])
def test_fresh_process_with_only_tensorflow_and_the_session_loader(attention, tmp_path):
    model = _model(attention)
    path = export_music_generator(model, str(tmp_path), max_length=MAX_LENGTH, max_primer_length=6)
    # keras_attn cannot be imported there (see `run_fresh_python`).
    stdout = run_fresh_python(f"path = {path!r}\n" + textwrap.dedent(_FRESH_PROCESS))
    output = json.loads(stdout.strip().splitlines()[-1])
    expected = _expected(model, [[1, 7, 9, 0], [1, 3, 0, 0]], 6)
    np.testing.assert_array_equal(output["tf2"], expected)
    np.testing.assert_array_equal(output["v1"], expected)
    np.testing.assert_array_equal(output["again"], expected)
    assert "`primer` ids must be in [0, 40)" in output["error"]
    assert not [m for m in output["modules"] if m.startswith("keras_attn")], output["modules"]


@pytest.mark.slow
def test_a_request_gets_the_same_events_alone_and_in_a_batch(exported):
    # Issue 46: TF Serving's server-side batching stacks requests along axis 0;
    # a row's events must not depend on its place nor on its neighbours.
    model, path = exported
    stdout = run_fresh_python(f"""
        import tensorflow as tf  # only this
        serve = tf.saved_model.load({path!r}).signatures["serving_default"]
        controls = dict(num_steps=tf.constant(8), temperature=tf.constant(1.5),
                        top_k=tf.constant(0), top_p=tf.constant(1.0))
        alone = serve(primer=tf.constant([[1, 5, 7]]), seed=tf.constant([21]), **controls)
        batch = serve(primer=tf.constant([[1, 9, 0], [1, 5, 7], [1, 0, 0]]),
                      seed=tf.constant([3, 21, -8]), **controls)
        scalar = serve(primer=tf.constant([[1, 5, 7]]), seed=tf.constant(21), **controls)
        print([out["events"].numpy().tolist() for out in (alone, batch, scalar)])
    """)
    alone, batch, scalar = json.loads(stdout.strip().splitlines()[-1])
    np.testing.assert_array_equal(batch[1], alone[0])
    np.testing.assert_array_equal(scalar, alone)
    np.testing.assert_array_equal(alone, _expected(model, [[1, 5, 7]], 8, 1.5, 0, 1.0, seed=21))


def test_a_seed_per_row_is_checked(served):
    for seed in ([1, 2], [[1]]):
        with pytest.raises(
            tf.errors.InvalidArgumentError,
            match=r"`seed` must be a scalar or of shape \(batch,\). Received shape:",
        ):
            served(**_request([[1, 7, 9]], seed=seed))
    # A scalar seed draws for the batch as before; a seed per row, each row as alone.
    batch = served(**_request([[1, 7, 9], [1, 7, 9]], 8, seed=21))["events"].numpy()
    assert (batch[0] != batch[1]).any()
    per_row = served(**_request([[1, 7, 9], [1, 7, 9]], 8, seed=[21, 21]))["events"].numpy()
    np.testing.assert_array_equal(per_row, batch[[0, 0]])


@pytest.mark.slow
def test_xla_compiled_export_runs_in_a_fresh_process_like_the_default_one(exported, tmp_path):
    model, path = exported
    xla_path = export_music_generator(
        model,
        str(tmp_path),
        version=1,
        max_length=MAX_LENGTH,
        max_primer_length=6,
        jit_compile=True,
    )
    stdout = run_fresh_python(f"""
        import tensorflow as tf  # only this
        request = dict(primer=tf.constant([[1, 5, 7], [1, 0, 0]]), num_steps=tf.constant(6),
                       temperature=tf.constant(0.9), top_k=tf.constant(8), top_p=tf.constant(0.95),
                       seed=tf.constant(5))
        for path in ({path!r}, {xla_path!r}):
            serve = tf.saved_model.load(path).signatures["serving_default"]
            print(serve(**request)["events"].numpy().tolist())
    """)
    default, compiled = stdout.strip().splitlines()[-2:]
    assert compiled == default
    assert default == repr(_expected(model, [[1, 5, 7], [1, 0, 0]], 6).tolist())


@pytest.mark.parametrize("task", ["jsb", "performance"])
def test_the_recommended_settings_are_a_request_the_generator_serves_as_the_engine(exported, task):
    from keras_attn.export.music_generator import RECOMMENDED_SAMPLING

    settings = RECOMMENDED_SAMPLING[task]
    # What examples/music/README.md reports: JSB 1.0 / top-k 5, performances 0.9 / top-k 40.
    assert (
        settings
        == {
            "jsb": {"temperature": 1.0, "top_k": 5, "top_p": 1.0},
            "performance": {"temperature": 0.9, "top_k": 40, "top_p": 1.0},
        }[task]
    )
    model, path = exported
    serve = tf.saved_model.load(path).signatures["serving_default"]
    primer = [[1, 7, 9, 0], [1, 3, 0, 0]]
    events = serve(**_request(primer, 8, **settings))["events"].numpy()
    np.testing.assert_array_equal(events, _expected(model, primer, 8, **settings))
