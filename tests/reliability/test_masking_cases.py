"""Issue 6, cases 1, 3, 5 and 7, for every attention type of the library.

1. Padding with an all-padding example, and a causal mask with left padding
   (the first queries see only padding): finite outputs and gradients,
   fully masked rows give zero attention (the layer outputs its output
   bias there), and an example's results depend neither on the other
   examples of the batch nor on the content of its own padding.
3. Causal attention with dropout (training, fixed seed) and returned
   scores: positions <= t do not change when inputs after t change; scores
   above the diagonal are exactly 0.
5. Encoder-decoder with source length 7 and target length 4, padded
   differently per example: the decoder's cross-attention uses the
   encoder's padding mask, and the batch equals each example run alone.
7. Local attention whose flange covers the sequence (or image) is full
   attention. (Blocks covering the sequence, length 13 / block 4 and the
   10x7 image with block (4, 4) against the dense reference are in
   tests/layers/test_local_block_attention.py: `test_matches_dense_reference`,
   `test_block_covering_the_sequence_is_full_attention`,
   `test_block_covering_the_image_is_full_attention`.)
"""

import keras
import numpy as np
import pytest

from keras_attn.layers import LocalBlockAttention, MultiHeadAttention, MultiHeadSelfAttention
from tests import attention_kinds as kinds
from tests import references
from tests.test_case import gradients

KINDS = kinds.SELF_ATTENTION_KINDS
RNG = np.random.default_rng(61)

PADDINGS = {
    # Example 0 padded at the end, example 1 all padding.
    "right": np.array([[1, 1, 1, 0, 0], [0, 0, 0, 0, 0]], bool),
    # Left padding: with a causal mask queries 0 and 1 see only padding.
    "left": np.array([[0, 0, 1, 1, 1], [0, 0, 0, 0, 0]], bool),
}
CASE_1 = [("right", False), ("right", True), ("left", True)]


def _x(*shape):
    return RNG.standard_normal(shape).astype("float32")


def _finite(values):
    return all(np.isfinite(np.asarray(v, "float32")).all() for v in values)


def _check_empty_rows(scores, outputs, layer, empty, atol=1e-5):
    """Rows of `empty` (B, T) have all-zero scores (B, H, T, S) and output
    the output bias of `layer` in its compute dtype (zero heads times the
    output kernel, plus the bias); the other rows' scores sum to 1 (to
    `atol`: the scores come in the compute dtype)."""
    bias = keras.ops.cast(layer.output_dense.bias, layer.compute_dtype)
    scores = np.asarray(scores, "float32").transpose(0, 2, 1, 3)  # (B, T, H, S)
    assert (scores[empty] == 0).all()
    np.testing.assert_allclose(scores[~empty].sum(-1), 1.0, atol=atol)
    outputs = np.asarray(outputs, "float32")
    np.testing.assert_allclose(
        outputs[empty],
        np.broadcast_to(np.asarray(bias, "float32"), outputs[empty].shape),
        atol=1e-6,
    )


# ------------------------------------------------------------------ case 1
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    "padding_name, causal, policy",
    [case + ("float32",) for case in CASE_1]
    + [("left", True, "mixed_float16"), ("left", True, "mixed_bfloat16")],
)
def test_fully_masked_rows_give_zeros_and_finite_gradients(kind, padding_name, causal, policy):
    padding = PADDINGS[padding_name]
    layer = kinds.self_attention(kind, dtype=policy)
    x = _x(2, 5, 8)
    probe = _x(2, 5, 8)

    def forward(x):
        out, scores = layer(
            x, padding_mask=padding, use_causal_mask=causal, return_attention_scores=True
        )
        return keras.ops.sum(keras.ops.multiply(keras.ops.cast(out, "float32"), probe)), (
            out,
            scores,
        )

    (out, scores), grads = gradients(forward, [x], layer)
    assert _finite([out, scores]) and _finite(grads)
    mask = kinds.dense_mask(layer, 2, 5, padding, causal=causal)
    empty = kinds.empty_rows(mask)
    assert empty[1].all()
    if padding_name == "left":
        assert empty[0, :2].all() and not empty[0, 2:].any()
    _check_empty_rows(scores, out, layer, empty, atol=1e-5 if policy == "float32" else 1e-2)
    if policy == "float32":
        want, want_probs = kinds.attention(layer, np.asarray(x), mask)
        np.testing.assert_allclose(np.asarray(scores), want_probs, atol=1e-5)
        np.testing.assert_allclose(np.asarray(out), want, atol=1e-4)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("padding_name, causal", CASE_1)
