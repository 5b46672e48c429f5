import keras
import numpy as np
import pytest

from keras_attn.layers import MultiHeadSelfAttention, RelativeGlobalAttention, attention_ops
from tests import references
from tests.test_case import gradients, run_layer_test

RNG = np.random.default_rng(7)


def _inputs(batch=2, length=6, dim=16):
    return RNG.standard_normal((batch, length, dim)).astype("float32")


def _layer(**kwargs):
    kwargs.setdefault("num_heads", 2)
    kwargs.setdefault("key_dim", 4)
    return MultiHeadSelfAttention(**kwargs)


def test_layer_lifecycle():
    run_layer_test(
        MultiHeadSelfAttention,
        {"num_heads": 2, "key_dim": 4, "value_dim": 3, "output_dim": 12, "dropout": 0.1, "seed": 1},
        _inputs(),
        call_kwargs={"use_causal_mask": True},
        expected_output_shape=(2, 6, 12),
    )


@pytest.mark.parametrize("num_heads", [1, 2, 4])
@pytest.mark.parametrize("causal", [False, True])
def test_matches_numpy_reference(num_heads, causal):
    x = _inputs(batch=3, length=7)
    padding = np.array([[1] * 7, [1] * 4 + [0] * 3, [0] * 7], bool)
    attention = RNG.random((3, 7, 7)) > 0.3
    layer = _layer(num_heads=num_heads, key_dim=5, value_dim=3)
    out, scores = layer(
        x,
        padding_mask=padding,
        attention_mask=attention,
        use_causal_mask=causal,
        return_attention_scores=True,
    )
    mask = references.dense_mask(3, 7, 7, padding, attention, causal, num_heads=num_heads)
    want, want_probs = references.multi_head_self_attention(layer, x, mask)
    np.testing.assert_allclose(np.asarray(scores), want_probs, atol=1e-5)
    np.testing.assert_allclose(np.asarray(out), want, atol=1e-4)
    # The all-padding example attends to nothing: its heads give zeros, so
    # the output is just the output projection's bias.
    np.testing.assert_allclose(
        np.asarray(out)[2], np.broadcast_to(np.asarray(layer.output_dense.bias), (7, 16)), atol=1e-6
    )


def test_per_head_attention_mask():
    x = _inputs(batch=1, length=5)
    attention = RNG.random((1, 2, 5, 5)) > 0.5
    layer = _layer()
    out = layer(x, attention_mask=attention)
    want, _ = references.multi_head_self_attention(
        layer, x, references.dense_mask(1, 5, 5, attention_mask=attention, num_heads=2)
    )
    np.testing.assert_allclose(np.asarray(out), want, atol=1e-4)


def test_hand_computed_uniform_attention():
    # With zero query/key projections every visible key gets the same weight:
    # the output is the mean of the visible values, computed by hand.
    layer = _layer(num_heads=1, key_dim=1, use_bias=False)
    layer.build((1, 3, 1))
    layer.query_key_value_dense.kernel.assign(np.array([[0.0, 0.0, 1.0]]))
    layer.output_dense.kernel.assign(np.array([[1.0]]))
    x = np.array([[[1.0], [2.0], [6.0]]], "float32")
    np.testing.assert_allclose(np.asarray(layer(x))[0, :, 0], [3.0, 3.0, 3.0], atol=1e-6)
    np.testing.assert_allclose(
        np.asarray(layer(x, use_causal_mask=True))[0, :, 0], [1.0, 1.5, 3.0], atol=1e-6
    )
    padding = np.array([[True, False, True]])
    np.testing.assert_allclose(
        np.asarray(layer(x, padding_mask=padding))[0, :, 0], [3.5, 3.5, 3.5], atol=1e-6
    )


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
            assert (scores[:, :, np.triu_indices(8, 1)[0], np.triu_indices(8, 1)[1]] == 0).all()
    y1, y2 = np.asarray(y1), np.asarray(y2)
    np.testing.assert_allclose(y1[:, : t + 1], y2[:, : t + 1], atol=1e-6)
    assert not np.allclose(y1[:, t + 1 :], y2[:, t + 1 :])


