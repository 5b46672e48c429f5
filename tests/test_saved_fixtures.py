"""`.keras` files saved by an earlier keras_attn keep loading and computing
the same values (the fixtures and how they were made: tests/fixtures/)."""

import os

import keras
import numpy as np
import pytest

import keras_attn  # noqa: F401  (registers the layers)

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")


@pytest.mark.parametrize("name", ["attention_layers_v0.1.0", "super_resolution_v0.1.0"])
def test_a_keras_file_of_an_earlier_release_loads_and_computes_the_same(name):
    model = keras.saving.load_model(os.path.join(FIXTURES, f"{name}.keras"))
    saved = np.load(os.path.join(FIXTURES, f"{name}.npz"))
    inputs = {key[len("input_") :]: saved[key] for key in saved.files if key.startswith("input_")}
    outputs = keras.ops.convert_to_numpy(model(inputs, training=False))
    np.testing.assert_allclose(outputs, saved["outputs"], rtol=1e-4, atol=1e-5)
