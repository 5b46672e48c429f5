"""Calls traced with sizes and positions known only at run time (a traced
`cache_index`, unknown cache, input and mask lengths, batch sizes) give the
eager results, for every self-attention type. The layers check what is
known when traced; run-time values are checked where they enter (the
generation functions' prefill, the exporters' signatures)."""

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")  # a module of TensorFlow-only tests

from keras_attn.layers import (
    LocalBlockAttention,
    MultiHeadAttention,
    MultiHeadSelfAttention,
    RelativeGlobalAttention,
)

pytestmark = pytest.mark.requires_tensorflow

# Every self-attention type with a cache of fixed length, and a rolling one.
CACHED_LAYERS = pytest.mark.parametrize(
    "make",
    [
        lambda: MultiHeadSelfAttention(2, 4),
        lambda: RelativeGlobalAttention(2, 4, max_relative_position=4),
        lambda: LocalBlockAttention(2, 4, block_size=2, memory_flange=2),
        lambda: LocalBlockAttention(2, 4, block_size=2, memory_flange=2, rolling_cache=True),
    ],
    ids=["mhsa", "relative", "local", "rolling"],
)


def _close(got, want):
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)


@CACHED_LAYERS
def test_traced_cache_index_gives_the_eager_results(make):
    layer = make()
    x = np.random.RandomState(0).rand(1, 2, 8).astype("float32")
    cache = layer.init_cache(1, 6)
    step = tf.function(lambda i: layer(x, cache=cache, cache_index=i, use_causal_mask=True))
    indices = (4, 1000) if getattr(layer, "rolling_cache", False) else (4,)
    for index in indices:  # 4: the last that fits; a rolling cache takes any
        _close(
            step(tf.constant(index)), layer(x, cache=cache, cache_index=index, use_causal_mask=True)
        )


@CACHED_LAYERS
def test_sizes_known_only_at_run_time_give_the_eager_results(make):
    # A served step may leave the batch, the input length and the cache
    # length unknown while tracing.
    layer = make()
    x = np.random.RandomState(0).rand(2, 3, 8).astype("float32")
    cache = layer.init_cache(2, 6)
    spec = [
        None if axis in (0, layer._cache_length_axis) else size
        for axis, size in enumerate(cache.shape)
    ]
    step = tf.function(
        lambda x, c: layer(x, cache=c, cache_index=3, use_causal_mask=True),
        input_signature=[tf.TensorSpec([None, None, 8]), tf.TensorSpec(spec)],
    )
    _close(step(x, cache), layer(x, cache=cache, cache_index=3, use_causal_mask=True))


def test_cache_of_unknown_shape_at_trace_time_is_accepted():
    # A served signature may leave every axis of the cache unknown.
    x = np.random.RandomState(0).rand(1, 1, 8).astype("float32")
    layer = MultiHeadSelfAttention(2, 4)
    cache = layer.init_cache(1, 6)
    unknown = tf.TensorSpec([None] * 4, tf.float32)
    step = tf.function(
        lambda c: layer(x, cache=c, cache_index=2, use_causal_mask=True), input_signature=[unknown]
    )
    _close(step(cache), layer(x, cache=cache, cache_index=2, use_causal_mask=True))
    cross = MultiHeadAttention(2, 4)
    memory = np.random.RandomState(1).rand(1, 5, 8).astype("float32")
    want = cross(x, memory)
    attend = tf.function(lambda c: cross(x, cache=c), input_signature=[unknown])
    np.testing.assert_allclose(attend(cross.compute_cache(memory)), want, rtol=1e-5, atol=1e-6)


def test_rolling_cache_padding_mask_must_reach_the_inputs():
    # The mask is over absolute positions; a short one used to be read at
    # its last entry for every later position.
    layer = LocalBlockAttention(2, 4, block_size=2, memory_flange=2, rolling_cache=True)
    x = np.random.RandomState(0).rand(1, 1, 8).astype("float32")
    cache = layer.init_cache(1, 6)
    message = r"`cache_index` \+ input length must fit in the cache \(or a rolling cache's `padding_mask`\)"
    with pytest.raises(
        ValueError, match=message + r".*cache_index=5, input length 1, cache length 3"
    ):
        layer(
            x, cache=cache, cache_index=5, use_causal_mask=True, padding_mask=np.ones((1, 3), bool)
        )
    mask = np.ones((1, 6), bool)
    step = tf.function(
        lambda i: layer(x, cache=cache, cache_index=i, use_causal_mask=True, padding_mask=mask)
    )
    _close(
        step(tf.constant(5)),
        layer(x, cache=cache, cache_index=5, use_causal_mask=True, padding_mask=mask),
    )


def test_masks_and_memories_of_sizes_known_only_at_run_time():
    layer = MultiHeadSelfAttention(2, 4)
    x = np.random.RandomState(0).rand(2, 5, 8).astype("float32")
    any_length = tf.TensorSpec([None, None, 8])
    padded = tf.function(
        lambda x, m: layer(x, padding_mask=m),
        input_signature=[any_length, tf.TensorSpec([None, None], tf.bool)],
    )
    mask = np.ones((2, 5), bool)
    mask[1, 3:] = False
    np.testing.assert_allclose(padded(x, mask), layer(x, padding_mask=mask), rtol=1e-6, atol=1e-6)
    masked = tf.function(
        lambda x, m: layer(x, attention_mask=m),
        input_signature=[any_length, tf.TensorSpec([None, None, None], tf.bool)],
    )
    shared = np.tril(np.ones((1, 5, 5), bool))  # batch axis 1: shared
    np.testing.assert_allclose(
        masked(x, shared), layer(x, attention_mask=shared), rtol=1e-6, atol=1e-6
    )
    cross = MultiHeadAttention(2, 4)
    memory = np.random.RandomState(1).rand(2, 7, 6).astype("float32")
    attend = tf.function(
        lambda q, v: cross(q, v),
        input_signature=[tf.TensorSpec([None, None, 8]), tf.TensorSpec([None, None, 6])],
    )
    np.testing.assert_allclose(attend(x, memory), cross(x, memory), rtol=1e-6, atol=1e-6)
