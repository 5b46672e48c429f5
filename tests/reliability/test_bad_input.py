"""Issue 6: bad input gets a clear ValueError (what was received, what was
expected, how to fix it) from every attention layer and block — never a
deep backend error, an assert, or a silent wrong answer.

This file calls them: masks, inputs and caches (`init_cache` included) of
the self-attention, 2D local, cross-attention layers and the encoder and
decoder blocks. Their constructors: test_bad_constructor_arguments.py;
ids and positions outside an embedding's table, in the layers and the
models: test_bad_embedding_input.py.

A `block_size` longer than the sequence is valid, not an error: the
LocalBlockAttention docstring defines it as one block (full attention);
`test_block_covering_the_sequence_is_full_attention` in
tests/layers/test_local_block_attention.py checks it against the dense layer.
"""

import re

import keras
import numpy as np
import pytest

from keras_attn.layers import (
    LocalBlockAttention,
    MultiHeadAttention,
    TransformerDecoder,
    TransformerEncoder,
)
from tests import attention_kinds as kinds

KINDS = kinds.SELF_ATTENTION_KINDS
X = np.random.default_rng(5).standard_normal((2, 5, 8)).astype("float32")

# (call kwargs, message pattern): the same for every self-attention layer.
SELF_ATTENTION_CALL_ERRORS = {
    "padding_mask_rank_1": (
        {"padding_mask": np.ones((5,), bool)},
        r"`padding_mask` must have shape \(2, 5\) for these inputs\. Received: padding_mask\.shape=\(5,\)",
    ),
    "padding_mask_rank_3": (
        {"padding_mask": np.ones((2, 5, 1), bool)},
        r"`padding_mask` must have shape \(2, 5\).*Received: padding_mask\.shape=\(2, 5, 1\)",
    ),
    "padding_mask_length": (
        {"padding_mask": np.ones((2, 4), bool)},
        r"`padding_mask` must have shape \(2, 5\) .*Received: padding_mask\.shape=\(2, 4\)\. Build the mask",
    ),
    "padding_mask_batch": (
        {"padding_mask": np.ones((3, 5), bool)},
        r"`padding_mask` must have shape \(2, 5\) .*Received: padding_mask\.shape=\(3, 5\)",
    ),
    "padding_mask_float": (
        {"padding_mask": np.ones((2, 5), "float32")},
        r"`padding_mask` must be boolean.*Received a mask of dtype float32.*`mask == 0`",
    ),
    "padding_mask_strings": (
        {"padding_mask": np.full((2, 5), "yes")},
        r"`padding_mask` must be boolean .* or integer .*Received a mask of dtype",
    ),
    "attention_mask_rank_2": (
        {"attention_mask": np.ones((5, 5), bool)},
        r"`attention_mask` must have shape \(2 or 1, 5, 5\) or \(2 or 1, 2 or 1, 5, 5\).*Received: attention_mask\.shape=\(5, 5\)",
    ),
    "attention_mask_float": (
        {"attention_mask": keras.ops.ones((2, 5, 5))},
        r"`attention_mask` must be boolean.*float32.*`mask > 0\.5`",
    ),
    "attention_mask_keys": (
        {"attention_mask": np.ones((2, 5, 6), bool)},
        r"`attention_mask` must have shape \(2 or 1, 5, 5\).*Received: attention_mask\.shape=\(2, 5, 6\)",
    ),
    "attention_mask_batch": (
        {"attention_mask": np.ones((3, 5, 5), bool)},
        r"`attention_mask` must have shape \(2 or 1, 5, 5\).*Received: attention_mask\.shape=\(3, 5, 5\)",
    ),
    "attention_mask_heads": (
        {"attention_mask": np.ones((2, 3, 5, 5), bool)},
        r"`attention_mask` must have shape .* or \(2 or 1, 2 or 1, 5, 5\).*Received: attention_mask\.shape=\(2, 3, 5, 5\)",
    ),
}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    "case",
    [
        # A string array is a TensorFlow tensor; JAX has none (Keras's own
        # conversion of the call arguments refuses it before the layer).
        pytest.param(case, marks=pytest.mark.requires_tensorflow)
        if case == "padding_mask_strings"
        else case
        for case in sorted(SELF_ATTENTION_CALL_ERRORS)
    ],
)
def test_self_attention_mask_errors(kind, case):
    kwargs, message = SELF_ATTENTION_CALL_ERRORS[case]
    layer = kinds.self_attention(kind)
    with pytest.raises(ValueError, match=message):
        layer(X, **kwargs)


