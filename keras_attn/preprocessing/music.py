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

Where things are done (a design choice). MIDI files are read and written by
`symusic` (a C++ MIDI library on PyPI, the parser under miditok): it pairs
note-on/note-off messages and splits tracks by channel and program, two
orders of magnitude faster than `pretty_midi` (0.3 ms instead of ~80 ms for a
POP909 song). Ticks become seconds here, in float64, with the tempo map
computed the way `pretty_midi` computes it (symusic's own seconds are
float32, which would move a time lying on a 5 ms rounding boundary to the
other 10 ms step). So the events are those of the earlier pretty_midi-based
encoder (a test pins them on every shipped file), with one difference: when a
key is struck again on a channel while its previous note still sounds,
pretty_midi ends both notes at the first note-off, while symusic pairs
note-offs first in, first out, so the later note keeps its own note-off (in
POP909, 163 of 1.5 million notes, in 7 of the 909 songs). We considered
miditok's `MIDILike` tokenizer (closest to the paper): its time shifts are
measured in beats (ticks per beat), not in absolute 10 ms steps, and its
vocabulary layout differs, so it does not give the paper's representation;
Magenta's `note_seq` does, but pulls in a large dependency tree. The event
encoding itself is a few dozen lines of NumPy here. The sustain pedal is
applied before encoding, as in the paper's data pipeline (a note released
while CC64 >= 64 sounds until the pedal is released; striking the same pitch
again ends the earlier note).

Augmentation (Huang et al. 2018, section 5.2: transpositions of up to +-3
semitones, time stretches of up to +-5%) acts on event arrays, so a data set is
parsed and encoded once and augmented freshly for every example: `transpose`
shifts note ids exactly; `time_stretch` decodes to notes, scales their times
and re-encodes (times are quantized again to 10 ms).

Pure Python + NumPy; `symusic` is imported on first use. No TensorFlow.

Reference:
    Huang et al. 2018, "Music Transformer: Generating Music with Long-Term
    Structure", sections 5.1-5.2. Oore et al. 2018, "This Time with Feeling:
    Learning Expressive Musical Performance", section 6.1.
