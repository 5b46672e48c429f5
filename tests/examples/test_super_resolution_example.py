"""End-to-end runs of the super-resolution example (slow: trains, samples,
exports) on the shipped CIFAR-10 sample and on a folder of pictures."""

import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest

pytestmark = pytest.mark.requires_tensorflow

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
EXAMPLE = os.path.join(ROOT, "examples", "super_resolution")
TINY = [
    "--steps_per_epoch",
    "3",
    "--monitor_images",
    "4",
    "--eval_images",
    "8",
    "--num_samples",
    "2",
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
]


def _run(script, *args, timeout=1800):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    return subprocess.run(
        [sys.executable, os.path.join(EXAMPLE, script), *args],
        check=True,
        env=env,
        timeout=timeout,
        capture_output=True,
        text=True,
    )


@pytest.mark.slow
def test_super_resolution_train_sample_export_and_resume(tmp_path):
    output = tmp_path / "run"
    # Killed after its first epoch, the run resumes from the backup.
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    first = subprocess.Popen(
        [
            sys.executable,
            os.path.join(EXAMPLE, "train.py"),
            "--output_dir",
            str(output),
            "--epochs",
            "3",
            *TINY,
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    history = output / "history.csv"
    deadline = time.time() + 900
    while time.time() < deadline and first.poll() is None:
        if history.exists() and len(history.read_text().strip().splitlines()) >= 2:
            break
        time.sleep(0.5)
    first.kill()
    first.wait()
    assert len(history.read_text().strip().splitlines()) == 2, history.read_text()
    _run("train.py", "--output_dir", str(output), "--epochs", "3", *TINY)
    rows = history.read_text().strip().splitlines()
    assert [r.split(",")[0] for r in rows[1:]] == ["0", "1", "2"]
    for name in (
        "model.keras",
        "history.csv",
        "training_curves.png",
        "samples.png",
        "metrics.json",
    ):
        assert (output / name).exists(), name
    metrics = json.loads((output / "metrics.json").read_text())
    assert metrics["train_images"] == 900 and metrics["validation_images"] == 100
    # Optimizer steps x batch, across the kill and the resume: 3 epochs of 3 steps.
    assert metrics["training_images_seen"] == 9 * metrics["batch_size"]
    # Under the 8 bits/dim of a uniform guess: the low-resolution prior (a Laplace
    # around the bicubic intensity) starts the model near 5.6 after 9 tiny steps.
    assert 3.0 < metrics["validation_bits_per_dim"] < 8.0
    for key in (
        "psnr_bicubic",
        "ssim_bicubic",
        "psnr_sample_T1.0",
        "psnr_sample_T0.9",
        "sampling_seconds_per_image",
    ):
        assert np.isfinite(metrics[key]), key
    assert metrics["psnr_bicubic"] > 15  # bicubic of real photos: about 22 dB
    assert (output / "export" / "1" / "saved_model.pb").exists()

    pictures = tmp_path / "pictures"
    pictures.mkdir()
    from PIL import Image

    from keras_attn.preprocessing import images

    sample = images.load_cifar10(os.path.join(EXAMPLE, "data", "cifar10_sample.npz"), "validation")[
        0
    ]
    Image.fromarray(sample[0]).resize((64, 48)).save(pictures / "wide.png")
    Image.fromarray(sample[1]).save(pictures / "small.jpg")
    result = _run(
        "super_resolve.py",
        str(output / "export"),
        "--image_dir",
        str(pictures),
        "--output_dir",
        str(tmp_path / "resolved"),
    )
    assert "wide.png: sample PSNR" in result.stdout
    assert (tmp_path / "resolved" / "small_super_resolved.png").exists()
    missing = subprocess.run(
        [
            sys.executable,
            os.path.join(EXAMPLE, "super_resolve.py"),
            str(output / "export"),
            "--image_dir",
            str(tmp_path / "no_such_folder"),
        ],
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"),
        capture_output=True,
        text=True,
    )
    assert missing.returncode == 2 and "Traceback" not in missing.stderr
    assert "no such folder. Pass a folder of your own pictures" in missing.stderr


@pytest.mark.slow
def test_class_conditional_and_picture_folder_modes(tmp_path):
    output = tmp_path / "conditional"
    _run(
        "train.py",
        "--mode",
        "class_conditional",
        "--output_dir",
        str(output),
        "--epochs",
        "1",
        "--num_samples",
        "1",
        *TINY[:6],
        *TINY[8:],
    )
    metrics = json.loads((output / "metrics.json").read_text())
    assert metrics["mode"] == "class_conditional" and metrics["samples"] == 10
    assert (output / "samples_T1.0.png").exists() and (output / "samples_T0.9.png").exists()

    from PIL import Image

    from keras_attn.preprocessing import images

    pictures = tmp_path / "pictures"
    pictures.mkdir()
    sample = images.load_cifar10(os.path.join(EXAMPLE, "data", "cifar10_sample.npz"), "all")[0]
    for i in range(12):
        Image.fromarray(sample[i * 80]).save(pictures / f"{i:02d}.png")
    output = tmp_path / "folder"
    _run(
        "train.py",
        "--mode",
        "unconditional",
        "--image_dir",
        str(pictures),
        "--output_dir",
        str(output),
        "--epochs",
        "1",
        *TINY,
    )
    metrics = json.loads((output / "metrics.json").read_text())
    assert metrics["train_images"] == 11 and metrics["validation_images"] == 1
