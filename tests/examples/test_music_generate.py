"""examples/music/generate.py: its flags, primers and piano rolls, and the note
statistics (note_statistics.py) that hold the samples against the validation
data, on hand-counted rows."""

import numpy as np
import pytest

from keras_attn.preprocessing import music
from tests.examples.scripts import load_script


def _generate():
    return load_script("music/generate.py")


def _statistics():
    return load_script("music/note_statistics.py")


def test_chorale_statistics_count_held_pitches_as_one_note():
    statistics = _statistics()
    # 20 steps: soprano holds 72 for 18 steps then 74 for 2; alto 4 x 5 steps;
    # tenor rests 10 steps then holds 60 for 10; bass holds 48 throughout.
    soprano = [72] * 18 + [74] * 2
    alto = [67] * 5 + [65] * 5 + [64] * 5 + [62] * 5
    tenor = [-1] * 10 + [60] * 10
    bass = [48] * 20
    grid = np.stack([soprano, alto, tenor, bass], axis=1)
    row = np.concatenate(
        [[music.JSB_START_ID], music.chorale_to_tokens(grid), [music.JSB_END_ID, 0]]
    )
    stats = statistics.music_statistics("jsb", [row])
    # Notes: 18, 2, 5, 5, 5, 5, 10, 20 (the rest is not a note).
    assert stats["notes"] == 8
    assert stats["note_length"] == pytest.approx(70 / 8)
    assert stats["long_notes"] == pytest.approx(2 / 8)  # 18 and 20 steps
    # Steps 5, 10 (alto, tenor), 15 (alto) and 18 (soprano) move: 4 of 19.
    assert stats["moving_steps"] == pytest.approx(4 / 19)
    # Alto 62 against tenor 60 (a second) in steps 15-19, soprano 74 against
    # tenor 60 (a ninth) in 18-19; the rest are 4ths, 5ths, 3rds, 6ths and octaves.
    assert stats["dissonant_steps"] == pytest.approx(5 / 20)


def test_performance_statistics_in_seconds():
    statistics = _statistics()
    on, off = music.NOTE_ON_OFFSET, music.NOTE_OFF_OFFSET

    def shift(steps):  # time shift of `steps` x 10 ms
        return music.TIME_SHIFT_OFFSET + steps - 1

    # 60 sounds 0-1 s, 64 sounds 0.5-1 s; then 0.5 s of silence: 1.5 s in all.
    row = np.array(
        [
            on + 60,
            shift(50),
            on + 64,
            shift(50),
            off + 60,
            off + 64,
            shift(50),
            music.END_ID,
            on + 67,
            shift(100),
        ]
    )
    stats = statistics.music_statistics("performance", [row])
    assert stats["notes"] == 2
    assert stats["notes_per_second"] == pytest.approx(2 / 1.5)
    assert stats["note_duration"] == pytest.approx(0.75)
    assert stats["polyphony"] == pytest.approx(1.5 / 1.5)


def test_performance_statistics_count_hanging_notes_and_measure_them_cut():
    statistics = _statistics()
    on, off = music.NOTE_ON_OFFSET, music.NOTE_OFF_OFFSET
    second = music.TIME_SHIFT_OFFSET + 99  # a time shift of 1 s
    # 60 is never turned off (8 s to the end); 64 sounds exactly 5 s; 67 sounds 1 s.
    row = np.array(
        [on + 60, on + 64] + [second] * 5 + [off + 64, on + 67, second, off + 67] + [second] * 2
    )
    exact = statistics.music_statistics("performance", [row])
    assert exact["notes"] == 3
    assert exact["note_duration"] == pytest.approx((8 + 5 + 1) / 3)
    assert exact["long_notes"] == pytest.approx(1 / 3)  # 5 s is not longer than 5 s
    cut = statistics.music_statistics("performance", [row], max_note_duration=2.0)
    assert cut["note_duration"] == pytest.approx((2 + 2 + 1) / 3)
    assert cut["polyphony"] == pytest.approx(5 / 8)
    assert cut["long_notes"] == exact["long_notes"]  # counted as sampled
    # The written file holds the cut notes (ticks are milliseconds).
    notes = _generate().to_midi("performance", row, max_note_duration=2.0).tracks[0].notes
    assert sorted((n.pitch, n.time, n.duration) for n in notes) == [
        (60, 0, 2000),
        (64, 0, 2000),
        (67, 5000, 1000),
    ]


