"""examples/training_utils.py and training_budget.py: `TimeBudget` stops training at the budget,
starts no epoch that would run a single step past it, prints what each
`--progress` mode promises, and its bar's ETA is the budget left;
`ExamplesSeen` counts the optimizer steps that ran; flags are refused
before any work when a run could only fail on them later."""

import os
import re
import sys

import numpy as np
import pytest

pytest.importorskip("tensorflow")  # the examples' helpers import it
pytestmark = pytest.mark.requires_tensorflow

from tests.examples.scripts import EXAMPLES, load_script

sys.path.insert(0, EXAMPLES)  # as each train.py does: training_utils imports its sibling modules


def _training_utils():
    return load_script("training_utils.py")


class _Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


class _Model:
    stop_training = False


def _run(monkeypatch, epochs, steps_per_epoch, step_seconds, minutes):
    """Drives the callback like `fit` does with a fake clock; returns the
    steps run per epoch."""
    module = _training_utils()
    clock = _Clock()
    monkeypatch.setattr(module.time, "time", clock)
    budget = module.TimeBudget(minutes)
    budget.set_model(_Model())
    budget.on_train_begin()
    done = []
    for epoch in range(epochs):
        steps = 0
        for batch in range(steps_per_epoch):
            clock.now += step_seconds
            steps += 1
            budget.on_train_batch_end(batch)
            if budget.model.stop_training:
                break
        done.append(steps)
        budget.on_epoch_end(epoch, {"loss": 1.0})
        if budget.model.stop_training:
            break
    return done


def test_stops_inside_an_epoch_at_the_budget(monkeypatch):
    # 1-minute budget, 7 s steps: the 9th step (63 s) passes it.
    assert _run(monkeypatch, epochs=3, steps_per_epoch=5, step_seconds=7.0, minutes=1) == [5, 4]


def test_no_one_step_epoch_after_an_epoch_ending_just_before_the_budget(monkeypatch):
    # 10 steps of 5.9 s end the epoch at 59 s: one more step would pass
    # the minute, so the next epoch does not start.
    assert _run(monkeypatch, epochs=3, steps_per_epoch=10, step_seconds=5.9, minutes=1) == [10]
    # With room for more than a step, it does.
    assert _run(monkeypatch, epochs=3, steps_per_epoch=10, step_seconds=5.0, minutes=1.5) == [10, 9]


def test_the_bar_eta_is_the_budget_left(capsys):
    # The first update comes after compilation (here 40 s in) and the next
    # one at once: Keras' estimate, from the time between updates, would
    # show an ETA of about 0 s; a second of budget is a second.
    bar = load_script("training_budget.py")._BudgetBar(300)
    bar.interval = 0
    bar.update(40, [("loss", 2.5)])
    bar.update(41, [("loss", 2.4)])
    shown = re.sub("\x1b\\[[0-9;]*m", "", capsys.readouterr().out.split("\r")[-1])
    assert shown.startswith(" 41/300 ")
    assert " 4:19 " in shown  # the ETA: 300 - 41 s
    assert "loss: 2.4" in shown


@pytest.mark.parametrize("progress", [0, 1, 2])
def test_progress_modes_print_what_they_promise(capsys, progress):
    # 1: the budget bar (redrawn with carriage returns); 2, for log files:
    # the budget in one plain line, Keras' fit(verbose=2) prints the epochs;
    # 0: nothing.
    module = _training_utils()
    budget = module.TimeBudget(2.5, progress=progress)
    budget.set_model(_Model())
    budget.on_train_begin()
    budget.on_train_batch_end(0, {"loss": 2.0})
    budget.on_epoch_end(0, {"loss": 2.0, "val_loss": 2.1})
    budget.on_train_end()
    out = capsys.readouterr().out
    if progress == 0:
        assert out == ""
    elif progress == 1:
        assert out.startswith("Training for 2.5 min (the bar is the time budget):\n")
        assert "\r" in out and "epoch 1 done at" in out and "val_loss: 2.1" in out
    else:
        header, line = out.splitlines()
        assert header == "Training for 2.5 min at most (the budget ends the last epoch early):"
        assert re.fullmatch(
            r"epoch 1: 1 steps - \d+ s - 0\.0 min in all - loss: 2 - val_loss: 2\.1", line
        )


def _epoch_lines(capsys, minutes, planned_steps, epochs):
    """The lines of a `TimeBudget(progress=2)` over `epochs`, a list of
    (steps run, epoch logs), each epoch planned at `planned_steps`."""
    budget = _training_utils().TimeBudget(minutes, progress=2)
    budget.set_model(_Model())
    budget.set_params({"epochs": 1000, "steps": planned_steps})
    budget.on_train_begin()
    for epoch, (steps, logs) in enumerate(epochs):
        budget.on_epoch_begin(epoch)
        for step in range(steps):
            budget.on_train_batch_end(step, {"loss": 2.0})
        budget.on_epoch_end(epoch, logs)
    return capsys.readouterr().out.splitlines()[1:]