@pytest.mark.parametrize("chunks", [[1] * 6, [3, 1, 2], [6]])
def test_cached_decoding_equals_full_pass(chunks):
    x = _inputs(length=6)
    layer = _layer(value_dim=3)
    full = np.asarray(layer(x, use_causal_mask=True))
    cache = layer.init_cache(2, 9)
    pieces, index = [], 0
    for size in chunks:
        y, cache = layer(
            x[:, index : index + size], cache=cache, cache_index=index, use_causal_mask=True
        )
        pieces.append(np.asarray(y))
        index += size
    np.testing.assert_allclose(np.concatenate(pieces, axis=1), full, atol=1e-5)


def test_gradients_through_a_cached_call():
    # JAX: the gradients of a prefill through the cache equal the full
    # pass's. TensorFlow: ops.slice_update (XlaDynamicUpdateSlice) has no
    # gradient, as the `cache` docstring says; if a TensorFlow release adds
    # one, this fails and the docstring should change.
    x = _inputs(length=4)
    layer = _layer()
    layer(x)

    def loss(x, cache=None):
        if cache is None:
            y = layer(x, use_causal_mask=True)
        else:
            y, _ = layer(x, cache=cache, cache_index=0, use_causal_mask=True)
        return keras.ops.sum(y * y), None

    _, full = gradients(loss, [x], layer)
    cached_loss = lambda x: loss(x, layer.init_cache(2, 6))  # noqa: E731
    if keras.backend.backend() == "tensorflow":
        with pytest.raises(LookupError, match="XlaDynamicUpdateSlice"):
            gradients(cached_loss, [x], layer)
        return
    _, cached = gradients(cached_loss, [x], layer)
    for a, b in zip(full, cached):
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), atol=1e-5)


def test_cache_layout_is_heads_first_positions_last():
    # init_cache's documented layout (B, H, K + V, L): position i's key of
    # head h in cache[:, h, :K, i], its value in cache[:, h, K:, i].
    x = _inputs(length=3)
    layer = _layer(value_dim=3)
    layer.build(x.shape)
    cache = layer.init_cache(2, 5)
    assert tuple(cache.shape) == (2, 2, 4 + 3, 5)
    _, cache = layer(x, cache=cache, cache_index=1, use_causal_mask=True)
    qkv = np.asarray(layer.query_key_value_dense(x)).reshape(
        2, 3, 2, 4 + 4 + 3
    )  # per head [q | k | v]
    cache = np.asarray(cache)
    np.testing.assert_allclose(cache[..., 1:4], qkv[..., 4:].transpose(0, 2, 3, 1), atol=1e-6)
    np.testing.assert_array_equal(cache[..., [0, 4]], 0.0)


def test_cached_steps_with_masks_equal_full_pass():
    # One query per call is the decoding step's own core (multiply-and-reduce
    # on TensorFlow, matmuls on JAX): with padding and attention masks,
    # scores, and an example whose every key is padding, it must give the
    # full pass's values, and zeros for the empty rows.
    x = _inputs(batch=3, length=5)
    padding = np.array([[1, 1, 1, 1, 1], [1, 0, 1, 1, 0], [0, 0, 0, 0, 0]], bool)
    attention = RNG.random((3, 5, 5)) > 0.3
    attention[:, :, 0] = True
    layer = _layer(value_dim=3)
    full, full_scores = layer(
        x,
        padding_mask=padding,
        attention_mask=attention,
        use_causal_mask=True,
        return_attention_scores=True,
    )
    cache = layer.init_cache(3, 5)
    for t in range(5):
        y, scores, cache = layer(
            x[:, t : t + 1],
            padding_mask=padding,
            attention_mask=attention[:, t : t + 1],
            cache=cache,
            cache_index=t,
            use_causal_mask=True,
            return_attention_scores=True,
        )
        np.testing.assert_allclose(np.asarray(y), np.asarray(full)[:, t : t + 1], atol=1e-5)
        np.testing.assert_allclose(
            np.asarray(scores), np.asarray(full_scores)[:, :, t : t + 1], atol=1e-6
        )
        assert (np.asarray(scores)[2] == 0).all()
        np.testing.assert_allclose(
            np.asarray(y)[2, 0], np.asarray(layer.output_dense.bias), atol=1e-6
        )


