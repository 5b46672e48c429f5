"""Tests for keras_attn.preprocessing.music on the real samples shipped in examples/music/data."""

import glob
import os
import re

import numpy as np
import pytest
import symusic

from keras_attn.preprocessing import music
from keras_attn.preprocessing.jsb_chorales import transpose_chorale_tokens

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
DATA = os.path.join(ROOT, "examples", "music", "data")
# Events of every shipped MIDI file computed by the pretty_midi-based encoder
# (keras_attn at commit 95ef2e5, pretty_midi 0.2.11) before the move to
# symusic: keys "<file stem>/sustain" (`midi_to_events(path)`),
# "<stem>/no_sustain" (`sustain=False`) and "<stem>/stretch_<factor>"
# (`time_stretch` of the sustained events by 0.95, 0.975, 1.025, 1.05).
PRETTY_MIDI_EVENTS = os.path.join(os.path.dirname(__file__), "data", "music_events_pretty_midi.npz")
POP909 = sorted(
    os.path.join(DATA, "pop909", name)
    for name in os.listdir(os.path.join(DATA, "pop909"))
    if name.endswith(".mid")
)
JSB = os.path.join(DATA, "Jsb16thSeparated.json")

ON, OFF = music.NOTE_ON_OFFSET, music.NOTE_OFF_OFFSET
VEL = music.VELOCITY_OFFSET


def shift(steps):
    """Event id of a time shift of `steps` x 10 ms (1..100)."""
    return music.TIME_SHIFT_OFFSET + steps - 1


# 1000 ticks per quarter note at the default 120 quarters per minute: a tick
# is 0.5 ms, so every time used below is a whole number of ticks.
TICKS_PER_SECOND = 2000


def score_with(*tracks):
    score = symusic.Score(1000)
    for track in tracks:
        score.tracks.append(track)
    return score


def instrument(notes, pedal=(), is_drum=False):
    """notes: (pitch, velocity, start, end) in seconds; pedal: (time, value) of CC64."""
    track = symusic.Track(program=0, is_drum=is_drum)
    for pitch, velocity, start, end in notes:
        onset = round(start * TICKS_PER_SECOND)
        track.notes.append(
            symusic.Note(onset, round(end * TICKS_PER_SECOND) - onset, pitch, velocity)
        )
    for time, value in pedal:
        track.controls.append(symusic.ControlChange(round(time * TICKS_PER_SECOND), 64, value))
    return track


def seconds(score, ticks):
    """Ticks of a file in seconds: a naive walk over its tempo changes, in
    whole microseconds x ticks (exact integers) until the final division."""
    tempos = sorted((t.time, t.mspq) for t in score.tempos)
    result = []
    for tick in np.asarray(ticks).tolist():
        total, previous, microseconds_per_quarter = 0, 0, 500000  # 120 per minute
        for time, value in tempos:
            if time >= tick:
                break
            total += (time - previous) * microseconds_per_quarter
            previous, microseconds_per_quarter = time, value
        total += (tick - previous) * microseconds_per_quarter
        result.append(total / 1e6 / score.ticks_per_quarter)
    return np.array(result)


def written_notes(score):
    """(pitch, velocity, start ms, end ms) of the one track `events_to_midi` writes."""
    assert score.ticks_per_quarter == 500 and score.tempos[0].mspq == 500000  # 1 tick = 1 ms
    (track,) = score.tracks
    return [(n.pitch, n.velocity, n.time, n.time + n.duration) for n in track.notes]


def assert_notes_close(notes, expected):
    """notes: `Note`s; expected: (pitch, start, end) in seconds."""
    assert [n.pitch for n in notes] == [pitch for pitch, _, _ in expected]
    np.testing.assert_allclose(
        [(n.start, n.end) for n in notes], [(s, e) for _, s, e in expected], atol=1e-9
    )


def by_onset(notes):
    return sorted(notes, key=lambda n: (n.start, n.pitch))


# --- Vocabulary -----------------------------------------------------------
def test_vocabulary_layout_matches_the_paper():
    assert (music.PAD_ID, music.START_ID, music.END_ID) == (0, 1, 2)
    assert (ON, OFF, music.TIME_SHIFT_OFFSET, VEL) == (3, 131, 259, 359)
    assert music.VOCABULARY_SIZE == 3 + 128 + 128 + 100 + 32 == 391
    assert music.event_to_string(ON + 60) == "NOTE_ON(60)"
    assert music.event_to_string(OFF + 127) == "NOTE_OFF(127)"
    assert music.event_to_string(shift(1)) == "TIME_SHIFT(10ms)"
    assert music.event_to_string(shift(100)) == "TIME_SHIFT(1000ms)"
    assert music.event_to_string(VEL + 31) == "VELOCITY(31)"
    assert music.event_to_string(music.VOCABULARY_SIZE - 1) == "VELOCITY(31)"


def test_velocity_bins_are_4_wide_and_decode_to_their_lowest_velocity():
    np.testing.assert_array_equal(
        music.velocity_to_bin(np.array([1, 4, 5, 64, 65, 124, 125, 127])),
        [0, 0, 1, 15, 16, 30, 31, 31],
    )
    bins = np.arange(32)
    np.testing.assert_array_equal(music.bin_to_velocity(bins), 4 * bins + 1)
    np.testing.assert_array_equal(music.velocity_to_bin(music.bin_to_velocity(bins)), bins)


