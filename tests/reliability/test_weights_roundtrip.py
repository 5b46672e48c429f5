"""Issue 6, case 6: weights survive saving, for every public layer and model
builder, including sublayers created lazily in `build` (the decoder's
cross-attention, nested self-attention layers, learned pixel tables).

For each: `save_weights` then `load_weights` into a fresh instance built
from the config gives identical outputs (and the fresh instance differed
before loading: nothing was silently re-initialised or skipped), and a
`.keras` file reloads with every weight equal, one by one, under the same
unique variable paths.
"""

import keras
import numpy as np
import pytest

from keras_attn import layers as attn
from keras_attn import models
from keras_attn.models.image_transformer import PixelEmbedding, PixelPositionEncoding
from tests import attention_kinds as kinds

RNG = np.random.default_rng(23)


def _floats(*shape):
    return RNG.standard_normal(shape).astype("float32")


def _ids(high, *shape):
    return RNG.integers(1, high, shape).astype("int32")


# Each case: (make layer, list of (input shape without batch, dtype), call
# kwargs, a batch of inputs). Layers with two inputs are called on both.
LAYER_CASES = {
    "multi_head_self_attention": (
        lambda: kinds.self_attention("multi_head"),
        [((5, 8), "float32")],
        {"use_causal_mask": True},
    ),
    "local_1d": (
        lambda: kinds.self_attention("local"),
        [((5, 8), "float32")],
        {"use_causal_mask": True},
    ),
    "local_2d": (
        lambda: attn.LocalBlockAttention(2, 4, block_size=(2, 2), memory_flange=(1, 1)),
        [((3, 4, 8), "float32")],
        {},
    ),
    "relative": (lambda: kinds.self_attention("relative"), [((5, 8), "float32")], {}),
    "cross_attention": (
        lambda: attn.MultiHeadAttention(2, 4, value_dim=3),
        [((4, 8), "float32"), ((6, 5), "float32")],
        {},
    ),
    "token_and_position_embedding_learned": (
        lambda: attn.TokenAndPositionEmbedding(11, 8, sequence_length=6, mask_zero=True),
        [((5,), "int32")],
        {},
    ),
    "token_and_position_embedding_sinusoidal": (
        lambda: attn.TokenAndPositionEmbedding(11, 8, position="sinusoidal"),
        [((5,), "int32")],
        {},
    ),
    "sinusoidal_position_encoding": (
        lambda: attn.SinusoidalPositionEncoding(),
        [((5, 8), "float32")],
        {},
    ),
    "pixel_embedding": (
        lambda: PixelEmbedding(7, 8, image_size=(2, 3), channels=2, position="learned"),
        [((9,), "int32")],
        {},
    ),
    "pixel_position_encoding": (
        lambda: PixelPositionEncoding(image_size=(2, 3), channels=2, position="learned"),
        [((9, 8), "float32")],
        {},
    ),
}
for _kind in kinds.SELF_ATTENTION_KINDS:
    LAYER_CASES[f"encoder_{_kind}"] = (
        lambda k=_kind: kinds.encoder(k),
        [((5, 8), "float32")],
        {},
    )
    # Cross-attention is created only when the block first sees an encoder
    # sequence: the lazily built sublayer of the issue.
    LAYER_CASES[f"decoder_cross_{_kind}"] = (
        lambda k=_kind: kinds.decoder(k),
        [((5, 8), "float32"), ((7, 6), "float32")],
        {},
    )


def _functional(layer, specs, call_kwargs):
    inputs = [keras.Input(shape, dtype=dtype) for shape, dtype in specs]
    outputs = layer(*inputs, **call_kwargs)
    return keras.Model(inputs if len(inputs) > 1 else inputs[0], outputs)


def _batch(specs):
    return [
        _ids(7, 2, *shape) if dtype == "int32" else _floats(2, *shape) for shape, dtype in specs
    ]


