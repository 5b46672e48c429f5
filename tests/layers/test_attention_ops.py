"""The dense core (`attention_ops.scaled_dot_product_attention`), ours and the fused
`keras.ops.dot_product_attention` path, against the NumPy reference."""

import keras
import numpy as np
import pytest

from keras_attn.layers import attention_ops
from tests import references
from tests.test_case import gradients

B, T, S, H, K = 2, 5, 6, 3, 4
BACKEND = keras.backend.backend()


def _qkv(value_dim=K):
    rng = np.random.default_rng(0)
    shapes = ((B, T, H, K), (B, S, H, K), (B, S, H, value_dim))
    return [rng.normal(size=shape).astype("float32") for shape in shapes]


def _masks():
    """name -> (mask given to the core, its (B, H, T, S) expansion)."""
    padding = np.ones((B, S), bool)
    padding[1] = False  # sequence 1 has no real key: every query of it sees nothing
    attention = np.random.default_rng(1).random((B, H, T, S)) > 0.5
    attention[0, 2, 3] = False  # one query of one head sees nothing
    causal = references.dense_mask(1, T, S, causal=True)
    return {
        "plain": (None, np.ones((B, H, T, S), bool)),
        "padding": (
            padding[:, None, None, :],
            np.broadcast_to(padding[:, None, None], (B, H, T, S)),
        ),
        "causal": (causal, np.broadcast_to(causal, (B, H, T, S))),
        "attention": (attention, attention),
    }


def _reference(query, key, value, mask):
    out = np.zeros(query.shape[:3] + (value.shape[-1],))
    for b in range(B):
        for h in range(H):
            out[b, :, h], _ = references.softmax_attention(
                query[b, :, h].astype(np.float64),
                key[b, :, h].astype(np.float64),
                value[b, :, h].astype(np.float64),
                mask[b, h],
            )
    return out


@pytest.fixture(params=["ours", "fused"])
def core(request, monkeypatch):
    """Runs the test with our core, or with `keras.ops.dot_product_attention` on this backend."""
    fused = request.param == "fused"
    monkeypatch.setattr(attention_ops, "_fused_op_is_faster", lambda: fused)
    return request.param


@pytest.mark.parametrize("case", ["plain", "padding", "causal", "attention"])
def test_outputs_equal_the_reference_and_gradients_stay_finite(core, case):
    mask, full_mask = _masks()[case]
    query, key, value = _qkv()

    def attend(q, k, v):
        out, probs = attention_ops.scaled_dot_product_attention(
            q, k, v, mask, return_probabilities=False
        )
        assert probs is None
        return keras.ops.sum(out * keras.ops.cos(v[:, :T])), out

    out, grads = gradients(attend, [query, key, value], [])
    out = keras.ops.convert_to_numpy(out)
    np.testing.assert_allclose(out, _reference(query, key, value, full_mask), atol=1e-5)
    empty = ~full_mask.any(-1)  # (B, H, T): queries that see no key get exact zeros
    assert np.all(out.transpose(0, 2, 1, 3)[empty] == 0.0)
    assert empty.any() == (case in ("padding", "attention"))
    for grad in grads:
        assert np.all(np.isfinite(keras.ops.convert_to_numpy(grad)))


def test_fully_masked_rows_get_zero_gradients(core):
    """A sequence with no real key: its outputs are zeros, so its gradients are zeros."""
    mask, _ = _masks()["padding"]
    query, key, value = _qkv()

    def attend(q, k, v):
        out = attention_ops.scaled_dot_product_attention(q, k, v, mask, return_probabilities=False)[
            0
        ]
        return keras.ops.sum(out), out

    _, grads = gradients(attend, [query, key, value], [])
    for grad in grads:
        grad = keras.ops.convert_to_numpy(grad)
        assert np.all(grad[1] == 0.0) and np.any(grad[0] != 0.0)


def test_probabilities_asked_for_come_from_our_core(core):
    """With probabilities (or K != V, or extra logits) the fused op is not used: same values."""
    mask, full_mask = _masks()["attention"]
    query, key, value = _qkv(value_dim=K + 1)
    out, probs = attention_ops.scaled_dot_product_attention(query, key, value, mask)
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(out), _reference(query, key, value, full_mask), atol=1e-5
    )
    assert probs.shape == (B, H, T, S)
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(probs).sum(-1), full_mask.any(-1), atol=1e-6
    )
    out = attention_ops.scaled_dot_product_attention(
        query, key, value, mask, return_probabilities=False
    )[0]
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(out), _reference(query, key, value, full_mask), atol=1e-5
    )


def test_fused_op_runs_on_the_fused_backends_only(monkeypatch):
    """torch (and JAX off CPU) go through `keras.ops.dot_product_attention`; TensorFlow and JAX
    on CPU keep our core, faster there."""
    calls = []
    fused_op = keras.ops.dot_product_attention
    monkeypatch.setattr(
        keras.ops, "dot_product_attention", lambda *a, **k: calls.append(1) or fused_op(*a, **k)
    )
    query, key, value = _qkv()
    attention_ops.scaled_dot_product_attention(query, key, value, return_probabilities=False)
    assert bool(calls) == (BACKEND == "torch")
    calls.clear()
    dropout = keras.layers.Dropout(0.5)
    attention_ops.scaled_dot_product_attention(
        query, key, value, dropout_layer=dropout, training=True, return_probabilities=False
    )
    assert not calls


def test_mixed_precision_fused_outputs_are_close_to_float32(core):
    mask, full_mask = _masks()["attention"]
    query, key, value = (keras.ops.cast(x, "bfloat16") for x in _qkv())
    out = attention_ops.scaled_dot_product_attention(
        query, key, value, mask, return_probabilities=False
    )[0]
    assert keras.backend.standardize_dtype(out.dtype) == "bfloat16"
    want = _reference(
        *(keras.ops.convert_to_numpy(keras.ops.cast(x, "float32")) for x in (query, key, value)),
        full_mask,
    )
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(keras.ops.cast(out, "float32")), want, atol=3e-2
    )


@pytest.mark.requires_tensorflow
def test_cache_layout_core_reads_no_shapes_when_only_the_batch_is_unknown():
    # A decoding step's core (B unknown, H, T, K and the cache length static): the reshapes
    # take constant sizes (-1 for B), no Shape -> StridedSlice -> Pack chain to run per step.
    import tensorflow as tf

    core = tf.function(
        lambda q, k, v: attention_ops.scaled_dot_product_attention(
            q, k, v, cache_layout=True, return_probabilities=False
        )[0],
        input_signature=[
            tf.TensorSpec((None, 1, H, K), tf.float32),
            tf.TensorSpec((None, H, K, S), tf.float32),
            tf.TensorSpec((None, H, K, S), tf.float32),
        ],
    )
    ops = [node.op for node in core.get_concrete_function().graph.as_graph_def().node]
    assert not {"Shape", "StridedSlice", "Pack"} & set(ops)
    query, key, value = _qkv()
    query = query[:, :1]
    cache_key = np.transpose(key, (0, 2, 3, 1))  # (B, H, K, S)
    cache_value = np.transpose(value, (0, 2, 3, 1))
    want = attention_ops.scaled_dot_product_attention(query, key, value, return_probabilities=False)
    np.testing.assert_allclose(
        np.asarray(core(query, cache_key, cache_value)), np.asarray(want[0]), rtol=1e-5, atol=1e-6
    )
