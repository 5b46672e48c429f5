"""Train a Transformer on Multi30k, score it with BLEU and export it for TF Serving.

    python examples/translation/train.py --source de --target en --minutes 5

Steps: learn a joint SentencePiece vocabulary from the training text (or
reuse the one in --output_dir), train `keras_attn.models.translation_transformer`
with the paper's recipe (Adam 0.9/0.98, warmup schedule, label smoothing 0.1),
then translate test_2016_flickr (beam search by default), report sacrebleu
BLEU, draw the encoder-decoder attention of one sentence and a plot of the
training curves, and write a SavedModel `export_dir/<version>/` whose
`serving_default` maps strings to translated strings.

Interrupt it at any time and run the same command again: training resumes
from the last completed epoch and ends with the weights an uninterrupted run
would have (`training_utils.ExactBackupAndRestore`; the batch stream, one
reshuffled pass over the pairs after another, starts after the batches
already trained on; `--minutes` counts the time already spent). The same
command on a finished run evaluates and exports it again; a flag left out
takes the value config.json recorded, and one that contradicts it is refused
(examples/run_folder.py).

Several GPUs, machines or a TPU: `--strategy mirrored | multi_worker | tpu`
(see the top-level README, "Training on several devices or machines");
`--tokens_per_batch` is per global batch.

Outputs in --output_dir (default runs/translation_<source>_<target>):
config.json (the flags that define the model), tokenizer.model, model.keras, logs/ (TensorBoard), history.csv,
training_curves.png, attention.png, bleu.json, translations.txt.
"""

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(1, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import quiet  # noqa: E402,F401  (first: TensorFlow's start-up logs only with --verbose)

# isort: split

import keras  # noqa: E402
import numpy as np  # noqa: E402
import run_folder  # noqa: E402  (config.json, a finished run, export versions)
import training_utils  # noqa: E402  (--strategy, exact resume)
from multi30k import DEFAULT_DATA_DIR, SPLITS, load_multi30k, resolve_data_dir  # noqa: E402

from keras_attn.losses import MaskedSparseCategoricalCrossentropy  # noqa: E402
from keras_attn.metrics import MaskedSparseCategoricalAccuracy  # noqa: E402
from keras_attn.models import translation_transformer  # noqa: E402
from keras_attn.schedules import WarmupInverseSqrtSchedule  # noqa: E402

# What config.json records: the flags that build, feed, train and validate the
# model and its vocabulary (run_folder.check_run_record).
RECORDED_FLAGS = (
    "source",
    "target",
    "data_dir",
    "train_size",
    "vocabulary_size",
    "num_layers",
    "hidden_dim",
    "num_heads",
    "intermediate_dim",
    "dropout",
    "normalize_first",
    "tokens_per_batch",
    "max_length",
    "warmup_steps",
    "learning_rate_scale",
    "label_smoothing",
    "seed",
    "val_size",
)

# The README's first command: a configuration made for five minutes of two
# CPU cores (measured in the README of this example), where the defaults
# are the full recipe. Flags given on the command line still win.
DEMO = dict(
    minutes=5.0,
    vocabulary_size=2000,
    num_layers=2,
    hidden_dim=128,
    num_heads=4,
    dropout=0.0,
    normalize_first=True,
    learning_rate_scale=0.7,
    warmup_steps=150,
    num_beams=1,
)


def parse_args(argv=None, description=None):
    parser = argparse.ArgumentParser(description=description or __doc__.split("\n")[0])
    parser.add_argument(
        "--demo",
        action="store_true",
        help="the five-minute configuration of the README's first command: "
        + ", ".join(f"--{k} {v}" for k, v in DEMO.items() if v is not True)
        + ", --normalize_first; output in runs/translation_demo",
    )
    parser.add_argument("--source", default="de", choices=["de", "en"], help="source language")
    parser.add_argument("--target", default="en", choices=["de", "en"], help="target language")
    parser.add_argument(
        "--data_dir",
        default=DEFAULT_DATA_DIR,
        help="folder of <split>.<lang>.gz files (default: the copy shipped here, "
        "the whole corpus); an offline data folder holding multi30k/; or "
        "'multi30k': the official files through keras_attn.datasets.multi30k "
        "($KERAS_ATTN_DATA, else the cache ~/.keras/datasets/keras_attn, else "
        "downloaded once, sha256-checked)",
    )
    parser.add_argument("--output_dir", default=None)
    parser.add_argument(
        "--minutes",
        type=training_utils.positive(float),
        default=None,
        help="stop training after this many minutes (checked after each batch)",
    )
    parser.add_argument("--epochs", type=training_utils.positive(int), default=30)
    parser.add_argument(
        "--steps_per_epoch",
        type=training_utils.positive(int),
        default=None,
        help="batches per epoch (default: one pass over the training pairs)",
    )
    parser.add_argument(
        "--train_size",
        type=training_utils.positive(int),
        default=None,
        help="use only the first N training pairs (quick runs)",
    )
    parser.add_argument(
        "--val_size",
        type=training_utils.positive(int),
        default=None,
        help="use only the first N validation pairs (quick runs)",
    )
    parser.add_argument("--vocabulary_size", type=int, default=8000)
    parser.add_argument("--num_layers", type=int, default=3)
    parser.add_argument("--hidden_dim", type=int, default=256)
    parser.add_argument("--num_heads", type=int, default=8)
    parser.add_argument("--intermediate_dim", type=int, default=512)
    parser.add_argument("--dropout", type=float, default=0.1)
    parser.add_argument(
        "--normalize_first",
        action="store_true",
        help="pre-norm blocks (layer norm before attention / feed-forward); "
        "default post-norm as in the paper",
    )
    parser.add_argument("--tokens_per_batch", type=training_utils.positive(int), default=2048)
    parser.add_argument("--max_length", type=int, default=64)
    # Multi30k is small (~220 updates per epoch at 2048 tokens): a short
    # warmup and a scaled-down curve (peak ~7e-4 for D = 256).
    parser.add_argument("--warmup_steps", type=int, default=500)
    parser.add_argument("--learning_rate_scale", type=float, default=0.25)
    parser.add_argument("--label_smoothing", type=float, default=0.1)
    parser.add_argument(
        "--num_beams", type=training_utils.positive(int), default=4, help="1 = greedy decoding"
    )
    parser.add_argument(
        "--length_penalty_alpha",
        "--length_penalty",
        type=float,
        default=0.6,
        help="alpha of the GNMT length penalty of beam search",
    )
    parser.add_argument("--eval_split", default="test_2016_flickr", choices=SPLITS)
    parser.add_argument(
        "--eval_size",
        type=training_utils.positive(int),
        default=None,
        help="score only the first N test sentences",
    )
    parser.add_argument("--eval_batch_size", type=training_utils.positive(int), default=64)
    parser.add_argument(
        "--skip_training", action="store_true", help="load <output_dir>/model.keras"
    )
    training_utils.add_console_arguments(parser)
    parser.add_argument("--seed", type=int, default=1)
    run_folder.add_export_arguments(parser)
    training_utils.add_strategy_arguments(parser)
    args = parser.parse_args(argv)
    if args.demo:
        parser.set_defaults(**DEMO)
        args = parser.parse_args(argv)
    if args.source == args.target:
        parser.error("--source and --target must differ")
    run_name = "translation_demo" if args.demo else f"translation_{args.source}_{args.target}"
    args.output_dir = args.output_dir or os.path.join("runs", run_name)
    run_folder.check_run_record(
        parser, args, RECORDED_FLAGS, made_before_training=("tokenizer.model",)
    )
    run_folder.check_run_folders(parser, args, loads_model=args.skip_training)
    try:  # after the run folder checks: config.json records --data_dir as given
        args.data_dir = resolve_data_dir(args.data_dir)
    except (OSError, ValueError) as error:
        parser.error(f"--data_dir {args.data_dir}: {error}")
    return args


def load_or_train_tokenizer(args, train_source, train_target):
    from keras_attn.preprocessing.subword_tokenizer import SubwordTokenizer

    path = os.path.join(args.output_dir, "tokenizer.model")
    if os.path.exists(path):
        print(f"Reusing the vocabulary in {path}")
        return SubwordTokenizer.from_file(path)
    run_folder.record_flags(args)  # the vocabulary is the run's first output
    start = time.time()
    tokenizer = SubwordTokenizer.train(
        list(train_source) + list(train_target),
        vocabulary_size=args.vocabulary_size,
        seed=args.seed,
    )
    tokenizer.save(path)
    print(
        f"Learned a joint vocabulary of {tokenizer.vocabulary_size} pieces in {time.time() - start:.1f} s"
    )
    return tokenizer


def build_model(args, vocabulary_size):
    model = translation_transformer(
        vocabulary_size,
        num_layers=args.num_layers,
        hidden_dim=args.hidden_dim,
        num_heads=args.num_heads,
        intermediate_dim=args.intermediate_dim,
        dropout=args.dropout,
        normalize_first=args.normalize_first,
    )
    schedule = WarmupInverseSqrtSchedule(
        args.hidden_dim, warmup_steps=args.warmup_steps, scale=args.learning_rate_scale
    )
    model.compile(
        optimizer=keras.optimizers.Adam(schedule, beta_1=0.9, beta_2=0.98, epsilon=1e-9),
        loss=MaskedSparseCategoricalCrossentropy(label_smoothing=args.label_smoothing),
        metrics=[MaskedSparseCategoricalAccuracy()],
        # Bucketed batches come in many shapes; XLA would compile each one
        # (minutes per shape on 2 cores), plain graph mode runs them all.
        jit_compile=False,
    )
    return model


def load_pairs(args):
    """(train_pairs, val_pairs), each (source sentences, target sentences)."""
    train_pairs = load_multi30k(args.data_dir, "train", args.source, args.target)
    if args.train_size:
        train_pairs = tuple(side[: args.train_size] for side in train_pairs)
    val_pairs = load_multi30k(args.data_dir, "val", args.source, args.target)
    if args.val_size:
        val_pairs = tuple(side[: args.val_size] for side in val_pairs)
    return train_pairs, val_pairs


def train(args, tokenizer, train_pairs, val_pairs, strategy=None, callbacks=()):
    """Trains under `strategy` (default: one device); `callbacks` are added
    to fit's. Returns the best checkpoint."""
    import tensorflow as tf

    from keras_attn.preprocessing.text import make_translation_dataset

    strategy = strategy or tf.distribute.get_strategy()

    def dataset(pairs, shuffle, seed=args.seed):
        return make_translation_dataset(
            pairs[0],
            pairs[1],
            tokenizer,
            tokenizer,
            tokens_per_batch=args.tokens_per_batch,
            max_length=args.max_length,
            shuffle=shuffle,
            seed=seed,
        )

    run_folder.record_flags(args)
    counts = [int(np.count_nonzero(t)) for _, t in dataset(train_pairs, False)]
    target_tokens = sum(counts)
    with strategy.scope():
        model = build_model(args, tokenizer.vocabulary_size)
    backup = training_utils.ExactBackupAndRestore(os.path.join(args.output_dir, "backup"))
    start_step = backup.restore(model)
    # One endless stream, the same in every process: pass after pass over
    # the pairs, each shuffled with its own seed (a pass has len(counts)
    # batches whatever the order: bucket sizes do not depend on it). A
    # resumed run starts after the batches already trained on, so it sees
    # the batches an uninterrupted run would.
    first_pass, offset = divmod(start_step, len(counts))
    train_data = training_utils.shuffled_passes(
        lambda seed: dataset(train_pairs, True, seed), args.seed, first_pass=first_pass
    ).skip(offset)
    val_data = dataset(val_pairs, False)
    # Bucketing hides the number of batches from Keras, which would then warn
    # that the input "ran out of data" at the end of every validation pass.
    val_data = val_data.apply(tf.data.experimental.assert_cardinality(sum(1 for _ in val_data)))
    steps_per_epoch = args.steps_per_epoch or len(counts)
    print(
        f"Model: {model.count_params():,} parameters; {len(train_pairs[0]):,} training pairs, "
        f"{target_tokens:,} target tokens per epoch"
    )
    callbacks = [
        backup,
        *callbacks,
        training_utils.TokenThroughput(target_tokens / len(counts), "target_tokens_per_second"),
        # Optimizer steps so far: an epoch cut short by --minutes counts what ran.
        training_utils.ExamplesSeen(1, key="training_steps"),
        keras.callbacks.TensorBoard(os.path.join(args.output_dir, "logs")),
        training_utils.HistoryLogger(os.path.join(args.output_dir, "history.csv")),
        run_folder.best_checkpoint(
            args.output_dir, "val_loss"
        ),  # model.keras: the best epoch so far
    ]
    budget, verbose = training_utils.time_budget(  # counts the time of interrupted runs too
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
        steps_per_epoch=steps_per_epoch,
        callbacks=callbacks,
        verbose=verbose,
    )
    print(f"Training took {(time.time() - start) / 60:.1f} min")
    if not os.path.exists(os.path.join(args.output_dir, "model.keras")):
        model.save(os.path.join(args.output_dir, "model.keras"))  # stopped before any epoch ended
    run_folder.mark_training_finished(args.output_dir)
    return keras.saving.load_model(os.path.join(args.output_dir, "model.keras"))


def plot_training_curves(args):
    def draw(plt, rows):
        # Against optimizer steps, so that an epoch the time budget cut short
        # is drawn as short as it was; runs from before `training_steps` was
        # logged, against whole epochs.
        if all(r.get("training_steps") for r in rows):
            x, label = [int(float(r["training_steps"])) for r in rows], "training step"
        else:
            x, label = range(1, len(rows) + 1), "epoch"
        fig, axes = plt.subplots(1, 2, figsize=(10, 3.5))
        for key, axis in (("loss", axes[0]), ("accuracy", axes[1])):
            axis.plot(x, [float(r[key]) for r in rows], marker="o", label="train")
            if f"val_{key}" in rows[0]:
                axis.plot(x, [float(r[f"val_{key}"]) for r in rows], marker="o", label="validation")
            axis.set_xlabel(label)
            axis.xaxis.get_major_locator().set_params(integer=True)
            axis.set_title(f"{key} ({args.source}→{args.target})")
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
    train_pairs, val_pairs = load_pairs(args)
    os.makedirs(args.output_dir, exist_ok=True)
    tokenizer = load_or_train_tokenizer(args, *train_pairs)
    if args.skip_training:
        model = keras.saving.load_model(os.path.join(args.output_dir, "model.keras"))
    else:
        model = train(args, tokenizer, train_pairs, val_pairs, strategy)
        if not chief:
            return  # the chief evaluates, plots and exports
        plot_training_curves(args)

    import evaluate  # the example's decoding, BLEU and attention plot

    evaluate.report(args, model, tokenizer)
    if not args.skip_export:
        from keras_attn.export import export_translator

        path = export_translator(
            model,
            tokenizer,
            args.export_dir,
            version=args.version,
            max_length=args.max_length,
            num_beams=args.num_beams,
            length_penalty_alpha=args.length_penalty_alpha,
            jit_compile=bool(args.export_xla),
        )
        print(f"Exported the translator to {path}")
        with open(os.path.join(args.output_dir, "export_path.txt"), "w") as f:
            f.write(path)


if __name__ == "__main__":
    quiet.run(main, interrupted=training_utils.INTERRUPTED)
