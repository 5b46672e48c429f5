"""Performance events (Oore et al. 2018): the vocabulary, and notes <-> events.

`keras_attn.preprocessing.music` re-exports every public name; layout in
docs/guides/preprocessing.md.

Reference:
    Oore et al. 2018, "This Time with Feeling: Learning Expressive Musical
    Performance", section 6.1; Huang et al. 2018, "Music Transformer",
    section 5.2.
"""

import collections
import math
import numbers

import numpy as np

from keras_attn import checks

# --- Performance-event vocabulary ---------------------------------------
PAD_ID = 0
START_ID = 1
END_ID = 2
NUM_PITCHES = 128
NUM_TIME_SHIFTS = 100
NUM_VELOCITY_BINS = 32
STEPS_PER_SECOND = 100
"""Time resolution: one `TIME_SHIFT` step is 1 / STEPS_PER_SECOND = 10 ms."""
MAX_SECONDS = 1e6
"""Note times encoded at most (11.6 days): one `TIME_SHIFT` per second of
silence, so a later time asks for more events than memory holds."""
NOTE_ON_OFFSET = 3
NOTE_OFF_OFFSET = NOTE_ON_OFFSET + NUM_PITCHES  # 131
TIME_SHIFT_OFFSET = NOTE_OFF_OFFSET + NUM_PITCHES  # 259: TIME_SHIFT of 1 step
VELOCITY_OFFSET = TIME_SHIFT_OFFSET + NUM_TIME_SHIFTS  # 359
VOCABULARY_SIZE = VELOCITY_OFFSET + NUM_VELOCITY_BINS  # 391
VELOCITY_BIN_WIDTH = 4
DEFAULT_VELOCITY = 64
SUSTAIN_PEDAL_CONTROL = 64

Note = collections.namedtuple("Note", ["velocity", "pitch", "start", "end"])
Note.__doc__ = """One note of a performance: MIDI velocity and pitch, onset and offset in seconds.

The fields are in the order of `pretty_midi.Note(velocity, pitch, start,
end)`, so code that reads pretty_midi's notes reads these unchanged; unlike
them, a `Note` is immutable (`note._replace(pitch=62)` makes a changed copy).
`notes_to_events` accepts any objects with these four attributes.

Args:
    velocity: int, MIDI velocity 1..127.
    pitch: int, MIDI pitch 0..127.
    start: float, onset in seconds.
    end: float, offset in seconds.

Example:
>>> from keras_attn.preprocessing.music import Note, event_to_string, notes_to_events
>>> note = Note(velocity=80, pitch=60, start=0.0, end=0.5)
>>> [event_to_string(e) for e in notes_to_events([note])]
['VELOCITY(19)', 'NOTE_ON(60)', 'TIME_SHIFT(500ms)', 'NOTE_OFF(60)']
"""


def _resolve_overlaps(starts, ends, pitches, velocities):
    """Merges notes of a pitch that overlap or share an onset step (guide: preprocessing.md)."""
    onset_steps = _to_steps(starts) if starts.dtype.kind == "f" else starts
    order = np.lexsort((starts, onset_steps, pitches))
    starts, ends, pitches = starts[order], ends[order], pitches[order]
    velocities, onset_steps = velocities[order], onset_steps[order]
    first = (np.diff(pitches, prepend=-1) != 0) | (np.diff(onset_steps, prepend=-1) != 0)
    groups = np.flatnonzero(first)  # each group: one pitch, one onset step
    starts = starts[groups]  # sorted, so the first start is the earliest
    ends = np.maximum.reduceat(ends, groups)
    velocities = np.maximum.reduceat(velocities, groups)
    pitches = pitches[groups]
    same_pitch_next = pitches[:-1] == pitches[1:]
    ends[:-1] = np.where(same_pitch_next, np.minimum(ends[:-1], starts[1:]), ends[:-1])
    keep = ends > starts
    return starts[keep], ends[keep], pitches[keep], velocities[keep]


def _notes_from_arrays(starts, ends, pitches, velocities):
    columns = zip(starts.tolist(), ends.tolist(), pitches.tolist(), velocities.tolist())
    return [Note(velocity, pitch, start, end) for start, end, pitch, velocity in columns]


