import numpy as np
import pytest

from keras_attn.models import translation_transformer


def _model(**kwargs):
    defaults = dict(num_layers=2, hidden_dim=16, num_heads=2, intermediate_dim=32, dropout=0.0)
    return translation_transformer(30, **{**defaults, **kwargs})


@pytest.mark.parametrize("normalize_first", [False, True])
def test_padding_and_future_tokens_do_not_leak(normalize_first):
    model = _model(normalize_first=normalize_first)
    rng = np.random.default_rng(0)
    source = rng.integers(1, 30, (2, 7))
    target = rng.integers(1, 30, (2, 5))
    logits = np.asarray(model({"encoder_tokens": source, "decoder_tokens": target}))
    # Changing future target tokens changes no earlier logits.
    changed = target.copy()
    changed[:, 3:] = (changed[:, 3:] + 1) % 29 + 1
    logits2 = np.asarray(model({"encoder_tokens": source, "decoder_tokens": changed}))
    np.testing.assert_allclose(logits[:, :3], logits2[:, :3], atol=1e-5)
    assert not np.allclose(logits[:, 3:], logits2[:, 3:])
    # Extra source padding changes nothing.
    padded = np.concatenate([source, np.zeros((2, 4), "int64")], axis=1)
    logits3 = np.asarray(model({"encoder_tokens": padded, "decoder_tokens": target}))
    np.testing.assert_allclose(logits3, logits, atol=1e-5)


def test_paper_base_configuration_size():
    # Vaswani et al. 2017, Table 3: the base model has 65M parameters with a
    # 37000-token shared vocabulary (their embeddings are tied; ours are not,
    # which adds two 37000 x 512 matrices).
    model = translation_transformer(
        37000, num_layers=6, hidden_dim=512, num_heads=8, intermediate_dim=2048
    )
    blocks = sum(
        layer.count_params()
        for layer in model.layers
        if layer.name.startswith(("encoder_layer", "decoder_layer"))
    )
    assert blocks == 6 * (4 * 512 * 512 + 4 * 512 + 2 * 512 * 2048 + 2048 + 512 + 4 * 512) + 6 * (
        8 * 512 * 512 + 8 * 512 + 2 * 512 * 2048 + 2048 + 512 + 6 * 512
    )
    assert model.count_params() == blocks + 3 * 37000 * 512 + 37000


def test_errors():
    with pytest.raises(
        ValueError, match=r"hidden_dim` \(30\) must be divisible by `num_heads` \(4\)"
    ):
        translation_transformer(10, hidden_dim=30, num_heads=4)
    with pytest.raises(ValueError, match="num_layers` must be a positive integer"):
        translation_transformer(10, num_layers=0)
    # Refused by the builder, before any layer is made.
    with pytest.raises(
        ValueError, match=r"^`dropout` must be a number in \[0, 1\). Received: dropout='0.1'"
    ):
        translation_transformer(10, dropout="0.1")
    # 0 is not "same as the source": only None is.
    with pytest.raises(
        ValueError,
        match=r"^`decoder_vocabulary_size` must be a positive integer\. Received: decoder_vocabulary_size=0\.$",
    ):
        translation_transformer(20, decoder_vocabulary_size=0)
    # Checked when given, though sinusoidal positions do not read it.
    with pytest.raises(
        ValueError, match=r"^`max_length` must be a positive integer\. Received: max_length=-1\.$"
    ):
        translation_transformer(20, max_length=-1)
    with pytest.raises(
        ValueError,
        match=r"Received: num_layers=np\.int64\(2\)\. Pass a Python int: `num_layers=int\(num_layers\)`\.$",
    ):
        translation_transformer(20, num_layers=np.int64(2))
