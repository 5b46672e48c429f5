"""Train the Image Transformer on CIFAR-10: 8x8 -> 32x32 super resolution, or image generation.

Class-conditional or unconditional image generation with --mode.

    # the demo: the 1,000 CIFAR-10 images shipped in data/, 5 minutes
    python examples/super_resolution/train.py --minutes 5
    # the full 50,000 training images (45,000 train / 5,000 validation):
    # keras_attn.datasets.cifar10 (an offline folder, else the cache, else a download)
    python examples/super_resolution/train.py --data cifar10 --minutes 60
    # your own pictures (centre-cropped, resized to 32x32)
    python examples/super_resolution/train.py --image_dir ~/Pictures --minutes 5
    # generation instead of super resolution
    python examples/super_resolution/train.py --mode class_conditional --minutes 5

Steps: load the images and split them (image_data.py; deterministic,
`--validation_fraction`), train `keras_attn.models.super_resolution_transformer` (or
`image_transformer` for generation) within the time budget, report
validation bits/dim, then on `--num_samples` validation images sample with
the decoder's cache at temperatures 1.0, 0.9 and 0.8 and by the per-pixel
mode (seconds per 32x32 image, batched), and score the samples and bicubic
upsampling against the originals (PSNR/SSIM) and against the input
(consistency: the sample downsampled back to 8x8 vs the 8x8 input); save
PNG grids, and export the super resolver as a SavedModel
`export_dir/<version>/` (`serving_default`: uint8 8x8x3 -> uint8 32x32x3).

Interrupt it at any time and run the same command again: training resumes
from the last completed epoch and ends with the weights an uninterrupted run
would have (`training_utils.ExactBackupAndRestore`; the image stream skips
the batches already trained on; `--minutes` counts the time already spent).
The same command on a finished run evaluates and exports it again
(`--continue_training` trains it further); a flag left out takes the value
config.json recorded, and one that contradicts it is refused
(examples/run_folder.py).

Several GPUs, machines or a TPU: `--strategy mirrored | multi_worker | tpu`
(see the top-level README, "Training on several devices or machines");
`--batch_size` is the global batch.

Outputs in --output_dir (default runs/<mode>): config.json (the flags that
define the model), model.keras, backup/,
logs/ (TensorBoard), history.csv, training_curves.png, samples.png,
metrics.json, export/<version>/ (super resolution).
"""

