"""Music data for the Music Transformer: MIDI <-> performance events, JSB Chorales.

Two representations, each with its own small vocabulary:

* **Performance events** (Oore et al. 2018, used by Huang et al. 2018 for the
  Piano-e-Competition): a MIDI performance becomes a stream of `NOTE_ON(pitch)`,
  `NOTE_OFF(pitch)`, `TIME_SHIFT(10 ms .. 1 s)` and `VELOCITY(bin)` events.
  Ids (`VOCABULARY_SIZE` = 391, size embeddings with it)::

      0          PAD_ID
      1          START_ID
      2          END_ID
      3   .. 130 NOTE_ON   pitch 0..127      (NOTE_ON_OFFSET + pitch)
      131 .. 258 NOTE_OFF  pitch 0..127      (NOTE_OFF_OFFSET + pitch)
      259 .. 358 TIME_SHIFT 10 ms .. 1000 ms (TIME_SHIFT_OFFSET + steps - 1)
      359 .. 390 VELOCITY  bin 0..31         (VELOCITY_OFFSET + bin)

  Times are quantized to 10 ms steps (rounded to the nearest step); a gap
  longer than 1 s is several `TIME_SHIFT`s. At one instant note-offs come
  before note-ons, each group by ascending pitch; a `VELOCITY` event precedes
  a note-on only when its bin differs from the current one. Velocities 1..127
  fall in 32 bins of width 4 (`bin = (velocity - 1) // 4`) and decode to the
  bin's lowest velocity `4 * bin + 1` - the same quantization as Magenta's
  performance encoding.

* **JSB Chorales** (Boulanger-Lewandowski et al. 2012; the 16th-note grid of
  Huang et al. 2017): four voices (soprano, alto, tenor, bass) per 16th note,
  serialized voice by voice per step (S, A, T, B, S, A, T, B, ...) as in the
  Music Transformer paper. Ids (`JSB_VOCABULARY_SIZE` = 132)::

      0 JSB_PAD_ID, 1 JSB_START_ID, 2 JSB_END_ID, 3 JSB_REST_ID,
      4 .. 131 MIDI pitch 0..127 (JSB_PITCH_OFFSET + pitch)

Where things are done (a design choice). MIDI parsing is done by `pretty_midi`
(Raffel & Ellis 2014, on top of `mido`): it turns ticks and tempo changes into
seconds, pairs note-on/note-off messages and groups notes by instrument, which
is everything the events need. We considered miditok's `MIDILike` tokenizer
(closest to the paper): its time shifts are measured in beats (ticks per beat),
not in absolute 10 ms steps, and its vocabulary layout differs, so it does not
give the paper's representation; Magenta's `note_seq` does, but pulls in a
large dependency tree. The event encoding itself is a few dozen lines here, on
top of pretty_midi's notes. The sustain pedal is applied before encoding, as in
the paper's data pipeline (a note released while CC64 >= 64 sounds until the
pedal is released; striking the same pitch again ends the earlier note).

Augmentation (Huang et al. 2018, section 5.2: transpositions of up to +-3
semitones, time stretches of up to +-5%) acts on event arrays, so a data set is
parsed and encoded once and augmented freshly for every example: `transpose`
shifts note ids exactly; `time_stretch` decodes to notes, scales their times
and re-encodes (times are quantized again to 10 ms).

Pure Python + NumPy; `pretty_midi` is imported on first use. No TensorFlow.

Reference:
    Huang et al. 2018, "Music Transformer: Generating Music with Long-Term
    Structure", sections 5.1-5.2. Oore et al. 2018, "This Time with Feeling:
    Learning Expressive Musical Performance", section 6.1.
"""

import io
import json
import os

import numpy as np

# --- Performance-event vocabulary ---------------------------------------
PAD_ID = 0
START_ID = 1
END_ID = 2
NUM_PITCHES = 128
NUM_TIME_SHIFTS = 100
NUM_VELOCITY_BINS = 32
STEPS_PER_SECOND = 100
"""Time resolution: one `TIME_SHIFT` step is 1 / STEPS_PER_SECOND = 10 ms."""
NOTE_ON_OFFSET = 3
NOTE_OFF_OFFSET = NOTE_ON_OFFSET + NUM_PITCHES  # 131
TIME_SHIFT_OFFSET = NOTE_OFF_OFFSET + NUM_PITCHES  # 259: TIME_SHIFT of 1 step
VELOCITY_OFFSET = TIME_SHIFT_OFFSET + NUM_TIME_SHIFTS  # 359
VOCABULARY_SIZE = VELOCITY_OFFSET + NUM_VELOCITY_BINS  # 391
VELOCITY_BIN_WIDTH = 4
DEFAULT_VELOCITY = 64
SUSTAIN_PEDAL_CONTROL = 64

# Transposition and time-stretch sets of Huang et al. 2018, section 5.2.
AUGMENTATION_SEMITONES = (-3, -2, -1, 0, 1, 2, 3)
AUGMENTATION_STRETCHES = (0.95, 0.975, 1.0, 1.025, 1.05)

