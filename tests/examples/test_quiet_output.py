"""The examples print what they have to say and nothing of TensorFlow's
start-up (unless --verbose), and show training progress against the time
budget."""

import os
import re
import subprocess
import sys

import pytest

pytestmark = pytest.mark.requires_tensorflow

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
TRAIN = os.path.join(ROOT, "examples", "translation", "train.py")
NOISE = ("absl::InitializeLog", "cuInit", "cuda drivers", "oneDNN", "shuffle=True")
TINY = [
    "--train_size",
    "300",
    "--val_size",
    "16",
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
    "--eval_size",
    "4",
    "--max_length",
    "16",
    "--num_beams",
    "1",
    "--skip_export",
    "--minutes",
    "0.05",
]


def _run(tmp_path, *extra):
    # As a user's shell has it: no TF_CPP_MIN_LOG_LEVEL (the test session sets one).
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    result = subprocess.run(
        [sys.executable, TRAIN, "--output_dir", str(tmp_path / "run"), *TINY, *extra],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    return result.stdout + result.stderr


def test_training_output_is_quiet_and_shows_the_budget(tmp_path):
    output = _run(tmp_path, "--progress", "1")  # the bar, as on a terminal
    for noise in NOISE:
        assert noise not in output, (noise, output[-3000:])
    assert "Training for 0.05 min (the bar is the time budget)" in output
    assert "Epoch 1/" not in output  # Keras' epoch bar would promise an ETA past the budget
    assert "greedy (beams=1), " in output and ": BLEU" in output


def test_output_to_a_pipe_gets_one_line_per_epoch_by_default(tmp_path):
    output = _run(tmp_path)  # stdout is a pipe here
    assert "Training for 0.05 min at most" in output
    assert "(the bar is the time budget)" not in output and "\r" not in output
    # The budget's own line per epoch (Keras' "Epoch 1/N" and "100/100" would
    # count an epoch the budget cut short as complete).
    assert re.search(r"^epoch 1: \d+ (of \d+ )?steps", output, re.MULTILINE), output[-2000:]
    assert "Epoch 1/" not in output


def test_verbose_brings_tensorflow_logs_back(tmp_path):
    output = _run(tmp_path, "--verbose", "--epochs", "1", "--steps_per_epoch", "1")
    assert "absl::InitializeLog" in output or "oneDNN" in output, output[-3000:]


def test_the_grpc_client_is_quiet_too():
    # --grpc imports TensorFlow, whose start-up lines came before the answer.
    pytest.importorskip("tensorflow_serving")
    client = os.path.join(ROOT, "examples", "serving", "client.py")
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    result = subprocess.run(
        [
            sys.executable,
            client,
            "--grpc",
            "localhost:1",
            "--timeout",
            "5",
            "translate",
            "Ein Hund.",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr.startswith("error: TF Serving gRPC UNAVAILABLE at localhost:1"), (
        result.stderr
    )
    assert result.stderr.count("\n") == 1, result.stderr
