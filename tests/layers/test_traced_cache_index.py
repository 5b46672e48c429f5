"""Sizes and positions known only at run time fail in the graph with the
eager message: a traced `cache_index` past the cache end (issue 12, "Also"),
for every self-attention type (they share the check), cache and input
lengths, batch sizes and mask shapes."""

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")  # a module of TensorFlow-only tests

from keras_attn.layers import LocalBlockAttention, MultiHeadSelfAttention, RelativeGlobalAttention

pytestmark = pytest.mark.requires_tensorflow

MESSAGE = r"`cache_index` \+ input length must fit in the cache. Received: cache_index="

# Every self-attention type with a cache of fixed length (they share the checks).
BOUNDED_CACHE_LAYERS = pytest.mark.parametrize("make", [
    lambda: MultiHeadSelfAttention(2, 4),
    lambda: RelativeGlobalAttention(2, 4, max_relative_position=4),
    lambda: LocalBlockAttention(2, 4, block_size=2, memory_flange=2),
], ids=["mhsa", "relative", "local"])


@BOUNDED_CACHE_LAYERS
def test_traced_cache_index_past_the_end_fails_with_the_eager_message(make):
    layer = make()
    x = np.random.RandomState(0).rand(1, 2, 8).astype("float32")
    cache = layer.init_cache(1, 6)
    with pytest.raises(ValueError, match=MESSAGE + "5, input length 2, cache length 6"):
        layer(x, cache=cache, cache_index=5, use_causal_mask=True)
    step = tf.function(lambda i: layer(x, cache=cache, cache_index=i, use_causal_mask=True))
    eager_out, eager_cache = layer(x, cache=cache, cache_index=4, use_causal_mask=True)
    traced_out, traced_cache = step(tf.constant(4))  # the last index that fits
    np.testing.assert_allclose(traced_out, eager_out, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(traced_cache, eager_cache, rtol=1e-6, atol=1e-6)
    for index in (5, 9, -1):  # it used to return finite garbage
        with pytest.raises(tf.errors.InvalidArgumentError, match=MESSAGE + r"\] \[" + str(index)):
            step(tf.constant(index))


def test_rolling_cache_takes_any_index_but_a_negative_one():
    layer = LocalBlockAttention(2, 4, block_size=2, memory_flange=2, rolling_cache=True)
    x = np.random.RandomState(0).rand(1, 2, 8).astype("float32")
    cache = layer.init_cache(1, 6)
    step = tf.function(lambda i: layer(x, cache=cache, cache_index=i, use_causal_mask=True))
    for index in (5, 1000):  # past any max_length: the cache does not grow
        eager_out, _ = layer(x, cache=cache, cache_index=index, use_causal_mask=True)
        np.testing.assert_allclose(step(tf.constant(index))[0], eager_out, rtol=1e-6, atol=1e-6)
    message = r"`cache_index` must be >= 0 \(the position of the first input\). Received: cache_index="
    with pytest.raises(ValueError, match=message + "-1"):
        layer(x, cache=cache, cache_index=-1, use_causal_mask=True)
    with pytest.raises(tf.errors.InvalidArgumentError, match=message + r"\] \[-1"):
        step(tf.constant(-1))


def test_cache_of_unknown_shape_at_trace_time_is_accepted():
    # A served signature may leave every axis of the cache unknown: only
    # known axes are checked while tracing.
    from keras_attn.layers import MultiHeadAttention

    x = np.random.RandomState(0).rand(1, 1, 8).astype("float32")
    layer = MultiHeadSelfAttention(2, 4)
    cache = layer.init_cache(1, 6)
    want = layer(x, cache=cache, cache_index=2, use_causal_mask=True)
    unknown = tf.TensorSpec([None] * 4, tf.float32)
    step = tf.function(lambda c: layer(x, cache=c, cache_index=2, use_causal_mask=True),
                       input_signature=[unknown])
    for got, expected in zip(step(cache), want):
        np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)
    cross = MultiHeadAttention(2, 4)
    memory = np.random.RandomState(1).rand(1, 5, 8).astype("float32")
    want = cross(x, memory)
    attend = tf.function(lambda c: cross(x, cache=c), input_signature=[unknown])
    np.testing.assert_allclose(attend(cross.compute_cache(memory)), want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("make", [
    lambda: MultiHeadSelfAttention(2, 4),
    lambda: LocalBlockAttention(2, 4, block_size=2, memory_flange=2),
    lambda: LocalBlockAttention(2, 4, block_size=2, memory_flange=2, rolling_cache=True),
], ids=["mhsa", "local", "rolling"])
def test_batch_known_only_at_run_time_is_checked_in_the_graph(make):
    layer = make()
    x = np.random.RandomState(0).rand(2, 1, 8).astype("float32")
    cache = layer.init_cache(3, 6)
    with pytest.raises(ValueError, match=r"`cache` holds 3 sequences but the inputs have batch size 2"):
        layer(x, cache=cache, cache_index=0, use_causal_mask=True)
    spec = tf.TensorSpec([None, 1, 8], tf.float32)
    step = tf.function(lambda x: layer(x, cache=cache, cache_index=0, use_causal_mask=True),
                       input_signature=[spec])
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=r"`cache` holds \] \[3\] \[ sequences but the inputs have batch size \] \[2"):
        step(x)
    step(np.concatenate([x, x[:1]]))  # the matching batch runs


