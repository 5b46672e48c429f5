"""examples/music/compare.py refuses what it cannot read or write with a
usage error before drawing (a truncated nll.json and an --output in a
missing folder ended in tracebacks), and tables the runs it can."""

import json
import os

import pytest

from tests.examples.scripts import load_script


def _compare():
    return load_script("music/compare.py")


def _run_dir(path, nll_text):
    os.makedirs(path)
    (path / "nll.json").write_text(nll_text)
    (path / "config.json").write_text(json.dumps({"steps_per_epoch": 10}))
    return str(path)


NLL = json.dumps(
    {
        "attention": "relative",
        "parameters": 1234,
        "sequence_length": 32,
        "nll": {"1L": {"nll_per_token": 0.5, "window_length": 32, "tokens": 9}},
    }
)


@pytest.mark.parametrize(
    "case, message",
    [
        ("truncated", "nll.json cannot be read (Expecting"),
        ("missing", "nll.json cannot be read ([Errno 2]"),
        ("output_folder", "the folder"),
    ],
)
def test_unreadable_runs_and_unwritable_output_are_usage_errors(tmp_path, capsys, case, message):
    run = _run_dir(tmp_path / "run", NLL[:40] if case == "truncated" else NLL)
    if case == "missing":
        os.remove(os.path.join(run, "nll.json"))
    argv = [run] + (
        ["--output", str(tmp_path / "no" / "plot.png")] if case == "output_folder" else []
    )
    with pytest.raises(SystemExit) as stopped:
        _compare().main(argv)
    assert stopped.value.code == 2
    assert message in capsys.readouterr().err


def test_the_table_lists_each_run(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    run = _run_dir(tmp_path / "run", NLL)
    _compare().main([run, "--output", str(tmp_path / "plot.png")])
    out = capsys.readouterr().out
    assert "| run | relative | 1,234 | 32 | 0.5000 |" in out
    assert os.path.exists(tmp_path / "plot.png")
