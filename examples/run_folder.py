"""What a training example's run folder (`--output_dir`) holds, and how a
second command on the same folder treats it: checked before any work.

A run folder is one model. Its `config.json` records the flags that built
and trained it (written when training starts; once an epoch has ended, never
rewritten); `training_done.txt` marks a run whose training finished;
`history.csv` (Keras' CSVLogger) the metrics of every epoch; `model.keras`
the best epoch; `export/<version>/` its SavedModels. So:

- the same command again resumes an interrupted run, or evaluates and
  exports (as the next version) a finished one instead of training a new
  model over it (`check_run_record`);
- a flag left out takes the recorded value, and a flag that contradicts it
  (another `--hidden_dim` for a folder trained with one) is refused, as a
  model trained one way cannot be resumed or evaluated as another;
- a resumed run keeps the best epoch of the interrupted one, and a run
  stopped while saving it keeps the previous one (`best_checkpoint`);
- an export never rewrites a version TF Serving may be serving
  (`check_run_folders`).

Each train.py calls `add_export_arguments(parser)`, then, once its flags are
parsed, `check_run_record(parser, args, RECORDED_FLAGS)` and
`check_run_folders(parser, args, ...)`; its `train` calls
`record_flags(args)` first and `mark_training_finished` last, and its
`ModelCheckpoint` is `best_checkpoint(...)`.
"""

import csv
import json
import os

import keras
import training_utils
import whole_files

RECORD = "config.json"
DONE_MARKER = "training_done.txt"


def add_export_arguments(parser):
    """Adds the SavedModel flags every train.py shares: `--export_dir`,
    `--version`, `--export_xla` and `--skip_export` (see
    `check_run_folders` for the defaults)."""
    parser.add_argument(
        "--export_dir",
        default=None,
        help="SavedModel base folder (default <output_dir>/export); each export adds a "
        "numbered version folder, and TF Serving serves the newest",
    )
    parser.add_argument(
        "--version",
        type=training_utils.positive(int),
        default=None,
        help="SavedModel version folder (default: one above the newest in --export_dir); "
        "an existing version is refused before training",
    )
    parser.add_argument(
        "--export_xla",
        type=int,
        default=0,
        choices=(0, 1),
        help="1 = XLA-compile the decoding loop inside the SavedModel: served as fast as "
        "in-Python sampling with XLA, but TF Serving on CPU must run with "
        "--xla_cpu_compilation_enabled=true (examples/serving/README.md); 0 (default) = "
        "a plain graph that any server runs, 2-9x slower per call",
    )
    parser.add_argument("--skip_export", action="store_true", help="write no SavedModel")


