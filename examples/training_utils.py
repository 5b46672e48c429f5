"""What the training examples share: the `--strategy` flag (one GPU, several
GPUs, several machines, a TPU), a backup that resumes a killed run
exactly, the `--minutes` and `--progress` flags (the budget callback itself
is `training_budget.py`'s), a throughput log, the training-curve plot and
what a Ctrl-C prints (`INTERRUPTED`). What a run folder holds, and how a
second command on it is checked, is `run_folder.py`'s.

Each example's train.py runs `quiet.run(main, interrupted=INTERRUPTED)`,
and its `main` does

    strategy = training_utils.make_strategy(args.strategy, tpu=args.tpu)
    with strategy.scope():
        model = build_model(args)            # model, optimizer, loss, metrics
    backup = training_utils.ExactBackupAndRestore(backup_dir)
    start_step = backup.restore(model)       # 0 on a fresh run
    training_utils.fit(model, strategy, stream_after(start_step),
                       steps_per_epoch=..., callbacks=[backup, ...])

where the stream is an endless, seeded `tf.data` pipeline of global
batches, the same in every process and from every iterator
(`shuffled_passes`): starting it after the `optimizer.iterations` batches
already trained on puts a resumed run on exactly the batch an uninterrupted
run would see next.
"""

import argparse
import csv
import json
import os
import sys
import time

import keras
import numpy as np
from training_budget import TimeBudget
from whole_files import write_whole

STRATEGIES = ("default", "mirrored", "multi_worker", "tpu")


# What a train.py prints on Ctrl-C (`quiet.run(main, interrupted=INTERRUPTED)`):
# the backup keeps every finished epoch, and a finished run is evaluated again.
INTERRUPTED = (
    "Interrupted. Run the same command again: it resumes training from the last "
    "finished epoch, or evaluates and exports a run whose training had finished."
)


def add_strategy_arguments(parser):
    """Adds `--strategy` and `--tpu` to an argparse parser."""
    parser.add_argument(
        "--strategy",
        default="default",
        choices=STRATEGIES,
        help="default: one device; mirrored: every local GPU (or every logical CPU device); "
        "multi_worker: the machines of $TF_CONFIG, each with its local GPUs; "
        "tpu: the TPU named by --tpu. Batch sizes are global (split over the replicas).",
    )
    parser.add_argument(
        "--tpu",
        default=None,
        help="TPU name or grpc:// address for --strategy tpu (default: the local TPU VM, '')",
    )


def make_strategy(name, tpu=None):
    """The `tf.distribute.Strategy` of a `--strategy` value.

    Args:
        name: one of `STRATEGIES`.
            - "default": the default strategy (one device: the first GPU,
              else the CPU).
            - "mirrored": `MirroredStrategy` over every local GPU; without
              GPUs, over every logical CPU device (one, unless the program
              split the CPU with `tf.config.set_logical_device_configuration`).
            - "multi_worker": `MultiWorkerMirroredStrategy`; the cluster and
              this process's place in it come from the `TF_CONFIG`
              environment variable. Must be created before any other
              TensorFlow op runs.
            - "tpu": `TPUStrategy` on the TPU found by `TPUClusterResolver`.
        tpu: TPU name or address for "tpu" (None: the local TPU VM).

    Returns:
        A `tf.distribute.Strategy`; build and compile the model in its
        `scope()`. Its `num_replicas_in_sync` replicas share each global
        batch.

    Raises:
        ValueError: for an unknown name, or "multi_worker" without
            `TF_CONFIG`.
    """
    import tensorflow as tf

    if name == "default":
        return tf.distribute.get_strategy()
    if name == "mirrored":
        devices = tf.config.list_logical_devices("GPU") or tf.config.list_logical_devices("CPU")
        return tf.distribute.MirroredStrategy([d.name for d in devices])
    if name == "multi_worker":
        if "TF_CONFIG" not in os.environ:
            raise ValueError(
                "`--strategy multi_worker` reads the cluster from the TF_CONFIG environment "
                "variable, which is not set. Set it on every machine, e.g. TF_CONFIG="
                '\'{"cluster": {"worker": ["host1:12345", "host2:12345"]}, '
                '"task": {"type": "worker", "index": 0}}\' (index 1 on the second machine).'
            )
        return tf.distribute.MultiWorkerMirroredStrategy()
    if name == "tpu":
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu or "")
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
        return tf.distribute.TPUStrategy(resolver)
    raise ValueError(f"`strategy` must be one of {STRATEGIES}. Received: strategy={name!r}.")


