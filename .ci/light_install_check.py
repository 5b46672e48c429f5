"""Light-install check: keras_attn with keras and JAX only, no TensorFlow.

Run by `.ci/run` in a fresh virtual environment holding `keras`, `jax[cpu]`
and `keras_attn` (installed without its extras). It fails when TensorFlow
is installed at all, then builds a decoder-only model from keras_attn
layers, fits it for two steps, decodes with the cache
(`keras_attn.generation`), saves and reloads it as `.keras` and checks the
reloaded model gives the same logits and tokens. Exit status 0 means the
light install works.

    KERAS_BACKEND=jax python .ci/light_install_check.py
"""

import importlib.util
import os
import sys
import tempfile

os.environ.setdefault("KERAS_BACKEND", "jax")

for name in ("tensorflow", "tensorflow_text", "symusic"):
    if importlib.util.find_spec(name) is not None:
        sys.exit(f"light install check: {name} is installed; this check needs a venv without it")

import keras  # noqa: E402
import numpy as np  # noqa: E402

import keras_attn  # noqa: E402
from keras_attn.generation import CachedDecoder, greedy_search, sample  # noqa: E402
from keras_attn.layers import (  # noqa: E402
    MultiHeadSelfAttention,
    TokenAndPositionEmbedding,
    TransformerDecoder,
)

VOCABULARY, LENGTH, WIDTH = 13, 8, 16


def build_model():
    tokens = keras.Input((None,), dtype="int32", name="tokens")
    embedding = TokenAndPositionEmbedding(VOCABULARY, WIDTH, sequence_length=LENGTH, mask_zero=True)
    x = embedding(tokens)
    attention = MultiHeadSelfAttention(num_heads=2, key_dim=8)
    x = TransformerDecoder(intermediate_dim=32, self_attention=attention)(x)
    logits = keras.layers.Dense(VOCABULARY, name="logits")(x)
    return keras.Model(tokens, logits)


def main():
    keras.utils.set_random_seed(0)
    model = build_model()
    model.compile(
        optimizer="adam",
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    rng = np.random.default_rng(0)
    data = rng.integers(1, VOCABULARY, size=(8, LENGTH + 1)).astype("int32")
    history = model.fit(data[:, :-1], data[:, 1:], batch_size=4, epochs=1, verbose=0)
    assert len(history.history["loss"]) == 1 and np.isfinite(history.history["loss"][0])
    assert int(model.optimizer.iterations) == 2, int(model.optimizer.iterations)

    prompt = data[:2, :3]
    decoder = CachedDecoder(model)
    greedy = np.asarray(greedy_search(decoder, prompt, LENGTH))
    assert greedy.shape == (2, LENGTH), greedy.shape
    np.testing.assert_array_equal(greedy[:, :3], prompt)
    sampled = np.asarray(sample(model, prompt, LENGTH, seed=1, top_k=5))
    assert sampled.shape == (2, LENGTH), sampled.shape

    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "model.keras")
        model.save(path)
        loaded = keras.saving.load_model(path)
    np.testing.assert_allclose(
        np.asarray(loaded.predict(data[:, :-1], verbose=0)),
        np.asarray(model.predict(data[:, :-1], verbose=0)),
        rtol=1e-5,
        atol=1e-5,
    )
    np.testing.assert_array_equal(np.asarray(greedy_search(loaded, prompt, LENGTH)), greedy)

    loaded_modules = sorted(m for m in sys.modules if m.split(".")[0].startswith("tensorflow"))
    assert not loaded_modules, loaded_modules
    print(
        f"light install check: keras_attn {keras_attn.__version__}, keras {keras.__version__}, "
        f"backend {keras.backend.backend()}: fit 2 steps, cached greedy and sampled decoding, "
        ".keras round trip: ok"
    )


if __name__ == "__main__":
    main()