def _functional_builds():
    """(name, build(mask_input)): each calls a layer on `keras.Input`s with
    the mask input given for one of its masks."""
    x, memory = keras.Input((5, 8)), keras.Input((6, 8))
    builds = {
        f"{kind}_{name}": (
            lambda m, kind=kind, name=name: kinds.self_attention(kind)(x, **{name: m})
        )
        for kind in KINDS
        for name in ("padding_mask", "attention_mask")
    }
    builds["encoder_block_padding_mask"] = lambda m: kinds.encoder("multi_head")(x, padding_mask=m)
    builds["decoder_block_padding_mask"] = lambda m: kinds.decoder("multi_head")(
        x, memory, decoder_padding_mask=m
    )
    builds["decoder_block_encoder_padding_mask"] = lambda m: kinds.decoder("multi_head")(
        x, memory, encoder_padding_mask=m
    )
    builds["cross_attention_value_padding_mask"] = lambda m: MultiHeadAttention(2, 4)(
        x, memory, value_padding_mask=m
    )
    return builds


# The mask shapes each build expects: (B, S) padding masks, (B, T, S) attention masks.
_GOOD_SHAPES = {"attention_mask": (5, 5), "encoder_padding_mask": (6,), "value_padding_mask": (6,)}


@pytest.mark.parametrize("build", sorted(_functional_builds()))
def test_masks_are_checked_when_a_functional_model_is_built(build):
    # Refused at `layer(x, mask)` with the call's message, not at the first
    # predict: a float mask, and a mask whose known length does not match.
    make = _functional_builds()[build]
    shape = next((v for k, v in _GOOD_SHAPES.items() if build.endswith(k)), (5,))
    with pytest.raises(ValueError, match="must be boolean"):
        make(keras.Input(shape, dtype="float32"))
    with pytest.raises(ValueError, match="must have shape"):
        make(keras.Input(shape[:-1] + (shape[-1] + 2,), dtype="bool"))
    assert make(keras.Input(shape, dtype="bool")).shape == (None, 5, 8)


@pytest.mark.parametrize("kind", KINDS)
def test_shared_masks_of_batch_or_heads_one_are_accepted(kind):
    layer = kinds.self_attention(kind)
    mask = np.random.default_rng(0).random((5, 5)) > 0.3
    full = layer(X, attention_mask=np.broadcast_to(mask, (2, 2, 5, 5)))
    for shared in (mask[None], mask[None, None], np.broadcast_to(mask, (2, 1, 5, 5))):
        np.testing.assert_allclose(
            np.asarray(layer(X, attention_mask=shared)), np.asarray(full), atol=1e-6
        )


@pytest.mark.parametrize("kind", KINDS)
def test_self_attention_input_errors(kind):
    layer = kinds.self_attention(kind)
    with pytest.raises(
        ValueError, match=r"expected ndim=3, found ndim=2\. Full shape received: \(5, 8\)"
    ):
        layer(X[0])  # Keras's InputSpec
    for bad in (X[:0], X[:, :0]):
        with pytest.raises(
            ValueError,
            match=rf"`inputs.shape` must be non-empty, .*Received: inputs.shape={re.escape(str(bad.shape))}\.",
        ):
            layer(bad)
    layer(X)  # Keras's InputSpec then refuses another width
    with pytest.raises(
        ValueError, match=r"expected axis -1 of input shape to have value 8.*\(2, 5, 6\)"
    ):
        layer(X[..., :6])


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    "index",
    [6, np.int64(6), keras.ops.convert_to_tensor(6, "int32")],
    ids=["int", "numpy", "backend_tensor"],
)
def test_cache_index_outside_the_cache(kind, index):
    layer = kinds.self_attention(kind)
    cache = layer.init_cache(2, 6)
    position = int(index)
    with pytest.raises(
        ValueError,
        match=rf"`cache_index` \+ input length must fit in the cache.*Received: "
        rf"cache_index={position}, input length 1, cache length 6\.",
    ):
        layer(X[:, :1], cache=cache, cache_index=index, use_causal_mask=True)


