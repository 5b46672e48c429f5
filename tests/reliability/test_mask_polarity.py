"""Issue 6, case 4: `True` means "may attend" / "real token" everywhere.

Two kinds of test:

* A language-model run on real text (characters of Multi30k English
  captions shipped with the translation example) for every self-attention
  type and for the translation model's decoder. The next character is a
  copy of a future input, so a model that sees the future drives its loss
  toward 0, while no causal model can go below the empirical conditional
  entropy of the next character given its prefix, computed exactly on the
  training windows. The loss must stay above that bound at every step. A
  control run with the library's causal mask inverted (True = blocked)
  crosses the bound within the same steps: the test can fail.
* Direct checks of every public entry (layers, blocks, implicit masks,
  the CachedDecoder path): with exactly one key marked True, all the
  attention goes to that key.
"""

import gzip
import pathlib
from collections import Counter, defaultdict

import keras
import numpy as np
import pytest
from keras import ops

from keras_attn.generation import CachedDecoder
from keras_attn.layers import (
    LocalBlockAttention,
    MultiHeadAttention,
    TokenAndPositionEmbedding,
    TransformerDecoder,
    attention_ops,
)
from keras_attn.models import translation_transformer
from tests import attention_kinds as kinds
from tests.test_case import gradients

KINDS = kinds.SELF_ATTENTION_KINDS
CAPTIONS = (
    pathlib.Path(__file__).resolve().parents[2]
    / "examples"
    / "translation"
    / "data"
    / "multi30k"
    / "val.en.gz"
)
WINDOW = 3  # input characters per training window
# Full-batch Adam steps. With dense embedding gradients (JAX's, and those
# of `tests.test_case.gradients` on TensorFlow) the local control below needs
# about 30 steps to cross the bound by its margin.
STEPS = 40


def _windows(count=1024, seed=0):
    """(inputs, targets, vocabulary size): `count` windows of WINDOW + 1
    consecutive characters of real captions, ids 1.. (0 = padding)."""
    with gzip.open(CAPTIONS, "rt", encoding="utf-8") as f:
        text = " ".join(line.strip() for line in f).lower()
    vocabulary = {c: i + 1 for i, c in enumerate(sorted(set(text)))}
    starts = np.random.default_rng(seed).integers(0, len(text) - WINDOW - 1, count)
    ids = np.array([[vocabulary[c] for c in text[s : s + WINDOW + 1]] for s in starts], "int32")
    return ids[:, :-1], ids[:, 1:], len(vocabulary) + 1


def _causal_bound(inputs, targets):
    """The smallest mean cross-entropy (nats) any causal predictor can reach
    on these windows at positions 0 .. WINDOW - 2: the empirical entropy of
    the next character given its whole prefix. (The last position's target
    is not among the inputs: there is nothing to leak, so it is left out.)"""
    total = 0.0
    for t in range(WINDOW - 1):
        groups = defaultdict(Counter)
        for prefix, target in zip(map(tuple, inputs[:, : t + 1]), targets[:, t]):
            groups[prefix][target] += 1
        for counts in groups.values():
            n = sum(counts.values())
            total -= sum(c * np.log(c / n) for c in counts.values())
    return total / (len(inputs) * (WINDOW - 1))


def _language_model(kind, vocabulary_size):
    tokens = keras.Input((None,), dtype="int32")
    x = TokenAndPositionEmbedding(vocabulary_size, 16, sequence_length=WINDOW, mask_zero=True)(
        tokens
    )
    x = TransformerDecoder(
        intermediate_dim=32, self_attention=kinds.self_attention(kind, num_heads=2, key_dim=8)
    )(x)
    return keras.Model(tokens, keras.layers.Dense(vocabulary_size)(x))


def _translation_model(vocabulary_size):
    model = translation_transformer(
        vocabulary_size,
        num_layers=1,
        hidden_dim=16,
        num_heads=2,
        intermediate_dim=32,
        dropout=0.0,
        position="learned",
        max_length=WINDOW,
    )

    def call(tokens, training):
        # A constant source carries no information about the target, so the
        # causal bound of the decoder-only task holds.
        source = ops.ones((ops.shape(tokens)[0], 2), "int32")
        return model({"encoder_tokens": source, "decoder_tokens": tokens}, training=training)

    return model, call


