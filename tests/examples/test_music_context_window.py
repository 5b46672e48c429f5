"""examples/music/context_window.py: sampling past the training length in
windows, each event conditioned on at most `window` events."""

import numpy as np

from keras_attn.preprocessing import music
from tests.examples.scripts import load_script


def _counting_sampler(window, calls, end_after=None):
    """A stand-in for `sample` with max_length=window: each new event is the
    one before plus 1 (so a row counts on only if it is primed with its own
    last events), row 1 samples END once it reaches `end_after`."""

    def sample_window(prompts, seed):
        calls.append((prompts.copy(), np.asarray(seed).tolist()))
        out = np.zeros((len(prompts), window), np.int32)
        for b, prompt in enumerate(prompts):
            n = int((prompt != music.PAD_ID).sum())
            out[b, :n] = prompt[:n]
            for i in range(n, window):
                if b == 1 and end_after is not None and out[b, i - 1] >= end_after:
                    out[b, i] = music.END_ID
                    break
                out[b, i] = out[b, i - 1] + 1
        return out

    return sample_window


def test_rows_continue_from_their_own_last_events_a_time_step_at_a_time():
    windows = load_script("music/context_window.py")
    calls = []
    # Two rows of START + 8 events (2 time steps of 4), 40 events each, windows of 16.
    primers = np.zeros((2, 9), np.int32)
    primers[:, 0] = music.START_ID
    primers[0, 1:] = np.arange(10, 18)
    primers[1, 1:] = np.arange(50, 58)
    tokens = windows.sample_in_windows(
        _counting_sampler(16, calls), primers, 40, 16, step=4, seed=7
    )
    assert tokens.shape == (2, 40) and (tokens[:, 0] == music.START_ID).all()
    assert tokens[0, 1:].tolist() == list(range(10, 49))
    assert tokens[1, 1:].tolist() == list(range(50, 89))
    # First window: the primers as given (padded to the widest later prompt,
    # 8 + 4 + 1), 15 events (7 sampled). Then START and the events from the
    # last time step start that keeps at least 8: 11 of the 15, 19, ... (from
    # events 4, 8, ...), and 4 sampled, up to 39 events: 6 more windows.
    prompts = [c[0] for c in calls]
    assert prompts[0][:, :9].tolist() == primers.tolist() and prompts[0].shape == (2, 13)
    kept = [int((p[0] != 0).sum()) - 1 for p in prompts[1:]]
    assert kept == [11] * 6
    assert prompts[1][0, 1:12].tolist() == list(range(14, 25))  # events 4..14
    assert prompts[2][1, 1:12].tolist() == list(range(58, 69))  # events 8..18
    # The first window samples with the seed itself, later ones with (seed, window).
    assert [c[1] for c in calls] == [7, [7, 1], [7, 2], [7, 3], [7, 4], [7, 5], [7, 6]]


def test_a_row_that_samples_end_stops_and_keeps_its_end():
    windows = load_script("music/context_window.py")
    calls = []
    primers = np.array([[music.START_ID, 10, 11, 12, 13], [music.START_ID, 50, 51, 52, 53]])
    tokens = windows.sample_in_windows(
        _counting_sampler(12, calls, end_after=60),
        primers,
        30,
        12,
        step=4,
        seed=np.array([[3], [4]]),
    )
    assert tokens[0, 1:].tolist() == list(range(10, 39))
    assert tokens[1, 1:14].tolist() == list(range(50, 61)) + [music.END_ID, 0]
    assert (tokens[1, 13:] == 0).all()
    # Per-row seeds get the window index as a second word.
    assert calls[1][1] == [[3, 1], [4, 1]]
    # Once row 1 ended, its prompts are START only.
    assert all(int((c[0][1] != 0).sum()) == 1 for c in calls[2:])


def test_one_window_is_one_call_with_the_seed_as_given():
    windows = load_script("music/context_window.py")
    calls = []
    primers = np.array([[music.START_ID, 10, 11, 12, 13]])
    tokens = windows.sample_in_windows(_counting_sampler(20, calls), primers, 20, 20, 4, 5)
    assert len(calls) == 1 and calls[0][1] == 5
    assert tokens[0, 1:].tolist() == list(range(10, 29))
