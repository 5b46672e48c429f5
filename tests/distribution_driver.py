"""Trains a small Music Transformer on JSB Chorales under a
`keras.distribution` and prints its per-batch losses and weights (JSON).

Run in a fresh process by tests/test_distribution.py: the two host devices
(XLA_FLAGS=--xla_force_host_platform_device_count=2) must be set before JAX
starts. Usage: python tests/distribution_driver.py {one,data,model} OUT.npz
"""

import os
import sys

import keras
import numpy as np

from keras_attn.distribution import layout_map
from keras_attn.losses import MaskedSparseCategoricalCrossentropy
from keras_attn.models import music_transformer
from keras_attn.preprocessing import music

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
JSB = os.path.join(ROOT, "examples", "music", "data")
LENGTH, BATCH, STEPS = 64, 8, 12


def windows():
    """Real chorales, cut into (STEPS * BATCH, LENGTH + 1) windows."""
    tokens = np.concatenate(
        [music.chorale_to_tokens(c) for c in music.load_jsb_chorales(JSB, "train")[:40]]
    )
    count = STEPS * BATCH
    return tokens[: count * (LENGTH + 1)].reshape(count, LENGTH + 1).astype("int32")


def distribution(kind):
    devices = keras.distribution.list_devices()
    if kind == "one":
        return None
    if kind == "data":
        return keras.distribution.DataParallel(devices=devices)
    mesh = keras.distribution.DeviceMesh((1, len(devices)), ["batch", "model"], devices)
    return keras.distribution.ModelParallel(layout_map=layout_map(mesh), batch_dim_name="batch")


def build_model():
    return music_transformer(
        music.JSB_VOCABULARY_SIZE,
        num_layers=2,
        hidden_dim=32,
        num_heads=2,
        intermediate_dim=64,
        dropout=0.0,
        max_relative_position=LENGTH,
    )


def main(kind, out):
    data = windows()
    keras.utils.set_random_seed(0)
    # The same initial weights whatever the distribution: built once on one
    # device, copied into the model built under the distribution.
    initial = build_model().get_weights()
    keras.distribution.set_distribution(distribution(kind))
    model = build_model()
    model.set_weights(initial)
    model.compile(
        optimizer=keras.optimizers.Adam(1e-3),
        loss=MaskedSparseCategoricalCrossentropy(label_smoothing=0.0),
    )
    losses = []
    record = keras.callbacks.LambdaCallback(
        on_train_batch_end=lambda batch, logs: losses.append(float(logs["loss"]))
    )
    model.fit(
        data[:, :-1],
        data[:, 1:],
        batch_size=BATCH,
        epochs=1,
        shuffle=False,
        verbose=0,
        callbacks=[record],
    )
    sharded = [
        v.path
        for v in model.weights
        if len(v.value.sharding.device_set) > 1 and not v.value.sharding.is_fully_replicated
    ]
    np.savez(
        out,
        losses=np.array(losses),
        sharded=np.array(sharded, dtype=object),
        devices=len(keras.distribution.list_devices()),
        **{f"w{i}": np.asarray(w) for i, w in enumerate(model.get_weights())},
    )


if __name__ == "__main__":
    main(*sys.argv[1:])
