import keras
import numpy as np
import pytest

from keras_attn.layers import (
    LocalBlockAttention,
    MultiHeadSelfAttention,
    TransformerDecoder,
    TransformerEncoder,
)
from tests import attention_kinds as kinds
from tests import references
from tests.test_case import run_layer_test

RNG = np.random.default_rng(3)


def _seq(batch, length, dim=16):
    return RNG.standard_normal((batch, length, dim)).astype("float32")


def test_decoder_only_lifecycle():
    run_layer_test(
        TransformerDecoder,
        {"intermediate_dim": 32, "num_heads": 2, "dropout": 0.1, "seed": 4},
        _seq(2, 5),
        expected_output_shape=(2, 5, 16),
    )


def _encoder_decoder(normalize_first=False, self_attention=None):
    source = keras.Input((None, 16), name="source")
    target = keras.Input((None, 16), name="target")
    memory = TransformerEncoder(intermediate_dim=32, num_heads=2, name="encoder")(source)
    decoder = TransformerDecoder(
        intermediate_dim=32,
        num_heads=2,
        normalize_first=normalize_first,
        self_attention=self_attention,
        name="decoder",
    )
    out = decoder(target, memory)
    return keras.Model([source, target], out), decoder


@pytest.mark.parametrize("normalize_first", [False, True])
def test_cached_decoding_equals_full_pass_with_cross_attention(normalize_first):
    model, decoder = _encoder_decoder(normalize_first)
    source, target = _seq(2, 7), _seq(2, 5)
    source_padding = np.array([[1] * 7, [1] * 3 + [0] * 4], bool)
    memory = model.get_layer("encoder")(source, padding_mask=source_padding)
    full = np.asarray(decoder(target, memory, encoder_padding_mask=source_padding))
    cache = decoder.init_cache(2, 5)
    cross = None
    steps = []
    for i in range(5):
        y, cache, cross = decoder(
            target[:, i : i + 1],
            memory if cross is None else None,
            encoder_padding_mask=source_padding,
            self_attention_cache=cache,
            cache_index=i,
            cross_attention_cache=cross,
        )
        steps.append(np.asarray(y))
    np.testing.assert_allclose(np.concatenate(steps, 1), full, atol=1e-5)


def test_decoder_only_cached_equals_full_pass():
    decoder = TransformerDecoder(intermediate_dim=32, num_heads=4)
    x = _seq(2, 6)
    full = np.asarray(decoder(x))
    cache = decoder.init_cache(2, 8)
    y1, cache = decoder(x[:, :2], self_attention_cache=cache, cache_index=0)  # prefill
    outs = [np.asarray(y1)]
    for i in range(2, 6):
        y, cache = decoder(x[:, i : i + 1], self_attention_cache=cache, cache_index=i)
        outs.append(np.asarray(y))
    np.testing.assert_allclose(np.concatenate(outs, 1), full, atol=1e-5)


def test_different_lengths_and_padding_in_one_batch_equal_each_example_alone():
    # Source length 7 and target length 4, padded differently per example.
    model, decoder = _encoder_decoder()
    encoder = model.get_layer("encoder")
    source, target = _seq(2, 7), _seq(2, 4)
    source_padding = np.array([[1] * 7, [1] * 5 + [0] * 2], bool)
    target_padding = np.array([[1, 1, 0, 0], [1] * 4], bool)
    memory = encoder(source, padding_mask=source_padding)
    batch = np.asarray(
        decoder(
            target, memory, decoder_padding_mask=target_padding, encoder_padding_mask=source_padding
        )
    )
    for b in range(2):
        s, t = int(source_padding[b].sum()), int(target_padding[b].sum())
        alone_memory = encoder(source[b : b + 1, :s])
        alone = np.asarray(decoder(target[b : b + 1, :t], alone_memory))
        np.testing.assert_allclose(batch[b : b + 1, :t], alone, atol=1e-5)