import argparse
import csv
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(1, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import quiet  # noqa: E402,F401  (first: TensorFlow's start-up logs only with --verbose)

# isort: split

import evaluate  # noqa: E402  (the example's sampling, PSNR/SSIM and grids)
import keras  # noqa: E402
import run_folder  # noqa: E402  (config.json, a finished run, export versions)
import training_utils  # noqa: E402  (--strategy, exact resume)
from image_data import DEFAULT_DATA, dataset, load_data, training_stream  # noqa: E402  (--data)

from keras_attn.losses import MaskedSparseCategoricalCrossentropy  # noqa: E402
from keras_attn.metrics import BitsPerDimension  # noqa: E402
from keras_attn.models import image_transformer, super_resolution_transformer  # noqa: E402
from keras_attn.preprocessing import images  # noqa: E402
from keras_attn.schedules import WarmupInverseSqrtSchedule  # noqa: E402

MODES = ("super_resolution", "class_conditional", "unconditional")


# What config.json records: the flags that build, feed, train and validate the model
# (run_folder.check_run_record); sampling and evaluation flags may change.
RECORDED_FLAGS = (
    "mode",
    "data",
    "image_dir",
    "validation_fraction",
    "split_seed",
    "batch_size",
    "steps_per_epoch",
    "num_layers",
    "num_encoder_layers",
    "hidden_dim",
    "num_heads",
    "intermediate_dim",
    "block_size",
    "memory_flange",
    "dropout",
    "position",
    "align_positions",
    "low_resolution_embedding",
    "low_resolution_logit_bias",
    "low_resolution_prior_scale",
    "consistency",
    "channel_residual",
    "left_residual",
    "channel_consistency",
    "max_correction",
    "warmup_steps",
    "learning_rate_scale",
    "seed",
    "monitor_images",
)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mode", default="super_resolution", choices=MODES)
    parser.add_argument(
        "--data",
        default=DEFAULT_DATA,
        help="a CIFAR-10 JPEG .npz (default: the 1,000-image sample shipped in "
        "data/), or 'cifar10': the full 50,000 training images through "
        "keras_attn.datasets.cifar10, from the offline folder (--data_dir) "
        "if there is one, else the cache (~/.keras/datasets/keras_attn), "
        "else downloaded once (the official archive, 163 MB, sha256-checked)",
    )
    parser.add_argument(
        "--data_dir",
        default=None,
        help="offline data folder for --data cifar10, laid out as "
        "<data_dir>/cifar10/cifar-10-python.tar.gz or cifar10_train_jpeg.npz "
        "(default: $KERAS_ATTN_DATA, else ../shared/data beside the "
        "repository where it exists, else none: cache or download)",
    )
    parser.add_argument(
        "--image_dir",
        default=None,
        help="train on the pictures of this folder instead of --data "
        "(RGB, centre crop, resized to 32x32; no labels)",
    )
    parser.add_argument("--validation_fraction", type=float, default=0.1)
    parser.add_argument("--split_seed", type=int, default=0)
    parser.add_argument("--output_dir", default=None)
    parser.add_argument(
        "--minutes",
        type=training_utils.positive(float),
        default=None,
        help="stop training after this many minutes (checked after each batch)",
    )
    parser.add_argument(
        "--epochs",
        type=training_utils.positive(int),
        default=None,
        help="epochs of --steps_per_epoch batches (default: 1000 with --minutes, else 10)",
    )
    parser.add_argument("--steps_per_epoch", type=training_utils.positive(int), default=100)
    parser.add_argument("--batch_size", type=training_utils.positive(int), default=4)
    # A CPU-sized model (see the README for the measured run).
    parser.add_argument("--num_layers", type=int, default=3, help="decoder blocks")
    parser.add_argument(
        "--num_encoder_layers",
        type=int,
        default=2,
        help="encoder blocks over the 8x8 image (super resolution)",
    )
    parser.add_argument("--hidden_dim", type=int, default=64)
    parser.add_argument("--num_heads", type=int, default=4)
    parser.add_argument("--intermediate_dim", type=int, default=256)
    parser.add_argument(
        "--block_size",
        type=int,
        default=96,
        help="query block of the 1D local attention, in channel intensities "
        "(96 = one 32-pixel row)",
    )
    parser.add_argument("--memory_flange", type=int, default=96)
    parser.add_argument("--dropout", type=float, default=0.1)
    parser.add_argument("--position", default="sinusoidal", choices=["sinusoidal", "learned"])
    parser.add_argument(
        "--no_align_positions",
        dest="align_positions",
        action="store_false",
        help="encode the 8x8 input at its own pixel coordinates instead of on "
        "the 32x32 grid (super resolution)",
    )
    parser.add_argument(
        "--low_resolution_embedding",
        default="bicubic",
        choices=["nearest", "bicubic", "none"],
        help="add the embedding of the low-resolution intensity at each decoder "
        "position (the covering pixel, or bicubic upsampling) beside "
        "cross-attention; none = cross-attention only (super resolution)",
    )
    parser.add_argument(
        "--low_resolution_logit_bias",
        default="bicubic",
        choices=["bicubic", "nearest", "none"],
        help="add to the logits a learned prior over each intensity's offset "
        "from the low-resolution value there (super resolution)",
    )
    parser.add_argument(
        "--low_resolution_prior_scale",
        type=float,
        default=16.0,
        help="the Laplace scale (intensity levels) that prior starts from; 0 = start from zeros",
    )
    parser.add_argument(
        "--no_consistency",
        dest="consistency",
        action="store_false",
        help="count the prior's offsets from the interpolated value alone, not "
        "from the value that keeps each 4x4 block consistent with the "
        "input given the pixels generated so far (super resolution)",
    )
    parser.add_argument(
        "--no_channel_residual",
        dest="channel_residual",
        action="store_false",
        help="count the prior's offsets of green and blue from the "
        "interpolated value alone, not shifted by the pixel's previous "
        "channel's residual (super resolution)",
    )
    parser.add_argument(
        "--left_residual",
        action="store_true",
        help="count the prior's offsets of red from the consistent value plus "
        "0.75 x the left pixel's residual (super resolution)",
    )
    parser.add_argument(
        "--no_channel_consistency",
        dest="channel_consistency",
        action="store_false",
        help="green and blue count from the interpolated value plus the "
        "previous channel's residual from its interpolated value, not "
        "from their own block-consistent value (super resolution)",
    )
    parser.add_argument(
        "--sampling_max_correction",
        type=float,
        default=24,
        help="when sampling and exporting (not in training or bits/dim): "
        "bound, in intensity levels, on the prior's per-pixel consistency "
        "correction; 0 = as trained (super resolution)",
    )
    parser.add_argument(
        "--max_correction",
        type=float,
        default=0,
        help="bound (intensity levels) on the prior's per-pixel consistency "
        "correction; 0 = none (super resolution)",
    )
    parser.add_argument("--warmup_steps", type=int, default=50)
    parser.add_argument(
        "--learning_rate_scale",
        type=float,
        default=0.4,
        help="multiplier of the warmup / inverse-sqrt schedule "
        "(peak = scale / sqrt(hidden_dim * warmup_steps))",
    )
    parser.add_argument(
        "--monitor_images",
        type=training_utils.positive(int),
        default=64,
        help="validation images scored at the end of each epoch",
    )
    parser.add_argument(
        "--eval_images",
        type=training_utils.positive(int, zero=True),
        default=500,
        help="validation images for the final bits/dim (0 = all)",
    )
    parser.add_argument(
        "--num_samples",
        type=training_utils.positive(int),
        default=32,
        help="validation images to super-resolve and score (the grid shows 8 "
        "spread over them), or images per class / in total to generate",
    )
    parser.add_argument(
        "--sample_batch_size",
        type=training_utils.positive(int),
        default=8,
        help="images sampled per batch (super resolution)",
    )
    training_utils.add_console_arguments(parser)
    parser.add_argument(
        "--skip_training", action="store_true", help="load <output_dir>/model.keras"
    )
    parser.add_argument(
        "--continue_training",
        action="store_true",
        help="train <output_dir>/model.keras (with its optimizer state) for more "
        "epochs, counting on from those in history.csv",
    )
    parser.add_argument("--seed", type=int, default=1)
    run_folder.add_export_arguments(parser)
    training_utils.add_strategy_arguments(parser)
    args = parser.parse_args(argv)
    if args.image_dir and args.mode == "class_conditional":
        parser.error(
            "--image_dir gives unlabelled pictures: use --mode super_resolution or unconditional"
        )
    args.output_dir = args.output_dir or os.path.join("runs", args.mode)
    run_folder.check_run_record(parser, args, RECORDED_FLAGS)
    run_folder.check_run_folders(
        parser,
        args,
        loads_model=args.skip_training or args.continue_training,
        exports=args.mode == "super_resolution",
    )
    if args.epochs is None:
        args.epochs = 1000 if args.minutes else 10
    return args


def build_model(args):
    sizes = dict(
        num_layers=args.num_layers,
        hidden_dim=args.hidden_dim,
        num_heads=args.num_heads,
        intermediate_dim=args.intermediate_dim,
        block_size=args.block_size,
        memory_flange=args.memory_flange,
        dropout=args.dropout,
        position=args.position,
    )
    if args.mode == "super_resolution":
        model = super_resolution_transformer(
            low_resolution_size=8,
            image_size=32,
            num_encoder_layers=args.num_encoder_layers,
            align_positions=args.align_positions,
            low_resolution_embedding=None
            if args.low_resolution_embedding == "none"
            else args.low_resolution_embedding,
            low_resolution_logit_bias=None
            if args.low_resolution_logit_bias == "none"
            else args.low_resolution_logit_bias,
            low_resolution_prior_scale=args.low_resolution_prior_scale or None,
            low_resolution_consistency=args.consistency,
            low_resolution_channel_residual=args.channel_residual,
            low_resolution_max_correction=args.max_correction or None,
            low_resolution_left_residual=args.left_residual,
            low_resolution_channel_consistency=args.channel_consistency,
            **sizes,
        )
    else:
        num_classes = len(images.CIFAR10_CLASS_NAMES) if args.mode == "class_conditional" else None
        model = image_transformer(image_size=32, num_classes=num_classes, **sizes)
    schedule = WarmupInverseSqrtSchedule(
        args.hidden_dim, warmup_steps=args.warmup_steps, scale=args.learning_rate_scale
    )
    model.compile(
        optimizer=keras.optimizers.Adam(
            schedule, beta_1=0.9, beta_2=0.98, epsilon=1e-9, clipnorm=1.0
        ),
        # Intensity 0 is a real value: nothing is ignored, no smoothing, so
        # loss / ln 2 is the bits/dim.
        loss=MaskedSparseCategoricalCrossentropy(label_smoothing=0.0, ignore_class=None),
        metrics=[BitsPerDimension()],
        # Measured on 2 CPU cores: XLA made a training step ~1.3x slower.
        jit_compile=False,
    )
    return model


def history_rows(args):
    """The rows of `<output_dir>/history.csv` (one per logged epoch), or []."""
    path = os.path.join(args.output_dir, "history.csv")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return list(csv.DictReader(f))


def epochs_logged(args):
    return len(history_rows(args))


def images_seen_by(args, epoch, row):
    """Training images seen at the end of `epoch`, from its history.csv row
    (`images_seen`; a history written before that column: full epochs)."""
    if row.get("images_seen"):
        return int(float(row["images_seen"]))
    return (epoch + 1) * args.steps_per_epoch * args.batch_size


def train(args, data, strategy=None, callbacks=()):
    """Trains under `strategy` (default: one device); `callbacks` are added
    to fit's. Returns the best checkpoint and the minutes spent."""
    import tensorflow as tf

    strategy = strategy or tf.distribute.get_strategy()
    train_images, train_labels, validation_images, validation_labels = data
    run_folder.record_flags(args)
    seconds_path = os.path.join(args.output_dir, "train_seconds.txt")
    # A continued run's last epoch is fixed when it starts, so that resuming
    # it (the backup holds its epochs) does not move the end.
    last_epoch_path = os.path.join(args.output_dir, "continue_to_epoch.txt")
    resuming = os.path.exists(os.path.join(args.output_dir, "backup"))
    initial_epoch, last_epoch = 0, args.epochs
    with strategy.scope():
        if args.continue_training:
            model = keras.saving.load_model(os.path.join(args.output_dir, "model.keras"))
            initial_epoch = epochs_logged(args)
            if resuming and os.path.exists(last_epoch_path):
                with open(last_epoch_path) as f:
                    last_epoch = int(f.read())
            else:
                last_epoch = initial_epoch + args.epochs
                with open(last_epoch_path, "w") as f:
                    f.write(str(last_epoch))
                if os.path.exists(seconds_path):
                    os.remove(seconds_path)  # continuing a finished run: a new budget
            print(
                f"Continuing {os.path.join(args.output_dir, 'model.keras')} from epoch "
                f"{initial_epoch} to epoch {last_epoch}"
            )
        else:
            model = build_model(args)
    backup = training_utils.ExactBackupAndRestore(os.path.join(args.output_dir, "backup"))
    # The stream of training batches is the same in every process: starting
    # it after the batches already trained on (a resumed or continued run)
    # makes the run see the batches an uninterrupted one would.
    start_step = backup.restore(model)
    monitor = slice(0, args.monitor_images)
    train_data = training_stream(args, train_images, train_labels, start_step)
    monitor_data = dataset(
        args,
        validation_images[monitor],
        None if validation_labels is None else validation_labels[monitor],
    )
    print(
        f"Model: {model.count_params():,} parameters; {len(train_images):,} training and "
        f"{len(validation_images):,} validation images; {args.steps_per_epoch} batches of "
        f"{args.batch_size} per epoch; val_bits_per_dim each epoch on the first "
        f"{len(validation_images[monitor]):,} validation images, the final figure on "
        f"{min(args.eval_images or len(validation_images), len(validation_images)):,}"
    )
    callbacks = [
        backup,
        *callbacks,
        training_utils.ExamplesSeen(args.batch_size, key="images_seen"),
        keras.callbacks.TensorBoard(os.path.join(args.output_dir, "logs")),
        training_utils.HistoryLogger(os.path.join(args.output_dir, "history.csv")),
        run_folder.best_checkpoint(
            args.output_dir, "val_bits_per_dim"
        ),  # model.keras: the best epoch so far
    ]
    # The budget counts the time of interrupted runs too (a continued run's anew).
    budget, verbose = training_utils.time_budget(args, seconds_path)
    callbacks += budget
    start = time.time()
    training_utils.fit(
        model,
        strategy,
        train_data,
        validation_data=monitor_data,
        epochs=last_epoch,
        initial_epoch=initial_epoch,
        steps_per_epoch=args.steps_per_epoch,
        callbacks=callbacks,
        verbose=verbose,
    )
    minutes = (time.time() - start) / 60
    print(f"Training took {minutes:.1f} min")
    if not os.path.exists(os.path.join(args.output_dir, "model.keras")):
        model.save(os.path.join(args.output_dir, "model.keras"))  # stopped before any epoch ended
    run_folder.mark_training_finished(args.output_dir)
    return keras.saving.load_model(os.path.join(args.output_dir, "model.keras")), minutes


def plot_training_curves(args):
    def draw(plt, rows):
        images_seen = [images_seen_by(args, i, row) for i, row in enumerate(rows)]
        fig, axis = plt.subplots(figsize=(6, 3.5))
        axis.plot(images_seen, [float(r["bits_per_dim"]) for r in rows], marker="o", label="train")
        if "val_bits_per_dim" in rows[0]:
            axis.plot(
                images_seen,
                [float(r["val_bits_per_dim"]) for r in rows],
                marker="o",
                label=f"validation ({args.monitor_images} images)",
            )
        axis.set_xlabel("training images seen")
        axis.set_ylabel("bits / dim")
        axis.set_title(f"Image Transformer, {args.mode.replace('_', ' ')}")
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
    data = load_data(args)  # first: a wrong --image_dir, --data or --data_dir leaves no run folder
    os.makedirs(args.output_dir, exist_ok=True)
    minutes = None
    if args.skip_training:
        model = keras.saving.load_model(os.path.join(args.output_dir, "model.keras"))
    else:
        model, minutes = train(args, data, strategy)
        if not chief:
            return  # the chief evaluates, plots and exports
        plot_training_curves(args)
    metrics = {
        "mode": args.mode,
        "data": os.path.abspath(args.image_dir or getattr(args, "data_source", None) or args.data),
        "train_images": int(len(data[0])),
        "validation_images": int(len(data[2])),
        "parameters": int(model.count_params()),
        "model": {
            k: getattr(args, k)
            for k in (
                "num_layers",
                "num_encoder_layers",
                "hidden_dim",
                "num_heads",
                "intermediate_dim",
                "block_size",
                "memory_flange",
                "dropout",
                "position",
                "align_positions",
                "low_resolution_embedding",
                "low_resolution_logit_bias",
                "low_resolution_prior_scale",
                "consistency",
                "channel_residual",
                "left_residual",
                "channel_consistency",
                "max_correction",
                "sampling_max_correction",
            )
        },
        "batch_size": args.batch_size,
        "training_minutes_this_run": minutes,
    }
    rows = history_rows(args)
    metrics["epochs_logged"] = len(rows)
    metrics["training_images_seen"] = images_seen_by(args, len(rows) - 1, rows[-1]) if rows else 0
    metrics.update(evaluate.report(args, model, data, dataset))
    if args.mode == "super_resolution" and not args.skip_export:
        from keras_attn.export import export_super_resolver

        path = export_super_resolver(
            model, args.export_dir, version=args.version, jit_compile=bool(args.export_xla)
        )
        print(f"Exported the super resolver to {path}")
        metrics["export_path"] = path
    with open(os.path.join(args.output_dir, "metrics.json"), "w") as f:
        json.dump(metrics, f, indent=2)
    print(f"All figures: {os.path.join(args.output_dir, 'metrics.json')}")


if __name__ == "__main__":
    quiet.run(main, interrupted=training_utils.INTERRUPTED)