def _train(model, call, inputs, targets):
    """Full-batch Adam steps; returns the loss on positions 0 .. WINDOW - 2
    at every step."""
    optimizer = keras.optimizers.Adam(0.03)
    optimizer.build(model.trainable_weights)  # slots made now: `step` traces once
    inputs, targets = ops.convert_to_tensor(inputs), ops.convert_to_tensor(targets)

    def loss():
        losses = keras.losses.sparse_categorical_crossentropy(
            targets, call(inputs, training=True), from_logits=True
        )
        return ops.mean(losses), ops.mean(losses[:, :-1])

    def step():
        causal_loss, grads = gradients(loss, [], model.trainable_weights)
        optimizer.apply(grads, model.trainable_weights)
        return causal_loss

    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        step = tf.function(step)
    elif keras.backend.backend() == "jax":
        return _train_jax_jit(model, optimizer, loss)
    return [float(step()) for _ in range(STEPS)]


def _train_jax_jit(model, optimizer, loss):
    """The same steps under one `jax.jit` (as `tf.function` on TensorFlow):
    eager `jax.grad` traces the model again at every step. The weights and
    the optimizer's slots go in and out as values (Keras's stateless
    pattern); `gradients` runs inside, on the traced weights."""
    import jax

    weights, slots = model.trainable_weights, optimizer.variables

    def step(weight_values, slot_values):
        with keras.StatelessScope(state_mapping=list(zip(weights, weight_values))):
            causal_loss, grads = gradients(loss, [], weights)
        weight_values, slot_values = optimizer.stateless_apply(slot_values, grads, weight_values)
        return causal_loss, weight_values, slot_values

    step = jax.jit(step)
    weight_values, slot_values = [v.value for v in weights], [v.value for v in slots]
    losses = []
    for _ in range(STEPS):
        causal_loss, weight_values, slot_values = step(weight_values, slot_values)
        losses.append(float(causal_loss))
    for variable, value in zip(weights + slots, weight_values + slot_values):
        variable.assign(value)
    return losses


@pytest.fixture(scope="module")
def task():
    inputs, targets, vocabulary_size = _windows()
    bound = _causal_bound(inputs, targets)
    assert bound > 1.0  # a task where the bound means something
    return inputs, targets, vocabulary_size, bound


@pytest.mark.parametrize("kind", KINDS + ("translation",))
def test_causal_language_model_stays_above_the_entropy_bound(task, kind):
    inputs, targets, vocabulary_size, bound = task
    if kind == "translation":
        model, call = _translation_model(vocabulary_size)
    else:
        model = _language_model(kind, vocabulary_size)
        call = model
    losses = _train(model, call, inputs, targets)
    assert losses[-1] < losses[0] - 0.5  # it trains
    assert min(losses) >= bound, (min(losses), bound)


@pytest.mark.parametrize("kind", ["multi_head", "local"])
def test_the_bound_catches_a_model_that_sees_the_future(task, monkeypatch, kind):
    # The library's causal masks with the opposite polarity (the dense one,
    # and the local layer's mask inside a block): queries see keys after
    # them. The same run then goes below the bound.
    inputs, targets, vocabulary_size, bound = task
    causal_mask = attention_ops.causal_mask
    monkeypatch.setattr(
        attention_ops, "causal_mask", lambda *args: ops.logical_not(causal_mask(*args))
    )
    structure_mask = LocalBlockAttention._structure_mask
    monkeypatch.setattr(
        LocalBlockAttention,
        "_structure_mask",
        lambda self, causal: ops.logical_not(structure_mask(self, causal)),
    )
    model = _language_model(kind, vocabulary_size)
    losses = _train(model, model, inputs, targets)
    assert min(losses) < bound - 0.1, (min(losses), bound)


# ----------------------------------------------------------- direct checks
# Example 0 may attend only to key 3, example 1 only to key 1.
VISIBLE_KEY = (3, 1)


