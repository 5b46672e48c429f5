"""2D `LocalBlockAttention` over block-raster sequences (`image_size`): the
full pass equals the image path and a NumPy band/block-mask reference, and
cached decoding in block-raster order equals the full pass."""

import keras
import numpy as np
import pytest

from keras_attn.generation import CachedDecoder
from keras_attn.layers import LocalBlockAttention, TokenAndPositionEmbedding, TransformerDecoder
from tests import references
from tests.test_case import decode_in_chunks, run_layer_test

RNG = np.random.default_rng(7)


def _inputs(shape, dim=8):
    return RNG.standard_normal(tuple(shape) + (dim,)).astype("float32")


def _block_raster_permutation(height, width, block):
    """`perm[i]` = raster index of block-raster position i."""
    bh, bw = block
    grid_width = width // bw
    order = np.zeros(height * width, int)
    for r in range(height):
        for c in range(width):
            order[r * width + c] = (
                ((r // bh) * grid_width + c // bw) * bh * bw + (r % bh) * bw + c % bw
            )
    return np.argsort(order)


def _layer(image_size, block, flange, **kwargs):
    kwargs.setdefault("num_heads", 2)
    kwargs.setdefault("key_dim", 4)
    return LocalBlockAttention(
        block_size=block, memory_flange=flange, image_size=image_size, **kwargs
    )


def _reference(layer, x, causal, padding=None, attention=None):
    """Dense masked attention over block-raster positions, in NumPy: the
    raster band/block mask of `references.local_block_mask`, permuted."""
    (height, width), block = layer.image_size, layer.block_size
    perm = _block_raster_permutation(height, width, block)
    length = x.shape[1]
    local = references.local_block_mask((height, width), block, layer.memory_flange, causal)
    local = local[perm][:, perm][:length, :length]
    mask = references.dense_mask(
        x.shape[0], length, length, padding, attention, num_heads=layer.num_heads
    )
    return references.multi_head_self_attention(layer, x, mask & local)


# (image_size, block, flange): flange 0, flange larger than a block, tall and
# wide blocks, one block row, one block column.
SHAPES = [
    ((4, 6), (2, 3), (1, 2)),
    ((4, 4), (2, 2), (0, 0)),
    ((6, 4), (2, 2), (3, 3)),
    ((2, 8), (2, 2), (1, 1)),
    ((6, 3), (3, 3), (2, 1)),
]


@pytest.mark.parametrize("image_size, block, flange", SHAPES[:3])
@pytest.mark.parametrize("causal", [True, False])
def test_full_pass_equals_image_path_in_block_raster_order(image_size, block, flange, causal):
    height, width = image_size
    perm = _block_raster_permutation(height, width, block)
    image_layer = LocalBlockAttention(2, 4, block_size=block, memory_flange=flange)
    layer = _layer(image_size, block, flange)
    image = _inputs((2, height, width))
    padding = RNG.random((2, height, width)) > 0.3
    image_layer.build(image.shape)
    layer.build((2, height * width, 8))
    layer.set_weights(image_layer.get_weights())
    expected, expected_scores = image_layer(
        image, padding_mask=padding, use_causal_mask=causal, return_attention_scores=True
    )
    got, scores = layer(
        image.reshape(2, height * width, 8)[:, perm],
        padding_mask=padding.reshape(2, -1)[:, perm],
        use_causal_mask=causal,
        return_attention_scores=True,
    )
    expected = np.asarray(expected).reshape(2, height * width, -1)[:, perm]
    expected_scores = np.asarray(expected_scores)[:, :, perm][..., perm]
    np.testing.assert_allclose(np.asarray(got), expected, atol=1e-5)
    np.testing.assert_allclose(np.asarray(scores), expected_scores, atol=1e-6)


@pytest.mark.parametrize(
    "image_size, block, flange, causal, length",
    [
        (*SHAPES[0], True, 24),
        (*SHAPES[2], True, 13),  # a prefix of the image
        (*SHAPES[3], False, 16),
        (*SHAPES[4], False, 18),
    ],
)
def test_full_pass_matches_dense_reference(image_size, block, flange, causal, length):
    layer = _layer(image_size, block, flange, value_dim=3)
    x = _inputs((2, length))
    padding = RNG.random((2, length)) > 0.2
    attention = RNG.random((2, 2, length, length)) > 0.2
    got, scores = layer(
        x,
        padding_mask=padding,
        attention_mask=attention,
        use_causal_mask=causal,
        return_attention_scores=True,
    )
    expected, probs = _reference(layer, x, causal, padding, attention)
    np.testing.assert_allclose(np.asarray(got), expected, atol=1e-5)
    np.testing.assert_allclose(np.asarray(scores), probs, atol=1e-6)


def _decode(layer, x, chunks, max_length, padding=None):
    return decode_in_chunks(
        layer, x, chunks, layer.init_cache(x.shape[0], max_length), padding_mask=padding
    )


@pytest.mark.parametrize(
    "image_size, block, flange, chunks",
    [
        (*SHAPES[0], "steps"),
        (*SHAPES[1], "steps"),
        (*SHAPES[2], "steps"),
        (*SHAPES[4], "steps"),
        (*SHAPES[2], "mixed"),
        (*SHAPES[3], "whole"),
    ],
)
def test_cached_decoding_equals_full_pass(image_size, block, flange, chunks):
    pixels = image_size[0] * image_size[1]
    chunks = {
        "steps": [1] * pixels,
        # Chunks inside a block, across block boundaries and over several blocks.
        "mixed": [3, 1, 2, 7, 1, pixels - 14],
        "whole": [pixels],
    }[chunks]
    layer = _layer(image_size, block, flange, value_dim=3)
    x = _inputs((2, pixels))
    padding = np.ones((2, pixels), bool)
    padding[0, [1, 5]] = False
    padding[1, pixels // 2 :] = False
    full, full_scores = layer(
        x, padding_mask=padding, use_causal_mask=True, return_attention_scores=True
    )
    got, scores = _decode(layer, x, chunks, pixels, padding)
    np.testing.assert_allclose(got, np.asarray(full), atol=1e-5)
    np.testing.assert_allclose(scores, np.asarray(full_scores), atol=1e-6)


@pytest.mark.parametrize(
    "image_size, block, flange",
    [
        ((6, 4), (2, 2), (1, 1)),
        ((8, 16), (2, 4), (3, 5)),  # flange no multiple of the block: runs overlap
    ],
)
def test_cached_step_reads_only_its_window(image_size, block, flange):
    # Cache slots outside the step's window rectangle (fh + bh rows by
    # bw + 2 fw columns around its block; slot 0 excepted, which stands in
    # for the window's slots outside the image) hold NaN: a step whose
    # output depended on them (a masked slot it read but did not zero, or
    # attention over the whole cache) would return NaN.
    (height, width), (bh, bw), (fh, fw) = image_size, block, flange
    pixels = height * width
    layer = _layer((height, width), (bh, bw), (fh, fw))
    x = _inputs((1, pixels))
    full = np.asarray(layer(x, use_causal_mask=True))
    perm = _block_raster_permutation(height, width, (bh, bw))
    rows, cols = perm // width, perm % width  # pixel of each block-raster position
    clean = np.array(layer.init_cache(1, pixels))
    for index in range(pixels):
        top, left = (rows[index] // bh) * bh - fh, (cols[index] // bw) * bw - fw
        window = (
            (rows >= top) & (rows < top + fh + bh) & (cols >= left) & (cols < left + bw + 2 * fw)
        )
        window[0] = True
        poisoned = clean.copy()
        poisoned[:, ~window] = np.nan
        y, cache = layer(
            x[:, index : index + 1], cache=poisoned, cache_index=index, use_causal_mask=True
        )
        np.testing.assert_allclose(np.asarray(y)[:, 0], full[:, index], atol=1e-5)
        clean[:, index] = np.asarray(cache)[:, index]


# Images several blocks wide and tall, so that a step's runs of the cache
# (one per block-row of its window) are shorter than the cache: a flange no
# multiple of the block (runs longer than a block-row: they overlap and
# wrap), runs of 3 blocks in block-rows of 4 (they wrap at the image's
# edges), and the flange equal to the block (the benchmark's geometry).
RUN_SHAPES = [
    ((8, 16), (2, 4), (3, 5)),
    ((8, 8), (2, 2), (1, 1)),
    ((9, 16), (3, 4), (3, 4)),
]


@pytest.mark.parametrize("image_size, block, flange", RUN_SHAPES)
@pytest.mark.parametrize("chunks", ["steps", "mixed"])
def test_cached_steps_over_runs_equal_full_pass(image_size, block, flange, chunks):
    # The image and one position past it, with padding and attention masks;
    # "mixed": chunks of at most one block, across blocks and block-rows.
    length = image_size[0] * image_size[1] + 1
    block_length = block[0] * block[1]
    sizes = [1] if chunks == "steps" else [1, block_length, 3, block_length - 1, 2]
    chunks = []
    while sum(chunks) < length:
        chunks.append(min(sizes[len(chunks) % len(sizes)], length - sum(chunks)))
    layer = _layer(image_size, block, flange, value_dim=3)
    x = _inputs((2, length))
    padding = RNG.random((2, length)) > 0.2
    attention = RNG.random((2, 2, length, length)) > 0.2
    full, full_scores = layer(
        x,
        padding_mask=padding,
        attention_mask=attention,
        use_causal_mask=True,
        return_attention_scores=True,
    )
    outputs, scores = decode_in_chunks(
        layer,
        x,
        chunks,
        layer.init_cache(2, length),
        attention_mask=attention,
        padding_mask=padding,
    )
    np.testing.assert_allclose(outputs, np.asarray(full), atol=1e-5)
    np.testing.assert_allclose(scores, np.asarray(full_scores), atol=1e-6)


def test_cached_step_gather_and_runs_agree():
    # The element gather (kept for caches of dynamic length) and the runs.
    layer = _layer((8, 16), (2, 4), (3, 5))
    x = _inputs((2, 129))
    cache = layer.init_cache(2, 129)
    _, cache = layer(x[:, :100], cache=cache, cache_index=0, use_causal_mask=True)
    gather = _layer((8, 16), (2, 4), (3, 5))
    gather._read_runs = False
    gather.build(x.shape)
    gather.set_weights(layer.get_weights())
    for index, size in [(100, 1), (101, 5), (127, 2)]:
        chunk = x[:, index : index + size]
        runs, _ = layer(chunk, cache=cache, cache_index=index, use_causal_mask=True)
        gathered, _ = gather(chunk, cache=cache, cache_index=index, use_causal_mask=True)
        np.testing.assert_allclose(np.asarray(runs), np.asarray(gathered), atol=1e-6)


def test_future_pixels_change_no_past_output():
    layer = _layer((4, 6), (2, 3), (1, 2))
    x1 = _inputs((2, 24))
    x2 = x1.copy()
    cut = 10
    x2[:, cut + 1 :] = _inputs((2, 24 - cut - 1))
    y1, y2 = (
        np.asarray(layer(x1, use_causal_mask=True)),
        np.asarray(layer(x2, use_causal_mask=True)),
    )
    np.testing.assert_allclose(y1[:, : cut + 1], y2[:, : cut + 1], atol=1e-6)
    assert not np.allclose(y1[:, cut + 1 :], y2[:, cut + 1 :])


def test_position_past_the_image_sees_nothing():
    # A start token shifts the image right by one: generation feeds
    # height * width + 1 positions, the last one past the image.
    layer = _layer((2, 4), (2, 2), (1, 1), use_bias=False)
    x = _inputs((1, 9))
    full = np.asarray(layer(x, use_causal_mask=True))
    np.testing.assert_allclose(
        full[:, :8], np.asarray(layer(x[:, :8], use_causal_mask=True)), atol=1e-6
    )
    np.testing.assert_array_equal(full[:, 8], 0.0)
    got, _ = _decode(layer, x, [7, 1, 1], 9)
    np.testing.assert_allclose(got, full, atol=1e-5)


def test_traced_cache_index_equals_eager():
    layer = _layer((4, 6), (2, 3), (1, 2))
    x = _inputs((2, 24))
    full = np.asarray(layer(x, use_causal_mask=True))

    def step(tokens, cache, index):
        return layer(tokens, cache=cache, cache_index=index, use_causal_mask=True)

    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        traced = tf.function(step, jit_compile=True)
        as_index = tf.constant
    elif keras.backend.backend() == "jax":
        import jax

        traced = jax.jit(step)
        as_index = np.int32
    else:  # no tracing: the index as a backend tensor
        traced = step
        as_index = lambda i: keras.ops.convert_to_tensor(i, "int32")  # noqa: E731
    cache = layer.init_cache(2, 24)
    y, cache = traced(x[:, :8], cache, as_index(0))  # prefill over several blocks
    outputs = [np.asarray(y)]
    for i in range(8, 24):
        y, cache = traced(x[:, i : i + 1], cache, as_index(i))
        outputs.append(np.asarray(y))
    np.testing.assert_allclose(np.concatenate(outputs, axis=1), full, atol=1e-5)


def test_layer_lifecycle_block_raster():
    run_layer_test(
        LocalBlockAttention,
        {
            "num_heads": 2,
            "key_dim": 4,
            "block_size": (2, 3),
            "memory_flange": (1, 2),
            "image_size": (4, 6),
        },
        _inputs((2, 24)),
        call_kwargs={"use_causal_mask": True},
        expected_output_shape=(2, 24, 8),
        run_mixed_precision=False,
    )


def test_errors():
    with pytest.raises(
        ValueError,
        match=r"`image_size` must be divisible by a pair `block_size` \(here 4\)\. "
        r"Received: image_size=\(4, 4\)\.",
    ):
        LocalBlockAttention(2, 4, block_size=4, image_size=(4, 4))
    with pytest.raises(
        ValueError,
        match=r"divisible by a pair `block_size` \(here \(2, 3\)\)\. Received: image_size=\(5, 6\)",
    ):
        _layer((5, 6), (2, 3), (1, 1))
    with pytest.raises(
        ValueError, match=r"`image_size` must be a positive int or a pair.*\(0, 4\)"
    ):
        _layer((0, 4), (2, 2), (1, 1))
    with pytest.raises(ValueError, match=r"`rolling_cache` is 1D only.*rolling_cache=True"):
        LocalBlockAttention(2, 4, block_size=(2, 2), rolling_cache=True)
    layer = _layer((4, 6), (2, 3), (1, 2))
    with pytest.raises(
        ValueError,
        match=r"`max_length` must be <= 25 \(the pixels \+ 1\)\. Received: max_length=26",
    ):
        layer.init_cache(1, 26)
    with pytest.raises(
        ValueError, match=r"at most 25 positions.*Received: inputs.shape=\(1, 26, 8\)"
    ):
        layer(_inputs((1, 26)))
    with pytest.raises(ValueError, match=r"expected ndim=3, found ndim=4"):
        layer(_inputs((1, 4, 6)))
    with pytest.raises(ValueError, match=r"only with use_causal_mask=True"):
        layer(_inputs((1, 1)), cache=layer.init_cache(1, 24), cache_index=0)
    with pytest.raises(ValueError, match=r"cache_index=23, input length 2, cache length 24"):
        layer(_inputs((1, 2)), cache=layer.init_cache(1, 24), cache_index=23, use_causal_mask=True)
    with pytest.raises(
        ValueError, match=r"must have at most 25 positions.*cache.shape=\(1, 30, 2, 8\)"
    ):
        layer(
            _inputs((1, 1)),
            cache=np.zeros((1, 30, 2, 8), "float32"),
            cache_index=0,
            use_causal_mask=True,
        )
    image_layer = LocalBlockAttention(2, 4, block_size=(2, 2))
    with pytest.raises(
        ValueError,
        match=r"has a `cache` only with use_causal_mask=True, and in 2D only with "
        r"`image_size`.*block_size=\(2, 2\), image_size=None",
    ):
        image_layer.init_cache(1, 16)


def test_cached_decoder_decodes_a_block_raster_model():
    # Image 2x4 in blocks of 2x2: a start token plus 8 pixels.
    height, width, vocabulary = 2, 4, 11
    tokens = keras.Input((None,), dtype="int32", name="tokens")
    x = TokenAndPositionEmbedding(vocabulary, 16, sequence_length=height * width + 1)(tokens)
    for i in range(1):
        x = TransformerDecoder(
            intermediate_dim=32,
            self_attention=LocalBlockAttention(
                num_heads=2,
                key_dim=8,
                block_size=(2, 2),
                memory_flange=(1, 3),
                image_size=(height, width),
                name=f"local_2d_{i}",
            ),
            name=f"decoder_layer_{i}",
        )(x)
    model = keras.Model(tokens, keras.layers.Dense(vocabulary, name="logits")(x))
    sequence = RNG.integers(1, vocabulary, (2, height * width + 1)).astype("int32")
    full = np.asarray(model(sequence))
    decoder = CachedDecoder(model)
    state = decoder.initial_state(2, sequence.shape[1])
    logits, state = decoder(sequence[:, :5], 0, state)  # a block and a pixel
    outputs = [np.asarray(logits)]
    for i in range(5, sequence.shape[1]):
        logits, state = decoder(sequence[:, i : i + 1], i, state)
        outputs.append(np.asarray(logits))
    np.testing.assert_allclose(np.concatenate(outputs, axis=1), full, atol=1e-4)