def test_an_example_ignores_the_batch_and_its_own_padding(kind, padding_name, causal):
    padding = PADDINGS[padding_name]
    layer = kinds.self_attention(kind)
    x = _x(2, 5, 8)
    out = np.asarray(layer(x, padding_mask=padding, use_causal_mask=causal))
    garbage = x.copy()
    garbage[1] = 1e3 * _x(5, 8)  # the other example
    garbage[0, ~padding[0]] = 50 * _x(int((~padding[0]).sum()), 8)  # its own padding
    out2 = np.asarray(layer(garbage, padding_mask=padding, use_causal_mask=causal))
    real = padding[0]
    np.testing.assert_allclose(out2[0, real], out[0, real], atol=1e-5)
    alone = np.asarray(layer(x[:1], padding_mask=padding[:1], use_causal_mask=causal))
    np.testing.assert_allclose(alone[0], out[0], atol=1e-5)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("block_type", ["encoder", "decoder"])
def test_blocks_with_fully_masked_rows(kind, block_type):
    # The encoder (non-causal) with right padding, the decoder (causal)
    # with left padding: both have an all-padding example.
    padding = PADDINGS["right" if block_type == "encoder" else "left"]
    block = kinds.encoder(kind) if block_type == "encoder" else kinds.decoder(kind)

    def run(x, padding_mask):
        if block_type == "encoder":
            return block(x, padding_mask=padding_mask, return_attention_scores=True)
        out, scores = block(x, decoder_padding_mask=padding_mask, return_attention_scores=True)
        return out, scores["self_attention"]

    x = _x(2, 5, 8)
    probe = _x(2, 5, 8)

    def forward(x):
        out, scores = run(x, padding)
        return keras.ops.sum(keras.ops.multiply(out, probe)), (out, scores)

    (out, scores), grads = gradients(forward, [x], block)
    assert _finite([out, scores]) and _finite(grads)
    layer = block._self_attention_layer
    mask = kinds.dense_mask(layer, 2, 5, padding, causal=block_type == "decoder")
    empty = kinds.empty_rows(mask)
    assert empty[1].all()
    scores = np.asarray(scores).transpose(0, 2, 1, 3)
    assert (scores[empty] == 0).all()
    reference = kinds.encoder_block if block_type == "encoder" else kinds.decoder_block
    np.testing.assert_allclose(np.asarray(out), reference(block, np.asarray(x), mask), atol=1e-4)
    # Garbage in the other example and in the padding changes no real position.
    garbage = np.asarray(x).copy()
    garbage[1] = 1e3 * _x(5, 8)
    garbage[0, ~padding[0]] = 50 * _x(2, 8)
    np.testing.assert_allclose(
        np.asarray(run(garbage, padding)[0])[0, padding[0]],
        np.asarray(out)[0, padding[0]],
        atol=1e-5,
    )
    np.testing.assert_allclose(
        np.asarray(run(np.asarray(x)[:1], padding[:1])[0])[0], np.asarray(out)[0], atol=1e-5
    )


def test_cross_attention_with_an_empty_memory():
    layer = MultiHeadAttention(
        num_heads=2, key_dim=4, bias_initializer=keras.initializers.RandomNormal(stddev=0.5, seed=5)
    )
    query, value = _x(2, 4, 8), _x(2, 7, 6)
    padding = np.array([[1, 1, 1, 0, 0, 0, 0], [0] * 7], bool)
    probe = _x(2, 4, 8)

    def forward(query, value):
        out, scores = layer(query, value, value_padding_mask=padding, return_attention_scores=True)
        return keras.ops.sum(keras.ops.multiply(out, probe)), (out, scores)

    (out, scores), grads = gradients(forward, [query, value], layer)
    assert _finite([out, scores]) and _finite(grads)
    empty = np.array([[False] * 4, [True] * 4])
    _check_empty_rows(scores, out, layer, empty)
    garbage = np.asarray(value).copy()
    garbage[1] = 1e3 * _x(7, 6)
    garbage[0, 3:] = 50 * _x(4, 6)
    out2 = layer(query, garbage, value_padding_mask=padding)
    np.testing.assert_allclose(np.asarray(out2)[0], np.asarray(out)[0], atol=1e-5)
    alone = layer(query[:1], value[:1, :3])
    np.testing.assert_allclose(np.asarray(alone)[0], np.asarray(out)[0], atol=1e-5)


