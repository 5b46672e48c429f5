import os

import keras
import numpy as np
import pytest

from keras_attn.generation import CachedDecoder, RecomputingDecoder, greedy_search, sample
from keras_attn.losses import MaskedSparseCategoricalCrossentropy
from keras_attn.metrics import BitsPerDimension
from keras_attn.models import image_transformer, super_resolution_transformer
from keras_attn.models.image_transformer import START_TOKEN
from keras_attn.preprocessing import images

SAMPLE = os.path.join(
    os.path.dirname(__file__),
    "..",
    "..",
    "..",
    "examples",
    "super_resolution",
    "data",
    "cifar10_sample.npz",
)
TINY = dict(num_layers=2, hidden_dim=16, num_heads=2, intermediate_dim=32, dropout=0.0)


@pytest.fixture(scope="module")
def cifar():
    """The shipped CIFAR-10 sample (real photos): training part and labels.
    Decoding the JPEGs takes TensorFlow (skipped in a venv without it)."""
    pytest.importorskip("tensorflow", reason="the sample's JPEGs are decoded with TensorFlow")
    return images.load_cifar10(SAMPLE, "train")


def _small_images(cifar, size, count):
    """Real images made small by area downsampling (32 -> size)."""
    return images.downsample(cifar[0][:count], 32 // size)


def _super_resolution(**kwargs):
    # 2x2 -> 4x4 RGB: 48 positions, blocks of one row (12) and a flange of 6,
    # so the windows matter.
    args = dict(
        low_resolution_size=2,
        image_size=4,
        num_encoder_layers=1,
        block_size=12,
        memory_flange=6,
        **TINY,
    )
    args.update(kwargs)
    return super_resolution_transformer(**args)


def _conditional(**kwargs):
    args = dict(image_size=4, num_classes=10, block_size=12, memory_flange=6, **TINY)
    args.update(kwargs)
    return image_transformer(**args)


def test_no_future_leak_and_conditioning_reaches_every_position(cifar):
    high = _small_images(cifar, 4, 2)
    low = images.to_raster(images.downsample(high, 2))
    targets = images.to_raster(high)
    tokens = images.decoder_inputs(targets)
    model = _super_resolution()
    logits = np.asarray(model({"low_resolution": low, "decoder_tokens": tokens}))
    assert logits.shape == (2, 48, 256) and logits.dtype == np.float32
    # Changing intensities from position 20 on changes no earlier logits.
    changed = tokens.copy()
    changed[:, 20:] = (changed[:, 20:] + 101) % 256
    logits2 = np.asarray(model({"low_resolution": low, "decoder_tokens": changed}))
    np.testing.assert_allclose(logits2[:, :20], logits[:, :20], atol=1e-5)
    assert np.abs(logits2[:, 20:] - logits[:, 20:]).max() > 1e-3
    # Another low-resolution image changes the logits, from position 0 on.
    logits3 = np.asarray(model({"low_resolution": low[::-1], "decoder_tokens": tokens}))
    assert np.abs(logits3[:, 0] - logits[:, 0]).max() > 1e-3

    model = _conditional()
    labels = np.array([3, 5])
    logits = np.asarray(model({"class_label": labels, "decoder_tokens": tokens}))
    logits2 = np.asarray(model({"class_label": labels, "decoder_tokens": changed}))
    np.testing.assert_allclose(logits2[:, :20], logits[:, :20], atol=1e-5)
    assert np.abs(logits2[:, 20:] - logits[:, 20:]).max() > 1e-3
    logits3 = np.asarray(model({"class_label": labels[::-1], "decoder_tokens": tokens}))
    assert (np.abs(logits3 - logits).max(axis=-1) > 1e-4).all()

    unconditional = image_transformer(image_size=4, block_size=12, memory_flange=6, **TINY)
    assert [i.name for i in unconditional.inputs] == ["decoder_tokens"]
    assert np.asarray(unconditional({"decoder_tokens": tokens})).shape == (2, 48, 256)


@pytest.mark.requires_tensorflow  # in a tf.function: eager loops of 48 steps are slow
@pytest.mark.parametrize(
    "kind",
    [
        "super_resolution",
        "super_resolution_logit_bias",
        "super_resolution_delays",
        pytest.param("class_conditional", marks=pytest.mark.slow),
    ],
)
def test_cached_sampling_equals_recomputing_the_full_pass(cifar, kind):
    import tensorflow as tf

    high = _small_images(cifar, 4, 3)
    if kind.startswith("super_resolution"):
        bias = None if kind == "super_resolution" else "bicubic"
        # The last kind adds both delayed inputs (left intensity, previous block sums).
        delays = kind.endswith("delays")
        model = _super_resolution(
            low_resolution_logit_bias=bias,
            low_resolution_left_residual=delays,
            low_resolution_channel_consistency=delays,
        )
        inputs = {"low_resolution": images.to_raster(images.downsample(high, 2))}
        if bias:
            weights = model.get_layer("low_resolution_logit_bias").offset_bias
            weights.assign(np.random.default_rng(0).normal(size=weights.shape) * 3.0)
    else:
        model = _conditional()
        inputs = {"class_label": np.array([0, 4, 9], "int32")}
    # Sharper logits make the sample depend on the model, not just the noise.
    logits_layer = model.get_layer("logits")
    logits_layer.kernel.assign(logits_layer.kernel * 20.0)
    prompt = np.full((3, 1), START_TOKEN, "int32")
    kwargs = dict(max_length=49, temperature=0.9, inputs=inputs, prompt_lengths=np.ones(3, "int32"))

    def run(decoder, seed):
        # In a graph (as exported): eager loops of 48 steps are slow.
        function = tf.function(
            lambda: sample(decoder, prompt, **kwargs, seed=seed), autograph=False
        )
        return np.asarray(function())

    cached = run(CachedDecoder(model), 11)
    recomputed = run(RecomputingDecoder(model), 11)
    np.testing.assert_array_equal(cached, recomputed)
    assert cached[:, 0].tolist() == [START_TOKEN] * 3
    assert cached[:, 1:].min() >= 0 and cached[:, 1:].max() < 256
    assert not np.array_equal(run(CachedDecoder(model), 12), cached)


@pytest.mark.parametrize(
    "consistency,channel_residual,channel_consistency",
    [(True, False, False), (True, True, False), (False, False, False), (True, True, True)],
)
def test_prior_led_decoding_keeps_each_block_at_its_input_average(
    cifar, consistency, channel_residual, channel_consistency
):
    # With the network's logits silenced, greedy decoding follows the prior's
    # peak: with consistency it spreads each 2x2 block's deficit over the
    # pixels still to come, so downsampling the output gives the input back
    # (to the rounding of the last pixel); without it, the rounded bicubic
    # values, whose block averages drift from the input. With the channel
    # residual, green and blue follow red's residual instead of their own
    # deficit: only red keeps its average exactly, unless they count from
    # their own consistent value too (channel consistency).
    high = _small_images(cifar, 4, 6)
    low = images.downsample(high, 2)
    model = _super_resolution(
        low_resolution_consistency=consistency,
        low_resolution_channel_residual=channel_residual,
        low_resolution_channel_consistency=channel_consistency,
    )
    logits_layer = model.get_layer("logits")
    logits_layer.kernel.assign(np.zeros(logits_layer.kernel.shape, "float32"))
    logits_layer.bias.assign(np.zeros(logits_layer.bias.shape, "float32"))
    decoded = greedy_search(
        model,
        np.full((6, 1), START_TOKEN, "int32"),
        max_length=49,
        inputs={"low_resolution": images.to_raster(low)},
    )
    out = images.from_raster(np.asarray(decoded)[:, 1:], 4, 4).astype("int32")
    error = np.abs(images.downsample(out.astype(np.uint8), 2).astype(int) - low)
    if consistency:
        assert error[..., 0].max() <= 1
        if channel_residual and not channel_consistency:
            assert error[..., 1:].max() > 1
        else:
            assert error.max() <= 1
    else:
        assert error.max() > 1
    if channel_residual and not channel_consistency:
        # Green and blue sit at the bicubic value plus red's residual there.
        import tensorflow as tf

        bicubic = np.clip(
            np.asarray(tf.image.resize(low.astype("float32"), (4, 4), "bicubic")), 0, 255
        )
        expected = np.clip(bicubic[..., 1:] + out[..., :-1] - bicubic[..., :-1], 0, 255)
        assert np.abs(out[..., 1:] - expected).max() <= 0.5 + 1e-3


def test_untrained_model_is_near_eight_bits_per_dimension(cifar):
    model = image_transformer(num_layers=1, hidden_dim=32, num_heads=2, intermediate_dim=64)
    targets = images.to_raster(cifar[0][:4])
    logits = model({"decoder_tokens": images.decoder_inputs(targets)})
    metric = BitsPerDimension()
    metric.update_state(targets, logits)
    assert 7.7 < float(metric.result()) < 8.4


@pytest.mark.parametrize("logit_bias", [None, "bicubic"])
def test_short_fit_on_real_images_reduces_the_loss(cifar, logit_bias):
    # The shipped CIFAR-10 sample made 8x8, super-resolved from 2x2.
    high = _small_images(cifar, 8, 64)
    model = super_resolution_transformer(
        low_resolution_size=2,
        image_size=8,
        num_encoder_layers=1,
        num_layers=1,
        hidden_dim=32,
        num_heads=2,
        intermediate_dim=64,
        dropout=0.0,
        low_resolution_logit_bias=logit_bias,
    )
    model.compile(
        optimizer=keras.optimizers.Adam(1e-2),
        loss=MaskedSparseCategoricalCrossentropy(label_smoothing=0.0, ignore_class=None),
        metrics=[BitsPerDimension()],
    )
    dataset = images.super_resolution_dataset(high, 16, factor=4)
    before = model.evaluate(dataset, verbose=0, return_dict=True)
    model.fit(
        dataset, epochs=4, verbose=0, shuffle=False
    )  # a tf.data pipeline: Keras cannot shuffle it
    after = model.evaluate(dataset, verbose=0, return_dict=True)
    if logit_bias is None:
        assert before["bits_per_dim"] > 7.7  # uniform: 8 bits
    else:
        # The initial Laplace prior around the bicubic value alone beats uniform.
        assert before["bits_per_dim"] < 7.7  # measured 7.55; without it 8.17
    assert after["bits_per_dim"] < before["bits_per_dim"] - 0.5
    np.testing.assert_allclose(after["loss"] / np.log(2), after["bits_per_dim"], rtol=1e-4)


def test_keras_save_and_load_round_trip(tmp_path, cifar):
    high = _small_images(cifar, 4, 2)
    inputs = {
        "low_resolution": images.to_raster(images.downsample(high, 2)),
        "decoder_tokens": images.decoder_inputs(images.to_raster(high)),
    }
    model = _super_resolution(position="learned", low_resolution_logit_bias="nearest")
    bias = model.get_layer("low_resolution_logit_bias").offset_bias
    bias.assign(np.random.default_rng(0).normal(size=bias.shape))
    path = str(tmp_path / "model.keras")
    model.save(path)
    reloaded = keras.saving.load_model(path)
    np.testing.assert_allclose(np.asarray(reloaded(inputs)), np.asarray(model(inputs)), atol=1e-5)


def test_default_window_is_one_image_row_and_errors():
    model = image_transformer(num_layers=1, hidden_dim=16, num_heads=2, intermediate_dim=32)
    attention = model.get_layer("decoder_layer_0").self_attention
    assert (attention.block_size, attention.memory_flange) == (96, 96)
    with pytest.raises(
        ValueError, match=r"`hidden_dim` \(18\) must be divisible by `num_heads` \(4\)"
    ):
        image_transformer(hidden_dim=18, num_heads=4)
    with pytest.raises(
        ValueError, match=r"`embedding_dim` must be divisible by 4 for sinusoidal.*embedding_dim=18"
    ):
        image_transformer(hidden_dim=18, num_heads=3)
    with pytest.raises(ValueError, match="`num_classes` must be a positive integer"):
        image_transformer(num_classes=0)
    with pytest.raises(ValueError, match=r"`low_resolution_size` must be a positive int or a pair"):
        super_resolution_transformer(low_resolution_size=(8, 8, 3))
    with pytest.raises(ValueError, match=r"`memory_flange` must be .*Received: memory_flange=-1"):
        image_transformer(memory_flange=-1)
    for builder in (image_transformer, super_resolution_transformer):
        with pytest.raises(
            ValueError, match=r"^`dropout` must be a number in \[0, 1\). Received: dropout=True"
        ):
            builder(dropout=True)
    # Flags the builder reads with `if`: the string "False" would switch them on.
    for flag in (
        "align_positions",
        "low_resolution_consistency",
        "low_resolution_channel_residual",
        "low_resolution_left_residual",
        "low_resolution_channel_consistency",
    ):
        with pytest.raises(
            ValueError, match=rf"^`{flag}` must be True or False .*Received: {flag}='False'\.$"
        ):
            super_resolution_transformer(**{flag: "False"})
    # The layers' own message named their `interpolation`, not these arguments.
    for part in ("low_resolution_embedding", "low_resolution_logit_bias"):
        with pytest.raises(
            ValueError,
            match=rf"^`{part}` must be one of \('nearest', 'bicubic'\) .*or None\. "
            rf"Received: {part}='Bicubic'\.$",
        ):
            super_resolution_transformer(**{part: "Bicubic"})
    # One message for every part that needs an integer upscaling factor
    # (the encoder's alone suggested align_positions=False, then a layer refused).
    with pytest.raises(
        ValueError,
        match=r"^`image_size` must be a multiple of `low_resolution_size`=\(4, 4\) on each "
        r"side \(the same factor for both sides with align_positions\) for "
        r"align_positions, low_resolution_embedding, low_resolution_logit_bias\. "
        r"Received: image_size=\(2, 2\)\.$",
    ):
        super_resolution_transformer(low_resolution_size=4, image_size=2)
    # The left residual corrects the consistent value: alone it was ignored.
    for without in (dict(low_resolution_consistency=False), dict(low_resolution_logit_bias=None)):
        with pytest.raises(
            ValueError,
            match=r"`low_resolution_left_residual` must be False without "
            r"low_resolution_consistency=True and a `low_resolution_logit_bias`",
        ):
            super_resolution_transformer(low_resolution_left_residual=True, **without)