@pytest.mark.requires_tensorflow
def test_cache_under_jit_compiled_loop():
    import tensorflow as tf

    x = _inputs(length=5)
    layer = _layer()
    full = np.asarray(layer(x, use_causal_mask=True))

    @tf.function(jit_compile=True)
    def step(token, cache, index):
        return layer(token, cache=cache, cache_index=index, use_causal_mask=True)

    cache = layer.init_cache(2, 5)
    outs = []
    for i in range(5):
        y, cache = step(x[:, i : i + 1], cache, tf.constant(i))
        outs.append(np.asarray(y))
    np.testing.assert_allclose(np.concatenate(outs, 1), full, atol=1e-5)
    assert step.experimental_get_tracing_count() == 1


@pytest.mark.parametrize("policy", ["float32", "mixed_float16", "mixed_bfloat16"])
def test_fully_masked_rows_are_zero_with_finite_gradients(policy):
    layer = _layer(dtype=policy)
    padding = np.array([[1, 1, 1, 0, 0], [0, 0, 0, 0, 0]], bool)

    def forward(x):
        out, scores = layer(
            x, padding_mask=padding, use_causal_mask=True, return_attention_scores=True
        )
        return keras.ops.sum(keras.ops.cast(out, "float32") ** 2), (out, scores)

    (out, scores), grads = gradients(forward, [_inputs(length=5)], layer)
    assert all(np.isfinite(np.asarray(g, dtype="float32")).all() for g in grads)
    assert np.isfinite(np.asarray(out, dtype="float32")).all()
    assert (np.asarray(scores, dtype="float32")[1] == 0).all()


def exactly_representable_setup(layer, rng, batch=2, length=8, dim=16):
    """Inputs and weights that are small integers, so every projection is
    exact in bfloat16 and float16 and the comparison with float32 measures
    the attention path itself rather than the rounding of the inputs."""
    x = rng.integers(-1, 2, (batch, length, dim)).astype("float32")
    layer.build(x.shape)
    weights = [rng.integers(-1, 2, w.shape).astype("float32") for w in layer.get_weights()]
    layer.set_weights(weights)
    return x, weights


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_large_logits_half_masked_under_mixed_precision(policy):
    ref = _layer()
    x, weights = exactly_representable_setup(ref, np.random.default_rng(7))
    padding = np.array([[1, 0] * 4, [0, 1] * 4], bool)
    want, want_scores = ref(x, padding_mask=padding, return_attention_scores=True)
    q, k, _ = references.self_attention_projections(ref, x)
    logits = np.einsum("bthk,bshk->bhts", q, k) / np.sqrt(4)
    assert 20 <= np.abs(logits).max() <= 60  # the regime the test is about
    mixed = _layer(dtype=policy)
    mixed.build(x.shape)
    mixed.set_weights(weights)
    got, scores = mixed(x, padding_mask=padding, return_attention_scores=True)
    scores = np.asarray(scores, dtype="float32")
    assert (scores[0][..., 1::2] == 0).all() and (scores[1][..., 0::2] == 0).all()
    got = np.asarray(got, dtype="float32")
    assert np.isfinite(got).all()
    want = np.asarray(want)
    rel = np.abs(got - want).max() / np.abs(want).max()
    assert rel < 1e-2, rel


def test_symbolic_scores_and_implicit_mask_propagation():
    tokens = keras.Input((6,), dtype="int32")
    embedded = keras.layers.Embedding(10, 8, mask_zero=True)(tokens)
    out, scores = _layer()(embedded, return_attention_scores=True)
    assert tuple(scores.shape) == (None, 2, 6, 6)
    model = keras.Model(tokens, [out, scores])
    ids = np.array([[3, 4, 5, 0, 0, 0]])
    _, got_scores = model(ids)
    assert (np.asarray(got_scores)[..., 3:] == 0).all()  # padding keys get no weight
    # The mask reaches the next layer: a masked GlobalAveragePooling ignores padding.
    pooled = keras.layers.GlobalAveragePooling1D()(out)
    pooled_model = keras.Model(tokens, [out, pooled])
    seq, avg = pooled_model(ids)
    np.testing.assert_allclose(np.asarray(avg)[0], np.asarray(seq)[0, :3].mean(0), atol=1e-6)


