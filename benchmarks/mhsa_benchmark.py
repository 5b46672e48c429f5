"""MultiHeadSelfAttention against keras.layers.MultiHeadAttention.

Self-attention, no mask, batch 8, d_model 512, 8 heads x 64:
forward + backward (gradients of the inputs and of every weight) at
T = 128, 256, 512, 1024 and forward at T = 128 ... 2048, each under
tf.function without and with jit_compile=True.

- `mhsa`: keras_attn.layers.MultiHeadSelfAttention (fused QKV projection),
- `keras_mha`: keras.layers.MultiHeadAttention called as `mha(x, x)`
  (three projections; on the TensorFlow backend it runs
  `ops.dot_product_attention`).

Both layers are timed interleaved in one process (warm-up call, then
A B A B ..., median of --repeats), wall and process CPU time. Achieved
GFLOP/s (projections + Q·Kᵀ + P·V; forward + backward = 3x forward) is
printed next to the float32 matmul roofline measured in the same run.
Peak memory (no XLA) comes from a fresh process per configuration.

Goal (issue 7): mhsa / keras_mha <= 1.0 at every T, both passes, jit and not.

Run: `python benchmarks/mhsa_benchmark.py [--quick] [--repeats 5] [--budget 280]`
Prints markdown tables and writes benchmarks/results/mhsa.json. The inputs
are random activations: speed and memory do not depend on the values.
"""

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import peak_memory  # noqa: E402

BATCH, MODEL_DIM, NUM_HEADS, KEY_DIM = 8, 512, 8, 64
BACKWARD_LENGTHS = (128, 256, 512, 1024)
FORWARD_LENGTHS = (128, 256, 512, 1024, 2048)
MEMORY_CONFIGS = (("fwd+bwd", 512), ("fwd+bwd", 1024), ("fwd", 2048))
LAYERS = ("mhsa", "keras_mha")


def make_forward(name):
    """Returns (forward(x), layer), the layer built for d_model inputs."""
    import keras

    from keras_attn.layers import MultiHeadSelfAttention

    if name == "mhsa":
        layer = MultiHeadSelfAttention(num_heads=NUM_HEADS, key_dim=KEY_DIM, name="mhsa")
        layer.build((None, None, MODEL_DIM))
        return (lambda x: layer(x)), layer
    layer = keras.layers.MultiHeadAttention(num_heads=NUM_HEADS, key_dim=KEY_DIM, name="keras_mha")
    layer.build((None, None, MODEL_DIM), (None, None, MODEL_DIM))
    return (lambda x: layer(x, x)), layer


def make_step(name, pass_name, jit_compile, layers=None):
    forward, layer = (layers or {}).get(name) or make_forward(name)
    if pass_name == "fwd":
        return harness.forward_step(forward, jit_compile)
    return harness.forward_backward_step(forward, layer.trainable_weights, jit_compile)


def inputs(tf, length):
    return tf.random.stateless_normal((BATCH, length, MODEL_DIM), seed=(1, length))


