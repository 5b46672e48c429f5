import os

import keras
import numpy as np
import pytest

from keras_attn.generation import RecomputingDecoder, sample
from keras_attn.losses import MaskedSparseCategoricalCrossentropy
from keras_attn.models import MUSIC_SUPPRESSED_TOKEN_IDS, music_transformer
from keras_attn.preprocessing import music

SHIPPED_DATA = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "music", "data")
VOCABULARY = 40
ATTENTION = ["relative", "absolute"]


def _model(attention, **kwargs):
    defaults = dict(
        num_layers=2,
        hidden_dim=16,
        num_heads=2,
        intermediate_dim=32,
        dropout=0.0,
        max_relative_position=6,
        attention=attention,
    )
    return music_transformer(VOCABULARY, **{**defaults, **kwargs})


def _sharpen(model, scale=3.0):
    """Peaked distributions for an untrained model, so samples depend on the
    logits and not only on the noise."""
    kernel, bias = model.get_layer("logits").get_weights()
    model.get_layer("logits").set_weights([kernel * scale, bias * scale])
    return model


@pytest.mark.parametrize("attention", ATTENTION)
def test_no_future_leak_and_padding_is_ignored(attention):
    model = _model(attention)
    rng = np.random.default_rng(0)
    tokens = rng.integers(3, VOCABULARY, (2, 12)).astype("int32")
    logits = np.asarray(model(tokens))
    changed = tokens.copy()
    changed[:, 7:] = (changed[:, 7:] + 5) % (VOCABULARY - 3) + 3
    logits2 = np.asarray(model(changed))
    np.testing.assert_allclose(logits2[:, :7], logits[:, :7], atol=1e-5)
    assert np.abs(logits2[:, 7:] - logits[:, 7:]).max() > 1e-2
    # Right padding (id 0) changes nothing at the real positions.
    padded = np.concatenate([tokens, np.zeros((2, 5), "int32")], axis=1)
    np.testing.assert_allclose(np.asarray(model(padded))[:, :12], logits, atol=1e-5)
    assert logits.dtype == np.float32 and logits.shape == (2, 12, VOCABULARY)


def test_relative_model_sees_no_absolute_position_and_the_baseline_does():
    # In a constant sequence every key and value is the same vector at every
    # layer when no absolute position is added, so whatever the relative
    # logits, every position averages identical values: identical logits at
    # every position, for any length. The baseline's sinusoids break this.
    constant = np.full((1, 9), 9, "int32")
    relative = np.asarray(_model("relative")(constant))[0]
    np.testing.assert_allclose(relative, np.broadcast_to(relative[:1], relative.shape), atol=1e-5)
    absolute = np.asarray(_model("absolute")(constant))[0]
    assert np.abs(absolute[5] - absolute[0]).max() > 1e-3


@pytest.mark.parametrize("attention", ATTENTION)
def test_cached_sampling_equals_recomputation(attention):
    # Past the relative table (max_relative_position=6) and past the
    # "training length": 14 positions.
    model = _sharpen(_model(attention))
    prompt = np.array([[1, 7, 9, 0], [1, 3, 0, 0]], "int32")
    kwargs = dict(seed=11, temperature=0.8, top_k=8, end_token_id=None)
    cached = np.asarray(sample(model, prompt, 14, **kwargs))
    recomputed = np.asarray(sample(RecomputingDecoder(model), prompt, 14, **kwargs))
    np.testing.assert_array_equal(cached, recomputed)
    np.testing.assert_array_equal(cached[0, :3], [1, 7, 9])
    np.testing.assert_array_equal(cached[1, :2], [1, 3])
    assert (cached[:, 4:] > 0).any()
    # Another seed gives another sample.
    other = np.asarray(sample(model, prompt, 14, **{**kwargs, "seed": 12}))
    assert (other != cached).any()


def test_relative_model_runs_past_twice_the_training_length():
    # Trained (here: built) for distances < 6; at 4x that every distance
    # beyond shares the last embedding and the logits stay finite and causal.
    model = _model("relative")
    rng = np.random.default_rng(1)
    tokens = rng.integers(3, VOCABULARY, (2, 24)).astype("int32")
    logits = np.asarray(model(tokens))
    assert np.isfinite(logits).all()
    np.testing.assert_allclose(np.asarray(model(tokens[:, :12])), logits[:, :12], atol=1e-5)


