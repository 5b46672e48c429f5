"""Transposition and time stretch of encoded performance events (Huang et al. 2018, 5.2)."""

import math

import numpy as np

from keras_attn import checks
from keras_attn.preprocessing.performance_events import (
    END_ID,
    NOTE_ON_OFFSET,
    NUM_PITCHES,
    START_ID,
    STEPS_PER_SECOND,
    TIME_SHIFT_OFFSET,
    VOCABULARY_SIZE,
    _check_ids,
    _decode,
    _encode,
)

# Transposition and time-stretch sets of Huang et al. 2018, section 5.2.
AUGMENTATION_SEMITONES = (-3, -2, -1, 0, 1, 2, 3)
AUGMENTATION_STRETCHES = (0.95, 0.975, 1.0, 1.025, 1.05)


# --- Augmentation on event arrays ----------------------------------------
def _with_special(events, body):
    """`body` with the leading `START_ID` and the `END_ID` of the checked `events` they replace."""
    start = [START_ID] if events.size and events[0] == START_ID else []
    end = [END_ID] if (events == END_ID).any() else []
    return np.concatenate([start, body, end]).astype(np.int32)


def transpose(events, semitones, out_of_range="drop"):
    """Transposes a performance-event sequence by whole semitones.

    Args:
        events: 1-D integer array of event ids.
        semitones: whole number (the paper: -3..3, `AUGMENTATION_SEMITONES`).
        out_of_range: `"drop"` removes notes pushed outside 0..127, `"error"` raises.

    Returns:
        np.int32 array of event ids (a leading `START_ID` and an `END_ID` are kept).

    Raises:
        ValueError: for a bad argument, a note leaving 0..127 (`"error"`) or no note left.

    Example:
    >>> import numpy as np
    >>> from keras_attn.preprocessing.music import event_to_string, transpose
    >>> events = np.array([378, 63, 308, 191])  # VELOCITY(19), NOTE_ON(60), 500 ms, NOTE_OFF(60)
    >>> [event_to_string(event) for event in transpose(events, 2)]
    ['VELOCITY(19)', 'NOTE_ON(62)', 'TIME_SHIFT(500ms)', 'NOTE_OFF(62)']
    """
    ok = out_of_range in ("drop", "error")
    checks.require(ok, "out_of_range", out_of_range, '"drop" or "error"')
    ok = checks.is_number(semitones) and float(semitones).is_integer()
    checks.require(ok, "semitones", semitones, "a whole number")
    events, semitones = _check_ids(events, VOCABULARY_SIZE), int(semitones)
    is_note = (events >= NOTE_ON_OFFSET) & (events < TIME_SHIFT_OFFSET)
    pitches = (events - NOTE_ON_OFFSET) % NUM_PITCHES + semitones
    outside = is_note & ((pitches < 0) | (pitches >= NUM_PITCHES))
    if not outside.any():
        return np.where(is_note, events + semitones, events).astype(np.int32)
    if out_of_range == "error":
        low = int(pitches[is_note].min())
        high = int(pitches[is_note].max())
        fix = 'Transpose less, or pass out_of_range="drop".'
        raise ValueError(f"{semitones} semitones put pitches from {low} to {high}. {fix}")
    starts, ends, pitches, velocities = _decode(events)  # PAD and START decode to nothing
    inside = (pitches + semitones >= 0) & (pitches + semitones < NUM_PITCHES)
    if not inside.any():
        raise ValueError(f"Transposing by {semitones} semitones leaves no note in 0..127.")
    moved = _encode(
        starts[inside] / STEPS_PER_SECOND,
        ends[inside] / STEPS_PER_SECOND,
        pitches[inside] + semitones,
        velocities[inside],
    )
    return _with_special(events, moved)


def time_stretch(events, factor):
    """Multiplies note times by `factor` (> 1 is slower), rounded again to 10 ms.

    Args:
        events: 1-D integer array of event ids.
        factor: positive float (the paper: 0.95 .. 1.05, `AUGMENTATION_STRETCHES`).

    Returns:
        np.int32 array of event ids.

    Raises:
        ValueError: if `factor` is not a positive finite number, or `events` hold no note.

    Example:
    >>> import numpy as np
    >>> from keras_attn.preprocessing.music import event_to_string, time_stretch
    >>> events = np.array([378, 63, 358, 191])  # VELOCITY(19), NOTE_ON(60), 1 s, NOTE_OFF(60)
    >>> [event_to_string(event) for event in time_stretch(events, 1.05)]
    ['VELOCITY(19)', 'NOTE_ON(60)', 'TIME_SHIFT(1000ms)', 'TIME_SHIFT(50ms)', 'NOTE_OFF(60)']
    """
    ok = checks.is_number(factor) and 0 < factor < math.inf
    checks.require(ok, "factor", factor, "a positive finite number")
    events = _check_ids(events, VOCABULARY_SIZE)
    starts, ends, pitches, velocities = _decode(events)
    if not len(pitches):
        raise ValueError(f"Expected events with a note. Received: {len(events)} events, no note.")
    # Seconds first, then the factor: the same arithmetic as stretching
    # decoded `Note`s, so a stretch is reproducible to the last bit.
    stretched = _encode(
        starts / STEPS_PER_SECOND * factor, ends / STEPS_PER_SECOND * factor, pitches, velocities
    )
    return _with_special(events, stretched)


def augment(events, rng):
    """Random `time_stretch` and `transpose` (dropping notes out of range), as in the paper.

    Args:
        events: 1-D integer array of event ids.
        rng: `np.random.Generator` (e.g. `np.random.default_rng(seed)`).

    Returns:
        np.int32 array of event ids.

    Raises:
        ValueError: if `rng` is not a `np.random.Generator`, and as `transpose`.

    Example:
    >>> import numpy as np
    >>> from keras_attn.preprocessing.music import augment, events_to_notes
    >>> events = np.array([378, 63, 308, 191])  # VELOCITY(19), NOTE_ON(60), 500 ms, NOTE_OFF(60)
    >>> (note,) = events_to_notes(augment(events, np.random.default_rng(0)))
    >>> 57 <= note.pitch <= 63, 0.47 <= note.end - note.start <= 0.53
    (True, True)
    """
    checks.require(isinstance(rng, np.random.Generator), "rng", rng, "a `np.random.Generator`")
    semitones = int(rng.choice(AUGMENTATION_SEMITONES))
    factor = float(rng.choice(AUGMENTATION_STRETCHES))
    if factor != 1.0:
        events = time_stretch(events, factor)
    return transpose(events, semitones, out_of_range="drop")
