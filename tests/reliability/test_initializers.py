"""Issue 12, case 6: one initializer given to a layer is copied for each
sublayer, so no two kernels start from the same random draw.

An initializer object repeats its draw (an unseeded one fixes its seed when
it is made; so does the object `keras.initializers.get("glorot_uniform")`
returns). Shared by several sublayers, it made the query, key and value
projections of `MultiHeadAttention` identical, and the position embedding
of position i equal to the token embedding of id i.

Kernels of other shapes get the same numbers too, in their first entries,
rescaled by the initializer's fan: so every pair of kernels is compared on
its common leading entries, for equality and for correlation.
"""

import itertools

import keras
import numpy as np
import pytest

from keras_attn import layers as attn

RNG = np.random.default_rng(12)


def _floats(*shape):
    return RNG.standard_normal(shape).astype("float32")


def _local(**kwargs):
    return attn.LocalBlockAttention(2, 4, block_size=2, memory_flange=1, **kwargs)


def _local_2d(**kwargs):
    return attn.LocalBlockAttention(2, 4, block_size=(2, 2), memory_flange=(1, 1), **kwargs)


# Each case: (make the layer from initializer kwargs, its call arguments).
CASES = {
    "multi_head_attention": (
        lambda **kw: attn.MultiHeadAttention(2, 4, **kw),
        (_floats(2, 3, 8), _floats(2, 5, 8)),
    ),
    "multi_head_self_attention": (
        lambda **kw: attn.MultiHeadSelfAttention(2, 4, **kw),
        (_floats(2, 3, 8),),
    ),
    "local_block_attention_1d": (_local, (_floats(2, 5, 8),)),
    "local_block_attention_2d": (_local_2d, (_floats(2, 4, 4, 8),)),
    "relative_global_attention": (
        lambda **kw: attn.RelativeGlobalAttention(2, 4, max_relative_position=3, **kw),
        (_floats(2, 3, 8),),
    ),
    "transformer_encoder": (
        lambda **kw: attn.TransformerEncoder(8, num_heads=2, **kw),
        (_floats(2, 3, 8),),
    ),
    "transformer_decoder_with_cross_attention": (
        lambda **kw: attn.TransformerDecoder(8, num_heads=2, **kw),
        (_floats(2, 3, 8), _floats(2, 5, 8)),
    ),
}
INITIALIZERS = {
    "truncated_normal_object": lambda: keras.initializers.TruncatedNormal(stddev=0.02),
    "default": None,
}


def _assert_independent_draws(layer):
    tables = [(w.path, np.asarray(w).ravel()) for w in layer.weights if len(w.shape) >= 2]
    assert len(tables) >= 2, [path for path, _ in tables]
    for (path_a, a), (path_b, b) in itertools.combinations(tables, 2):
        n = min(a.size, b.size)
        assert not np.array_equal(a[:n], b[:n]), (path_a, path_b)
        correlation = np.corrcoef(a[:n], b[:n])[0, 1]
        assert abs(correlation) < 0.9, (path_a, path_b, correlation)


@pytest.mark.parametrize("initializer", sorted(INITIALIZERS))
@pytest.mark.parametrize("case", sorted(CASES))
def test_no_two_kernels_share_a_draw(case, initializer):
    make, inputs = CASES[case]
    kwargs = {}
    if INITIALIZERS[initializer] is not None:
        kwargs["kernel_initializer"] = INITIALIZERS[initializer]()
    layer = make(**kwargs)
    layer(*inputs)
    _assert_independent_draws(layer)
    if initializer != "default":
        # The layer keeps the object it was given, and its config.
        assert layer.kernel_initializer is kwargs["kernel_initializer"]
        assert layer.get_config()["kernel_initializer"]["config"]["stddev"] == 0.02


def test_blocks_with_a_nested_self_attention():
    attention = attn.RelativeGlobalAttention(2, 4, max_relative_position=3)
    block = attn.TransformerDecoder(
        8,
        self_attention=attention,
        kernel_initializer=keras.initializers.TruncatedNormal(stddev=0.02),
    )
    block(_floats(2, 3, 8), _floats(2, 5, 8))
    _assert_independent_draws(block)


@pytest.mark.parametrize("initializer", ["uniform", "truncated_normal_object"])
def test_token_and_position_embedding_tables_differ(initializer):
    if initializer != "uniform":
        initializer = keras.initializers.TruncatedNormal(stddev=0.02)
    layer = attn.TokenAndPositionEmbedding(
        20, 8, sequence_length=10, position="learned", embeddings_initializer=initializer
    )
    layer(np.ones((2, 3), "int32"))
    _assert_independent_draws(layer)


def test_a_seeded_initializer_stays_reproducible():
    # A copy keeps the seed it was given: two layers made alike start alike.
    def make():
        layer = attn.MultiHeadAttention(
            2, 4, kernel_initializer=keras.initializers.TruncatedNormal(stddev=0.02, seed=7)
        )
        layer.build((2, 3, 8), (2, 5, 8))
        return layer

    for a, b in zip(make().get_weights(), make().get_weights()):
        np.testing.assert_array_equal(a, b)
