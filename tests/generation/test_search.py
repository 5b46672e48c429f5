"""Greedy and beam search decode what their references decode: greedy
search equals a naive full-recomputation loop (stopping at the end token,
rows of different prompt lengths as each row alone), one beam is greedy,
the cached beam search equals the recomputing decoder's, and with a beam per
hypothesis beam search ranks every hypothesis exactly (length penalty
included). Bad input to these functions: test_search_bad_input.py."""

import itertools

import keras
import numpy as np
import pytest

from keras_attn.generation import RecomputingDecoder, beam_search, greedy_search
from tests.generation import tiny_models

TYPES = tiny_models.KINDS


@pytest.mark.parametrize("kind", TYPES)
def test_greedy_equals_naive_full_recomputation_decoder_only(kind):
    model = tiny_models.sharpen(tiny_models.language_model(kind, num_layers=1))
    prompt = np.array([[3, 4, 5], [7, 1, 9]], "int32")
    want = tiny_models.naive_greedy(model, prompt, 10)
    got = np.asarray(greedy_search(model, prompt, max_length=10))
    np.testing.assert_array_equal(got, want)


def test_greedy_translation_equals_naive_and_stops_at_end_token():
    model = tiny_models.sharpen(tiny_models.translation_model(num_layers=1))
    inputs = {"encoder_tokens": tiny_models.SOURCE}
    prompt = np.ones((2, 1), "int32")
    free = tiny_models.naive_greedy(model, prompt, 8, inputs=inputs, token_input="decoder_tokens")
    np.testing.assert_array_equal(np.asarray(greedy_search(model, prompt, 8, inputs=inputs)), free)
    # Take the 3rd token of row 0 as the end token: row 0 must stop there
    # and be padded; the other row stops at its first occurrence, if any.
    end = int(free[0, 3])
    want = tiny_models.naive_greedy(
        model, prompt, 8, end_token_id=end, inputs=inputs, token_input="decoder_tokens"
    )
    got = np.asarray(greedy_search(model, prompt, 8, end_token_id=end, inputs=inputs))
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got[0, 4:], 0)


@pytest.mark.parametrize("kind", TYPES)
def test_prompts_of_different_lengths_equal_each_row_alone(kind):
    model = tiny_models.sharpen(
        tiny_models.language_model(kind, num_layers=1, position="sinusoidal")
    )
    prompt = np.array([[3, 4, 0, 0, 0], [7, 1, 9, 2, 6]], "int32")
    batch = np.asarray(greedy_search(model, prompt, max_length=10))
    alone = [
        np.asarray(greedy_search(model, prompt[b : b + 1, :n], max_length=10))[0]
        for b, n in ((0, 2), (1, 5))
    ]
    np.testing.assert_array_equal(batch, np.stack(alone))
    np.testing.assert_array_equal(batch[0, :2], [3, 4])
    if kind == "multi_head":  # the beam bookkeeping is the same for all
        beams = np.asarray(beam_search(model, prompt, max_length=8, num_beams=3, end_token_id=5))
        alone = [
            np.asarray(
                beam_search(model, prompt[b : b + 1, :n], max_length=8, num_beams=3, end_token_id=5)
            )[0]
            for b, n in ((0, 2), (1, 5))
        ]
        np.testing.assert_array_equal(beams, np.stack(alone))


def test_beam_search_with_one_beam_is_greedy():
    model = tiny_models.sharpen(tiny_models.translation_model(num_layers=1))
    inputs = {"encoder_tokens": tiny_models.SOURCE}
    prompt = np.ones((2, 1), "int32")
    free = np.asarray(greedy_search(model, prompt, 9, inputs=inputs))
    end = int(free[1, 2])
    greedy = np.asarray(greedy_search(model, prompt, 9, end_token_id=end, inputs=inputs))
    beam = np.asarray(
        beam_search(
            model, prompt, 9, num_beams=1, length_penalty_alpha=0.6, end_token_id=end, inputs=inputs
        )
    )
    np.testing.assert_array_equal(beam, greedy)


