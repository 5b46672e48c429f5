import re

import keras
import numpy as np
import pytest

from keras_attn.layers import MultiHeadSelfAttention, RelativeGlobalAttention, attention_ops
from keras_attn.layers.attention_masks import AttentionMasks
from keras_attn.layers.chunked_attention import _skew, _unskew, chunked_attention
from tests import references
from tests.test_case import gradients, run_layer_test

RNG = np.random.default_rng(0)
B, T, S, H, K = 2, 13, 11, 2, 4


def _qkv(query_length=T, key_length=S, dtype="float32"):
    rng = np.random.default_rng(query_length * 100 + key_length)
    return [
        rng.normal(size=shape).astype(dtype)
        for shape in ((B, query_length, H, K), (B, key_length, H, K), (B, key_length, H, K + 1))
    ]


def _reference(query, key, value, mask):
    """NumPy, head by head (tests/references.py)."""
    out = np.zeros(query.shape[:3] + (value.shape[-1],))
    for b in range(query.shape[0]):
        for h in range(query.shape[2]):
            out[b, :, h], _ = references.softmax_attention(
                query[b, :, h].astype(np.float64),
                key[b, :, h].astype(np.float64),
                value[b, :, h].astype(np.float64),
                mask[b, h],
            )
    return out


def _mask_cases():
    padding = np.ones((B, S), bool)
    padding[1, 7:] = False
    padding[0, :4] = False  # with the causal mask, rows 0-3 of sequence 0 see nothing
    attention = RNG.random((B, T, S)) > 0.4
    attention_heads = RNG.random((B, H, T, S)) > 0.4
    attention_heads[0, 1, 5] = False  # one fully masked row
    return {
        "none": (None, dict()),
        "causal": (AttentionMasks(use_causal_mask=True), dict(causal=True)),
        "padding_causal": (
            AttentionMasks(padding_mask=padding, use_causal_mask=True),
            dict(padding_mask=padding, causal=True),
        ),
        "attention": (
            AttentionMasks(attention_mask=attention[:, None]),
            dict(attention_mask=attention),
        ),
        "attention_heads_padding": (
            AttentionMasks(padding_mask=padding, attention_mask=attention_heads),
            dict(padding_mask=padding, attention_mask=attention_heads, num_heads=H),
        ),
        "causal_offset": (
            AttentionMasks(use_causal_mask=True, cache_index=3),
            dict(causal=True, cache_index=3),
        ),
    }


@pytest.mark.parametrize("case", list(_mask_cases()))
@pytest.mark.parametrize("chunk_size", [1, 4, 32])
def test_equals_naive_attention_with_every_mask(case, chunk_size):
    masks, reference_masks = _mask_cases()[case]
    query, key, value = _qkv()
    mask = references.dense_mask(B, T, S, **reference_masks)
    mask = np.broadcast_to(mask, (B, H, T, S))
    out = keras.ops.convert_to_numpy(chunked_attention(query, key, value, masks, chunk_size))
    np.testing.assert_allclose(out, _reference(query, key, value, mask), atol=2e-5)
    empty = ~mask.any(-1)  # (B, H, T)
    if empty.any():
        assert np.all(out.transpose(0, 2, 1, 3)[empty] == 0.0)


@pytest.mark.parametrize("case", ["causal", "padding_causal", "attention_heads_padding"])
def test_blocked_keys_get_no_weight_when_every_visible_logit_is_below_minus_1e9(case):
    """Both cores, against the float64 reference: with logits around -1e10
    a blocked key must not take the weight (a -1e9 fill handed it all of it
    in the dense core, so the causal mask leaked the future, and left the
    row empty in the chunked core), and the gradients stay finite."""
    from keras_attn.layers import attention_ops

    masks, reference_mask = _mask_cases()[case]
    query, key, value = _qkv()
    query, key = np.abs(query) * 1e5, -np.abs(key) * 1e5  # Q·Kᵀ/√K in [-1e11, 0)
    mask = np.broadcast_to(references.dense_mask(B, T, S, **reference_mask), (B, H, T, S))
    want = _reference(query, key, value, mask)
    dense_mask = masks.merged(T, S)

    def dense(q, k, v):
        out = attention_ops.scaled_dot_product_attention(q, k, v, dense_mask)[0]
        return keras.ops.sum(out), out

    def chunked(q, k, v):
        out = chunked_attention(q, k, v, masks, 4)
        return keras.ops.sum(out), out

    for core in (dense, chunked):
        out, grads = gradients(core, [query, key, value], [])
        np.testing.assert_allclose(keras.ops.convert_to_numpy(out), want, atol=1e-5)
        for grad in grads:
            assert np.all(np.isfinite(keras.ops.convert_to_numpy(grad)))