@pytest.mark.parametrize("kind", KINDS)
def test_cache_errors(kind):
    layer = kinds.self_attention(kind)
    cache = layer.init_cache(2, 6)
    step = {"use_causal_mask": True}
    for index, received in (
        (1.5, r"1\.5 \(float\)"),
        (np.array([1]), r"dtype int(64|32), shape \(1,\)"),
        (keras.ops.convert_to_tensor(1.0), r"dtype float32"),
        (True, r"True \(bool\)"),
    ):
        with pytest.raises(
            ValueError, match=rf"`cache_index` must be an integer scalar.*{received}"
        ):
            layer(X[:, :1], cache=cache, cache_index=index, **step)
    # Global layers lay a cache out (B, H, K + V, L), local ones (B, L, H, K + V).
    expected = r"\(2, (2, 8, max_length|max_length, 2, 8)\) as returned by `init_cache\(batch_size=2, max_length\)`"
    with pytest.raises(
        ValueError, match=rf"`cache.shape` must be {expected}.*Received: cache\.shape=\(3, "
    ):
        layer(X[:, :1], cache=layer.init_cache(3, 6), cache_index=0, **step)
    with pytest.raises(ValueError, match=rf"`cache.shape` must be {expected}"):
        layer(X[:, :1], cache=np.zeros((2, 6, 2, 5), "float32"), cache_index=0, **step)
    with pytest.raises(
        ValueError,
        match=r"`cache_index` must be >= 0\. Received: cache_index=-1\.",
    ):
        layer(X[:, :1], cache=cache, cache_index=-1, **step)
    for dtype in ("int32", "bool"):
        with pytest.raises(
            ValueError,
            match=rf"`cache.dtype` must be floating-point, as returned by `init_cache.*Received: cache\.dtype='{dtype}'",
        ):
            layer(X[:, :1], cache=keras.ops.cast(cache, dtype), cache_index=0, **step)
    with pytest.raises(ValueError, match=r"`cache.shape` must be .*Received: cache\.shape='list'"):
        layer(X[:, :1], cache=[[0.0]], cache_index=0, **step)
    for args, received in (
        ((0, 6), "batch_size=0"),
        ((2, -2), "max_length=-2"),
        ((2, 3.5), "max_length=3.5"),
        ((None, 6), "batch_size=None"),
        ((2, True), "max_length=True"),
    ):
        with pytest.raises(
            ValueError,
            match=rf"must be a positive int \(or int scalar tensor\)\. Received: {received}",
        ):
            layer.init_cache(*args)
    with pytest.raises(
        ValueError,
        match=r"`dtype` must be the layer's compute dtype float32\. Received: dtype='float16'\.$",
    ):
        layer.init_cache(2, 6, dtype="float16")
    for index in (0, 3):
        with pytest.raises(
            ValueError,
            match=rf"`cache_index` must be None without a cache\. Received: cache_index={index}\.",
        ):
            layer(X, cache_index=index, **step)


def test_2d_local_attention_errors():
    layer = LocalBlockAttention(2, 4, block_size=(2, 2), memory_flange=(1, 1))
    image = np.ones((2, 3, 4, 8), "float32")
    with pytest.raises(
        ValueError,
        match=r"expected ndim=4, found ndim=3\. Full shape received: \(2, 5, 8\)",
    ):
        layer(X)
    with pytest.raises(ValueError, match=r"non-empty.*Received: inputs.shape=\(2, 0, 4, 8\)"):
        layer(image[:, :0])
    with pytest.raises(
        ValueError,
        match=r"`padding_mask` must have shape \(2, 3, 4\) .*Received: padding_mask\.shape=\(2, 4, 3\)",
    ):
        layer(image, padding_mask=np.ones((2, 4, 3), bool))
    with pytest.raises(
        ValueError,
        match=r"`attention_mask` must have shape .*attention_mask\.shape=\(2, 3, 12, 12\)",
    ):
        layer(image, attention_mask=np.ones((2, 3, 12, 12), bool))


