"""Bad input to the generation functions (`greedy_search`, `beam_search`,
`sample`) is refused where it enters, with what was received and what was
expected: the search arguments (beams, length penalty, end and pad ids,
lengths), the prompt (ids outside the vocabulary or int32, an empty batch,
not a tensor; checked in the graph when traced), the model's other inputs
(ids, rows, names, rank and dtype) and a model `RecomputingDecoder` cannot
run. What the searches decode: test_search.py."""

import re

import keras
import numpy as np
import pytest

from keras_attn.generation import (
    CachedDecoder,
    RecomputingDecoder,
    beam_search,
    greedy_search,
    sample,
)
from tests.generation import tiny_models


def test_errors():
    model = tiny_models.language_model()
    prompt = np.array([[1, 2]], "int32")
    for beams in (0, 2.0, True, np.int64(2)):
        with pytest.raises(
            ValueError,
            match=rf"^`num_beams` must be a positive int\. Received: num_beams={re.escape(repr(beams))}\.$",
        ):
            beam_search(model, prompt, 5, num_beams=beams)
    for alpha in (-1.0, True, "0.6", None):
        with pytest.raises(
            ValueError,
            match=r"`length_penalty_alpha` must be a number >= 0 and finite.*"
            rf"Received: length_penalty_alpha={re.escape(repr(alpha))}\.",
        ):
            beam_search(model, prompt, 5, length_penalty_alpha=alpha)
    with pytest.raises(
        ValueError, match=r"static width in \[1, max_length\].*shape \(1, 9\)\), max_length=5"
    ):
        greedy_search(model, np.ones((1, 9), "int32"), 5)
    with pytest.raises(ValueError, match=r"integer token ids of shape.*dtype float32"):
        greedy_search(model, np.ones((1, 2), "float32"), 5)
    with pytest.raises(ValueError, match="max_length` must be a positive Python int"):
        greedy_search(model, prompt, 0)
    with pytest.raises(
        ValueError,
        match=r"end_token_id` must be a token id, an int in \[0, 13\).*or None\. Received: end_token_id=-1\.",
    ):
        greedy_search(model, prompt, 5, end_token_id=-1)
    with pytest.raises(ValueError, match="Expected a functional `keras.Model` or a decoder"):
        greedy_search(lambda x: x, prompt, 5)
    two = np.array([[1, 2, 3, 0], [4, 5, 0, 0]], "int32")
    for lengths, received in (([0, 9], r"\[0, 9\]"), ([-1, 2], r"\[-1, 2\]")):
        with pytest.raises(
            ValueError,
            match=rf"`prompt_lengths` must be integers in \[0, 4\].*Received: prompt_lengths={received}",
        ):
            greedy_search(model, two, 6, prompt_lengths=np.array(lengths))
    for lengths, received in (
        ([2.0, 3.0], r"dtype float(32|64), shape \(2,\)"),
        ([2, 3, 1], r"dtype int(32|64), shape \(3,\)"),
    ):
        with pytest.raises(
            ValueError,
            match=rf"`prompt_lengths` must be integers in \[0, 4\].*of shape \(batch,\).*{received}",
        ):
            greedy_search(model, two, 6, prompt_lengths=np.array(lengths))


def _sample(model, prompt, max_length, **kwargs):
    return sample(model, prompt, max_length, seed=0, **kwargs)


STRATEGIES = [greedy_search, beam_search, _sample]


class _Wrapped:
    """A decoder object with no `vocabulary_size` and no `model`: the
    vocabulary is only known from its logits, after the prefill."""

    def __init__(self, decoder):
        self._decoder = decoder
        self.initial_state = decoder.initial_state
        self.repeat_state = decoder.repeat_state
        self.reorder_state = decoder.reorder_state

    def __call__(self, *args, **kwargs):
        return self._decoder(*args, **kwargs)


@pytest.mark.parametrize("generate", STRATEGIES)
def test_end_and_pad_ids_outside_the_vocabulary_are_refused(generate):
    # An end id the model can never generate used to be accepted: rows never ended.
    model = tiny_models.language_model(num_layers=1)  # vocabulary 13
    prompt = np.array([[1, 2]], "int32")
    for decoder in (model, RecomputingDecoder(model), _Wrapped(CachedDecoder(model))):
        with pytest.raises(
            ValueError,
            match=r"`end_token_id` must be a token id, an int in "
            r"\[0, 13\).*Received: end_token_id=100\.",
        ):
            generate(decoder, prompt, 5, end_token_id=100)
        with pytest.raises(
            ValueError,
            match=r"`pad_token_id` must be a token id, an int in "
            r"\[0, 13\).*Received: pad_token_id=13\.",
        ):
            generate(decoder, prompt, 5, pad_token_id=13)
    assert np.asarray(generate(model, prompt, 5, end_token_id=12, pad_token_id=12)).shape == (1, 5)