def test_no_notes_gives_none_and_validation_windows_are_whole():
    statistics = _statistics()
    assert (
        statistics.music_statistics("jsb", [np.array([music.JSB_START_ID, music.JSB_END_ID])])
        is None
    )
    pieces = [np.arange(10), np.arange(3)]
    windows = statistics.validation_windows(pieces, length=5, step=4)
    assert [w.tolist() for w in windows] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    # Pieces all shorter than the samples: the whole pieces are the reference.
    assert len(statistics.validation_windows(pieces, length=40, step=4)) == 2


def _parse(tmp_path, task, *flags):
    import json

    (tmp_path / "config.json").write_text(json.dumps({"task": task, "sequence_length": 32}))
    return _generate().parse_args(["--run_dir", str(tmp_path), *flags])


def test_max_note_duration_flag(tmp_path, capsys):
    generate = _generate()
    assert (
        _parse(tmp_path, "performance").max_note_duration
        == generate.note_statistics.LONG_NOTE_SECONDS
    )
    assert _parse(tmp_path, "performance", "--max_note_duration", "2.5").max_note_duration == 2.5
    assert _parse(tmp_path, "performance", "--max_note_duration", "0").max_note_duration is None
    assert _parse(tmp_path, "jsb").max_note_duration is None
    for task, value, message in (
        (
            "performance",
            "inf",
            "finite number of seconds >= 0.01. Received: max_note_duration=inf.",
        ),
        ("performance", "0.001", "Received: max_note_duration=0.001."),
        ("performance", "-2", "Received: max_note_duration=-2.0."),
        ("jsb", "5", "applies to performance runs"),
    ):
        with pytest.raises(SystemExit):
            _parse(tmp_path, task, "--max_note_duration", value)
        assert message in capsys.readouterr().err


def test_a_run_dir_without_a_train_py_config_is_a_usage_error(tmp_path, capsys):
    # A config without "task" ended in a KeyError traceback, broken JSON in
    # a traceback that did not name the file, and an unknown task was taken.
    generate = _generate()
    config = tmp_path / "config.json"
    for text, message in (
        (
            '{"sequence_length": 32}',
            "is not the config.json of a finished examples/music/train.py run (KeyError: 'task')",
        ),
        (
            "{not json",
            "is not the config.json of a finished examples/music/train.py run (JSONDecodeError",
        ),
        (
            '{"task": "opera", "sequence_length": 32}',
            "unknown task 'opera', expected one of ('jsb', 'performance')",
        ),
    ):
        config.write_text(text)
        with pytest.raises(SystemExit) as exit_info:
            generate.parse_args(["--run_dir", str(tmp_path)])
        assert exit_info.value.code == 2
        err = capsys.readouterr().err
        assert message in err and str(config) in err


def test_top_k_zero_means_all_events_as_in_the_saved_model(tmp_path, capsys):
    assert _parse(tmp_path, "jsb", "--top_k", "0").top_k is None
    assert _parse(tmp_path, "jsb", "--top_k", "20").top_k == 20
    with pytest.raises(SystemExit):
        _parse(tmp_path, "jsb", "--top_k", "-1")
    assert "--top_k must be >= 0" in capsys.readouterr().err


def test_primer_flags(tmp_path, capsys):
    # The default primer length, rounded to whole chorale steps; one given is
    # taken as it is, and refused unless whole steps: it was rounded down
    # silently (3 became 0, an unprimed sample).
    assert _parse(tmp_path, "jsb", "--primer", "validation").primer_length % 4 == 0
    assert (
        _parse(tmp_path, "jsb", "--primer", "validation", "--primer_length", "8").primer_length == 8
    )
    assert (
        _parse(
            tmp_path, "performance", "--primer", "validation", "--primer_length", "7"
        ).primer_length
        == 7
    )
    midi = tmp_path / "primer.mid"
    midi.write_bytes(b"")
    assert _parse(tmp_path, "performance", "--primer", str(midi)).primer == str(midi)
    for task, args, message in (
        (
            "jsb",
            ["--primer", "validation", "--primer_length", "3"],
            "--primer_length must be a multiple of 4 for a jsb run (whole time steps of the 4 voices), "
            "received 3",
        ),
        ("jsb", ["--primer_length", "64"], "--primer_length takes events from a primer"),
        (
            "jsb",
            ["--primer", "foo"],
            "--primer must be 'none', 'validation', 'validation:choice' or "
            "'validation:report', a .mid or a .json file, received 'foo'",
        ),
        ("jsb", ["--primer", "validation:train"], "received 'validation:train'"),
        (
            "performance",
            ["--primer", str(tmp_path / "missing.mid")],
            "missing.mid': no such file",
        ),
        ("jsb", ["--primer", str(midi)], "a jsb run takes .json chorale files"),
        ("performance", ["--primer", "held_out.json"], "a jsb run takes .json chorale files"),
    ):
        with pytest.raises(SystemExit):
            _parse(tmp_path, task, *args)
        assert message in capsys.readouterr().err