def _check_round_trips(model, fresh, batch, tmp_path, has_weights=True):
    want = np.asarray(model(batch))
    if has_weights:
        assert fresh.weights and len(fresh.weights) == len(model.weights)
        assert not np.allclose(np.asarray(fresh(batch)), want, atol=1e-4)
    path = str(tmp_path / "w.weights.h5")
    model.save_weights(path)
    fresh.load_weights(path)
    np.testing.assert_allclose(np.asarray(fresh(batch)), want, rtol=0, atol=1e-6)

    path = str(tmp_path / "m.keras")
    model.save(path)
    reloaded = keras.saving.load_model(path)
    # Weight by weight, in tracking order (the order files store them), with
    # the same unique paths (nested self-attention layers keep their block's
    # prefix instead of sharing one path across blocks).
    paths = [w.path for w in model.weights]
    assert len(set(paths)) == len(paths)
    assert [w.path for w in reloaded.weights] == paths
    assert [w.path for w in fresh.weights] == paths
    for saved, loaded in zip(model.weights, reloaded.weights):
        np.testing.assert_array_equal(np.asarray(loaded), np.asarray(saved), err_msg=saved.path)
    np.testing.assert_allclose(np.asarray(reloaded(batch)), want, rtol=0, atol=1e-6)


@pytest.mark.parametrize("name", sorted(LAYER_CASES))
def test_layer_weights_round_trip(name, tmp_path):
    make, specs, call_kwargs = LAYER_CASES[name]
    layer = make()
    model = _functional(layer, specs, call_kwargs)
    # A fresh layer from the config, in a fresh functional model.
    fresh_layer = type(layer).from_config(layer.get_config())
    fresh = _functional(fresh_layer, specs, call_kwargs)
    batch = _batch(specs)
    _check_round_trips(
        model,
        fresh,
        batch if len(batch) > 1 else batch[0],
        tmp_path,
        has_weights=bool(layer.weights),
    )


MODEL_CASES = {
    "translation_sinusoidal": (
        lambda: models.translation_transformer(
            20, num_layers=1, hidden_dim=8, num_heads=2, intermediate_dim=16, dropout=0.0
        ),
        lambda: {"encoder_tokens": _ids(20, 2, 6), "decoder_tokens": _ids(20, 2, 4)},
    ),
    "translation_learned_pre_norm": (
        lambda: models.translation_transformer(
            20,
            num_layers=1,
            hidden_dim=8,
            num_heads=2,
            intermediate_dim=16,
            dropout=0.0,
            position="learned",
            max_length=8,
            normalize_first=True,
        ),
        lambda: {"encoder_tokens": _ids(20, 2, 6), "decoder_tokens": _ids(20, 2, 4)},
    ),
    "music_relative": (
        lambda: models.music_transformer(
            20,
            num_layers=1,
            hidden_dim=8,
            num_heads=2,
            intermediate_dim=16,
            max_relative_position=4,
            dropout=0.0,
        ),
        lambda: _ids(20, 2, 6),
    ),
    "music_absolute": (
        lambda: models.music_transformer(
            20,
            num_layers=1,
            hidden_dim=8,
            num_heads=2,
            intermediate_dim=16,
            attention="absolute",
            dropout=0.0,
        ),
        lambda: _ids(20, 2, 6),
    ),
    "image_conditional": (
        lambda: models.image_transformer(
            image_size=2,
            channels=3,
            num_classes=3,
            num_layers=1,
            hidden_dim=8,
            num_heads=2,
            intermediate_dim=16,
            block_size=4,
            dropout=0.0,
        ),
        lambda: {"decoder_tokens": _ids(256, 2, 12), "class_label": np.array([0, 2], "int32")},
    ),
    "super_resolution": (
        lambda: models.super_resolution_transformer(
            low_resolution_size=1,
            image_size=2,
            channels=3,
            num_encoder_layers=1,
            num_layers=1,
            hidden_dim=8,
            num_heads=2,
            intermediate_dim=16,
            block_size=4,
            dropout=0.0,
        ),
        lambda: {"low_resolution": _ids(256, 2, 3), "decoder_tokens": _ids(256, 2, 12)},
    ),
}


@pytest.mark.parametrize("name", sorted(MODEL_CASES))
def test_model_weights_round_trip(name, tmp_path):
    build, batch = MODEL_CASES[name]
    model = build()
    # Rebuilt from the config (what `load_model` does), not by the builder.
    fresh = keras.Model.from_config(model.get_config())
    _check_round_trips(model, fresh, batch(), tmp_path)