def test_cross_attention_errors():
    layer = MultiHeadAttention(num_heads=2, key_dim=4)
    query, value = X[:, :4], np.ones((2, 7, 6), "float32")
    with pytest.raises(
        ValueError,
        match=r"`query\.shape` must be \(batch, length, features\), non-empty.*Received: query\.shape=\(4, 8\)",
    ):
        layer(query[0], value)
    with pytest.raises(
        ValueError, match=r"`value\.shape` must be.*Received: value\.shape=\(2, 1, 7, 6\)"
    ):
        layer(query, value[:, None])
    with pytest.raises(
        ValueError, match=r"`value\.shape` must be .*non-empty.*Received: value\.shape=\(2, 0, 6\)"
    ):
        layer(query, value[:, :0])
    with pytest.raises(
        ValueError,
        match=r"one length for key and value\. Received shapes .*'value': \(2, 7, 6\), 'key': \(2, 3, 6\)",
    ):
        layer(query, value, key=value[:, :3])
    with pytest.raises(
        ValueError,
        match=r"one batch size for query and value and key.*'query': \(2, 4, 8\), 'value': \(1, 7, 6\)",
    ):
        layer(query, value[:1])
    layer(query, value)
    with pytest.raises(
        ValueError, match=r"one batch size for query and cache.*'cache': \(1, 2, 8, 7\)"
    ):
        layer(query, cache=layer.compute_cache(value[:1]))
    with pytest.raises(
        ValueError,
        match=r"`cache.dtype` must be floating-point, as returned by `compute_cache`\. Received: cache\.dtype='int32'",
    ):
        layer(query, cache=keras.ops.cast(layer.compute_cache(value), "int32"))
    with pytest.raises(
        ValueError,
        match=r"`attention_mask` must have shape \(2 or 1, 4, 7\).*Received: attention_mask\.shape=\(3, 4, 7\)",
    ):
        layer(query, value, attention_mask=np.ones((3, 4, 7), bool))
    with pytest.raises(
        ValueError,
        match=r"\(2 or 1, 2 or 1, 4, 7\).*Received: attention_mask\.shape=\(2, 3, 4, 7\)",
    ):
        layer(query, value, attention_mask=np.ones((2, 3, 4, 7), bool))
    with pytest.raises(ValueError, match=r"`value_padding_mask` must be boolean.*dtype float"):
        layer(query, value, value_padding_mask=np.ones((2, 7)))


@pytest.mark.parametrize("kind", KINDS)
def test_block_errors(kind):
    with pytest.raises(
        ValueError,
        match=r"model width 8 is not divisible by num_heads=3\. Pass `key_dim`",
    ):
        TransformerEncoder(intermediate_dim=8, num_heads=3)(X)
    with pytest.raises(ValueError, match=r"model width 8 is not divisible by num_heads=3"):
        TransformerDecoder(intermediate_dim=8, num_heads=3)(X, X)
    wide = kinds.self_attention(kind, output_dim=6)
    with pytest.raises(
        ValueError,
        match=r"widths must agree\. Received output_dim=6, inputs.shape=\(2, 5, 8\)\. Use output_dim=None",
    ):
        TransformerEncoder(intermediate_dim=8, self_attention=wide)(X)
    encoder = kinds.encoder(kind)
    with pytest.raises(
        ValueError, match=r"expected ndim=3, found ndim=2\. Full shape received: \(5, 8\)"
    ):
        encoder(X[0])
    with pytest.raises(ValueError, match=r"`padding_mask` must be boolean.*float32"):
        encoder(X, padding_mask=np.ones((2, 5), "float32"))
    with pytest.raises(ValueError, match=r"non-empty.*Received: inputs.shape=\(0, 5, 8\)"):
        encoder(X[:0])
    decoder = kinds.decoder(kind)
    memory = np.ones((2, 7, 6), "float32")
    with pytest.raises(
        ValueError,
        match=r"`encoder_padding_mask` must have shape \(2, 7\) .*Received: encoder_padding_mask\.shape=\(2, 6\)",
    ):
        decoder(X, memory, encoder_padding_mask=np.ones((2, 6), bool))
    with pytest.raises(ValueError, match=r"`decoder_padding_mask` must be boolean.*float32"):
        decoder(X, memory, decoder_padding_mask=np.ones((2, 5), "float32"))
    with pytest.raises(ValueError, match=r"one batch size for query and value"):
        decoder(X, memory[:1])
    cache = decoder.init_cache(2, 4)
    with pytest.raises(ValueError, match=r"cache_index=4, input length 1, cache length 4"):
        decoder(X[:, :1], memory, self_attention_cache=cache, cache_index=4)
    with pytest.raises(ValueError, match=r"`cache_index` must be an integer scalar"):
        decoder(X[:, :1], memory, self_attention_cache=cache, cache_index=0.0)
    with pytest.raises(
        ValueError,
        match=r"`cache_index` must be None without a `self_attention_cache`\. Received: cache_index=2\.",
    ):
        decoder(X, memory, cache_index=2)