@pytest.mark.parametrize("kind", TYPES)
def test_cached_beam_search_equals_recomputing_reference_decoder_only(kind):
    model = tiny_models.sharpen(tiny_models.language_model(kind, num_layers=1), 2.0)
    prompt = np.array([[3, 4, 0], [7, 1, 9]], "int32")
    kwargs = dict(max_length=8, num_beams=3, end_token_id=5, return_all_beams=True)
    _, beams, scores = beam_search(model, prompt, **kwargs)
    _, ref_beams, ref_scores = beam_search(RecomputingDecoder(model), prompt, **kwargs)
    np.testing.assert_array_equal(np.asarray(beams), np.asarray(ref_beams))
    np.testing.assert_allclose(np.asarray(scores), np.asarray(ref_scores), rtol=1e-5)


def test_cached_beam_search_equals_recomputing_reference():
    model = tiny_models.sharpen(tiny_models.translation_model(num_layers=1), scale=2.0)
    inputs = {"encoder_tokens": tiny_models.SOURCE}
    prompt = np.ones((2, 1), "int32")
    kwargs = dict(max_length=7, num_beams=4, end_token_id=3, inputs=inputs, return_all_beams=True)
    best, beams, scores = beam_search(model, prompt, **kwargs)
    ref_best, ref_beams, ref_scores = beam_search(RecomputingDecoder(model), prompt, **kwargs)
    np.testing.assert_array_equal(np.asarray(beams), np.asarray(ref_beams))
    np.testing.assert_allclose(np.asarray(scores), np.asarray(ref_scores), rtol=1e-5)
    np.testing.assert_array_equal(np.asarray(best), np.asarray(beams)[:, 0])


VOCABULARY, END, STEPS, PROMPT = 4, 3, 3, [2, 1]


@pytest.fixture(scope="module")
def enumerated():
    """A tiny LM and the log-probability of every complete hypothesis (ended
    by END, or STEPS tokens long), computed with full forward passes."""
    keras.utils.set_random_seed(21)
    model = tiny_models.sharpen(
        tiny_models.language_model(vocabulary=VOCABULARY, num_layers=1), 1.5
    )
    hypotheses = []
    for n in range(1, STEPS + 1):
        for tail in itertools.product(range(VOCABULARY), repeat=n):
            if END not in tail[:-1] and (n == STEPS or tail[-1] == END):
                hypotheses.append(tail)
    # One batched forward pass over every hypothesis, padded to full length
    # (causal: the padding after a hypothesis changes none of its logits).
    inputs = np.array([PROMPT + list(t) + [1] * (STEPS - len(t)) for t in hypotheses], "int32")
    logits = np.asarray(model(inputs[:, :-1])).astype("float64")
    logits -= logits.max(-1, keepdims=True)
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    totals = {
        t: sum(log_probs[h, len(PROMPT) - 1 + i, token] for i, token in enumerate(t))
        for h, t in enumerate(hypotheses)
    }
    return model, totals


@pytest.mark.parametrize("alpha", [0.0, 0.6, 2.0])
def test_beam_search_is_exact_when_beams_hold_every_hypothesis(enumerated, alpha):
    model, totals = enumerated
    assert len(totals) == 1 + 3 + 36
    scored = {t: total / ((5.0 + len(t)) / 6.0) ** alpha for t, total in totals.items()}
    best, beams, scores = beam_search(
        model,
        np.array([PROMPT], "int32"),
        max_length=len(PROMPT) + STEPS,
        num_beams=len(scored),
        length_penalty_alpha=alpha,
        end_token_id=END,
        return_all_beams=True,
    )
    want = sorted(scored.items(), key=lambda kv: -kv[1])
    np.testing.assert_allclose(np.asarray(scores)[0], [s for _, s in want], rtol=1e-4)
    best_tail = want[0][0]
    expected = PROMPT + list(best_tail) + [0] * (STEPS - len(best_tail))
    np.testing.assert_array_equal(np.asarray(best)[0], expected)
    # Every beam is one of the hypotheses, padded after its end token.
    for beam, score in zip(np.asarray(beams)[0], np.asarray(scores)[0]):
        tail = tuple(beam[len(PROMPT) :])
        if END in tail:
            tail = tail[: tail.index(END) + 1]
            assert not any(beam[len(PROMPT) + len(tail) :])
        np.testing.assert_allclose(scored[tail], score, rtol=1e-4)
    if alpha == 2.0:
        # The case exercises the penalty: it reorders the hypotheses.
        assert [t for t, _ in want] != sorted(totals, key=lambda t: -totals[t])
