"""examples/run_folder.py: a second command on a run folder resumes or
evaluates the model it holds and never trains a new one over it; a flag
left out takes the recorded value, a contradicting one is refused; a
resumed run keeps the best epoch so far; `check_run_folders` refuses,
before any work, what a run could only fail on later."""

import argparse
import importlib.util
import json
import os
import sys

import pytest

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


def test_a_left_out_flag_takes_the_recorded_value_and_a_contradicting_one_is_refused(tmp_path, capsys):
    module, parser, args = _record_args(tmp_path, ["--hidden_dim", "32", "--minutes", "5"])
    module.check_run_record(parser, args, FLAGS)  # a new folder: nothing recorded yet
    os.makedirs(args.output_dir)
    module.record_flags(args, FLAGS)
    with open(tmp_path / "run" / "config.json") as f:
        assert json.load(f) == {"hidden_dim": 32, "position": "sinusoidal"}

    # The same folder, --hidden_dim left out, --minutes (not recorded) changed.
    module, parser, args = _record_args(tmp_path, ["--minutes", "9"])
    module.check_run_record(parser, args, FLAGS)
    assert (args.hidden_dim, args.position, args.minutes) == (32, "sinusoidal", 9.0)
    assert "config.json: hidden_dim=32" in capsys.readouterr().out
    module.record_flags(args, FLAGS)  # the first record stays
    with open(tmp_path / "run" / "config.json") as f:
        assert json.load(f)["hidden_dim"] == 32

    module, parser, args = _record_args(tmp_path, ["--hidden_dim", "128", "--position", "learned"])
    with pytest.raises(SystemExit) as stopped:
        module.check_run_record(parser, args, FLAGS)
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert "holds a model trained with other settings: hidden_dim=128 (the run has 32), " \
           "position='learned' (the run has 'sinusoidal')" in err
    assert "pass another --output_dir" in err


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


def test_a_damaged_record_is_reported(tmp_path, capsys):
    module, parser, args = _record_args(tmp_path)
    os.makedirs(args.output_dir)
    (tmp_path / "run" / "config.json").write_text('{"hidden_dim": 3')
    with pytest.raises(SystemExit):
        module.check_run_record(parser, args, FLAGS)
    assert "config.json is not a readable record of the run" in capsys.readouterr().err


def test_best_logged_is_the_lowest_value_in_history(tmp_path):
    module = _run_folder()
    assert module.best_logged(str(tmp_path), "val_loss") is None
    (tmp_path / "history.csv").write_text("epoch,loss,val_loss\n0,2.0,0.5\n1,1.5,0.25\n2,1.2,0.4\n3,1.1,\n")
    assert module.best_logged(str(tmp_path), "val_loss") == 0.25
    assert module.best_logged(str(tmp_path), "val_bits_per_dim") is None


def _train_module(example):
    path = os.path.join(EXAMPLES, example, "train.py")
    spec = importlib.util.spec_from_file_location(f"{example}_train_under_test", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("example, flag, recorded, other", [
    ("translation", "hidden_dim", 64, "32"),
    ("super_resolution", "block_size", 48, "24"),
    ("music", "num_heads", 2, "8"),
])
def test_every_train_script_reads_its_run_folder_first(tmp_path, capsys, example, flag, recorded, other):
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


@pytest.mark.parametrize("case", ["existing_version", "export_dir_is_a_file", "output_dir_is_a_file",
                                  "no_model_to_load"])
def test_check_run_folders_refuses_before_any_work(tmp_path, capsys, case):
    os.makedirs(tmp_path / "run" / "export" / "1")
    flags, loads_model, expected = {}, False, None
    if case == "existing_version":
        flags, expected = {"version": 1}, "export/1 exists already: leave out --version to export version 2"
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