# --- JSB Chorales vocabulary ---------------------------------------------
JSB_PAD_ID = 0
JSB_START_ID = 1
JSB_END_ID = 2
JSB_REST_ID = 3
JSB_PITCH_OFFSET = 4
JSB_VOCABULARY_SIZE = JSB_PITCH_OFFSET + NUM_PITCHES  # 132
JSB_NUM_VOICES = 4
JSB_VOICES = ("soprano", "alto", "tenor", "bass")
JSB_FILENAME = "Jsb16thSeparated.json"

_MIDI_HEADER = b"MThd"


def _pretty_midi():
    try:
        import pretty_midi
    except ImportError as error:  # pragma: no cover - depends on the install
        raise ImportError(
            "keras_attn.preprocessing.music needs `pretty_midi` to read and "
            "write MIDI. Install it with `pip install pretty_midi`."
        ) from error
    return pretty_midi


# --- Reading MIDI ---------------------------------------------------------
def load_midi(midi):
    """Reads a Standard MIDI File into a `pretty_midi.PrettyMIDI`, with clear errors.

    Args:
        midi: a path (str or `os.PathLike`), the file's bytes, or a
            `pretty_midi.PrettyMIDI` (returned as is).

    Returns:
        `pretty_midi.PrettyMIDI`.

    Raises:
        ValueError: if the file does not exist, is empty, is not a Standard
            MIDI File (no `MThd` header), is a type-2 MIDI file (independent
            sequences, which have no single timeline), or cannot be parsed.
        TypeError: if `midi` is none of the accepted types.

    Reference:
        Standard MIDI File specification 1.0 (header chunk: `MThd`, length 6,
        format 0/1/2, number of tracks, division).
    """
    pretty_midi = _pretty_midi()
    if isinstance(midi, pretty_midi.PrettyMIDI):
        return midi
    if isinstance(midi, (bytes, bytearray, memoryview)):
        data, source = bytes(midi), "the given bytes"
    elif isinstance(midi, (str, os.PathLike)):
        source = f"file {os.fspath(midi)!r}"
        if not os.path.isfile(midi):
            raise ValueError(
                f"Expected a path to a MIDI file. Received: {os.fspath(midi)!r}, "
                "which does not exist or is not a file. Check the path."
            )
        with open(midi, "rb") as handle:
            data = handle.read()
    else:
        raise TypeError(
            "`midi` must be a path, bytes or a pretty_midi.PrettyMIDI. "
            f"Received: an object of type {type(midi).__name__}."
        )
    if not data:
        raise ValueError(
            f"Expected a Standard MIDI File. Received: {source}, which is empty "
            "(0 bytes). Re-export or re-download the file."
        )
    if data[:4] != _MIDI_HEADER or len(data) < 14:
        raise ValueError(
            f"Expected a Standard MIDI File starting with b'MThd'. Received: "
            f"{source}, starting with {data[:4]!r} ({len(data)} bytes). It is not "
            "a MIDI file or it is corrupt; convert it to a .mid file first."
        )
    midi_format = int.from_bytes(data[8:10], "big")
    if midi_format == 2:
        raise ValueError(
            f"Expected a type-0 or type-1 MIDI file. Received: {source}, a "
            "type-2 MIDI file (independent single-track patterns with no "
            "shared timeline), which cannot be read as one performance. Export "
            "each pattern as its own type-0/1 file."
        )
    if midi_format not in (0, 1):
        raise ValueError(
            f"Expected a MIDI file of format 0 or 1. Received: {source} with "
            f"header format {midi_format}. The file is corrupt."
        )
    try:
        return pretty_midi.PrettyMIDI(io.BytesIO(data))
    except Exception as error:  # mido/pretty_midi raise many types on bad bytes.
        raise ValueError(
            f"Could not parse {source} as MIDI: {type(error).__name__}: {error}. "
            "The file is corrupt or truncated; re-export it."
        ) from error


def _sustain_ends(notes, control_changes):
    """Note ends after the sustain pedal: released keys sound until pedal up."""
    ends = np.array([note.end for note in notes], dtype=np.float64)
    pedal = sorted(
        (change.time, change.value >= 64)
        for change in control_changes
        if change.number == SUSTAIN_PEDAL_CONTROL
    )
    # Pedal-down intervals [down, up); a pedal never released holds to the end.
    downs, ups, down_time = [], [], None
    for time, is_down in pedal:
        if is_down and down_time is None:
            down_time = time
        elif not is_down and down_time is not None:
            downs.append(down_time)
            ups.append(time)
            down_time = None
    if down_time is not None:
        downs.append(down_time)
        ups.append(max(float(ends.max()), down_time))
    if not downs:
        return ends
    downs, ups = np.array(downs), np.array(ups)
    interval = np.searchsorted(downs, ends, side="right") - 1
    inside = (interval >= 0) & (ends < ups[np.maximum(interval, 0)])
    return np.where(inside, np.maximum(ends, ups[np.maximum(interval, 0)]), ends)