def test_dropout_is_seeded_and_only_in_training():
    x = _inputs()
    a, b = _layer(dropout=0.5, seed=3), _layer(dropout=0.5, seed=3)
    a.build(x.shape), b.build(x.shape)
    b.set_weights(a.get_weights())
    np.testing.assert_allclose(np.asarray(a(x, training=True)), np.asarray(b(x, training=True)))
    assert not np.allclose(np.asarray(a(x, training=True)), np.asarray(a(x, training=False)))
    np.testing.assert_allclose(np.asarray(a(x)), np.asarray(a(x, training=False)))


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (
            {"num_heads": 0, "key_dim": 4},
            "num_heads` must be a positive integer. Received: num_heads=0",
        ),
        ({"num_heads": 2, "key_dim": 2.5}, "key_dim` must be a positive integer"),
        ({"num_heads": 2, "key_dim": 4, "dropout": 1.0}, r"dropout` must be a number in \[0, 1\)"),
    ],
)
def test_constructor_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        MultiHeadSelfAttention(**kwargs)


def test_call_errors():
    layer = _layer()
    x = _inputs(length=5)
    layer(x)
    with pytest.raises(
        ValueError, match=r"expected ndim=3, found ndim=2\. Full shape received: \(5, 16\)"
    ):
        layer(x[0])
    with pytest.raises(ValueError, match=r"found ndim=5\. Full shape received: \(2, 5, 1, 1, 16\)"):
        layer(x[:, :, None, None, :])
    with pytest.raises(ValueError, match="expected axis -1 of input shape to have value 16"):
        layer(x[..., :8])
    with pytest.raises(ValueError, match=r"non-empty.*Received: inputs.shape=\(0, 5, 16\)"):
        layer(x[:0])
    with pytest.raises(ValueError, match="must be boolean.*float32.*mask == 0"):
        layer(x, padding_mask=np.zeros((2, 5), "float32"))
    with pytest.raises(
        ValueError,
        match=r"padding_mask` must have shape \(2, 5\).*Received: padding_mask.shape=\(2, 5, 1\)",
    ):
        layer(x, padding_mask=np.ones((2, 5, 1), bool))
    with pytest.raises(ValueError, match=r"Received: padding_mask.shape=\(2, 4\)"):
        layer(x, padding_mask=np.ones((2, 4), bool))
    with pytest.raises(ValueError, match=r"Received: attention_mask.shape=\(2, 5, 6\)"):
        layer(x, attention_mask=np.ones((2, 5, 6), bool))
    cache = layer.init_cache(2, 6)
    with pytest.raises(ValueError, match="cache_index=4, input length 5, cache length 6"):
        layer(x, cache=cache, cache_index=4)
    with pytest.raises(ValueError, match="init_cache"):
        layer(x, cache=cache[..., :3], cache_index=0)
    with pytest.raises(
        ValueError,
        match=r"max_length` must be a positive int \(or int scalar tensor\)\. Received: max_length=0",
    ):
        layer.init_cache(2, 0)


def test_integer_masks_are_read_as_booleans():
    layer = _layer()
    x = _inputs(length=4)
    padding = np.array([[1, 1, 0, 0], [1, 0, 1, 0]])
    np.testing.assert_allclose(
        np.asarray(layer(x, padding_mask=padding)),
        np.asarray(layer(x, padding_mask=padding.astype(bool))),
    )


# ------------------------------------------------------ causal query blocks
def _query_block_pair(layer_class, **kwargs):
    """A layer on the dense core, and its twin on chunk_size="auto" with the
    query-block core from T = 8 in blocks of 3 (512 and 256 by default)."""
    if layer_class is RelativeGlobalAttention:
        kwargs["max_relative_position"] = 5
    dense = layer_class(num_heads=2, key_dim=4, chunk_size=None, **kwargs)
    blocks = layer_class.from_config({**dense.get_config(), "chunk_size": "auto"})
    blocks._auto_query_block_min_length, blocks._auto_chunk_size = 8, 3
    for layer in (dense, blocks):
        layer.build((2, 10, 8))
    blocks.set_weights(dense.get_weights())
    return dense, blocks