@pytest.mark.parametrize("case", ["causal", "padding_causal", "attention_heads_padding"])
def test_gradients_equal_the_dense_core_and_stay_finite(case):
    from keras_attn.layers import attention_ops

    masks, _ = _mask_cases()[case]
    query, key, value = _qkv()
    weights = np.cos(np.arange(B * T * H * (K + 1))).reshape(B, T, H, K + 1).astype("float32")

    def loss(core):
        def fn(q, k, v):
            out = core(q, k, v)
            return keras.ops.sum(keras.ops.multiply(out, weights)), out

        return fn

    dense_mask = masks.merged(T, S)
    _, dense = gradients(
        loss(lambda q, k, v: attention_ops.scaled_dot_product_attention(q, k, v, dense_mask)[0]),
        [query, key, value],
        [],
    )
    _, chunked = gradients(
        loss(lambda q, k, v: chunked_attention(q, k, v, masks, 4)), [query, key, value], []
    )
    for want, got in zip(dense, chunked):
        got = keras.ops.convert_to_numpy(got)
        assert np.all(np.isfinite(got))
        np.testing.assert_allclose(got, keras.ops.convert_to_numpy(want), atol=2e-5)


def test_mixed_precision_inputs_give_their_dtype_and_the_float32_result():
    query, key, value = _qkv()
    masks = AttentionMasks(use_causal_mask=True)
    half = [x.astype("float16") for x in (query, key, value)]
    out = chunked_attention(*half, masks, 4)
    assert keras.backend.standardize_dtype(out.dtype) == "float16"
    mask = np.broadcast_to(references.dense_mask(B, T, S, causal=True), (B, H, T, S))
    want = _reference(*[x.astype("float32") for x in half], mask)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(out).astype("float32"), want, atol=2e-3)


# ------------------------------------------------------------------ the layer
def _layer_pair(chunk_size=5, **kwargs):
    dense = MultiHeadSelfAttention(num_heads=2, key_dim=4, chunk_size=None, **kwargs)
    chunked = MultiHeadSelfAttention.from_config({**dense.get_config(), "chunk_size": chunk_size})
    dense.build((B, T, 8))
    chunked.build((B, T, 8))
    chunked.set_weights(dense.get_weights())
    return dense, chunked


def test_layer_with_chunk_size_equals_the_dense_layer_in_values_and_gradients():
    dense, chunked = _layer_pair()
    x = RNG.normal(size=(B, T, 8)).astype("float32")
    padding = np.ones((B, T), bool)
    padding[1, 9:] = False
    for layer_kwargs in ({}, {"use_causal_mask": True}, {"padding_mask": padding}):
        np.testing.assert_allclose(
            keras.ops.convert_to_numpy(chunked(x, **layer_kwargs)),
            keras.ops.convert_to_numpy(dense(x, **layer_kwargs)),
            atol=2e-5,
        )

    def loss(layer):
        def fn(inputs):
            out = layer(inputs, padding_mask=padding, use_causal_mask=True)
            return keras.ops.sum(out * keras.ops.cos(out)), out

        return fn

    _, want = gradients(loss(dense), [x], dense)
    _, got = gradients(loss(chunked), [x], chunked)
    for w, g in zip(want, got):
        np.testing.assert_allclose(
            keras.ops.convert_to_numpy(g), keras.ops.convert_to_numpy(w), atol=3e-5
        )


def test_layer_falls_back_to_the_dense_core_for_scores_cache_and_dropout():
    dense, chunked = _layer_pair(dropout=0.5, seed=3)
    x = RNG.normal(size=(B, T, 8)).astype("float32")
    out, scores = chunked(x, use_causal_mask=True, return_attention_scores=True)
    assert tuple(scores.shape) == (B, 2, T, T)
    cache = chunked.init_cache(B, T)
    step, _ = chunked(x[:, :3], cache=cache, cache_index=0, use_causal_mask=True)
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(step), keras.ops.convert_to_numpy(out)[:, :3], atol=2e-5
    )
    # Dropout in training: the dense core with the same seed (same draws).
    keras.utils.set_random_seed(7)
    want = keras.ops.convert_to_numpy(dense(x, training=True))
    keras.utils.set_random_seed(7)
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(chunked(x, training=True)), want, atol=2e-5
    )


