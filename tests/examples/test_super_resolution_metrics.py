"""The super-resolution example's quality measures on hand-made images:
PSNR, SSIM and the consistency check (tf.image underneath)."""

import math
import os
import sys

import numpy as np
import pytest

pytest.importorskip("tensorflow")
sys.path.insert(
    0, os.path.join(os.path.dirname(__file__), "..", "..", "examples", "super_resolution")
)
import evaluate  # noqa: E402


def _images(seed=0, shape=(3, 32, 32, 3)):
    return np.random.default_rng(seed).integers(16, 240, shape).astype(np.uint8)


def test_identical_images_get_the_maximum_psnr_and_ssim_one():
    a = _images()
    assert evaluate.psnr(a, a) == evaluate.MAX_PSNR
    assert evaluate.ssim(a, a) == pytest.approx(1.0, abs=1e-4)


def test_a_known_shift_gives_the_known_psnr():
    a = _images()
    # Every intensity off by 16: MSE = 256, PSNR = 10 log10(255^2 / 256).
    expected = 10 * math.log10(255**2 / 256)
    assert evaluate.psnr(a + 16, a) == pytest.approx(expected, abs=0.01)
    assert expected == pytest.approx(24.05, abs=0.01)
    # Half the images exact, half off by 16: the mean of per-image PSNRs.
    b = a.copy()
    b[1:] += 16
    assert evaluate.psnr(b, a) == pytest.approx((evaluate.MAX_PSNR + 2 * expected) / 3, abs=0.01)


def test_ssim_falls_as_noise_grows_and_is_symmetric():
    a = _images()
    noise = np.random.default_rng(1).integers(-1, 2, a.shape)
    scores = [
        evaluate.ssim(np.clip(a.astype(int) + amplitude * noise, 0, 255).astype(np.uint8), a)
        for amplitude in (0, 8, 32)
    ]
    assert scores[0] == pytest.approx(1.0, abs=1e-4)
    assert 1.0 > scores[1] > scores[2]
    noisy = np.clip(a.astype(int) + 32 * noise, 0, 255).astype(np.uint8)
    assert evaluate.ssim(noisy, a) == pytest.approx(evaluate.ssim(a, noisy), abs=1e-4)


def test_consistency_compares_the_box_downsampled_candidate_with_the_input():
    low = _images(shape=(2, 8, 8, 3))
    nearest = np.repeat(np.repeat(low, 4, axis=1), 4, axis=2)
    # Nearest upsampling is perfectly consistent: each 4x4 block averages back.
    assert evaluate.consistency_psnr(nearest, low) == evaluate.MAX_PSNR
    # A zero-mean +-8 checkerboard inside every block still averages back...
    checker = (np.indices((32, 32)).sum(axis=0) % 2 * 16 - 8)[None, :, :, None]
    textured = (nearest.astype(int) + checker).astype(np.uint8)
    assert evaluate.consistency_psnr(textured, low) == evaluate.MAX_PSNR
    assert evaluate.psnr(textured, nearest) == pytest.approx(10 * math.log10(255**2 / 64), abs=0.01)
    # ...while a uniform +4 shift of the candidate is seen by the check.
    shifted = nearest + 4
    assert evaluate.consistency_psnr(shifted, low) == pytest.approx(
        10 * math.log10(255**2 / 16), abs=0.01
    )
