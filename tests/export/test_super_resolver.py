import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")  # a module of TensorFlow-only tests

from keras_attn.export import export_super_resolver
from keras_attn.export.super_resolver import super_resolve
from keras_attn.models import super_resolution_transformer
from keras_attn.preprocessing import images
from tests.export.helpers import run_fresh_python

pytestmark = pytest.mark.requires_tensorflow

SAMPLE = os.path.join(
    os.path.dirname(__file__),
    "..",
    "..",
    "examples",
    "super_resolution",
    "data",
    "cifar10_sample.npz",
)


@pytest.fixture(scope="module")
def low_resolution():
    """Three real CIFAR-10 images as 2x2 RGB inputs (8x area downsampling)."""
    return images.downsample(images.load_cifar10(SAMPLE, "validation")[0][:3], 16)


@pytest.fixture(scope="module")
def model():
    # 2x2 -> 4x4 (48 sampling steps): small enough to export and run fast.
    model = super_resolution_transformer(
        low_resolution_size=2,
        image_size=4,
        num_encoder_layers=1,
        num_layers=1,
        hidden_dim=16,
        num_heads=2,
        intermediate_dim=32,
        block_size=12,
        memory_flange=6,
        dropout=0.0,
    )
    logits = model.get_layer("logits")
    logits.kernel.assign(logits.kernel * 20.0)  # outputs depend on the model
    return model


@pytest.fixture(scope="module")
def exported(model, tmp_path_factory):
    return export_super_resolver(model, str(tmp_path_factory.mktemp("export")), version=3)


_REFERENCES = {}


# sample_with_options inputs that switch the top-k and nucleus filters off.
NO_FILTER = {"top_k": tf.constant(0), "top_p": tf.constant(1.0)}


def _expected(model, low_resolution, seed, temperature):
    """`super_resolve` in-process, in one graph traced once per model; `seed`
    an int (one for the batch) or a list (one per image)."""
    if id(model) not in _REFERENCES:
        _REFERENCES[id(model)] = tf.function(
            lambda x, seed, temperature: super_resolve(model, x, seed, temperature),
            input_signature=[
                tf.TensorSpec((None, 2, 2, 3), tf.uint8),
                tf.TensorSpec((None, 1), tf.int64),
                tf.TensorSpec((), tf.float32),
            ],
            autograph=False,
        )
    out = _REFERENCES[id(model)](
        low_resolution,
        tf.reshape(tf.constant(seed, tf.int64), (-1, 1)),
        tf.constant(temperature, tf.float32),
    )
    return np.asarray(out)


def test_export_round_trip_in_process(model, exported, low_resolution):
    assert exported.endswith(os.path.join("", "3"))
    served = tf.saved_model.load(exported)
    default = served.signatures["serving_default"]
    assert default.structured_input_signature[1]["image"] == tf.TensorSpec(
        (None, 2, 2, 3), tf.uint8, name="image"
    )
    out = default(image=tf.constant(low_resolution))["image"].numpy()
    assert out.shape == (3, 4, 4, 3) and out.dtype == np.uint8
    # serving_default gives every image the default seed (0) as its own.
    np.testing.assert_array_equal(out, _expected(model, low_resolution, [0, 0, 0], 1.0))

    options = served.signatures["sample_with_options"]
    out = options(
        image=tf.constant(low_resolution),
        temperature=tf.constant(0.9),
        seed=tf.constant(5, tf.int64),
        **NO_FILTER,
    )["image"].numpy()
    want = _expected(model, low_resolution, 5, 0.9)
    np.testing.assert_array_equal(out, want)
    # One image alone gets what it gets in a batch (same seed).
    alone = options(
        image=tf.constant(low_resolution[:1]),
        temperature=tf.constant(0.9),
        seed=tf.constant(5, tf.int64),
        **NO_FILTER,
    )["image"].numpy()
    np.testing.assert_array_equal(alone[0], want[0])
    other = options(
        image=tf.constant(low_resolution),
        temperature=tf.constant(0.9),
        seed=tf.constant(6, tf.int64),
        **NO_FILTER,
    )["image"].numpy()
    assert not np.array_equal(other, want)


