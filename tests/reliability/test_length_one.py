"""Issue 12, case 5: attention over a single key (a 1-token prompt or
source, a cache of one slot, a local window of one position) is valid input
and raises no warning. Keras' softmax warns on an axis of size 1 ("Did you
mean to use a sigmoid?"); every attention layer of the library ran into it
on length-1 inputs.

Each case also checks the values: one visible key gets probability 1, so
the output is the output projection of that key's value.
"""

import warnings

import numpy as np
import pytest

from keras_attn.layers import LocalBlockAttention, MultiHeadAttention, TransformerDecoder
from tests import attention_kinds as kinds
from tests import references

RNG = np.random.default_rng(12)


def _floats(*shape):
    return RNG.standard_normal(shape).astype("float32")


def _call_without_warnings(fn, *args, **kwargs):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = fn(*args, **kwargs)
    assert not [str(w.message) for w in caught]
    return result


def _self_attention_cases():
    cases = {kind: (lambda k=kind: kinds.self_attention(k)) for kind in kinds.SELF_ATTENTION_KINDS}
    # A window of one position: every query sees only itself.
    cases["local_window_of_one"] = lambda: LocalBlockAttention(2, 4, block_size=1, memory_flange=0)
    return cases


SELF_ATTENTION_CASES = _self_attention_cases()


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("case", sorted(SELF_ATTENTION_CASES))
def test_self_attention_on_one_token(case, causal):
    layer = SELF_ATTENTION_CASES[case]()
    x = _floats(2, 1, 8)
    layer.build(x.shape)
    outputs, scores = _call_without_warnings(
        lambda: layer(x, use_causal_mask=causal, return_attention_scores=True)
    )
    want, _ = kinds.attention(layer, x, np.ones((2, 2, 1, 1), bool))
    np.testing.assert_allclose(outputs, want, atol=1e-5)
    # The only key takes all the weight: 1 up to TensorFlow's fused softmax,
    # whose vectorised exp gives 1 - 6e-8 on some CPUs (AVX2 without AVX-512).
    np.testing.assert_allclose(scores, np.ones((2, 2, 1, 1)), rtol=0, atol=1e-6)


@pytest.mark.parametrize("max_length", [1, 4])
@pytest.mark.parametrize("case", sorted(SELF_ATTENTION_CASES))
def test_cached_decoding_steps(case, max_length):
    # Token by token through the cache equals the full pass, with no
    # warning at any step (the first one of a 4-slot cache included).
    layer = SELF_ATTENTION_CASES[case]()
    x = _floats(2, max_length, 8)
    full = np.asarray(layer(x, use_causal_mask=True))
    cache = layer.init_cache(2, max_length)
    steps = []
    for i in range(max_length):
        y, cache = _call_without_warnings(
            layer, x[:, i : i + 1], cache=cache, cache_index=i, use_causal_mask=True
        )
        steps.append(np.asarray(y))
    np.testing.assert_allclose(np.concatenate(steps, 1), full, atol=1e-5)


@pytest.mark.parametrize("query_length", [1, 3])
def test_cross_attention_to_one_token(query_length):
    layer = MultiHeadAttention(num_heads=2, key_dim=4)
    query, value = _floats(2, query_length, 8), _floats(2, 1, 6)
    layer.build(query.shape, value.shape)
    outputs, scores = _call_without_warnings(
        lambda: layer(query, value, return_attention_scores=True)
    )
    want, _ = references.multi_head_cross_attention(
        layer, query, value, np.ones((2, 2, query_length, 1), bool)
    )
    np.testing.assert_allclose(outputs, want, atol=1e-5)
    np.testing.assert_array_equal(scores, np.ones((2, 2, query_length, 1)))


def test_decoder_step_with_a_one_token_source():
    decoder = TransformerDecoder(intermediate_dim=16, num_heads=2)
    target, source = _floats(2, 3, 8), _floats(2, 1, 8)
    full = np.asarray(decoder(target, source))
    cache, cross = decoder.init_cache(2, 3), None
    steps = []
    for i in range(3):
        y, cache, cross = _call_without_warnings(
            decoder,
            target[:, i : i + 1],
            source if cross is None else None,
            self_attention_cache=cache,
            cache_index=i,
            cross_attention_cache=cross,
        )
        steps.append(np.asarray(y))
    np.testing.assert_allclose(np.concatenate(steps, 1), full, atol=1e-5)
