"""examples/run_folder.py: a second command on a run folder resumes or
evaluates the model it holds and never trains a new one over it; a flag
left out takes the recorded value, a contradicting one is refused; a
resumed run keeps the best epoch so far; `check_run_folders` refuses,
before any work, what a run could only fail on later."""

import argparse
import json
import os
import sys

import pytest

from tests.examples.scripts import load_script

pytest.importorskip("tensorflow")  # the examples' helpers import it
pytestmark = pytest.mark.requires_tensorflow

EXAMPLES = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "examples"))


def _run_folder():
    if EXAMPLES not in sys.path:
        sys.path.insert(0, EXAMPLES)  # as each train.py does: run_folder imports training_utils
    import run_folder

    return run_folder


def _record_args(tmp_path, argv=()):
    """A parser like a train.py's, with two recorded flags and one free one."""
    module = _run_folder()
    parser = argparse.ArgumentParser()
    parser.add_argument("--output_dir", default=str(tmp_path / "run"))
    parser.add_argument("--hidden_dim", type=int, default=64)
    parser.add_argument("--position", default="sinusoidal")
    parser.add_argument("--minutes", type=float, default=None)
    parser.add_argument("--skip_training", action="store_true")
    return module, parser, parser.parse_args(list(argv))


FLAGS = ("hidden_dim", "position")


def test_a_left_out_flag_takes_the_recorded_value_and_a_contradicting_one_is_refused(
    tmp_path, capsys
):
    module, parser, args = _record_args(tmp_path, ["--hidden_dim", "32", "--minutes", "5"])
    module.check_run_record(parser, args, FLAGS)  # a new folder: nothing recorded yet
    os.makedirs(args.output_dir)
    module.record_flags(args)
    with open(tmp_path / "run" / "config.json") as f:
        assert json.load(f) == {"hidden_dim": 32, "position": "sinusoidal"}
    (tmp_path / "run" / "backup").mkdir()  # an epoch ended: the run is interrupted, not new

    # The same folder, --hidden_dim left out, --minutes (not recorded) changed.
    module, parser, args = _record_args(tmp_path, ["--minutes", "9"])
    module.check_run_record(parser, args, FLAGS)
    assert (args.hidden_dim, args.position, args.minutes) == (32, "sinusoidal", 9.0)
    assert "config.json: hidden_dim=32" in capsys.readouterr().out
    assert not args.skip_training  # it resumes
    module.record_flags(args)  # the first record stays
    with open(tmp_path / "run" / "config.json") as f:
        assert json.load(f)["hidden_dim"] == 32

    module, parser, args = _record_args(tmp_path, ["--hidden_dim", "128", "--position", "learned"])
    with pytest.raises(SystemExit) as stopped:
        module.check_run_record(parser, args, FLAGS)
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert (
        "holds a model trained with other settings: hidden_dim=128 (the run has 32), "
        "position='learned' (the run has 'sinusoidal')" in err
    )
    assert "pass another --output_dir" in err


def test_a_command_that_trained_nothing_gives_way_to_the_next(tmp_path, capsys):
    # A first command that failed before its first epoch (a --num_heads that
    # does not divide --hidden_dim) recorded its flags, and the corrected
    # command was refused, or took the failing value again when it left the
    # flag out.
    module, parser, args = _record_args(tmp_path, ["--hidden_dim", "30"])
    module.check_run_record(parser, args, FLAGS)
    os.makedirs(args.output_dir)
    module.record_flags(args)
    (tmp_path / "run" / "tokenizer.model").write_text("made for hidden_dim 30")
    # The same failing command again: nothing to start over.
    module, parser, args = _record_args(tmp_path, ["--hidden_dim", "30"])
    module.check_run_record(parser, args, FLAGS, made_before_training=("tokenizer.model",))
    assert "starting over" not in capsys.readouterr().out
    assert (tmp_path / "run" / "tokenizer.model").exists()
    # The flag left out: the default, not the failing value.
    module, parser, args = _record_args(tmp_path, [])
    module.check_run_record(parser, args, FLAGS, made_before_training=("tokenizer.model",))
    assert args.hidden_dim == 64
    assert "stopped before its first epoch ended: starting over" in capsys.readouterr().out
    assert not (tmp_path / "run" / "tokenizer.model").exists()
    assert not (tmp_path / "run" / "config.json").exists()
    # Another value: taken, recorded, and once an epoch has ended, binding.
    module, parser, args = _record_args(tmp_path, ["--hidden_dim", "32"])
    module.check_run_record(parser, args, FLAGS)
    module.record_flags(args)
    (tmp_path / "run" / "backup").mkdir()
    module, parser, args = _record_args(tmp_path, [])
    module.check_run_record(parser, args, FLAGS)
    assert args.hidden_dim == 32