def test_rolling_cache_padding_mask_must_reach_the_inputs():
    # The mask is over absolute positions; a short one used to be read at
    # its last entry for every later position.
    layer = LocalBlockAttention(2, 4, block_size=2, memory_flange=2, rolling_cache=True)
    x = np.random.RandomState(0).rand(1, 1, 8).astype("float32")
    cache = layer.init_cache(1, 6)
    message = r"`padding_mask` must cover every position up to the last input"
    with pytest.raises(ValueError, match=message + r".*padding_mask\.shape=\(1, 3\), cache_index=5, input length 1"):
        layer(x, cache=cache, cache_index=5, use_causal_mask=True, padding_mask=np.ones((1, 3), bool))
    layer(x, cache=cache, cache_index=5, use_causal_mask=True, padding_mask=np.ones((1, 6), bool))
    step = tf.function(lambda i: layer(x, cache=cache, cache_index=i, use_causal_mask=True,
                                       padding_mask=np.ones((1, 3), bool)))
    step(tf.constant(2))  # reaches position 2
    with pytest.raises(tf.errors.InvalidArgumentError, match=message + r".*padding_mask length \] \[3\] \[, cache_index \+ input length \] \[6"):
        step(tf.constant(5))


@BOUNDED_CACHE_LAYERS
def test_cache_and_input_lengths_known_only_at_run_time_are_checked_in_the_graph(make):
    # A served step may leave the cache length and the input length unknown
    # while tracing; a known index then used to pass unchecked, and the
    # clamped write corrupted the cache (slots 1..5 for cache_index 3).
    layer = make()
    x = np.random.RandomState(0).rand(2, 5, 8).astype("float32")
    cache = layer.init_cache(2, 6)
    spec = [None if axis in (0, layer._cache_length_axis) else size
            for axis, size in enumerate(cache.shape)]
    step = tf.function(
        lambda x, c: layer(x, cache=c, cache_index=3, use_causal_mask=True),
        input_signature=[tf.TensorSpec([None, None, 8]), tf.TensorSpec(spec)],
    )
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=MESSAGE + r"\] \[3\] \[, input length \] \[5\] \[, cache length \] \[6"):
        step(x, cache)
    eager_out, eager_cache = layer(x[:, :3], cache=cache, cache_index=3, use_causal_mask=True)
    traced_out, traced_cache = step(x[:, :3], cache)  # 3 + 3 = 6 fits
    np.testing.assert_allclose(traced_out, eager_out, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(traced_cache, eager_cache, rtol=1e-6, atol=1e-6)


def test_rolling_cache_of_another_length_is_refused_in_the_graph():
    layer = LocalBlockAttention(2, 4, block_size=2, memory_flange=2, rolling_cache=True)
    x = np.random.RandomState(0).rand(2, 1, 8).astype("float32")
    cache = layer.init_cache(2, 6)  # keeps block + flange = 4 positions
    message = r"rolling_cache=True keeps the last block_size \+ memory_flange = 4 positions"
    too_long = np.zeros((2, 7, 2, 8), "float32")
    with pytest.raises(ValueError, match=message):
        layer(x, cache=too_long, cache_index=5, use_causal_mask=True)
    step = tf.function(
        lambda c: layer(x, cache=c, cache_index=5, use_causal_mask=True),
        input_signature=[tf.TensorSpec([None, None, 2, 8])],
    )
    with pytest.raises(tf.errors.InvalidArgumentError, match=message + r".*\] \[7\]"):
        step(too_long)
    eager_out, eager_cache = layer(x, cache=cache, cache_index=5, use_causal_mask=True)
    traced_out, traced_cache = step(cache)
    np.testing.assert_allclose(traced_out, eager_out, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(traced_cache, eager_cache, rtol=1e-6, atol=1e-6)


def test_mask_shapes_known_only_at_run_time_are_checked_in_the_graph():
    layer = MultiHeadSelfAttention(2, 4)
    x = np.random.RandomState(0).rand(2, 5, 8).astype("float32")
    layer(x)
    any_length = tf.TensorSpec([None, None, 8])
    padded = tf.function(lambda x, m: layer(x, padding_mask=m),
                         input_signature=[any_length, tf.TensorSpec([None, None], tf.bool)])
    with pytest.raises(ValueError, match=r"`padding_mask` has shape \(2, 4\)"):
        layer(x, padding_mask=np.ones((2, 4), bool))
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=r"`padding_mask` does not match the expected shape \(\?, \?\).*"
                             r"Received: size \] \[4\] \[ on axis 1, expected \] \[5"):
        padded(x, np.ones((2, 4), bool))
    mask = np.ones((2, 5), bool)
    mask[1, 3:] = False
    np.testing.assert_allclose(padded(x, mask), layer(x, padding_mask=mask), rtol=1e-6, atol=1e-6)
    # (B, T, 1) is refused eagerly; in the graph it used to be broadcast
    # over every key.
    masked = tf.function(lambda x, m: layer(x, attention_mask=m),
                         input_signature=[any_length, tf.TensorSpec([None, None, None], tf.bool)])
    with pytest.raises(ValueError, match="`attention_mask` has shape"):
        layer(x, attention_mask=np.ones((2, 5, 1), bool))
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"on axis 2, expected \] \[5"):
        masked(x, np.ones((2, 5, 1), bool))
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=r"`attention_mask`: its batch axis \(axis 0\) has size \] \[3"):
        masked(x, np.ones((3, 5, 5), bool))
    shared = np.tril(np.ones((1, 5, 5), bool))  # batch axis 1: shared
    np.testing.assert_allclose(masked(x, shared), layer(x, attention_mask=shared),
                               rtol=1e-6, atol=1e-6)