@pytest.mark.parametrize("generate", STRATEGIES)
def test_empty_batch_and_prompt_ids_outside_the_vocabulary_are_refused(generate):
    # They used to fail in the backend (TensorFlow: "Cannot compute the min of
    # an empty tensor", a GatherV2 error) or, on JAX, to generate from a
    # clipped id.
    model = tiny_models.language_model(num_layers=1)  # vocabulary 13
    with pytest.raises(ValueError, match=r"at least one row.*Received: prompt.shape=\(0, 2\)"):
        generate(model, np.zeros((0, 2), "int32"), 5)
    for decoder in (model, RecomputingDecoder(model)):
        for prompt, lowest, highest in (
            ([[1, 13]], 1, 13),
            ([[1, -3]], -3, 1),
            ([[1, 2], [4, 45]], 1, 45),
        ):
            with pytest.raises(
                ValueError,
                match=r"`prompt` must hold token ids in \[0, 13\).*"
                rf"Received: ids from {lowest} to {highest}\.",
            ):
                generate(decoder, np.array(prompt, "int32"), 5)
    # An int64 id int32 cannot hold is refused, not wrapped by the cast (2**32 + 5 -> 5).
    for ids, received in (
        ([[1, 2**32 + 5]], "1 to 4294967301"),
        ([[-(2**31) - 1, 0]], "-2147483649 to 0"),
    ):
        with pytest.raises(
            ValueError, match=rf"`prompt` must hold ids that fit int32.*from {received}\."
        ):
            generate(model, np.array(ids, "int64"), 5)
    # Only the ids the model reads: past a row's length they become padding.
    got = np.asarray(
        generate(model, np.array([[1, 2, 99]], "int32"), 5, prompt_lengths=np.array([2], "int32"))
    )
    np.testing.assert_array_equal(got[0, :2], [1, 2])
    assert got.max() < 13


@pytest.mark.requires_tensorflow
@pytest.mark.parametrize("generate", STRATEGIES)
def test_a_traced_prompt_is_checked_in_the_graph(generate):
    import tensorflow as tf

    model = tiny_models.language_model(num_layers=1)
    spec = tf.TensorSpec((None, 2), tf.int32)
    traced = tf.function(lambda p: generate(model, p, 5), input_signature=[spec])
    good = np.array([[1, 2], [3, 4]], "int32")
    np.testing.assert_array_equal(np.asarray(traced(good)), np.asarray(generate(model, good, 5)))
    with pytest.raises(
        tf.errors.InvalidArgumentError,
        match=r"`prompt` must hold token ids in \[0, 13\).*Received: ids from.*-3.*to.*4",
    ):
        traced(np.array([[1, 2], [-3, 4]], "int32"))
    with pytest.raises(
        tf.errors.InvalidArgumentError,
        match=r"at least one row.*Received: prompt.shape=.*\(.*0.*, 2\)\.",
    ):
        traced(np.zeros((0, 2), "int32"))
    # int64 ids int32 cannot hold: refused in the graph, not wrapped by the cast.
    wide = tf.function(
        lambda p: greedy_search(model, p, 5), input_signature=[tf.TensorSpec((None, 2), tf.int64)]
    )
    with pytest.raises(
        tf.errors.InvalidArgumentError, match=r"`prompt` must hold ids that fit int32"
    ):
        wide(np.array([[1, 2**32 + 5]], "int64"))


@pytest.mark.skipif(keras.backend.backend() != "jax", reason="the JAX in-graph check")
@pytest.mark.parametrize("generate", STRATEGIES)
def test_a_traced_prompt_is_checked_under_jax_jit(generate):
    import jax

    model = tiny_models.language_model(num_layers=1)
    traced = jax.jit(lambda p: generate(model, p, 5))
    good = np.array([[1, 2], [3, 4]], "int32")
    np.testing.assert_array_equal(np.asarray(traced(good)), np.asarray(generate(model, good, 5)))
    with pytest.raises(
        Exception,
        match=r"`prompt` must hold token ids in \[0, 13\).*"
        r"Received: ids from 1 to 20\.",
    ) as error:
        np.asarray(traced(np.array([[1, 2], [20, 4]], "int32")))
    assert "ValueError" in str(error.value)