def test_layer_life_cycle():
    run_layer_test(
        MultiHeadSelfAttention,
        {"num_heads": 2, "key_dim": 4, "chunk_size": 3},
        np.random.default_rng(1).normal(size=(2, 7, 8)).astype("float32"),
        call_kwargs={"use_causal_mask": True},
        expected_output_shape=(2, 7, 8),
    )


def test_layer_errors():
    from keras_attn.layers import LocalBlockAttention

    with pytest.raises(ValueError, match=r"chunk_size.*Received: chunk_size=0"):
        MultiHeadSelfAttention(num_heads=2, key_dim=4, chunk_size=0)
    with pytest.raises(
        ValueError, match=r'must be an int >= 1, None or "auto". Received: chunk_size=0'
    ):
        MultiHeadSelfAttention(num_heads=2, key_dim=4, chunk_size=0)
    for bad in ("fast", True, 2.0):
        with pytest.raises(
            ValueError, match=r"`chunk_size` must be an int >= 1.*Received: chunk_size="
        ):
            RelativeGlobalAttention(num_heads=2, key_dim=4, max_relative_position=4, chunk_size=bad)
    # A NumPy integer is refused at construction, not at the first call.
    with pytest.raises(ValueError, match=re.escape(f"Received: chunk_size={np.int64(3)!r}")):
        MultiHeadSelfAttention(num_heads=2, key_dim=4, chunk_size=np.int64(3))
    with pytest.raises(ValueError, match=r'`chunk_size` must be None or "auto".*chunk_size=4'):
        LocalBlockAttention(num_heads=2, key_dim=4, block_size=4, chunk_size=4)
    # The inherited choices that never chunk are accepted (and change nothing).
    for choice in (None, "auto"):
        layer = LocalBlockAttention(num_heads=2, key_dim=4, block_size=4, chunk_size=choice)
        assert layer.get_config()["chunk_size"] == choice
    assert LocalBlockAttention(num_heads=2, key_dim=4, block_size=4).chunk_size is None


@pytest.mark.parametrize("layer_class", [MultiHeadSelfAttention, RelativeGlobalAttention])
def test_auto_chunk_size_runs_the_chunked_core_from_the_measured_length(monkeypatch, layer_class):
    if layer_class._fused_core_fits and attention_ops.fused_op_is_memory_linear():
        pytest.skip("torch runs the fused dense core at any length")
    """chunk_size="auto" (the default): not chunked below the crossover
    length (query blocks for these causal calls, see
    test_multi_head_self_attention's test_auto_core_choice), chunks of 256
    from it, dense whatever the length with scores asked for."""
    import importlib

    crossover = 2048
    module = importlib.import_module(layer_class.__module__)
    calls = []
    real = module.chunked_attention

    def spy(query, key, value, masks, chunk_size, **kwargs):
        calls.append((int(key.shape[1]), chunk_size))
        return real(query, key, value, masks, chunk_size, **kwargs)

    monkeypatch.setattr(module, "chunked_attention", spy)
    kwargs = {"max_relative_position": 4} if layer_class is RelativeGlobalAttention else {}
    layer = layer_class(num_heads=1, key_dim=2, **kwargs)
    assert layer.chunk_size == "auto" and layer.get_config()["chunk_size"] == "auto"
    for length in (crossover - 1, crossover):
        layer(np.zeros((1, length, 2), "float32"), use_causal_mask=True)
    assert calls == [(crossover, 256)]
    layer(np.zeros((1, crossover, 2), "float32"), return_attention_scores=True)
    forced = layer_class.from_config({**layer.get_config(), "chunk_size": None})
    forced.build((1, crossover, 2))
    forced(np.zeros((1, crossover, 2), "float32"))
    assert calls == [(crossover, 256)]


def test_auto_chunk_size_equals_the_dense_core_above_the_crossover():
    dense = MultiHeadSelfAttention(num_heads=1, key_dim=4, chunk_size=None)
    auto = MultiHeadSelfAttention.from_config({**dense.get_config(), "chunk_size": "auto"})
    x = np.random.default_rng(2).normal(size=(1, 2048, 4)).astype("float32")
    dense.build(x.shape)
    auto.build(x.shape)
    auto.set_weights(dense.get_weights())
    padding = np.ones((1, 2048), bool)
    padding[0, 1500:] = False
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(auto(x, padding_mask=padding, use_causal_mask=True)),
        keras.ops.convert_to_numpy(dense(x, padding_mask=padding, use_causal_mask=True)),
        atol=2e-5,
    )


