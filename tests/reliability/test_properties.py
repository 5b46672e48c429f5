"""Issue 6, property tests: hypothesis draws shapes, head counts, masks and
chunkings, and every layer must agree with its NumPy reference.

LocalBlockAttention and RelativeGlobalAttention have their own properties
over block sizes and relative distances in tests/layers/; here are
MultiHeadSelfAttention, MultiHeadAttention, the Transformer blocks with
every self-attention type, and cached decoding == the full pass for random
chunkings, for every type. Bounded: 10-25 examples each, no deadline.
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from keras_attn.layers import MultiHeadAttention, MultiHeadSelfAttention
from tests import attention_kinds as kinds
from tests import references
from tests.test_case import property_examples

# A softmax over one key makes Keras warn; a length of 1 is a case we want.
pytestmark = pytest.mark.filterwarnings("ignore:You are using a softmax over axis -1")

PROPERTY = settings(max_examples=property_examples(20), deadline=None)


def _random_masks(rng, batch, heads, queries, keys, per_head):
    padding = rng.random((batch, keys)) > rng.uniform(0.0, 0.6)
    shape = (batch, heads, queries, keys) if per_head else (batch, queries, keys)
    attention = rng.random(shape) > rng.uniform(0.0, 0.6)
    return padding, attention


@PROPERTY
@given(
    batch=st.integers(1, 3),
    length=st.integers(1, 9),
    num_heads=st.integers(1, 3),
    key_dim=st.integers(1, 5),
    value_dim=st.integers(1, 4),
    causal=st.booleans(),
    per_head=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_multi_head_self_attention_matches_reference(
    batch, length, num_heads, key_dim, value_dim, causal, per_head, seed
):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((batch, length, 6)).astype("float32")
    padding, attention = _random_masks(rng, batch, num_heads, length, length, per_head)
    layer = MultiHeadSelfAttention(num_heads=num_heads, key_dim=key_dim, value_dim=value_dim)
    out, scores = layer(
        x,
        padding_mask=padding,
        attention_mask=attention,
        use_causal_mask=causal,
        return_attention_scores=True,
    )
    mask = references.dense_mask(
        batch, length, length, padding, attention, causal, num_heads=num_heads
    )
    want, want_probs = references.multi_head_self_attention(layer, x, mask)
    np.testing.assert_allclose(np.asarray(scores), want_probs, atol=1e-5)
    np.testing.assert_allclose(np.asarray(out), want, atol=1e-4)


@PROPERTY
@given(
    batch=st.integers(1, 3),
    query_length=st.integers(1, 6),
    value_length=st.integers(1, 8),
    num_heads=st.integers(1, 3),
    key_dim=st.integers(1, 5),
    per_head=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_multi_head_attention_matches_reference(
    batch, query_length, value_length, num_heads, key_dim, per_head, seed
):
    rng = np.random.default_rng(seed)
    query = rng.standard_normal((batch, query_length, 6)).astype("float32")
    value = rng.standard_normal((batch, value_length, 5)).astype("float32")
    padding, attention = _random_masks(rng, batch, num_heads, query_length, value_length, per_head)
    layer = MultiHeadAttention(num_heads=num_heads, key_dim=key_dim)
    out, scores = layer(
        query,
        value,
        value_padding_mask=padding,
        attention_mask=attention,
        return_attention_scores=True,
    )
    mask = references.dense_mask(
        batch, query_length, value_length, padding, attention, num_heads=num_heads
    )
    want, want_probs = references.multi_head_cross_attention(layer, query, value, mask)
    np.testing.assert_allclose(np.asarray(scores), want_probs, atol=1e-5)
    np.testing.assert_allclose(np.asarray(out), want, atol=1e-4)


@PROPERTY
@given(
    kind=st.sampled_from(kinds.SELF_ATTENTION_KINDS),
    batch=st.integers(1, 2),
    length=st.integers(1, 8),
    normalize_first=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_encoder_block_matches_reference(kind, batch, length, normalize_first, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((batch, length, 8)).astype("float32")
    padding = rng.random((batch, length)) > 0.3
    block = kinds.encoder(kind, normalize_first=normalize_first)
    out = block(x, padding_mask=padding)
    mask = kinds.dense_mask(block._self_attention_layer, batch, length, padding)
    np.testing.assert_allclose(np.asarray(out), kinds.encoder_block(block, x, mask), atol=1e-4)


@PROPERTY
@given(
    kind=st.sampled_from(kinds.SELF_ATTENTION_KINDS),
    batch=st.integers(1, 2),
    length=st.integers(1, 7),
    memory_length=st.integers(1, 6),
    cross=st.booleans(),
    normalize_first=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_decoder_block_matches_reference(
    kind, batch, length, memory_length, cross, normalize_first, seed
):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((batch, length, 8)).astype("float32")
    padding = rng.random((batch, length)) > 0.3
    block = kinds.decoder(kind, normalize_first=normalize_first)
    self_mask = kinds.dense_mask(block.self_attention, batch, length, padding, causal=True)
    if cross:
        memory = rng.standard_normal((batch, memory_length, 6)).astype("float32")
        memory_padding = rng.random((batch, memory_length)) > 0.3
        out = block(x, memory, decoder_padding_mask=padding, encoder_padding_mask=memory_padding)
        cross_mask = references.dense_mask(
            batch, length, memory_length, memory_padding, num_heads=2
        )
        want = kinds.decoder_block(block, x, self_mask, memory, cross_mask)
    else:
        out = block(x, decoder_padding_mask=padding)
        want = kinds.decoder_block(block, x, self_mask)
    np.testing.assert_allclose(np.asarray(out), want, atol=1e-4)


def _chunks(data, length):
    sizes = []
    while sum(sizes) < length:
        sizes.append(data.draw(st.integers(1, length - sum(sizes))))
    return sizes


@settings(max_examples=property_examples(25), deadline=None)
@given(
    data=st.data(),
    kind=st.sampled_from(kinds.SELF_ATTENTION_KINDS),
    length=st.integers(1, 10),
    extra_slots=st.integers(0, 3),
    seed=st.integers(0, 2**16),
)
def test_cached_equals_full_pass_for_random_chunkings(data, kind, length, extra_slots, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((2, length, 8)).astype("float32")
    cache_length = length + extra_slots
    padding = rng.random((2, cache_length)) > 0.25
    layer = kinds.self_attention(kind)
    full = np.asarray(layer(x, padding_mask=padding[:, :length], use_causal_mask=True))
    chunks = _chunks(data, length)
    cache, outs, index = layer.init_cache(2, cache_length), [], 0
    for size in chunks:
        y, cache = layer(
            x[:, index : index + size],
            padding_mask=padding,
            cache=cache,
            cache_index=index,
            use_causal_mask=True,
        )
        outs.append(np.asarray(y))
        index += size
    np.testing.assert_allclose(np.concatenate(outs, axis=1), full, atol=1e-5)


@settings(max_examples=property_examples(10), deadline=None)
@given(
    data=st.data(),
    kind=st.sampled_from(kinds.SELF_ATTENTION_KINDS),
    length=st.integers(1, 6),
    seed=st.integers(0, 2**16),
)
def test_cached_decoder_block_equals_full_pass_for_random_chunkings(data, kind, length, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((2, length, 8)).astype("float32")
    memory = rng.standard_normal((2, 5, 6)).astype("float32")
    memory_padding = rng.random((2, 5)) > 0.3
    block = kinds.decoder(kind)
    full = np.asarray(block(x, memory, encoder_padding_mask=memory_padding))
    cache, cross, outs, index = block.init_cache(2, length), None, [], 0
    for size in _chunks(data, length):
        y, cache, cross = block(
            x[:, index : index + size],
            None if cross is not None else memory,
            encoder_padding_mask=memory_padding,
            self_attention_cache=cache,
            cache_index=index,
            cross_attention_cache=cross,
        )
        outs.append(np.asarray(y))
        index += size
    np.testing.assert_allclose(np.concatenate(outs, axis=1), full, atol=1e-5)
