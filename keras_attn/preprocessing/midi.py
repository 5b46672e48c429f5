"""Standard MIDI Files <-> performances: reading (ticks to seconds, sustain pedal,
one note per pitch) and writing, with `symusic`.

Why `symusic` and how its notes are paired is described in
`keras_attn.preprocessing.music`, which re-exports every public name here.
"""

import os

import numpy as np

from keras_attn import checks
from keras_attn.extras import needs_extra
from keras_attn.preprocessing.performance_events import (
    DEFAULT_VELOCITY,
    STEPS_PER_SECOND,
    SUSTAIN_PEDAL_CONTROL,
    _check_decoding,
    _decode,
    _encode,
    _notes_from_arrays,
    _resolve_overlaps,
)

_MIDI_HEADER = b"MThd"
# The tempo of a MIDI file without a tempo event (Standard MIDI File 1.0).
_DEFAULT_QUARTERS_PER_MINUTE = 120.0


def _symusic():
    with needs_extra("music", "Reading and writing MIDI (keras_attn.preprocessing.music)"):
        import symusic
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
        ValueError: if the file does not exist, is not a type-0 or type-1
            Standard MIDI File (type 2 has no single timeline), or cannot be
            parsed.
        TypeError: if `midi` is none of the accepted types.
        ModuleNotFoundError: without symusic (`pip install "keras_attn[music]"`).

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
            raise ValueError(f"Expected an existing MIDI file. Received: {source}.")
        with open(midi, "rb") as handle:
            data = handle.read()
    else:
        raise TypeError(f"`midi` must be a path, bytes or a symusic.Score. Received: {type(midi)}.")
    midi_format = int.from_bytes(data[8:10], "big")  # type 2: patterns without a shared timeline
    if data[:4] != _MIDI_HEADER or len(data) < 14 or midi_format not in (0, 1):
        raise ValueError(
            f"Expected a type-0 or type-1 MIDI file (b'MThd'...). Received: {source}, "
            f"{len(data)} bytes starting with {data[:4]!r}, type {midi_format}."
        )
    try:
        return symusic.Score.from_midi(data)
    except Exception as error:  # symusic raises RuntimeError (and others) on bad bytes.
        raise ValueError(
            f"Could not parse {source} as MIDI ({type(error).__name__}: {error}). "
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
    tempos = score.tempos.numpy()
    # A division of 0 raised ZeroDivisionError; a tempo of 0 put every note at one time.
    if resolution <= 0 or not np.all(tempos["mspq"] > 0):
        raise ValueError(
            "Expected positive ticks per quarter and tempos (corrupt file). Received: "
            f"ticks_per_quarter={resolution}, tempos {tempos['mspq'].tolist()[:3]}."
        )
    scales = [(0, 60.0 / (_DEFAULT_QUARTERS_PER_MINUTE * resolution))]
    for tick, mspq in zip(tempos["time"].tolist(), tempos["mspq"].tolist()):
        scale = 60.0 / ((6e7 / mspq) * resolution)
        if tick == 0:
            scales = [(0, scale)]
        elif scale != scales[-1][1]:
            scales.append((tick, scale))
    segment_ticks = np.array([tick for tick, _ in scales], np.int64)
    segment_scales = np.array([scale for _, scale in scales], np.float64)
    segment_seconds = np.cumsum(np.append(0.0, segment_scales[:-1] * np.diff(segment_ticks)))

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
            f"Expected notes on a non-drum instrument (a piano part). Received: "
            f"{len(score.tracks)} tracks without them, {drums} drum notes (ignored)."
        )
    starts, ends, pitches, velocities = _resolve_overlaps(
        np.concatenate(starts),
        np.concatenate(ends),
        np.concatenate(pitches),
        np.concatenate(velocities),
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
    checks.require(
        checks.is_number(tempo, _MIN_TEMPO, _MAX_TEMPO),
        "tempo",
        tempo,
        f"a number of quarter notes per minute from {_MIN_TEMPO:.2f} to {_MAX_TEMPO:.0f}",
    )
    checks.require(
        checks.is_int(resolution, 1, 2**15 - 1),
        "resolution",
        resolution,
        "an int from 1 to 32767 (ticks per quarter note)",
    )
    checks.require(
        checks.is_int(program, 0, 127),
        "program",
        program,
        "a General MIDI program, an int from 0 to 127",
    )


def events_to_midi(
    events,
    program=0,
    resolution=500,
    tempo=120.0,
    default_velocity=DEFAULT_VELOCITY,
    max_note_duration=None,
):
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
    starts, ends, pitches, velocities = _decode(
        *_check_decoding(events, default_velocity, max_note_duration)
    )
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
