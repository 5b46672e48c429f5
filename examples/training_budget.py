"""The wall-time budget of a training run (`--minutes`): `TimeBudget`, the
callback that stops training once the budget is spent (counting the time of
interrupted and resumed runs), and the progress bar it draws against the
budget. `training_utils.time_budget` makes it from the parsed flags.
"""

import os
import time

import keras
import numpy as np
from whole_files import write_whole


class TimeBudget(keras.callbacks.Callback):
    """Stops training once `minutes` of wall time have passed (checked after
    every batch); the epoch then ends early, with its validation and
    checkpoint, so a demo run takes the time it promises.

    With `progress=1` it also draws the run's progress against the
    budget, in Keras' progress-bar style: one bar whose length is the
    budget (elapsed / budget seconds, the time left as its ETA) with the
    running training metrics, and one line per finished epoch with the
    steps so far and its validation metrics. With `progress=2` (for log
    files) it prints one line per epoch with the steps that really ran (an
    epoch the budget cut short says so) and all its metrics. Call `fit`
    with `verbose=0` in both: Keras' own bar counts epochs of a fixed number
    of steps, would promise an ETA past the budget, and reports a cut epoch
    as complete ("100/100").

    Args:
        minutes: the budget (float, minutes).
        path: optional file that keeps the time spent across interrupted
            and resumed runs (written at each epoch end), so that compared
            models get the same budget however often they were restarted.
            Without it the budget counts this process only.
        progress: 1 (or True) draws the progress bar described above; 2
            prints one line per epoch (above); 0 (or False) prints nothing.

    Steps are counted by Keras' batch-end calls: a model compiled with
    `steps_per_execution` > 1 (the examples' are not) calls them once per
    execution, so the lines then count executions.
    """

    def __init__(self, minutes, path=None, progress=False):
        super().__init__()
        self.seconds = minutes * 60.0
        self.path = path
        self.progress = progress
        self.start = None
        self.steps = 0
        self._bar = None
        self._epoch_start, self._epoch_steps = None, 0
        self._stopped = False  # by the budget, in the middle of an epoch

    def on_train_begin(self, logs=None):
        spent = 0.0
        if self.path and os.path.exists(self.path):
            with open(self.path) as f:
                text = f.read()
            try:
                spent = float(text or 0)
            except ValueError:
                raise ValueError(
                    f"{self.path} should hold the seconds of training spent so far, "
                    f"not {text[:40]!r}: fix or delete it (deleted, the budget starts "
                    "anew)."
                ) from None
        self._process_start = time.time()
        self.start = self._process_start - spent
        if self.progress == 1:
            print(f"Training for {self.seconds / 60:g} min (the bar is the time budget):")
            self._bar = _BudgetBar(int(round(self.seconds)))
        elif self.progress:
            print(
                f"Training for {self.seconds / 60:g} min at most (the budget ends the last "
                "epoch early):",
                flush=True,
            )

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch_start, self._epoch_steps = time.time(), 0

    def on_train_batch_end(self, batch, logs=None):
        elapsed = time.time() - self.start
        self.steps += 1
        self._epoch_steps += 1
        if self._bar is not None:
            values = [(k, float(v)) for k, v in (logs or {}).items() if np.ndim(v) == 0]
            self._bar.update(min(int(elapsed), self._bar.target - 1), values)
        if elapsed > self.seconds:
            self.model.stop_training = self._stopped = True

    def on_epoch_end(self, epoch, logs=None):
        # An epoch that ends less than one step before the budget would be
        # followed by a one-step epoch (and its validation): stop here.
        elapsed = time.time() - self.start
        if self.steps and elapsed + self._seconds_per_step() > self.seconds:
            self.model.stop_training = True
        if self.path:
            write_whole(self.path, str(time.time() - self.start))
        if self._bar is not None and logs:
            shown = " - ".join(
                f"{k}: {float(v):.4g}" for k, v in logs.items() if k.startswith("val_")
            )
            print(
                f"\n  epoch {epoch + 1} done at {(time.time() - self.start) / 60:.1f} min, "
                f"{self.steps} steps" + (f" - {shown}" if shown else ""),
                flush=True,
            )
        elif self.progress == 2:
            print(self._epoch_line(epoch, logs or {}), flush=True)

    def _epoch_line(self, epoch, logs):
        """`epoch 3: 28 of 100 steps (cut short by the time budget) - 38 s
        - 7.6 min in all - loss: 3.228 - val_loss: 3.157`."""
        planned = (self.params or {}).get("steps")
        steps = f"{self._epoch_steps} steps"
        if planned and self._epoch_steps < planned:  # the budget, or data that ran out
            steps = f"{self._epoch_steps} of {planned} steps" + (
                " (cut short by the time budget)" if self._stopped else ""
            )
        seconds = time.time() - (self._epoch_start or self._process_start)
        metrics = []
        for key, value in logs.items():
            try:  # numbers only: a string or an array in the logs is left out
                if np.ndim(value) == 0:
                    metrics.append(f"{key}: {float(value):.4g}")
            except (TypeError, ValueError):
                pass
        return " - ".join(
            [
                f"epoch {epoch + 1}: {steps}",
                f"{seconds:.0f} s",
                f"{(time.time() - self.start) / 60:.1f} min in all",
            ]
            + metrics
        )

    def _seconds_per_step(self):
        """Mean wall time of this process's steps so far."""
        return (time.time() - self._process_start) / max(self.steps, 1)

    def on_train_end(self, logs=None):
        if self._bar is not None:
            self._bar.update(self._bar.target, finalize=True)


class _BudgetBar(keras.utils.Progbar):
    """A `keras.utils.Progbar` over seconds of budget: the metric values it
    shows are the latest ones, not averages over seconds, it shows no
    "s/step" rate, and its ETA is the budget left (its unit is a second of
    wall time; Keras' estimate from the first updates would count the
    compilation before them, or the time of a resumed run, as progress)."""

    def __init__(self, seconds):
        super().__init__(seconds, stateful_metrics=None, unit_name="s")
        self.stateful_metrics = _Everything()

    def _format_time(self, time_per_unit, unit_name):
        return ""

    def _estimate_step_duration(self, current, now):
        return 1.0


class _Everything:
    def __contains__(self, item):
        return True