def test_top_k_and_top_p_inputs_filter_like_the_engine(model, exported, low_resolution):
    options = tf.saved_model.load(exported).signatures["sample_with_options"]

    def served(seed, top_k, top_p):
        return options(
            image=tf.constant(low_resolution),
            temperature=tf.constant(1.0),
            seed=tf.constant(seed, tf.int64),
            top_k=tf.constant(top_k),
            top_p=tf.constant(top_p),
        )["image"].numpy()

    # top_k = 1 leaves one intensity per step: the seed no longer matters.
    greedy = served(1, 1, 1.0)
    np.testing.assert_array_equal(served(2, 1, 1.0), greedy)
    np.testing.assert_array_equal(
        greedy, np.asarray(super_resolve(model, low_resolution, 1, 1.0, top_k=1))
    )
    # Tensor inputs filter exactly as the engine's Python arguments do.
    np.testing.assert_array_equal(
        served(3, 5, 0.8),
        np.asarray(super_resolve(model, low_resolution, 3, 1.0, top_k=5, top_p=0.8)),
    )
    # The filters change the draws (else the inputs would be ignored).
    assert not np.array_equal(served(3, 5, 0.8), served(3, 0, 1.0))
    for top_k, top_p, message in (
        (-1, 1.0, "`top_k` must be >= 0"),
        (0, 0.0, "`top_p` must be in"),
        (0, 1.5, "`top_p` must be in"),
    ):
        with pytest.raises(tf.errors.InvalidArgumentError, match=message):
            served(1, top_k, top_p)


def test_wrong_images_and_temperature_give_clear_errors(exported, low_resolution):
    served = tf.saved_model.load(exported)
    default = served.signatures["serving_default"]
    gray = low_resolution[..., :1]
    rgba = np.concatenate([low_resolution, low_resolution[..., :1]], axis=-1)
    larger = np.zeros((1, 4, 4, 3), np.uint8)
    for bad in (gray, rgba, larger):
        with pytest.raises(
            tf.errors.InvalidArgumentError,
            match=r"Shape of tensor image \[\d,\d,\d,\d\] is not compatible with expected shape \[\?,2,2,3\]",
        ):
            default(image=tf.constant(bad))
    with pytest.raises(
        tf.errors.InvalidArgumentError, match="expected to be a uint8 tensor but is a float"
    ):
        default(image=tf.constant(low_resolution, tf.float32))
    for temperature in (0.0, float("inf"), float("nan")):
        with pytest.raises(
            tf.errors.InvalidArgumentError, match="`temperature` must be finite and > 0"
        ):
            served.signatures["sample_with_options"](
                image=tf.constant(low_resolution),
                temperature=tf.constant(temperature),
                seed=tf.constant(1, tf.int64),
                **NO_FILTER,
            )
    empty = r"`image` must hold at least one row. Received shape:\] \[0 2 2 3\]"
    with pytest.raises(tf.errors.InvalidArgumentError, match=empty):
        default(image=tf.zeros((0, 2, 2, 3), tf.uint8))


def test_exporter_and_sampler_argument_errors(model, tmp_path, low_resolution):
    with pytest.raises(ValueError, match="`version` must be a positive integer"):
        export_super_resolver(model, str(tmp_path), version=0)
    # 1e-46 and 1e300 passed, and float32 made them 0 and inf: every request failed.
    for bad in (0.0, float("inf"), float("nan"), True, 1e-46, 1e300):
        with pytest.raises(
            ValueError,
            match=r"`default_temperature` must be a number in \[1.17\d*e-38, 3.40\d*e\+38\]\.",
        ):
            export_super_resolver(model, str(tmp_path), default_temperature=bad)
    with pytest.raises(
        ValueError,
        match=r"`default_seed` must be an int in \[-2\*\*63, 2\*\*63\)\. Received: default_seed=1180591620717411303424",
    ):
        export_super_resolver(model, str(tmp_path), default_seed=2**70)
    with pytest.raises(ValueError, match=r"`temperature` must be .*temperature=inf"):
        super_resolve(model, np.zeros((1, 2, 2, 3), np.uint8), temperature=float("inf"))
    with pytest.raises(
        ValueError,
        match=r"^`low_resolution.shape` must be \(batch, 2, 2, 3\)\. Received: low_resolution.shape=\(1, 2, 2, 4\)\. Resize",
    ):
        super_resolve(model, np.zeros((1, 2, 2, 4), np.uint8))
    # Floats in [0, 1] were cast to 0: black inputs, without a word.
    with pytest.raises(
        ValueError,
        match=r"^`low_resolution.dtype` must be integer \(0..255\)\. Received: low_resolution.dtype='float32'\. For floats in \[0, 1\], pass `np.round\(images \* 255\)",
    ):
        super_resolve(model, np.full((1, 2, 2, 3), 0.5, np.float32))
    # Nested lists are images too.
    assert super_resolve(model, np.zeros((1, 2, 2, 3), np.uint8).tolist(), seed=3).shape == (
        1,
        4,
        4,
        3,
    )
    from keras_attn.models import image_transformer

    # None gave an AttributeError (get_layer).
    for not_a_model in (None, "model.keras"):
        with pytest.raises(
            ValueError,
            match=rf"^`model` must be a `super_resolution_transformer` model\. "
            rf"Received: model={re.escape(repr(not_a_model))}\.$",
        ):
            super_resolve(not_a_model, np.zeros((1, 2, 2, 3), np.uint8))
    with pytest.raises(
        ValueError,
        match="`model` must be a `super_resolution_transformer` model.*model='image_transformer'",
    ):
        export_super_resolver(
            image_transformer(
                image_size=4, num_layers=1, hidden_dim=16, num_heads=2, intermediate_dim=32
            ),
            str(tmp_path),
        )