def test_log_lines_say_when_the_budget_cut_an_epoch_short(capsys):
    # Keras' verbose=2 line said "100/100" for an epoch the budget stopped
    # after 28 steps; the budget's own line says what ran.
    logs = {"loss": 2.0, "images_seen": 912.0}
    lines = _epoch_lines(capsys, 0.0, 100, [(100, logs), (28, logs)])
    assert lines[0].startswith("epoch 1: 100 steps - ")
    assert lines[1].startswith("epoch 2: 28 of 100 steps (cut short by the time budget) - ")
    assert lines[1].endswith(" - loss: 2 - images_seen: 912") and "/1000" not in lines[1]


def test_log_lines_blame_the_budget_only_when_it_stopped_the_epoch(capsys):
    # Data that runs out also ends an epoch early; values that are not
    # numbers are left out of the line instead of failing the run.
    logs = {"loss": 2.0, "note": "hello", "curve": np.ones(3), "z": 1j}
    [line] = _epoch_lines(capsys, 10.0, 10, [(5, logs)])
    assert line.startswith("epoch 1: 5 of 10 steps - ") and line.endswith(" - loss: 2"), line


def test_time_budget_pairs_the_callback_with_fit_verbosity():
    import argparse

    module = _training_utils()
    for progress in (0, 1, 2):
        assert module.time_budget(argparse.Namespace(minutes=None, progress=progress)) == (
            [],
            progress,
        )
    for progress, verbose in ((0, 0), (1, 0), (2, 0)):  # the budget's bar or lines, Keras' off
        callbacks, got = module.time_budget(
            argparse.Namespace(minutes=2.5, progress=progress), "t.txt"
        )
        assert got == verbose
        [budget] = callbacks
        assert (budget.seconds, budget.path, budget.progress) == (150.0, "t.txt", progress)


def test_examples_seen_counts_the_steps_that_ran():
    # An epoch cut short by the budget: 330 optimizer steps of batch 4,
    # though 4 epochs x 100 steps were asked for.
    module = _training_utils()
    callback = module.ExamplesSeen(4, key="images_seen")

    class _Iterations:  # read with `.numpy()`: int() fails on a MirroredVariable
        def numpy(self):
            return np.int64(330)

    class _Optimizer:
        iterations = _Iterations()

    class _Fitted:
        optimizer = _Optimizer()

    callback.set_model(_Fitted())
    logs = {"loss": 1.0}
    callback.on_epoch_end(3, logs)
    assert logs == {"loss": 1.0, "images_seen": 1320}


@pytest.mark.parametrize("kind, text, expected", [(int, "3", 3), (float, "0.5", 0.5)])
def test_positive_accepts_numbers_above_zero(kind, text, expected):
    assert _training_utils().positive(kind)(text) == expected


@pytest.mark.parametrize(
    "kind, text",
    [(int, "0"), (int, "-2"), (float, "0"), (float, "-1"), (int, "2.5"), (float, "nan")],
)
def test_positive_refuses_zero_negatives_and_non_numbers(kind, text):
    # A flag must not read 0 as "the default" (`x or default`) or a negative
    # --minutes as "no budget": argparse turns this error into a usage message.
    import argparse

    with pytest.raises(
        argparse.ArgumentTypeError, match=f"expected a number > 0, received '{text}'"
    ):
        _training_utils().positive(kind)(text)


def test_positive_with_zero_accepts_zero_only_in_addition():
    # --eval_images (0 = all) took -5 and scored 95 images while reporting -5.
    import argparse

    count = _training_utils().positive(int, zero=True)
    assert (count("0"), count("7")) == (0, 7)
    with pytest.raises(argparse.ArgumentTypeError, match="expected a number >= 0, received '-5'"):
        count("-5")