def is_chief(strategy):
    """True unless this process is a non-chief worker of a multi-worker run
    (worker 0 is the chief): only the chief writes the run's files."""
    return bool(strategy.extended.should_checkpoint)


def worker_output_dir(strategy, output_dir):
    """`output_dir` for the chief, `output_dir/workers/<type>_<index>` for the
    other workers of a multi-worker run (each keeps its own backup there and
    writes nothing the chief writes)."""
    if is_chief(strategy):
        return output_dir
    resolver = strategy.cluster_resolver
    return os.path.join(output_dir, "workers", f"{resolver.task_type}_{resolver.task_id}")


def shuffled_passes(make_pass, seed, first_pass=0):
    """An endless `tf.data` stream of passes over a data set, pass `p`
    shuffled with its own seed: `make_pass(seed * 1_000_003 + p)`.

    Why not `shuffle(..., reshuffle_each_iteration=True).repeat()`: there,
    the order of a pass depends on how many iterators the dataset made
    before (`fit` under a distribution strategy makes one to build the
    model, so its run would see other batches than a one-device run). Here
    every iterator gives the same stream, and a resumed run can start at
    any pass without computing the ones before.

    Args:
        make_pass: function of a scalar int64 seed tensor returning a
            `tf.data.Dataset` of one shuffled pass.
        seed: int base seed.
        first_pass: index of the first pass of the stream.

    Returns:
        A `tf.data.Dataset`.
    """
    import tensorflow as tf

    return tf.data.Dataset.counter(start=first_pass).flat_map(
        lambda p: make_pass(tf.cast(seed, tf.int64) * 1_000_003 + p)
    )


def fit(model, strategy, train_data, **kwargs):
    """`model.fit(train_data, **kwargs)` under `strategy`.

    With `MultiWorkerMirroredStrategy`, Keras 3.15's `fit` fails twice
    (keras-team/keras#20585, open), and this works around both:
    - before the first step, `_maybe_symbolic_build` calls `strategy.reduce`
      on the nested input batch, which that strategy rejects ("Attempt to
      convert a value (PerReplica ...)"). Here every variable `fit` would
      create lazily (the optimizer's, the loss's, the metrics') is created
      first, in the strategy's cross-replica scope, from one row of a
      batch; then `fit` takes the strategy from the enclosing
      `strategy.scope()` instead of from the model, which skips that step
      (it would only build what is built already).
    - each step's logs (scalars) go through `strategy.reduce("MEAN", v,
      axis=0)`, which fails on a scalar ("Invalid reduction dimension 0").
      Here the model's `train_step` and `test_step` return each log as a
      vector of one element, which that reduction turns back into the
      scalar averaged over the replicas.
    Other strategies take the normal path.

    Returns:
        The `History` of `model.fit`.
    """
    import tensorflow as tf

    if isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        x, y = next(iter(train_data.take(1)))
        x, y = tf.nest.map_structure(lambda t: t[:1], (x, y))
        with strategy.scope():
            if not model.optimizer.built:
                model.optimizer.build(model.trainable_variables)
            y_pred = model(x, training=False)
            model.compute_loss(x, y, y_pred)
            model.compute_metrics(x, y, y_pred)
            model.reset_metrics()
        model._distribute_strategy = None  # private; see above
        for name in ("train_step", "test_step"):
            setattr(model, name, _logs_as_vectors(getattr(model, name)))
    # The examples' tf.data pipelines shuffle (seeded, resumable); fit's own
    # `shuffle=True` default does nothing for a dataset and only warns.
    kwargs.setdefault("shuffle", False)
    with strategy.scope():
        return model.fit(train_data, **kwargs)


def _logs_as_vectors(step):
    def wrapped(data):
        return {name: keras.ops.reshape(value, (1,)) for name, value in step(data).items()}

    return wrapped


def seed_generator_states(model):
    """The Keras `SeedGenerator` state variables of `model` (dropout)."""
    return [v for v in model.variables if v.path.endswith("seed_generator_state")]