def test_jsb_samples_leave_out_the_pitches_no_training_chorale_uses(tmp_path, capsys):
    generate = _generate()
    music_data = load_script("music/music_data.py")
    train = music_data.load_jsb(None, "train")
    unused = music_data.unused_pitch_ids("jsb", train)
    # The 229 training chorales span MIDI 36..81 without a gap; the other 82
    # pitches are left out, and no validation chorale uses one of them.
    pitches = np.array(unused) - music.JSB_PITCH_OFFSET
    assert pitches.tolist() == list(range(36)) + list(range(82, 128))
    valid = np.concatenate(music_data.load_jsb(None, "valid"))
    assert not np.isin(valid, unused).any()
    assert music_data.unused_pitch_ids("performance", train) == ()
    # One home for what generate.py and train.py's export leave out.
    assert music_data.never_sampled_ids("jsb", train) == (0, 1) + unused
    assert music_data.never_sampled_ids("jsb", train, all_pitches=True) == (0, 1)
    assert music_data.never_sampled_ids("performance", train) == (0, 1)

    assert generate.suppressed_ids(_parse(tmp_path, "jsb")) == (0, 1) + unused
    assert "the 82 pitches no training chorale uses (the chorales span MIDI 36..81" in (
        capsys.readouterr().out
    )
    assert generate.suppressed_ids(_parse(tmp_path, "jsb", "--all_pitches")) == (0, 1)
    assert generate.suppressed_ids(_parse(tmp_path, "performance")) == (0, 1)


def test_validation_halves_are_deterministic_and_disjoint():
    music_data = load_script("music/music_data.py")
    valid = music_data.load_jsb(None, "valid")
    choice = music_data.validation_half(valid, "choice")
    report = music_data.validation_half(valid, "report")
    # The first 38 of the 76 validation chorales choose, the last 38 report.
    assert len(valid) == 76 and len(choice) == len(report) == 38
    assert all(a is b for a, b in zip(choice + report, valid))
    assert [len(p) for p in music_data.validation_half(valid, "report")] == [len(p) for p in report]
    assert not {p.tobytes() for p in choice} & {p.tobytes() for p in report}
    assert music_data.validation_half(list(range(5)), "choice") == [0, 1]
    assert music_data.validation_half(list(range(5)), "report") == [2, 3, 4]


def test_a_chorale_file_primes_like_the_validation_half_it_holds(tmp_path):
    import json

    generate = _generate()
    music_data = load_script("music/music_data.py")
    with open(f"{music_data.SHIPPED_DATA_DIR}/Jsb16thSeparated.json") as f:
        held_out = {"test": json.load(f)["valid"][38:]}  # the report half
    path = tmp_path / "held_out.json"
    path.write_text(json.dumps(held_out))

    half = _parse(tmp_path, "jsb", "--primer", "validation:report", "--num_samples", "3")
    from_file = _parse(tmp_path, "jsb", "--primer", str(path), "--primer_key", "test")
    from_file.num_samples = 3
    valid = music_data.load_jsb(None, "valid")
    pieces = generate.primer_pieces(from_file, valid)
    assert [p.tolist() for p in pieces] == [p.tolist() for p in valid[38:]]
    assert [p.tolist() for p in generate.primer_pieces(half, valid)] == [p.tolist() for p in pieces]
    primers = generate.make_primers(from_file, generate.primer_sources(from_file, pieces))
    half_sources = generate.primer_sources(half, valid[38:])
    assert primers.tolist() == generate.make_primers(half, half_sources).tolist()
    # Each row: START, then the first 16 tokens (4 steps) of chorale 38, 39, 40.
    assert primers.shape == (3, 17) and (primers[:, 0] == music.JSB_START_ID).all()
    assert [row[1:].tolist() for row in primers] == [p[:16].tolist() for p in valid[38:41]]
    assert from_file.name == "held_out" and half.name == "validation_report"