# --- Encoding, hand-computed --------------------------------------------
def test_notes_to_events_hand_computed():
    # 60 (velocity 80 -> bin 19) from 0 to 0.5 s; 64 (81 -> bin 20) from 0.5 to 2 s.
    events = music.midi_to_events(score_with(instrument([(60, 80, 0.0, 0.5), (64, 81, 0.5, 2.0)])))
    expected = [
        VEL + 19,
        ON + 60,
        shift(50),
        OFF + 60,
        VEL + 20,
        ON + 64,
        shift(100),
        shift(50),
        OFF + 64,
    ]
    np.testing.assert_array_equal(events, expected)
    assert events.dtype == np.int32
    with_specials = music.midi_to_events(
        score_with(instrument([(60, 80, 0.0, 0.5), (64, 81, 0.5, 2.0)])), add_start_end=True
    )
    np.testing.assert_array_equal(with_specials, [music.START_ID] + expected + [music.END_ID])


def test_chord_order_leading_silence_and_shared_velocity():
    # Offs before ons at one instant, each by pitch; one VELOCITY for equal bins.
    notes = [(67, 100, 1.234, 1.5), (60, 99, 1.234, 1.5), (64, 40, 1.5, 1.6)]
    events = music.midi_to_events(score_with(instrument(notes)))
    expected = [
        shift(100),
        shift(23),
        VEL + 24,
        ON + 60,
        ON + 67,
        shift(27),
        OFF + 60,
        OFF + 67,
        VEL + 9,
        ON + 64,
        shift(10),
        OFF + 64,
    ]
    np.testing.assert_array_equal(events, expected)


def test_notes_shorter_than_a_step_get_one_step_on_their_side():
    notes = [
        music.Note(80, 60, 0.996, 0.9999),  # rounds to [1.0, 1.0]: early half
        music.Note(80, 62, 2.001, 2.003),  # rounds to [2.0, 2.0]: late half
    ]
    decoded = music.events_to_notes(music.notes_to_events(notes))
    assert [(n.pitch, n.start, n.end) for n in decoded] == [(60, 0.99, 1.0), (62, 2.0, 2.01)]
    for before, after in zip(notes, decoded):
        assert abs(before.start - after.start) <= 0.010 and abs(before.end - after.end) <= 0.010


def test_sustain_pedal_extends_notes_and_restrike_ends_them():
    notes = [
        (60, 80, 0.0, 0.3),  # released under the pedal -> sounds to 1.0
        (62, 80, 0.1, 0.15),  # released before the pedal -> unchanged
        (64, 80, 0.5, 0.6),  # struck again at 0.8 -> ends there
        (64, 80, 0.8, 0.9),  # released under the pedal -> 1.0
        (67, 80, 0.9, 1.2),  # key held past the pedal -> unchanged
    ]
    pedal = [(0.2, 127), (0.4, 100), (1.0, 0)]  # 100 >= 64: still down
    score = score_with(instrument(notes, pedal))
    assert_notes_close(
        music.midi_to_notes(score),
        [(60, 0.0, 1.0), (62, 0.1, 0.15), (64, 0.5, 0.8), (64, 0.8, 1.0), (67, 0.9, 1.2)],
    )
    assert_notes_close(
        music.midi_to_notes(score, sustain=False), [(p, s, e) for p, _, s, e in notes]
    )


def test_instruments_are_merged_and_drums_ignored():
    melody = instrument([(72, 50, 2.0, 2.1)])
    piano = instrument([(72, 90, 2.004, 2.3), (48, 70, 2.0, 3.0)])
    drums = instrument([(36, 127, 0.0, 0.1)], is_drum=True)
    notes = music.midi_to_notes(score_with(melody, piano, drums))
    # The doubled 72 (onsets in one 10 ms step) becomes one note: earliest
    # start, latest end, loudest velocity.
    assert [n.velocity for n in notes] == [70, 90]
    assert_notes_close(notes, [(48, 2.0, 3.0), (72, 2.0, 2.3)])


def test_sustain_matches_a_naive_event_loop_on_a_real_piano_track():
    # Reference: walk pedal/note events in time order (ticks), as a player would.
    source = symusic.Score(POP909[0])
    track = next(t for t in source.tracks if t.name == "PIANO")
    pedal_events = [c for c in track.controls if c.number == 64]
    assert len(pedal_events) > 50
    timeline = [(c.time, 0, c.value >= 64, None) for c in pedal_events]
    timeline += [(n.time, 1, True, k) for k, n in enumerate(track.notes)]
    timeline += [(n.end, 2, False, k) for k, n in enumerate(track.notes)]
    timeline.sort(key=lambda e: (e[0], e[1]))
    ends = {k: n.end for k, n in enumerate(track.notes)}
    pedal_down, sounding, held_by_pedal = False, {}, set()
    for time, kind, flag, k in timeline:
        if kind == 0:
            if pedal_down and not flag:
                for j in held_by_pedal:
                    ends[j] = time
                    sounding.pop(track.notes[j].pitch, None)
                held_by_pedal.clear()
            pedal_down = flag
        elif kind == 1:
            pitch = track.notes[k].pitch
            if pitch in sounding:
                previous = sounding.pop(pitch)  # struck again: it stops now
                ends[previous] = time
                held_by_pedal.discard(previous)
            sounding[pitch] = k
        elif sounding.get(track.notes[k].pitch) == k:
            if pedal_down:
                held_by_pedal.add(k)
            else:
                sounding.pop(track.notes[k].pitch)
    expected = np.array(
        sorted((n.time, n.pitch, ends[k]) for k, n in enumerate(track.notes)), float
    )
    expected[:, 0], expected[:, 2] = (
        seconds(source, expected[:, 0]),
        seconds(source, expected[:, 2]),
    )
    piano_only = symusic.Score(source.ticks_per_quarter)
    piano_only.tempos = source.tempos
    piano_only.tracks.append(track)
    got = [(n.start, n.pitch, n.end) for n in music.midi_to_notes(piano_only)]
    assert len(got) == len(expected) == len(track.notes)
    np.testing.assert_allclose(np.array(got), expected, atol=1e-9)
    # The pedal matters on this track: many notes sound longer (0.05 s).
    longer = seconds(source, [ends[k] - n.end for k, n in enumerate(track.notes)]) > 0.05
    assert longer.sum() > 100