def _class_conditional():
    from keras_attn.models import image_transformer

    return image_transformer(
        image_size=2,
        channels=1,
        num_classes=10,
        num_layers=1,
        hidden_dim=8,
        num_heads=2,
        intermediate_dim=16,
        dropout=0.0,
    )


@pytest.mark.parametrize("generate", STRATEGIES)
def test_ids_of_the_other_inputs_are_checked_against_their_embeddings(generate):
    # A class label or a source id outside its embedding failed in the
    # gather on TensorFlow and was clipped to the last id on JAX.
    labels = _class_conditional()
    translation = tiny_models.translation_model(num_layers=1)  # source vocabulary 13
    prompt = np.full((2, 1), 256, "int32")  # the Image Transformer's start token
    for decoder in (labels, RecomputingDecoder(labels)):
        with pytest.raises(
            ValueError,
            match=r"The model input class_label must hold ids in \[0, 10\), "
            r"the ids its layer class_embedding takes\. "
            r"Received: ids from 3 to 12\.",
        ):
            generate(decoder, prompt, 3, inputs={"class_label": np.array([3, 12], "int32")})
    source = tiny_models.SOURCE.copy()
    source[1, 0] = -1
    with pytest.raises(
        ValueError,
        match=r"The model input encoder_tokens must hold ids in \[0, 13\).*"
        r"Received: ids from -1 to 11\.",
    ):
        generate(translation, np.ones((2, 1), "int32"), 3, inputs={"encoder_tokens": source})
    # Checked in the model input's dtype: a float label is cast to int32 first;
    # a single tensor stands for the one other input.
    for given in ({"class_label": np.array([3.0, 12.0], "float32")}, np.array([3, 12]), [3, 12]):
        with pytest.raises(
            ValueError, match=r"class_label must hold ids in \[0, 10\).*from 3 to 12"
        ):
            generate(labels, prompt, 3, inputs=given)
    # Ids inside pass, however they are given.
    want = np.asarray(
        generate(labels, prompt, 3, inputs={"class_label": np.array([0, 9], "int32")})
    )
    assert want.shape == (2, 3)
    for given in (np.array([0, 9]), [0, 9], {"class_label": np.array([0.0, 9.0], "float32")}):
        np.testing.assert_array_equal(np.asarray(generate(labels, prompt, 3, inputs=given)), want)


def test_ids_of_the_other_inputs_are_checked_in_the_graph():
    labels = _class_conditional()
    prompt = np.full((2, 1), 256, "int32")
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        traced = tf.function(
            lambda c: greedy_search(labels, prompt, 3, inputs={"class_label": c}),
            input_signature=[tf.TensorSpec((None,), tf.int32)],
        )
        error = tf.errors.InvalidArgumentError
    elif keras.backend.backend() == "jax":
        import jax

        traced = jax.jit(lambda c: greedy_search(labels, prompt, 3, inputs={"class_label": c}))
        error = Exception
    else:
        pytest.skip("no traced values on this backend")
    good = np.array([0, 9], "int32")
    np.testing.assert_array_equal(
        np.asarray(traced(good)),
        np.asarray(greedy_search(labels, prompt, 3, inputs={"class_label": good})),
    )
    with pytest.raises(
        error,
        match=r"The model input class_label must hold ids in \[0, 10\).*"
        r"Received: ids from.*0.*to.*10",
    ):
        np.asarray(traced(np.array([0, 10], "int32")))


@pytest.mark.parametrize("generate", STRATEGIES)
def test_other_inputs_must_have_the_rows_of_the_prompt(generate):
    # Three class labels or source sentences for two prompts failed in the
    # model's Add: "Incompatible shapes: [2,1,8] vs. [3,1,8]".
    labels = _class_conditional()
    prompt = np.full((2, 1), 256, "int32")
    for decoder in (labels, RecomputingDecoder(labels)):
        with pytest.raises(
            ValueError,
            match=re.escape(
                "The model input class_label must have one row per prompt row. Received: "
                "class_label with batch size 3, expected 2."
            ),
        ):
            generate(decoder, prompt, 3, inputs={"class_label": np.array([1, 2, 3], "int32")})
    translation = tiny_models.translation_model(num_layers=1)
    with pytest.raises(ValueError, match=r"encoder_tokens with batch size 2, expected 1\."):
        generate(
            translation, np.ones((1, 1), "int32"), 3, inputs={"encoder_tokens": tiny_models.SOURCE}
        )