def _resolve_overlaps(starts, ends, pitches, velocities):
    """One sounding note per pitch, and at most one onset per pitch and 10 ms step.

    Notes of one pitch whose onsets round to the same 10 ms step become one
    note (earliest start, latest end, loudest velocity); then a note of a
    pitch ends at the next onset of that pitch if it sounds longer. Works on
    seconds or on integer steps. Returns arrays sorted by (pitch, start).
    """
    onset_steps = _to_steps(starts) if starts.dtype.kind == "f" else starts
    order = np.lexsort((starts, onset_steps, pitches))
    starts, ends, pitches = starts[order], ends[order], pitches[order]
    velocities, onset_steps = velocities[order], onset_steps[order]
    first = np.ones(len(pitches), bool)
    first[1:] = (pitches[1:] != pitches[:-1]) | (onset_steps[1:] != onset_steps[:-1])
    groups = np.flatnonzero(first)
    starts = starts[groups]  # sorted, so the first start is the earliest
    ends = np.maximum.reduceat(ends, groups)
    velocities = np.maximum.reduceat(velocities, groups)
    pitches = pitches[groups]
    same_pitch_next = pitches[:-1] == pitches[1:]
    ends[:-1] = np.where(same_pitch_next, np.minimum(ends[:-1], starts[1:]), ends[:-1])
    keep = ends > starts
    return starts[keep], ends[keep], pitches[keep], velocities[keep]


def midi_to_notes(midi, sustain=True):
    """The notes a performance-event sequence represents, in seconds.

    All non-drum instruments are merged into one piano part. With `sustain`,
    each instrument's sustain pedal (CC64 >= 64 is down) extends a note
    released while the pedal is down to the pedal's release. Then one note
    sounds per pitch at a time: notes of one pitch whose onsets round to the
    same 10 ms step (e.g. a melody doubled by the accompaniment) become one
    note (earliest start, latest end, loudest velocity), and a note struck
    again ends the earlier one at the new onset. Notes of zero duration are
    dropped. Encoding these notes and decoding the events gives them back
    with times within 10 ms (see `notes_to_events`).

    Args:
        midi: path, bytes or `pretty_midi.PrettyMIDI` (see `load_midi`).
        sustain: apply the sustain pedal (the paper's pipeline does).

    Returns:
        list of `pretty_midi.Note`, sorted by onset then pitch, times in
        seconds (not quantized).

    Raises:
        ValueError: as `load_midi`, or if the file has no notes outside drum
            tracks.

    Reference:
        Huang et al. 2018, section 5.2 (Piano-e-Competition pipeline with
        sustain); Oore et al. 2018, section 6.1.
    """
    pretty_midi = _pretty_midi()
    score = load_midi(midi)
    starts, ends, pitches, velocities = [], [], [], []
    for instrument in score.instruments:
        if instrument.is_drum or not instrument.notes:
            continue
        notes = instrument.notes
        starts.append([note.start for note in notes])
        if sustain:
            ends.append(_sustain_ends(notes, instrument.control_changes))
        else:
            ends.append([note.end for note in notes])
        pitches.append([note.pitch for note in notes])
        velocities.append([note.velocity for note in notes])
    if not starts:
        drums = sum(len(i.notes) for i in score.instruments if i.is_drum)
        raise ValueError(
            "Expected a MIDI file with notes on a non-drum instrument. Received: "
            f"{len(score.instruments)} instruments and no such notes"
            + (f" ({drums} drum notes, which are ignored)" if drums else "")
            + ". Pass a MIDI file that contains a (piano) part."
        )
    arrays = _resolve_overlaps(
        np.concatenate(starts).astype(np.float64),
        np.concatenate([np.asarray(e, np.float64) for e in ends]),
        np.concatenate(pitches).astype(np.int64),
        np.concatenate(velocities).astype(np.int64),
    )
    starts, ends, pitches, velocities = arrays
    order = np.lexsort((pitches, starts))
    return [
        pretty_midi.Note(int(velocities[i]), int(pitches[i]), float(starts[i]), float(ends[i]))
        for i in order
    ]


# --- Notes <-> events -----------------------------------------------------
def velocity_to_bin(velocity):
    """Quantizes MIDI velocities 1..127 to the 32 bins of the event vocabulary.

    Args:
        velocity: int or int array, MIDI velocity (0 is treated as 1, values
            above 127 as 127).

    Returns:
        int or int array in 0..31: `(velocity - 1) // 4`.

    Raises:
        Nothing: out-of-range velocities are clipped to 1..127.

    Reference:
        Oore et al. 2018, section 6.1 (32 velocity bins).
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
        ValueError: if a bin lies outside 0..31 (it would decode to an
            invalid MIDI velocity).

    Reference:
        Oore et al. 2018, section 6.1.
    """
    bins = np.asarray(velocity_bin)
    if bins.size and (bins.min() < 0 or bins.max() > NUM_VELOCITY_BINS - 1):
        raise ValueError(
            f"Velocity bins are 0..{NUM_VELOCITY_BINS - 1}. Received bins from "
            f"{bins.min()} to {bins.max()}: decode event ids with the "
            "vocabulary that encoded them."
        )
    velocities = bins * VELOCITY_BIN_WIDTH + 1
    return int(velocities) if velocities.ndim == 0 else velocities


