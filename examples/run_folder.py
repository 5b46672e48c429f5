"""What a training example's run folder (`--output_dir`) holds, and how a
second command on the same folder treats it: checked before any work.

A run folder is one model. Its `config.json` records the flags that built
and trained it (the first command's, written when training starts, never
rewritten); `training_done.txt` marks a run whose training finished;
`history.csv` (Keras' CSVLogger) the metrics of every epoch; `model.keras`
the best epoch; `export/<version>/` its SavedModels. So:

- the same command again resumes an interrupted run, or evaluates and
  exports (as the next version) a finished one instead of training a new
  model over it (`check_run_record`);
- a flag left out takes the recorded value, and a flag that contradicts it
  (another `--hidden_dim` for a folder trained with one) is refused, as a
  model trained one way cannot be resumed or evaluated as another;
- a resumed run keeps the best epoch of the interrupted one
  (`best_logged` for `ModelCheckpoint(initial_value_threshold=...)`);
- an export never rewrites a version TF Serving may be serving
  (`check_run_folders`).

Each train.py calls `add_export_arguments(parser)`, then, once its flags are
parsed, `check_run_record(parser, args, RECORDED_FLAGS)` and
`check_run_folders(parser, args, ...)`; its `train` calls
`record_flags(args, RECORDED_FLAGS)` first and `mark_training_finished`
last.
"""

import csv
import json
import os

import training_utils

RECORD = "config.json"
DONE_MARKER = "training_done.txt"


def add_export_arguments(parser):
    """Adds the SavedModel flags every train.py shares: `--export_dir`,
    `--version`, `--export_xla` and `--skip_export` (see
    `check_run_folders` for the defaults)."""
    parser.add_argument("--export_dir", default=None,
                        help="SavedModel base folder (default <output_dir>/export); each export adds a "
                             "numbered version folder, and TF Serving serves the newest")
    parser.add_argument("--version", type=training_utils.positive(int), default=None,
                        help="SavedModel version folder (default: one above the newest in --export_dir); "
                             "an existing version is refused before training")
    parser.add_argument("--export_xla", type=int, default=0, choices=(0, 1),
                        help="1 = XLA-compile the decoding loop inside the SavedModel: served as fast as "
                             "in-Python sampling with XLA, but TF Serving on CPU must run with "
                             "--xla_cpu_compilation_enabled=true (examples/serving/README.md); 0 (default) = "
                             "a plain graph that any server runs, 2-9x slower per call")
    parser.add_argument("--skip_export", action="store_true", help="write no SavedModel")


def check_run_record(parser, args, flags):
    """Reconciles the command line with what `args.output_dir` already
    holds, before any work.

    - If the folder has a record (`config.json`), each of `flags` left at
      its default takes the recorded value, so the same command, or a
      shorter one, resumes or evaluates the run as it was trained (the
      adopted values are printed); a flag given another value than the
      recorded one is refused with a usage error naming both. (A flag
      given its default value explicitly cannot be told from one left
      out: it takes the recorded value too.)
    - If training finished there (`training_done.txt`), the run is
      evaluated and exported again rather than trained from scratch over
      its `model.keras`: `args.skip_training` is set (with a line saying
      so), unless `args.continue_training` asks for more epochs.

    Args:
        parser: the script's `argparse.ArgumentParser` (for defaults and
            `parser.error`, status 2).
        args: its parsed arguments, `output_dir` and `skip_training` set.
        flags: the `dest` names that define the model and its training
            (architecture, data, batch, schedule, seed); the ones a later
            command may change (`--minutes`, `--epochs`, evaluation and
            export flags) are left out.
    """
    path = os.path.join(args.output_dir, RECORD)
    if os.path.isfile(path):
        try:
            with open(path) as f:
                recorded = json.load(f)
        except ValueError as error:
            parser.error(f"{path} is not a readable record of the run ({error}): restore it, or "
                         "pass another --output_dir.")
        adopted, conflicts = [], []
        for flag in flags:
            if flag not in recorded or getattr(args, flag) == recorded[flag]:
                continue
            if getattr(args, flag) == parser.get_default(flag):
                setattr(args, flag, recorded[flag])
                adopted.append(f"{flag}={recorded[flag]!r}")
            else:
                conflicts.append(f"{flag}={getattr(args, flag)!r} (the run has {recorded[flag]!r})")
        if conflicts:
            parser.error(f"{args.output_dir} holds a model trained with other settings: "
                         + ", ".join(conflicts) + ". Leave those flags out to resume or evaluate "
                         "it, or pass another --output_dir to train a new model.")
        if adopted:
            print(f"As recorded in {path}: " + ", ".join(adopted))
    if (training_finished(args.output_dir) and not args.skip_training
            and not getattr(args, "continue_training", False)):
        print(f"{args.output_dir} holds a finished training run: evaluating it (pass another "
              "--output_dir to train a new model"
              + (", or --continue_training to train it further" if hasattr(args, "continue_training")
                 else "") + ").")
        args.skip_training = True


def record_flags(args, flags):
    """Writes `<output_dir>/config.json` with the values of `flags`, unless
    the folder has a record already (a resumed run keeps the first one)."""
    path = os.path.join(args.output_dir, RECORD)
    if os.path.exists(path):
        return
    with open(path + ".tmp", "w") as f:
        json.dump({flag: getattr(args, flag) for flag in flags}, f, indent=2)
    os.replace(path + ".tmp", path)


def training_finished(output_dir):
    """Whether training in `output_dir` ran to its end (`mark_training_finished`)."""
    return os.path.exists(os.path.join(output_dir, DONE_MARKER))


def mark_training_finished(output_dir):
    """Marks `output_dir`'s training as finished: call it once `model.keras`
    holds the final model."""
    with open(os.path.join(output_dir, DONE_MARKER), "w") as f:
        f.write("training finished; the same command evaluates and exports it again\n")


def best_logged(output_dir, monitor):
    """The lowest `monitor` value in `<output_dir>/history.csv`, or None:
    the threshold that a resumed or continued run's
    `ModelCheckpoint(save_best_only=True)` must beat to replace
    `model.keras` (it would otherwise start from infinity and overwrite the
    best model with its first epoch)."""
    path = os.path.join(output_dir, "history.csv")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        values = [float(row[monitor]) for row in csv.DictReader(f) if row.get(monitor)]
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
        parser.error(f"--output_dir {args.output_dir} is a file; pass a folder for the run's outputs.")
    model_path = os.path.join(args.output_dir, "model.keras")
    if loads_model and not os.path.isfile(model_path):
        parser.error(f"{model_path} does not exist: this starts from a trained model. Pass the "
                     "--output_dir of a finished run, or train one first (train.py without "
                     "--skip_training / --continue_training).")
    args.export_dir = args.export_dir or os.path.join(args.output_dir, "export")
    if args.skip_export or not exports:
        return
    if os.path.exists(args.export_dir) and not os.path.isdir(args.export_dir):
        parser.error(f"--export_dir {args.export_dir} is a file; pass the folder that holds (or "
                     "will hold) the numbered version folders.")
    existing = [int(d) for d in os.listdir(args.export_dir) if d.isdigit()] if os.path.isdir(
        args.export_dir) else []
    if args.version is None:
        args.version = max(existing + [0]) + 1
    elif os.path.lexists(os.path.join(args.export_dir, str(args.version))):
        parser.error(f"{os.path.join(args.export_dir, str(args.version))} exists already: leave out "
                     f"--version to export version {max(existing + [0]) + 1}, or remove that folder "
                     "first (TF Serving may be serving it).")
