"""End-to-end run of the translation example (slow: trains, decodes, exports)."""

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.requires_tensorflow

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
EXAMPLE = os.path.join(ROOT, "examples", "translation")


@pytest.mark.slow
def test_train_evaluate_export_and_translate(tmp_path):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    output = tmp_path / "run"
    command = [
        sys.executable,
        os.path.join(EXAMPLE, "train.py"),
        "--output_dir",
        str(output),
        "--epochs",
        "1",
        "--train_size",
        "600",
        "--vocabulary_size",
        "600",
        "--num_layers",
        "1",
        "--hidden_dim",
        "32",
        "--num_heads",
        "2",
        "--intermediate_dim",
        "64",
        "--eval_size",
        "8",
        "--max_length",
        "24",
        "--num_beams",
        "2",
    ]
    subprocess.run(command, check=True, env=env, timeout=1200)
    for name in (
        "tokenizer.model",
        "model.keras",
        "history.csv",
        "training_curves.png",
        "attention.png",
        "bleu.json",
        "translations.txt",
    ):
        assert (output / name).exists(), name
    bleu = json.loads((output / "bleu.json").read_text())
    assert set(bleu) >= {"beam", "greedy"} and bleu["beam"]["sentences"] == 8
    assert (output / "export" / "1" / "saved_model.pb").exists()
    result = subprocess.run(
        [
            sys.executable,
            os.path.join(EXAMPLE, "translate.py"),
            str(output / "export"),
            "Ein Hund.",
        ],
        check=True,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert "Ein Hund." in result.stdout and "->" in result.stdout

    # The same command again evaluates and exports the finished run (the
    # next version); it trained a new model over model.keras before.
    trained = (output / "model.keras").read_bytes()
    again = subprocess.run(
        command, check=True, env=env, capture_output=True, text=True, timeout=1200
    )
    assert "holds a finished training run: evaluating it" in again.stdout
    assert (output / "model.keras").read_bytes() == trained
    assert (output / "export" / "2" / "saved_model.pb").exists()