def _to_steps(seconds):
    # Round half up, as Magenta's quantizer does.
    return np.floor(np.asarray(seconds, np.float64) * STEPS_PER_SECOND + 0.5).astype(np.int64)


def notes_to_events(notes, add_start_end=False):
    """Encodes notes as performance events (10 ms steps, 32 velocity bins).

    Onsets and offsets are rounded to the nearest 10 ms step (errors up to
    5 ms); a note that would round to zero length lasts one step, placed so
    that its onset and offset move by at most 10 ms. Notes of one pitch
    should not overlap (as `midi_to_notes` guarantees); otherwise the same
    rules are applied on
    the rounded times: one note per pitch and step (earliest start, latest
    end, loudest velocity), and a note sounding past the next onset of its
    pitch ends there.

    Args:
        notes: iterable of objects with `start`, `end` (seconds), `pitch`
            (0..127) and `velocity` (1..127), e.g. `pretty_midi.Note`.
        add_start_end: put `START_ID` first and `END_ID` last.

    Returns:
        np.int32 array (N,) of event ids in [0, VOCABULARY_SIZE).

    Raises:
        ValueError: if there are no notes, a pitch is outside 0..127, or a
            time is negative or not finite.

    Reference:
        Oore et al. 2018, section 6.1; Huang et al. 2018, section 5.2.
    """
    notes = list(notes)
    if not notes:
        raise ValueError(
            "Expected at least one note to encode. Received: no notes. Check "
            "that the MIDI file has notes outside drum tracks."
        )
    starts = np.array([n.start for n in notes], np.float64)
    ends = np.array([n.end for n in notes], np.float64)
    pitches = np.array([n.pitch for n in notes], np.int64)
    velocities = np.array([n.velocity for n in notes], np.int64)
    if pitches.min() < 0 or pitches.max() >= NUM_PITCHES:
        raise ValueError(
            "Expected note pitches in 0..127. Received: pitches from "
            f"{pitches.min()} to {pitches.max()}. Drop or transpose those notes."
        )
    if not (np.all(np.isfinite(starts)) and np.all(np.isfinite(ends))) or starts.min() < 0:
        raise ValueError(
            "Expected finite, non-negative note times in seconds. Received: "
            f"starts from {starts.min()} and ends up to {ends.max()}."
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
    # Event table: (step, kind 0 = off / 1 = on, pitch, velocity bin).
    times = np.concatenate([end_steps, start_steps])
    kinds = np.concatenate([np.zeros(count, np.int64), np.ones(count, np.int64)])
    event_pitches = np.concatenate([pitches, pitches])
    bins = np.concatenate([np.zeros(count, np.int64), velocity_to_bin(velocities)])
    order = np.lexsort((event_pitches, kinds, times))
    events = [START_ID] if add_start_end else []
    now, current_bin = 0, None
    for time, kind, pitch, velocity_bin in zip(
        times[order].tolist(), kinds[order].tolist(),
        event_pitches[order].tolist(), bins[order].tolist(),
    ):
        while time > now:
            shift = min(time - now, NUM_TIME_SHIFTS)
            events.append(TIME_SHIFT_OFFSET + shift - 1)
            now += shift
        if kind == 1:
            if velocity_bin != current_bin:
                events.append(VELOCITY_OFFSET + velocity_bin)
                current_bin = velocity_bin
            events.append(NOTE_ON_OFFSET + pitch)
        else:
            events.append(NOTE_OFF_OFFSET + pitch)
    if add_start_end:
        events.append(END_ID)
    return np.asarray(events, np.int32)


def _check_events(events):
    events = np.asarray(events)
    if events.ndim != 1 or not (
        np.issubdtype(events.dtype, np.integer) or events.size == 0
    ):
        raise ValueError(
            "Expected a 1-D array of integer event ids. Received: shape "
            f"{events.shape}, dtype {events.dtype}. Decode one sequence at a "
            "time (e.g. `events[0]` of a batch)."
        )
    if events.size and (events.min() < 0 or events.max() >= VOCABULARY_SIZE):
        raise ValueError(
            f"Expected event ids in [0, {VOCABULARY_SIZE}). Received: ids from "
            f"{events.min()} to {events.max()}. Were these produced with another "
            "vocabulary?"
        )
    return events.astype(np.int64)


def events_to_notes(events, default_velocity=DEFAULT_VELOCITY):
    """Decodes performance events to notes (seconds), tolerating bad sequences.

    `PAD_ID` and `START_ID` are skipped; `END_ID` ends the performance (later
    events are ignored). A `NOTE_OFF` without a sounding note is ignored; a
    `NOTE_ON` of a sounding pitch ends the earlier note first; a note still
    sounding at the end ends with the last event (one step after its onset
    if that is later). Notes of zero duration are dropped. Model samples are
    decoded without error.

    Args:
        events: 1-D integer array-like of ids in [0, VOCABULARY_SIZE).
        default_velocity: velocity of notes before any `VELOCITY` event.

    Returns:
        list of `pretty_midi.Note`, sorted by onset then pitch; times are
        multiples of 10 ms.

    Raises:
        ValueError: if `events` is not 1-D integer or has ids outside the
            vocabulary.

    Reference:
        Oore et al. 2018, section 6.1.
    """
    pretty_midi = _pretty_midi()
    events = _check_events(events)
    velocity = int(default_velocity)
    now = 0
    sounding = {}  # pitch -> (start step, velocity)
    notes = []  # (start step, end step, pitch, velocity)
    for event in events.tolist():
        if event == END_ID:
            break
        if event < NOTE_ON_OFFSET:
            continue
        if event < NOTE_OFF_OFFSET:
            pitch = event - NOTE_ON_OFFSET
            if pitch in sounding:
                start, vel = sounding.pop(pitch)
                notes.append((start, now, pitch, vel))
            sounding[pitch] = (now, velocity)
        elif event < TIME_SHIFT_OFFSET:
            pitch = event - NOTE_OFF_OFFSET
            if pitch in sounding:
                start, vel = sounding.pop(pitch)
                notes.append((start, now, pitch, vel))
        elif event < VELOCITY_OFFSET:
            now += event - TIME_SHIFT_OFFSET + 1
        else:
            velocity = bin_to_velocity(event - VELOCITY_OFFSET)
    for pitch, (start, vel) in sounding.items():
        notes.append((start, max(now, start + 1), pitch, vel))
    notes.sort(key=lambda note: (note[0], note[2]))
    return [
        pretty_midi.Note(vel, pitch, start / STEPS_PER_SECOND, end / STEPS_PER_SECOND)
        for start, end, pitch, vel in notes
        if end > start
    ]


def midi_to_events(midi, sustain=True, add_start_end=False):
    """Encodes a MIDI file as the Music Transformer's performance events.

    `midi_to_notes` (all non-drum instruments merged, sustain pedal applied)
    followed by `notes_to_events` (10 ms steps, 32 velocity bins).

    Args:
        midi: path (str or `os.PathLike`), bytes, or `pretty_midi.PrettyMIDI`.
        sustain: extend notes held by the sustain pedal (CC64 >= 64) to the
            pedal's release, as the paper's data pipeline does.
        add_start_end: put `START_ID` first and `END_ID` last (for training a
            model on whole pieces; random crops of long pieces usually go
            without them).

    Returns:
        np.int32 array (N,) of event ids in [0, VOCABULARY_SIZE).

    Raises:
        ValueError: for a missing, empty, non-MIDI, corrupt or type-2 file,
            or one without notes outside drum tracks.

    Example:
    >>> events = midi_to_events("examples/music/data/pop909/001.mid")
    >>> midi = events_to_midi(events)  # pitches, 10 ms times, velocity bins

    Reference:
        Huang et al. 2018, section 5.2; Oore et al. 2018, section 6.1.
    """
    return notes_to_events(midi_to_notes(midi, sustain=sustain), add_start_end=add_start_end)


def events_to_midi(events, program=0, resolution=500, tempo=120.0,
                   default_velocity=DEFAULT_VELOCITY):
    """Decodes performance events to a one-piano `pretty_midi.PrettyMIDI`.

    See `events_to_notes` for how special tokens and unmatched events are
    handled (skipped; `END_ID` stops decoding). The default `resolution` and
    `tempo` make one tick exactly 1 ms, so writing the result to a file keeps
    the 10 ms times exactly.

    Args:
        events: 1-D integer array-like of event ids.
        program: General MIDI program of the instrument (0 = acoustic grand).
        resolution: ticks per quarter note of the MIDI file.
        tempo: quarter notes per minute written in the file.
        default_velocity: velocity of notes before any `VELOCITY` event.

    Returns:
        `pretty_midi.PrettyMIDI` with one instrument named "Piano"; write it
        with `.write(path)`.

    Raises:
        ValueError: if `events` is not 1-D integer or has ids outside the
            vocabulary.

    Reference:
        Oore et al. 2018, section 6.1.
    """
    pretty_midi = _pretty_midi()
    notes = events_to_notes(events, default_velocity=default_velocity)
    score = pretty_midi.PrettyMIDI(resolution=resolution, initial_tempo=tempo)
    piano = pretty_midi.Instrument(program=program, name="Piano")
    piano.notes = notes
    score.instruments.append(piano)
    return score


def event_to_string(event):
    """A readable name for one event id, e.g. `"NOTE_ON(60)"`, `"TIME_SHIFT(250ms)"`.

    Args:
        event: int id in [0, VOCABULARY_SIZE).

    Returns:
        str.

    Raises:
        ValueError: if `event` is outside the vocabulary.

    Reference:
        Oore et al. 2018, section 6.1.
    """
    event = int(event)
    if event == PAD_ID:
        return "PAD"
    if event == START_ID:
        return "START"
    if event == END_ID:
        return "END"
    if NOTE_ON_OFFSET <= event < NOTE_OFF_OFFSET:
        return f"NOTE_ON({event - NOTE_ON_OFFSET})"
    if NOTE_OFF_OFFSET <= event < TIME_SHIFT_OFFSET:
        return f"NOTE_OFF({event - NOTE_OFF_OFFSET})"
    if TIME_SHIFT_OFFSET <= event < VELOCITY_OFFSET:
        return f"TIME_SHIFT({(event - TIME_SHIFT_OFFSET + 1) * 10}ms)"
    if VELOCITY_OFFSET <= event < VOCABULARY_SIZE:
        return f"VELOCITY({event - VELOCITY_OFFSET})"
    raise ValueError(
        f"Expected an event id in [0, {VOCABULARY_SIZE}). Received: {event}."
    )


# --- Augmentation on event arrays ----------------------------------------
def _split_special(events):
    """Returns (body without PAD/START/END, had START, had END)."""
    events = _check_events(events)
    has_start = events.size > 0 and events[0] == START_ID
    end_positions = np.flatnonzero(events == END_ID)
    if end_positions.size:
        events = events[: end_positions[0]]
    body = events[events > END_ID]
    return body, bool(has_start), bool(end_positions.size)


def _with_special(body, has_start, has_end):
    parts = ([START_ID] if has_start else []) + [body] + ([END_ID] if has_end else [])
    return np.concatenate([np.asarray(p, np.int64).reshape(-1) for p in parts]).astype(np.int32)


def transpose(events, semitones, out_of_range="drop"):
    """Transposes a performance-event sequence by whole semitones.

    Works on encoded events (encode once, augment per example): `NOTE_ON` /
    `NOTE_OFF` ids move by `semitones`, every other event is unchanged, so the
    result is exactly the encoding of the transposed notes.

    Args:
        events: 1-D integer array of event ids.
        semitones: int; the paper samples it from -3..3
            (`AUGMENTATION_SEMITONES`).
        out_of_range: what to do with notes pushed outside MIDI pitches
            0..127: `"drop"` removes them (the sequence is decoded, filtered
            and re-encoded, and PAD ids are removed) or `"error"` raises.

    Returns:
        np.int32 array of event ids; a leading `START_ID` and an `END_ID` are
        kept.

    Raises:
        ValueError: for an invalid `out_of_range` or non-integer `semitones`;
            with `out_of_range="error"` if a note leaves 0..127; with `"drop"`
            if no note is left.

    Reference:
        Huang et al. 2018, section 5.2 (transpositions of up to 3 semitones).
    """
    if out_of_range not in ("drop", "error"):
        raise ValueError(
            '`out_of_range` must be "drop" or "error". '
            f"Received: out_of_range={out_of_range!r}."
        )
    if int(semitones) != semitones:
        raise ValueError(
            f"`semitones` must be a whole number. Received: semitones={semitones!r}."
        )
    semitones = int(semitones)
    events = _check_events(events)
    is_note = (events >= NOTE_ON_OFFSET) & (events < TIME_SHIFT_OFFSET)
    pitches = (events - NOTE_ON_OFFSET) % NUM_PITCHES + semitones
    outside = is_note & ((pitches < 0) | (pitches >= NUM_PITCHES))
    if not outside.any():
        return np.where(is_note, events + semitones, events).astype(np.int32)
    if out_of_range == "error":
        low = int(pitches[is_note].min())
        high = int(pitches[is_note].max())
        raise ValueError(
            f"Transposing by {semitones} semitones puts pitches from {low} to "
            f"{high}, outside MIDI's 0..127. Transpose less, or pass "
            'out_of_range="drop" to remove those notes.'
        )
    body, has_start, has_end = _split_special(events)
    notes = [n for n in events_to_notes(body) if 0 <= n.pitch + semitones < NUM_PITCHES]
    if not notes:
        raise ValueError(
            f"Transposing by {semitones} semitones leaves no note in 0..127. "
            "Transpose less."
        )
    for note in notes:
        note.pitch += semitones
    return _with_special(notes_to_events(notes), has_start, has_end)


def time_stretch(events, factor):
    """Stretches a performance-event sequence in time by `factor`.

    Decodes to notes, multiplies every onset and offset by `factor` (> 1 is
    slower: longer notes and gaps) and re-encodes; times are rounded again to
    10 ms, so each time is within 5 ms of the exact stretch of the input's
    times. PAD ids are removed; a leading `START_ID` and an `END_ID` are kept.

    Args:
        events: 1-D integer array of event ids.
        factor: positive float; the paper samples it from
            0.95, 0.975, 1.0, 1.025, 1.05 (`AUGMENTATION_STRETCHES`).

    Returns:
        np.int32 array of event ids.

    Raises:
        ValueError: if `factor` is not a positive finite number, or `events`
            hold no note.

    Reference:
        Huang et al. 2018, section 5.2 (time stretches of up to 5%).
    """
    if not (np.isfinite(factor) and factor > 0):
        raise ValueError(
            f"`factor` must be a positive number. Received: factor={factor!r}."
        )
    body, has_start, has_end = _split_special(events)
    notes = events_to_notes(body)
    if not notes:
        raise ValueError(
            "Expected events with at least one complete note to stretch. "
            f"Received: {len(body)} events without a note."
        )
    for note in notes:
        note.start *= factor
        note.end *= factor
    return _with_special(notes_to_events(notes), has_start, has_end)


def augment(events, rng):
    """Random transposition and time stretch, as in the paper's training.

    Samples `semitones` from `AUGMENTATION_SEMITONES` and a factor from
    `AUGMENTATION_STRETCHES`, then applies `time_stretch` and `transpose`
    (notes pushed outside 0..127 are dropped).

    Args:
        events: 1-D integer array of event ids.
        rng: `np.random.Generator` (e.g. `np.random.default_rng(seed)`).

    Returns:
        np.int32 array of event ids.

    Raises:
        ValueError: as `transpose` and `time_stretch`.

    Reference:
        Huang et al. 2018, section 5.2.
    """
    semitones = int(rng.choice(AUGMENTATION_SEMITONES))
    factor = float(rng.choice(AUGMENTATION_STRETCHES))
    if factor != 1.0:
        events = time_stretch(events, factor)
    return transpose(events, semitones, out_of_range="drop")


# --- JSB Chorales -----------------------------------------------------------
def _check_grid(grid):
    grid = np.asarray(grid)
    if grid.ndim != 2 or grid.shape[1] != JSB_NUM_VOICES or grid.shape[0] == 0:
        raise ValueError(
            "Expected a chorale grid of shape (steps, 4): soprano, alto, tenor, "
            f"bass per 16th note. Received: shape {grid.shape}."
        )
    if not np.issubdtype(grid.dtype, np.integer):
        if not np.all(np.equal(np.mod(grid, 1), 0)):
            raise ValueError(
                "Expected integer MIDI pitches (-1 = rest) in the chorale grid. "
                f"Received: dtype {grid.dtype} with fractional values."
            )
    grid = grid.astype(np.int64)
    if grid.min() < -1 or grid.max() >= NUM_PITCHES:
        raise ValueError(
            "Expected MIDI pitches 0..127 or -1 (rest) in the chorale grid. "
            f"Received: values from {grid.min()} to {grid.max()}."
        )
    return grid


def load_jsb_chorales(path, split="train"):
    """Loads the JSB Chorales 16th-note grids with four separate voices.

    Args:
        path: `Jsb16thSeparated.json`, or a folder holding it (e.g.
            `examples/music/data` or `/work/shared/data/jsb_chorales`).
        split: a key of the file: `"train"` (229 chorales) or `"valid"` (76).

    Returns:
        list of np.int32 arrays (steps, 4), columns soprano, alto, tenor,
        bass, each a MIDI pitch or -1 for a rest, one row per 16th note.

    Raises:
        ValueError: if the file is missing or not the expected JSON, or
            `split` is not in it.

    Reference:
        Boulanger-Lewandowski et al. 2012 (split); Huang et al. 2017, Coconet
        (16th-note grid with separated voices); Huang et al. 2018, section 4.1.
    """
    path = os.fspath(path)
    if os.path.isdir(path):
        path = os.path.join(path, JSB_FILENAME)
    if not os.path.isfile(path):
        raise ValueError(
            f"Expected the JSB Chorales file {JSB_FILENAME}. Received: path "
            f"{path!r}, which does not exist. Pass the file or its folder."
        )
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(
            f"Expected {path!r} to be JSON ({JSB_FILENAME}). Could not parse "
            f"it: {error}."
        ) from error
    if not isinstance(data, dict) or split not in data:
        available = sorted(data) if isinstance(data, dict) else type(data).__name__
        raise ValueError(
            f"Expected `split` to be one of {available}. Received: split={split!r}."
        )
    return [_check_grid(chorale).astype(np.int32) for chorale in data[split]]


def chorale_to_tokens(grid, add_start_end=False):
    """Serializes a chorale grid voice by voice per step: S, A, T, B, S, A, ...

    Args:
        grid: int array (steps, 4) of MIDI pitches, -1 for a rest.
        add_start_end: put `JSB_START_ID` first and `JSB_END_ID` last.

    Returns:
        np.int32 array (4 * steps [+ 2],): `JSB_PITCH_OFFSET + pitch`, or
        `JSB_REST_ID` for a rest.

    Raises:
        ValueError: if `grid` is not (steps, 4) with values in -1..127.

    Reference:
        Huang et al. 2018, section 4.1 (JSB Chorales serialized in a
        grid-like ordering, voice by voice per time step).
    """
    grid = _check_grid(grid)
    tokens = np.where(grid < 0, JSB_REST_ID, grid + JSB_PITCH_OFFSET).reshape(-1)
    if add_start_end:
        tokens = np.concatenate([[JSB_START_ID], tokens, [JSB_END_ID]])
    return tokens.astype(np.int32)


def tokens_to_chorale(tokens):
    """Inverse of `chorale_to_tokens`.

    `JSB_PAD_ID` and `JSB_START_ID` are skipped and `JSB_END_ID` ends the
    chorale; what is left is read four tokens (S, A, T, B) per 16th note.

    Args:
        tokens: 1-D integer array of ids in [0, JSB_VOCABULARY_SIZE).

    Returns:
        np.int32 array (steps, 4) of MIDI pitches, -1 for a rest.

    Raises:
        ValueError: if `tokens` is not 1-D integer, has ids outside the
            vocabulary, or the tokens before `END` (specials removed) are not
            a positive multiple of 4.

    Reference:
        Huang et al. 2018, section 4.1.
    """
    tokens = np.asarray(tokens)
    if tokens.ndim != 1 or not np.issubdtype(tokens.dtype, np.integer):
        raise ValueError(
            "Expected a 1-D array of integer chorale tokens. Received: shape "
            f"{tokens.shape}, dtype {tokens.dtype}."
        )
    if tokens.size and (tokens.min() < 0 or tokens.max() >= JSB_VOCABULARY_SIZE):
        raise ValueError(
            f"Expected chorale tokens in [0, {JSB_VOCABULARY_SIZE}). Received: ids "
            f"from {tokens.min()} to {tokens.max()}."
        )
    ends = np.flatnonzero(tokens == JSB_END_ID)
    if ends.size:
        tokens = tokens[: ends[0]]
    tokens = tokens[tokens >= JSB_REST_ID].astype(np.int64)
    if tokens.size == 0 or tokens.size % JSB_NUM_VOICES:
        raise ValueError(
            "Expected a positive multiple of 4 tokens (S, A, T, B per step) "
            f"besides PAD/START/END. Received: {tokens.size}. Generate or crop "
            "a multiple of 4 tokens."
        )
    grid = np.where(tokens == JSB_REST_ID, -1, tokens - JSB_PITCH_OFFSET)
    return grid.reshape(-1, JSB_NUM_VOICES).astype(np.int32)


def chorale_to_midi(grid, tempo=120.0, program=0, velocity=80):
    """Writes a chorale grid as MIDI: one instrument per voice.

    Each step is a 16th note: `60 / tempo / 4` seconds (0.125 s at 120
    quarter notes per minute). The grid does not mark re-struck notes, so a
    pitch held by a voice over consecutive steps becomes one long note (a
    repeated note in the score becomes one held note); a rest (-1) ends it.

    Args:
        grid: int array (steps, 4), soprano, alto, tenor, bass; -1 = rest.
        tempo: quarter notes per minute.
        program: General MIDI program of all four voices (0 = piano).
        velocity: velocity of every note (the data has none).

    Returns:
        `pretty_midi.PrettyMIDI` with instruments "Soprano", "Alto", "Tenor",
        "Bass" in that order.

    Raises:
        ValueError: if `grid` is not (steps, 4) with values in -1..127, or
            `tempo` is not positive.

    Reference:
        Huang et al. 2017 (Coconet, 16th-note grid); Huang et al. 2018,
        section 4.1.
    """
    pretty_midi = _pretty_midi()
    grid = _check_grid(grid)
    if not (np.isfinite(tempo) and tempo > 0):
        raise ValueError(f"`tempo` must be a positive number. Received: tempo={tempo!r}.")
    step = 60.0 / tempo / 4
    # 4 ticks per 16th note keep every onset exact in the written file.
    score = pretty_midi.PrettyMIDI(resolution=480, initial_tempo=tempo)
    for voice, name in enumerate(JSB_VOICES):
        instrument = pretty_midi.Instrument(program=program, name=name.capitalize())
        line = grid[:, voice]
        # A note starts where the pitch changes (or after a rest) and runs
        # until the next change.
        changes = np.flatnonzero(np.diff(line, prepend=-2, append=-2) != 0)
        for begin, end in zip(changes[:-1], changes[1:]):
            if line[begin] >= 0:
                instrument.notes.append(
                    pretty_midi.Note(int(velocity), int(line[begin]), begin * step, end * step)
                )
        score.instruments.append(instrument)
    return score