# --- The same events as the pretty_midi-based encoder ----------------------
def shipped_midi_files():
    """Every MIDI file shipped in the project (examples and tests)."""
    found = []
    for folder in ("examples", "tests"):
        for pattern in ("*.mid", "*.midi"):
            found += glob.glob(os.path.join(ROOT, folder, "**", pattern), recursive=True)
    return sorted(found)


def test_the_reference_events_cover_every_shipped_midi_file():
    stems = {key.split("/")[0] for key in np.load(PRETTY_MIDI_EVENTS).files}
    shipped = {os.path.splitext(os.path.basename(path))[0] for path in shipped_midi_files()}
    assert shipped == stems == {"001", "002", "003", "004", "005", "006"}


@pytest.mark.parametrize("path", shipped_midi_files(), ids=os.path.basename)
def test_events_are_those_of_the_pretty_midi_encoder(path):
    # Exact equality of every event id: parsing, the tempo map (seconds in
    # float64), the sustain pedal, the overlap rules and 10 ms rounding all
    # show up here; so does the re-encoding done by the time stretches.
    reference = np.load(PRETTY_MIDI_EVENTS)
    stem = os.path.splitext(os.path.basename(path))[0]
    events = music.midi_to_events(path)
    assert len(events) > 3000
    np.testing.assert_array_equal(events, reference[f"{stem}/sustain"])
    np.testing.assert_array_equal(
        music.midi_to_events(path, sustain=False), reference[f"{stem}/no_sustain"]
    )
    for factor in (0.95, 0.975, 1.025, 1.05):
        np.testing.assert_array_equal(
            music.time_stretch(events, factor), reference[f"{stem}/stretch_{factor}"]
        )


def tempo_event(microseconds_per_quarter, delta=0):
    return bytes([delta, 0xFF, 0x51, 0x03]) + microseconds_per_quarter.to_bytes(3, "big")


def test_tempo_changes_turn_ticks_into_seconds(tmp_path):
    # 96 ticks per quarter note. Tick 0: 0.5 s per quarter (a repeated tempo
    # changes nothing); tick 96 (0.5 s): 0.25 s per quarter; tick 192
    # (0.75 s): 1 s per quarter.
    tempo_track = (
        tempo_event(500000)
        + tempo_event(500000, 48)
        + tempo_event(250000, 48)
        + tempo_event(1000000, 96)
        + b"\x00\xff\x2f\x00"
    )
    # Notes at ticks 48-96 (0.25-0.5 s), 144-168 (0.625-0.6875 s), 192-240 (0.75-1.25 s).
    notes_track = (
        b"\x30\x90\x3c\x40"
        b"\x30\x80\x3c\x40"
        b"\x30\x90\x3e\x40"
        b"\x18\x80\x3e\x40"
        b"\x18\x90\x40\x40"
        b"\x30\x80\x40\x40"
        b"\x00\xff\x2f\x00"
    )
    path = tmp_path / "tempi.mid"
    path.write_bytes(midi_bytes(1, [tempo_track, notes_track]))
    assert_notes_close(
        music.midi_to_notes(path), [(60, 0.25, 0.5), (62, 0.625, 0.6875), (64, 0.75, 1.25)]
    )


def test_a_key_struck_again_before_its_note_off_pairs_note_offs_in_order(tmp_path):
    # 60 on at 0 and again at 0.5 s, offs at 1.0 and 1.5 s (96 ticks = 0.5 s).
    # The first note ends where the key is struck again; the second keeps the
    # later note-off (pretty_midi ended both at the first note-off, 1.0 s).
    track = b"\x00\x90\x3c\x40\x60\x90\x3c\x50\x60\x80\x3c\x40\x60\x80\x3c\x40\x00\xff\x2f\x00"
    path = tmp_path / "restrike.mid"
    path.write_bytes(midi_bytes(1, [track]))
    notes = music.midi_to_notes(path)
    assert [n.velocity for n in notes] == [64, 80]
    assert_notes_close(notes, [(60, 0.0, 0.5), (60, 0.5, 1.5)])


def test_load_midi_reads_scores_in_any_time_unit():
    score = symusic.Score(POP909[0])
    in_seconds = score.to("second")
    loaded = music.load_midi(in_seconds)
    assert isinstance(loaded.ttype, symusic.core.Tick)
    assert music.load_midi(score) is score
    # Converting seconds back to ticks is exact to the tick on this file.
    np.testing.assert_array_equal(music.midi_to_events(loaded), music.midi_to_events(score))


# --- Round trips on real POP909 files -------------------------------------
@pytest.mark.parametrize("path", POP909, ids=os.path.basename)
def test_pop909_round_trip_within_10ms_and_same_velocity_bin(path, tmp_path):
    reference = music.midi_to_notes(path)
    events = music.midi_to_events(path)
    assert events.min() >= 3 and events.max() < music.VOCABULARY_SIZE
    # Through a file, as a user would do.
    written = tmp_path / "round_trip.mid"
    music.events_to_midi(events).dump_midi(written)
    score = symusic.Score(written)
    assert len(score.tracks) == 1 and score.tracks[0].program == 0
    decoded = [
        music.Note(velocity, pitch, start / 1000, end / 1000)
        for pitch, velocity, start, end in written_notes(score)
    ]

    def key(n):
        return (n.pitch, n.start)

    reference, decoded = sorted(reference, key=key), sorted(decoded, key=key)
    assert len(decoded) == len(reference) > 900
    assert [n.pitch for n in decoded] == [n.pitch for n in reference]
    starts = np.array([[n.start for n in reference], [n.start for n in decoded]])
    ends = np.array([[n.end for n in reference], [n.end for n in decoded]])
    assert np.abs(starts[0] - starts[1]).max() <= 0.010 + 1e-6
    assert np.abs(ends[0] - ends[1]).max() <= 0.010 + 1e-6
    # Rounding to 10 ms: half a step on average.
    assert 0.002 < np.abs(starts[0] - starts[1]).mean() < 0.003
    np.testing.assert_array_equal(
        music.velocity_to_bin(np.array([n.velocity for n in decoded])),
        music.velocity_to_bin(np.array([n.velocity for n in reference])),
    )
    # Decoded times are whole 10 ms steps; encoding them again is exact, and
    # so is reading the written file again.
    np.testing.assert_array_equal(music.notes_to_events(decoded), events)
    np.testing.assert_array_equal(music.midi_to_events(written), events)