def test_other_inputs_rows_are_checked_in_the_graph():
    # A batch known only at run time (a serving signature).
    labels = _class_conditional()
    if keras.backend.backend() != "tensorflow":
        pytest.skip("JAX traces have static shapes: checked when traced (the test above)")
    import tensorflow as tf

    traced = tf.function(
        lambda p, c: greedy_search(labels, p, 3, inputs={"class_label": c}),
        input_signature=[tf.TensorSpec((None, 1), tf.int32), tf.TensorSpec((None,), tf.int32)],
    )
    prompt = np.full((2, 1), 256, "int32")
    good = np.array([0, 9], "int32")
    np.testing.assert_array_equal(
        np.asarray(traced(prompt, good)),
        np.asarray(greedy_search(labels, prompt, 3, inputs={"class_label": good})),
    )
    with pytest.raises(
        tf.errors.InvalidArgumentError,
        match=r"class_label must have one row per prompt row.*"
        r"Received: class_label with batch size.*3.*expected.*2",
    ):
        traced(prompt, np.array([0, 1, 2], "int32"))


@pytest.mark.parametrize("alpha", [float("nan"), float("inf")])
def test_beam_search_refuses_a_non_finite_length_penalty(alpha):
    model = tiny_models.language_model(num_layers=1)
    with pytest.raises(
        ValueError,
        match=r"`length_penalty_alpha` must be a number >= 0 and finite.*"
        rf"Received: length_penalty_alpha={alpha}\.",
    ):
        beam_search(model, np.array([[1, 2]], "int32"), 5, length_penalty_alpha=alpha)


def test_beam_search_refuses_a_length_penalty_float32_cannot_rank_with():
    # alpha=200 sent every score to -0.0 (another best beam than at 100),
    # 1e300 to NaN, without an error.
    model = tiny_models.language_model(num_layers=1)
    prompt = np.array([[1, 2]], "int32")
    # max_length 16: ln((5 + 16) / 6) = 1.2528, so alpha up to 69.08 / 1.2528 = 55.1.
    for alpha in (200.0, 1e300):
        with pytest.raises(
            ValueError,
            match=r"`length_penalty_alpha` is too large for float32 scores "
            r"at max_length=16.*Use at most 55.1 here.*"
            rf"Received: length_penalty_alpha={re.escape(repr(alpha))}\.",
        ):
            beam_search(model, prompt, 16, length_penalty_alpha=alpha)
    assert beam_search(model, prompt, 16, length_penalty_alpha=55.0).shape == (1, 16)
    with pytest.raises(
        ValueError,
        match=r"`return_all_beams` must be True or False .*Received: return_all_beams='no'",
    ):
        beam_search(model, prompt, 16, return_all_beams="no")


@pytest.mark.parametrize("generate", STRATEGIES)
def test_unknown_input_names_are_refused(generate):
    # A typo next to the right name used to be ignored.
    translation = tiny_models.translation_model(num_layers=1)
    prompt = np.ones((2, 1), "int32")
    typo = {"encoder_tokens": tiny_models.SOURCE, "encoder_tokenz": tiny_models.SOURCE}
    for decoder in (translation, RecomputingDecoder(translation)):
        with pytest.raises(
            ValueError,
            match=r"`inputs` must map the model's inputs besides its tokens "
            r"`decoder_tokens` \(which the prompt fills\) to tensors: "
            r"\['encoder_tokens'\] needed, of \['encoder_tokens'\] accepted.*"
            r"Received: inputs with names \['encoder_tokens', 'encoder_tokenz'\]\.",
        ):
            generate(decoder, prompt, 4, inputs=typo)
        with pytest.raises(
            ValueError, match=r"Received: inputs with names \['decoder_tokens', 'encoder_tokens'\]"
        ):
            generate(
                decoder,
                prompt,
                4,
                inputs={"encoder_tokens": tiny_models.SOURCE, "decoder_tokens": prompt},
            )
        with pytest.raises(
            ValueError, match=r"\['encoder_tokens'\] needed.*Received: inputs of type NoneType\."
        ):
            generate(decoder, prompt, 4)
    # A tensor for a model without other inputs was silently ignored.
    language = tiny_models.language_model(num_layers=1)
    for decoder in (language, RecomputingDecoder(language)):
        with pytest.raises(
            ValueError,
            match=r"`tokens` \(which the prompt fills\) to tensors: \[\] needed, of "
            r"\[\] accepted \(inputs=None when there are none\)\. Received: "
            r"inputs of type ndarray\.",
        ):
            generate(decoder, prompt, 4, inputs=prompt)
        with pytest.raises(ValueError, match=r"Received: inputs with names \['encoder_tokens'\]\."):
            generate(decoder, prompt, 4, inputs={"encoder_tokens": tiny_models.SOURCE})


