"""Training throughput of the translation example's default model on Multi30k.

The model, optimizer, loss and batching of `examples/translation/train.py`
with its default arguments (3 + 3 blocks, width 256, 8 heads, d_ff 512,
dropout 0.1, joint 8,000-piece SentencePiece vocabulary, length-bucketed
batches of about 2,048 target tokens, graph mode without XLA as the example
trains), on the Multi30k training pairs shipped in
`examples/translation/data/multi30k` (de -> en by default).

Measured: target tokens per second of `train_on_batch` steps (the example's
compiled train function: forward, backward, Adam update), counting real
target tokens (padding excluded, as the example's TokenThroughput callback
does). The first --warmup-steps batches (tracing; keras retraces for new
bucket shapes) are not timed; then --steps batches are, each clocked on its
own. Reported: the overall rate (timed tokens / timed seconds), the median
per-step rate, the median step time, and the batch size (pairs per batch,
real and padded target tokens per batch), with the load average.

The vocabulary is learned from the training text first (SentencePiece,
as the example does; its time is reported, not counted).

Run: `python benchmarks/translation_throughput_benchmark.py [--quick]
[--steps 40] [--source de --target en]`. Prints a markdown table and writes
benchmarks/results/translation_throughput.json.
"""

import argparse
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

EXAMPLE_DIR = os.path.join(harness.PROJECT_ROOT, "examples", "translation")


def main():
    parser = harness.add_common_arguments(
        argparse.ArgumentParser(description=__doc__.splitlines()[0]), repeats=1
    )
    parser.add_argument("--steps", type=int, default=40, help="timed training steps")
    parser.add_argument("--warmup-steps", type=int, default=8, help="untimed steps first (tracing)")
    parser.add_argument("--source", default="de")
    parser.add_argument("--target", default="en")
    args = parser.parse_args()
    if args.quick:
        args.steps, args.warmup_steps = 4, 2
    budget = harness.Budget(args.budget)
    env_start = harness.environment()
    harness.setup_tensorflow()
    import keras
    import numpy as np

    sys.path.insert(0, EXAMPLE_DIR)
    sys.path.insert(1, os.path.dirname(EXAMPLE_DIR))
    import train as recipe  # examples/translation/train.py: the example's own model and recipe

    from keras_attn.preprocessing.subword_tokenizer import SubwordTokenizer
    from keras_attn.preprocessing.text import make_translation_dataset

    with tempfile.TemporaryDirectory() as scratch:
        example_args = recipe.parse_args(
            ["--source", args.source, "--target", args.target, "--output_dir", scratch]
        )
    train_source, train_target = recipe.load_pairs(example_args)[0]
    start = time.perf_counter()
    tokenizer = SubwordTokenizer.train(
        list(train_source) + list(train_target),
        vocabulary_size=example_args.vocabulary_size,
        seed=example_args.seed,
    )
    tokenizer_s = time.perf_counter() - start
    print(
        f"vocabulary of {tokenizer.vocabulary_size} pieces in {tokenizer_s:.1f} s", file=sys.stderr
    )

    dataset = make_translation_dataset(
        train_source,
        train_target,
        tokenizer,
        tokenizer,
        tokens_per_batch=example_args.tokens_per_batch,
        max_length=example_args.max_length,
        shuffle=True,
        seed=example_args.seed,
    )
    batches = list(dataset.take(args.warmup_steps + args.steps))
    keras.utils.set_random_seed(example_args.seed)
    model = recipe.build_model(example_args, tokenizer.vocabulary_size)

    step_s, tokens, padded, pairs = [], [], [], []
    for i, (inputs, targets) in enumerate(batches):
        if budget.left() < 0:
            print(f"out of budget after {i} steps", file=sys.stderr)
            break
        started = time.perf_counter()
        harness.block(model.train_on_batch(inputs, targets))
        elapsed = time.perf_counter() - started
        if i >= args.warmup_steps:
            target_ids = np.asarray(targets)
            step_s.append(elapsed)
            tokens.append(int(np.count_nonzero(target_ids)))
            padded.append(int(target_ids.size))
            pairs.append(int(target_ids.shape[0]))
    env_end = harness.environment()
    if not step_s:
        print("no step was timed (budget too small)")
        return
    per_step_rate = [t / s for t, s in zip(tokens, step_s)]
    result = {
        "timed_steps": len(step_s),
        "target_tokens_per_s": sum(tokens) / sum(step_s),
        "median_step_target_tokens_per_s": statistics.median(per_step_rate),
        "median_step_s": statistics.median(step_s),
        "mean_pairs_per_batch": statistics.mean(pairs),
        "mean_target_tokens_per_batch": statistics.mean(tokens),
        "mean_padded_target_positions_per_batch": statistics.mean(padded),
        "num_params": model.count_params(),
    }
    headers = [
        "model",
        "params",
        "direction",
        "pairs / batch (mean)",
        "target tokens / batch (real, padded)",
        "median step (ms)",
        "target tokens/s (overall)",
        "target tokens/s (median step)",
    ]
    row = [
        f"{example_args.num_layers}+{example_args.num_layers} blocks, d {example_args.hidden_dim}, "
        f"d_ff {example_args.intermediate_dim}, {example_args.num_heads} heads",
        f"{result['num_params']:,}",
        f"{args.source}->{args.target}",
        f"{result['mean_pairs_per_batch']:.1f}",
        f"{result['mean_target_tokens_per_batch']:.0f}, {result['mean_padded_target_positions_per_batch']:.0f}",
        f"{1000 * result['median_step_s']:.0f}",
        f"{result['target_tokens_per_s']:.0f}",
        f"{result['median_step_target_tokens_per_s']:.0f}",
    ]
    lines = [
        "Translation example, default model, training throughput on the shipped Multi30k training pairs "
        f"(tokens_per_batch {example_args.tokens_per_batch}, max_length {example_args.max_length}, graph mode "
        f"without XLA as the example trains); {len(step_s)} timed train_on_batch steps after "
        f"{args.warmup_steps} untimed ones.",
        "",
        harness.markdown_table(headers, [row]),
        "",
        f"Total {budget.elapsed():.0f} s (vocabulary {tokenizer_s:.0f} s); {harness.load_note(env_start, env_end)}.",
    ]
    print("\n".join(lines))
    harness.write_results(
        harness.output_path(args, "translation_throughput"),
        {
            # Paths relative to the repository: results are shared between machines.
            "config": {
                **{
                    k: os.path.relpath(v, harness.PROJECT_ROOT) if k == "data_dir" else v
                    for k, v in vars(example_args).items()
                    if isinstance(v, (int, float, str, bool))
                },
                "timed_steps": args.steps,
                "warmup_steps": args.warmup_steps,
                "quick": args.quick,
            },
            "environment": {"start": env_start, "end": env_end},
            "result": result,
            "steps": {
                "seconds": step_s,
                "target_tokens": tokens,
                "padded_target_positions": padded,
                "pairs": pairs,
            },
            "tokenizer_s": tokenizer_s,
            "table": "\n".join(lines),
            "total_s": budget.elapsed(),
        },
    )


if __name__ == "__main__":
    main()