class ExactBackupAndRestore(keras.callbacks.BackupAndRestore):
    """`keras.callbacks.BackupAndRestore` that also backs up the dropout
    random state, so that a run killed at any point and started again ends
    with the same weights as a run never interrupted.

    Keras 3.15's callback writes the weights, the optimizer state (its
    `iterations` included) and the epoch; on restart it restores them and
    `fit` starts at the beginning of the next epoch (with `save_freq=N` it
    also records the batch, but restarts at the beginning of that epoch all
    the same, so the batches already trained on would be trained on again).
    It does not write the state of the `SeedGenerator`s that draw dropout
    masks, so a resumed run would draw the masks of its first steps again.
    This class saves those states too (`seed_generator_states.json` in
    `backup_dir`), and `restore` lets the caller restore before `fit` to learn
    the step to start the data at.

    Keras writes the backup's files in place, so a run stopped while they
    were written (Ctrl-C at an epoch end) left a truncated file that the
    next run could not read. Here each file is written beside and renamed
    over the previous one: whatever the moment of the stop, the backup is
    whole (in the microseconds between two renames, the weights may be one
    epoch ahead of the epoch count: that epoch is then trained again).

    Args:
        backup_dir: as in `keras.callbacks.BackupAndRestore`.
        **kwargs: passed on; keep the default `save_freq="epoch"` (see above).
    """

    def __init__(self, backup_dir, **kwargs):
        super().__init__(backup_dir, **kwargs)
        self._seeds_path = os.path.join(backup_dir, "seed_generator_states.json")

    def restore(self, model):
        """Loads the backup into `model` (compiled, built) if there is one.

        Returns:
            int, `model.optimizer.iterations` after the restore: the number
            of global batches already trained on (0 for a fresh run).

        Raises:
            ValueError: the backup cannot be read (damaged by something
                other than a stopped run), saying what to delete.
        """
        self.set_model(model)
        try:
            self._load_model()
        except (OSError, ValueError) as error:
            raise ValueError(
                f"The training backup in {self.backup_dir} cannot be read ({error}). Delete that "
                "folder and the model.keras beside it to train this run from the start, or pass "
                "another --output_dir."
            ) from error
        return int(model.optimizer.iterations.numpy())

    def _load_model(self):
        super()._load_model()
        if not os.path.exists(self._seeds_path):
            return
        with open(self._seeds_path) as f:
            saved = json.load(f)
        variables = seed_generator_states(self.model)
        iterations = int(self.model.optimizer.iterations.numpy())
        if saved["iterations"] != iterations or len(saved["states"]) != len(variables):
            # Killed between writing the weights and the states: the
            # weights are right, only the dropout masks will differ.
            print(
                f"{self._seeds_path} is from step {saved['iterations']}, the weights from "
                f"step {iterations}: dropout masks will not repeat the interrupted run's."
            )
            return
        for variable, value in zip(variables, saved["states"]):
            variable.assign(np.asarray(value, variable.dtype))

    def _save_model(self):
        # Keras' own _save_model, each file written beside and renamed in.
        os.makedirs(self.backup_dir, exist_ok=True)
        writing = os.path.join(self.backup_dir, "writing.weights.h5")
        self.model.save_weights(writing, overwrite=True)
        os.replace(writing, self._weights_path)
        write_whole(
            self._training_metadata_path,
            json.dumps({"epoch": self._current_epoch, "batch": self._last_batch_seen}),
        )
        write_whole(
            self._seeds_path,
            json.dumps(
                {
                    "iterations": int(self.model.optimizer.iterations.numpy()),
                    # In the order of `model.variables` (their paths are not unique).
                    "states": [
                        np.asarray(v.numpy()).tolist() for v in seed_generator_states(self.model)
                    ],
                }
            ),
        )


def positive(kind, zero=False):
    """An argparse `type` that accepts numbers > 0 of `kind` (int or float)
    and refuses 0 and negatives with a message naming the value, so that a
    flag never reads 0 as "the default" or a negative budget as none.

    Args:
        kind: `int` or `float`, the conversion applied first.
        zero: also accept 0 (for flags where 0 means "all" or "off").

    Returns:
        A callable for `parser.add_argument(..., type=positive(int))`.

    Example:
    >>> positive(int)("3")
    3
    """

    expected = "a number >= 0" if zero else "a number > 0"

    def parse(text):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {expected}, received {text!r}") from None
        if not (value >= 0 if zero else value > 0):
            raise argparse.ArgumentTypeError(f"expected {expected}, received {text!r}")
        return value

    parse.__name__ = f"{'non-negative' if zero else 'positive'} {kind.__name__}"
    return parse


def add_console_arguments(parser):
    """Adds the output flags every train.py shares: `--progress` (0 silent;
    1 a progress bar; 2 one line per epoch; by default 1 on a terminal and 2
    when the output goes to a file or a pipe, where a bar that redraws itself
    with carriage returns would fill the file) and `--verbose` (TensorFlow's
    start-up logs too, which `quiet` hides)."""
    parser.add_argument(
        "--progress",
        type=int,
        default=1 if sys.stdout.isatty() else 2,
        choices=[0, 1, 2],
        help="0 = silent, 1 = progress bar (against the --minutes budget when given), "
        "2 = one line per epoch; default 1 on a terminal, 2 when the output goes "
        "to a file or pipe (the bar redraws itself with carriage returns)",
    )
    parser.add_argument(
        "--verbose", action="store_true", help="show TensorFlow's start-up logs (hidden by default)"
    )


