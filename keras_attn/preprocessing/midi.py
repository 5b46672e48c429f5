"""Standard MIDI Files <-> performances with `symusic` (re-exported by `preprocessing.music`)."""

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
        midi: a path, the file's bytes, or a `symusic.Score` (converted to ticks).

    Returns:
        `symusic.Score` with time unit "tick".

    Raises:
        ValueError: for a missing, corrupt or not type-0 / type-1 MIDI file.
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

    Reference:
        Standard MIDI File specification 1.0.
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
        received = f"{source}, {len(data)} bytes starting with {data[:4]!r}, type {midi_format}"
        raise ValueError(f"Expected a type-0 or type-1 MIDI file. Received: {received}.")
    try:
        return symusic.Score.from_midi(data)
    except Exception as error:  # symusic raises RuntimeError (and others) on bad bytes.
        raise ValueError(f"{source} is corrupt or truncated MIDI: {error}") from error


def _tick_seconds(score):
    """A function mapping tick arrays of `score` to seconds, as pretty_midi computes them."""
    resolution = score.ticks_per_quarter
    tempos = score.tempos.numpy()
    # A division of 0 raised ZeroDivisionError; a tempo of 0 put every note at one time.
    if resolution <= 0 or not np.all(tempos["mspq"] > 0):
        received = f"ticks_per_quarter={resolution}, tempos {tempos['mspq'].tolist()[:3]}"
        raise ValueError(f"Expected positive ticks per quarter and tempos. Received: {received}.")
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
    times, is_down = np.asarray(pedal_times, np.float64)[order], is_down[order]
    # Pedal-down intervals [down, up) from where the pedal state changes (up before the
    # first event); a pedal never released holds to the end.
    changes = np.flatnonzero(is_down != np.append(False, is_down[:-1]))
    pressed = is_down[changes]
    downs, ups = times[changes[pressed]], times[changes[~pressed]]
    if not downs.size:
        return ends
    if len(ups) < len(downs):
        ups = np.append(ups, max(float(ends.max()), downs[-1]))
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
        received = f"{len(score.tracks)} tracks without them, {drums} drum notes (ignored)"
        raise ValueError(f"Expected notes on a non-drum instrument. Received: {received}.")
    starts, ends, pitches, velocities = _resolve_overlaps(
        *map(np.concatenate, (starts, ends, pitches, velocities))
    )
    order = np.lexsort((pitches, starts))
    return starts[order], ends[order], pitches[order], velocities[order]


def midi_to_notes(midi, sustain=True):
    """The notes of a MIDI file, in seconds: tracks merged, sustain applied (guide: preprocessing).

    Args:
        midi: path, bytes or `symusic.Score` (see `load_midi`).
        sustain: apply the sustain pedal (the paper's pipeline does).

    Returns:
        list of `Note`, sorted by onset then pitch, times in seconds (not quantized).

    Raises:
        ValueError: as `load_midi`, or if the file has no notes outside drum tracks.
        TypeError: if `midi` is not a path, bytes or `symusic.Score`.

    Example:
    >>> from keras_attn.preprocessing.music import chorale_to_midi, midi_to_notes
    >>> midi = chorale_to_midi([[72, 67, 64, 48], [72, -1, 64, 48]]).dumps_midi()
    >>> [(note.pitch, note.end) for note in midi_to_notes(midi)]  # 16th notes of 0.125 s
    [(48, 0.25), (64, 0.25), (67, 0.125), (72, 0.25)]

    Reference:
        Huang et al. 2018, section 5.2.
    """
    return _notes_from_arrays(*_midi_note_arrays(midi, sustain))