def _one_key_padding(length=5, dtype=bool):
    padding = np.zeros((2, length), dtype)
    for b, j in enumerate(VISIBLE_KEY):
        padding[b, j] = 1
    return padding


def _assert_all_weight_on_the_visible_key(scores, window=None):
    """scores (B, H, T, S): every query whose window (B, H, T, S) bool holds
    its example's visible key puts all its weight there; the others none."""
    scores = np.asarray(scores)
    want = np.zeros(scores.shape)
    for b, j in enumerate(VISIBLE_KEY):
        want[b, ..., j] = 1.0 if window is None else window[b, ..., j]
    np.testing.assert_allclose(scores, want, atol=1e-6)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    "mask_kind", ["padding", "integer_padding", "attention", "per_head_attention", "implicit"]
)
def test_self_attention_layers_read_true_as_visible(kind, mask_kind):
    layer = kinds.self_attention(kind)
    x = np.random.default_rng(0).standard_normal((2, 5, 8)).astype("float32")
    padding = _one_key_padding()
    kwargs = {}
    if mask_kind == "padding":
        kwargs["padding_mask"] = padding
    elif mask_kind == "integer_padding":
        kwargs["padding_mask"] = padding.astype("int32")
    elif mask_kind == "attention":
        kwargs["attention_mask"] = np.broadcast_to(padding[:, None, :], (2, 5, 5))
    elif mask_kind == "per_head_attention":
        kwargs["attention_mask"] = np.broadcast_to(padding[:, None, None, :], (2, 2, 5, 5))
    if mask_kind == "implicit":
        tokens = keras.Input((5,), dtype="int32")
        embedded = keras.layers.Embedding(10, 8, mask_zero=True)(tokens)
        model = keras.Model(tokens, layer(embedded, return_attention_scores=True)[1])
        scores = model(padding.astype("int32") * 7)
    else:
        _, scores = layer(x, return_attention_scores=True, **kwargs)
    window = kinds.dense_mask(layer, 2, 5)  # local windows; all True otherwise
    _assert_all_weight_on_the_visible_key(scores, window)


@pytest.mark.parametrize("kind", KINDS)
def test_causal_mask_lets_the_first_query_see_only_itself(kind):
    layer = kinds.self_attention(kind)
    x = np.random.default_rng(1).standard_normal((2, 5, 8)).astype("float32")
    _, scores = layer(x, use_causal_mask=True, return_attention_scores=True)
    scores = np.asarray(scores)
    np.testing.assert_allclose(scores[:, :, 0, 0], 1.0, atol=1e-6)
    assert (scores[:, :, np.triu_indices(5, 1)[0], np.triu_indices(5, 1)[1]] == 0).all()


@pytest.mark.parametrize("mask_kind", ["padding", "attention", "implicit"])
def test_cross_attention_reads_true_as_visible(mask_kind):
    layer = MultiHeadAttention(num_heads=2, key_dim=4)
    rng = np.random.default_rng(2)
    query, value = rng.standard_normal((2, 4, 8)), rng.standard_normal((2, 5, 6))
    padding = _one_key_padding()
    if mask_kind == "padding":
        _, scores = layer(query, value, value_padding_mask=padding, return_attention_scores=True)
    elif mask_kind == "attention":
        attention = np.broadcast_to(padding[:, None, :], (2, 4, 5))
        _, scores = layer(query, value, attention_mask=attention, return_attention_scores=True)
    else:
        ids = keras.Input((5,), dtype="int32")
        memory = keras.layers.Embedding(10, 6, mask_zero=True)(ids)
        queries = keras.Input((4, 8))
        model = keras.Model([queries, ids], layer(queries, memory, return_attention_scores=True)[1])
        scores = model([query, padding.astype("int32") * 3])
    _assert_all_weight_on_the_visible_key(scores)


