"""TransformerEncoder / TransformerDecoder blocks against keras-hub's.

One block, forward + backward (gradients of the inputs and of every weight),
batch 8, d_model 512, 8 heads x 64, d_ff 2048, post-norm, no dropout, at
T = 128, 256, 512, 1024, tf.function without and with jit_compile=True:

- encoder: keras_attn.layers.TransformerEncoder vs
  keras_hub.layers.TransformerEncoder (no mask);
- decoder (decoder-only, causal self-attention, no cross-attention):
  keras_attn.layers.TransformerDecoder vs keras_hub.layers.TransformerDecoder,
  both with their default `use_causal_mask=True`.

Interleaved timing (warm-up, then A B A B ..., median of --repeats), the
achieved GFLOP/s (attention + feed-forward matmuls, x3 for forward +
backward) next to the float32 matmul roofline of the same run, and the peak
memory (no XLA) of each block at T = 512 in a fresh process.

Goal (issue 7): ours / keras-hub <= 1.0.

Run: `python benchmarks/blocks_benchmark.py [--quick] [--repeats 5] [--budget 280]`.
Needs keras-hub (the `benchmarks` extra). Prints markdown tables and writes
benchmarks/results/blocks.json. The inputs are random activations: speed and
memory do not depend on the values.
"""

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import peak_memory  # noqa: E402

BATCH, MODEL_DIM, NUM_HEADS, KEY_DIM, FEED_FORWARD_DIM = 8, 512, 8, 64, 2048
LENGTHS = (128, 256, 512, 1024)
MEMORY_LENGTH = 512
BLOCKS = ("encoder", "decoder")
NAMES = ("keras_attn", "keras_hub")


def make_forward(implementation, block):
    """Returns (forward(x), layer), built for d_model inputs."""
    if implementation == "keras_attn":
        from keras_attn import layers
    else:
        from keras_hub import layers
    cls = layers.TransformerEncoder if block == "encoder" else layers.TransformerDecoder
    layer = cls(intermediate_dim=FEED_FORWARD_DIM, num_heads=NUM_HEADS)
    layer.build((None, None, MODEL_DIM))
    return (lambda x: layer(x)), layer


def block_flops(length, backward=True):
    attention = harness.attention_flops(BATCH, length, MODEL_DIM, NUM_HEADS, KEY_DIM)
    feed_forward = 2.0 * BATCH * length * MODEL_DIM * FEED_FORWARD_DIM * 2
    return (attention + feed_forward) * (3.0 if backward else 1.0)


def inputs(tf, length):
    return tf.random.stateless_normal((BATCH, length, MODEL_DIM), seed=(2, length))


def memory_worker(config):
    tf = harness.setup_tensorflow()
    forward, layer = make_forward(config["implementation"], config["block"])
    step = harness.forward_backward_step(forward, layer.trainable_weights, jit_compile=False)
    x = inputs(tf, config["length"])
    peak_memory.memory_worker(lambda: step(x), prepare=lambda: step.get_concrete_function(x))