def test_no_future_leak_with_dropout():
    decoder = TransformerDecoder(intermediate_dim=32, num_heads=2, dropout=0.2, seed=11)
    twin = TransformerDecoder(intermediate_dim=32, num_heads=2, dropout=0.2, seed=11)
    x1 = _seq(2, 6)
    x2 = x1.copy()
    x2[:, 3:] += 1.0
    decoder.build(x1.shape), twin.build(x1.shape)
    twin.set_weights(decoder.get_weights())
    y1 = np.asarray(decoder(x1, training=True))
    y2 = np.asarray(twin(x2, training=True))
    np.testing.assert_allclose(y1[:, :3], y2[:, :3], atol=1e-6)
    assert not np.allclose(y1[:, 3:], y2[:, 3:])


def test_encoder_decoder_lifecycle_with_a_nested_self_attention_layer():
    model = run_layer_test(
        TransformerDecoder,
        {
            "intermediate_dim": 32,
            "dropout": 0.1,
            "seed": 4,
            "self_attention": MultiHeadSelfAttention(num_heads=2, key_dim=5, dropout=0.1, seed=5),
        },
        {"decoder_sequence": _seq(2, 4), "encoder_sequence": _seq(2, 7)},
        expected_output_shape=(2, 4, 16),
        # Self-attention 4 (fused query/key/value and output, kernel + bias),
        # cross-attention 8, three layer norms 6, feed-forward 4.
        expected_num_trainable_weights=22,
        # Self- and cross-attention probabilities, three residual dropouts.
        expected_num_seed_generators=5,
    )
    decoder = next(x for x in model.layers if isinstance(x, TransformerDecoder))
    assert decoder.get_config()["self_attention"]["config"]["key_dim"] == 5


def test_errors():
    decoder_only = TransformerDecoder(intermediate_dim=8, num_heads=2)
    decoder_only(_seq(1, 3))
    with pytest.raises(
        ValueError, match="was built without cross-attention: pass no `encoder_sequence`"
    ):
        decoder_only(_seq(1, 3), _seq(1, 4))
    with_cross = TransformerDecoder(intermediate_dim=8, num_heads=2)
    with_cross(_seq(1, 3), _seq(1, 4))
    with pytest.raises(
        ValueError,
        match="was built with cross-attention: pass an `encoder_sequence`",
    ):
        with_cross(_seq(1, 3))
    with pytest.raises(ValueError, match="cache_index=3, input length 2, cache length 4"):
        with_cross(
            _seq(1, 2), _seq(1, 4), self_attention_cache=with_cross.init_cache(1, 4), cache_index=3
        )
    with pytest.raises(
        ValueError, match=r"encoder_padding_mask` must have shape \(1, 4\).*shape=\(1, 3\)"
    ):
        with_cross(_seq(1, 3), _seq(1, 4), encoder_padding_mask=np.ones((1, 3), bool))


def test_attention_scores_of_both_attentions():
    source = keras.Input((7,), dtype="int32")
    target = keras.Input((4,), dtype="int32")
    memory = keras.layers.Embedding(20, 16, mask_zero=True)(source)
    queries = keras.layers.Embedding(20, 16, mask_zero=True)(target)
    out, scores = TransformerDecoder(intermediate_dim=32, num_heads=2)(
        queries, memory, return_attention_scores=True
    )
    assert tuple(scores["cross_attention"].shape) == (None, 2, 4, 7)
    assert tuple(scores["self_attention"].shape) == (None, 2, 4, 4)
    model = keras.Model(
        [source, target], [out, scores["cross_attention"], scores["self_attention"]]
    )
    _, cross, self_scores = (
        np.asarray(t) for t in model([np.array([[1, 2, 3, 0, 0, 0, 0]]), np.array([[1, 2, 3, 4]])])
    )
    assert (cross[..., 3:] == 0).all()
    np.testing.assert_allclose(cross.sum(-1), 1.0, atol=1e-5)
    assert (self_scores[0, :, np.triu_indices(4, 1)[0], np.triu_indices(4, 1)[1]] == 0).all()