# --- Notes <-> events -----------------------------------------------------
def velocity_to_bin(velocity):
    """Quantizes MIDI velocities 1..127 to the 32 bins of the event vocabulary.

    Args:
        velocity: int or int array, MIDI velocity (clipped to 1..127).

    Returns:
        int or int array in 0..31: `(velocity - 1) // 4`.

    Example:
    >>> import numpy as np
    >>> from keras_attn.preprocessing.music import velocity_to_bin
    >>> velocity_to_bin(np.array([1, 5, 64, 127])).tolist()
    [0, 1, 15, 31]
    """
    velocity = np.clip(np.asarray(velocity), 1, 127)
    bins = (velocity - 1) // VELOCITY_BIN_WIDTH
    return int(bins) if bins.ndim == 0 else bins


def bin_to_velocity(velocity_bin):
    """The MIDI velocity a velocity bin decodes to: the bin's lowest, `4 * bin + 1`.

    Args:
        velocity_bin: int or int array in 0..31.

    Returns:
        int or int array in 1..125.

    Raises:
        ValueError: if a bin lies outside 0..31.

    Example:
    >>> from keras_attn.preprocessing.music import bin_to_velocity
    >>> bin_to_velocity(15)
    61
    """
    bins = np.asarray(velocity_bin)
    in_range = not bins.size or 0 <= bins.min() <= bins.max() < NUM_VELOCITY_BINS
    checks.require(in_range, "velocity_bin", velocity_bin, "velocity bins in 0..31")
    velocities = bins * VELOCITY_BIN_WIDTH + 1
    return int(velocities) if velocities.ndim == 0 else velocities


def _to_steps(seconds):
    # Round half up, as Magenta's quantizer does.
    return np.floor(np.asarray(seconds, np.float64) * STEPS_PER_SECOND + 0.5).astype(np.int64)


def notes_to_events(notes, add_start_end=False):
    """Encodes notes as performance events (10 ms steps, 32 velocity bins; guide: preprocessing).

    Args:
        notes: iterable of `Note`s (`start`, `end` in seconds, `pitch`, `velocity`).
        add_start_end: put `START_ID` first and `END_ID` last.

    Returns:
        np.int32 array (N,) of event ids in [0, VOCABULARY_SIZE).

    Raises:
        ValueError: if there are no notes, or a pitch, velocity or time is out of range.

    Example:
    >>> from keras_attn.preprocessing.music import Note, notes_to_events
    >>> notes_to_events([Note(velocity=80, pitch=60, start=0.0, end=0.5)])
    array([378,  63, 308, 191], dtype=int32)
    """
    notes, fields = list(notes), ("start", "end", "pitch", "velocity")
    missing = [n for n in notes if not all(hasattr(n, f) for f in fields)] if notes else [notes]
    if missing:
        raise ValueError(
            f"Expected `Note`s (start, end, pitch, velocity). Received: {missing[0]!r}."
        )
    starts, ends, pitches, velocities = (
        np.array([getattr(n, f) for n in notes], np.float64) for f in fields
    )
    for plural, values, limits in (
        ("pitches", pitches, " in 0..127"),
        ("velocities", velocities, ""),
    ):
        # Whole numbers (int64 would make a pitch of 60.7 60); pitches in 0..127.
        bad = [v for v in values.tolist() if not v.is_integer() or limits and not 0 <= v <= 127]
        if bad:
            raise ValueError(f"Expected whole-number note {plural}{limits}. Received: {bad[:3]}.")
    backwards = ends < starts
    if backwards.any():
        i = np.argmax(backwards)
        raise ValueError(
            f"Expected notes to end at or after their start. Received: {np.sum(backwards)} "
            f"ending before, the first from {starts[i]} s to {ends[i]} s."
        )
    return _encode(
        starts, ends, pitches.astype(np.int64), velocities.astype(np.int64), add_start_end
    )