def time_budget(args, path=None):
    """The callbacks and the `fit(verbose=...)` that `--minutes` and
    `--progress` ask for: a `TimeBudget` when there is a budget (its own bar
    in mode 1 and its own epoch lines in mode 2 replace Keras', which would
    count every epoch as complete, so `fit` is silent then), else none and
    `verbose=args.progress`.

    Args:
        args: parsed arguments with `minutes` (float or None) and `progress`
            (0, 1 or 2).
        path: the `TimeBudget` file that keeps the time spent across
            resumed runs (None: this process only).

    Returns:
        (list of callbacks, verbose for `fit`).
    """
    if args.minutes is None:
        return [], args.progress
    budget = TimeBudget(args.minutes, path, progress=args.progress)
    return [budget], 0


class TokenThroughput(keras.callbacks.Callback):
    """Logs tokens per second of training under `key` at each epoch end (an
    epoch cut short by a time budget counts the batches it ran).

    Args:
        tokens_per_step: tokens one training batch holds (what counts as a
            token is the caller's: e.g. real target tokens, or every target
            position).
        key: the name of the figure in the epoch logs (history.csv,
            TensorBoard).
    """

    def __init__(self, tokens_per_step, key="tokens_per_second"):
        super().__init__()
        self.tokens_per_step = tokens_per_step
        self.key = key

    def on_epoch_begin(self, epoch, logs=None):
        self.start, self.steps = time.time(), 0

    def on_train_batch_end(self, batch, logs=None):
        self.steps += 1

    def on_epoch_end(self, epoch, logs=None):
        if logs is not None:
            logs[self.key] = self.tokens_per_step * self.steps / (time.time() - self.start)


class HistoryLogger(keras.callbacks.CSVLogger):
    """`keras.callbacks.CSVLogger(path, append=True)` that keeps the columns
    of a history it appends to.

    A run resumed by a newer train.py that logs one more figure (as
    `training_steps` was added) would otherwise write rows one column longer
    than the file's header, and every reader of the file would take each
    later value for its neighbour's. Here an existing file's header decides
    the columns: a new figure is left out of that run's history, and a
    figure no longer logged is written as "NA". A new or empty file gets
    every figure, as with CSVLogger.

    Args:
        path: the CSV file (one row per epoch, after a header).
    """

    def __init__(self, path):
        super().__init__(path, append=True)

    def on_train_begin(self, logs=None):
        super().on_train_begin(logs)
        if not self.append_header:  # a history with a header already
            with open(self.filename, newline="") as f:
                self.keys = next(csv.reader(f))[1:]  # the columns after "epoch"


class ExamplesSeen(keras.callbacks.Callback):
    """Logs the examples trained on so far under `key` at each epoch end:
    optimizer steps x global batch size, so an epoch cut short by a time
    budget, a resumed run and `--continue_training` all count what really
    ran (epochs x steps_per_epoch does not). Put it before the CSVLogger.

    Args:
        batch_size: the global batch size (examples per optimizer step).
        key: the name of the figure in the epoch logs (history.csv,
            TensorBoard).
    """

    def __init__(self, batch_size, key="examples_seen"):
        super().__init__()
        self.batch_size = batch_size
        self.key = key

    def on_epoch_end(self, epoch, logs=None):
        if logs is not None:
            logs[self.key] = int(self.model.optimizer.iterations.numpy()) * self.batch_size


def plot_history(output_dir, draw):
    """Draws `<output_dir>/history.csv` (the CSVLogger's file) into
    `<output_dir>/training_curves.png`; does nothing without logged epochs.

    Args:
        output_dir: the run's folder.
        draw: function `(pyplot, rows) -> figure`, where rows are the
            CSV's rows as dicts of strings, oldest epoch first.
    """
    path = os.path.join(output_dir, "history.csv")
    if not os.path.exists(path):
        return
    with open(path) as f:
        rows = list(csv.DictReader(f))
    if not rows:
        return
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure = draw(plt, rows)
    figure.tight_layout()
    figure.savefig(os.path.join(output_dir, "training_curves.png"), dpi=120)
    plt.close(figure)