@pytest.mark.parametrize("kind", KINDS)
def test_blocks_read_true_as_visible(kind):
    rng = np.random.default_rng(3)
    x, memory = rng.standard_normal((2, 5, 8)), rng.standard_normal((2, 5, 8))
    padding = _one_key_padding()
    encoder = kinds.encoder(kind)
    _, scores = encoder(x, padding_mask=padding, return_attention_scores=True)
    _assert_all_weight_on_the_visible_key(
        scores, kinds.dense_mask(encoder._self_attention_layer, 2, 5)
    )
    _, scores = encoder(
        x,
        attention_mask=np.broadcast_to(padding[:, None, :], (2, 5, 5)),
        return_attention_scores=True,
    )
    _assert_all_weight_on_the_visible_key(
        scores, kinds.dense_mask(encoder._self_attention_layer, 2, 5)
    )
    decoder = kinds.decoder(kind)
    _, scores = decoder(x, memory, encoder_padding_mask=padding, return_attention_scores=True)
    _assert_all_weight_on_the_visible_key(scores["cross_attention"])
    # Decoder padding: with the causal mask, query t sees the visible key
    # only from t = key on.
    _, scores = decoder(x, memory, decoder_padding_mask=padding, return_attention_scores=True)
    window = kinds.dense_mask(decoder._self_attention_layer, 2, 5, causal=True)
    _assert_all_weight_on_the_visible_key(scores["self_attention"], window)


def _with_pad_embedding(model, layer_name, value):
    """A copy of `model` whose embedding row 0 (the padding id) is `value`."""
    clone = keras.models.clone_model(model)
    clone.set_weights(model.get_weights())
    embedding = clone.get_layer(layer_name).token_embedding
    table = np.asarray(embedding.embeddings).copy()
    table[0] = value
    embedding.embeddings.assign(table)
    return clone


def _cached_logits(model, tokens, inputs=None):
    decoder = CachedDecoder(model)
    state = decoder.initial_state(tokens.shape[0], tokens.shape[1], inputs)
    outs = []
    for i in range(tokens.shape[1]):
        logits, state = decoder(tokens[:, i : i + 1], i, state)
        outs.append(np.asarray(logits))
    return np.concatenate(outs, axis=1)


@pytest.mark.parametrize("kind", KINDS)
def test_padding_tokens_are_invisible_in_full_and_cached_decoding(kind):
    # A padding id inside the sequence: what its embedding holds must not
    # reach the real positions, in the full model or through the cache.
    tokens = keras.Input((None,), dtype="int32")
    x = TokenAndPositionEmbedding(12, 16, sequence_length=8, mask_zero=True, name="embedding")(
        tokens
    )
    x = TransformerDecoder(
        intermediate_dim=32, self_attention=kinds.self_attention(kind, num_heads=2, key_dim=8)
    )(x)
    model = keras.Model(tokens, keras.layers.Dense(12)(x))
    ids = np.array([[3, 0, 5, 6, 0, 7], [4, 8, 0, 0, 9, 2]], "int32")
    real = ids != 0
    full = np.asarray(model(ids))
    other = _with_pad_embedding(model, "embedding", 30.0)
    np.testing.assert_allclose(np.asarray(other(ids))[real], full[real], atol=1e-4)
    assert not np.allclose(np.asarray(other(ids))[~real], full[~real], atol=1e-2)
    np.testing.assert_allclose(_cached_logits(model, ids)[real], full[real], atol=1e-4)
    np.testing.assert_allclose(_cached_logits(other, ids)[real], full[real], atol=1e-4)


def test_source_padding_is_invisible_to_the_translation_decoder():
    model = translation_transformer(
        12, num_layers=1, hidden_dim=16, num_heads=2, intermediate_dim=32, dropout=0.0
    )
    source = np.array([[3, 4, 5, 0, 0], [6, 0, 0, 0, 0]], "int32")
    target = np.array([[1, 7, 8], [1, 9, 2]], "int32")
    inputs = {"encoder_tokens": source, "decoder_tokens": target}
    full = np.asarray(model(inputs))
    other = _with_pad_embedding(model, "encoder_embedding", 30.0)
    np.testing.assert_allclose(np.asarray(other(inputs)), full, atol=1e-4)
    cached = _cached_logits(other, target, {"encoder_tokens": source})
    np.testing.assert_allclose(cached, full, atol=1e-4)
