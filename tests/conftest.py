"""Shared test setup: float32 and the same seed in every test, and the
TensorFlow-only marker (the backend default and quiet TensorFlow are the root
conftest.py's).

The suite runs on the Keras backend named by KERAS_BACKEND (default
tensorflow). Tests that need TensorFlow itself (SavedModel export, TF
Serving, tf.data pipelines, tensorflow-text, tf.distribute, `tf.function`,
the examples) carry the `requires_tensorflow` marker and are skipped on any
other backend; the rest is backend-neutral and also runs on JAX:
`KERAS_BACKEND=jax python -m pytest -m "not slow and not requires_tensorflow"`.
Everything under tests/export and tests/examples gets the marker here too, so
a new test there is never run on JAX by mistake.
"""

import os
import warnings

import keras
import pytest

BACKEND = keras.backend.backend()

if BACKEND == "torch":
    # The tests read results with np.asarray; a torch tensor that requires
    # grad refuses that, and NumPy has no bfloat16. Detach first, bfloat16
    # as float32 (tests only; the library returns what keras.ops gives).
    import torch  # noqa: E402

    _tensor_array = torch.Tensor.__array__

    def _detached_array(self, dtype=None, copy=None):
        tensor = self.detach().cpu()
        if tensor.dtype == torch.bfloat16:
            tensor = tensor.float()
        return _tensor_array(tensor, dtype)

    torch.Tensor.__array__ = _detached_array
TENSORFLOW_ONLY_FOLDERS = ("export", "examples")


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by marker
def pytest_collection_modifyitems(config, items):
    tests = os.path.dirname(os.path.abspath(__file__))
    folders = tuple(os.path.join(tests, folder) + os.sep for folder in TENSORFLOW_ONLY_FOLDERS)
    skip = pytest.mark.skip(reason=f"needs TensorFlow; KERAS_BACKEND={BACKEND}")
    for item in items:
        if str(item.path).startswith(folders):
            item.add_marker(pytest.mark.requires_tensorflow)
        if BACKEND != "tensorflow" and "requires_tensorflow" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _reset_dtype_policy_and_seed():
    """Each test starts from float32 and the same seed: runs are repeatable
    and a test that switches to mixed precision (or loads an example script,
    which sets the scripts' warning format) cannot leak it to others."""
    keras.config.set_dtype_policy("float32")
    keras.utils.set_random_seed(1234)
    formatwarning = warnings.formatwarning
    yield
    keras.config.set_dtype_policy("float32")
    # A test that loads an example script (examples/quiet.py) must not give
    # pytest's warning summary the scripts' one-line format.
    warnings.formatwarning = formatwarning
