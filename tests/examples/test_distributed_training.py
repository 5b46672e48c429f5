"""The training examples under tf.distribute give the losses and weights of
one device with the same global batch.

- `--strategy mirrored` with two replicas: the CPU split into two logical
  devices (which must happen before TensorFlow starts, hence a fresh
  process); that process also trains with `--strategy default` (one device)
  to compare.
- `--strategy multi_worker`: two worker processes on 127.0.0.1 with
  TF_CONFIG, started here; worker 0 (the chief) then trains with one device
  to compare.

Dropout is off: each replica draws its own masks, so with dropout the runs
differ by design.
"""

import json
import os
import socket
import subprocess
import sys

import numpy as np
import pytest

from tests.examples.test_resume_after_kill import DRIVER, ROOT, TINY, run_driver, weights

pytestmark = pytest.mark.requires_tensorflow

EXAMPLES = [
    "music",
    pytest.param("super_resolution", marks=pytest.mark.slow),
    pytest.param("translation", marks=pytest.mark.slow),
]
STEPS = 3 * 4  # TINY: 3 epochs of 4 steps


def argv(example, tmp_path, name, strategy):
    extra = ["--cache_dir", str(tmp_path / "cache")] if example == "music" else []
    return (
        TINY[example]
        + extra
        + [
            "--dropout",
            "0",
            "--output_dir",
            str(tmp_path / name),
            "--strategy",
            strategy,
        ]
    )


def assert_same_training(example, one, distributed):
    assert int(one["iterations"]) == int(distributed["iterations"]) == STEPS
    assert len(one["batch_loss"]) == len(distributed["batch_loss"]) == STEPS
    # Running mean loss after each batch. Images, and music windows here
    # (pieces longer than L): every replica's half batch holds the same
    # number of scored targets, so the mean of the replicas' means is the
    # global mean (float rounding apart). Translation:
    # the masked mean of each replica is over its own real tokens, and a
    # bucketed batch's halves hold different numbers of them, so the
    # distributed loss weighs tokens a little differently (measured: losses
    # within 5e-4 relative over 12 steps).
    translation = example == "translation"
    np.testing.assert_allclose(
        distributed["batch_loss"], one["batch_loss"], rtol=5e-3 if translation else 1e-4
    )
    # The key projection's bias is left out: it gets no gradient (softmax is
    # invariant to adding the same q.b_k to all logits of a query), and Adam
    # (epsilon 1e-9) turns the rounding noise in its zero gradient into
    # full-size steps, so it drifts apart with any change of summation
    # order. It changes no output. Its variable holds the query and value
    # biases too where the projections are fused.
    paths = [str(p) for p in one["paths"]]
    dead = [p.endswith(("/query_key_value/bias", "/key/bias")) for p in paths]
    assert any(dead) and len(paths) == len(weights(one))
    pairs = [pair for pair, skip in zip(zip(weights(one), weights(distributed)), dead) if not skip]
    assert len(pairs) > 4
    if translation:
        # Other token weights give other gradients, which Adam's normalised
        # steps make visible in rarely seen embedding rows (max difference
        # 0.17): compare the weights as a whole (measured 2.1%).
        difference = sum(float(np.sum((a - b) ** 2)) for a, b in pairs)
        size = sum(float(np.sum(a**2)) for a, _ in pairs)
        assert (difference / size) ** 0.5 < 0.05, (difference / size) ** 0.5
    else:
        difference = max(float(np.max(np.abs(a - b))) for a, b in pairs)
        scale = max(float(np.max(np.abs(a))) for a, _ in pairs)
        assert difference < 1e-3 * scale, (difference, scale)
    # Training did something: the comparison is not between two initialisations.
    assert abs(one["batch_loss"][-1] - one["batch_loss"][0]) > 1e-3


@pytest.mark.parametrize("example", EXAMPLES)
def test_mirrored_strategy_on_two_devices_matches_one_device(example, tmp_path):
    out = run_driver(
        {
            "example": example,
            "logical_cpus": 2,
            "runs": [
                {
                    "argv": argv(example, tmp_path, "one", "default"),
                    "result": str(tmp_path / "one.npz"),
                },
                {
                    "argv": argv(example, tmp_path, "mirrored", "mirrored"),
                    "result": str(tmp_path / "mirrored.npz"),
                },
            ],
        },
        tmp_path / "spec.json",
    )
    assert f"replicas=1 result={tmp_path / 'one.npz'}" in out
    assert f"replicas=2 result={tmp_path / 'mirrored.npz'}" in out
    assert_same_training(example, np.load(tmp_path / "one.npz"), np.load(tmp_path / "mirrored.npz"))


def free_ports(count):
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


@pytest.mark.parametrize("example", EXAMPLES)
def test_multi_worker_strategy_on_two_processes_matches_one_device(example, tmp_path):
    cluster = {"worker": [f"127.0.0.1:{port}" for port in free_ports(2)]}
    workers = []
    for index in range(2):
        runs = [
            {
                "argv": argv(example, tmp_path, "multi_worker", "multi_worker"),
                "result": str(tmp_path / f"worker_{index}.npz"),
            }
        ]
        if index == 0:  # the chief also trains on one device, to compare
            runs.append(
                {
                    "argv": argv(example, tmp_path, "one", "default"),
                    "result": str(tmp_path / "one.npz"),
                }
            )
        spec = tmp_path / f"worker_{index}.json"
        spec.write_text(json.dumps({"example": example, "runs": runs}))
        env = dict(
            os.environ,
            TF_CPP_MIN_LOG_LEVEL="3",
            TF_CONFIG=json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}}),
        )
        workers.append(
            subprocess.Popen(
                [sys.executable, DRIVER, str(spec)],
                cwd=ROOT,
                env=env,
                text=True,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
        )
    outputs = []
    try:
        for worker in workers:
            outputs.append(worker.communicate(timeout=600))
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
    for worker, (stdout, stderr) in zip(workers, outputs):
        assert worker.returncode == 0, stdout[-3000:] + stderr[-5000:]
    assert "replicas=2" in outputs[0][0] and "replicas=2" in outputs[1][0]
    # Only the chief writes the run's folder; worker 1 keeps its own.
    assert (tmp_path / "multi_worker" / "history.csv").exists()
    assert (tmp_path / "multi_worker" / "workers" / "worker_1" / "history.csv").exists()
    one = np.load(tmp_path / "one.npz")
    for index in range(2):
        assert_same_training(example, one, np.load(tmp_path / f"worker_{index}.npz"))
