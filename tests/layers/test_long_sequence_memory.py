"""Training memory stays linear in T when the length is unknown at tracing.

`chunk_size="auto"` picks the attention core from the key length. Keras
retraces `fit`'s train function with the length set to None once it has seen
two lengths, and a None-length `tf.function` signature (an export) never sees
one: the core is then chosen at run time. Measured here the way users meet
it: a one-block decoder LM (TransformerDecoder, B = 1, D = 32) trained with
`fit` on batches of 2,048 then 2,304 then 8,192 tokens, and a training step
traced for any length, each in a fresh process; the peak memory of the
T = 8,192 step against the same step where 8,192 is the traced length
(measured on 2 cores: fit 18 MiB vs 89 MiB, whose first step also traces;
the None-length step 87 MiB vs 66 MiB, 1.3x). With the dense core at the
unknown length it held 1,629 MiB (fit, 17.5x) and 1,706 MiB (25.6x).
"""

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.requires_tensorflow

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# Linux carries a parent's ru_maxrss across fork + exec: the worker is started
# through this trampoline so that its high-water mark starts small
# (benchmarks/peak_memory.py `measure_memory`).
TRAMPOLINE = "import subprocess, sys; sys.exit(subprocess.call(sys.argv[1:]))"
WORKER = r"""
import json, os, resource, sys
import numpy as np
import keras
import tensorflow as tf
from keras_attn.layers import TransformerDecoder

mode, lengths = json.loads(sys.argv[1])
VOCAB, DIM = 64, 32
keras.utils.set_random_seed(0)
tokens = keras.Input((None,), dtype="int32")
hidden = keras.layers.Embedding(VOCAB, DIM)(tokens)
hidden = TransformerDecoder(intermediate_dim=64, num_heads=2, dropout=0.0)(hidden)
model = keras.Model(tokens, keras.layers.Dense(VOCAB)(hidden))
loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
model.compile(keras.optimizers.SGD(0.01), loss=loss, jit_compile=False)
rng = np.random.default_rng(0)

def batch(length):
    x = rng.integers(0, VOCAB, (1, length + 1)).astype("int32")
    return x[:, :-1], x[:, 1:]

def resident_mib():
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith("VmRSS:")) / 1024

if mode == "fit":
    for length in lengths[:-1]:
        model.fit(*batch(length), batch_size=1, verbose=0)
    run = lambda: model.fit(*batch(lengths[-1]), batch_size=1, verbose=0).history["loss"][0]
else:
    @tf.function(autograph=False)
    def step(x, y):
        with tf.GradientTape() as tape:
            value = loss(y, model(x, training=True))
        grads = tape.gradient(value, model.trainable_weights)
        return value + tf.add_n([tf.reduce_sum(g) for g in grads]) * 0.0
    spec = tf.TensorSpec((1, None if mode == "function_any" else lengths[-1]), "int32")
    concrete = step.get_concrete_function(spec, spec)
    run = lambda: float(concrete(*batch(lengths[-1])))
before = resident_mib()
value = run()
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 - before
print(json.dumps({"peak_mib": peak, "loss": float(value)}), flush=True)
"""


def _peak(mode, lengths):
    env = {
        **os.environ,
        "KERAS_BACKEND": "tensorflow",
        "TF_CPP_MIN_LOG_LEVEL": "3",
        "PYTHONPATH": os.pathsep.join([ROOT] + [p for p in [os.environ.get("PYTHONPATH")] if p]),
    }
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            TRAMPOLINE,
            sys.executable,
            "-c",
            WORKER,
            json.dumps([mode, lengths]),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        cwd=ROOT,
    )
    lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    assert lines, result.stderr[-2000:]
    return json.loads(lines[-1])


@pytest.mark.parametrize(
    "mode, lengths",
    [
        ("fit", [2048, 2304, 8192]),  # retraced for any length at the second one
        ("function_any", [8192]),  # a training step traced with a None length
    ],
)
def test_unknown_length_training_step_keeps_the_memory_of_a_known_length(mode, lengths):
    known_mode = "fit" if mode == "fit" else "function_known"
    unknown, known = _peak(mode, lengths), _peak(known_mode, [8192])
    assert 0 < unknown["loss"] < 10 and 0 < known["loss"] < 10  # ln(64) = 4.16 at the start
    # The dense core at 8,192 tokens: ~20x (two (1, 2, T, T) float32 buffers
    # are 1 GiB); the chunked one holds O(T) activations.
    assert unknown["peak_mib"] <= 1.5 * known["peak_mib"], (unknown, known)
