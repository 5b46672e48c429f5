"""Train a Music Transformer on JSB Chorales or MIDI performances, score it, export it.

It measures the validation NLL per token at the training length and beyond.

    # JSB Chorales, relative attention vs the baseline, the same 800 steps
    # (steps, not minutes: the budget then does not depend on the load):
    python examples/music/train.py --task jsb --attention relative --epochs 8 --steps_per_epoch 100
    python examples/music/train.py --task jsb --attention absolute --epochs 8 --steps_per_epoch 100
    # MIDI performances: all of POP909 (keras_attn.datasets.pop909: the
    # offline folder, else the cache, else a download), or any folder of .mid
    # files; without --midi_dir, POP909 where the shared data folder holds
    # it, else the 6 shipped songs:
    python examples/music/train.py --task performance --midi_dir pop909 --minutes 10
    python examples/music/train.py --task performance --midi_dir path/to/midi --minutes 10

Training examples are random windows of --sequence_length (L) tokens, each
preceded by START (see music_data.py); performances are augmented as in the
paper (time stretch ±5 %, transposition ±3 semitones); with --transpose 1
chorales are transposed by ±3 semitones too (--transpose 0 turns either off). After training, the
best checkpoint's validation negative log-likelihood per token (nats) is
measured on non-overlapping validation windows of each length in
--eval_lengths (multiples of L, default 1 and 2; "full" = whole pieces):
relative attention should hold up at 2L, absolute positions should not.

Interrupt it at any time and run the same command again: training resumes
from the last completed epoch and ends with the weights an uninterrupted run
would have (training_utils.ExactBackupAndRestore; the window stream skips the
batches already trained on). The same command on a finished run evaluates
and exports it again; a flag left out takes the value config.json recorded,
and one that contradicts it is refused (examples/run_folder.py).

Several GPUs, machines or a TPU: --strategy mirrored | multi_worker | tpu
(see the top-level README, "Training on several devices or machines");
--batch_size is the global batch.

Outputs in --output_dir (default runs/music_<task>_<attention>):
config.json (the flags that define the model), model.keras (best validation loss), backup/, logs/
(TensorBoard), history.csv, training_curves.png, nll.json, and (unless
--skip_export) export/<version>/, a SavedModel that samples events
(keras_attn.export.export_music_generator; JSB: never a pitch no training
chorale uses). Generate music with generate.py.
"""