def test_the_piano_roll_draws_the_primers_piece_below_the_sample(tmp_path):
    # Sample: soprano 72 for 8 steps then 74 for 8; the piece: 72 for 16 steps
    # and 16 more steps past the sample's end, cut off in the figure.
    roll = load_script("music/piano_roll.py")
    generate = _generate()
    grid = np.full((16, 4), -1)
    grid[:, 0] = [72] * 8 + [74] * 8
    piece = np.full((32, 4), -1)
    piece[:, 0] = 72
    sample = generate.to_midi("jsb", music.chorale_to_tokens(grid))
    truth = generate.to_midi("jsb", np.append(music.chorale_to_tokens(piece), music.JSB_END_ID))
    # 16ths at 120 bpm: 0.125 s a step; at 8 frames per second one frame a step.
    frames = roll.piano_roll(sample, fs=8)
    assert frames.shape[1] == 17 and np.flatnonzero(frames[72]).tolist() == list(range(8))
    assert np.flatnonzero(frames[74]).tolist() == list(range(8, 16))
    assert np.flatnonzero(roll.piano_roll(truth, fs=8)[72]).tolist() == list(range(32))

    import matplotlib.image

    alone, both = tmp_path / "alone.png", tmp_path / "both.png"
    roll.plot_piano_roll(sample, str(alone), "sample", primer_end=0.5, dpi=50)
    roll.plot_piano_roll(sample, str(both), "sample", primer_end=0.5, truth=truth, dpi=50)
    # One panel is 3.5 inches high, two 6: the piece is a second panel.
    assert matplotlib.image.imread(alone).shape[:2] == (175, 600)
    assert matplotlib.image.imread(both).shape[:2] == (300, 600)


def test_every_primer_is_cut_from_its_source_piece(tmp_path):
    generate = _generate()
    pieces = [np.arange(3, 40, dtype=np.int32), np.arange(50, 60, dtype=np.int32)]
    args = _parse(tmp_path, "jsb", "--primer", "validation", "--primer_length", "8")
    args.num_samples = 3
    sources = generate.primer_sources(args, pieces)
    assert [s.tolist() for s in sources] == [p.tolist() for p in (pieces[0], pieces[1], pieces[0])]
    primers = generate.make_primers(args, sources)
    assert primers[:, 0].tolist() == [music.START_ID] * 3
    assert primers[1, 1:].tolist() == list(range(50, 58))
    assert generate.primer_sources(_parse(tmp_path, "jsb"), pieces) is None
    assert (
        generate.make_primers(_parse(tmp_path, "jsb", "--num_samples", "2"), None).tolist()
        == [[music.START_ID]] * 2
    )


def test_sampling_flags_default_to_the_tasks_recommended_settings(tmp_path, capsys):
    from keras_attn.export.music_generator import RECOMMENDED_SAMPLING

    assert RECOMMENDED_SAMPLING["jsb"] == {"temperature": 1.0, "top_k": 5, "top_p": 1.0}
    jsb = _parse(tmp_path, "jsb")  # training length 32
    assert (jsb.temperature, jsb.top_k, jsb.top_p, jsb.context) == (1.0, 5, None, 32)
    performance = _parse(tmp_path, "performance")
    assert (performance.temperature, performance.top_k, performance.top_p) == (0.9, 40, None)
    assert performance.context == 0
    # Given flags win; 0 / 1 turn the filters off, as in the SavedModel.
    given = _parse(tmp_path, "jsb", "--temperature", "1.2", "--top_k", "0", "--top_p", "1")
    assert (given.temperature, given.top_k, given.top_p) == (1.2, None, None)
    assert _parse(tmp_path, "jsb", "--context", "0").context == 0
    # A window must hold the primer (16 events by default here) and START, and leave room.
    assert _parse(tmp_path, "jsb", "--primer", "validation", "--context", "18").context == 18
    for flags, message in (
        (["--context", "-1"], "--context must be >= 0 (0 = the whole sample), received -1"),
        (["--primer", "validation", "--context", "17"], "--context must be at least 18 here"),
        (["--context", "11"], "--context must be at least 12 here"),  # 2 steps + START + 3
    ):
        with pytest.raises(SystemExit):
            _parse(tmp_path, "jsb", *flags)
        assert message in capsys.readouterr().err
