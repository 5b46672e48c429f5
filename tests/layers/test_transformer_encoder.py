import keras
import numpy as np
import pytest

from keras_attn.layers import LocalBlockAttention, MultiHeadSelfAttention, TransformerEncoder
from tests import references
from tests.test_case import run_layer_test

RNG = np.random.default_rng(2)


def test_layer_lifecycle():
    run_layer_test(
        TransformerEncoder,
        {"intermediate_dim": 32, "num_heads": 2, "dropout": 0.1, "seed": 3},
        RNG.standard_normal((2, 5, 16)).astype("float32"),
        expected_output_shape=(2, 5, 16),
    )


def test_lifecycle_with_a_nested_self_attention_layer():
    run_layer_test(
        TransformerEncoder,
        {"intermediate_dim": 32, "self_attention": MultiHeadSelfAttention(num_heads=4, key_dim=3)},
        RNG.standard_normal((2, 5, 16)).astype("float32"),
        run_mixed_precision=False,
    )


@pytest.mark.parametrize("normalize_first", [False, True])
def test_matches_numpy_reference(normalize_first):
    x = RNG.standard_normal((2, 6, 8)).astype("float32")
    padding = np.array([[1] * 6, [1] * 4 + [0] * 2], bool)
    block = TransformerEncoder(intermediate_dim=16, num_heads=2, normalize_first=normalize_first)
    out = block(x, padding_mask=padding)
    want = references.transformer_encoder(
        block, x, references.dense_mask(2, 6, 6, padding, num_heads=2)
    )
    np.testing.assert_allclose(np.asarray(out), want, atol=1e-4)


def test_padding_does_not_change_real_positions():
    x = RNG.standard_normal((1, 6, 8)).astype("float32")
    block = TransformerEncoder(intermediate_dim=16, num_heads=2)
    alone = np.asarray(block(x[:, :4]))
    padded = x.copy()
    padded[:, 4:] = 100.0  # garbage in the padded slots
    out = np.asarray(block(padded, padding_mask=np.array([[1, 1, 1, 1, 0, 0]], bool)))
    np.testing.assert_allclose(out[:, :4], alone, atol=1e-5)


def test_errors():
    with pytest.raises(
        ValueError,
        match=r"Pass `num_heads` or a `self_attention` layer\. Received neither",
    ):
        TransformerEncoder(intermediate_dim=8)
    with pytest.raises(ValueError, match="width 10 is not divisible by num_heads=4"):
        TransformerEncoder(intermediate_dim=8, num_heads=4)(np.zeros((1, 3, 10), "float32"))
    with pytest.raises(ValueError, match="intermediate_dim` must be a positive integer"):
        TransformerEncoder(intermediate_dim=0, num_heads=2)
    with pytest.raises(
        ValueError,
        match="`self_attention` must be a keras_attn attention layer.*self_attention='dense'",
    ):
        TransformerEncoder(intermediate_dim=8, self_attention="dense")


def test_image_scores_in_a_functional_model():
    # With a 2D LocalBlockAttention the scores are over the height * width
    # pixels: the symbolic shape says so, as the eager values have it.
    block = TransformerEncoder(
        intermediate_dim=16,
        self_attention=LocalBlockAttention(2, 4, block_size=(2, 2), memory_flange=(1, 1)),
    )
    inputs = keras.Input((3, 4, 8))
    outputs, scores = block(inputs, return_attention_scores=True)
    assert tuple(scores.shape) == (None, 2, 12, 12)
    image = RNG.standard_normal((2, 3, 4, 8)).astype("float32")
    want, want_scores = block(image, return_attention_scores=True)
    got, got_scores = keras.Model(inputs, [outputs, scores])(image)
    np.testing.assert_allclose(got, want, atol=1e-6)
    np.testing.assert_allclose(got_scores, want_scores, atol=1e-6)
    window = references.local_block_mask((3, 4), (2, 2), (1, 1), causal=False)
    assert (np.asarray(got_scores)[:, :, ~window] == 0).all()


@pytest.mark.parametrize(
    "sizes", [{"num_heads": 3, "key_dim": 5}, {"num_heads": 2}, {"key_dim": 4}]
)
def test_num_heads_and_key_dim_are_refused_with_a_self_attention_layer(sizes):
    # They size only the default self-attention: with a given layer they
    # were silently ignored (its own num_heads=2, key_dim=4 were used).
    with pytest.raises(
        ValueError,
        match=r"Pass `num_heads` and `key_dim`, or `self_attention`, not both\. Received: num_heads=",
    ):
        TransformerEncoder(16, self_attention=MultiHeadSelfAttention(2, 4), **sizes)


@pytest.mark.parametrize("epsilon", [-1.0, 0, float("nan"), float("inf"), True, "x", None])
def test_layer_norm_epsilon_must_be_a_finite_positive_number(epsilon):
    with pytest.raises(
        ValueError,
        match=r"`layer_norm_epsilon` must be a finite number > 0 .*Received: layer_norm_epsilon=",
    ):
        TransformerEncoder(16, num_heads=2, layer_norm_epsilon=epsilon)


@pytest.mark.parametrize("normalize_first", ["yes", 1, None])
def test_normalize_first_must_be_a_bool(normalize_first):
    with pytest.raises(
        ValueError,
        match=r"`normalize_first` must be True or False \(True = pre-norm.*Received: normalize_first=",
    ):
        TransformerEncoder(16, num_heads=2, normalize_first=normalize_first)
