"""Shared test setup: one process, quiet TensorFlow, float32 by default."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras  # noqa: E402
import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def _reset_dtype_policy_and_seed():
    """Each test starts from float32 and the same seed: runs are repeatable
    and a test that switches to mixed precision cannot leak it to others."""
    keras.config.set_dtype_policy("float32")
    keras.utils.set_random_seed(1234)
    yield
    keras.config.set_dtype_policy("float32")