@pytest.mark.requires_tensorflow
@pytest.mark.parametrize("layer_class", [MultiHeadSelfAttention, RelativeGlobalAttention])
def test_auto_chunk_size_at_an_unknown_length_equals_the_dense_core_on_both_sides(layer_class):
    """Traced for any length (`fit` after two lengths, an export), "auto"
    picks the core at run time (`ops.cond`): the dense core below the
    crossover, the chunked one from it (memory: test_long_sequence_memory).
    Both give the dense layer's values and gradients, in the traced
    function. The crossover and chunk size are scaled down to 8 and 4."""
    import tensorflow as tf

    kwargs = {"max_relative_position": 6} if layer_class is RelativeGlobalAttention else {}
    dense = layer_class(num_heads=2, key_dim=4, chunk_size=None, **kwargs)
    auto = layer_class.from_config({**dense.get_config(), "chunk_size": "auto"})
    for layer in (dense, auto):
        layer.build((B, None, 8))
    auto.set_weights(dense.get_weights())
    auto._auto_chunk_min_length, auto._auto_chunk_size = 8, 4

    def loss(layer):
        def fn(inputs, padding):
            out = layer(inputs, padding_mask=padding, use_causal_mask=True)
            return keras.ops.sum(out * keras.ops.cos(out)), out

        return fn

    def step(layer):
        def run(inputs, padding):
            with tf.GradientTape() as tape:
                tape.watch(inputs)
                value, out = loss(layer)(inputs, padding)
            return [out] + tape.gradient(value, [inputs] + layer.trainable_weights)

        return run

    traced = tf.function(
        step(auto),
        autograph=False,
        input_signature=[tf.TensorSpec((B, None, 8)), tf.TensorSpec((B, None), tf.bool)],
    )
    for length in (7, 13):  # dense, then chunked (13: not a multiple of 4)
        x = RNG.normal(size=(B, length, 8)).astype("float32")
        padding = np.ones((B, length), bool)
        padding[1, 5:] = False
        want = step(dense)(tf.constant(x), tf.constant(padding))
        for w, g in zip(want, traced(x, padding)):
            np.testing.assert_allclose(g.numpy(), w.numpy(), atol=3e-5)


def test_relative_layer_with_chunk_size_equals_the_dense_layer():
    dense = RelativeGlobalAttention(
        num_heads=2, key_dim=4, max_relative_position=6, chunk_size=None
    )
    chunked = RelativeGlobalAttention.from_config({**dense.get_config(), "chunk_size": 5})
    dense.build((B, T, 8))
    chunked.build((B, T, 8))
    chunked.set_weights(dense.get_weights())
    x = RNG.normal(size=(B, T, 8)).astype("float32")

    def loss(layer):
        def fn(inputs):
            out = layer(inputs, use_causal_mask=True)
            return keras.ops.sum(out * keras.ops.cos(out)), out

        return fn

    want_out, want = gradients(loss(dense), [x], dense)
    got_out, got = gradients(loss(chunked), [x], chunked)
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(got_out), keras.ops.convert_to_numpy(want_out), atol=2e-5
    )
    for w, g in zip(want, got):
        np.testing.assert_allclose(
            keras.ops.convert_to_numpy(g), keras.ops.convert_to_numpy(w), atol=3e-5
        )


# ------------------------------------------------------- relative attention
def _square_masks(case):
    padding = np.ones((B, T), bool)
    padding[1, 9:] = False
    padding[0, :2] = False
    return {
        "causal": AttentionMasks(use_causal_mask=True),
        "padding_causal": AttentionMasks(padding_mask=padding, use_causal_mask=True),
        "attention": AttentionMasks(attention_mask=RNG.random((B, 1, T, T)) > 0.4),
    }[case]