def _encode(starts, ends, pitches, velocities, add_start_end=False):
    """`notes_to_events` on arrays of checked notes (times in seconds, still range-checked)."""
    # Not `not a < b`: NaN is refused. One TIME_SHIFT per second: 1e12 s asked for terabytes.
    if not (starts.min() >= 0 and ends.max() < MAX_SECONDS):
        raise ValueError(
            f"Expected note times in [0 s, {MAX_SECONDS:.0e} s). Received: {starts.min()} s to "
            f"{ends.max()} s."
        )
    start_steps = _to_steps(starts)
    end_steps = _to_steps(ends)
    # A note shorter than a step gets one step, on the side of its midpoint,
    # so that neither its onset nor its offset moves by more than 10 ms.
    too_short = end_steps <= start_steps
    late = (starts + ends) * (STEPS_PER_SECOND / 2) >= start_steps
    end_steps = np.where(too_short & late, start_steps + 1, end_steps)
    start_steps = np.where(too_short & ~late, np.maximum(end_steps - 1, 0), start_steps)
    end_steps = np.where(too_short & ~late, start_steps + 1, end_steps)
    # Rounding may make two notes of one pitch share an onset step or overlap.
    start_steps, end_steps, pitches, velocities = _resolve_overlaps(
        start_steps, end_steps, pitches, velocities
    )
    count = len(pitches)
    # Event table, one row per note-on and note-off: (step, kind 0 = off /
    # 1 = on, pitch, velocity bin), in the order the events are written.
    times = np.concatenate([end_steps, start_steps])
    kinds = np.concatenate([np.zeros(count, np.int64), np.ones(count, np.int64)])
    event_pitches = np.concatenate([pitches, pitches])
    bins = np.concatenate([np.zeros(count, np.int64), velocity_to_bin(velocities)])
    order = np.lexsort((event_pitches, kinds, times))
    times, kinds, event_pitches, bins = (a[order] for a in (times, kinds, event_pitches, bins))
    # Each row writes: the time shifts from the previous row's step (full
    # 1 s shifts, then the remainder), a VELOCITY if it is a note-on whose
    # bin differs from the previous note-on's, then its NOTE_ON / NOTE_OFF.
    gaps = np.diff(times, prepend=0)
    full_shifts, remainders = np.divmod(gaps, NUM_TIME_SHIFTS)
    on_rows = np.flatnonzero(kinds == 1)
    new_bin = np.zeros(len(times), np.int64)
    new_bin[on_rows] = np.diff(bins[on_rows], prepend=-1) != 0
    per_row = full_shifts + (remainders > 0) + new_bin + 1
    row = np.repeat(np.arange(len(times)), per_row)
    position = np.arange(len(row)) - np.repeat(np.cumsum(per_row) - per_row, per_row)
    full_shifts, remainders, new_bin = full_shifts[row], remainders[row], new_bin[row]
    shifts = full_shifts + (remainders > 0)
    events = np.select(
        [position < full_shifts, position < shifts, position < shifts + new_bin],
        [
            TIME_SHIFT_OFFSET + NUM_TIME_SHIFTS - 1,
            TIME_SHIFT_OFFSET + remainders - 1,
            VELOCITY_OFFSET + bins[row],
        ],
        np.where(kinds[row] == 1, NOTE_ON_OFFSET, NOTE_OFF_OFFSET) + event_pitches[row],
    )
    if add_start_end:
        events = np.concatenate([[START_ID], events, [END_ID]])
    return events.astype(np.int32)


def _check_ids(ids, size, what="event"):
    """`ids` as a 1-D int64 array of ids in [0, size)."""
    ids = np.asarray(ids)
    integer = ids.ndim == 1 and (ids.dtype.kind in "iu" or not ids.size)
    if not integer or ids.size and not 0 <= ids.min() <= ids.max() < size:
        received = f"ids from {ids.min()} to {ids.max()}" if integer else f"{ids.dtype} {ids.shape}"
        raise ValueError(f"Expected 1-D integer {what} ids in [0, {size}). Received: {received}.")
    return ids.astype(np.int64)


def _check_decoding(events, default_velocity, max_note_duration):
    """The arguments of `events_to_notes`; `max_note_duration` as 10 ms steps (or None)."""
    velocity, limit = default_velocity, max_note_duration
    # 200 wrapped around to -56 in a MIDI file, 0 wrote silent notes.
    checks.require(
        checks.is_int(velocity, 1, 127), "default_velocity", velocity, "an int in 1..127"
    )
    finite = limit is None or checks.is_number(limit, 0.01) and limit < math.inf
    checks.require(finite, "max_note_duration", limit, "None or a finite number of seconds >= 0.01")
    return _check_ids(events, VOCABULARY_SIZE), int(velocity), limit