def test_cross_attention_batch_known_only_at_run_time_is_checked_in_the_graph():
    from keras_attn.layers import MultiHeadAttention

    layer = MultiHeadAttention(2, 4)
    query = np.random.RandomState(0).rand(2, 5, 8).astype("float32")
    memory = np.random.RandomState(1).rand(2, 7, 6).astype("float32")
    layer(query, memory)
    with pytest.raises(ValueError, match="needs the same batch size for query and value"):
        layer(query, memory[:1])
    attend = tf.function(lambda q, v: layer(q, v), input_signature=[
        tf.TensorSpec([None, None, 8]), tf.TensorSpec([None, None, 6])])
    # A memory of batch 1 used to be broadcast silently to every query.
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=r"needs the same batch size for query and value. Received: "
                             r"query batch size \] \[2\] \[, value batch size \] \[1"):
        attend(query, memory[:1])
    np.testing.assert_allclose(attend(query, memory), layer(query, memory), rtol=1e-6, atol=1e-6)
    from_cache = tf.function(lambda q, c: layer(q, cache=c), input_signature=[
        tf.TensorSpec([None, None, 8]), tf.TensorSpec([None, 2, 8, None])])
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=r"query batch size \] \[2\] \[, cache batch size \] \[1"):
        from_cache(query, layer.compute_cache(memory[:1]))