import argparse
import json
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(1, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import quiet  # noqa: E402,F401  (first: TensorFlow's start-up logs only with --verbose)

# isort: split

import keras  # noqa: E402
import music_data  # noqa: E402
import numpy as np  # noqa: E402
import run_folder  # noqa: E402  (config.json, a finished run, export versions)
import training_utils  # noqa: E402  (--strategy, exact resume)

from keras_attn.losses import MaskedSparseCategoricalCrossentropy  # noqa: E402
from keras_attn.metrics import MaskedSparseCategoricalAccuracy  # noqa: E402
from keras_attn.models import music_transformer  # noqa: E402
from keras_attn.schedules import WarmupInverseSqrtSchedule  # noqa: E402

# What config.json records: the flags that build, feed, train and validate the model
# (run_folder.check_run_record; generate.py reads the task and data ones).
RECORDED_FLAGS = (
    "task",
    "attention",
    "data_dir",
    "midi_dir",
    "cache_dir",
    "sequence_length",
    "batch_size",
    "steps_per_epoch",
    "num_layers",
    "hidden_dim",
    "num_heads",
    "intermediate_dim",
    "dropout",
    "max_relative_position",
    "warmup_steps",
    "learning_rate_scale",
    "seed",
    "max_eval_windows",
    "transpose",
)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--task", default="jsb", choices=music_data.TASKS)
    parser.add_argument("--attention", default="relative", choices=["relative", "absolute"])
    parser.add_argument(
        "--data_dir",
        default=os.environ.get("JSB_CHORALES_DIR"),
        help="JSB Chorales folder, or an offline data folder laid out as the shared "
        "one (jsb_chorales/, pop909/POP909/) (default: $JSB_CHORALES_DIR or the "
        "shipped copy, which is the whole data set)",
    )
    parser.add_argument(
        "--midi_dir",
        default=os.environ.get("MIDI_DIR"),
        help="folder of .mid files for --task performance, or 'pop909': all of "
        "POP909 through keras_attn.datasets.pop909 (from --data_dir or the "
        "shared data folder, else the cache ~/.keras/datasets/keras_attn, else "
        "downloaded once, 25 MB, sha256-checked). Default: $MIDI_DIR, else "
        "pop909/POP909 in --data_dir or the shared data folder ($KERAS_ATTN_DATA "
        "or ../shared/data beside the repository) if present, else the 6 "
        "shipped songs",
    )
    parser.add_argument("--output_dir", default=None)
    parser.add_argument(
        "--cache_dir",
        default=None,
        help="where encoded MIDI events are cached (default runs/music_cache)",
    )
    parser.add_argument(
        "--minutes",
        type=training_utils.positive(float),
        default=None,
        help="stop training after this many minutes (checked after each batch)",
    )
    parser.add_argument("--epochs", type=training_utils.positive(int), default=1000)
    parser.add_argument("--steps_per_epoch", type=training_utils.positive(int), default=100)
    parser.add_argument(
        "--sequence_length",
        type=training_utils.positive(int),
        default=256,
        help="L, training window",
    )
    parser.add_argument("--batch_size", type=training_utils.positive(int), default=16)
    parser.add_argument("--num_layers", type=int, default=3)
    parser.add_argument("--hidden_dim", type=int, default=128)
    parser.add_argument("--num_heads", type=int, default=4)
    parser.add_argument("--intermediate_dim", type=int, default=512)
    parser.add_argument("--dropout", type=float, default=0.1)
    parser.add_argument(
        "--max_relative_position",
        type=int,
        default=None,
        help="default: --sequence_length (every distance seen in training)",
    )
    parser.add_argument(
        "--transpose",
        type=int,
        choices=(0, 1),
        default=None,
        help="1 = transpose each training example by -3..3 semitones, as the paper "
        "(default: 1 for performances, 0 for chorales, as the README's 800-step JSB tables)",
    )
    parser.add_argument("--warmup_steps", type=int, default=500)
    parser.add_argument("--learning_rate_scale", type=float, default=1.0)
    parser.add_argument(
        "--eval_lengths",
        default="1,2",
        help="validation window lengths as multiples of L, comma separated; 'full' = whole pieces",
    )
    parser.add_argument("--eval_batch_size", type=training_utils.positive(int), default=8)
    parser.add_argument(
        "--max_eval_windows",
        type=training_utils.positive(int),
        default=None,
        help="validate during training on the first N windows only (faster epochs)",
    )
    parser.add_argument("--jit_compile", type=int, default=1, help="1 = XLA for training steps")
    parser.add_argument(
        "--export_max_length",
        type=training_utils.positive(int),
        default=None,
        help="longest sequence the SavedModel generates (default 2 L)",
    )
    parser.add_argument(
        "--skip_training", action="store_true", help="evaluate <output_dir>/model.keras"
    )
    training_utils.add_console_arguments(parser)
    parser.add_argument("--seed", type=int, default=1)
    run_folder.add_export_arguments(parser)
    training_utils.add_strategy_arguments(parser)
    args = parser.parse_args(argv)
    step = music_data.step_size(args.task)
    if args.sequence_length % step:
        parser.error(f"--sequence_length must be a multiple of {step} for --task {args.task}")
    for item in args.eval_lengths.split(","):  # checked now, not after training
        try:
            valid = item.strip() == "full" or float(item) > 0
        except ValueError:
            valid = False
        if not valid:
            parser.error(
                f"--eval_lengths: expected positive multiples of L or 'full', comma separated "
                f"(e.g. 1,2,full), received {args.eval_lengths!r}"
            )
    args.output_dir = args.output_dir or os.path.join("runs", f"music_{args.task}_{args.attention}")
    if args.transpose is None:  # JSB: at 800 steps transposed chorales are not yet better
        args.transpose = int(args.task == "performance")
    run_folder.check_run_record(parser, args, RECORDED_FLAGS)
    run_folder.check_run_folders(parser, args, loads_model=args.skip_training)
    args.cache_dir = args.cache_dir or music_data.DEFAULT_CACHE_DIR
    args.max_relative_position = args.max_relative_position or args.sequence_length
    args.export_max_length = args.export_max_length or 2 * args.sequence_length
    return args


def load_data(args):
    """Training pieces (with variants) and validation pieces of the task."""
    if args.task == "jsb":
        return music_data.load_jsb(args.data_dir, "train"), music_data.load_jsb(
            args.data_dir, "valid"
        )
    # --midi_dir pop909 may download here (once): after the run folder checks, before any work.
    midi_dir, source = music_data.resolve_midi_dir(args.midi_dir, args.data_dir)
    print(f"Performances from {midi_dir} ({source})", flush=True)
    data = music_data.load_performances(midi_dir, args.cache_dir)
    print(
        f"{midi_dir}: {len(data['train'])} training and {len(data['valid'])} validation files "
        f"(validation: crc32(file name) % 10 == 0)"
    )
    return data["train"], data["valid"]


def build_model(args):
    model = music_transformer(
        music_data.vocabulary_size(args.task),
        num_layers=args.num_layers,
        hidden_dim=args.hidden_dim,
        num_heads=args.num_heads,
        intermediate_dim=args.intermediate_dim,
        dropout=args.dropout,
        max_relative_position=args.max_relative_position,
        attention=args.attention,
    )
    schedule = WarmupInverseSqrtSchedule(
        args.hidden_dim, warmup_steps=args.warmup_steps, scale=args.learning_rate_scale
    )
    model.compile(
        optimizer=keras.optimizers.Adam(schedule, beta_1=0.9, beta_2=0.98, epsilon=1e-9),
        # No label smoothing: the loss is the NLL per token the paper reports.
        loss=MaskedSparseCategoricalCrossentropy(label_smoothing=0.0),
        metrics=[MaskedSparseCategoricalAccuracy()],
        jit_compile=bool(args.jit_compile),
    )
    return model


def train(args, train_pieces, valid_pieces, strategy=None, callbacks=()):
    """Trains under `strategy` (default: one device); `callbacks` are added
    to fit's. Returns the best checkpoint."""
    import tensorflow as tf

    strategy = strategy or tf.distribute.get_strategy()
    run_folder.record_flags(args)
    with strategy.scope():
        model = build_model(args)
    backup = training_utils.ExactBackupAndRestore(os.path.join(args.output_dir, "backup"))
    # The window stream is the same in every process: a resumed run skips
    # the batches already trained on and sees what an uninterrupted one would.
    start_step = backup.restore(model)
    step = music_data.step_size(args.task)
    if args.task == "jsb" and args.transpose:  # 7 transpositions each, one drawn per example
        train_pieces = music_data.transposed_chorales(train_pieces)
    train_data = music_data.training_dataset(
        train_pieces,
        args.sequence_length,
        args.batch_size,
        seed=args.seed,
        step=step,
        transpose=args.task == "performance" and bool(args.transpose),
        skip_batches=start_step,
    )
    inputs, targets = music_data.evaluation_windows(valid_pieces, args.sequence_length, step)
    if args.max_eval_windows:
        inputs, targets = inputs[: args.max_eval_windows], targets[: args.max_eval_windows]
    val_data = tf.data.Dataset.from_tensor_slices((inputs, targets)).batch(args.eval_batch_size)
    print(
        f"Model ({args.attention}): {model.count_params():,} parameters, {args.num_layers} layers, "
        f"D={args.hidden_dim}, H={args.num_heads}, d_ff={args.intermediate_dim}; "
        f"windows of L={args.sequence_length}, batches of {args.batch_size}"
    )
    if args.max_eval_windows:
        print(
            f"val_loss each epoch: the first {len(inputs)} validation windows (--max_eval_windows); "
            "the final figures: all of them"
        )
    callbacks = [
        backup,
        *callbacks,
        training_utils.TokenThroughput(args.batch_size * args.sequence_length),
        # Optimizer steps so far: an epoch cut short by --minutes counts what ran.
        training_utils.ExamplesSeen(1, key="training_steps"),
        keras.callbacks.TensorBoard(os.path.join(args.output_dir, "logs")),
        training_utils.HistoryLogger(os.path.join(args.output_dir, "history.csv")),
        run_folder.best_checkpoint(
            args.output_dir, "val_loss"
        ),  # model.keras: the best epoch so far
    ]
    budget, verbose = training_utils.time_budget(
        args, os.path.join(args.output_dir, "train_seconds.txt")
    )
    callbacks += budget
    start = time.time()
    training_utils.fit(
        model,
        strategy,
        train_data,
        validation_data=val_data,
        epochs=args.epochs,
        steps_per_epoch=args.steps_per_epoch,
        callbacks=callbacks,
        verbose=verbose,
    )
    print(f"Training took {(time.time() - start) / 60:.1f} min (this run)")
    if not os.path.exists(os.path.join(args.output_dir, "model.keras")):
        model.save(os.path.join(args.output_dir, "model.keras"))  # stopped before any epoch ended
    run_folder.mark_training_finished(args.output_dir)
    return keras.saving.load_model(os.path.join(args.output_dir, "model.keras"))


def negative_log_likelihood(model, inputs, targets, batch_size):
    """Mean NLL per real target token (nats) and the token count.

    Sums -log p(target) over every non-padding target of the windows, in
    float64, then divides by their number (exact per-token mean, unlike a
    mean of batch means).
    """
    import tensorflow as tf

    @tf.function(jit_compile=True, reduce_retracing=True)
    def batch_nll(x, y):
        logits = model(x, training=False)
        log_probs = tf.nn.log_softmax(tf.cast(logits, tf.float32), axis=-1)
        picked = tf.gather(log_probs, y, axis=-1, batch_dims=2)
        real = tf.not_equal(y, 0)
        return -tf.reduce_sum(tf.where(real, picked, 0.0)), tf.reduce_sum(tf.cast(real, tf.int32))

    total, count = 0.0, 0
    for begin in range(0, len(inputs), batch_size):
        x, y = inputs[begin : begin + batch_size], targets[begin : begin + batch_size]
        if len(x) < batch_size:  # one static shape per length for XLA
            pad = batch_size - len(x)
            x = np.concatenate([x, np.zeros((pad,) + x.shape[1:], x.dtype)])
            y = np.concatenate([y, np.zeros((pad,) + y.shape[1:], y.dtype)])
        nll, n = batch_nll(tf.constant(x), tf.constant(y))
        total += float(nll)
        count += int(n)
    return total / count, count


def evaluate(args, model, valid_pieces):
    step = music_data.step_size(args.task)
    results = {}
    for item in args.eval_lengths.split(","):
        item = item.strip()
        length = None if item == "full" else int(round(float(item) * args.sequence_length))
        inputs, targets = music_data.evaluation_windows(valid_pieces, length, step)
        start = time.time()
        nll, count = negative_log_likelihood(model, inputs, targets, args.eval_batch_size)
        key = "full" if length is None else f"{item}L"
        results[key] = {
            "window_length": int(inputs.shape[1]),
            "windows": int(len(inputs)),
            "tokens": count,
            "nll_per_token": nll,
            "bits_per_token": nll / math.log(2),
        }
        print(
            f"Validation NLL per token, windows of {inputs.shape[1]} ({key}): {nll:.4f} nats "
            f"({len(inputs)} windows, {count} tokens, {time.time() - start:.0f} s)"
        )
    return results


def plot_training_curves(args):
    def draw(plt, rows):
        # Runs from before `training_steps` was logged: whole epochs.
        steps = [
            int(r.get("training_steps") or (int(r["epoch"]) + 1) * args.steps_per_epoch)
            for r in rows
        ]
        fig, axes = plt.subplots(1, 2, figsize=(10, 3.5))
        for key, axis, label in (
            ("loss", axes[0], "NLL per token (nats)"),
            ("accuracy", axes[1], "accuracy"),
        ):
            axis.plot(steps, [float(r[key]) for r in rows], marker="o", label="train")
            if f"val_{key}" in rows[0]:
                axis.plot(
                    steps,
                    [float(r[f"val_{key}"]) for r in rows],
                    marker="o",
                    label=f"validation (L={args.sequence_length})",
                )
            axis.set_xlabel("training step")
            axis.set_ylabel(label)
            axis.set_title(f"{args.task}, {args.attention} attention")
            axis.legend()
        return fig

    training_utils.plot_history(args.output_dir, draw)


def main(argv=None):
    args = parse_args(argv)
    # First: a multi-worker strategy must exist before any TensorFlow op.
    strategy = training_utils.make_strategy(args.strategy, tpu=args.tpu)
    chief = training_utils.is_chief(strategy)
    args.output_dir = training_utils.worker_output_dir(strategy, args.output_dir)
    keras.utils.set_random_seed(args.seed)
    train_pieces, valid_pieces = load_data(args)  # first: a wrong --midi_dir leaves no run folder
    os.makedirs(args.output_dir, exist_ok=True)
    if args.skip_training:
        model = keras.saving.load_model(os.path.join(args.output_dir, "model.keras"))
    else:
        model = train(args, train_pieces, valid_pieces, strategy)
        if not chief:
            return  # the chief evaluates, plots and exports
        plot_training_curves(args)
    results = {
        "task": args.task,
        "attention": args.attention,
        "parameters": model.count_params(),
        "sequence_length": args.sequence_length,
        "nll": evaluate(args, model, valid_pieces),
    }
    seconds_path = os.path.join(args.output_dir, "train_seconds.txt")
    if os.path.exists(seconds_path):
        with open(seconds_path) as f:
            results["training_minutes"] = float(f.read() or 0) / 60
    with open(os.path.join(args.output_dir, "nll.json"), "w") as f:
        json.dump(results, f, indent=2)
    if not args.skip_export:
        from keras_attn.export import export_music_generator

        path = export_music_generator(
            model,
            args.export_dir,
            version=args.version,
            max_length=args.export_max_length,
            suppressed_token_ids=music_data.never_sampled_ids(args.task, train_pieces),
            jit_compile=bool(args.export_xla),
        )
        print(f"Exported the music generator to {path}")


if __name__ == "__main__":
    quiet.run(main, interrupted=training_utils.INTERRUPTED)