def test_training_scripts_refuse_a_zero_budget_before_any_work(tmp_path):
    import subprocess
    import sys

    root = os.path.join(os.path.dirname(__file__), "..", "..")
    result = subprocess.run(
        [
            sys.executable,
            os.path.join(root, "examples", "music", "train.py"),
            "--minutes",
            "0",
            "--output_dir",
            str(tmp_path / "run"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    assert "argument --minutes: expected a number > 0, received '0'" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    "script, flags, message",
    [
        ("translation", ["--eval_split", "test"], "argument --eval_split: invalid choice: 'test'"),
        (
            "super_resolution",
            ["--num_samples", "0"],
            "argument --num_samples: expected a number > 0",
        ),
        (
            "music",
            ["--eval_lengths", "1,2x"],
            "--eval_lengths: expected positive multiples of L or 'full'",
        ),
    ],
)
def test_evaluation_flags_are_checked_before_training(tmp_path, script, flags, message):
    # They were read only after training, which then ended without an export.
    import subprocess
    import sys

    root = os.path.join(os.path.dirname(__file__), "..", "..")
    result = subprocess.run(
        [
            sys.executable,
            os.path.join(root, "examples", script, "train.py"),
            *flags,
            "--output_dir",
            str(tmp_path / "run"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2 and message in result.stderr, result.stderr[-2000:]
    assert not (tmp_path / "run").exists()


def _fitted_model(seed):
    import keras

    keras.utils.set_random_seed(seed)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    model.compile(optimizer="adam", loss="mse")
    model.fit(np.ones((4, 3)), np.zeros((4, 2)), epochs=1, batch_size=2, verbose=0)
    return model


def test_a_run_stopped_while_its_backup_is_written_resumes_from_the_previous_one(
    tmp_path, monkeypatch
):
    # Ctrl-C while Keras wrote the epoch-end backup in place left a truncated
    # latest.weights.h5 (or an empty training_metadata.json), and the next
    # run failed on "bad object header version number".
    module = _training_utils()
    model = _fitted_model(0)
    backup = module.ExactBackupAndRestore(str(tmp_path / "backup"))
    backup.set_model(model)
    backup.on_epoch_end(0)
    first = [w.copy() for w in model.get_weights()]
    model.fit(np.ones((4, 3)), np.zeros((4, 2)), epochs=1, batch_size=2, verbose=0)

    def stopped_while_writing(path, *args, **kwargs):
        with open(path, "wb") as f:
            f.write(b"\x89HDF\r\n\x1a\n half a file")
        raise KeyboardInterrupt

    monkeypatch.setattr(model, "save_weights", stopped_while_writing)
    with pytest.raises(KeyboardInterrupt):
        backup.on_epoch_end(1)

    fresh = _fitted_model(1)
    resumed = module.ExactBackupAndRestore(str(tmp_path / "backup"))
    assert resumed.restore(fresh) == 2  # epoch 0's two steps
    assert fresh._initial_epoch == 1
    for got, expected in zip(fresh.get_weights(), first):
        np.testing.assert_array_equal(got, expected)

    # Damaged by something else, the error names what to delete.
    weights_path = tmp_path / "backup" / "latest.weights.h5"
    weights_path.write_bytes(weights_path.read_bytes()[:200])
    with pytest.raises(
        ValueError,
        match=r"backup in .*backup cannot be read .* Delete that folder "
        r"and the model.keras beside it",
    ):
        module.ExactBackupAndRestore(str(tmp_path / "backup")).restore(_fitted_model(2))


def test_a_damaged_budget_file_is_named(tmp_path):
    module = _training_utils()
    path = tmp_path / "train_seconds.txt"
    path.write_text("garbage\n")
    budget = module.TimeBudget(1.0, str(path))
    budget.set_model(_Model())
    with pytest.raises(
        ValueError,
        match=r"train_seconds.txt should hold the seconds of training "
        r"spent so far, not 'garbage\\n': fix or delete it",
    ):
        budget.on_train_begin()


def test_history_logger_keeps_the_columns_of_the_history_it_appends_to(tmp_path):
    # A run resumed by a train.py that logs one more figure: Keras' CSVLogger
    # wrote rows one column longer than the header, shifting later values.
    import csv

    module = _training_utils()
    path = tmp_path / "history.csv"
    path.write_text("epoch,loss,val_loss\n0,2.0,2.1\n")
    for epoch, logs in (
        (1, {"training_steps": 20, "loss": 1.5, "val_loss": 1.6}),
        (2, {"loss": 1.2}),
    ):
        logger = module.HistoryLogger(str(path))
        logger.on_train_begin()
        logger.on_epoch_end(epoch, logs)
        logger.on_train_end()
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    assert rows == [
        ["epoch", "loss", "val_loss"],
        ["0", "2.0", "2.1"],
        ["1", "1.5", "1.6"],
        ["2", "1.2", "NA"],
    ]
    # A new history gets every figure, as with CSVLogger.
    fresh = tmp_path / "fresh.csv"
    logger = module.HistoryLogger(str(fresh))
    logger.on_train_begin()
    logger.on_epoch_end(0, {"training_steps": 20, "loss": 1.5, "val_loss": 1.6})
    logger.on_train_end()
    assert fresh.read_text().splitlines() == ["epoch,loss,training_steps,val_loss", "0,1.5,20,1.6"]
