"""Layers, models and generation are backend-neutral: on JAX they never
import TensorFlow, even where it is installed.

A fresh process with KERAS_BACKEND=jax refuses every import of
`tensorflow*` and records the attempt (so a `try: import tensorflow` that
swallows the error is caught too), imports the three packages, then builds
a small translation model and decodes with it, so that imports inside
functions are reached as well.
"""

import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("jax")

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))

_CHILD = textwrap.dedent(
    """
    import sys
    import traceback

    attempts = []


    class RefuseTensorFlow:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0].startswith("tensorflow"):
                attempts.append((name, "".join(traceback.format_stack(limit=12))))
                raise ImportError(f"importing {name!r} is blocked in this test")
            return None


    sys.meta_path.insert(0, RefuseTensorFlow())

    import numpy as np

    import keras_attn.distribution
    import keras_attn.generation
    import keras_attn.layers
    import keras_attn.models

    assert keras_attn.layers.MultiHeadSelfAttention.__module__.startswith("keras_attn")
    model = keras_attn.models.translation_transformer(
        11, num_layers=1, hidden_dim=8, num_heads=2, intermediate_dim=8, max_length=8
    )
    source = np.array([[3, 4, 5, 0]], "int32")
    tokens = keras_attn.generation.greedy_search(
        model, np.ones((1, 1), "int32"), 4, inputs={"encoder_tokens": source}
    )
    assert np.asarray(tokens).shape == (1, 4), np.asarray(tokens).shape
    for name, stack in attempts:
        print(f"tried to import {name}:\\n{stack}")
    loaded = sorted(m for m in sys.modules if m.split(".")[0].startswith("tensorflow"))
    print("loaded:", loaded)
    sys.exit(1 if attempts or loaded else 0)
    """
)


def test_layers_models_and_generation_do_not_import_tensorflow_on_jax():
    env = dict(os.environ, KERAS_BACKEND="jax", PYTHONPATH=ROOT)
    result = subprocess.run(
        [sys.executable, "-c", _CHILD],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
