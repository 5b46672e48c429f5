import os
import tempfile

import keras
import numpy as np
import pytest

from keras_attn.schedules import WarmupInverseSqrtSchedule


def test_values_match_the_formula_and_peak():
    schedule = WarmupInverseSqrtSchedule(d_model=512, warmup_steps=4000)
    assert np.isfinite(float(schedule(0))) and float(schedule(0)) > 0
    for step in (0, 99, 3999, 10000):
        n = step + 1
        want = 512**-0.5 * min(n**-0.5, n * 4000**-1.5)
        assert float(schedule(step)) == pytest.approx(want, rel=1e-5)
    assert float(schedule(3999)) == pytest.approx(1 / np.sqrt(512 * 4000), rel=1e-5)
    assert float(schedule(3999)) > float(schedule(3000)) and float(schedule(3999)) > float(
        schedule(8000)
    )


def test_restored_with_the_optimizer_after_reload():
    schedule = WarmupInverseSqrtSchedule(d_model=64, warmup_steps=10, scale=2.0)
    inputs = keras.Input((3,))
    model = keras.Model(inputs, keras.layers.Dense(1)(inputs))
    model.compile(keras.optimizers.Adam(schedule), "mse")
    model.fit(np.ones((4, 3)), np.ones((4, 1)), epochs=3, verbose=0)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "m.keras")
        model.save(path)
        again = keras.saving.load_model(path)
    restored = again.optimizer.learning_rate
    assert isinstance(again.optimizer._learning_rate, WarmupInverseSqrtSchedule)
    assert again.optimizer._learning_rate.get_config() == schedule.get_config()
    assert float(restored) == pytest.approx(float(schedule(3)), rel=1e-5)


def test_errors():
    with pytest.raises(
        ValueError, match=r"^`d_model` must be a positive finite number\. Received: d_model=0\.$"
    ):
        WarmupInverseSqrtSchedule(d_model=0)
    with pytest.raises(
        ValueError, match="`scale` must be a positive finite number. Received: scale=nan"
    ):
        WarmupInverseSqrtSchedule(d_model=8, scale=float("nan"))