@pytest.mark.parametrize("shared", [True, False])
@pytest.mark.parametrize("case", ["causal", "padding_causal", "attention"])
def test_relative_logits_equal_the_dense_relative_attention(shared, case):
    # Sequences of 13 in chunks of 4 with distances clamped at ±4: chunk
    # pairs near and far from the diagonal, clamped and not.
    masks = _square_masks(case)
    query, key, value = _qkv(T, T)
    layer = RelativeGlobalAttention(
        num_heads=H,
        key_dim=K,
        value_dim=K + 1,
        max_relative_position=5,
        heads_share_relative_embedding=shared,
    )
    layer.build((B, T, 8))
    table = np.random.default_rng(4).normal(size=layer.relative_embeddings.shape)
    layer.relative_embeddings.assign(table.astype("float32"))
    weights = np.cos(np.arange(B * T * H * (K + 1))).reshape(B, T, H, K + 1).astype("float32")

    def dense_loss(q, k, v):
        out = layer._attend(q, k, v, masks, (T,), False, False)[0]
        return keras.ops.sum(keras.ops.multiply(out, weights)), out

    def chunked_loss(q, k, v, e):
        out = chunked_attention(q, k, v, masks, 4, relative_embeddings=e)
        return keras.ops.sum(keras.ops.multiply(out, weights)), out

    dense_out, dense_grads = gradients(dense_loss, [query, key, value], [layer.relative_embeddings])
    chunked_out, chunked_grads = gradients(
        chunked_loss, [query, key, value, table.astype("float32")], []
    )
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(chunked_out), keras.ops.convert_to_numpy(dense_out), atol=2e-5
    )
    # q, k, v, then the table (the dense path's comes from the variable).
    for want, got in zip(dense_grads, chunked_grads):
        got = keras.ops.convert_to_numpy(got)
        assert np.all(np.isfinite(got))
        np.testing.assert_allclose(got, keras.ops.convert_to_numpy(want), atol=5e-5)


@pytest.mark.parametrize("shared", [True, False])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("max_relative_position", [T, 3 * T])
def test_table_gradient_sums_every_chunk_diagonal_as_the_dense_path(
    shared, causal, max_relative_position
):
    # T = 13 in chunks of 3: 5 key chunks, 9 chunk diagonals whose distance
    # ranges overlap, padded keys, a fully masked row; M = T (the table as long
    # as the sequence) and M = 3T (rows no pair reaches get zero gradient).
    padding = np.ones((B, T), bool)
    padding[1, 10:] = False
    attention = np.ones((B, 1, T, T), bool)
    attention[0, :, 6] = False
    masks = AttentionMasks(padding_mask=padding, attention_mask=attention, use_causal_mask=causal)
    query, key, value = _qkv(T, T)
    layer = RelativeGlobalAttention(
        num_heads=H,
        key_dim=K,
        value_dim=K + 1,
        max_relative_position=max_relative_position,
        heads_share_relative_embedding=shared,
    )
    layer.build((B, T, 8))
    table = np.random.default_rng(5).normal(size=layer.relative_embeddings.shape)
    layer.relative_embeddings.assign(table.astype("float32"))
    weights = np.sin(np.arange(B * T * H * (K + 1))).reshape(B, T, H, K + 1).astype("float32")

    def dense_loss(q, k, v):
        out = layer._attend(q, k, v, masks, (T,), False, False)[0]
        return keras.ops.sum(keras.ops.multiply(out, weights)), out

    def chunked_loss(q, k, v, e):
        out = chunked_attention(q, k, v, masks, 3, relative_embeddings=e)
        return keras.ops.sum(keras.ops.multiply(out, weights)), out

    _, want = gradients(dense_loss, [query, key, value], [layer.relative_embeddings])
    _, got = gradients(chunked_loss, [query, key, value, table.astype("float32")], [])
    want, got = [[keras.ops.convert_to_numpy(g) for g in grads] for grads in (want, got)]
    assert np.all(got[0][0, 6] == 0.0)  # the fully masked row
    assert np.abs(got[3]).sum() > 1.0
    if max_relative_position > T:  # distances beyond ±(T - 1) are never used
        unused = np.abs(np.arange(2 * max_relative_position - 1) - (max_relative_position - 1))
        assert np.all(got[3][..., unused >= T, :] == 0.0)
    for w, g in zip(want, got):
        np.testing.assert_allclose(g, w, atol=5e-5)


@pytest.mark.parametrize("size", [1, 2, 3, 5])
def test_skew_moves_each_distance_to_its_key_and_unskew_is_its_transpose(size):
    # Row r of a chunk pair's relative logits holds distances
    # -(C - 1) .. C - 1 in columns 0 .. 2C - 2; key c is at distance c - r.
    by_distance = np.arange(2 * 3 * size * (2 * size - 1), dtype="float32").reshape(
        2, 3, size, 2 * size - 1
    )
    by_key = np.cos(np.arange(2 * 3 * size * size, dtype="float32")).reshape(2, 3, size, size)
    want_skew = np.zeros((2, 3, size, size), "float32")
    want_unskew = np.zeros((2, 3, size, 2 * size - 1), "float32")
    for r in range(size):
        for c in range(size):
            want_skew[..., r, c] = by_distance[..., r, c - r + size - 1]
            want_unskew[..., r, c - r + size - 1] = by_key[..., r, c]
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(_skew(by_distance, size)), want_skew)
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(_unskew(by_key, size)), want_unskew)