"""

import collections
import json
import math
import numbers
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
# The tempo of a MIDI file without a tempo event (Standard MIDI File 1.0).
_DEFAULT_QUARTERS_PER_MINUTE = 120.0

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


def _symusic():
    try:
        import symusic
    except ImportError as error:  # pragma: no cover - depends on the install
        raise ImportError(
            "keras_attn.preprocessing.music needs `symusic` to read and write "
            "MIDI. Install it with `pip install symusic`."
        ) from error
    return symusic


# --- Reading MIDI ---------------------------------------------------------
def load_midi(midi):
    """Reads a Standard MIDI File into a `symusic.Score` (in ticks), with clear errors.

    Args:
        midi: a path (str or `os.PathLike`), the file's bytes, or a
            `symusic.Score` (returned in ticks: one in quarters or seconds
            is converted with `score.to("tick")`).

    Returns:
        `symusic.Score` with time unit "tick".

    Raises:
        ValueError: if the file does not exist, is empty, is not a Standard
            MIDI File (no `MThd` header), is a type-2 MIDI file (independent
            sequences, which have no single timeline), or cannot be parsed.
        TypeError: if `midi` is none of the accepted types.

    Example:
    >>> import os, tempfile
    >>> from keras_attn.preprocessing.music import chorale_to_midi, load_midi
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     path = os.path.join(folder, "chord.mid")
    ...     chorale_to_midi([[72, 67, 64, 48]]).dump_midi(path)  # one 16th-note chord
    ...     score = load_midi(path)
    >>> score.ticks_per_quarter, [track.name for track in score.tracks]
    (480, ['Soprano', 'Alto', 'Tenor', 'Bass'])
    >>> [(note.time, note.duration, note.pitch) for note in score.tracks[0].notes]
    [(0, 120, 72)]

    Reference:
        Standard MIDI File specification 1.0 (header chunk: `MThd`, length 6,
        format 0/1/2, number of tracks, division).
    """
    symusic = _symusic()
    if isinstance(midi, symusic.Score):
        return midi if isinstance(midi.ttype, symusic.core.Tick) else midi.to("tick")
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
            "`midi` must be a path, bytes or a symusic.Score. "
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
        return symusic.Score.from_midi(data)
    except Exception as error:  # symusic raises RuntimeError (and others) on bad bytes.
        raise ValueError(
            f"Could not parse {source} as MIDI: {type(error).__name__}: {error}. "
            "The file is corrupt or truncated; re-export it."
        ) from error


def _tick_seconds(score):
    """A function mapping tick arrays of `score` to seconds (float64).

    The tempo map is built as pretty_midi builds it (the events must not
    change with the parser): 120 quarter notes per minute until the first
    tempo event, the last of several tempo events at tick 0 wins, a repeated
    tempo is skipped, and the time of a tick is the time where its tempo
    segment starts plus `seconds_per_tick * (tick - segment_start)`. (symusic
    collects tempo events from every track, pretty_midi from the first only,
    where type-1 files must hold them.)
    """
    resolution = score.ticks_per_quarter
    if resolution <= 0:  # a corrupt header's division of 0: ZeroDivisionError below
        raise ValueError(
            "Expected a MIDI score with a positive number of ticks per quarter note. "
            f"Received: ticks_per_quarter={resolution}. The file's header is corrupt."
        )
    scales = [(0, 60.0 / (_DEFAULT_QUARTERS_PER_MINUTE * resolution))]
    tempos = score.tempos.numpy()
    bad = tempos["mspq"][~(tempos["mspq"] > 0)] if len(tempos) else []
    if len(bad):  # a tempo of 0 quarter notes per minute put every note at one time
        raise ValueError(
            "Expected MIDI tempo events of a positive number of microseconds per quarter "
            f"note. Received: {bad[0]}. The file is corrupt, or a tempo of 0 was written."
        )
    for tick, mspq in zip(tempos["time"].tolist(), tempos["mspq"].tolist()):
        scale = 60.0 / ((6e7 / mspq) * resolution)
        if tick == 0:
            scales = [(0, scale)]
        elif scale != scales[-1][1]:
            scales.append((tick, scale))
    segment_ticks = np.array([tick for tick, _ in scales], np.int64)
    segment_scales = np.array([scale for _, scale in scales], np.float64)
    segment_seconds = np.zeros(len(scales), np.float64)
    for k in range(1, len(scales)):
        segment_seconds[k] = segment_seconds[k - 1] + segment_scales[k - 1] * float(
            segment_ticks[k] - segment_ticks[k - 1]
        )

    def seconds(ticks):
        ticks = np.asarray(ticks, np.int64)
        segment = np.searchsorted(segment_ticks, ticks, side="right") - 1
        return segment_seconds[segment] + segment_scales[segment] * (ticks - segment_ticks[segment])

    return seconds


def _sustain_ends(ends, pedal_times, pedal_values):
    """Note ends after the sustain pedal: released keys sound until pedal up."""
    # Time order; at one instant a release comes before a press.
    is_down = np.asarray(pedal_values) >= 64
    order = np.lexsort((is_down, pedal_times))
    # Pedal-down intervals [down, up); a pedal never released holds to the end.
    downs, ups, down_time = [], [], None
    for time, down in zip(np.asarray(pedal_times)[order].tolist(), is_down[order].tolist()):
        if down and down_time is None:
            down_time = time
        elif not down and down_time is not None:
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


def _midi_note_arrays(midi, sustain):
    """`midi_to_notes` as arrays (starts, ends in seconds; pitches, velocities), by onset."""
    score = load_midi(midi)
    seconds = _tick_seconds(score)
    starts, ends, pitches, velocities = [], [], [], []
    drums = 0
    for track in score.tracks:
        notes = track.notes.numpy()
        if track.is_drum:
            drums += len(notes["time"])
            continue
        # A note-off at the tick of its note-on: pretty_midi (whose events
        # these must match) drops such a note, symusic keeps it with
        # duration 0; it would not sound anyway.
        audible = notes["duration"] > 0
        if not audible.any():
            continue
        onset_ticks = notes["time"][audible].astype(np.int64)
        track_ends = seconds(onset_ticks + notes["duration"][audible])
        if sustain:
            controls = track.controls.numpy()
            pedal = controls["number"] == SUSTAIN_PEDAL_CONTROL
            track_ends = _sustain_ends(
                track_ends, seconds(controls["time"][pedal]), controls["value"][pedal]
            )
        starts.append(seconds(onset_ticks))
        ends.append(track_ends)
        pitches.append(notes["pitch"][audible].astype(np.int64))
        velocities.append(notes["velocity"][audible].astype(np.int64))
    if not starts:
        raise ValueError(
            "Expected a MIDI file with notes on a non-drum instrument. Received: "
            f"{len(score.tracks)} tracks and no such notes"
            + (f" ({drums} drum notes, which are ignored)" if drums else "")
            + ". Pass a MIDI file that contains a (piano) part."
        )
    starts, ends, pitches, velocities = _resolve_overlaps(
        np.concatenate(starts), np.concatenate(ends),
        np.concatenate(pitches), np.concatenate(velocities),
    )
    order = np.lexsort((pitches, starts))
    return starts[order], ends[order], pitches[order], velocities[order]


def midi_to_notes(midi, sustain=True):
    """The notes a performance-event sequence represents, in seconds.

    All non-drum tracks are merged into one piano part. With `sustain`,
    each track's sustain pedal (CC64 >= 64 is down) extends a note
    released while the pedal is down to the pedal's release. Then one note
    sounds per pitch at a time: notes of one pitch whose onsets round to the
    same 10 ms step (e.g. a melody doubled by the accompaniment) become one
    note (earliest start, latest end, loudest velocity), and a note struck
    again ends the earlier one at the new onset. Notes of zero duration are
    dropped. Encoding these notes and decoding the events gives them back
    with times within 10 ms (see `notes_to_events`).

    Args:
        midi: path, bytes or `symusic.Score` (see `load_midi`).
        sustain: apply the sustain pedal (the paper's pipeline does).

    Returns:
        list of `Note`, sorted by onset then pitch, times in seconds (not
        quantized).

    Raises:
        ValueError: as `load_midi`, or if the file has no notes outside drum
            tracks.
        TypeError: if `midi` is not a path, bytes or `symusic.Score`.

    Example:
    >>> from keras_attn.preprocessing.music import chorale_to_midi, midi_to_notes
    >>> midi = chorale_to_midi([[72, 67, 64, 48], [72, -1, 64, 48]]).dumps_midi()
    >>> notes = midi_to_notes(midi)  # 16th notes of 0.125 s at 120 quarters per minute
    >>> notes[0]
    Note(velocity=80, pitch=48, start=0.0, end=0.25)
    >>> [(note.pitch, note.end) for note in notes]
    [(48, 0.25), (64, 0.25), (67, 0.125), (72, 0.25)]

    Reference:
        Huang et al. 2018, section 5.2 (Piano-e-Competition pipeline with
        sustain); Oore et al. 2018, section 6.1.
    """
    return _notes_from_arrays(*_midi_note_arrays(midi, sustain))


def _notes_from_arrays(starts, ends, pitches, velocities):
    return [
        Note(velocity, pitch, start, end)
        for start, end, pitch, velocity in zip(
            starts.tolist(), ends.tolist(), pitches.tolist(), velocities.tolist()
        )
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

    Example:
    >>> import numpy as np
    >>> from keras_attn.preprocessing.music import velocity_to_bin
    >>> velocity_to_bin(64)
    15
    >>> velocity_to_bin(np.array([0, 1, 4, 5, 127, 200])).tolist()
    [0, 0, 0, 1, 31, 31]

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

    Example:
    >>> import numpy as np
    >>> from keras_attn.preprocessing.music import bin_to_velocity, velocity_to_bin
    >>> bin_to_velocity(velocity_to_bin(64))  # bin 15 decodes to its lowest velocity
    61
    >>> bin_to_velocity(np.array([0, 1, 31])).tolist()
    [1, 5, 125]

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
    rules are applied on the rounded times: one note per pitch and step
    (earliest start, latest end, loudest velocity), and a note sounding past
    the next onset of its pitch ends there.

    Args:
        notes: iterable of objects with `start`, `end` (seconds), `pitch`
            (0..127) and `velocity` (1..127), e.g. `Note`.
        add_start_end: put `START_ID` first and `END_ID` last.

    Returns:
        np.int32 array (N,) of event ids in [0, VOCABULARY_SIZE).

    Raises:
        ValueError: if there are no notes, a pitch or velocity is not a
            whole number, a pitch is outside 0..127, a time is negative,
            not finite or past `MAX_SECONDS`, or a note ends before it
            starts.

    Example:
    >>> from keras_attn.preprocessing.music import Note, notes_to_events
    >>> notes_to_events([Note(velocity=80, pitch=60, start=0.0, end=0.5)])
    array([378,  63, 308, 191], dtype=int32)

    Reference:
        Oore et al. 2018, section 6.1; Huang et al. 2018, section 5.2.
    """
    notes = list(notes)
    if not notes:
        raise ValueError(
            "Expected at least one note to encode. Received: no notes. Check "
            "that the MIDI file has notes outside drum tracks."
        )
    fields = ("start", "end", "pitch", "velocity")
    missing = [n for n in notes if not all(hasattr(n, f) for f in fields)]
    if missing:
        raise ValueError(
            "Expected notes with `start`, `end`, `pitch` and `velocity` attributes, e.g. "
            f"`music.Note(velocity, pitch, start, end)`. Received: {missing[0]!r}."
        )
    for field, plural in (("pitch", "pitches"), ("velocity", "velocities")):
        fractional = [v for v in (getattr(n, field) for n in notes) if not float(v).is_integer()]
        if fractional:  # np.int64 would truncate 60.7 to 60
            raise ValueError(
                f"Expected whole-number note {plural}. Received: {fractional[:3]}."
            )
    return _encode(
        np.array([n.start for n in notes], np.float64),
        np.array([n.end for n in notes], np.float64),
        np.array([n.pitch for n in notes], np.int64),
        np.array([n.velocity for n in notes], np.int64),
        add_start_end,
    )


def _encode(starts, ends, pitches, velocities, add_start_end=False):
    """`notes_to_events` on arrays: times in seconds, at least one note."""
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
    backwards = np.flatnonzero(ends < starts)
    if backwards.size:
        i = backwards[0]
        raise ValueError(
            "Expected every note to end at or after its start. Received: "
            f"{backwards.size} notes ending before they start, the first from "
            f"{starts[i]} s to {ends[i]} s (pitch {pitches[i]})."
        )
    if ends.max() >= MAX_SECONDS:
        # One TIME_SHIFT per second of silence: 1e12 s asked for terabytes.
        raise ValueError(
            f"Expected note times below {MAX_SECONDS:.0e} s ({MAX_SECONDS / 86400:.1f} days): "
            "performance events take one TIME_SHIFT per second. Received: a note "
            f"ending at {ends.max()} s."
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
    times, kinds, event_pitches, bins = times[order], kinds[order], event_pitches[order], bins[order]
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
    events = np.where(
        position < full_shifts,
        TIME_SHIFT_OFFSET + NUM_TIME_SHIFTS - 1,
        np.where(
            position < full_shifts + (remainders > 0),
            TIME_SHIFT_OFFSET + remainders - 1,
            np.where(
                position < full_shifts + (remainders > 0) + new_bin,
                VELOCITY_OFFSET + bins[row],
                np.where(kinds[row] == 1, NOTE_ON_OFFSET, NOTE_OFF_OFFSET) + event_pitches[row],
            ),
        ),
    )
    if add_start_end:
        events = np.concatenate([[START_ID], events, [END_ID]])
    return events.astype(np.int32)


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


def _check_velocity(name, value):
    """A MIDI note velocity: an int in 1..127 (0 would mean note-off)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 1 <= value <= 127:
        raise ValueError(
            f"Expected `{name}` to be a MIDI velocity, an int in 1..127. Received: "
            f"{name}={value!r}."
        )
    return int(value)


def _max_note_steps(max_note_duration):
    """`max_note_duration` (seconds, or None) as a whole number of 10 ms steps."""
    if max_note_duration is None:
        return None
    seconds = math.nan
    if not isinstance(max_note_duration, bool) and isinstance(max_note_duration, numbers.Real):
        try:  # in float64 first: np.int8(5) * 100 would wrap around
            seconds = float(max_note_duration)
        except OverflowError:  # an int beyond float64: no cut if positive
            seconds = 1e12 if max_note_duration > 0 else -math.inf
    if not math.isfinite(seconds) or seconds < 1 / STEPS_PER_SECOND:
        raise ValueError(
            "Expected `max_note_duration` to be None (notes end only at their NOTE_OFF) or "
            f"a finite number of seconds >= {1 / STEPS_PER_SECOND} (one time step), e.g. 5.0. "
            f"Received: max_note_duration={max_note_duration!r}."
        )
    # Longer than any performance (about 30,000 years) is no cut at all, and
    # the step count stays well inside int64.
    return int(round(min(seconds, 1e12) * STEPS_PER_SECOND))


def _decode(events, default_velocity=DEFAULT_VELOCITY, max_note_duration=None):
    """`events_to_notes` as arrays: (start steps, end steps, pitches, velocities), by onset."""
    default_velocity = _check_velocity("default_velocity", default_velocity)
    max_steps = _max_note_steps(max_note_duration)
    events = _check_events(events)
    end_positions = np.flatnonzero(events == END_ID)
    if end_positions.size:
        events = events[: end_positions[0]]
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
    if max_steps is not None:
        ends = np.minimum(ends, starts + max_steps)
    keep = is_on & (ends > starts)
    starts, ends, pitch = starts[keep], ends[keep], pitch[keep]
    velocities = velocity[positions[keep]]
    order = np.lexsort((pitch, starts))
    return starts[order], ends[order], pitch[order], velocities[order]


def events_to_notes(events, default_velocity=DEFAULT_VELOCITY, max_note_duration=None):
    """Decodes performance events to notes (seconds), tolerating bad sequences.

    `PAD_ID` and `START_ID` are skipped; `END_ID` ends the performance (later
    events are ignored). A `NOTE_OFF` without a sounding note is ignored; a
    `NOTE_ON` of a sounding pitch ends the earlier note first; a note still
    sounding at the end ends with the last event (one step after its onset
    if that is later). Notes of zero duration are dropped. Model samples are
    decoded without error.

    A model can leave notes hanging: it samples a `NOTE_ON` and never the
    matching `NOTE_OFF`, and the note sounds to the end of the sample.
    `max_note_duration` ends every note at most that many seconds after its
    onset (Magenta's Performance RNN cuts generated notes at 5 s). The
    default, None, decodes the events exactly (encoding and decoding a
    performance gives its notes back).

    Args:
        events: 1-D integer array-like of ids in [0, VOCABULARY_SIZE).
        default_velocity: velocity of notes before any `VELOCITY` event.
        max_note_duration: None, or the longest a note may sound, in seconds
            (rounded to 10 ms steps, at least one step).

    Returns:
        list of `Note`, sorted by onset then pitch; times are multiples of
        10 ms.

    Raises:
        ValueError: if `events` is not 1-D integer or has ids outside the
            vocabulary, `default_velocity` is not an int in 1..127, or
            `max_note_duration` is not None or a finite number >= 0.01.

    Example:
    >>> from keras_attn.preprocessing.music import event_to_string, events_to_notes
    >>> events = [378, 63, 308, 191]
    >>> [event_to_string(event) for event in events]
    ['VELOCITY(19)', 'NOTE_ON(60)', 'TIME_SHIFT(500ms)', 'NOTE_OFF(60)']
    >>> events_to_notes(events)
    [Note(velocity=77, pitch=60, start=0.0, end=0.5)]
    >>> events_to_notes([1, 63, 308, 2, 64])  # START skipped, nothing after END
    [Note(velocity=64, pitch=60, start=0.0, end=0.5)]
    >>> events_to_notes([63, 308, 308])  # no NOTE_OFF: sounds to the end
    [Note(velocity=64, pitch=60, start=0.0, end=1.0)]
    >>> events_to_notes([63, 308, 308], max_note_duration=0.75)
    [Note(velocity=64, pitch=60, start=0.0, end=0.75)]

    Reference:
        Oore et al. 2018, section 6.1.
    """
    starts, ends, pitches, velocities = _decode(events, default_velocity, max_note_duration)
    return _notes_from_arrays(
        starts / STEPS_PER_SECOND, ends / STEPS_PER_SECOND, pitches, velocities
    )


def midi_to_events(midi, sustain=True, add_start_end=False):
    """Encodes a MIDI file as the Music Transformer's performance events.

    `midi_to_notes` (all non-drum tracks merged, sustain pedal applied)
    followed by `notes_to_events` (10 ms steps, 32 velocity bins).

    Args:
        midi: path (str or `os.PathLike`), bytes, or `symusic.Score`.
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
        TypeError: if `midi` is not a path, bytes or `symusic.Score`.

    Example:
    >>> from keras_attn.preprocessing.music import (chorale_to_midi, event_to_string,
    ...                                             midi_to_events)
    >>> midi = chorale_to_midi([[72, -1, -1, -1]] * 2).dumps_midi()  # C5 for 0.25 s
    >>> [event_to_string(event) for event in midi_to_events(midi)]  # velocity 80: bin 19
    ['VELOCITY(19)', 'NOTE_ON(72)', 'TIME_SHIFT(250ms)', 'NOTE_OFF(72)']

    Reference:
        Huang et al. 2018, section 5.2; Oore et al. 2018, section 6.1.
    """
    return _encode(*_midi_note_arrays(midi, sustain), add_start_end=add_start_end)


# What a Standard MIDI File can hold: the tempo as microseconds per quarter
# note in 24 bits, ticks per quarter note in 15 bits, programs 0..127.
_MIN_TEMPO = 6e7 / (2**24 - 1)  # quarter notes per minute, about 3.58
_MAX_TEMPO = 6e7


def _check_midi_header(tempo, resolution, program):
    """Refuses a tempo, resolution or program a MIDI file cannot hold: the
    file would silently hold another (a tempo of 3 wraps to a note 6.5x
    shorter, a resolution of 40000 to one 5.5x longer)."""
    if isinstance(tempo, bool) or not isinstance(tempo, numbers.Real) \
            or not _MIN_TEMPO <= tempo <= _MAX_TEMPO:
        raise ValueError(
            f"`tempo` must be a number of quarter notes per minute from {_MIN_TEMPO:.2f} to "
            f"{_MAX_TEMPO:.0f}, what a MIDI file holds (microseconds per quarter note in 24 "
            f"bits). Received: tempo={tempo!r}."
        )
    if isinstance(resolution, bool) or not isinstance(resolution, numbers.Integral) \
            or not 1 <= resolution <= 2**15 - 1:
        raise ValueError(
            "`resolution` must be an int from 1 to 32767, the ticks per quarter note a MIDI "
            f"file holds (15 bits). Received: resolution={resolution!r}."
        )
    if isinstance(program, bool) or not isinstance(program, numbers.Integral) \
            or not 0 <= program <= 127:
        raise ValueError(
            "`program` must be a General MIDI program, an int from 0 to 127 (0 = acoustic "
            f"grand piano). Received: program={program!r}."
        )


def events_to_midi(events, program=0, resolution=500, tempo=120.0,
                   default_velocity=DEFAULT_VELOCITY, max_note_duration=None):
    """Decodes performance events to a one-piano `symusic.Score` (in ticks).

    See `events_to_notes` for how special tokens and unmatched events are
    handled (skipped; `END_ID` stops decoding) and for `max_note_duration`,
    which cuts the notes a model leaves hanging. The default `resolution` and
    `tempo` make one tick exactly 1 ms, so the 10 ms times are kept exactly;
    with others, times are rounded to the nearest tick.

    Args:
        events: 1-D integer array-like of event ids.
        program: General MIDI program of the instrument (0 = acoustic grand).
        resolution: ticks per quarter note of the MIDI file.
        tempo: quarter notes per minute written in the file.
        default_velocity: velocity of notes before any `VELOCITY` event.
        max_note_duration: None, or the longest a note may sound, in seconds.

    Returns:
        `symusic.Score` with one track named "Piano"; write it with
        `.dump_midi(path)` (or get the bytes with `.dumps_midi()`).

    Raises:
        ValueError: if `events` is not 1-D integer or has ids outside the
            vocabulary, `default_velocity` is not an int in 1..127,
            `max_note_duration` is not None or a finite number >= 0.01, or
            `tempo` (3.58 .. 6e7), `resolution` (1 .. 32767) or `program`
            (0 .. 127) is outside what a MIDI file holds.

    Example:
    >>> from keras_attn.preprocessing.music import events_to_midi
    >>> score = events_to_midi([378, 63, 308, 191])  # VELOCITY(19), NOTE_ON(60), 500 ms, NOTE_OFF
    >>> score.ticks_per_quarter, score.tracks[0].name
    (500, 'Piano')
    >>> [(note.time, note.duration, note.pitch, note.velocity) for note in score.tracks[0].notes]
    [(0, 500, 60, 77)]

    Reference:
        Oore et al. 2018, section 6.1.
    """
    symusic = _symusic()
    _check_midi_header(tempo, resolution, program)
    starts, ends, pitches, velocities = _decode(events, default_velocity, max_note_duration)
    ticks_per_step = resolution * tempo / 60.0 / STEPS_PER_SECOND
    start_ticks = np.round(starts * ticks_per_step).astype(np.int32)
    end_ticks = np.round(ends * ticks_per_step).astype(np.int32)
    score = symusic.Score(resolution)
    score.tempos.append(symusic.Tempo(0, qpm=float(tempo)))
    piano = symusic.Track(name="Piano", program=program)
    piano.notes = symusic.Note.from_numpy(
        start_ticks, end_ticks - start_ticks, pitches.astype(np.int8), velocities.astype(np.int8)
    )
    score.tracks.append(piano)
    return score


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

    Example:
    >>> import numpy as np
    >>> from keras_attn.preprocessing.music import event_to_string, transpose
    >>> events = np.array([378, 63, 308, 191])  # VELOCITY(19), NOTE_ON(60), 500 ms, NOTE_OFF(60)
    >>> transpose(events, 2).tolist()
    [378, 65, 308, 193]
    >>> [event_to_string(event) for event in transpose(events, 2)]
    ['VELOCITY(19)', 'NOTE_ON(62)', 'TIME_SHIFT(500ms)', 'NOTE_OFF(62)']

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
    starts, ends, pitches, velocities = _decode(body)
    inside = (pitches + semitones >= 0) & (pitches + semitones < NUM_PITCHES)
    if not inside.any():
        raise ValueError(
            f"Transposing by {semitones} semitones leaves no note in 0..127. "
            "Transpose less."
        )
    moved = _encode(
        starts[inside] / STEPS_PER_SECOND, ends[inside] / STEPS_PER_SECOND,
        pitches[inside] + semitones, velocities[inside],
    )
    return _with_special(moved, has_start, has_end)


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

    Example:
    >>> import numpy as np
    >>> from keras_attn.preprocessing.music import event_to_string, time_stretch
    >>> events = np.array([378, 63, 358, 191])  # VELOCITY(19), NOTE_ON(60), 1 s, NOTE_OFF(60)
    >>> [event_to_string(event) for event in time_stretch(events, 1.05)]
    ['VELOCITY(19)', 'NOTE_ON(60)', 'TIME_SHIFT(1000ms)', 'TIME_SHIFT(50ms)', 'NOTE_OFF(60)']

    Reference:
        Huang et al. 2018, section 5.2 (time stretches of up to 5%).
    """
    if not (np.isfinite(factor) and factor > 0):
        raise ValueError(
            f"`factor` must be a positive number. Received: factor={factor!r}."
        )
    body, has_start, has_end = _split_special(events)
    starts, ends, pitches, velocities = _decode(body)
    if not len(pitches):
        raise ValueError(
            "Expected events with at least one complete note to stretch. "
            f"Received: {len(body)} events without a note."
        )
    # Seconds first, then the factor: the same arithmetic as stretching
    # decoded `Note`s, so a stretch is reproducible to the last bit.
    stretched = _encode(
        starts / STEPS_PER_SECOND * factor, ends / STEPS_PER_SECOND * factor,
        pitches, velocities,
    )
    return _with_special(stretched, has_start, has_end)


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
        ValueError: if `rng` is not a `np.random.Generator`, and as
            `transpose` and `time_stretch`.

    Example:
    >>> import numpy as np
    >>> from keras_attn.preprocessing.music import augment, events_to_notes
    >>> events = np.array([378, 63, 308, 191])  # VELOCITY(19), NOTE_ON(60), 500 ms, NOTE_OFF(60)
    >>> (note,) = events_to_notes(augment(events, np.random.default_rng(0)))
    >>> 57 <= note.pitch <= 63, 0.47 <= note.end - note.start <= 0.53, note.velocity
    (True, True, 77)
    >>> first = augment(events, np.random.default_rng(0))
    >>> first.tolist() == augment(events, np.random.default_rng(0)).tolist()  # same seed
    True

    Reference:
        Huang et al. 2018, section 5.2.
    """
    if not isinstance(rng, np.random.Generator):
        raise ValueError(
            "`rng` must be a `np.random.Generator`, e.g. `np.random.default_rng(seed)`. "
            f"Received: rng={rng!r}."
        )
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
            `examples/music/data`, or the project's full copy in
            `jsb_chorales/` of the shared data folder).
        split: a key of the file: `"train"` (229 chorales) or `"valid"` (76).

    Returns:
        list of np.int32 arrays (steps, 4), columns soprano, alto, tenor,
        bass, each a MIDI pitch or -1 for a rest, one row per 16th note.

    Raises:
        ValueError: if the file is missing or not the expected JSON,
            `split` is not in it, or a chorale in it is not a (steps, 4) grid
            of MIDI pitches 0..127 and -1.

    Example:
    >>> import json, os, tempfile
    >>> from keras_attn.preprocessing.music import JSB_FILENAME, load_jsb_chorales
    >>> data = {"train": [[[74, 70, 65, 58], [74, -1, 65, 58]]], "valid": []}
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     with open(os.path.join(folder, JSB_FILENAME), "w") as handle:
    ...         json.dump(data, handle)
    ...     chorales = load_jsb_chorales(folder)  # the folder or the file itself
    >>> len(chorales), chorales[0].shape, chorales[0].dtype
    (1, (2, 4), dtype('int32'))
    >>> chorales[0].tolist()
    [[74, 70, 65, 58], [74, -1, 65, 58]]

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

    Example:
    >>> from keras_attn.preprocessing.music import chorale_to_tokens
    >>> grid = [[74, 70, 65, 58], [74, -1, 65, 58]]  # 2 steps; the alto rests in the second
    >>> chorale_to_tokens(grid).tolist()  # pitch + 4, rest = 3
    [78, 74, 69, 62, 78, 3, 69, 62]
    >>> chorale_to_tokens(grid, add_start_end=True).tolist()
    [1, 78, 74, 69, 62, 78, 3, 69, 62, 2]

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

    Example:
    >>> from keras_attn.preprocessing.music import chorale_to_tokens, tokens_to_chorale
    >>> grid = [[74, 70, 65, 58], [74, -1, 65, 58]]
    >>> tokens = chorale_to_tokens(grid, add_start_end=True)
    >>> tokens_to_chorale(tokens).tolist()
    [[74, 70, 65, 58], [74, -1, 65, 58]]
    >>> tokens_to_chorale([1, 78, 74, 69, 62, 2, 0, 0]).tolist()  # stops at END, skips PAD
    [[74, 70, 65, 58]]

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
        `symusic.Score` (in ticks, 480 per quarter note: 120 per 16th note,
        so every onset is exact) with tracks "Soprano", "Alto", "Tenor",
        "Bass" in that order; write it with `.dump_midi(path)`.

    Raises:
        ValueError: if `grid` is not (steps, 4) with values in -1..127,
            `tempo` is outside 3.58 .. 6e7 quarter notes per minute or
            `program` outside 0..127 (what a MIDI file holds), or
            `velocity` is not an int in 1..127.

    Example:
    >>> from keras_attn.preprocessing.music import chorale_to_midi
    >>> score = chorale_to_midi([[74, 70, 65, 58], [74, -1, 65, 58]])
    >>> [track.name for track in score.tracks]
    ['Soprano', 'Alto', 'Tenor', 'Bass']
    >>> [[(note.time, note.duration, note.pitch) for note in track.notes]
    ...  for track in score.tracks[:2]]  # 120 ticks per step; the soprano holds, the alto rests
    [[(0, 240, 74)], [(0, 120, 70)]]

    Reference:
        Huang et al. 2017 (Coconet, 16th-note grid); Huang et al. 2018,
        section 4.1.
    """
    symusic = _symusic()
    grid = _check_grid(grid)
    velocity = _check_velocity("velocity", velocity)
    resolution = 480
    _check_midi_header(tempo, resolution, program)
    ticks_per_step = resolution // 4
    score = symusic.Score(resolution)
    score.tempos.append(symusic.Tempo(0, qpm=float(tempo)))
    for voice, name in enumerate(JSB_VOICES):
        line = grid[:, voice]
        # A note starts where the pitch changes (or after a rest) and runs
        # until the next change.
        changes = np.flatnonzero(np.diff(line, prepend=-2, append=-2) != 0)
        begins, ends = changes[:-1], changes[1:]
        sounding = line[begins] >= 0
        begins, ends = begins[sounding], ends[sounding]
        track = symusic.Track(name=name.capitalize(), program=program)
        track.notes = symusic.Note.from_numpy(
            (begins * ticks_per_step).astype(np.int32),
            ((ends - begins) * ticks_per_step).astype(np.int32),
            line[begins].astype(np.int8),
            np.full(len(begins), velocity, np.int8),
        )
        score.tracks.append(track)
    return score