def _decode(events, default_velocity=DEFAULT_VELOCITY, max_note_duration=None):
    """`events_to_notes` on checked arguments: (starts, ends, pitches, velocities) in steps."""
    end_positions = np.flatnonzero(events == END_ID)
    events = events[: end_positions[0]] if end_positions.size else events
    is_shift = (events >= TIME_SHIFT_OFFSET) & (events < VELOCITY_OFFSET)
    # The step at each event: the time shifts up to it.
    now = np.cumsum(np.where(is_shift, events - TIME_SHIFT_OFFSET + 1, 0))
    last = int(now[-1]) if now.size else 0
    # The velocity at each event: the last VELOCITY event before it.
    is_velocity = events >= VELOCITY_OFFSET
    latest = np.maximum.accumulate(np.where(is_velocity, np.arange(len(events)), -1))
    velocity = np.where(
        latest >= 0,
        bin_to_velocity(np.where(is_velocity, events - VELOCITY_OFFSET, 0))[np.maximum(latest, 0)],
        int(default_velocity),
    )
    # A NOTE_ON sounds until the next NOTE_ON or NOTE_OFF of its pitch (a
    # NOTE_OFF with no sounding note has no effect), or until the end.
    is_note = (events >= NOTE_ON_OFFSET) & (events < TIME_SHIFT_OFFSET)
    positions = np.flatnonzero(is_note)
    pitch = (events[positions] - NOTE_ON_OFFSET) % NUM_PITCHES
    positions = positions[np.argsort(pitch, kind="stable")]
    pitch = np.sort(pitch, kind="stable")
    is_on = events[positions] < NOTE_OFF_OFFSET
    has_next = np.append(pitch[1:] == pitch[:-1], False)
    starts = now[positions]
    next_time = np.append(starts[1:], 0)
    ends = np.where(has_next, next_time, np.maximum(last, starts + 1))
    if max_note_duration is not None:  # In float64 and clipped: np.int8(5) * 100 wrapped around,
        limit = max_note_duration  # float(10**400) overflowed; 1e12 s is no cut.
        limit = int(limit) if isinstance(limit, numbers.Integral) else float(limit)
        ends = np.minimum(ends, starts + round(min(limit, 1e12) * STEPS_PER_SECOND))
    keep = is_on & (ends > starts)
    starts, ends, pitch = starts[keep], ends[keep], pitch[keep]
    velocities = velocity[positions[keep]]
    order = np.lexsort((pitch, starts))
    return starts[order], ends[order], pitch[order], velocities[order]


def events_to_notes(events, default_velocity=DEFAULT_VELOCITY, max_note_duration=None):
    """Decodes performance events to notes, tolerating bad sequences (guide: preprocessing).

    Args:
        events: 1-D integer array-like of ids in [0, VOCABULARY_SIZE).
        default_velocity: velocity of notes before any `VELOCITY` event.
        max_note_duration: None, or the longest a note may sound, in seconds (>= 0.01).

    Returns:
        list of `Note`, sorted by onset then pitch; times are multiples of 10 ms.

    Raises:
        ValueError: for bad `events`, `default_velocity` or `max_note_duration`.

    Example:
    >>> from keras_attn.preprocessing.music import events_to_notes
    >>> events_to_notes([378, 63, 308, 191])  # VELOCITY(19) NOTE_ON(60) 500 ms NOTE_OFF(60)
    [Note(velocity=77, pitch=60, start=0.0, end=0.5)]
    """
    starts, ends, pitches, velocities = _decode(
        *_check_decoding(events, default_velocity, max_note_duration)
    )
    return _notes_from_arrays(
        starts / STEPS_PER_SECOND, ends / STEPS_PER_SECOND, pitches, velocities
    )


def event_to_string(event):
    """A readable name for one event id, e.g. `"NOTE_ON(60)"`, `"TIME_SHIFT(250ms)"`.

    Args:
        event: int id in [0, VOCABULARY_SIZE).

    Returns:
        str.

    Raises:
        ValueError: if `event` is outside the vocabulary.

    Example:
    >>> from keras_attn.preprocessing.music import event_to_string
    >>> [event_to_string(event) for event in (0, 1, 2, 63, 191, 283, 378)]
    ['PAD', 'START', 'END', 'NOTE_ON(60)', 'NOTE_OFF(60)', 'TIME_SHIFT(250ms)', 'VELOCITY(19)']
    """
    event = int(event)
    special = {PAD_ID: "PAD", START_ID: "START", END_ID: "END"}
    if event in special:
        return special[event]
    if NOTE_ON_OFFSET <= event < NOTE_OFF_OFFSET:
        return f"NOTE_ON({event - NOTE_ON_OFFSET})"
    if NOTE_OFF_OFFSET <= event < TIME_SHIFT_OFFSET:
        return f"NOTE_OFF({event - NOTE_OFF_OFFSET})"
    if TIME_SHIFT_OFFSET <= event < VELOCITY_OFFSET:
        return f"TIME_SHIFT({(event - TIME_SHIFT_OFFSET + 1) * 10}ms)"
    if VELOCITY_OFFSET <= event < VOCABULARY_SIZE:
        return f"VELOCITY({event - VELOCITY_OFFSET})"
    raise ValueError(f"Expected an event id in [0, {VOCABULARY_SIZE}). Received: {event}.")