def test_round_trip_without_sustain_keeps_the_files_own_offsets():
    source = symusic.Score(POP909[1])
    raw = sorted(
        (
            music.Note(n.velocity, n.pitch, *seconds(source, [n.time, n.end]).tolist())
            for track in source.tracks
            for n in track.notes
        ),
        key=lambda n: (n.pitch, n.start),
    )
    decoded = sorted(
        music.events_to_notes(music.midi_to_events(source, sustain=False)),
        key=lambda n: (n.pitch, n.start),
    )
    # Doubled melody notes are merged; every other note keeps its own offset.
    assert 0.95 * len(raw) < len(decoded) <= len(raw)
    raw_by_onset = {(n.pitch, round(n.start * 100)): n for n in raw}
    matched = [raw_by_onset.get((n.pitch, round(n.start * 100))) for n in decoded]
    assert sum(m is not None for m in matched) >= 0.99 * len(decoded)
    offsets = np.array([abs(m.end - n.end) for m, n in zip(matched, decoded) if m])
    assert np.mean(offsets <= 0.010 + 1e-6) > 0.98


def test_events_to_midi_skips_specials_and_unmatched_events():
    events = [
        music.PAD_ID,
        music.START_ID,
        OFF + 61,  # nothing to turn off
        VEL + 10,
        ON + 60,
        shift(10),
        ON + 60,  # re-strike ends the first 60
        shift(5),
        OFF + 60,
        ON + 62,
        shift(3),  # 62 still sounding at END
        music.END_ID,
        ON + 70,
        shift(50),  # after END: ignored
    ]
    expected = [(60, 41, 0.0, 0.1), (60, 41, 0.1, 0.15), (62, 41, 0.15, 0.18)]
    notes = music.events_to_notes(np.array(events))
    assert [(n.pitch, n.velocity, n.start, n.end) for n in notes] == expected
    # Written in milliseconds (ticks).
    assert written_notes(music.events_to_midi(np.array(events))) == [
        (60, 41, 0, 100),
        (60, 41, 100, 150),
        (62, 41, 150, 180),
    ]
    # A note-on before any VELOCITY uses the default velocity; a dangling
    # last note lasts one step.
    assert written_notes(music.events_to_midi([ON + 50])) == [(50, 64, 0, 10)]
    assert written_notes(music.events_to_midi([])) == []
    # Another resolution and tempo: times rounded to their ticks (10 ms = 4.8 ticks).
    score = music.events_to_midi(
        [VEL + 10, ON + 60, shift(1), OFF + 60, shift(2), ON + 61],
        resolution=480,
        tempo=60.0,
        program=5,
    )
    assert score.ticks_per_quarter == 480 and score.tempos[0].mspq == 1000000
    assert score.tracks[0].program == 5 and score.tracks[0].name == "Piano"
    assert [(n.pitch, n.time, n.duration) for n in score.tracks[0].notes] == [
        (60, 0, 5),
        (61, 14, 5),
    ]


def test_midi_writers_refuse_what_a_midi_file_cannot_hold(tmp_path):
    # Each was written, and read back as another piece: a tempo of 3 as a
    # note 6.5x shorter, resolution 40000 as one 5.5x longer, program 128
    # not at all.
    events = [VEL + 19, ON + 60, shift(50), OFF + 60]
    for tempo in (3.0, 0, -1, float("nan"), 1e9, True):
        with pytest.raises(
            ValueError,
            match=r"`tempo` must be quarter notes per minute in \[3.58, "
            rf"60000000\].*Received: tempo={re.escape(repr(tempo))}\.",
        ):
            music.events_to_midi(events, tempo=tempo)
        with pytest.raises(ValueError, match=r"`tempo` must be quarter notes per minute"):
            music.chorale_to_midi([[60, 60, 60, 60]], tempo=tempo)
    for resolution in (0, -5, 40000, 2.5):
        with pytest.raises(
            ValueError,
            match=rf"`resolution` must be an int in \[1, 32767\].*resolution={resolution!r}\.",
        ):
            music.events_to_midi(events, resolution=resolution)
    for program in (-1, 128, 1000):
        with pytest.raises(
            ValueError, match=rf"`program` must be an int in \[0, 127\].*program={program}\."
        ):
            music.events_to_midi(events, program=program)
        with pytest.raises(ValueError, match=r"`program` must be an int in \[0, 127\]"):
            music.chorale_to_midi([[60, 60, 60, 60]], program=program)
    # The limits themselves still round-trip: 500 ms at the slowest tempo.
    path = str(tmp_path / "slow.mid")
    music.events_to_midi(events, tempo=3.6, resolution=32767, program=127).dump_midi(path)
    notes = music.midi_to_notes(path)
    assert len(notes) == 1 and abs(notes[0].end - notes[0].start - 0.5) < 1e-3


