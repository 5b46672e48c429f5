"""Ids a model must never generate (padding, start) get probability zero in
greedy search, sampling and beam search; an end token ends its row."""

import functools

import keras
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from keras_attn.generation import RecomputingDecoder, beam_search, greedy_search, sample
from keras_attn.models import MUSIC_SUPPRESSED_TOKEN_IDS, music_transformer
from keras_attn.preprocessing import music
from tests.generation import tiny_models
from tests.test_case import property_examples

VOCABULARY = 24
PAD, START, END = music.PAD_ID, music.START_ID, music.END_ID
SUPPRESSED = MUSIC_SUPPRESSED_TOKEN_IDS
MAX_LENGTH = 12
PROMPTS = np.array([[START, 7, 9, 0], [START, 0, 0, 0], [START, 5, 6, 8]], "int32")


@functools.lru_cache(maxsize=None)
def _eager_model(attention):
    """An untrained Music Transformer that favours padding and start: left
    alone it generates them often (see the control in the first test)."""
    keras.utils.set_random_seed(3)
    model = music_transformer(
        VOCABULARY,
        num_layers=1,
        hidden_dim=16,
        num_heads=2,
        intermediate_dim=32,
        dropout=0.0,
        max_relative_position=6,
        attention=attention,
    )
    kernel, bias = model.get_layer("logits").get_weights()
    bias[list(SUPPRESSED)] += 2.5
    model.get_layer("logits").set_weights([kernel * 2.0, bias])
    return model


def _generate(strategy, model, seed, temperature, top_k, top_p, suppressed=SUPPRESSED):
    common = dict(end_token_id=END, suppressed_token_ids=suppressed)
    if strategy == "sample":
        return np.asarray(
            sample(
                model,
                PROMPTS,
                MAX_LENGTH,
                seed=seed,
                temperature=temperature,
                top_k=top_k,
                top_p=top_p,
                **common,
            )
        )
    if strategy == "greedy":
        return np.asarray(greedy_search(model, PROMPTS, MAX_LENGTH, **common))
    _, beams, scores = beam_search(
        model, PROMPTS, MAX_LENGTH, num_beams=3, return_all_beams=True, **common
    )
    return np.asarray(beams).reshape(-1, MAX_LENGTH)  # every beam of every row


def _check_rows(tokens, prompts):
    """No suppressed id after the prompt; after a generated end token only
    padding; no padding before it."""
    for row, prompt in zip(tokens, prompts):
        length = int((prompt != PAD).sum())
        np.testing.assert_array_equal(row[:length], prompt[:length])
        generated = row[length:]
        ends = np.flatnonzero(generated == END)
        body = generated[: ends[0] + 1] if ends.size else generated
        assert not np.isin(body, SUPPRESSED).any(), row
        if ends.size:
            assert (generated[ends[0] + 1 :] == PAD).all(), row


def test_without_suppression_these_models_do_generate_padding_and_start():
    # The control: the property below is not vacuous.
    found = set()
    for attention in ("relative", "absolute"):
        for seed in range(3):
            tokens = sample(_eager_model(attention), PROMPTS, MAX_LENGTH, seed=seed)
            found |= set(np.unique(np.asarray(tokens)[:, 4:]).tolist())
    assert set(SUPPRESSED) <= found


@settings(
    max_examples=property_examples(20), deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
@given(
    strategy=st.sampled_from(["sample", "sample", "greedy", "beam"]),
    attention=st.sampled_from(["relative", "absolute"]),
    seed=st.integers(0, 2**31 - 1),
    temperature=st.floats(0.3, 3.0),
    top_k=st.one_of(st.none(), st.integers(1, VOCABULARY + 2)),
    top_p=st.one_of(st.none(), st.floats(0.05, 1.0)),
)
def test_no_generated_row_holds_a_suppressed_id(
    strategy, attention, seed, temperature, top_k, top_p
):
    tokens = _generate(strategy, _eager_model(attention), seed, temperature, top_k, top_p)
    prompts = np.repeat(PROMPTS, 3, axis=0) if strategy == "beam" else PROMPTS
    _check_rows(tokens, prompts)


def test_top_k_of_one_on_a_suppressed_favourite_takes_the_best_allowed_id():
    # Filters act on what suppression leaves: with top_k=1 the sample is the
    # greedy choice among the allowed ids, not a -inf row.
    model = _eager_model("relative")
    greedy = _generate("greedy", model, 0, 1.0, None, None)
    for seed in (0, 1):
        np.testing.assert_array_equal(_generate("sample", model, seed, 1.0, 1, None), greedy)


def test_suppression_equals_a_model_whose_logits_exclude_those_ids():
    # The cached and the recomputing decoder agree, and greedy search picks
    # the argmax over the allowed ids at every step (naive recomputation).
    model = _eager_model("absolute")
    cached = _generate("greedy", model, 0, 1.0, None, None)
    reference = np.asarray(
        greedy_search(
            RecomputingDecoder(model),
            PROMPTS,
            MAX_LENGTH,
            end_token_id=END,
            suppressed_token_ids=SUPPRESSED,
        )
    )
    np.testing.assert_array_equal(cached, reference)
    row = [START]
    for _ in range(MAX_LENGTH - 1):
        logits = np.asarray(model(np.array([row], "int32")))[0, -1].copy()
        logits[list(SUPPRESSED)] = -np.inf
        row.append(int(np.argmax(logits)))
        if row[-1] == END:
            break
    row += [PAD] * (MAX_LENGTH - len(row))
    np.testing.assert_array_equal(cached[1], row)


def test_beams_that_hold_no_hypothesis_hold_no_suppressed_id():
    # 13 ids, 2 suppressed, 15 beams, one step: 11 hypotheses; the other 4
    # beams are filler with -inf scores (they used to take ids 0 and 1).
    model = tiny_models.language_model(num_layers=1)
    prompt = np.array([[3, 4]], "int32")
    _, beams, scores = beam_search(
        model, prompt, 3, num_beams=15, return_all_beams=True, suppressed_token_ids=(0, 1)
    )
    beams, scores = np.asarray(beams)[0], np.asarray(scores)[0]
    live = np.isfinite(scores)
    assert live.sum() == 11
    np.testing.assert_array_equal(beams[:, :2], np.tile(prompt, (15, 1)))
    assert sorted(beams[live, 2]) == list(range(2, 13))  # every allowed id once
    np.testing.assert_array_equal(beams[~live, 2], 0)  # filler: padding


def test_suppressed_token_ids_errors():
    model = tiny_models.language_model(num_layers=1)
    prompt = np.array([[1, 2]], "int32")
    with pytest.raises(ValueError, match="`end_token_id` cannot be suppressed"):
        greedy_search(model, prompt, 5, end_token_id=2, suppressed_token_ids=(0, 2))
    with pytest.raises(ValueError, match=r"must be ids of the model's vocabulary \[0, 13\)"):
        sample(model, prompt, 5, seed=0, suppressed_token_ids=(0, 13))
    with pytest.raises(
        ValueError,
        match=r"\[0, 13\) that leave one to generate.*Received: suppressed_token_ids=range\(0, 13\)\.",
    ):
        beam_search(model, prompt, 5, suppressed_token_ids=range(13))
    for bad in (0, [0, -1], [0, 1.0], ["0"]):
        with pytest.raises(
            ValueError,
            match=r"`suppressed_token_ids` must be ids of the model's vocabulary .*a list of ints, or None",
        ):
            greedy_search(model, prompt, 5, suppressed_token_ids=bad)
