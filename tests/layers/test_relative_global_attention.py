import keras
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from keras_attn.layers import RelativeGlobalAttention
from keras_attn.layers.relative_global_attention import skew_padded
from tests import references
from tests.test_case import gradients, property_examples, run_layer_test

RNG = np.random.default_rng(11)


def _inputs(batch=2, length=6, dim=16, rng=RNG):
    return rng.standard_normal((batch, length, dim)).astype("float32")


def _layer(**kwargs):
    kwargs.setdefault("num_heads", 2)
    kwargs.setdefault("key_dim", 4)
    kwargs.setdefault("max_relative_position", 4)
    return RelativeGlobalAttention(**kwargs)


def _reference(layer, x, padding=None, attention=None, causal=False):
    b, t = x.shape[:2]
    mask = references.dense_mask(b, t, t, padding, attention, causal, num_heads=layer.num_heads)
    return references.relative_global_attention(layer, x, mask)


def _strengthen_relative_term(layer, scale=3.0):
    """Scales the relative embeddings up so that the relative term, not
    Q·Kᵀ, dominates the logits: a wrong distance then shows in the values."""
    layer.relative_embeddings.assign(np.asarray(layer.relative_embeddings) * scale)


@pytest.mark.parametrize("causal, shared", [(True, False), (False, True)])
def test_layer_lifecycle(causal, shared):
    run_layer_test(
        RelativeGlobalAttention,
        {
            "num_heads": 2,
            "key_dim": 4,
            "max_relative_position": 3,
            "heads_share_relative_embedding": shared,
            "value_dim": 3,
            "output_dim": 12,
            "dropout": 0.1,
            "seed": 1,
        },
        _inputs(),
        call_kwargs={"use_causal_mask": causal},
        expected_output_shape=(2, 6, 12),
    )


def skew(relative_logits, key_length=None):
    """Skewing of logits without the zero column (Huang et al. 2018, figure 1)."""
    rank = np.ndim(relative_logits)
    return skew_padded(np.pad(relative_logits, [(0, 0)] * (rank - 1) + [(1, 0)]), key_length)


def test_skew_hand_computed():
    # Causal table (W = T = S = 3): row t holds distances -(T-1) .. 0, so
    # the diagonal gets the last column; entries above it are unspecified.
    x = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]], "float32")
    got = np.asarray(skew(x))
    np.testing.assert_array_equal(got, [[3, 0, 4], [5, 6, 0], [7, 8, 9]])
    # Both directions (W = S + T - 1 = 5): every entry exact,
    # out[t, s] = x[t, s - t + T - 1].
    x = np.arange(1.0, 16.0, dtype="float32").reshape(3, 5)
    want = [[3, 4, 5], [7, 8, 9], [11, 12, 13]]
    np.testing.assert_array_equal(np.asarray(skew(x, 3)), want)
    # One query against 4 keys (a cached step): W = S, no shift.
    np.testing.assert_array_equal(np.asarray(skew(x[:1, :4], 4)), [[1, 2, 3, 4]])
    # Leading axes are carried; the pre-padded form gives the same result.
    batched = np.stack([x, -x])[:, None]
    padded = np.pad(batched, [(0, 0)] * 3 + [(1, 0)])
    np.testing.assert_array_equal(np.asarray(skew(batched, 3))[1, 0], -np.array(want))
    np.testing.assert_array_equal(np.asarray(skew_padded(padded, 3)), np.asarray(skew(batched, 3)))


