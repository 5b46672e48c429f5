import math

import numpy as np
import pytest

from keras_attn.metrics import BitsPerDimension, MaskedSparseCategoricalAccuracy


def test_accuracy_counts_real_tokens_across_batches():
    metric = MaskedSparseCategoricalAccuracy()
    logits = np.eye(4, dtype="float32")[None]  # predicts 0, 1, 2, 3
    metric.update_state(np.array([[1, 1, 3, 0]]), logits)
    # Real tokens: positions 0..2 (target 0 at position 3 is padding); correct: 1.
    assert float(metric.result()) == pytest.approx(1 / 3)
    metric.update_state(np.array([[2, 0]]), logits[:, 2:4])  # one real token, correct
    assert float(metric.result()) == pytest.approx(2 / 4)


def test_bits_per_dimension_of_a_uniform_model_is_eight():
    metric = BitsPerDimension()
    metric.update_state(np.array([[0, 17, 255]]), np.zeros((1, 3, 256), "float32"))
    assert float(metric.result()) == pytest.approx(8.0, rel=1e-6)
    metric.reset_state()
    probs = np.full((1, 1, 256), 1e-9, "float32")
    probs[0, 0, 5] = 0.5
    logits = np.log(probs)
    metric.update_state(np.array([[5]]), logits)
    p = 0.5 / probs.sum()
    # About 7e-7 bits: float32 log-sum-exp (summed in a backend's own order)
    # is exact to ~1e-6 here; probabilities clipped at 1e-7 would give 7e-5.
    assert float(metric.result()) == pytest.approx(-math.log2(p), rel=1e-4, abs=1e-6)


@pytest.mark.parametrize("metric", [MaskedSparseCategoricalAccuracy, BitsPerDimension])
def test_mismatched_shapes_raise_a_clear_error(metric):
    y_true = np.zeros((2, 5), "int32")
    with pytest.raises(ValueError, match=r"y_true.shape=\(2, 5\), y_pred.shape=\(2, 5\)"):
        metric().update_state(y_true, np.zeros((2, 5), "float32"))  # no class axis
    with pytest.raises(ValueError, match=r"y_pred.shape=\(2, 4, 7\)"):
        metric().update_state(y_true, np.zeros((2, 4, 7), "float32"))  # wrong length
