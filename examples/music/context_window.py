"""Sampling past the training length with a bounded context: each event is
conditioned on at most `window` events, as in training.

A model trained on windows of L events has never attended over more than L
positions. Sampled beyond L, it conditions on distances it never saw (a
relative-attention model shares one embedding for all distances >= L), and
the JSB model's samples drift into long held chords there (examples/music/
README.md, "Where the clashes and the held notes come from"). `sample_in_windows` samples in
windows instead: the primer is continued up to `window` events; then each
row is primed again with START and its last events (at least `window // 2`,
starting on a time step, as a training window starts) and continued, until
it is `length` events long or has sampled END.
"""

import numpy as np

from keras_attn.preprocessing import music


def window_seed(seed, index):
    """The seed of window `index`: `seed` itself for the first window (so a
    sample that fits one window is the same as without windows), then
    `(seed, index)`; `seed` is an int or a (B, 1) array, one per row."""
    if index == 0:
        return seed
    seed = np.asarray(seed)
    if seed.ndim == 0:
        return np.array([int(seed), index], np.int32)
    return np.concatenate([seed, np.full_like(seed, index)], axis=1).astype(np.int32)


def sample_in_windows(sample_window, primers, length, window, step, seed):
    """Samples each row to `length` events, every event seeing at most `window`.

    Args:
        sample_window: `(prompt (B, W) int32, seed) -> (B, window) tokens`,
            `keras_attn.generation.sample` with `max_length=window`: prompt,
            samples (END kept), then padding.
        primers: (B, P) int32, START then the primer's events, right-padded
            with 0; P < window.
        length: events per output row, START included.
        window: the most events (START included) any event is conditioned on.
        step: events per time step (4 for chorales, 1 for performances): a
            row is primed again from the start of a time step.
        seed: an int, or (B, 1) ints, one per row.

    Returns:
        (B, length) int32: START, the primer, the sampled events (the END
        where one was sampled), then padding; as `sample` returns them.
    """
    primers = np.asarray(primers, np.int32)
    keep = window // 2  # events kept as the next window's primer, at least
    width = max(primers.shape[1], keep + step + 1)
    bodies = [list(row[1 : (row != music.PAD_ID).sum()]) for row in primers]
    done = np.zeros(len(bodies), bool)
    index = 0
    while not done.all():
        prompts = np.zeros((len(bodies), width), np.int32)
        prompts[:, 0] = music.START_ID
        starts = []
        for b, body in enumerate(bodies):
            start = 0 if index == 0 else max(0, (len(body) - keep) // step * step)
            if not done[b]:
                prompts[b, 1 : 1 + len(body) - start] = body[start:]
            starts.append(start)
        tokens = np.asarray(sample_window(prompts, window_seed(seed, index)))
        for b, body in enumerate(bodies):
            if done[b]:
                continue
            new = tokens[b, 1 + len(body) - starts[b] :]
            new = new[new != music.PAD_ID][: length - 1 - len(body)]
            ended = np.flatnonzero(new == music.END_ID)
            if ended.size:
                new = new[: ended[0] + 1]
            body.extend(new.tolist())
            done[b] = bool(ended.size) or len(body) + 1 >= length
        index += 1
    out = np.zeros((len(bodies), length), np.int32)
    out[:, 0] = music.START_ID
    for b, body in enumerate(bodies):
        out[b, 1 : 1 + len(body)] = body
    return out