def midi_to_events(midi, sustain=True, add_start_end=False):
    """Encodes a MIDI file as performance events: `midi_to_notes`, then `notes_to_events`.

    Args:
        midi: path, bytes, or `symusic.Score`.
        sustain: extend notes held by the sustain pedal (CC64 >= 64) to its release.
        add_start_end: put `START_ID` first and `END_ID` last.

    Returns:
        np.int32 array (N,) of event ids in [0, VOCABULARY_SIZE).

    Raises:
        ValueError: as `midi_to_notes`.
        TypeError: if `midi` is not a path, bytes or `symusic.Score`.

    Example:
    >>> from keras_attn.preprocessing.music import chorale_to_midi, event_to_string, midi_to_events
    >>> midi = chorale_to_midi([[72, -1, -1, -1]] * 2).dumps_midi()  # C5 for 0.25 s
    >>> [event_to_string(event) for event in midi_to_events(midi)]  # velocity 80: bin 19
    ['VELOCITY(19)', 'NOTE_ON(72)', 'TIME_SHIFT(250ms)', 'NOTE_OFF(72)']
    """
    return _encode(*_midi_note_arrays(midi, sustain), add_start_end=add_start_end)


# What a Standard MIDI File can hold: the tempo as microseconds per quarter
# note in 24 bits, ticks per quarter note in 15 bits, programs 0..127.
_MIN_TEMPO = 6e7 / (2**24 - 1)  # quarter notes per minute, about 3.58
_MAX_TEMPO = 6e7


def _check_midi_header(tempo, resolution, program):
    """Refuses what a MIDI file cannot hold (it would silently hold another value)."""
    expected = f"quarter notes per minute in [{_MIN_TEMPO:.2f}, {_MAX_TEMPO:.0f}]"
    checks.require(checks.is_number(tempo, _MIN_TEMPO, _MAX_TEMPO), "tempo", tempo, expected)
    ok = checks.is_int(resolution, 1, 2**15 - 1)
    checks.require(ok, "resolution", resolution, "an int in [1, 32767] (ticks per quarter)")
    checks.require(checks.is_int(program, 0, 127), "program", program, "an int in [0, 127]")


def events_to_midi(
    events,
    program=0,
    resolution=500,
    tempo=120.0,
    default_velocity=DEFAULT_VELOCITY,
    max_note_duration=None,
):
    """Decodes performance events to a one-piano `symusic.Score` (by default 1 tick = 1 ms).

    Args:
        events: 1-D integer array-like of event ids.
        program: General MIDI program of the instrument (0 = acoustic grand).
        resolution: ticks per quarter note of the MIDI file.
        tempo: quarter notes per minute written in the file.
        default_velocity: velocity of notes before any `VELOCITY` event.
        max_note_duration: None, or the longest a note may sound, in seconds.

    Returns:
        `symusic.Score` with one track named "Piano" (write it with `.dump_midi(path)`).

    Raises:
        ValueError: as `events_to_notes`, or a bad `tempo`, `resolution` or `program`.

    Example:
    >>> from keras_attn.preprocessing.music import events_to_midi
    >>> score = events_to_midi([378, 63, 308, 191])  # VELOCITY(19), NOTE_ON(60), 500 ms, NOTE_OFF
    >>> [(note.time, note.duration, note.pitch) for note in score.tracks[0].notes]
    [(0, 500, 60)]
    """
    _check_midi_header(tempo, resolution, program)
    starts, ends, pitches, velocities = _decode(
        *_check_decoding(events, default_velocity, max_note_duration)
    )
    ticks_per_step = resolution * tempo / 60.0 / STEPS_PER_SECOND
    start_ticks, end_ticks = np.round(starts * ticks_per_step), np.round(ends * ticks_per_step)
    piano = ("Piano", start_ticks, end_ticks, pitches, velocities)
    return _score(tempo, resolution, program, [piano])


def _score(tempo, resolution, program, tracks):
    """A `symusic.Score` of checked header values, a track per (name, start ticks, end ticks,
    pitches, velocities)."""
    symusic = _symusic()
    score = symusic.Score(resolution)
    score.tempos.append(symusic.Tempo(0, qpm=float(tempo)))
    for name, starts, ends, pitches, velocities in tracks:
        track = symusic.Track(name=name, program=program)
        starts, durations = starts.astype(np.int32), (ends - starts).astype(np.int32)
        pitches, velocities = pitches.astype(np.int8), velocities.astype(np.int8)
        track.notes = symusic.Note.from_numpy(starts, durations, pitches, velocities)
        score.tracks.append(track)
    return score