def test_derived_defaults_are_recorded_as_given(tmp_path, capsys):
    # A script that fills a default from other flags after the check (music's
    # max_relative_position = sequence_length) records the flag as given, so
    # the same command does not announce it as taken from the record.
    module, parser, args = _record_args(tmp_path)
    parser.set_defaults(position=None)
    args = parser.parse_args([])
    module.check_run_record(parser, args, FLAGS)
    args.position = "derived"
    os.makedirs(args.output_dir)
    module.record_flags(args)
    (tmp_path / "run" / "backup").mkdir()
    args = parser.parse_args([])
    module.check_run_record(parser, args, FLAGS)
    assert args.position is None and "As recorded" not in capsys.readouterr().out


def test_a_finished_run_is_evaluated_not_trained_again(tmp_path, capsys):
    module, parser, args = _record_args(tmp_path)
    os.makedirs(args.output_dir)
    module.check_run_record(parser, args, FLAGS)
    assert not args.skip_training  # interrupted or new: train (and resume)
    module.mark_training_finished(args.output_dir)
    module.check_run_record(parser, args, FLAGS)
    assert args.skip_training
    assert "holds a finished training run: evaluating it" in capsys.readouterr().out
    # --continue_training asks for more epochs of the finished run.
    args = parser.parse_args([])
    args.continue_training = True
    module.check_run_record(parser, args, FLAGS)
    assert not args.skip_training


def test_a_run_finished_by_an_older_version_is_recognised(tmp_path):
    # Older versions wrote no mark and no record: their finished runs were
    # trained again from scratch over model.keras.
    module = _run_folder()
    run = tmp_path / "run"
    run.mkdir()
    assert not module.training_finished(str(run))
    (run / "model.keras").write_text("")
    (run / "backup").mkdir()
    assert not module.training_finished(str(run))  # interrupted: resume
    (run / "backup").rmdir()
    assert module.training_finished(str(run))  # Keras removes the backup when fit ends


@pytest.mark.parametrize(
    "text, reason",
    [('{"hidden_dim": 3', "Expecting"), ("null", "a JSON NoneType"), ("[1, 2]", "a JSON list")],
)
def test_a_damaged_record_is_reported(tmp_path, capsys, text, reason):
    module, parser, args = _record_args(tmp_path)
    os.makedirs(args.output_dir)
    (tmp_path / "run" / "config.json").write_text(text)
    with pytest.raises(SystemExit):
        module.check_run_record(parser, args, FLAGS)
    err = capsys.readouterr().err
    assert "config.json is not a readable record of the run (" + reason in err


def test_best_logged_is_the_lowest_value_in_history(tmp_path):
    module = _run_folder()
    assert module.best_logged(str(tmp_path), "val_loss") is None
    (tmp_path / "history.csv").write_text(
        "epoch,loss,val_loss\n0,2.0,0.5\n1,1.5,0.25\n2,1.2,0.4\n3,1.1,\n"
    )
    assert module.best_logged(str(tmp_path), "val_loss") == 0.25
    assert module.best_logged(str(tmp_path), "val_bits_per_dim") is None
    (tmp_path / "history.csv").write_text("epoch,loss,val_loss\n0,2.0,0.5\n1,1.5,nan-ish\n")
    with pytest.raises(
        ValueError, match=r"history.csv, line 3: val_loss is 'nan-ish', not a number"
    ):
        module.best_logged(str(tmp_path), "val_loss")


def test_the_best_checkpoint_survives_a_stop_while_saving_and_a_resumed_run(tmp_path, monkeypatch):
    import keras
    import numpy as np

    module = _run_folder()
    (tmp_path / "history.csv").write_text("epoch,loss,val_loss\n0,2.0,0.5\n")
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    checkpoint = module.best_checkpoint(str(tmp_path), "val_loss")
    checkpoint.set_model(model)
    checkpoint.on_epoch_end(1, {"val_loss": 0.7})  # worse than the interrupted run's best
    assert not (tmp_path / "model.keras").exists()
    checkpoint.on_epoch_end(2, {"val_loss": 0.4})
    best = keras.saving.load_model(tmp_path / "model.keras").get_weights()

    def stopped_while_saving(path, *args, **kwargs):
        with open(path, "wb") as f:
            f.write(b"PK\x03\x04 half a zip")
        raise KeyboardInterrupt

    model.set_weights([w + 1 for w in model.get_weights()])
    monkeypatch.setattr(model, "save", stopped_while_saving)
    with pytest.raises(KeyboardInterrupt):
        checkpoint.on_epoch_end(3, {"val_loss": 0.3})
    for got, expected in zip(keras.saving.load_model(tmp_path / "model.keras").get_weights(), best):
        np.testing.assert_array_equal(got, expected)


