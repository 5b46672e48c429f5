"""Note statistics that tell by number what a listener hears first: whether
sampled music moves like the training music (generate.py prints them beside
the validation data's).

JSB chorales: note length, notes held a bar or longer, steps where a voice
moves, steps with a second, seventh or tritone between two voices.
Performances: notes per second, note duration, notes sounding at once, notes
longer than `LONG_NOTE_SECONDS`.
"""

import numpy as np

from keras_attn.preprocessing import music

# Where Magenta's Performance RNN cuts the notes its samples leave hanging
# (generate.py's default --max_note_duration), and "long" in the statistics.
LONG_NOTE_SECONDS = 5.0


def before_end(tokens):
    """The tokens of a row before its first END (END is 2 in both tasks)."""
    end = np.flatnonzero(tokens == music.END_ID)
    return tokens[: end[0]] if end.size else tokens


def chorale_body(tokens):
    """A JSB row's chorale tokens: before END, PAD/START dropped, cut to
    whole steps (soprano, alto, tenor, bass)."""
    body = before_end(tokens)
    body = body[body >= music.JSB_REST_ID]
    return body[: len(body) - len(body) % music.JSB_NUM_VOICES]


def performance_seconds(events):
    """Seconds a row of performance events spans: its time shifts before END."""
    events = before_end(events)
    shifts = events[(events >= music.TIME_SHIFT_OFFSET) & (events < music.VELOCITY_OFFSET)]
    return float(np.sum(shifts - music.TIME_SHIFT_OFFSET + 1)) / music.STEPS_PER_SECOND


# Note statistics that tell by number what a listener hears first: whether
# the samples move like the training music. Each: (label, unit, scale).
STATISTICS = {
    "jsb": {
        "note_length": ("note length", "16th notes", 1),
        "long_notes": ("notes held a bar or longer", "%", 100),
        "moving_steps": ("steps where a voice moves", "%", 100),
        "dissonant_steps": ("steps with a second, 7th or tritone", "%", 100),
    },
    "performance": {
        "notes_per_second": ("notes per second", "", 1),
        "note_duration": ("note duration", "s", 1),
        "polyphony": ("notes sounding at once", "", 1),
        "long_notes": (f"notes longer than {LONG_NOTE_SECONDS:g} s", "%", 100),
    },
}
BAR = 16  # 16th notes in a 4/4 bar
DISSONANT_INTERVAL_CLASSES = (1, 2, 6)  # seconds and sevenths (folded), the tritone


def _chorale_statistics(rows):
    lengths, moves, steps, dissonant, sounding = [], 0, 0, 0, 0
    for row in rows:
        body = chorale_body(row)
        if len(body) < 2 * music.JSB_NUM_VOICES:
            continue
        grid = music.tokens_to_chorale(body)
        moved = np.any(grid[1:] != grid[:-1], axis=1)
        moves, steps = moves + int(moved.sum()), steps + len(moved)
        # Interval classes between every two sounding voices of a step.
        pairs = np.abs(grid[:, :, None] - grid[:, None, :]) % 12
        both = (grid[:, :, None] >= 0) & (grid[:, None, :] >= 0)
        clash = np.isin(np.minimum(pairs, 12 - pairs), DISSONANT_INTERVAL_CLASSES) & both
        dissonant += int(clash.any(axis=(1, 2)).sum())
        sounding += int(((grid >= 0).sum(axis=1) >= 2).sum())
        for voice in grid.T:
            bounds = np.concatenate(
                [[0], np.flatnonzero(voice[1:] != voice[:-1]) + 1, [len(voice)]]
            )
            runs = np.diff(bounds)
            lengths.extend(runs[voice[bounds[:-1]] >= 0].tolist())
    if not lengths:
        return None
    lengths = np.asarray(lengths)
    return {
        "note_length": float(lengths.mean()),
        "long_notes": float(np.mean(lengths >= BAR)),
        "moving_steps": moves / max(steps, 1),
        "dissonant_steps": dissonant / max(sounding, 1),
        "notes": int(lengths.size),
    }


def _performance_statistics(rows, max_note_duration=None):
    durations, seconds, long_notes = [], 0.0, 0
    long_steps = LONG_NOTE_SECONDS * music.STEPS_PER_SECOND
    for row in rows:
        seconds += performance_seconds(row)
        # Both decodings stop at END; the long notes are counted as sampled.
        exact = np.array([n.end - n.start for n in music.events_to_notes(row)])
        long_notes += int(np.sum(np.round(exact * music.STEPS_PER_SECOND) > long_steps))
        durations.extend(
            note.end - note.start
            for note in music.events_to_notes(row, max_note_duration=max_note_duration)
        )
    if not durations or seconds <= 0:
        return None
    return {
        "notes_per_second": len(durations) / seconds,
        "note_duration": float(np.mean(durations)),
        "polyphony": float(np.sum(durations)) / seconds,
        "long_notes": long_notes / len(durations),
        "notes": len(durations),
    }


def music_statistics(task, rows, max_note_duration=None):
    """Note statistics of token rows, pooled over the rows.

    Args:
        task: "jsb" or "performance".
        rows: iterable of 1-D int token arrays; PAD/START are skipped and END
            ends a row.

    Returns:
        dict with the keys of `STATISTICS[task]` and "notes" (how many notes
        they count), or None when the rows hold no note. JSB: mean note length
        (16th notes; a pitch held over consecutive steps is one note), the
        share of notes held a bar (16 steps) or longer, the share of steps
        where some voice moves, and the share of steps with two or more
        voices sounding that hold a second, seventh or tritone between two
        of them. Performance: notes per second, mean note duration (s),
        notes sounding at once averaged over time (these two of the notes
        cut at `max_note_duration` seconds, as the .mid files hold them), and
        the share of notes longer than `LONG_NOTE_SECONDS` before any cut.
    """
    rows = [np.asarray(row) for row in rows]
    if task == "jsb":
        return _chorale_statistics(rows)
    return _performance_statistics(rows, max_note_duration)


def validation_windows(pieces, length, step, limit=256):
    """Up to `limit` (None: all) non-overlapping windows of `length` tokens (a
    multiple of `step`) from the starts of `pieces` (validation or training
    pieces): the reference the samples are held against."""
    length -= length % step
    windows = [
        piece[begin : begin + length]
        for piece in pieces
        for begin in range(0, len(piece) - length + 1, length)
    ]
    return windows[:limit] if windows else list(pieces)
