"""Losses for sequence models with padding."""

import keras
from keras import ops

from keras_attn import keras_internals
from keras_attn.checks import is_number, require


@keras.saving.register_keras_serializable(package="keras_attn")
class MaskedSparseCategoricalCrossentropy(keras.losses.Loss):
    """Token-level cross-entropy with label smoothing that ignores padding.

    `label_smoothing` is spread uniformly over the vocabulary (Szegedy et al. 2016); positions
    whose target is `ignore_class` count nothing; the result is the mean over the real tokens.

    Args:
        label_smoothing: in [0, 1).
        ignore_class: target id excluded from the loss (padding), or None.
        from_logits: whether `y_pred` are logits (default) or probabilities.
        name, reduction, dtype: as in `keras.losses.Loss`.

    Call arguments:
        y_true: (B, T) integer target ids.
        y_pred: (B, T, V) logits (or probabilities).

    Returns:
        A scalar: mean loss per real token, in nats.

    Raises:
        ValueError: if `label_smoothing` is outside [0, 1).

    Example:
    >>> import numpy as np
    >>> from keras_attn.losses import MaskedSparseCategoricalCrossentropy
    >>> y_true = np.array([[1, 2, 0]])  # the last position is padding (id 0)
    >>> probabilities = np.array([[[0.1, 0.5, 0.2, 0.2],        # p(1) = 0.5
    ...                            [0.25, 0.25, 0.25, 0.25],    # p(2) = 0.25
    ...                            [1.0, 0.0, 0.0, 0.0]]])      # ignored
    >>> loss = MaskedSparseCategoricalCrossentropy(label_smoothing=0.0, from_logits=False)
    >>> round(float(loss(y_true, probabilities)), 4)  # (ln 2 + ln 4) / 2
    1.0397
    >>> smoothed = MaskedSparseCategoricalCrossentropy(label_smoothing=0.1)
    >>> round(float(smoothed(y_true, np.zeros((1, 3, 4)))), 4)  # uniform: ln 4
    1.3863

    Reference:
        Vaswani et al. 2017, section 5.4 (label smoothing 0.1).
    """

    def __init__(
        self,
        label_smoothing=0.1,
        ignore_class=0,
        from_logits=True,
        name="masked_sparse_categorical_crossentropy",
        reduction="sum_over_batch_size",
        dtype=None,
    ):
        super().__init__(name=name, reduction=reduction, dtype=dtype)
        ok = is_number(label_smoothing, 0.0) and label_smoothing < 1.0
        require(ok, "label_smoothing", label_smoothing, "a number in [0, 1)")
        self.label_smoothing = label_smoothing
        self.ignore_class = ignore_class
        self.from_logits = from_logits

    def call(self, y_true, y_pred):
        y_true = ops.cast(y_true, "int32")
        y_pred = ops.cast(y_pred, "float32")
        if self.from_logits:
            log_probs = ops.log_softmax(y_pred, axis=-1)
        else:
            log_probs = ops.log(ops.clip(y_pred, 1e-7, 1.0))
        valid = None
        if self.ignore_class is not None:
            valid = ops.not_equal(y_true, self.ignore_class)
            # The ignored id may lie outside the vocabulary (e.g. -1).
            y_true = ops.where(valid, y_true, 0)
        true_log_prob = ops.take_along_axis(log_probs, y_true[..., None], axis=-1)[..., 0]
        loss = -(1.0 - self.label_smoothing) * true_log_prob
        if self.label_smoothing:
            loss = loss - self.label_smoothing * ops.mean(log_probs, axis=-1)
        if valid is None:
            return loss
        # Keras reduces a loss over the entries of the implicit mask only (the
        # mechanism of its own `ignore_class`), which keeps the mean exact and
        # the scaling right under tf.distribute.
        return keras_internals.set_mask(ops.where(valid, loss, 0.0), valid)

    def get_config(self):
        return {
            **super().get_config(),
            "label_smoothing": self.label_smoothing,
            "ignore_class": self.ignore_class,
            "from_logits": self.from_logits,
        }