@pytest.mark.parametrize("layer_class", [MultiHeadSelfAttention, RelativeGlobalAttention])
def test_query_blocks_equal_the_dense_core_with_every_mask(layer_class, monkeypatch):
    if layer_class._fused_core_fits and attention_ops.fused_op_is_memory_linear():
        pytest.skip("torch runs the fused dense core at any length: no query blocks")
    dense, blocks = _query_block_pair(layer_class)
    block_shapes = []
    attend_dense = blocks._attend_dense

    def spy(query, key, *args):
        block_shapes.append((query.shape[1], key.shape[1]))
        return attend_dense(query, key, *args)

    monkeypatch.setattr(blocks, "_attend_dense", spy)
    x = RNG.normal(size=(2, 10, 8)).astype("float32")
    padding = np.ones((2, 10), bool)
    padding[0, :4] = False  # rows 0-3 of sequence 0 see no key: zeros
    padding[1, 7:] = False
    attention = RNG.random((2, 10, 10)) > 0.3
    heads = RNG.random((2, 1, 10, 10)) > 0.3  # broadcast over heads
    heads[1, 0, 6] = False  # a fully masked row
    for masks in (
        {},
        {"padding_mask": padding},
        {"attention_mask": attention},
        {"padding_mask": padding, "attention_mask": heads},
    ):
        block_shapes.clear()
        got = blocks(x, use_causal_mask=True, training=False, **masks)
        # Blocks of 3 queries against the keys up to their last one.
        assert block_shapes == [(3, 3), (3, 6), (3, 9), (1, 10)]
        want = dense(x, use_causal_mask=True, **masks)
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=2e-5)


@pytest.mark.parametrize("layer_class", [MultiHeadSelfAttention, RelativeGlobalAttention])
def test_query_blocks_gradients_equal_the_dense_core(layer_class):
    # Below the chunked core's length, training runs on query blocks too.
    dense, blocks = _query_block_pair(layer_class)
    x = RNG.normal(size=(2, 10, 8)).astype("float32")
    padding = np.ones((2, 10), bool)
    padding[0, :2] = False

    def loss(layer):
        def fn(inputs):
            out = layer(inputs, padding_mask=padding, use_causal_mask=True, training=True)
            return keras.ops.sum(out * keras.ops.cos(out)), out

        return fn

    _, want = gradients(loss(dense), [x], dense)
    _, got = gradients(loss(blocks), [x], blocks)
    for w, g in zip(want, got):
        assert np.isfinite(np.asarray(g)).all()
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), atol=3e-5)


def test_auto_core_choice():
    """chunk_size="auto": which core runs, by key length, causality,
    training and dropout (the rules of `_attention_core`)."""
    from keras_attn.layers.attention_masks import AttentionMasks

    plain = MultiHeadSelfAttention(num_heads=1, key_dim=2)
    dropout = MultiHeadSelfAttention(num_heads=1, key_dim=2, dropout=0.1)
    for layer in (plain, dropout):
        layer.build((1, 4, 2))
    causal, full = AttentionMasks(use_causal_mask=True), AttentionMasks()
    offset = AttentionMasks(use_causal_mask=True, cache_index=1)
    cases = [
        # layer, S, masks, scores, training -> core
        (plain, 511, causal, False, None, "dense"),
        (plain, 512, causal, False, None, "query_blocks"),
        (plain, 2047, causal, False, True, "query_blocks"),
        (plain, 2048, causal, False, None, "chunked"),  # training unknown: memory-linear
        (plain, 2048, causal, False, True, "chunked"),
        (plain, 2048, causal, False, False, "query_blocks"),  # inference (predict, serving)
        (dropout, 2048, causal, False, True, "query_blocks"),  # the chunked core has no dropout
        (dropout, 2048, full, False, True, "dense"),
        (plain, 2048, full, False, False, "chunked"),
        (plain, 1024, full, False, False, "dense"),
        (plain, 2048, causal, True, False, "dense"),  # scores asked for
        (plain, 2048, offset, False, False, "chunked"),  # keys before query 0: not truncated
        # S unknown when traced: chosen at run time, never dense by default.
        (plain, None, causal, False, True, "by_length"),
        (plain, None, full, False, False, "by_length"),
        (dropout, None, causal, False, True, "dense"),
        (plain, None, causal, True, True, "dense"),
    ]
    fused_everywhere = attention_ops.fused_op_is_memory_linear()  # torch: dense at any length
    for layer, length, masks, scores, training, core in cases:
        key = keras.KerasTensor((1, length, 1, 2))
        got = layer._attention_core(key, masks, scores, training)[0]
        assert got == ("dense" if fused_everywhere else core), (length, masks, scores, training)
    forced = MultiHeadSelfAttention(num_heads=1, key_dim=2, chunk_size=None)
    assert forced._attention_core(np.zeros((1, 4096, 1, 2)), causal, False, False) == (
        "dense",
        None,
    )