# ------------------------------------------------------------------ case 3
def _twins(make, shape):
    """Two layers with the same weights and dropout seed: the same dropout
    draws, call for call."""
    a, b = make(), make()
    a.build(shape)
    b.build(shape)
    b.set_weights(a.get_weights())
    return a, b


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("mode", ["full", "cached"])
def test_causal_dropout_never_sees_the_future(kind, mode):
    t, length = 3, 8
    x1 = _x(2, length, 8)
    x2 = x1.copy()
    x2[:, t + 1 :] = _x(2, length - t - 1, 8)
    a, b = _twins(lambda: kinds.self_attention(kind, dropout=0.1, seed=7), x1.shape)

    def run(layer, x):
        if mode == "full":
            return layer(x, use_causal_mask=True, return_attention_scores=True, training=True)
        cache, outs, rows, index = layer.init_cache(2, length), [], [], 0
        for size in (2, 2, 1, 3):  # a chunk boundary at t + 1
            y, scores, cache = layer(
                x[:, index : index + size],
                cache=cache,
                cache_index=index,
                use_causal_mask=True,
                return_attention_scores=True,
                training=True,
            )
            outs.append(np.asarray(y))
            rows.append(np.asarray(scores))
            index += size
        return np.concatenate(outs, 1), np.concatenate(rows, 2)

    (y1, s1), (y2, s2) = run(a, x1), run(b, x2)
    y1, y2 = np.asarray(y1), np.asarray(y2)
    np.testing.assert_allclose(y1[:, : t + 1], y2[:, : t + 1], atol=1e-6)
    assert not np.allclose(y1[:, t + 1 :], y2[:, t + 1 :])
    future = np.triu(np.ones((length, length), bool), 1)
    for scores in (np.asarray(s1), np.asarray(s2)):
        assert (scores[:, :, future] == 0).all()
        assert (scores[:, :, np.arange(length), np.arange(length)] > 0).all()
    # Dropout is really on: the inference pass differs.
    assert not np.allclose(y1, np.asarray(a(x1, use_causal_mask=True)), atol=1e-4)


@pytest.mark.parametrize("kind", KINDS)
def test_decoder_block_with_dropout_never_sees_the_future(kind):
    t, length = 3, 7
    x1 = _x(2, length, 8)
    x2 = x1.copy()
    x2[:, t + 1 :] += 1.0
    a, b = _twins(lambda: kinds.decoder(kind, dropout=0.1, seed=5), x1.shape)
    y1, s1 = a(x1, training=True, return_attention_scores=True)
    y2, s2 = b(x2, training=True, return_attention_scores=True)
    y1, y2 = np.asarray(y1), np.asarray(y2)
    np.testing.assert_allclose(y1[:, : t + 1], y2[:, : t + 1], atol=1e-6)
    assert not np.allclose(y1[:, t + 1 :], y2[:, t + 1 :])
    future = np.triu(np.ones((length, length), bool), 1)
    assert (np.asarray(s1["self_attention"])[:, :, future] == 0).all()
    assert not np.allclose(y1, np.asarray(a(x1)), atol=1e-4)


# ------------------------------------------------------------------ case 5
SOURCE_PADDING = np.array([[1] * 7, [1] * 4 + [0] * 3], bool)
TARGET_PADDING = np.array([[1, 1, 1, 0], [1, 1, 1, 1]], bool)


