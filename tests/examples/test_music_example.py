"""End-to-end runs of examples/music on the shipped data (slow)."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

pytestmark = pytest.mark.requires_tensorflow

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
EXAMPLE = os.path.join(ROOT, "examples", "music")
TINY = [
    "--num_layers",
    "1",
    "--hidden_dim",
    "32",
    "--num_heads",
    "2",
    "--intermediate_dim",
    "64",
    "--batch_size",
    "4",
    "--sequence_length",
    "32",
    "--epochs",
    "2",
    "--steps_per_epoch",
    "10",
    "--warmup_steps",
    "10",
    "--progress",
    "2",
]


def _run(script, *args):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    result = subprocess.run(
        [sys.executable, os.path.join(EXAMPLE, script), *args],
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result.stdout


@pytest.mark.slow
@pytest.mark.parametrize("task", ["jsb", "performance"])
def test_train_evaluate_export_and_generate(task, tmp_path):
    run_dir = str(tmp_path / task)
    extra = ["--midi_dir", os.path.join(EXAMPLE, "data", "pop909")] if task == "performance" else []
    _run(
        "train.py",
        "--task",
        task,
        "--output_dir",
        run_dir,
        "--cache_dir",
        str(tmp_path / "cache"),
        "--max_eval_windows",
        "16",
        *TINY,
        *extra,
    )
    with open(os.path.join(run_dir, "nll.json")) as f:
        nll = json.load(f)["nll"]
    # Better than a uniform guess over the vocabulary after 20 steps.
    vocabulary = 132 if task == "jsb" else 391
    assert set(nll) == {"1L", "2L"}
    for result in nll.values():
        assert 0 < result["nll_per_token"] < np.log(vocabulary)
    assert nll["1L"]["tokens"] == nll["2L"]["tokens"]  # the same targets at both lengths
    for name in ("model.keras", "history.csv", "training_curves.png", "export/1/saved_model.pb"):
        assert os.path.exists(os.path.join(run_dir, name)), name
    if task == "jsb":
        # The served generator, like generate.py, never samples a pitch no
        # training chorale uses (a 20-step model at temperature 3 would).
        import tensorflow as tf

        from tests.examples.scripts import load_script

        music_data = load_script("music/music_data.py")
        unused = music_data.unused_pitch_ids("jsb", music_data.load_jsb(None, "train"))
        served = tf.saved_model.load(os.path.join(run_dir, "export", "1")).signatures[
            "serving_default"
        ]
        events = served(
            primer=tf.constant([[1]] * 4),
            num_steps=tf.constant(60),
            temperature=tf.constant(3.0),
            top_k=tf.constant(0),
            top_p=tf.constant(1.0),
            seed=tf.constant(7),
        )["events"].numpy()
        assert (events >= 4).sum() > 100  # it sampled pitches
        assert not np.isin(events, unused).any()
    # Both generation tasks: from nothing and continuing a primer (JSB: the
    # chorales of a file laid out as the data, as a held-out set would be).
    primer = os.path.join(EXAMPLE, "data", "pop909", "005.mid")
    if task == "jsb":
        with open(os.path.join(EXAMPLE, "data", "Jsb16thSeparated.json")) as f:
            held_out = {"valid": json.load(f)["valid"][-3:]}
        primer = str(tmp_path / "held_out.json")
        with open(primer, "w") as f:
            json.dump(held_out, f)
    for args in (["--primer", "none"], ["--primer", primer, "--primer_length", "16"]):
        out = _run(
            "generate.py",
            "--run_dir",
            run_dir,
            "--num_samples",
            "2",
            "--top_k",
            "20",
            "--timing_steps",
            "2",
            "--jit_compile",
            "0",
            *args,
        )
        assert "events/s for the batch" in out
    if task == "jsb":  # the samples against the file's 3 chorales
        with open(os.path.join(run_dir, "samples", "held_out_report.json")) as f:
            report = json.load(f)
        assert report["primer"] == primer and report["num_samples"] == 2
        assert report["statistics"]["validation"]["notes"] > 0
    # --speed 0: the samples without the two timing passes.
    out = _run(
        "generate.py",
        "--run_dir",
        run_dir,
        "--num_samples",
        "2",
        "--name",
        "quick",
        "--speed",
        "0",
        "--timing_steps",
        "0",
        "--jit_compile",
        "0",
    )
    assert "Timing the loop" not in out and "events/s" not in out
    with open(os.path.join(run_dir, "samples", "quick_report.json")) as f:
        assert "events_per_second" not in json.load(f)
    samples = sorted(os.listdir(os.path.join(run_dir, "samples")))
    assert sum(name.endswith(".mid") for name in samples) == 6
    assert sum(name.endswith(".png") for name in samples) == 6
    # A second run of the same command finds the finished run and does not retrain.
    out = _run(
        "train.py",
        "--task",
        task,
        "--output_dir",
        run_dir,
        "--cache_dir",
        str(tmp_path / "cache"),
        "--skip_export",
        *TINY,
        *extra,
    )
    assert "holds a finished training run" in out


def test_jsb_transposition_variants_and_their_windows():
    from tests.examples.scripts import load_script

    music_data = load_script("music/music_data.py")
    # One step S 74, A rest, T 65, B 58 (ids pitch + 4, rest 3), then END; and a chorale
    # whose soprano sings 126, which only shifts of at most +1 keep in 0..127.
    low = np.array([78, 3, 69, 62, 2], np.int32)
    high = np.array([130, 70, 60, 50, 2], np.int32)
    variants = music_data.transposed_chorales([low, high])
    assert [v.tolist() for v in variants[0][::3]] == [
        [75, 3, 66, 59, 2],  # -3
        [78, 3, 69, 62, 2],  # 0
        [81, 3, 72, 65, 2],  # +3
    ]
    assert [v[0] for v in variants[1]] == [127, 128, 129, 130, 131, 130, 130]
    # The pipeline draws one variant per example: every window is the chorale shifted.
    windows = music_data.training_dataset(variants[:1], 4, 8, seed=0, step=4)
    (inputs, targets) = next(iter(windows))
    shifts = {int(t[0]) - 78 for t in targets.numpy()}
    assert shifts <= set(range(-3, 4)) and len(shifts) > 1
    for t in targets.numpy():
        shift = int(t[0]) - 78
        assert t.tolist() == [78 + shift, 3, 69 + shift, 62 + shift]
    assert inputs.numpy()[:, 0].tolist() == [1] * 8