_FRESH_PROCESS = """
import json
import sys
import numpy as np
import tensorflow as tf

served = tf.saved_model.load(path)
low = tf.constant(np.array(low, np.uint8))
default = served.signatures["serving_default"](image=low)["image"].numpy()
options = served.signatures["sample_with_options"](
    image=low, temperature=tf.constant(0.9), seed=tf.constant(5, tf.int64),
    top_k=tf.constant(0), top_p=tf.constant(1.0),
)["image"].numpy()
loaded = sorted(m for m, module in sys.modules.items()
                if module is not None and m.split(".")[0] == "keras_attn")
print(json.dumps({"default": default.tolist(), "options": options.tolist(), "modules": loaded}))
"""


@pytest.mark.slow
def test_loads_in_a_fresh_process_with_only_tensorflow(model, exported, low_resolution):
    # keras_attn cannot be imported there (see `run_fresh_python`).
    stdout = run_fresh_python(
        f"path = {exported!r}\nlow = {low_resolution.tolist()!r}\n" + _FRESH_PROCESS
    )
    output = json.loads(stdout.strip().splitlines()[-1])
    assert output["modules"] == []
    np.testing.assert_array_equal(
        output["default"], _expected(model, low_resolution, [0, 0, 0], 1.0)
    )
    np.testing.assert_array_equal(output["options"], _expected(model, low_resolution, 5, 0.9))


_BATCHING = """
import json
import numpy as np
import tensorflow as tf

served = tf.saved_model.load(path)
default, options = served.signatures["serving_default"], served.signatures["sample_with_options"]
low = np.array(low, np.uint8)
request, batch = low[:1], low[[1, 0, 2]]  # the request alone, and at row 1 of a batch of 3
controls = dict(temperature=tf.constant(0.9), top_k=tf.constant(0), top_p=tf.constant(1.0))
out = {
    "default": [default(image=request)["image"].numpy()[0].tolist(),
                default(image=batch)["image"].numpy()[1].tolist()],
    "options": [options(image=request, seed=tf.constant([5], tf.int64), **controls)["image"]
                .numpy()[0].tolist(),
                options(image=batch, seed=tf.constant([9, 5, -3], tf.int64), **controls)["image"]
                .numpy()[1].tolist(),
                options(image=request, seed=tf.constant(5, tf.int64), **controls)["image"]
                .numpy()[0].tolist()],
}
print(json.dumps(out))
"""


@pytest.mark.slow
def test_a_request_gets_the_same_image_alone_and_in_a_batch(model, exported, low_resolution):
    # Issue 46: TF Serving's server-side batching stacks requests along axis 0;
    # an image's output must not depend on its row nor on its neighbours.
    stdout = run_fresh_python(
        f"path = {exported!r}\nlow = {low_resolution.tolist()!r}\n" + _BATCHING
    )
    output = json.loads(stdout.strip().splitlines()[-1])
    alone, in_batch = output["default"]
    np.testing.assert_array_equal(in_batch, alone)
    np.testing.assert_array_equal(alone, _expected(model, low_resolution[:1], 0, 1.0)[0])
    alone, in_batch, scalar = output["options"]
    np.testing.assert_array_equal(in_batch, alone)
    np.testing.assert_array_equal(scalar, alone)  # a scalar seed: row 0 draws as alone
    np.testing.assert_array_equal(alone, _expected(model, low_resolution[:1], 5, 0.9)[0])
    assert not np.array_equal(alone, output["default"][0])


def test_a_seed_per_image_is_checked(exported, low_resolution):
    options = tf.saved_model.load(exported).signatures["sample_with_options"]
    for seed in ([1, 2], [[1], [2], [3]]):
        with pytest.raises(
            tf.errors.InvalidArgumentError,
            match=r"`seed` must be a scalar or of shape \(batch,\). Received shape:",
        ):
            options(
                image=tf.constant(low_resolution),
                temperature=tf.constant(0.9),
                seed=tf.constant(seed, tf.int64),
                **NO_FILTER,
            )
    # A scalar seed draws for the batch as before: row b at its own counters.
    out = options(
        image=tf.constant(low_resolution[[0, 0]]),
        temperature=tf.constant(0.9),
        seed=tf.constant(5, tf.int64),
        **NO_FILTER,
    )["image"].numpy()
    assert not np.array_equal(out[0], out[1])
    per_image = options(
        image=tf.constant(low_resolution[[0, 0]]),
        temperature=tf.constant(0.9),
        seed=tf.constant([5, 5], tf.int64),
        **NO_FILTER,
    )["image"].numpy()
    np.testing.assert_array_equal(per_image, out[[0, 0]])


