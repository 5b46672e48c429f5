"""Issue 6: ids and positions outside an embedding's table get a clear
ValueError where they enter, from the embedding layers and from the models
built on them: a sequence longer than a learned position table (or an image
than its pixel positions), token, class and intensity ids outside their
table, and low-resolution images whose rows do not match the rows they
condition. Traced values are the caller's to check (generation, exported
signatures): a traced call is the plain lookup, positions clamped.
"""

import re

import numpy as np
import pytest

from keras_attn.layers import TokenAndPositionEmbedding
from keras_attn.models import translation_transformer
from keras_attn.models.image_transformer import PixelEmbedding


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