def check_run_record(parser, args, flags, made_before_training=()):
    """Reconciles the command line with what `args.output_dir` already
    holds, before any work.

    - If the folder has a record (`config.json`) of a run that trained (a
      `model.keras` or a backup), each of `flags` left at its default
      takes the recorded value, so the same command, or a shorter one,
      resumes or evaluates the run as it was trained (the values taken are
      printed); a flag given another value is refused with a usage error
      naming both. (A flag given its default value explicitly cannot be
      told from one left out: it takes the recorded value too.)
    - A record of a command that trained nothing (it failed or was stopped
      before its first epoch ended) gives way to this command's flags: the
      record and `made_before_training` are removed if the flags differ.
    - If training finished there (`training_finished`), the run is
      evaluated and exported again rather than trained from scratch over
      its `model.keras`: `args.skip_training` is set (with a line saying
      so), unless `args.continue_training` asks for more epochs.

    Sets `args.run_record`, the values of `flags` as given (before any
    default the script derives from others), for `record_flags`.

    Args:
        parser: the script's `argparse.ArgumentParser` (for defaults and
            `parser.error`, status 2).
        args: its parsed arguments, `output_dir` and `skip_training` set.
        flags: the `dest` names that define the model, its training and
            its validation (architecture, data, batch, schedule, seed, the
            validation set that picks the best epoch); the ones a later
            command may change (`--minutes`, `--epochs`, evaluation and
            export flags) are left out.
        made_before_training: files of the run folder that depend on
            `flags` and are written before the first epoch (translation's
            `tokenizer.model`).
    """
    path = os.path.join(args.output_dir, RECORD)
    recorded = _read_record(parser, path)
    if recorded is not None and not _trained(args.output_dir):
        if any(flag in recorded and recorded[flag] != getattr(args, flag) for flag in flags):
            print(
                f"{path} records a command that stopped before its first epoch ended: "
                "starting over with this command's flags."
            )
            for name in (RECORD, *made_before_training):
                if os.path.exists(os.path.join(args.output_dir, name)):
                    os.remove(os.path.join(args.output_dir, name))
        recorded = None
    adopted, conflicts = [], []
    for flag in flags if recorded is not None else ():
        if flag not in recorded or getattr(args, flag) == recorded[flag]:
            continue
        if getattr(args, flag) == parser.get_default(flag):
            setattr(args, flag, recorded[flag])
            adopted.append(f"{flag}={recorded[flag]!r}")
        else:
            conflicts.append(f"{flag}={getattr(args, flag)!r} (the run has {recorded[flag]!r})")
    if conflicts:
        parser.error(
            f"{args.output_dir} holds a model trained with other settings: "
            + ", ".join(conflicts)
            + ". Leave those flags out to resume or evaluate "
            "it, or pass another --output_dir to train a new model."
        )
    if adopted:
        print(f"As recorded in {path}: " + ", ".join(adopted))
    args.run_record = {flag: getattr(args, flag) for flag in flags}
    if (
        training_finished(args.output_dir)
        and not args.skip_training
        and not getattr(args, "continue_training", False)
    ):
        print(
            f"{args.output_dir} holds a finished training run: evaluating it (pass another "
            "--output_dir to train a new model"
            + (
                ", or --continue_training to train it further"
                if hasattr(args, "continue_training")
                else ""
            )
            + ")."
        )
        args.skip_training = True


def _read_record(parser, path):
    """The record at `path` (a dict), None if there is none; a usage error
    if it cannot be read."""
    if not os.path.isfile(path):
        return None
    try:
        with open(path) as f:
            recorded = json.load(f)
    except ValueError as error:
        recorded = error
    if not isinstance(recorded, dict):
        reason = (
            recorded if isinstance(recorded, ValueError) else f"a JSON {type(recorded).__name__}"
        )
        parser.error(
            f"{path} is not a readable record of the run ({reason}, not an object of "
            "flags): restore it, or pass another --output_dir."
        )
    return recorded


def _trained(output_dir):
    """Whether any epoch of training ended in `output_dir` (a best model or a backup)."""
    return any(os.path.exists(os.path.join(output_dir, name)) for name in ("model.keras", "backup"))


def record_flags(args):
    """Writes `args.run_record` (from `check_run_record`) to
    `<output_dir>/config.json`, unless the folder has a record already (a
    resumed run keeps the first one)."""
    path = os.path.join(args.output_dir, RECORD)
    if os.path.exists(path):
        return
    whole_files.write_whole(path, json.dumps(args.run_record, indent=2))


def training_finished(output_dir):
    """Whether training in `output_dir` ran to its end: marked so
    (`mark_training_finished`), or, for runs of versions that wrote no
    mark, a `model.keras` with no backup left to resume from (Keras
    removes the backup when `fit` ends)."""
    if os.path.exists(os.path.join(output_dir, DONE_MARKER)):
        return True
    return os.path.exists(os.path.join(output_dir, "model.keras")) and not os.path.exists(
        os.path.join(output_dir, "backup")
    )


def mark_training_finished(output_dir):
    """Marks `output_dir`'s training as finished: call it once `model.keras`
    holds the final model."""
    with open(os.path.join(output_dir, DONE_MARKER), "w") as f:
        f.write("training finished; the same command evaluates and exports it again\n")