def test_max_note_duration_cuts_hanging_notes_only():
    events = [
        VEL + 10,
        ON + 60,
        ON + 64,
        shift(50),
        OFF + 64,  # 64 ends at 0.5 s
        shift(100),
        shift(100),
        shift(100),
        ON + 67,
        shift(30),  # 60 never ends
    ]
    exact = [(60, 0.0, 3.8), (64, 0.0, 0.5), (67, 3.5, 3.8)]
    assert [(n.pitch, n.start, n.end) for n in music.events_to_notes(events)] == exact
    cut = music.events_to_notes(events, max_note_duration=2.0)
    assert [(n.pitch, n.start, n.end) for n in cut] == [
        (60, 0.0, 2.0),
        (64, 0.0, 0.5),
        (67, 3.5, 3.8),
    ]
    # Rounded to 10 ms steps; the MIDI file gets the same ends (ticks = ms).
    assert written_notes(music.events_to_midi(events, max_note_duration=0.254)) == [
        (60, 41, 0, 250),
        (64, 41, 0, 250),
        (67, 41, 3500, 3750),
    ]
    # A re-strike still ends the earlier note first.
    restruck = [ON + 60, shift(100), ON + 60, shift(100)]
    assert [(n.start, n.end) for n in music.events_to_notes(restruck, max_note_duration=0.5)] == [
        (0.0, 0.5),
        (1.0, 1.5),
    ]


@pytest.mark.parametrize(
    "value",
    [np.int8(2), np.int16(3), np.uint8(2), np.float16(2), 2, 2.0, 1e308, 10**400, np.int64(2**62)],
    ids=lambda value: repr(value)[:20],
)
def test_max_note_duration_of_any_real_type_and_size(value):
    # Small numpy types once wrapped around in the step count (np.int8(5) * 100
    # is -12) and dropped every note; huge values overflowed.
    events = [ON + 60] + [shift(100)] * 3  # a note never turned off: 3 s
    expected_end = 3.0 if value > 3 else float(value)
    assert [(n.start, n.end) for n in music.events_to_notes(events, max_note_duration=value)] == [
        (0.0, expected_end)
    ]
    assert written_notes(music.events_to_midi(events, max_note_duration=value)) == [
        (60, 64, 0, int(expected_end * 1000))
    ]


@pytest.mark.parametrize(
    "value",
    [0, -1.0, 0.001, float("nan"), float("inf"), -(10**400), "5", True],
    ids=lambda value: repr(value)[:12],
)
def test_max_note_duration_must_be_seconds_of_at_least_one_step(value):
    with pytest.raises(ValueError, match=r"`max_note_duration` must be None .* >= 0.01"):
        music.events_to_notes([ON + 60], max_note_duration=value)
    with pytest.raises(ValueError, match=r"Received: max_note_duration="):
        music.events_to_midi([ON + 60], max_note_duration=value)


def test_events_to_midi_rejects_ids_outside_the_vocabulary():
    with pytest.raises(ValueError, match=r"ids from 3 to 391"):
        music.events_to_midi([ON, music.VOCABULARY_SIZE])
    with pytest.raises(ValueError, match=r"1-D integer event ids.*\(1, 2\)"):
        music.events_to_midi([[ON, OFF]])
    with pytest.raises(ValueError, match=r"1-D integer event ids.*float"):
        music.events_to_midi(np.array([3.0, 4.0]))


# --- Augmentation -----------------------------------------------------------
def test_transpose_shifts_note_events_only():
    events = np.array([music.START_ID, VEL + 5, ON + 60, shift(20), OFF + 60, music.END_ID])
    np.testing.assert_array_equal(
        music.transpose(events, 3),
        [music.START_ID, VEL + 5, ON + 63, shift(20), OFF + 63, music.END_ID],
    )
    np.testing.assert_array_equal(music.transpose(events, -3)[2:5:2], [ON + 57, OFF + 57])


def test_transpose_real_file_and_back():
    events = music.midi_to_events(POP909[0])
    for semitones in music.AUGMENTATION_SEMITONES:
        moved = music.transpose(events, semitones)
        assert len(moved) == len(events)
        original = music.events_to_notes(events)
        notes = music.events_to_notes(moved)
        notes, original = by_onset(notes), by_onset(original)
        assert [n.pitch for n in notes] == [n.pitch + semitones for n in original]
        assert [(n.start, n.end) for n in notes] == [(n.start, n.end) for n in original]
        np.testing.assert_array_equal(music.transpose(moved, -semitones), events)


def test_transpose_out_of_range_drops_or_raises():
    events = music.notes_to_events(
        [music.Note(80, 60, 0.0, 0.5), music.Note(80, 126, 0.2, 0.4)],
        add_start_end=True,
    )
    dropped = music.transpose(events, 3)
    np.testing.assert_array_equal(
        dropped, [music.START_ID, VEL + 19, ON + 63, shift(50), OFF + 63, music.END_ID]
    )
    with pytest.raises(ValueError, match=r"pitches from 63 to 129.*out_of_range=\"drop\""):
        music.transpose(events, 3, out_of_range="error")
    with pytest.raises(ValueError, match=r"leaves no note"):
        music.transpose(music.notes_to_events([music.Note(80, 126, 0, 1)]), 5)
    with pytest.raises(ValueError, match=r"out_of_range"):
        music.transpose(events, 1, out_of_range="clip")
    with pytest.raises(ValueError, match=r"whole number"):
        music.transpose(events, 0.5)


def test_time_stretch_hand_computed():
    notes = [music.Note(80, 60, 0.2, 1.0), music.Note(80, 64, 1.0, 2.4)]
    events = music.notes_to_events(notes, add_start_end=True)
    stretched = music.time_stretch(events, 0.95)
    assert stretched[0] == music.START_ID and stretched[-1] == music.END_ID
    got = [(n.pitch, n.start, n.end) for n in music.events_to_notes(stretched)]
    assert got == [(60, 0.19, 0.95), (64, 0.95, 2.28)]
    with pytest.raises(ValueError, match=r"positive.*factor=0"):
        music.time_stretch(events, 0)


