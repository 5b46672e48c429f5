"""Quiet TensorFlow for every pytest run from the repository root, the
docstring examples under keras_attn/ included (tests/conftest.py holds the
test-suite setup)."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
