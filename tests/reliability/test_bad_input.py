"""Issue 6: bad input gets a clear ValueError (what was received, what was
expected, how to fix it) from every attention layer and block — never a
deep backend error, an assert, or a silent wrong answer.

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
    MultiHeadSelfAttention,
    RelativeGlobalAttention,
    TokenAndPositionEmbedding,
    TransformerDecoder,
    TransformerEncoder,
)
from keras_attn.models import translation_transformer
from keras_attn.models.image_transformer import PixelEmbedding
from tests import attention_kinds as kinds

KINDS = kinds.SELF_ATTENTION_KINDS
X = np.random.default_rng(5).standard_normal((2, 5, 8)).astype("float32")
ONES = np.ones((2, 5), bool)

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


@pytest.mark.parametrize(
    "make, message",
    [
        (
            lambda: MultiHeadSelfAttention(num_heads=2, key_dim=0),
            r"key_dim` must be a positive integer\. Received: key_dim=0",
        ),
        (lambda: MultiHeadSelfAttention(num_heads=2, key_dim=2.5), r"Received: key_dim=2\.5"),
        (lambda: MultiHeadAttention(num_heads=2, key_dim=-4), r"Received: key_dim=-4"),
        (
            lambda: LocalBlockAttention(2, 4, block_size=0),
            r"`block_size` must be an int \(1D\) or a pair of ints \(2D\), each >= 1\. Received: block_size=0\.",
        ),
        (
            lambda: LocalBlockAttention(2, 4, block_size=(0, 3)),
            r"`block_size` must be .*each >= 1\. Received: block_size=\(0, 3\)",
        ),
        (
            lambda: LocalBlockAttention(2, 4, block_size=4, memory_flange=-1),
            r"`memory_flange` must be .*each >= 0\. Received: memory_flange=-1",
        ),
        (
            lambda: RelativeGlobalAttention(2, 4, max_relative_position=0),
            r"`max_relative_position` must be a positive integer\. Received: max_relative_position=0",
        ),
        (
            lambda: RelativeGlobalAttention(2, 4, max_relative_position=3, value_dim=0),
            r"value_dim` must be a positive integer",
        ),
        (
            lambda: MultiHeadSelfAttention(num_heads=2, key_dim=4, dropout=-0.1),
            r"`dropout` must be a number in \[0, 1\)",
        ),
        # Flags and seeds: refused when the layer is made, not read as truthy
        # ("False" would switch a part on) or refused at the first training call.
        (
            lambda: MultiHeadSelfAttention(2, 4, use_bias="False"),
            r"^MultiHeadSelfAttention: `use_bias` must be True or False \(True = the projections have biases\)\. Received: use_bias='False'\.$",
        ),
        (
            lambda: RelativeGlobalAttention(2, 4, 3, heads_share_relative_embedding=np.True_),
            r"Received: heads_share_relative_embedding=np\.True_\. Pass `heads_share_relative_embedding=bool\(heads_share_relative_embedding\)`\.$",
        ),
        (
            lambda: MultiHeadAttention(2, 4, dropout=0.1, seed=1.5),
            r"^MultiHeadAttention: `seed` must be None or an int \(the dropout seed\)\. Received: seed=1\.5\.$",
        ),
        (
            lambda: TransformerEncoder(8, num_heads=2, seed="x"),
            r"^TransformerEncoder: `seed` must be None or an int .*Received: seed='x'\.$",
        ),
        (
            lambda: TransformerDecoder(8, num_heads=2, seed=np.int64(3)),
            r"Received: seed=np\.int64\(3\)\. Pass a Python int: `seed=int\(seed\)`\.$",
        ),
        (
            lambda: TokenAndPositionEmbedding(10, 8, 6, mask_zero="False"),
            r"^TokenAndPositionEmbedding: `mask_zero` must be True or False \(True = id 0 is padding\)\. Received: mask_zero='False'\.$",
        ),
        (
            lambda: TokenAndPositionEmbedding(10, 8, 6, scale_token_embeddings=1),
            r"`scale_token_embeddings` must be True or False .*Received: scale_token_embeddings=1\.$",
        ),
        (
            lambda: TokenAndPositionEmbedding(10, 8, "x", position="sinusoidal"),
            r"`sequence_length` must be a positive integer\. Received: sequence_length='x'\.$",
        ),
        (
            lambda: PixelEmbedding(257, 8, image_size=2, scale_token_embeddings=None),
            r"^PixelEmbedding: `scale_token_embeddings` must be True or False .*Received: scale_token_embeddings=None\.$",
        ),
    ],
)
def test_constructor_errors(make, message):
    with pytest.raises(ValueError, match=message):
        make()


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


# ------------------------------------------- learned position tables
@pytest.mark.requires_tensorflow
def test_sequence_longer_than_a_learned_position_table():
    import tensorflow as tf

    layer = TokenAndPositionEmbedding(11, 8, sequence_length=4)
    ids = np.ones((1, 6), "int32")
    fix = r"raise `sequence_length`"
    with pytest.raises(
        ValueError,
        match=rf"Positions \(from `start_index`\) must be >= 0 and fit the learned "
        rf"position table of 4 rows: {fix}.* Received: positions 0\.\.5\.",
    ):
        layer(ids)
    # A static length inside a compiled graph fails when traced.
    with pytest.raises(ValueError, match=r"Received: positions 0\.\.5\."):
        tf.function(layer, jit_compile=True)(ids)
    with pytest.raises(
        ValueError, match=r"learned position table of 4 rows.* Received: positions -1\.\.0\."
    ):
        layer(ids[:, :2], start_index=-1)
    with pytest.raises(ValueError, match=r"`start_index` must be an integer scalar.*2\.0"):
        layer(ids[:, :2], start_index=2.0)
    # A length known only at run time (a `None` dimension) is the caller's
    # to check (generation, exported signatures): positions past the table
    # are clamped to its last row, never gathered out of range.
    signature = [tf.TensorSpec((None, None), tf.int32)]
    tokens = np.asarray(layer.token_embedding.embeddings)[1]
    positions = np.asarray(layer.position_embedding.embeddings)
    want = tokens + positions[[0, 1, 2, 3, 3, 3]]
    for jit_compile in (False, True):
        run = tf.function(layer, jit_compile=jit_compile, input_signature=signature)
        np.testing.assert_allclose(np.asarray(run(ids))[0], want, atol=1e-6)
    # And through a model builder with learned positions.
    model = translation_transformer(
        11,
        num_layers=1,
        hidden_dim=8,
        num_heads=2,
        intermediate_dim=8,
        position="learned",
        max_length=4,
    )
    with pytest.raises(ValueError, match=r"Received: positions 0\.\.5\."):
        model({"encoder_tokens": ids, "decoder_tokens": ids[:, :3]})


@pytest.mark.requires_tensorflow
def test_image_longer_than_the_pixel_positions():
    import tensorflow as tf

    layer = PixelEmbedding(5, 8, image_size=(2, 2), channels=1, position="learned")
    with pytest.raises(
        ValueError, match=r"must be >= 0 and fit the 5 positions.* Received: positions 0\.\.5\."
    ):
        layer(np.ones((1, 6), "int32"))
    signature = [tf.TensorSpec((None, None), tf.int32)]  # traced: the caller's to check
    for jit_compile in (False, True):
        run = tf.function(layer, jit_compile=jit_compile, input_signature=signature)
        assert np.isfinite(np.asarray(run(np.ones((1, 9), "int32")))).all()


# ------------------------------------------- ids outside an embedding's table
ID_CASES = {
    "token_id_past_the_table": (
        lambda: TokenAndPositionEmbedding(20, 8, 6, name="tokens"),
        np.array([[3, 20]]),
        r"TokenAndPositionEmbedding tokens: token ids must lie in \[0, 20\), the rows of its table\. "
        r"Map unknown tokens to known ids\. Received: token ids from",
        ("3", "20"),
    ),
    "negative_token_id": (
        lambda: TokenAndPositionEmbedding(20, 8, position="sinusoidal", name="tokens"),
        np.array([[-1, 3]]),
        r"token ids must lie in \[0, 20\).*Received: token ids from",
        ("-1", "3"),
    ),
    "intensity_past_the_table": (
        # Before the check, 257 in channel 1 read as row 514 of the joint
        # table: channel 2's intensity 0.
        lambda: PixelEmbedding(257, 8, image_size=2, name="pixels"),
        np.array([[0, 257]]),
        r"PixelEmbedding pixels: intensity ids must lie in \[0, 257\), the rows of its table\. "
        r"Pass intensities.*Received: intensity ids from",
        ("0", "257"),
    ),
}


@pytest.mark.parametrize("case", sorted(ID_CASES))
def test_ids_outside_an_embedding_table(case):
    from tests.test_case import traced

    make, ids, message, (lowest, highest) = ID_CASES[case]
    layer = make()
    with pytest.raises(ValueError, match=rf"{message} {lowest} to {highest}\."):
        layer(ids)
    # Traced ids are checked where they enter (generation, exported
    # signatures): a traced call is the plain lookup.
    good = np.zeros_like(ids)
    run = traced(lambda x: layer(x))
    np.testing.assert_allclose(np.asarray(run(good)), np.asarray(layer(good)), atol=1e-6)


def test_models_refuse_ids_outside_their_tables():
    # On JAX these gave NaN logits without a word; on TensorFlow a gather
    # error about an index of the layer's own making.
    from keras_attn.models import image_transformer, music_transformer, super_resolution_transformer

    tiny = dict(num_layers=1, hidden_dim=8, num_heads=2, intermediate_dim=8)
    music = music_transformer(20, max_relative_position=4, **tiny)
    with pytest.raises(
        ValueError,
        match=r"TokenEmbedding token_embedding: token ids must lie in \[0, 20\).*from 25 to 25\.",
    ):
        music(np.full((2, 6), 25, "int32"))
    images = image_transformer(image_size=2, channels=1, num_classes=5, **tiny)
    with pytest.raises(
        ValueError,
        match=r"TokenEmbedding class_embedding: token ids must lie in \[0, 5\).*from 0 to 7\.",
    ):
        images({"decoder_tokens": np.zeros((2, 4), "int32"), "class_label": np.array([0, 7])})
    translation = translation_transformer(20, **tiny)
    with pytest.raises(
        ValueError, match=r"encoder_embedding: token ids must lie in \[0, 20\).*from -1 to 3\."
    ):
        translation({"encoder_tokens": np.array([[3, -1]]), "decoder_tokens": np.array([[1, 2]])})
    sr = super_resolution_transformer(
        low_resolution_size=2,
        image_size=4,
        num_encoder_layers=1,
        hidden_dim=8,
        num_heads=2,
        intermediate_dim=8,
        num_layers=1,
        position="learned",
        align_positions=False,
    )
    tokens = np.zeros((1, 48), "int32")
    low = np.full((1, 12), 7, "int32")
    sr({"decoder_tokens": tokens, "low_resolution": low})
    with pytest.raises(
        ValueError,
        match=r"encoder_embedding: intensity ids must lie in \[0, 256\).*from 7 to 300\.",
    ):
        sr({"decoder_tokens": tokens, "low_resolution": np.concatenate([low[:, :11], [[300]]], 1)})
    with pytest.raises(
        ValueError,
        match=r"decoder_embedding: intensity ids must lie in \[0, 257\).*from 0 to 999\.",
    ):
        sr({"decoder_tokens": np.concatenate([tokens[:, :47], [[999]]], 1), "low_resolution": low})


@pytest.mark.parametrize("which", ["embedding", "logit_bias"])
def test_low_resolution_images_must_match_the_rows_they_condition(which):
    # Three images for two sequences failed in the model's Add
    # ("Incompatible shapes: [2,17,16] vs. [3,17,16]"); a layer alone
    # broadcast nothing and failed in a gather.
    from keras_attn.models.image_transformer import LowResolutionEmbedding, LowResolutionLogitBias
    from tests.test_case import traced

    sizes = dict(image_size=4, low_resolution_size=2, channels=1, name="low")
    if which == "embedding":
        layer = LowResolutionEmbedding(8, **sizes)
        first, name = np.zeros((2, 16), "int32"), "inputs"
    else:
        layer = LowResolutionLogitBias(**sizes)
        first, name = np.zeros((2, 16, 256), "float32"), "logits"
    low = np.full((3, 4), 7, "int32")
    message = (
        f"`low_resolution.shape` must be (2, 4): one 2x2x1 image in raster order per row of `{name}`. "
        "Received: low_resolution.shape=(3, 4)."
    )
    with pytest.raises(ValueError, match=re.escape(message)):
        layer(first, low)
    np.testing.assert_allclose(
        np.asarray(layer(first, low[:2])).shape,
        first.shape[:2] + (8 if which == "embedding" else 256,),
    )
    with pytest.raises(ValueError, match=re.escape(message)):  # static shapes: when traced
        traced(lambda x, y: layer(x, y))(first, low)