@pytest.mark.parametrize("length", [3, 7, 12])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shared", [False, True])
def test_matches_gather_reference(length, causal, shared):
    # max_relative_position = 4 < 7, 12: distances beyond ±3 share the
    # outermost embedding.
    x = _inputs(batch=3, length=length)
    padding = np.ones((3, length), bool)
    padding[1, length // 2 :] = False
    padding[2] = False
    attention = RNG.random((3, length, length)) > 0.2
    layer = _layer(heads_share_relative_embedding=shared, value_dim=3)
    layer.build(x.shape)
    _strengthen_relative_term(layer)
    out, scores = layer(
        x,
        padding_mask=padding,
        attention_mask=attention,
        use_causal_mask=causal,
        return_attention_scores=True,
    )
    want, want_probs = _reference(layer, x, padding, attention, causal)
    np.testing.assert_allclose(np.asarray(scores), want_probs, atol=1e-5)
    np.testing.assert_allclose(np.asarray(out), want, atol=1e-4)
    # The relative term matters: the same layer without it gives other values.
    if length > 3:
        plain, _ = references.multi_head_self_attention(
            layer,
            x,
            references.dense_mask(3, length, length, padding, attention, causal, num_heads=2),
        )
        assert np.abs(plain - want)[:2].max() > 1e-2


def test_per_head_attention_mask_and_per_head_tables_differ():
    x = _inputs(batch=1, length=6)
    attention = RNG.random((1, 2, 6, 6)) > 0.4
    layer = _layer()
    layer.build(x.shape)
    _strengthen_relative_term(layer)
    out = layer(x, attention_mask=attention)
    want, _ = _reference(layer, x, attention=attention)
    np.testing.assert_allclose(np.asarray(out), want, atol=1e-4)


@pytest.mark.parametrize("mode", ["plain", "dropout", "scores", "padding", "cache"])
def test_no_future_leak(mode):
    t = 3
    x1 = _inputs(batch=2, length=8)
    x2 = x1.copy()
    x2[:, t + 1 :] = RNG.standard_normal(x2[:, t + 1 :].shape)
    kwargs = {"dropout": 0.3, "seed": 7} if mode == "dropout" else {}
    a = _layer(**kwargs)
    a.build(x1.shape)
    b = _layer(**kwargs)  # same seed: same dropout draws on its first call
    b.build(x1.shape)
    b.set_weights(a.get_weights())
    call = {"use_causal_mask": True, "training": mode == "dropout"}
    if mode == "scores":
        call["return_attention_scores"] = True
    if mode == "padding":
        call["padding_mask"] = np.array([[1] * 8, [1] * 6 + [0] * 2], bool)
    if mode == "cache":
        call["cache"] = a.init_cache(2, 8)
        call["cache_index"] = 0
    y1, y2 = a(x1, **call), b(x2, **call)
    if mode in ("scores", "cache"):
        (y1, extra1), (y2, _) = y1, y2
        if mode == "scores":
            scores = np.asarray(extra1)
            rows, cols = np.triu_indices(8, 1)
            assert (scores[:, :, rows, cols] == 0).all()
            assert (scores[:, :, np.arange(8), np.arange(8)] > 0).all()
    y1, y2 = np.asarray(y1), np.asarray(y2)
    np.testing.assert_allclose(y1[:, : t + 1], y2[:, : t + 1], atol=1e-6)
    assert not np.allclose(y1[:, t + 1 :], y2[:, t + 1 :])


def _decode(layer, x, chunks, cache_length, causal=True, padding=None):
    cache = layer.init_cache(x.shape[0], cache_length)
    pieces, index = [], 0
    for size in chunks:
        y, cache = layer(
            x[:, index : index + size],
            cache=cache,
            cache_index=index,
            use_causal_mask=causal,
            padding_mask=padding,
        )
        pieces.append(np.asarray(y))
        index += size
    return np.concatenate(pieces, axis=1)


@pytest.mark.parametrize("chunks", [[1] * 7, [3, 1, 2, 1], [7]])
@pytest.mark.parametrize("shared", [False, True])
def test_cached_decoding_equals_full_pass(chunks, shared):
    # 7 tokens, max_relative_position 3: decoding crosses the clipping
    # distance; the cache is longer than the sequence (unfilled slots masked).
    x = _inputs(length=7)
    layer = _layer(value_dim=3, max_relative_position=3, heads_share_relative_embedding=shared)
    layer.build(x.shape)
    _strengthen_relative_term(layer)
    full = np.asarray(layer(x, use_causal_mask=True))
    np.testing.assert_allclose(full, _reference(layer, x, causal=True)[0], atol=1e-4)
    np.testing.assert_allclose(_decode(layer, x, chunks, cache_length=10), full, atol=1e-5)


def test_cached_padding_and_non_causal_prefill():
    x = _inputs(length=6)
    layer = _layer()
    layer.build(x.shape)
    _strengthen_relative_term(layer)
    # Non-causal: the whole sequence written into a longer cache at once
    # (the table then spans both directions over the cache).
    full = np.asarray(layer(x))
    np.testing.assert_allclose(_decode(layer, x, [6], 9, causal=False), full, atol=1e-5)
    # Causal with a padding mask over the whole cache.
    padding = np.array([[1, 1, 0, 1, 1, 1, 0, 0, 0], [1] * 9], bool)
    full = np.asarray(layer(x, padding_mask=padding[:, :6], use_causal_mask=True))
    np.testing.assert_allclose(_decode(layer, x, [2, 1, 3], 9, padding=padding), full, atol=1e-5)


@pytest.mark.requires_tensorflow
def test_cache_under_jit_compiled_loop():
    import tensorflow as tf

    x = _inputs(length=6)
    layer = _layer(max_relative_position=2)
    layer.build(x.shape)
    _strengthen_relative_term(layer)
    full = np.asarray(layer(x, use_causal_mask=True))

    @tf.function(jit_compile=True)
    def step(token, cache, index):
        return layer(token, cache=cache, cache_index=index, use_causal_mask=True)

    cache = layer.init_cache(2, 6)
    outs = []
    for i in range(6):
        y, cache = step(x[:, i : i + 1], cache, tf.constant(i))
        outs.append(np.asarray(y))
    np.testing.assert_allclose(np.concatenate(outs, 1), full, atol=1e-5)
    assert step.experimental_get_tracing_count() == 1


def test_generating_at_twice_the_training_length():
    # Train-length 8 with max_relative_position 8, then sample 16 tokens.
    train_x = _inputs(batch=2, length=8)
    layer = _layer(max_relative_position=8)
    inputs = keras.Input((8, 16))
    model = keras.Model(inputs, layer(inputs, use_causal_mask=True))
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    model.fit(train_x, np.zeros((2, 8, 16)), epochs=1, verbose=0)
    x = _inputs(batch=2, length=16)
    decoded = _decode(layer, x, [1] * 16, cache_length=16)
    assert np.isfinite(decoded).all()
    want, _ = _reference(layer, x, causal=True)
    np.testing.assert_allclose(decoded, want, atol=1e-4)
    np.testing.assert_allclose(np.asarray(layer(x, use_causal_mask=True)), want, atol=1e-4)


@pytest.mark.requires_tensorflow
def test_symbolic_length_and_jit_compiled_forward():
    import tensorflow as tf

    layer = _layer()
    inputs = keras.Input((None, 16))
    out, scores = layer(inputs, use_causal_mask=True, return_attention_scores=True)
    assert tuple(scores.shape) == (None, 2, None, None)
    model = keras.Model(inputs, out)
    forward = tf.function(lambda v: layer(v), jit_compile=True)
    for length in (3, 9):
        x = _inputs(batch=1, length=length)
        want, _ = _reference(layer, x, causal=True)
        np.testing.assert_allclose(np.asarray(model(x)), want, atol=1e-4)
        np.testing.assert_allclose(np.asarray(forward(x)), _reference(layer, x)[0], atol=1e-4)


@pytest.mark.parametrize("policy", ["float32", "mixed_float16", "mixed_bfloat16"])
@pytest.mark.parametrize("causal", [False, True])
def test_fully_masked_rows_are_zero_with_finite_gradients(policy, causal):
    layer = _layer(dtype=policy)
    padding = np.array([[1, 1, 1, 0, 0], [0, 0, 0, 0, 0]], bool)

    def forward(x):
        out, scores = layer(
            x, padding_mask=padding, use_causal_mask=causal, return_attention_scores=True
        )
        return keras.ops.sum(keras.ops.cast(out, "float32") ** 2), (out, scores)

    (out, scores), grads = gradients(forward, [_inputs(length=5)], layer)
    assert all(np.isfinite(np.asarray(g, dtype="float32")).all() for g in grads)
    assert np.isfinite(np.asarray(out, dtype="float32")).all()
    assert (np.asarray(scores, dtype="float32")[1] == 0).all()
    assert (np.asarray(scores, dtype="float32")[0, ..., 3:] == 0).all()
    # The empty example's heads are zero: its output is the output bias.
    np.testing.assert_allclose(
        np.asarray(out, dtype="float32")[1],
        np.broadcast_to(np.asarray(layer.output_dense.bias, dtype="float32"), (5, 16)),
        atol=1e-6,
    )


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (
            {"max_relative_position": 0},
            "max_relative_position` must be a positive integer. Received: max_relative_position=0",
        ),
        ({"max_relative_position": -3}, "Received: max_relative_position=-3"),
        ({"max_relative_position": 2.5}, "max_relative_position` must be a positive integer"),
        ({"max_relative_position": True}, "max_relative_position` must be a positive integer"),
        (
            {"heads_share_relative_embedding": "yes"},
            "heads_share_relative_embedding` must be True or False \\(True = one table.*'yes'",
        ),
        ({"num_heads": 0}, "num_heads` must be a positive integer"),
    ],
)
def test_constructor_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        _layer(**kwargs)