def test_time_stretch_real_file_within_5ms_of_exact():
    events = music.midi_to_events(POP909[0])
    original = by_onset(music.events_to_notes(events))
    for factor in (1.025, 1.05):
        notes = by_onset(music.events_to_notes(music.time_stretch(events, factor)))
        assert [n.pitch for n in notes] == [n.pitch for n in original]
        starts = np.array([n.start for n in notes])
        exact = factor * np.array([n.start for n in original])
        np.testing.assert_allclose(starts, exact, atol=0.005 + 1e-9)
        ends = np.array([n.end for n in notes])
        exact = factor * np.array([n.end for n in original])
        np.testing.assert_allclose(ends, exact, atol=0.005 + 1e-9)
    assert original[-1].end * 1.05 == pytest.approx(notes[-1].end, abs=0.005)


def test_augment_is_a_paper_transposition_and_stretch():
    events = music.midi_to_events(POP909[3])
    original = by_onset(music.events_to_notes(events))
    starts = np.array([n.start for n in original])
    seen = set()
    for seed in range(6):
        notes = by_onset(music.events_to_notes(music.augment(events, np.random.default_rng(seed))))
        assert len(notes) == len(original)
        semitones = notes[0].pitch - original[0].pitch
        assert semitones in music.AUGMENTATION_SEMITONES
        factor = notes[-1].start / original[-1].start
        stretch = min(music.AUGMENTATION_STRETCHES, key=lambda f: abs(f - factor))
        np.testing.assert_allclose([n.start for n in notes], stretch * starts, atol=0.005 + 1e-9)
        assert [n.pitch - semitones for n in notes] == [n.pitch for n in original]
        seen.add((semitones, stretch))
    assert len(seen) > 1


# --- Errors on bad files ----------------------------------------------------
def midi_bytes(midi_format, tracks):
    header = b"MThd" + (6).to_bytes(4, "big") + midi_format.to_bytes(2, "big")
    header += len(tracks).to_bytes(2, "big") + (96).to_bytes(2, "big")
    return header + b"".join(b"MTrk" + len(t).to_bytes(4, "big") + t for t in tracks)


ONE_NOTE_TRACK = b"\x00\x90\x3c\x40\x60\x80\x3c\x40\x00\xff\x2f\x00"


def test_handmade_type_1_file_parses(tmp_path):
    path = tmp_path / "ok.mid"
    path.write_bytes(midi_bytes(1, [ONE_NOTE_TRACK]))
    np.testing.assert_array_equal(
        music.midi_to_events(path), [VEL + 15, ON + 60, shift(50), OFF + 60]
    )


def test_error_empty_file(tmp_path):
    path = tmp_path / "empty.mid"
    path.write_bytes(b"")
    with pytest.raises(ValueError, match=r"empty.mid', 0 bytes starting with b''"):
        music.midi_to_events(path)


def test_error_not_a_midi_file(tmp_path):
    path = tmp_path / "song.mid"
    path.write_bytes(b"ID3\x04 an mp3 renamed to .mid")
    with pytest.raises(ValueError, match=r"type-1 MIDI file.*starting with b'ID3\\x04'"):
        music.midi_to_events(path)
    with pytest.raises(ValueError, match=r"the given bytes"):
        music.midi_to_events(b"hello")


def test_error_corrupt_midi_file(tmp_path):
    path = tmp_path / "truncated.mid"
    path.write_bytes(midi_bytes(1, [ONE_NOTE_TRACK])[:20])
    with pytest.raises(ValueError, match=r"file .*truncated.mid.* is corrupt or truncated"):
        music.midi_to_events(path)


def test_error_type_2_file(tmp_path):
    # A parser would read it silently as simultaneous tracks.
    path = tmp_path / "patterns.mid"
    path.write_bytes(midi_bytes(2, [ONE_NOTE_TRACK, ONE_NOTE_TRACK]))
    with pytest.raises(ValueError, match=r"type-0 or type-1 MIDI file.*, type 2\."):
        music.midi_to_events(path)


def test_error_no_notes(tmp_path):
    path = tmp_path / "silent.mid"
    score_with(symusic.Track(program=0)).dump_midi(path)
    with pytest.raises(ValueError, match=r"non-drum instrument. Received: \d+ tracks without them"):
        music.midi_to_events(path)
    drums_only = score_with(instrument([(36, 100, 0.0, 0.1)], is_drum=True))
    with pytest.raises(ValueError, match=r"1 drum notes \(ignored\)"):
        music.midi_to_events(drums_only)


def test_error_missing_path_and_wrong_type(tmp_path):
    with pytest.raises(
        ValueError, match=r"Expected an existing MIDI file. Received: file '.*nope.mid'"
    ):
        music.midi_to_events(tmp_path / "nope.mid")
    with pytest.raises(TypeError, match=r"Received: <class 'int'>\."):
        music.midi_to_events(3)


# --- JSB Chorales -------------------------------------------------------------
@pytest.fixture(scope="module")
def jsb():
    return {
        "train": music.load_jsb_chorales(DATA, "train"),
        "valid": music.load_jsb_chorales(JSB, split="valid"),
    }


