import keras
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from keras_attn.layers import LocalBlockAttention, MultiHeadSelfAttention
from tests import references
from tests.test_case import decode_in_chunks, gradients, property_examples, run_layer_test

RNG = np.random.default_rng(11)


def _inputs(shape, dim=16):
    return RNG.standard_normal(tuple(shape) + (dim,)).astype("float32")


def _layer(**kwargs):
    kwargs.setdefault("num_heads", 2)
    kwargs.setdefault("key_dim", 4)
    kwargs.setdefault("block_size", 4)
    kwargs.setdefault("memory_flange", 3)
    return LocalBlockAttention(**kwargs)


def _reference(layer, x, spatial, causal, padding=None, attention=None):
    """Dense attention with the equivalent band/block mask, in NumPy."""
    batch, length = x.shape[0], int(np.prod(spatial))
    flat_padding = None if padding is None else padding.reshape(batch, length)
    mask = references.dense_mask(
        batch, length, length, flat_padding, attention, num_heads=layer.num_heads
    )
    flange = layer.memory_flange if layer.memory_flange is not None else layer.block_size
    mask &= references.local_block_mask(spatial, layer.block_size, flange, causal)
    out, probs = references.multi_head_self_attention(layer, x.reshape(batch, length, -1), mask)
    return out.reshape(x.shape[:-1] + (-1,)), probs