def test_config_and_call_errors():
    layer = _layer(max_relative_position=5, heads_share_relative_embedding=True)
    config = layer.get_config()
    assert config["max_relative_position"] == 5
    assert config["heads_share_relative_embedding"] is True
    x = _inputs(length=5)
    layer(x)
    assert tuple(layer.relative_embeddings.shape) == (9, 4)
    with pytest.raises(ValueError, match="must be boolean"):
        layer(x, padding_mask=np.ones((2, 5), "float32"))
    with pytest.raises(ValueError, match="cache_index=4, input length 5, cache length 6"):
        layer(x, cache=layer.init_cache(2, 6), cache_index=4)


# Length 1 makes a softmax over one key, about which Keras warns.
@pytest.mark.filterwarnings("ignore:You are using a softmax over axis -1")
@settings(max_examples=property_examples(25), deadline=None)
@given(
    length=st.integers(1, 9),
    num_heads=st.integers(1, 3),
    max_relative_position=st.integers(1, 6),
    shared=st.booleans(),
    causal=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_property_matches_gather_reference(
    length, num_heads, max_relative_position, shared, causal, seed
):
    rng = np.random.default_rng(seed)
    x = _inputs(batch=2, length=length, dim=8, rng=rng)
    padding = rng.random((2, length)) > 0.3
    attention = rng.random((2, length, length)) > 0.3
    layer = RelativeGlobalAttention(
        num_heads=num_heads,
        key_dim=3,
        max_relative_position=max_relative_position,
        heads_share_relative_embedding=shared,
    )
    layer.build(x.shape)
    _strengthen_relative_term(layer)
    out, scores = layer(
        x,
        padding_mask=padding,
        attention_mask=attention,
        use_causal_mask=causal,
        return_attention_scores=True,
    )
    want, want_probs = _reference(layer, x, padding, attention, causal)
    np.testing.assert_allclose(np.asarray(scores), want_probs, atol=1e-5)
    np.testing.assert_allclose(np.asarray(out), want, atol=1e-4)


@pytest.mark.parametrize("shared", [False, True])
@pytest.mark.parametrize("causal", [False, True])
def test_single_head_matches_reference(shared, causal):
    # One head makes the relative matmul's operands (B, 1, T, K): TF 2.21's
    # oneDNN batch matmul computes those wrong when it broadcasts the table,
    # so the layer must not rely on broadcasting there.
    rng = np.random.default_rng(0)
    x = _inputs(batch=2, length=9, dim=8, rng=rng)
    padding = rng.random((2, 9)) > 0.3
    layer = RelativeGlobalAttention(
        num_heads=1, key_dim=3, max_relative_position=2, heads_share_relative_embedding=shared
    )
    layer.build(x.shape)
    _strengthen_relative_term(layer)
    for _ in range(5):  # the backend bug was intermittent
        out, scores = layer(
            x, padding_mask=padding, use_causal_mask=causal, return_attention_scores=True
        )
        want, want_probs = _reference(layer, x, padding, None, causal)
        np.testing.assert_allclose(np.asarray(scores), want_probs, atol=1e-5)
        np.testing.assert_allclose(np.asarray(out), want, atol=1e-4)
