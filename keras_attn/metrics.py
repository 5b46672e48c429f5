"""Metrics for sequence and pixel models with padding."""

import math

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="keras_attn")
class MaskedSparseCategoricalAccuracy(keras.metrics.Mean):
    """Fraction of real (non-padding) tokens whose arg-max prediction is right (per token).

    Args:
        ignore_class: target id excluded (padding), or None.
        name, dtype: as in `keras.metrics.Metric`.

    Call arguments (`update_state`):
        y_true: (B, T) integer target ids.
        y_pred: (B, T, V) logits or probabilities.
        sample_weight: optional (B, T) weights, multiplied with the mask.

    Returns:
        `result()`: scalar accuracy in [0, 1].

    Raises:
        ValueError: in `update_state`, if `y_pred` is not `y_true`'s shape plus a class axis.

    Example:
    >>> import numpy as np
    >>> from keras_attn.metrics import MaskedSparseCategoricalAccuracy
    >>> accuracy = MaskedSparseCategoricalAccuracy()  # ignores id 0
    >>> logits = np.eye(4)[[[1, 1, 0]]]  # predicts 1, 1, 0
    >>> float(accuracy(np.array([[1, 2, 0]]), logits))  # the padding (0) is ignored
    0.5
    """

    def __init__(self, ignore_class=0, name="accuracy", dtype=None):
        super().__init__(name=name, dtype=dtype)
        self.ignore_class = ignore_class

    def update_state(self, y_true, y_pred, sample_weight=None):
        _check_shapes(type(self).__name__, y_true, y_pred)
        y_true = ops.cast(y_true, "int32")
        predicted = ops.cast(ops.argmax(y_pred, axis=-1), "int32")
        correct = ops.cast(ops.equal(predicted, y_true), "float32")
        return _update_per_token(super(), correct, y_true, self.ignore_class, sample_weight)

    def get_config(self):
        return {**super().get_config(), "ignore_class": self.ignore_class}


@keras.saving.register_keras_serializable(package="keras_attn")
class BitsPerDimension(keras.metrics.Mean):
    """Negative log-likelihood in bits per dimension: `-log2 p(x_i)` over the real dimensions.

    Args:
        from_logits: whether `y_pred` are logits (default) or probabilities.
        ignore_class: target id excluded (padding), or None (images: 0 is an intensity).
        name, dtype: as in `keras.metrics.Metric`.

    Call arguments (`update_state`):
        y_true: (B, ...) integer targets.
        y_pred: (B, ..., V) logits or probabilities.
        sample_weight: optional weights of shape `y_true.shape`.

    Returns:
        `result()`: scalar bits per dimension.

    Raises:
        ValueError: in `update_state`, if `y_pred` is not `y_true`'s shape plus a class axis.

    Example:
    >>> import numpy as np
    >>> from keras_attn.metrics import BitsPerDimension
    >>> uniform = np.zeros((1, 3, 256))  # equal logits for every intensity
    >>> round(float(BitsPerDimension()(np.array([[0, 17, 255]]), uniform)), 4)  # log2(256)
    8.0

    Reference:
        Parmar et al. 2018, "Image Transformer", section 5 (bits/dim).
    """

    def __init__(self, from_logits=True, ignore_class=None, name="bits_per_dim", dtype=None):
        super().__init__(name=name, dtype=dtype)
        self.from_logits = from_logits
        self.ignore_class = ignore_class

    def update_state(self, y_true, y_pred, sample_weight=None):
        _check_shapes(type(self).__name__, y_true, y_pred)
        y_true = ops.cast(y_true, "int32")
        nats = keras.losses.sparse_categorical_crossentropy(
            y_true, ops.cast(y_pred, "float32"), from_logits=self.from_logits
        )
        bits = nats / math.log(2.0)
        return _update_per_token(super(), bits, y_true, self.ignore_class, sample_weight)

    def get_config(self):
        config = super().get_config()
        return {**config, "from_logits": self.from_logits, "ignore_class": self.ignore_class}


def _check_shapes(owner, y_true, y_pred):
    """Raises a ValueError unless y_pred is (*y_true.shape, classes)."""
    true, pred = tuple(y_true.shape), tuple(y_pred.shape)
    if len(pred) != len(true) + 1 or any(a != b for a, b in zip(true, pred) if None not in (a, b)):
        expected = f"{owner} expects y_true (B, T) class ids and y_pred (B, T, classes)"
        raise ValueError(f"{expected}. Received: y_true.shape={true}, y_pred.shape={pred}.")


def _update_per_token(mean_metric, values, y_true, ignore_class, sample_weight):
    """Updates `mean_metric` with every real token counted once (keras.metrics.Mean would
    average each sample first)."""
    weight = ops.ones_like(values)
    if ignore_class is not None:
        weight = ops.cast(ops.not_equal(y_true, ignore_class), "float32")
    if sample_weight is not None:
        weight = weight * ops.cast(sample_weight, "float32")
    return mean_metric.update_state(ops.reshape(values, (-1,)), ops.reshape(weight, (-1,)))