def best_checkpoint(output_dir, monitor):
    """The `ModelCheckpoint` that keeps a run's best epoch (lowest
    `monitor`) in `<output_dir>/model.keras`, across interrupted, resumed
    and continued runs: a new epoch must beat the best one in
    `history.csv` (`best_logged`), where Keras' callback would start from
    infinity and overwrite the best model with its first epoch; and the
    file is written beside and renamed in, so a run stopped while saving
    keeps the previous best whole.

    Args:
        output_dir: the run folder.
        monitor: a logged metric to minimise, e.g. "val_loss".

    Returns:
        A `keras.callbacks.ModelCheckpoint` for `fit`.
    """
    return _AtomicModelCheckpoint(
        os.path.join(output_dir, "model.keras"),
        monitor=monitor,
        mode="min",
        save_best_only=True,
        initial_value_threshold=best_logged(output_dir, monitor),
    )


class _AtomicModelCheckpoint(keras.callbacks.ModelCheckpoint):
    def _save_model(self, epoch, batch, logs):
        final = self.filepath
        writing = final[: -len(".keras")] + ".writing.keras"
        if os.path.exists(writing):
            os.remove(writing)  # left by a run stopped while saving
        self.filepath = writing
        try:
            super()._save_model(epoch, batch, logs)
        finally:
            self.filepath = final
        if os.path.exists(writing):
            os.replace(writing, final)


def best_logged(output_dir, monitor):
    """The lowest `monitor` value in `<output_dir>/history.csv`, or None.

    Raises:
        ValueError: a value that is not a number, naming the file and row.
    """
    path = os.path.join(output_dir, "history.csv")
    if not os.path.exists(path):
        return None
    values = []
    with open(path) as f:
        for number, row in enumerate(csv.DictReader(f), start=2):
            if not row.get(monitor):
                continue
            try:
                values.append(float(row[monitor]))
            except ValueError:
                raise ValueError(
                    f"{path}, line {number}: {monitor} is {row[monitor]!r}, not a "
                    "number: fix or remove that line (it is the run's log of "
                    "epochs, written by Keras' CSVLogger)."
                ) from None
    return min(values) if values else None


def check_run_folders(parser, args, loads_model=False, exports=True):
    """Checks, before any work, what a run will read and write, so that a
    mistake ends in a usage error (`parser.error`, status 2) rather than
    after minutes of training or a half-written run folder; and fills in
    the export defaults.

    - `--output_dir` must not be a file; with `loads_model` (the flags
      `--skip_training`, `--continue_training`) `<output_dir>/model.keras`
      must exist.
    - Unless `--skip_export` (or `exports` is False): `--export_dir`
      defaults to `<output_dir>/export` and must not be a file; `--version`
      defaults to one above the newest numbered folder there (TF Serving
      switches to it), and a version that exists already is refused (a
      served version is never rewritten in place).

    Args:
        parser: the script's `argparse.ArgumentParser`.
        args: its parsed arguments, with `output_dir` set; `export_dir`,
            `version` and `skip_export` from `add_export_arguments`.
        loads_model: whether the run starts from `<output_dir>/model.keras`.
        exports: whether this run writes a SavedModel at all (e.g. not in
            a mode that has no exporter).
    """
    if os.path.exists(args.output_dir) and not os.path.isdir(args.output_dir):
        parser.error(
            f"--output_dir {args.output_dir} is a file; pass a folder for the run's outputs."
        )
    model_path = os.path.join(args.output_dir, "model.keras")
    if loads_model and not os.path.isfile(model_path):
        parser.error(
            f"{model_path} does not exist: this starts from a trained model. Pass the "
            "--output_dir of a finished run, or train one first (train.py without "
            "--skip_training / --continue_training)."
        )
    args.export_dir = args.export_dir or os.path.join(args.output_dir, "export")
    if args.skip_export or not exports:
        return
    if os.path.exists(args.export_dir) and not os.path.isdir(args.export_dir):
        parser.error(
            f"--export_dir {args.export_dir} is a file; pass the folder that holds (or "
            "will hold) the numbered version folders."
        )
    existing = (
        [int(d) for d in os.listdir(args.export_dir) if d.isdigit()]
        if os.path.isdir(args.export_dir)
        else []
    )
    if args.version is None:
        args.version = max(existing + [0]) + 1
    elif os.path.lexists(os.path.join(args.export_dir, str(args.version))):
        parser.error(
            f"{os.path.join(args.export_dir, str(args.version))} exists already: leave out "
            f"--version to export version {max(existing + [0]) + 1}, or remove that folder "
            "first (TF Serving may be serving it)."
        )
