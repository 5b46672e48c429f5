"""examples/music/choose_sampling.py: its settings and the goal gaps it ranks them by."""

import argparse
import math

import pytest

from tests.examples.scripts import load_script


def _choose():
    return load_script("music/choose_sampling.py")


def test_a_setting_is_temperature_top_k_top_p_with_0_and_1_off():
    choose = _choose()
    assert choose.parse_setting("1.0,0,0.9") == (1.0, None, 0.9)
    assert choose.parse_setting("1.2,5,1") == (1.2, 5, None)
    for text in ("1.0,0", "hot,0,1", "0,0,1", "1,-1,1", "1,2.5,1", "1,0,0", "1,0,1.5"):
        with pytest.raises(argparse.ArgumentTypeError, match=repr(text)):
            choose.parse_setting(text)


def test_goal_gaps_and_the_largest_share_of_its_allowance():
    choose = _choose()
    reference = {"note_length": 4.0, "long_notes": 0.02, "dissonant_steps": 0.35}
    samples = {"note_length": 4.6, "long_notes": 0.01, "dissonant_steps": 0.38}
    gaps = choose.goal_gaps(samples, reference)
    assert gaps["note_length"] == pytest.approx(15.0)  # +15 % of the allowed 20
    assert gaps["long_notes"] == pytest.approx(0.5)  # half as many: |log2| = 1, the limit
    assert gaps["dissonant_steps"] == pytest.approx(3.0)  # 3 of the allowed 5 points
    assert choose.largest_gap(gaps) == pytest.approx(1.0)
    gaps["long_notes"] = 1.2
    assert choose.largest_gap(gaps) == pytest.approx(0.75)
    gaps["long_notes"] = 0.0  # no long note at all: no ratio to meet
    assert choose.largest_gap(gaps) == math.inf
