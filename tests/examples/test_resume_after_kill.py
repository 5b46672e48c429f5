"""A training example killed mid-epoch and started again ends with the step
count and the weights of a run never interrupted.

One process trains uninterrupted, then trains again in a second folder and
dies mid-epoch (`os._exit` from a callback: no cleanup, like SIGKILL); a
fresh process runs the same command in that folder, resumes from the backup
of the last completed epoch, and finishes. Dropout is on (0.1), so the
dropout random state must be restored too, and the data stream must
continue where the uninterrupted run's was.
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tests.examples.training_driver import KILLED_EXIT_CODE

pytestmark = pytest.mark.requires_tensorflow

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DRIVER = os.path.join(ROOT, "tests", "examples", "training_driver.py")

# Tiny models, 3 epochs of 4 steps; killed at step 6 = epoch 1, batch 1.
EPOCHS, STEPS_PER_EPOCH, KILL_AT_STEP = 3, 4, 6
TINY = {
    "super_resolution": [
        "--epochs",
        "3",
        "--steps_per_epoch",
        "4",
        "--monitor_images",
        "4",
        "--num_layers",
        "1",
        "--num_encoder_layers",
        "1",
        "--hidden_dim",
        "16",
        "--num_heads",
        "2",
        "--intermediate_dim",
        "32",
        "--warmup_steps",
        "4",
    ],
    "music": [
        "--epochs",
        "3",
        "--steps_per_epoch",
        "4",
        "--num_layers",
        "1",
        "--hidden_dim",
        "16",
        "--num_heads",
        "2",
        "--intermediate_dim",
        "32",
        "--batch_size",
        "4",
        "--sequence_length",
        "32",
        "--max_eval_windows",
        "8",
        "--warmup_steps",
        "4",
        "--jit_compile",
        "0",
        "--progress",
        "0",
    ],
    "translation": [
        "--epochs",
        "3",
        "--steps_per_epoch",
        "4",
        "--train_size",
        "256",
        "--vocabulary_size",
        "500",
        "--num_layers",
        "1",
        "--hidden_dim",
        "16",
        "--num_heads",
        "2",
        "--intermediate_dim",
        "32",
        "--tokens_per_batch",
        "256",
        "--max_length",
        "24",
        "--warmup_steps",
        "4",
        "--val_size",
        "32",
        "--progress",
        "0",
    ],
}


def run_driver(spec, path, env=None, expect_killed=False):
    with open(path, "w") as f:
        json.dump(spec, f)
    result = subprocess.run(
        [sys.executable, DRIVER, str(path)],
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(env or os.environ, TF_CPP_MIN_LOG_LEVEL="3"),
        cwd=ROOT,
    )
    expected = KILLED_EXIT_CODE if expect_killed else 0
    assert result.returncode == expected, (
        f"exit code {result.returncode}, expected {expected}\n"
        + result.stdout[-3000:]
        + result.stderr[-5000:]
    )
    return result.stdout


def weights(result):
    return [
        result[f"weight_{i}"] for i in range(sum(k.startswith("weight_") for k in result.files))
    ]


@pytest.mark.parametrize(
    "example",
    [
        "music",
        pytest.param("super_resolution", marks=pytest.mark.slow),
        pytest.param("translation", marks=pytest.mark.slow),
    ],
)
def test_killed_run_resumes_to_the_uninterrupted_result(example, tmp_path):
    common = TINY[example] + (
        ["--cache_dir", str(tmp_path / "cache")] if example == "music" else []
    )
    run_driver(
        {
            "example": example,
            "runs": [
                {
                    "argv": common + ["--output_dir", str(tmp_path / "whole")],
                    "result": str(tmp_path / "whole.npz"),
                },
                {
                    "argv": common + ["--output_dir", str(tmp_path / "killed")],
                    "result": str(tmp_path / "never_written.npz"),
                    "kill_at_step": KILL_AT_STEP,
                },
            ],
        },
        tmp_path / "first.json",
        expect_killed=True,
    )
    assert not os.path.exists(tmp_path / "never_written.npz")
    assert os.path.exists(tmp_path / "killed" / "backup")  # the epoch-0 backup
    run_driver(
        {
            "example": example,
            "runs": [
                {
                    "argv": common + ["--output_dir", str(tmp_path / "killed")],
                    "result": str(tmp_path / "resumed.npz"),
                },
            ],
        },
        tmp_path / "resume.json",
    )

    whole, resumed = np.load(tmp_path / "whole.npz"), np.load(tmp_path / "resumed.npz")
    # The uninterrupted run: 3 epochs from step 0. The resumed one restarted
    # from the end of epoch 0 (the kill lost epoch 1's first 2 steps).
    assert int(whole["start_iterations"]) == 0 and list(whole["epochs"]) == [0, 1, 2]
    assert int(resumed["start_iterations"]) == STEPS_PER_EPOCH
    assert list(resumed["epochs"]) == [1, 2]
    assert int(resumed["iterations"]) == int(whole["iterations"]) == EPOCHS * STEPS_PER_EPOCH
    # Same batches, same dropout masks: the losses of epochs 1 and 2 agree...
    np.testing.assert_allclose(
        resumed["batch_loss"], whole["batch_loss"][STEPS_PER_EPOCH:], rtol=1e-5, atol=1e-6
    )
    # ...and so do the final weights.
    pairs = list(zip(weights(whole), weights(resumed)))
    assert len(pairs) > 4
    max_difference = max(float(np.max(np.abs(a - b))) for a, b in pairs)
    assert max_difference < 1e-5, max_difference


@pytest.mark.slow
def test_killed_continue_training_resumes_to_the_epochs_it_asked_for(tmp_path):
    # Resuming an interrupted --continue_training counted its target from
    # history.csv, which by then held the continued epochs too: each resume
    # trained one more epoch than asked for.
    common = TINY["super_resolution"] + ["--output_dir", str(tmp_path / "run")]
    more = ["--continue_training", "--epochs", "2"]  # epochs 3 and 4, steps 13 to 20
    run_driver(
        {
            "example": "super_resolution",
            "runs": [
                {"argv": common, "result": str(tmp_path / "first.npz")},
                {
                    "argv": common + more,
                    "result": str(tmp_path / "never_written.npz"),
                    "kill_at_step": EPOCHS * STEPS_PER_EPOCH + STEPS_PER_EPOCH + 2,
                },  # in epoch 4
            ],
        },
        tmp_path / "first.json",
        expect_killed=True,
    )
    run_driver(
        {
            "example": "super_resolution",
            "runs": [
                {"argv": common + more, "result": str(tmp_path / "resumed.npz")},
            ],
        },
        tmp_path / "resume.json",
    )
    resumed = np.load(tmp_path / "resumed.npz")
    assert int(resumed["start_iterations"]) == (EPOCHS + 1) * STEPS_PER_EPOCH
    assert list(resumed["epochs"]) == [EPOCHS + 1]
    assert int(resumed["iterations"]) == (EPOCHS + 2) * STEPS_PER_EPOCH
    with open(tmp_path / "run" / "history.csv") as f:
        assert [row.split(",")[0] for row in f.read().split()[1:]] == ["0", "1", "2", "3", "4"]
