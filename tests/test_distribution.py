"""keras.distribution on JAX with two host devices trains like one device.

Each run is a fresh process (tests/distribution_driver.py): the two CPU
devices (XLA_FLAGS=--xla_force_host_platform_device_count=2) must be set
before JAX starts. Dropout is off (each device would draw its own masks).
Tolerances: those of the tf.distribute tests
(tests/examples/test_distributed_training.py): per-batch losses within
1e-4 relative, weights within 1e-3 of their scale.
"""

import os
import subprocess
import sys

import keras
import numpy as np
import pytest

from keras_attn.distribution import layout_map
from tests.conftest import BACKEND

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DRIVER = os.path.join(ROOT, "tests", "distribution_driver.py")

jax_only = pytest.mark.skipif(
    BACKEND != "jax", reason="keras.distribution on JAX: runs in the JAX half of the suite"
)


def train(kind, tmp_path):
    out = tmp_path / f"{kind}.npz"
    env = dict(
        os.environ,
        KERAS_BACKEND="jax",
        PYTHONPATH=ROOT,
        XLA_FLAGS="--xla_force_host_platform_device_count=2",
    )
    result = subprocess.run(
        [sys.executable, DRIVER, kind, str(out)],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    run = np.load(out, allow_pickle=True)
    assert int(run["devices"]) == 2
    weights = [run[f"w{i}"] for i in range(len([k for k in run.files if k.startswith("w")]))]
    return run["losses"], weights, list(run["sharded"])


@pytest.fixture(scope="module")
def one_device(tmp_path_factory):
    return train("one", tmp_path_factory.mktemp("one"))


def assert_same_training(one, distributed):
    (losses, weights, _), (losses2, weights2, _) = one, distributed
    assert len(losses) == len(losses2) == 12
    np.testing.assert_allclose(losses2, losses, rtol=1e-4)
    assert losses[-1] < losses[0] - 0.1  # it trained: not two initialisations
    scale = max(float(np.abs(w).max()) for w in weights)
    difference = max(float(np.abs(a - b).max()) for a, b in zip(weights, weights2))
    assert difference < 1e-3 * scale, (difference, scale)


@jax_only
def test_data_parallel_matches_one_device(one_device, tmp_path):
    distributed = train("data", tmp_path)
    assert distributed[2] == []  # every variable replicated
    assert_same_training(one_device, distributed)


@jax_only
def test_model_parallel_layout_shards_the_kernels_and_matches_one_device(one_device, tmp_path):
    distributed = train("model", tmp_path)
    # Four kernels per block split over the "model" axis, nothing else.
    assert sorted(distributed[2]) == sorted(
        f"decoder_layer_{i}/{name}/kernel"
        for i in range(2)
        for name in (
            "self_attention/query_key_value",
            "self_attention/attention_output",
            "feedforward_intermediate",
            "feedforward_output",
        )
    )
    assert_same_training(one_device, distributed)


@pytest.mark.skipif(BACKEND == "torch", reason="keras.distribution has no torch implementation")
def test_layout_map_patterns_and_errors():
    devices = keras.distribution.list_devices()[:1]
    mesh = keras.distribution.DeviceMesh((1, 1), ["data", "tensor"], devices)
    layouts = layout_map(mesh, model_dim="tensor")
    assert layouts["encoder_layer_3/self_attention/query/kernel"].axes == (None, "tensor")
    assert layouts["decoder_layer_0/cross_attention/key_value/kernel"].axes == (None, "tensor")
    assert layouts["decoder_layer_0/feedforward_output/kernel"].axes == ("tensor", None)
    assert layouts["decoder_layer_0/self_attention/attention_output/kernel"].axes == (
        "tensor",
        None,
    )
    for replicated in (
        "token_embedding/embeddings",
        "logits/kernel",
        "decoder_layer_0/feedforward_output/bias",
        "decoder_layer_0/self_attention/relative_embeddings",
    ):
        assert layouts[replicated] is None
    with pytest.raises(
        ValueError,
        match=r"^`model_dim` must be an axis of the device mesh, one of \('data', 'tensor'\)\. Received: model_dim='model'\.$",
    ):
        layout_map(mesh)
