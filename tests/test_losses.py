import math

import keras
import numpy as np
import pytest

from keras_attn.losses import MaskedSparseCategoricalCrossentropy


def test_hand_computed_value_with_smoothing_and_padding():
    # Vocabulary of 3; logits chosen so probabilities are [0.5, 0.25, 0.25].
    logits = np.log(np.array([[[0.5, 0.25, 0.25], [0.5, 0.25, 0.25], [0.1, 0.1, 0.8]]], "float32"))
    targets = np.array([[1, 2, 0]])  # last position is padding
    loss = MaskedSparseCategoricalCrossentropy(label_smoothing=0.1)(targets, logits)
    mean_log = (math.log(0.5) + 2 * math.log(0.25)) / 3
    per_token = -(0.9 * math.log(0.25) + 0.1 * mean_log)
    assert float(loss) == pytest.approx(per_token, rel=1e-5)


def test_padding_changes_nothing_and_batch_mean_is_per_token():
    rng = np.random.default_rng(0)
    logits = rng.standard_normal((2, 4, 5)).astype("float32")
    targets = np.array([[1, 2, 3, 4], [2, 0, 0, 0]])
    loss_fn = MaskedSparseCategoricalCrossentropy(label_smoothing=0.0)
    lp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    real = [(0, 0), (0, 1), (0, 2), (0, 3), (1, 0)]
    want = -np.mean([lp[b, t, targets[b, t]] for b, t in real])
    assert float(loss_fn(targets, logits)) == pytest.approx(want, rel=1e-5)
    # Garbage logits on padded positions do not matter.
    noisy = logits.copy()
    noisy[1, 1:] = 50.0
    assert float(loss_fn(targets, noisy)) == pytest.approx(want, rel=1e-5)


def test_round_trip_and_errors():
    loss = MaskedSparseCategoricalCrossentropy(label_smoothing=0.2, ignore_class=-1)
    again = keras.losses.deserialize(keras.losses.serialize(loss))
    assert again.get_config() == loss.get_config()
    targets = np.array([[1, -1]])
    value = again(targets, np.zeros((1, 2, 4), "float32"))
    assert float(value) == pytest.approx(math.log(4), rel=1e-5)
    with pytest.raises(
        ValueError,
        match=r"^`label_smoothing` must be a number in \[0, 1\)\. Received: label_smoothing=1\.0\.$",
    ):
        MaskedSparseCategoricalCrossentropy(label_smoothing=1.0)