# Issue 12, case 1: a 2D LocalBlockAttention decodes images (B, height, width,
# D) with image-shaped padding masks, as the encoder does, and cross-attends
# from the image's pixels (raster order) to a flat encoder sequence.
IMAGE_PADDING = np.ones((2, 4, 6), bool)
IMAGE_PADDING[0, 3, 2:] = False  # the last pixels of example 0
IMAGE_PADDING[1, :, 5] = False  # the last column of example 1
SOURCE_PADDING = np.array([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0]], bool)


def _image_decoder():
    return TransformerDecoder(
        intermediate_dim=16,
        self_attention=LocalBlockAttention(2, 4, block_size=(2, 2), memory_flange=(1, 1)),
    )


def _image_decoder_reference(decoder, image, source):
    """Reference outputs (B, height, width, D): the block over the pixels
    flattened in raster order, with the 2D block-raster causal window."""
    batch, height, width, dim = image.shape
    heads = decoder._self_attention_layer.num_heads
    window = references.local_block_mask((height, width), (2, 2), (1, 1), causal=True)
    self_mask = IMAGE_PADDING.reshape(batch, 1, 1, -1) & window[None, None]
    self_mask = np.broadcast_to(self_mask, (batch, heads) + window.shape)
    cross_mask = np.broadcast_to(
        SOURCE_PADDING[:, None, None, :], (batch, heads, height * width, source.shape[1])
    )
    flat = kinds.decoder_block(
        decoder, image.reshape(batch, -1, dim), self_mask, source, cross_mask
    )
    return flat.reshape(image.shape)


def test_image_decoder_with_2d_local_attention_matches_reference():
    decoder = _image_decoder()
    image, source = RNG.standard_normal((2, 4, 6, 8)), RNG.standard_normal((2, 5, 8))
    image, source = image.astype("float32"), source.astype("float32")
    outputs, scores = decoder(
        image,
        source,
        decoder_padding_mask=IMAGE_PADDING,
        encoder_padding_mask=SOURCE_PADDING,
        return_attention_scores=True,
    )
    np.testing.assert_allclose(outputs, _image_decoder_reference(decoder, image, source), atol=1e-5)
    # Scores over the pixels in raster order; no weight on padding.
    self_scores = np.asarray(scores["self_attention"])
    cross_scores = np.asarray(scores["cross_attention"])
    assert self_scores.shape == (2, 2, 24, 24) and cross_scores.shape == (2, 2, 24, 5)
    padding = np.broadcast_to(IMAGE_PADDING.reshape(2, 1, 1, 24), self_scores.shape)
    assert (self_scores[~padding] == 0).all()
    assert (cross_scores[1, ..., 2:] == 0).all()
    np.testing.assert_allclose(cross_scores.sum(-1), 1.0, atol=1e-5)


def test_image_decoder_reads_the_implicit_image_mask():
    # keras.layers.Masking gives the image an implicit (B, height, width)
    # mask (pixels that are all zeros are padding): in a functional model the
    # block uses it, and equals the block given the mask explicitly.
    image, source = RNG.standard_normal((2, 4, 6, 8)), RNG.standard_normal((2, 5, 8))
    image = np.where(IMAGE_PADDING[..., None], image, 0.0).astype("float32")
    source = source.astype("float32")
    decoder = _image_decoder()
    image_in, source_in = keras.Input((4, 6, 8)), keras.Input((5, 8))
    outputs, scores = decoder(
        keras.layers.Masking()(image_in), source_in, return_attention_scores=True
    )
    assert tuple(outputs.shape) == (None, 4, 6, 8)
    assert tuple(scores["self_attention"].shape) == (None, 2, 24, 24)
    assert tuple(scores["cross_attention"].shape) == (None, 2, 24, 5)
    model = keras.Model([image_in, source_in], outputs)
    explicit = decoder(image, source, decoder_padding_mask=IMAGE_PADDING)
    np.testing.assert_allclose(model([image, source]), explicit, atol=1e-5)
    unmasked = decoder(image, source)
    assert not np.allclose(explicit, unmasked, atol=1e-3)