def _saved_model_cli(exported, signature, feeds, tmp_path):
    """`saved_model_cli run` with each input from a .npy file."""
    cli = os.path.join(os.path.dirname(sys.executable), "saved_model_cli")
    run = len(list(tmp_path.iterdir()))
    inputs = []
    for name, value in feeds.items():
        path = tmp_path / f"{name}_{run}.npy"
        np.save(path, value)
        inputs.append(f"{name}={path}")
    outdir = tmp_path / f"out_{run}"
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    result = subprocess.run(
        [
            cli,
            "run",
            "--dir",
            exported,
            "--tag_set",
            "serve",
            "--signature_def",
            signature,
            "--inputs",
            ";".join(inputs),
            "--outdir",
            str(outdir),
        ],
        capture_output=True,
        text=True,
        env=env,
    )
    return result, outdir


@pytest.mark.slow
def test_runs_under_the_session_loader(model, exported, low_resolution, tmp_path):
    """`saved_model_cli run` loads with the TF1 session loader, as TF Serving."""
    result, outdir = _saved_model_cli(
        exported, "serving_default", {"image": low_resolution}, tmp_path
    )
    assert result.returncode == 0, result.stderr[-3000:]
    np.testing.assert_array_equal(
        np.load(outdir / "image.npy"), _expected(model, low_resolution, [0, 0, 0], 1.0)
    )
    result, outdir = _saved_model_cli(
        exported,
        "sample_with_options",
        {
            "image": low_resolution,
            "temperature": np.float32(0.9),
            "seed": np.int64(5),
            "top_k": np.int32(0),
            "top_p": np.float32(1.0),
        },
        tmp_path,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    np.testing.assert_array_equal(
        np.load(outdir / "image.npy"), _expected(model, low_resolution, 5, 0.9)
    )
    # What a session client gets for a grayscale, RGBA or too large image:
    # an error naming the expected shape, not a crash.
    for bad in ((1, 2, 2, 1), (1, 2, 2, 4), (1, 4, 4, 3)):
        result, _ = _saved_model_cli(
            exported, "serving_default", {"image": np.zeros(bad, np.uint8)}, tmp_path
        )
        assert result.returncode != 0
        message = result.stderr.strip().splitlines()[-1]
        assert "Cannot feed value of shape %s" % (bad,) in message, result.stderr[-2000:]
        assert "which has shape (None, 2, 2, 3)" in message, message


@pytest.mark.slow
def test_xla_compiled_export_equals_the_xla_sampler(model, low_resolution, tmp_path):
    path = export_super_resolver(model, str(tmp_path), version=1, jit_compile=True)
    reference = tf.function(
        lambda x, seed, temperature: super_resolve(model, x, seed, temperature),
        jit_compile=True,
        autograph=False,
    )
    want = np.asarray(
        reference(tf.constant(low_resolution), tf.constant(5, tf.int64), tf.constant(0.9))
    )
    served = tf.saved_model.load(path)
    got = served.signatures["sample_with_options"](
        image=tf.constant(low_resolution),
        temperature=tf.constant(0.9),
        seed=tf.constant(5, tf.int64),
        **NO_FILTER,
    )["image"].numpy()
    np.testing.assert_array_equal(got, want)
    # XLA has no assertions: the request is checked before the loop.
    with pytest.raises(tf.errors.InvalidArgumentError, match="`image` must hold at least one row"):
        served.signatures["serving_default"](image=tf.zeros((0, 2, 2, 3), tf.uint8))
    for name, value in (("temperature", float("inf")), ("top_k", -1), ("top_p", 0.0)):
        options = {"temperature": 0.9, "top_k": 0, "top_p": 1.0, name: value}
        with pytest.raises(tf.errors.InvalidArgumentError, match=f"`{name}` must be"):
            served.signatures["sample_with_options"](
                image=tf.constant(low_resolution),
                seed=tf.constant(5, tf.int64),
                temperature=tf.constant(options["temperature"], tf.float32),
                top_k=tf.constant(options["top_k"]),
                top_p=tf.constant(options["top_p"]),
            )
    result, outdir = _saved_model_cli(
        path,
        "sample_with_options",
        {
            "image": low_resolution,
            "temperature": np.float32(0.9),
            "seed": np.int64(5),
            "top_k": np.int32(0),
            "top_p": np.float32(1.0),
        },
        tmp_path,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    np.testing.assert_array_equal(np.load(outdir / "image.npy"), want)
