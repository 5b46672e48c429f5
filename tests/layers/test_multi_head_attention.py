import keras
import numpy as np
import pytest

from keras_attn.layers import MultiHeadAttention
from tests import references
from tests.test_case import gradients, run_layer_test

RNG = np.random.default_rng(1)


def _data(batch=2, query_length=4, value_length=7, query_dim=16, value_dim=12):
    return (
        RNG.standard_normal((batch, query_length, query_dim)).astype("float32"),
        RNG.standard_normal((batch, value_length, value_dim)).astype("float32"),
    )


@pytest.mark.parametrize("num_heads", [1, 3])
def test_matches_numpy_reference(num_heads):
    query, value = _data(batch=3)
    padding = np.array([[1] * 7, [1] * 2 + [0] * 5, [0] * 7], bool)
    attention = RNG.random((3, 4, 7)) > 0.3
    layer = MultiHeadAttention(num_heads=num_heads, key_dim=5, value_dim=3)
    out, scores = layer(
        query,
        value,
        value_padding_mask=padding,
        attention_mask=attention,
        return_attention_scores=True,
    )
    mask = references.dense_mask(3, 4, 7, padding, attention, num_heads=num_heads)
    want, want_probs = references.multi_head_cross_attention(layer, query, value, mask)
    np.testing.assert_allclose(np.asarray(scores), want_probs, atol=1e-5)
    np.testing.assert_allclose(np.asarray(out), want, atol=1e-4)


def test_cache_gives_the_same_outputs():
    query, value = _data()
    layer = MultiHeadAttention(num_heads=2, key_dim=4)
    padding = np.array([[1] * 7, [1] * 3 + [0] * 4], bool)
    full = layer(query, value, value_padding_mask=padding)
    cache = layer.compute_cache(value)
    assert tuple(cache.shape) == (2, 2, 8, 7)  # (B, H, K + V, S)
    step = layer(query[:, 1:2], cache=cache, value_padding_mask=padding)
    np.testing.assert_allclose(np.asarray(step), np.asarray(full)[:, 1:2], atol=1e-6)


def test_layer_lifecycle_with_query_and_value_inputs():
    query, value = _data()
    run_layer_test(
        MultiHeadAttention,
        {"num_heads": 2, "key_dim": 4, "dropout": 0.1, "seed": 3},
        {"query": query, "value": value},
        expected_output_shape=(2, 4, 16),
        expected_num_trainable_weights=8,  # query, key, value, output: kernel + bias
        expected_num_seed_generators=1,  # the attention dropout
    )


def test_implicit_masks_in_a_functional_model():
    source = keras.Input((7,), dtype="int32", name="source")
    target = keras.Input((4,), dtype="int32", name="target")
    memory = keras.layers.Embedding(20, 12, mask_zero=True)(source)
    queries = keras.layers.Embedding(20, 16, mask_zero=True)(target)
    attention = MultiHeadAttention(num_heads=2, key_dim=4, name="cross")
    out, scores = attention(queries, memory, return_attention_scores=True)
    # keras 3.15's own layer reports (B, H, T, T) here; ours is (B, H, T, S).
    assert tuple(scores.shape) == (None, 2, 4, 7)
    pooled = keras.layers.GlobalAveragePooling1D()(out)
    model = keras.Model([source, target], [out, scores, pooled])
    src = np.array([[1, 2, 3, 0, 0, 0, 0], [4, 5, 6, 7, 8, 9, 1]])
    tgt = np.array([[1, 2, 0, 0], [3, 4, 5, 6]])
    out_v, scores_v, pooled_v = (np.asarray(t) for t in model([src, tgt]))
    # The source's mask reaches the scores: padded keys get no weight.
    assert (scores_v[0, :, :, 3:] == 0).all()
    np.testing.assert_allclose(scores_v.sum(-1), 1.0, atol=1e-5)
    # The target's mask is propagated: pooling ignores padded target steps.
    np.testing.assert_allclose(pooled_v[0], out_v[0, :2].mean(0), atol=1e-6)


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_empty_memory_rows_are_zero_and_finite_under_mixed_precision(policy):
    layer = MultiHeadAttention(num_heads=2, key_dim=4, dtype=policy)
    padding = np.array([[1] * 7, [0] * 7], bool)

    def forward(query, value):
        out, scores = layer(query, value, value_padding_mask=padding, return_attention_scores=True)
        return keras.ops.sum(keras.ops.cast(out, "float32")), scores

    scores, grads = gradients(forward, _data(), layer)
    assert all(np.isfinite(np.asarray(g, "float32")).all() for g in grads)
    assert (np.asarray(scores, "float32")[1] == 0).all()


def test_errors():
    layer = MultiHeadAttention(num_heads=2, key_dim=4)
    query, value = _data()
    with pytest.raises(ValueError, match="needs `value`"):
        layer(query)
    layer(query, value)
    with pytest.raises(
        ValueError, match=r"value_padding_mask` must have shape \(2, 7\).*shape=\(2, 4\)"
    ):
        layer(query, value, value_padding_mask=np.ones((2, 4), bool))
    with pytest.raises(ValueError, match="must be boolean"):
        layer(query, value, attention_mask=np.ones((2, 4, 7), "float32"))
    with pytest.raises(ValueError, match=r"`query.shape` must be \(batch, length, features\)"):
        layer(query[0], value)
    with pytest.raises(ValueError, match="compute_cache"):
        layer(query, cache=np.zeros((2, 7, 3, 8), "float32"))
    with pytest.raises(ValueError, match="num_heads` must be a positive integer"):
        MultiHeadAttention(num_heads=-1, key_dim=4)