def test_load_jsb_chorales_real_file(jsb):
    train, valid = jsb["train"], jsb["valid"]
    assert (len(train), len(valid)) == (229, 76)
    assert all(c.dtype == np.int32 and c.ndim == 2 and c.shape[1] == 4 for c in train + valid)
    np.testing.assert_array_equal(train[0][:5], [[74, 70, 65, 58]] * 4 + [[75, 70, 58, 55]])
    everything = np.concatenate(train + valid)
    assert everything.shape == (294544 // 4, 4)
    assert (everything == -1).sum() == 1000
    assert everything[everything >= 0].min() == 36 and everything.max() == 81
    with pytest.raises(ValueError, match=r"one of \['train', 'valid'\]. Received: split='test'"):
        music.load_jsb_chorales(JSB, "test")
    with pytest.raises(ValueError, match=r"Jsb16thSeparated.json or its folder.*No such file"):
        music.load_jsb_chorales(os.path.join(DATA, "pop909"))


def test_chorale_tokens_voice_by_voice_per_step(jsb):
    grid = jsb["train"][0]
    tokens = music.chorale_to_tokens(grid, add_start_end=True)
    assert tokens.dtype == np.int32 and len(tokens) == 4 * len(grid) + 2
    np.testing.assert_array_equal(tokens[:9], [music.JSB_START_ID, 78, 74, 69, 62, 78, 74, 69, 62])
    assert tokens[-1] == music.JSB_END_ID
    assert music.JSB_VOCABULARY_SIZE == 132
    rest = music.chorale_to_tokens([[60, -1, 55, -1]])
    np.testing.assert_array_equal(rest, [64, music.JSB_REST_ID, 59, music.JSB_REST_ID])


def test_chorale_token_round_trip_on_every_real_chorale(jsb):
    chorales = jsb["train"] + jsb["valid"]
    assert any((c == -1).any() for c in chorales)
    for grid in chorales:
        np.testing.assert_array_equal(music.tokens_to_chorale(music.chorale_to_tokens(grid)), grid)
    # START / PAD skipped, END stops.
    grid = chorales[0]
    padded = np.concatenate([music.chorale_to_tokens(grid, add_start_end=True), [0, 0, 50]])
    np.testing.assert_array_equal(music.tokens_to_chorale(padded), grid)


def test_transpose_chorale_tokens_by_hand():
    # S 74, A rests, T 65, B 58, then S 76, A 72, T 67, B 60 (ids = pitch + 4, rest = 3).
    tokens = [1, 78, 3, 69, 62, 80, 76, 71, 64, 2, 0]
    np.testing.assert_array_equal(
        transpose_chorale_tokens(tokens, 2), [1, 80, 3, 71, 64, 82, 78, 73, 66, 2, 0]
    )
    np.testing.assert_array_equal(
        transpose_chorale_tokens(tokens, -3), [1, 75, 3, 66, 59, 77, 73, 68, 61, 2, 0]
    )
    assert transpose_chorale_tokens(tokens, 0).dtype == np.int32
    assert transpose_chorale_tokens(np.array(tokens), 2.0).tolist()[1] == 80


def test_transpose_chorale_tokens_out_of_range_and_bad_arguments():
    top = [music.JSB_PITCH_OFFSET + 126, music.JSB_REST_ID, music.JSB_PITCH_OFFSET + 1]
    np.testing.assert_array_equal(transpose_chorale_tokens(top, 1), [131, 3, 6])
    with pytest.raises(
        ValueError, match=r"0..127 after 2 semitones. Received: pitches from 3 to 128"
    ):
        transpose_chorale_tokens(top, 2)
    with pytest.raises(ValueError, match=r"pitches from -1 to 124"):
        transpose_chorale_tokens(top, -2)
    with pytest.raises(ValueError, match=r"semitones.*whole number.*Received: semitones=0.5"):
        transpose_chorale_tokens(top, 0.5)
    with pytest.raises(
        ValueError, match=r"chorale token ids in \[0, 132\). Received: ids from 3 to 132"
    ):
        transpose_chorale_tokens([3, 132], 1)


def test_transposed_real_chorales_go_back(jsb):
    tokens = music.chorale_to_tokens(jsb["valid"][0], add_start_end=True)
    for semitones in (-3, -1, 1, 3):
        moved = transpose_chorale_tokens(tokens, semitones)
        np.testing.assert_array_equal(
            music.tokens_to_chorale(moved)[music.tokens_to_chorale(tokens) >= 0],
            music.tokens_to_chorale(tokens)[music.tokens_to_chorale(tokens) >= 0] + semitones,
        )
        np.testing.assert_array_equal(transpose_chorale_tokens(moved, -semitones), tokens)


def test_tokens_to_chorale_errors():
    with pytest.raises(ValueError, match=r"multiple of 4.*Received: 3"):
        music.tokens_to_chorale([64, 60, 57])
    with pytest.raises(ValueError, match=r"\[0, 132\)"):
        music.tokens_to_chorale([64, 60, 57, 132])
    with pytest.raises(ValueError, match=r"shape \(steps, 4\).*\(3, 3\)"):
        music.chorale_to_tokens(np.zeros((3, 3), int))
    with pytest.raises(ValueError, match=r"-1 \(rest\).*from -2"):
        music.chorale_to_tokens([[60, 60, 60, -2]])


def runs(line):
    """Naive count of notes: maximal runs of one pitch (rests excluded)."""
    count, previous = 0, None
    for pitch in line:
        if pitch >= 0 and pitch != previous:
            count += 1
        previous = pitch
    return count


def test_chorale_to_midi_round_trip_on_real_chorales(jsb, tmp_path):
    chorales = jsb["valid"]
    for index, grid in enumerate(chorales):
        score = music.chorale_to_midi(grid, tempo=120.0)
        if index == 0:  # once through a written file
            score.dump_midi(tmp_path / "chorale.mid")
            score = symusic.Score(tmp_path / "chorale.mid")
        assert [t.name for t in score.tracks] == ["Soprano", "Alto", "Tenor", "Bass"]
        assert score.ticks_per_quarter == 480  # a 16th note is 120 ticks
        for voice, track in enumerate(score.tracks):
            # Held repeats are one note each: as many notes as runs of a pitch.
            assert len(track.notes) == runs(grid[:, voice])
            line = np.full(len(grid), -1)
            for note in track.notes:
                assert note.time % 120 == 0 and note.duration % 120 == 0
                line[note.time // 120 : note.end // 120] = note.pitch
            np.testing.assert_array_equal(line, grid[:, voice])
    # A 16th note lasts 0.25 s at 60 quarters per minute, in the written file too.
    score = music.chorale_to_midi([[60, -1, -1, -1], [60, -1, -1, -1], [62, -1, -1, -1]], tempo=60)
    score.dump_midi(tmp_path / "slow.mid")
    soprano = symusic.Score(tmp_path / "slow.mid").to("second").tracks[0]
    assert [(n.pitch, n.time, n.end) for n in soprano.notes] == [(60, 0.0, 0.5), (62, 0.5, 0.75)]


def test_velocity_bins_round_trip_and_reject_bins_outside_the_vocabulary():
    from keras_attn.preprocessing.music import bin_to_velocity, velocity_to_bin

    assert [bin_to_velocity(b) for b in (0, 1, 31)] == [1, 5, 125]
    for velocity in (1, 4, 5, 64, 127):
        assert velocity_to_bin(bin_to_velocity(velocity_to_bin(velocity))) == velocity_to_bin(
            velocity
        )
    with pytest.raises(
        ValueError,
        match=r"`velocity_bin` must be velocity bins in 0..31. Received: velocity_bin=32\.",
    ):
        bin_to_velocity(32)
    with pytest.raises(ValueError, match=r"Received: velocity_bin=\[3, -1\]"):
        bin_to_velocity([3, -1])


@pytest.mark.parametrize("velocity", [0, 128, 200, -5, 80.0, True])
def test_velocities_outside_midi_are_refused(velocity):
    # 200 overflowed int8 (OverflowError) in chorale_to_midi and wrapped to
    # -56 in events_to_midi; 0 wrote silent notes.
    with pytest.raises(ValueError, match="must be an int in 1..127"):
        music.chorale_to_midi([[60, -1, -1, -1]], velocity=velocity)
    with pytest.raises(ValueError, match="must be an int in 1..127"):
        music.events_to_midi([music.NOTE_ON_OFFSET + 60], default_velocity=velocity)


def test_notes_that_cannot_be_performance_events_are_refused():
    # Each was encoded without a word: an end before the start as a note, a
    # pitch of 60.7 as 60, and a note of 1e12 s ended in a MemoryError.
    with pytest.raises(
        ValueError,
        match=r"Expected notes to end at or after their start. Received: 1 "
        r"ending before, the first from 1.0 s to 0.5 s\.",
    ):
        music.notes_to_events([music.Note(80, 60, 1.0, 0.5)])
    with pytest.raises(
        ValueError, match=r"Expected whole-number note pitches in 0..127. Received: \[60.7\]\."
    ):
        music.notes_to_events([music.Note(80, 60.7, 0.0, 0.5)])
    with pytest.raises(
        ValueError, match=r"Expected whole-number note velocities. Received: \[80.5\]\."
    ):
        music.notes_to_events([music.Note(80.5, 60, 0.0, 0.5)])
    for pitch in (128, -1):
        with pytest.raises(ValueError, match=rf"note pitches in 0..127. Received: \[{pitch}.0\]\."):
            music.notes_to_events([music.Note(80, pitch, 0.0, 0.5)])
    with pytest.raises(
        ValueError,
        match=r"Expected note times in \[0 s, 1e\+06 s\). Received: 0.0 s to "
        r"1000000000000.0 s",
    ):
        music.notes_to_events([music.Note(80, 60, 0.0, 1e12)])
    with pytest.raises(ValueError, match=r"Expected note times in \[0 s, 1e\+06 s\)"):
        music.time_stretch(music.notes_to_events([music.Note(80, 60, 0.0, 0.5)]), 1e9)
    # Whole floats are whole numbers; a note may end where it starts.
    np.testing.assert_array_equal(
        music.notes_to_events([music.Note(80.0, 60.0, 0.0, 0.5)]),
        music.notes_to_events([music.Note(80, 60, 0.0, 0.5)]),
    )
    assert len(music.notes_to_events([music.Note(80, 60, 0.5, 0.5)])) > 0


def test_scores_without_a_time_scale_are_refused():
    # A division of 0 raised ZeroDivisionError; a tempo of 0 returned no notes.
    def score(ticks_per_quarter, qpm=None):
        result = symusic.Score(ticks_per_quarter)
        track = symusic.Track(program=0)
        track.notes.append(symusic.Note(0, 480, 60, 80))
        result.tracks.append(track)
        if qpm is not None:
            result.tempos.append(symusic.Tempo(0, qpm=qpm))
        return result

    with pytest.raises(
        ValueError,
        match=r"positive ticks per quarter and tempos. Received: ticks_per_quarter=0",
    ):
        music.midi_to_notes(score(0))
    with pytest.raises(
        ValueError, match=r"Received: ticks_per_quarter=480, tempos \[-2147483648\]"
    ):
        music.midi_to_notes(score(480, qpm=0.0))
    assert len(music.midi_to_notes(score(480, qpm=120.0))) == 1


def test_notes_and_random_generators_of_another_kind_are_named():
    # Both gave an AttributeError ('tuple' object has no attribute 'pitch',
    # 'NoneType' object has no attribute 'choice').
    for notes in ([(80, 60, 0.0, 0.5)], [{"pitch": 60}], []):
        with pytest.raises(
            ValueError,
            match=r"Expected `Note`s \(start, end, pitch, velocity\). "
            r"Received: (\(80|\{'pitch'|\[\])",
        ):
            music.notes_to_events(notes)
    with pytest.raises(
        ValueError, match=r"`rng` must be a `np.random.Generator`.*Received: rng=None\."
    ):
        music.augment(np.array([378, 63, 308, 191]), None)