def test_parameter_count_matches_hand_count():
    V, N, D, H, F, M = VOCABULARY, 2, 16, 2, 32, 6
    K = D // H
    block = 4 * D * D + 4 * D + 2 * D * F + F + D + 2 * 2 * D  # attention, ffn, 2 norms
    relative = music_transformer(V, N, D, H, F, max_relative_position=M, attention="relative")
    assert relative.count_params() == V * D + N * (block + H * (2 * M - 1) * K) + 2 * D + D * V + V
    absolute = music_transformer(V, N, D, H, F, max_relative_position=M, attention="absolute")
    assert absolute.count_params() == V * D + N * block + 2 * D + D * V + V
    post_norm = music_transformer(V, N, D, H, F, attention="absolute", normalize_first=False)
    assert post_norm.count_params() == absolute.count_params() - 2 * D


@pytest.mark.parametrize("attention", ATTENTION)
def test_keras_save_load_round_trip(attention, tmp_path):
    model = _model(attention, dropout=0.1)
    tokens = np.array([[1, 5, 9, 3, 0]], "int32")
    path = str(tmp_path / "model.keras")
    model.save(path)
    restored = keras.saving.load_model(path)
    np.testing.assert_allclose(np.asarray(restored(tokens)), np.asarray(model(tokens)), atol=1e-6)
    layer = restored.get_layer("decoder_layer_0")._self_attention_layer
    expected = "RelativeGlobalAttention" if attention == "relative" else "MultiHeadSelfAttention"
    assert type(layer).__name__ == expected


def test_short_fit_on_shipped_chorales_reduces_validation_nll():
    def windows(split, count, length=48):
        chorales = music.load_jsb_chorales(SHIPPED_DATA, split)[:count]
        tokens = np.stack(
            [music.chorale_to_tokens(c, add_start_end=True)[: length + 1] for c in chorales]
        )
        return tokens[:, :-1], tokens[:, 1:]

    x, y = windows("train", 32)
    x_val, y_val = windows("valid", 8)
    model = music_transformer(
        music.JSB_VOCABULARY_SIZE,
        num_layers=1,
        hidden_dim=32,
        num_heads=2,
        intermediate_dim=64,
        dropout=0.0,
        max_relative_position=48,
    )
    loss = MaskedSparseCategoricalCrossentropy(label_smoothing=0.0)
    model.compile(optimizer=keras.optimizers.Adam(1e-2), loss=loss)
    before = model.evaluate(x_val, y_val, batch_size=8, verbose=0)
    # Uniform guess over 132 ids: log(132) = 4.88 nats.
    assert abs(before - np.log(music.JSB_VOCABULARY_SIZE)) < 0.5
    model.fit(x, y, batch_size=16, epochs=8, verbose=0)
    after = model.evaluate(x_val, y_val, batch_size=8, verbose=0)
    assert after < before - 1.5, (before, after)


def test_errors():
    with pytest.raises(
        ValueError, match=r'`attention` must be "relative".*Received: attention=\'local\''
    ):
        music_transformer(10, attention="local")
    with pytest.raises(
        ValueError, match=r"`hidden_dim` \(30\) must be divisible by `num_heads` \(4\)"
    ):
        music_transformer(10, hidden_dim=30, num_heads=4)
    with pytest.raises(
        ValueError,
        match="`max_relative_position` must be a positive integer. Received: max_relative_position=0",
    ):
        music_transformer(10, max_relative_position=0)
    with pytest.raises(ValueError, match="`vocabulary_size` must be a positive integer"):
        music_transformer(0)
    for dropout in (1.0, -0.1, "0.1", True, float("nan")):
        with pytest.raises(
            ValueError, match=r"^`dropout` must be a number in \[0, 1\). Received: dropout="
        ):
            music_transformer(10, dropout=dropout)
    with pytest.raises(
        ValueError, match=r"`embedding_dim` must be even for sinusoidal positions.*=9"
    ):
        music_transformer(10, hidden_dim=9, num_heads=3, attention="absolute")


def test_max_relative_position_is_ignored_by_the_absolute_baseline():
    # As the docstring says: the baseline has no relative embeddings to size.
    model = music_transformer(
        10,
        num_layers=1,
        hidden_dim=8,
        num_heads=2,
        intermediate_dim=8,
        attention="absolute",
        max_relative_position=None,
    )
    assert (
        model.count_params()
        == music_transformer(
            10, num_layers=1, hidden_dim=8, num_heads=2, intermediate_dim=8, attention="absolute"
        ).count_params()
    )


def test_suppressed_ids_are_padding_and_start_of_both_music_vocabularies():
    assert MUSIC_SUPPRESSED_TOKEN_IDS == (music.PAD_ID, music.START_ID) == (0, 1)
    assert MUSIC_SUPPRESSED_TOKEN_IDS == (music.JSB_PAD_ID, music.JSB_START_ID)
    assert music.END_ID not in MUSIC_SUPPRESSED_TOKEN_IDS