def test_image_decoder_mask_errors():
    decoder = _image_decoder()
    image = RNG.standard_normal((2, 4, 6, 8)).astype("float32")
    with pytest.raises(ValueError, match=r"`decoder_padding_mask` must have shape \(2, 4, 6\)"):
        decoder(image, decoder_padding_mask=IMAGE_PADDING[:, :, 0])
    with pytest.raises(
        ValueError,
        match=r"`decoder_padding_mask` must have shape \(2, 4, 6\).*Received: decoder_padding_mask.shape=\(2, 6, 4\)",
    ):
        decoder(image, decoder_padding_mask=np.ones((2, 6, 4), bool))


def test_image_decoder_lifecycle():
    run_layer_test(
        TransformerDecoder,
        {
            "intermediate_dim": 16,
            "self_attention": LocalBlockAttention(2, 4, block_size=(2, 2), memory_flange=(1, 1)),
        },
        RNG.standard_normal((2, 4, 6, 8)).astype("float32"),
        expected_output_shape=(2, 4, 6, 8),
    )


def test_num_heads_with_a_self_attention_layer_sizes_the_cross_attention():
    # Unlike the encoder's, a decoder's num_heads and key_dim are not
    # ignored next to a self_attention layer: they size the cross-attention.
    decoder = TransformerDecoder(
        16, num_heads=4, key_dim=2, self_attention=MultiHeadSelfAttention(2, 8)
    )
    decoder(_seq(1, 3), _seq(1, 4))
    assert decoder._self_attention_layer.num_heads == 2
    assert decoder._cross_attention_layer.num_heads == 4
    assert decoder._cross_attention_layer.key_dim == 2


def test_layer_norm_epsilon_and_normalize_first_are_checked():
    with pytest.raises(
        ValueError,
        match=r"TransformerDecoder: `layer_norm_epsilon` must be a finite number > 0 .*Received: layer_norm_epsilon=-1\.0",
    ):
        TransformerDecoder(16, num_heads=2, layer_norm_epsilon=-1.0)
    with pytest.raises(
        ValueError,
        match=r"TransformerDecoder: `normalize_first` must be True or False \(True = pre-norm.*Received: normalize_first='yes'",
    ):
        TransformerDecoder(16, num_heads=2, normalize_first="yes")


@pytest.mark.requires_tensorflow
def test_scores_export_as_flat_outputs_as_the_docstring_says(tmp_path):
    # A SavedModel signature refuses the scores dict nested in a list of
    # outputs (TensorFlow: "Got a non-Tensor value"); one flat dict of
    # outputs, the docstring's recipe, serves them all.
    import tensorflow as tf

    target, source = keras.Input((6, 16)), keras.Input((5, 16))
    outputs, scores = TransformerDecoder(32, num_heads=2)(
        target, source, return_attention_scores=True
    )
    model = keras.Model([target, source], {"outputs": outputs, **scores})
    model.export(str(tmp_path / "export"), verbose=False)
    served = tf.saved_model.load(str(tmp_path / "export"))
    x, memory = _seq(2, 6), _seq(2, 5)
    expected = model([x, memory])
    got = served.serve([x, memory])
    assert sorted(got) == ["cross_attention", "outputs", "self_attention"]
    for name in expected:
        np.testing.assert_allclose(got[name].numpy(), np.asarray(expected[name]), atol=1e-6)
    # The scores are the probabilities: causal rows over 6 keys, summing to 1.
    np.testing.assert_allclose(got["self_attention"].numpy().sum(-1), 1.0, atol=1e-5)
    assert (got["self_attention"].numpy()[..., 0, 1:] == 0).all()