def _train_module(example):
    return load_script(f"{example}/train.py")


@pytest.mark.parametrize(
    "example, flag, recorded, other",
    [
        ("translation", "hidden_dim", 64, "32"),
        ("super_resolution", "block_size", 48, "24"),
        ("music", "num_heads", 2, "8"),
    ],
)
def test_every_train_script_reads_its_run_folder_first(
    tmp_path, capsys, example, flag, recorded, other
):
    # The harm this guards against: the same command on a finished
    # translation or super-resolution run trained a new model from scratch
    # and wrote it over model.keras.
    module = _train_module(example)
    run = tmp_path / "run"
    os.makedirs(run)
    (run / "config.json").write_text(json.dumps({flag: recorded}))
    (run / "model.keras").write_text("")
    (run / "training_done.txt").write_text("")
    args = module.parse_args(["--output_dir", str(run), "--skip_export"])
    assert args.skip_training and getattr(args, flag) == recorded
    with pytest.raises(SystemExit):
        module.parse_args(["--output_dir", str(run), f"--{flag}", other])
    assert f"{flag}={int(other)} (the run has {recorded})" in capsys.readouterr().err
    assert flag in module.RECORDED_FLAGS
    # Every recorded name is a flag of the script.
    parsed = vars(module.parse_args(["--output_dir", str(tmp_path / "new"), "--skip_export"]))
    assert set(module.RECORDED_FLAGS) <= set(parsed), set(module.RECORDED_FLAGS) - set(parsed)


def _folders_args(tmp_path, **flags):
    module = _run_folder()
    parser = argparse.ArgumentParser()
    parser.add_argument("--output_dir")
    module.add_export_arguments(parser)
    argv = ["--output_dir", str(tmp_path / "run")]
    for flag, value in flags.items():
        argv += [f"--{flag}"] + ([] if value is True else [str(value)])
    return module, parser, parser.parse_args(argv)


def test_check_run_folders_picks_the_next_version_and_the_default_export_dir(tmp_path):
    module, parser, args = _folders_args(tmp_path)
    module.check_run_folders(parser, args)
    assert (args.export_dir, args.version) == (str(tmp_path / "run" / "export"), 1)
    for name in ("1", "3", "notes", "07"):
        os.makedirs(tmp_path / "run" / "export" / name)
    module, parser, args = _folders_args(tmp_path)
    module.check_run_folders(parser, args)
    assert args.version == 8  # one above the newest: TF Serving switches to it
    module, parser, args = _folders_args(tmp_path, version=2)
    module.check_run_folders(parser, args)
    assert args.version == 2


@pytest.mark.parametrize(
    "case", ["existing_version", "export_dir_is_a_file", "output_dir_is_a_file", "no_model_to_load"]
)
def test_check_run_folders_refuses_before_any_work(tmp_path, capsys, case):
    os.makedirs(tmp_path / "run" / "export" / "1")
    flags, loads_model, expected = {}, False, None
    if case == "existing_version":
        flags, expected = (
            {"version": 1},
            "export/1 exists already: leave out --version to export version 2",
        )
    elif case == "export_dir_is_a_file":
        (tmp_path / "file").write_text("x")
        flags, expected = {"export_dir": tmp_path / "file"}, "file is a file; pass the folder"
    elif case == "output_dir_is_a_file":
        (tmp_path / "file").write_text("x")
        flags, expected = {"output_dir": tmp_path / "file"}, "file is a file; pass a folder"
    else:
        loads_model, expected = True, "model.keras does not exist: this starts from a trained model"
    module, parser, args = _folders_args(tmp_path, **flags)
    with pytest.raises(SystemExit) as stopped:
        module.check_run_folders(parser, args, loads_model=loads_model)
    assert stopped.value.code == 2
    assert expected in capsys.readouterr().err
    # --skip_export lifts the export checks only.
    if case in ("existing_version", "export_dir_is_a_file"):
        module, parser, args = _folders_args(tmp_path, skip_export=True, **flags)
        module.check_run_folders(parser, args)