def main():
    parser = harness.add_common_arguments(
        argparse.ArgumentParser(description=__doc__.splitlines()[0])
    )
    parser.add_argument("--skip-memory", action="store_true")
    args = parser.parse_args()
    if args.memory_worker:
        return memory_worker(json.loads(args.memory_worker))
    budget = harness.Budget(args.budget)
    lengths, memory_length = LENGTHS, MEMORY_LENGTH
    if args.quick:
        lengths, memory_length = (128,), 128
        args.repeats = min(args.repeats, 2)
    env_start = harness.environment()
    tf = harness.setup_tensorflow()
    import keras

    memory = {}
    if not args.skip_memory:
        configs = [
            {"implementation": n, "block": b, "length": memory_length}
            for b in BLOCKS
            for n in NAMES
        ]
        records = peak_memory.measure_memory_many(__file__, configs, budget=budget)
        memory = {
            (c["implementation"], c["block"], c["length"]): r for c, r in zip(configs, records)
        }
        print(f"memory done ({budget.elapsed():.0f} s)", file=sys.stderr, flush=True)

    roofline = [harness.matmul_roofline()]
    keras.utils.set_random_seed(0)
    layers = {(n, b): make_forward(n, b) for n in NAMES for b in BLOCKS}
    configs = [(b, t, jit) for t in lengths for b in BLOCKS for jit in (False, True)]

    def candidates(config):
        block, length, jit = config
        x = inputs(tf, length)
        steps = {}
        for name in NAMES:
            forward, layer = layers[(name, block)]
            steps[name] = harness.forward_backward_step(forward, layer.trainable_weights, jit)
        return {name: (lambda s=s: s(x)) for name, s in steps.items()}

    compared = harness.compare(
        configs,
        candidates,
        args.repeats,
        budget,
        group=lambda c: (c[0], c[2]),
        log=lambda c: f"{c[0]} T={c[1]} jit={c[2]}",
    )
    roofline.append(harness.matmul_roofline())
    env_end = harness.environment()
    peak = max(r["gflops"] for r in roofline)

    rows = []
    for config in configs:
        block, length, jit = config
        records = compared[config]
        a, b = records.get("keras_attn"), records.get("keras_hub")
        for r in (a, b):
            if r and "median_s" in r:
                r["gflops"] = block_flops(length) / r["median_s"] / 1e9
        rows.append(
            [
                block,
                length,
                "yes" if jit else "no",
                harness.fmt_ms(a),
                harness.fmt_ms(b),
                harness.fmt_ratio(a, b),
                harness.fmt_ratio(a, b, "cpu_median_s"),
                harness.fmt_gflops(a, peak),
                harness.fmt_gflops(b, peak),
            ]
        )
    lines = [
        f"Transformer blocks, forward + backward: keras_attn vs keras-hub "
        f"{env_start.get('keras-hub')}; batch {BATCH}, d_model {MODEL_DIM}, {NUM_HEADS} heads x {KEY_DIM}, "
        f"d_ff {FEED_FORWARD_DIM}, post-norm; decoder = causal self-attention only. Median of "
        f"{args.repeats} interleaved calls after a warm-up; GFLOP/s (% of the {peak:.0f} GFLOP/s matmul "
        "roofline of this run). Goal: ratio <= 1.00.",
        "",
        harness.markdown_table(
            [
                "block",
                "T",
                "XLA",
                "keras_attn ms",
                "keras-hub ms",
                "ours / hub (wall)",
                "ours / hub (CPU)",
                "keras_attn GFLOP/s",
                "keras-hub GFLOP/s",
            ],
            rows,
        ),
    ]
    if memory:
        lines += [
            "",
            "Peak memory of one forward + backward call, no XLA: ru_maxrss rise in a fresh "
            "process (MiB).",
            "",
            peak_memory.memory_table(
                memory,
                [(b, memory_length) for b in BLOCKS],
                NAMES,
                ["block", "T"],
                ["keras_attn MiB", "keras-hub MiB", "ours / hub"],
            ),
        ]
    lines += ["", f"Total {budget.elapsed():.0f} s; {harness.load_note(env_start, env_end)}."]
    print("\n".join(lines))
    harness.write_results(
        harness.output_path(args, "blocks"),
        {
            "config": {
                "batch_size": BATCH,
                "model_dim": MODEL_DIM,
                "num_heads": NUM_HEADS,
                "key_dim": KEY_DIM,
                "intermediate_dim": FEED_FORWARD_DIM,
                "repeats": args.repeats,
                "quick": args.quick,
                "budget_s": args.budget,
            },
            "environment": {"start": env_start, "end": env_end},
            "matmul_roofline": roofline,
            "timing": [
                {"block": c[0], "length": c[1], "jit_compile": c[2], "implementation": n, **r}
                for c, records in compared.items()
                for n, r in records.items()
            ],
            "peak_memory": [
                {"implementation": n, "block": b, "length": t, "jit_compile": False, **r}
                for (n, b, t), r in memory.items()
            ],
            "table": "\n".join(lines),
            "total_s": budget.elapsed(),
        },
    )


if __name__ == "__main__":
    main()