def memory_worker(config):
    tf = harness.setup_tensorflow()
    step = make_step(config["layer"], config["pass"], jit_compile=False)
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
    backward_lengths, forward_lengths, memory_configs = (
        BACKWARD_LENGTHS,
        FORWARD_LENGTHS,
        MEMORY_CONFIGS,
    )
    if args.quick:
        backward_lengths, forward_lengths, memory_configs = (128,), (128,), (("fwd+bwd", 128),)
        args.repeats = min(args.repeats, 2)
    env_start = harness.environment()
    tf = harness.setup_tensorflow()
    import keras

    memory = {}
    if not args.skip_memory:
        configs = [
            {"layer": layer, "pass": p, "length": t} for p, t in memory_configs for layer in LAYERS
        ]
        records = peak_memory.measure_memory_many(__file__, configs, budget=budget)
        memory = {(c["layer"], c["pass"], c["length"]): r for c, r in zip(configs, records)}
        print(f"memory done ({budget.elapsed():.0f} s)", file=sys.stderr, flush=True)

    roofline = [harness.matmul_roofline()]
    keras.utils.set_random_seed(0)
    layers = {name: make_forward(name) for name in LAYERS}
    configs = [
        (p, t, jit)
        for p, lengths in (("fwd+bwd", backward_lengths), ("fwd", forward_lengths))
        for t in lengths
        for jit in (False, True)
    ]

    def candidates(config):
        pass_name, length, jit = config
        x = inputs(tf, length)
        steps = {name: make_step(name, pass_name, jit, layers) for name in LAYERS}
        return {name: (lambda s=s: s(x)) for name, s in steps.items()}

    compared = harness.compare(
        configs,
        candidates,
        args.repeats,
        budget,
        group=lambda c: (c[0], c[2]),
        log=lambda c: f"{c[0]} T={c[1]} jit={c[2]}",
    )
    timing = {}
    for (pass_name, length, jit), records in compared.items():
        for name in LAYERS:
            record = records.get(name, {"skipped": "skipped (out of budget)"})
            if "median_s" in record:
                flops = harness.attention_flops(
                    BATCH, length, MODEL_DIM, NUM_HEADS, KEY_DIM, backward=pass_name != "fwd"
                )
                record["gflops"] = flops / record["median_s"] / 1e9
            timing[(name, pass_name, length, jit)] = record
    roofline.append(harness.matmul_roofline())
    env_end = harness.environment()
    peak = max(r["gflops"] for r in roofline)

    headers = [
        "pass",
        "T",
        "XLA",
        "mhsa ms",
        "keras MHA ms",
        "mhsa / keras (wall)",
        "mhsa / keras (CPU)",
        "mhsa GFLOP/s",
        "keras GFLOP/s",
    ]
    rows = []
    for pass_name, length, jit in configs:
        a, b = (
            timing.get(("mhsa", pass_name, length, jit)),
            timing.get(("keras_mha", pass_name, length, jit)),
        )
        rows.append(
            [
                pass_name,
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
        f"MultiHeadSelfAttention vs keras.layers.MultiHeadAttention: self-attention, no mask, batch {BATCH}, "
        f"d_model {MODEL_DIM}, {NUM_HEADS} heads x {KEY_DIM}; median of {args.repeats} interleaved calls "
        f"after a warm-up. GFLOP/s (% of the {peak:.0f} GFLOP/s float32 matmul roofline of this run). "
        "Goal: ratio <= 1.00.",
        "",
        harness.markdown_table(headers, rows),
    ]
    if memory:
        lines += [
            "",
            "Peak memory of one call, no XLA: ru_maxrss rise in a fresh process (MiB).",
            "",
            peak_memory.memory_table(
                memory,
                memory_configs,
                LAYERS,
                ["pass", "T"],
                ["mhsa MiB", "keras MHA MiB", "mhsa / keras"],
            ),
        ]
    lines += ["", f"Total {budget.elapsed():.0f} s; {harness.load_note(env_start, env_end)}."]
    print("\n".join(lines))
    harness.write_results(
        harness.output_path(args, "mhsa"),
        {
            "config": {
                "batch_size": BATCH,
                "model_dim": MODEL_DIM,
                "num_heads": NUM_HEADS,
                "key_dim": KEY_DIM,
                "repeats": args.repeats,
                "quick": args.quick,
                "budget_s": args.budget,
            },
            "environment": {"start": env_start, "end": env_end},
            "matmul_roofline": roofline,
            "timing": [
                {"layer": n, "pass": p, "length": t, "jit_compile": j, **r}
                for (n, p, t, j), r in timing.items()
            ],
            "peak_memory": [
                {"layer": n, "pass": p, "length": t, "jit_compile": False, **r}
                for (n, p, t), r in memory.items()
            ],
            "table": "\n".join(lines),
            "total_s": budget.elapsed(),
        },
    )


if __name__ == "__main__":
    main()
