"""Issue 6, case 8: the warmup schedule is finite at step 0, serializable
and restored after reload. tests/test_schedules.py checks the formula, the
peak and a `.keras` round trip with the optimizer; here: the optimizer's
own int64 step counter in a compiled graph, serialization through
`keras.optimizers.schedules`, a reload under mixed precision (the optimizer
wrapped in a LossScaleOptimizer) that comes back at the saved step, and
argument errors.
"""

import keras
import numpy as np
import pytest

from keras_attn.schedules import WarmupInverseSqrtSchedule


@pytest.mark.requires_tensorflow
def test_finite_and_positive_at_step_zero_in_a_compiled_graph():
    import tensorflow as tf

    schedule = WarmupInverseSqrtSchedule(d_model=512, warmup_steps=4000)
    compiled = tf.function(schedule, jit_compile=True)
    for step in (tf.constant(0, tf.int64), tf.constant(0, tf.int32), np.int64(0), 0):
        rate = float(compiled(step))
        assert np.isfinite(rate) and rate == pytest.approx(512**-0.5 * 4000**-1.5, rel=1e-5)
    assert np.isfinite(float(schedule(2**40))) and float(schedule(2**40)) > 0


def test_serialization_round_trip():
    schedule = WarmupInverseSqrtSchedule(d_model=64, warmup_steps=10, scale=2.0)
    restored = keras.optimizers.schedules.deserialize(
        keras.optimizers.schedules.serialize(schedule)
    )
    assert isinstance(restored, WarmupInverseSqrtSchedule)
    assert restored.get_config() == schedule.get_config()
    steps = np.arange(0, 40, 3)
    np.testing.assert_allclose(
        [float(restored(s)) for s in steps], [float(schedule(s)) for s in steps]
    )
    optimizer = keras.optimizers.deserialize(
        keras.optimizers.serialize(keras.optimizers.Adam(schedule))
    )
    assert optimizer._learning_rate.get_config() == schedule.get_config()


def test_restored_under_mixed_precision_at_the_saved_step(tmp_path):
    keras.config.set_dtype_policy("mixed_float16")
    schedule = WarmupInverseSqrtSchedule(d_model=64, warmup_steps=10)
    inputs = keras.Input((3,))
    outputs = keras.layers.Dense(1, dtype="float32")(keras.layers.Dense(4)(inputs))
    model = keras.Model(inputs, outputs)
    model.compile(keras.optimizers.Adam(schedule), "mse")
    data = (np.ones((4, 3), "float32"), np.ones((4, 1), "float32"))
    model.fit(*data, epochs=4, verbose=0)
    steps = int(model.optimizer.iterations)
    path = str(tmp_path / "m.keras")
    model.save(path)
    again = keras.saving.load_model(path)
    assert int(again.optimizer.iterations) == steps
    assert float(again.optimizer.learning_rate) == pytest.approx(float(schedule(steps)), rel=1e-6)
    assert isinstance(again.optimizer, keras.optimizers.LossScaleOptimizer)
    assert again.optimizer.inner_optimizer._learning_rate.get_config() == schedule.get_config()


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"d_model": 0}, r"`d_model` must be a positive finite number\. Received: d_model=0"),
        ({"d_model": "512"}, r"Received: d_model='512'"),
        (
            {"d_model": 64, "warmup_steps": -1},
            r"`warmup_steps` must be .*Received: warmup_steps=-1",
        ),
        (
            {"d_model": 64, "scale": 0.0},
            r"`scale` must be a positive finite number.*Received: scale=0\.0",
        ),
        ({"d_model": 64, "scale": -1.0}, r"Received: scale=-1\.0"),
        ({"d_model": 64, "scale": float("nan")}, r"Received: scale=nan"),
    ],
)
def test_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        WarmupInverseSqrtSchedule(**kwargs)