def test_prompt_ids_are_checked_against_the_embedding_not_the_logits():
    # An Image Transformer embeds 257 ids (the start token 256 is input only)
    # and predicts 256: the start token is a valid prompt id.
    from keras_attn.models import image_transformer

    model = image_transformer(
        image_size=2, channels=1, num_layers=1, hidden_dim=8, num_heads=2, intermediate_dim=8
    )
    assert np.asarray(greedy_search(model, np.array([[256]], "int32"), 3)).shape == (1, 3)
    with pytest.raises(
        ValueError, match=r"`prompt` must hold token ids in \[0, 257\).*from 257 to 257\."
    ):
        greedy_search(model, np.array([[257]], "int32"), 3)
    # A decoder object tells no embedding: negative ids are still refused.
    with pytest.raises(ValueError, match=r"`prompt` must hold token ids >= 0.*from -3 to 1\."):
        greedy_search(
            _Wrapped(CachedDecoder(tiny_models.language_model(num_layers=1))),
            np.array([[1, -3]], "int32"),
            5,
        )


class _SubclassedLanguageModel(keras.Model):
    """A causal language model without symbolic inputs (CachedDecoder
    refuses it and points to RecomputingDecoder)."""

    def __init__(self):
        super().__init__()
        self.embedding = keras.layers.Embedding(10, 8)
        self.logits = keras.layers.Dense(10)

    def call(self, tokens):
        return self.logits(self.embedding(tokens))  # position-wise: causal


def test_recomputing_decoder_runs_subclassed_models_and_refuses_other_outputs():
    # A subclassed model gave "AttributeError: The layer ... has never been
    # called"; a (B, V) output an index error inside a slice.
    model = _SubclassedLanguageModel()
    prompt = np.array([[1, 4], [2, 0]], "int32")
    out = np.asarray(greedy_search(RecomputingDecoder(model), prompt, 5))
    logits = np.asarray(model(np.asarray(out)))
    # Each generated token is the argmax after its predecessor (the model
    # is position-wise, so the full pass reproduces every step).
    for row, length in zip(range(2), (2, 1)):
        for t in range(length, 5):
            assert out[row, t] == logits[row, t - 1].argmax()
    with pytest.raises(ValueError, match=r"`tokens` \(which the prompt fills\).*inputs=None"):
        greedy_search(RecomputingDecoder(model), prompt, 5, inputs=prompt)
    tokens = keras.Input((None,), dtype="int32")
    pooled = keras.layers.Dense(10)(
        keras.layers.GlobalAveragePooling1D()(keras.layers.Embedding(10, 8)(tokens))
    )
    with pytest.raises(
        ValueError,
        match=r"RecomputingDecoder needs a model whose output is the next-token logits "
        r"of shape \(batch, length, vocabulary\)\. Received an output of shape \(None, 10\)",
    ):
        RecomputingDecoder(keras.Model(tokens, pooled))


def test_prompts_that_are_not_a_tensor_are_named():
    # The backend's conversion error, without a word of what a prompt is.
    model = tiny_models.language_model(num_layers=1)
    for prompt, received in (
        (None, "None (dtype NoneType, shape None)"),
        ([[1, 2], [3]], "[[1, 2], [3]] (dtype list"),
    ):
        with pytest.raises(
            ValueError,
            match=r"`prompt` must be integer token ids of shape \(batch, prompt_length\), "
            rf"right-padded with pad_token_id .*Received: {re.escape(received)}",
        ):
            greedy_search(model, prompt, 4)


@pytest.mark.parametrize(
    "value, received",
    [
        (np.array([5, 6, 2, 0]), r"shape \(4,\), dtype int64"),  # was "batch size 4, expected 2"
        (
            np.array([["a", "b"], ["c", "d"]]),
            r"shape \(2, 2\), dtype <U1",
        ),  # was "Invalid dtype: str32"
        (None, r"shape \(\), dtype object"),  # was "Invalid dtype: object"
    ],
)
def test_model_inputs_of_another_rank_or_no_numbers_are_named(value, received):
    translation = tiny_models.translation_model(num_layers=1)
    with pytest.raises(
        ValueError,
        match=r"The model input encoder_tokens must be a tensor of shape \(B, \?\) and "
        rf"dtype int32, as its `keras.Input`. Received: {received}\.",
    ):
        greedy_search(translation, np.ones((2, 1), "int32"), 4, inputs={"encoder_tokens": value})
