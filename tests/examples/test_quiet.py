"""examples/quiet.py `run`: a user's mistake ends the example scripts with
one line and status 1 (a traceback only with --verbose), Ctrl-C with a line
and a SIGINT death; and the scripts leave no run folder behind when they
stop on such a mistake."""

import os
import subprocess
import sys

import pytest

from tests.examples.scripts import load_script

pytest.importorskip("tensorflow")  # quiet.py imports it at start-up
pytestmark = pytest.mark.requires_tensorflow

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")


def _quiet():
    return load_script("quiet.py")


def _raising(error):
    def main():
        raise error

    return main


@pytest.mark.parametrize(
    "error, expected",
    [
        (
            ValueError("`num_heads` must be >= 1. Received: num_heads=0."),
            "error: `num_heads` must be >= 1. Received: num_heads=0.",
        ),
        (
            FileNotFoundError(2, "No such file or directory", "runs/x/model.keras"),
            "error: [Errno 2] No such file or directory: 'runs/x/model.keras'",
        ),
    ],
)
def test_a_mistake_ends_in_one_line_and_status_1(monkeypatch, capsys, error, expected):
    module = _quiet()
    monkeypatch.setattr(sys, "argv", ["train.py"])
    with pytest.raises(SystemExit) as stopped:
        module.run(_raising(error), verbose=False)
    assert stopped.value.code.startswith(f"train.py: {expected}\n")  # sys.exit prints it, status 1
    assert "--verbose" in stopped.value.code
    with pytest.raises(type(error)):  # --verbose keeps the traceback
        module.run(_raising(error), verbose=True)


def test_warnings_print_as_one_line(monkeypatch):
    module = _quiet()
    monkeypatch.setattr(sys, "argv", ["super_resolve.py", "--image_dir", "pictures"])
    message = UserWarning("Skipping 'notes.txt': cannot identify image file")
    assert module.one_line_warning(message, UserWarning, "/site-packages/images.py", 417) == (
        "super_resolve.py: warning: Skipping 'notes.txt': cannot identify image file\n"
    )


def test_a_bug_keeps_its_traceback():
    with pytest.raises(RuntimeError):
        _quiet().run(_raising(RuntimeError("a bug")), verbose=False)


def test_ctrl_c_prints_the_message_and_still_dies_of_sigint(monkeypatch, capsys):
    module = _quiet()
    sent = []
    monkeypatch.setattr(
        module.signal, "signal", lambda number, handler: sent.append(("handler", handler))
    )
    monkeypatch.setattr(module.os, "kill", lambda pid, number: sent.append(("kill", pid, number)))
    with pytest.raises(SystemExit) as stopped:  # only where the signal did not end it
        module.run(
            _raising(KeyboardInterrupt), verbose=False, interrupted="Run it again to resume."
        )
    assert stopped.value.code == 130
    assert "Run it again to resume." in capsys.readouterr().err
    # A shell loop running several trainings sees a SIGINT death and stops.
    assert sent == [("handler", module.signal.SIG_DFL), ("kill", os.getpid(), module.signal.SIGINT)]
    with pytest.raises(KeyboardInterrupt):  # --verbose keeps the traceback
        module.run(_raising(KeyboardInterrupt), verbose=True)


def _script(tmp_path, script, *argv):
    # As a user's shell has it: no TF_CPP_MIN_LOG_LEVEL (the test session sets one).
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    return subprocess.run(
        [sys.executable, os.path.join(ROOT, "examples", script), *argv],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env=env,
    )


def test_scripts_stop_on_a_users_mistake_with_one_line_and_no_run_folder(tmp_path):
    # A wrong data folder: the loader's message, no traceback, no empty run folder.
    result = _script(
        tmp_path,
        "translation/train.py",
        "--data_dir",
        str(tmp_path / "missing"),
        "--output_dir",
        str(tmp_path / "run"),
    )
    assert result.returncode == 1, result.stderr[-2000:]
    assert result.stderr.startswith("train.py: error: Multi30k file not found."), result.stderr[
        -2000:
    ]
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "run").exists()
    # An export version that exists: refused before any training.
    os.makedirs(tmp_path / "run" / "export" / "1")
    result = _script(
        tmp_path, "music/train.py", "--output_dir", str(tmp_path / "run"), "--version", "1"
    )
    assert result.returncode == 2
    assert "export/1 exists already: leave out --version to export version 2" in result.stderr
    assert sorted(os.listdir(tmp_path / "run")) == ["export"]
    # A served model that is not there.
    result = _script(tmp_path, "translation/translate.py", str(tmp_path / "missing"))
    assert result.returncode == 1
    assert result.stderr.startswith("translate.py: error: no SavedModel in"), result.stderr[-2000:]
    assert "Traceback" not in result.stderr