def _block_raster_order(height, width, block):
    """Generation step of every pixel in block-raster order: (height, width)."""
    bh, bw = block
    grid_w = -(-width // bw)
    order = np.zeros((height, width), int)
    for r in range(height):
        for c in range(width):
            order[r, c] = ((r // bh) * grid_w + c // bw) * bh * bw + (r % bh) * bw + c % bw
    return order


def test_layer_lifecycle_1d_causal():
    run_layer_test(
        LocalBlockAttention,
        {
            "num_heads": 2,
            "key_dim": 4,
            "value_dim": 3,
            "output_dim": 12,
            "block_size": 4,
            "memory_flange": 2,
            "dropout": 0.1,
            "seed": 1,
        },
        _inputs((2, 13)),
        call_kwargs={"use_causal_mask": True},
        expected_output_shape=(2, 13, 12),
    )


def test_layer_lifecycle_2d():
    run_layer_test(
        LocalBlockAttention,
        {"num_heads": 2, "key_dim": 4, "block_size": (2, 4), "memory_flange": (1, 2)},
        _inputs((2, 5, 6), dim=8),
        expected_output_shape=(2, 5, 6, 8),
    )


CASES = [
    ((13,), 4, 3),  # length not divisible by the block
    ((13,), 4, 6),  # flange longer than a block
    ((12,), 3, 0),  # no flange: block-diagonal
    ((10, 7), (4, 4), (2, 2)),  # image sides not divisible by the block
    ((6, 9), (2, 3), (1, 4)),
]


# On JAX, where every new shape compiles, each geometry runs both masks,
# with 1 head non-causal and 3 heads causal (the property test below draws
# 1 to 3 heads with either mask); TensorFlow runs the whole product.
_ON_JAX = keras.backend.backend() == "jax"
DENSE_CASES = [
    (*case, causal, num_heads)
    for case in CASES
    for causal in (False, True)
    for num_heads in (1, 3)
    if not _ON_JAX or num_heads == (3 if causal else 1)
]


@pytest.mark.parametrize("spatial, block, flange, causal, num_heads", DENSE_CASES)
def test_matches_dense_reference(spatial, block, flange, causal, num_heads):
    x = _inputs((2,) + spatial)
    padding = RNG.random((2,) + spatial) > 0.3
    layer = _layer(
        num_heads=num_heads, key_dim=5, value_dim=3, block_size=block, memory_flange=flange
    )
    out, scores = layer(
        x, padding_mask=padding, use_causal_mask=causal, return_attention_scores=True
    )
    want, want_probs = _reference(layer, x, spatial, causal, padding)
    np.testing.assert_allclose(np.asarray(scores), want_probs, atol=1e-5)
    np.testing.assert_allclose(np.asarray(out), want, atol=1e-4)


@pytest.mark.parametrize("spatial, block, flange", [((11,), 4, 2), ((5, 6), (2, 4), (1, 1))])
@pytest.mark.parametrize("per_head", [False, True])
def test_attention_mask_is_anded_with_the_window(spatial, block, flange, per_head):
    x = _inputs((2,) + spatial)
    length = int(np.prod(spatial))
    shape = (2, 2, length, length) if per_head else (2, length, length)
    attention = RNG.random(shape) > 0.4
    layer = _layer(block_size=block, memory_flange=flange)
    for causal in (False, True):
        out = layer(x, attention_mask=attention, use_causal_mask=causal)
        want, _ = _reference(layer, x, spatial, causal, attention=attention)
        np.testing.assert_allclose(np.asarray(out), want, atol=1e-4)


@pytest.mark.parametrize("block", [9, 16])
@pytest.mark.parametrize("causal", [False, True])
def test_block_covering_the_sequence_is_full_attention(block, causal):
    x = _inputs((2, 9))
    padding = np.array([[1] * 9, [1] * 5 + [0] * 4], bool)
    local = _layer(block_size=block, memory_flange=0)
    dense = MultiHeadSelfAttention(num_heads=2, key_dim=4)
    local.build(x.shape), dense.build(x.shape)
    dense.set_weights(local.get_weights())
    kwargs = {"padding_mask": padding, "use_causal_mask": causal}
    np.testing.assert_allclose(
        np.asarray(local(x, **kwargs)), np.asarray(dense(x, **kwargs)), atol=1e-5
    )


def test_block_covering_the_image_is_full_attention():
    x = _inputs((1, 5, 6))
    local = _layer(block_size=(5, 6), memory_flange=(0, 0))
    dense = MultiHeadSelfAttention(num_heads=2, key_dim=4)
    local.build(x.shape), dense.build((1, 30, 16))
    dense.set_weights(local.get_weights())
    np.testing.assert_allclose(
        np.asarray(local(x)).reshape(1, 30, 16), np.asarray(dense(x.reshape(1, 30, 16))), atol=1e-5
    )


def test_default_flange_is_one_block():
    x = _inputs((1, 10))
    layer = _layer(memory_flange=None)
    assert layer.get_config()["memory_flange"] is None
    got = np.asarray(layer(x, use_causal_mask=True))
    want, _ = _reference(layer, x, (10,), True)
    np.testing.assert_allclose(got, want, atol=1e-4)


@pytest.mark.parametrize("mode", ["plain", "dropout", "scores", "padding", "cache"])
def test_no_future_leak_1d(mode):
    t = 6
    x1 = _inputs((2, 13))
    x2 = x1.copy()
    x2[:, t + 1 :] = RNG.standard_normal(x2[:, t + 1 :].shape)
    kwargs = {"dropout": 0.3, "seed": 7} if mode == "dropout" else {}
    a, b = _layer(**kwargs), _layer(**kwargs)  # same seed: same dropout draws
    a.build(x1.shape), b.build(x1.shape)
    b.set_weights(a.get_weights())
    call = {"use_causal_mask": True, "training": mode == "dropout"}
    if mode == "scores":
        call["return_attention_scores"] = True
    if mode == "padding":
        call["padding_mask"] = np.array([[1] * 13, [1] * 10 + [0] * 3], bool)
    if mode == "cache":
        call["cache"], call["cache_index"] = a.init_cache(2, 13), 0
    y1, y2 = a(x1, **call), b(x2, **call)
    if mode in ("scores", "cache"):
        (y1, extra1), (y2, _) = y1, y2
        if mode == "scores":
            scores = np.asarray(extra1)
            outside = ~references.local_block_mask((13,), 4, 3, causal=True)
            assert outside[np.triu_indices(13, 1)].all()
            assert (scores[:, :, outside] == 0).all()
    y1, y2 = np.asarray(y1), np.asarray(y2)
    np.testing.assert_allclose(y1[:, : t + 1], y2[:, : t + 1], atol=1e-6)
    assert not np.allclose(y1[:, t + 1 :], y2[:, t + 1 :])


def test_no_future_leak_2d_block_raster():
    block, flange = (2, 3), (1, 2)
    order = _block_raster_order(5, 7, block)
    cut = 17
    x1 = _inputs((2, 5, 7))
    x2 = x1.copy()
    later = order > cut
    x2[:, later] = RNG.standard_normal(x2[:, later].shape)
    layer = _layer(block_size=block, memory_flange=flange)
    y1, s1 = layer(x1, use_causal_mask=True, return_attention_scores=True)
    y2 = layer(x2, use_causal_mask=True)
    y1, y2 = np.asarray(y1), np.asarray(y2)
    np.testing.assert_allclose(y1[:, ~later], y2[:, ~later], atol=1e-6)
    assert not np.allclose(y1[:, later], y2[:, later])
    # No query looks at a pixel generated after it (block-raster order).
    flat = order.reshape(-1)
    future = flat[None, :] > flat[:, None]
    assert (np.asarray(s1)[:, :, future] == 0).all()


@pytest.mark.parametrize("chunks", [[1] * 13, [3, 1, 2, 7], [13], [6, 7]])
def test_cached_decoding_equals_full_pass(chunks):
    x = _inputs((2, 13))
    padding = np.array([[1] * 13 + [0] * 3, [1] * 9 + [0] * 7], bool)
    layer = _layer(value_dim=3)
    full, full_scores = layer(
        x, padding_mask=padding[:, :13], use_causal_mask=True, return_attention_scores=True
    )
    outputs, scores = decode_in_chunks(
        layer, x, chunks, layer.init_cache(2, 16), padding_mask=padding
    )
    np.testing.assert_allclose(outputs, np.asarray(full), atol=1e-5)
    np.testing.assert_allclose(scores[..., :13], np.asarray(full_scores), atol=1e-6)


@pytest.mark.parametrize("chunks", [[1] * 29, [3, 1, 2, 7, 9, 7], [29], [10, 19]])
def test_rolling_cache_keeps_block_plus_flange_and_equals_full_pass(chunks):
    # Block 4, flange 3: the cache holds W = 7 positions whatever the length;
    # chunks longer than W, steps and a prefill all equal the full pass.
    x = _inputs((2, 29))
    padding = np.ones((2, 32), bool)
    padding[0, [2, 11, 12]] = False
    padding[1, 20:] = False
    layer = _layer(value_dim=3, rolling_cache=True)
    full, full_scores = layer(
        x, padding_mask=padding[:, :29], use_causal_mask=True, return_attention_scores=True
    )
    cache = layer.init_cache(2, 32)
    assert tuple(cache.shape) == (2, 7, 2, 4 + 3)
    pieces, index = [], 0
    for size in chunks:
        y, scores, cache = layer(
            x[:, index : index + size],
            padding_mask=padding,
            cache=cache,
            cache_index=index,
            use_causal_mask=True,
            return_attention_scores=True,
        )
        assert tuple(cache.shape) == (2, 7, 2, 7)
        pieces.append(np.asarray(y))
        # Scores are over [the 7 kept positions | the new ones]: column j is
        # position index - 7 + j.
        scores = np.asarray(scores)
        assert scores.shape[-1] == 7 + size
        for j in range(7 + size):
            position = index - 7 + j
            if 0 <= position < 29:
                np.testing.assert_allclose(
                    scores[..., j],
                    np.asarray(full_scores)[:, :, index : index + size, position],
                    atol=1e-6,
                )
            else:
                assert (scores[..., j] == 0).all()
        index += size
    np.testing.assert_allclose(np.concatenate(pieces, axis=1), np.asarray(full), atol=1e-5)


def test_rolling_cache_errors():
    layer = _layer(rolling_cache=True)
    x = _inputs((2, 1))
    with pytest.raises(
        ValueError, match=r"`cache` must have exactly 7 positions.*cache.shape=\(2, 13, 2, 8\)"
    ):
        layer(x, cache=np.zeros((2, 13, 2, 8), "float32"), cache_index=0, use_causal_mask=True)
    with pytest.raises(ValueError, match=r"`cache_index` must be >= 0.*cache_index=-1"):
        layer(x, cache=layer.init_cache(2, 13), cache_index=-1, use_causal_mask=True)
    with pytest.raises(ValueError, match=r"`rolling_cache` must be True or False.*'yes'"):
        _layer(rolling_cache="yes")


def test_cached_step_reads_only_its_window():
    # Cache slots before a step's window hold NaN: a step that read them (or
    # attended over the whole cache) would return NaN.
    x = _inputs((1, 13))
    layer = _layer()  # block 4, flange 3
    full = np.asarray(layer(x, use_causal_mask=True))
    cache = layer.init_cache(1, 13)
    for index in range(13):
        y, cache = layer(
            x[:, index : index + 1], cache=cache, cache_index=index, use_causal_mask=True
        )
        np.testing.assert_allclose(np.asarray(y)[:, 0], full[:, index], atol=1e-5)
        stale = index + 1 - (4 - 1) - 3  # the next step reads [stale, index + 1]
        if stale > 0:
            cache = np.asarray(cache).copy()
            cache[:, :stale] = np.nan


@pytest.mark.requires_tensorflow
def test_cache_under_jit_compiled_loop():
    import tensorflow as tf

    x = _inputs((2, 13))
    layer = _layer()
    full = np.asarray(layer(x, use_causal_mask=True))

    @tf.function(jit_compile=True)
    def step(tokens, cache, index):
        return layer(tokens, cache=cache, cache_index=index, use_causal_mask=True)

    cache = layer.init_cache(2, 13)
    y, cache = step(x[:, :6], cache, tf.constant(0))  # chunked prefill (blocked path)
    outs = [np.asarray(y)]
    for i in range(6, 13):
        y, cache = step(x[:, i : i + 1], cache, tf.constant(i))
        outs.append(np.asarray(y))
    np.testing.assert_allclose(np.concatenate(outs, 1), full, atol=1e-5)
    assert step.experimental_get_tracing_count() == 2  # one per input length


@pytest.mark.requires_tensorflow
@pytest.mark.parametrize("shape, block, flange", [((13,), 4, 3), ((5, 7), (2, 3), (1, 2))])
def test_jit_compiled_forward_and_unknown_length(shape, block, flange):
    import tensorflow as tf

    x = _inputs((2,) + shape)
    padding = RNG.random((2,) + shape) > 0.2
    layer = _layer(block_size=block, memory_flange=flange)
    want = np.asarray(layer(x, padding_mask=padding, use_causal_mask=True))
    compiled = tf.function(
        lambda a, m: layer(a, padding_mask=m, use_causal_mask=True), jit_compile=True
    )
    np.testing.assert_allclose(np.asarray(compiled(x, padding)), want, atol=1e-5)
    if len(shape) == 1:  # a functional model over sequences of any length
        inputs = keras.Input((None, 16))
        mask_in = keras.Input((None,), dtype="bool")
        model = keras.Model(
            [inputs, mask_in], layer(inputs, padding_mask=mask_in, use_causal_mask=True)
        )
        np.testing.assert_allclose(np.asarray(model([x, padding])), want, atol=1e-5)


# On JAX: float32 on both ranks, each half-precision policy on one (both
# ranks reach the same float32 masked softmax, `_local_attention`; a policy
# changes the dtypes around it, not per rank); TensorFlow runs every pair.
MASKED_ROW_CASES = [
    (policy, *geometry)
    for policy in ("float32", "mixed_float16", "mixed_bfloat16")
    for geometry in (((9,), 4, 2), ((4, 5), (2, 2), (1, 1)))
    if not _ON_JAX or policy == "float32" or (policy == "mixed_float16") == (len(geometry[0]) == 1)
]


@pytest.mark.parametrize("policy, shape, block, flange", MASKED_ROW_CASES)
def test_fully_masked_rows_are_zero_with_finite_gradients(policy, shape, block, flange):
    layer = _layer(block_size=block, memory_flange=flange, dtype=policy)
    x = _inputs((2,) + shape)
    padding = np.ones((2,) + shape, bool)
    padding[1] = False
    # The first three queries (in generation order) see only padding.
    if len(shape) == 1:
        first = np.arange(9) < 3
    else:
        first = _block_raster_order(*shape, block) < 3
    padding[0][first] = False

    def forward(x):
        out, scores = layer(
            x, padding_mask=padding, use_causal_mask=True, return_attention_scores=True
        )
        return keras.ops.sum(keras.ops.cast(out, "float32") ** 2), (out, scores)

    (out, scores), grads = gradients(forward, [x], layer)
    assert all(np.isfinite(np.asarray(g, dtype="float32")).all() for g in grads)
    assert np.isfinite(np.asarray(out, dtype="float32")).all()
    scores = np.asarray(scores, dtype="float32")
    assert (scores[1] == 0).all() and (scores[0][:, first.reshape(-1)] == 0).all()
    bias = np.asarray(layer.output_dense.bias, dtype="float32")
    np.testing.assert_allclose(
        np.asarray(out, dtype="float32")[1].reshape(-1, 16),
        np.broadcast_to(bias, (np.prod(shape), 16)),
        atol=1e-6,
    )


@settings(max_examples=property_examples(25), deadline=None)
@given(
    data=st.data(),
    two_d=st.booleans(),
    causal=st.booleans(),
    num_heads=st.integers(1, 3),
)
def test_property_matches_dense_reference(data, two_d, causal, num_heads):
    if two_d:
        spatial = (data.draw(st.integers(1, 6)), data.draw(st.integers(1, 6)))
        block = (data.draw(st.integers(1, 4)), data.draw(st.integers(1, 4)))
        flange = (data.draw(st.integers(0, 3)), data.draw(st.integers(0, 3)))
    else:
        spatial = (data.draw(st.integers(1, 24)),)
        block = data.draw(st.integers(1, 8))
        flange = data.draw(st.integers(0, 10))
    seed = data.draw(st.integers(0, 2**16))
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((2,) + spatial + (8,)).astype("float32")
    padding = rng.random((2,) + spatial) > rng.random()
    layer = _layer(num_heads=num_heads, key_dim=3, block_size=block, memory_flange=flange)
    out = layer(x, padding_mask=padding, use_causal_mask=causal)
    want, _ = _reference(layer, x, spatial, causal, padding)
    np.testing.assert_allclose(np.asarray(out), want, atol=1e-4)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (
            {"block_size": 0},
            r"`block_size` must be an int \(1D\) or a pair of ints \(2D\), each >= 1. Received: block_size=0\.",
        ),
        (
            {"block_size": (4, -1)},
            r"`block_size` must be .*each >= 1. Received: block_size=\(4, -1\)",
        ),
        (
            {"block_size": 2.5},
            r"`block_size` must be an int .*or a pair of ints.*Received: block_size=2.5",
        ),
        ({"block_size": (4,)}, r"`block_size` must be an int .*Received: block_size=\(4,\)"),
        ({"block_size": True}, "`block_size` must be an int"),
        (
            {"block_size": 4, "memory_flange": (2, 2)},
            r"the rank of `block_size`.*block_size=4, memory_flange=\(2, 2\)",
        ),
        (
            {"block_size": (4, 4), "memory_flange": 2},
            "`memory_flange` must have the rank of `block_size`",
        ),
        (
            {"block_size": 4, "memory_flange": -1},
            r"`memory_flange` must be .*each >= 0. Received: memory_flange=-1",
        ),
        ({"num_heads": 0}, "num_heads` must be a positive integer"),
    ],
)
def test_constructor_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        _layer(**kwargs)


def test_call_errors():
    layer = _layer()
    x = _inputs((2, 9))
    layer(x)
    with pytest.raises(
        ValueError,
        match=r"expected ndim=3, found ndim=4\. Full shape received: \(2, 3, 3, 16\)",
    ):
        layer(_inputs((2, 3, 3)))
    with pytest.raises(ValueError, match="must be boolean.*float32"):
        layer(x, padding_mask=np.ones((2, 9), "float32"))
    with pytest.raises(
        ValueError,
        match=r"attention_mask` must have shape .*Received: attention_mask.shape=\(2, 9, 8\)",
    ):
        layer(x, attention_mask=np.ones((2, 9, 8), bool))
    with pytest.raises(
        ValueError, match="only with use_causal_mask=True.*Received: use_causal_mask=False"
    ):
        layer(x, cache=layer.init_cache(2, 9), cache_index=0)
    with pytest.raises(ValueError, match="cache_index=4, input length 9, cache length 10"):
        layer(x, cache=layer.init_cache(2, 10), cache_index=4, use_causal_mask=True)

    image_layer = _layer(block_size=(2, 2), memory_flange=(1, 1))
    image = _inputs((2, 4, 5))
    image_layer(image)
    with pytest.raises(
        ValueError,
        match=r"expected ndim=4, found ndim=3",
    ):
        image_layer(x)
    with pytest.raises(
        ValueError,
        match=r"padding_mask` must have shape \(2, 4, 5\).*Received: padding_mask.shape=\(2, 20\)",
    ):
        image_layer(image, padding_mask=np.ones((2, 20), bool))
    with pytest.raises(
        ValueError, match=r"in 2D only with `image_size`.*block_size=\(2, 2\), image_size=None"
    ):
        image_layer.init_cache(2, 20)
    with pytest.raises(
        ValueError,
        match=r"known features and sides\. Received: inputs.shape=\(None, None, 5, 16\)",
    ):
        _layer(block_size=(2, 2), memory_flange=(1, 1))(keras.Input((None, 5, 16)))
