"""Learning-rate schedules."""

import math

import keras
from keras import ops

from keras_attn.checks import is_number, require


@keras.saving.register_keras_serializable(package="keras_attn")
class WarmupInverseSqrtSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """The Transformer's schedule: linear warmup, then inverse square root decay.

    `lr = scale * d_model^-0.5 * min(n^-0.5, n * warmup_steps^-1.5)` with `n = step + 1`; the
    peak, at `n = warmup_steps`, is `scale / sqrt(d_model * warmup_steps)`.

    Args:
        d_model: the model width D (positive int).
        warmup_steps: steps of linear warmup (positive int; 4000 in the paper).
        scale: multiplier of the whole curve (1.0 in the paper).

    Call arguments:
        step: the optimizer's iteration count (int or scalar tensor).

    Returns:
        The float32 learning rate.

    Raises:
        ValueError: if `d_model`, `warmup_steps` or `scale` is not a positive finite number.

    Example:
    >>> from keras_attn.schedules import WarmupInverseSqrtSchedule
    >>> schedule = WarmupInverseSqrtSchedule(d_model=64, warmup_steps=4)
    >>> # 64 ** -0.5 * min(n ** -0.5, n / 8): up to 1 / sqrt(64 * 4) at n = 4
    >>> [round(float(schedule(step)), 6) for step in (0, 1, 3, 15)]
    [0.015625, 0.03125, 0.0625, 0.03125]

    Reference:
        Vaswani et al. 2017, "Attention Is All You Need", section 5.3.
    """

    def __init__(self, d_model, warmup_steps=4000, scale=1.0):
        for name, value in (("d_model", d_model), ("warmup_steps", warmup_steps), ("scale", scale)):
            positive_finite = is_number(value) and 0 < value < math.inf  # NaN fails too
            require(positive_finite, name, value, "a positive finite number")
        self.d_model = d_model
        self.warmup_steps = warmup_steps
        self.scale = scale

    def __call__(self, step):
        n = ops.cast(step, "float32") + 1.0
        rate = ops.minimum(ops.rsqrt(n), n * float(self.warmup_steps) ** -1.5)
        return self.scale * float(self.d_model) ** -0.5 * rate

    def get_config(self):
        return {"d_model": self.d_model, "warmup_steps": self.warmup_steps, "scale": self.scale}