@pytest.mark.parametrize("kind", KINDS)
def test_encoder_decoder_batch_equals_each_example_alone(kind):
    source, target = _x(2, 7, 8), _x(2, 4, 8)
    encoder, decoder = kinds.encoder(kind), kinds.decoder(kind)
    memory = encoder(source, padding_mask=SOURCE_PADDING)
    out, scores = decoder(
        target,
        memory,
        decoder_padding_mask=TARGET_PADDING,
        encoder_padding_mask=SOURCE_PADDING,
        return_attention_scores=True,
    )
    out, cross = np.asarray(out), np.asarray(scores["cross_attention"])
    assert cross.shape == (2, 2, 4, 7)
    assert (cross[1, :, :, 4:] == 0).all()  # the encoder's padding mask is used
    np.testing.assert_allclose(cross.sum(-1), 1.0, atol=1e-5)
    # Against the reference of the whole block, masks built pair by pair.
    layer = decoder._self_attention_layer
    self_mask = kinds.dense_mask(layer, 2, 4, TARGET_PADDING, causal=True)
    cross_mask = references.dense_mask(2, 4, 7, SOURCE_PADDING, num_heads=2)
    np.testing.assert_allclose(
        out,
        kinds.decoder_block(decoder, target, self_mask, np.asarray(memory), cross_mask),
        atol=1e-4,
    )
    for b in range(2):
        s, t = int(SOURCE_PADDING[b].sum()), int(TARGET_PADDING[b].sum())
        alone = decoder(target[b : b + 1, :t], encoder(source[b : b + 1, :s]))
        np.testing.assert_allclose(np.asarray(alone)[0], out[b, :t], atol=1e-5)


@pytest.mark.parametrize("kind", KINDS)
def test_functional_encoder_decoder_reads_the_implicit_masks(kind):
    # Token ids with 0 = padding: the masks come from the embeddings alone.
    source_ids = keras.Input((None,), dtype="int32")
    target_ids = keras.Input((None,), dtype="int32")
    memory = kinds.encoder(kind)(keras.layers.Embedding(20, 8, mask_zero=True)(source_ids))
    decoded = kinds.decoder(kind)(keras.layers.Embedding(20, 8, mask_zero=True)(target_ids), memory)
    model = keras.Model([source_ids, target_ids], keras.layers.Dense(20)(decoded))
    source = np.array([[3, 4, 5, 6, 7, 8, 9], [5, 6, 7, 8, 0, 0, 0]], "int32")
    target = np.array([[2, 3, 4, 0], [5, 6, 7, 8]], "int32")
    logits = np.asarray(model([source, target]))
    for b in range(2):
        s, t = int((source[b] > 0).sum()), int((target[b] > 0).sum())
        alone = np.asarray(model([source[b : b + 1, :s], target[b : b + 1, :t]]))
        np.testing.assert_allclose(alone[0], logits[b, :t], atol=1e-5)


# ------------------------------------------------------------------ case 7
def _local_and_dense(**local_kwargs):
    local = LocalBlockAttention(num_heads=2, key_dim=4, **local_kwargs)
    dense = MultiHeadSelfAttention(num_heads=2, key_dim=4)
    return local, dense


@pytest.mark.parametrize("causal", [False, True])
def test_flange_covering_the_sequence_is_full_attention(causal):
    # Length 13, block 4: a flange of 12 reaches every earlier (and, when
    # not causal, later) position from every block.
    x = _x(2, 13, 16)
    padding = np.array([[1] * 13, [1] * 9 + [0] * 4], bool)
    local, dense = _local_and_dense(block_size=4, memory_flange=12)
    local.build(x.shape)
    dense.build(x.shape)
    dense.set_weights(local.get_weights())
    kwargs = {"padding_mask": padding, "use_causal_mask": causal}
    want = np.asarray(dense(x, **kwargs))
    np.testing.assert_allclose(np.asarray(local(x, **kwargs)), want, atol=1e-5)
    if causal:  # and token by token through the cache
        cache, outs = local.init_cache(2, 13), []
        for i in range(13):
            y, cache = local(
                x[:, i : i + 1],
                padding_mask=padding,
                cache=cache,
                cache_index=i,
                use_causal_mask=True,
            )
            outs.append(np.asarray(y))
        np.testing.assert_allclose(np.concatenate(outs, 1), want, atol=1e-5)


def test_flange_covering_the_image_is_full_attention():
    # A 10x7 image with blocks (4, 4): a flange of (9, 6) covers it.
    image = _x(1, 10, 7, 16)
    local, dense = _local_and_dense(block_size=(4, 4), memory_flange=(9, 6))
    local.build(image.shape)
    dense.build((1, 70, 16))
    dense.set_weights(local.get_weights())
    np.testing.assert_allclose(
        np.asarray(local(image)).reshape(1, 70, 16),
        np.asarray(dense(image.reshape(1, 70, 16))),
        atol=1e-5,
    )
