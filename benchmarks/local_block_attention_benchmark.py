"""Speed and memory of LocalBlockAttention against dense attention.

Causal self-attention at d_model 256 (8 heads, key_dim 32), batch size 1,
T = 1024 ... 16384:

- `local`: keras_attn's LocalBlockAttention, 1D, block_size 256 and
  memory_flange 256 (each query sees the previous block and its own block
  up to itself, at most 512 keys; the paper's 1D setting of a 256-long
  query block in a 512-long memory block);
- `dense`: keras.layers.MultiHeadAttention(num_heads=8, key_dim=32) with
  `use_causal_mask=True`, the dense (T, T) anchor (a band mask would cost
  the same: dense attention computes every (query, key) pair either way).

Measured (shared code in `harness.py`):
1. Peak memory of one forward + backward call (no XLA), in a fresh process
   per configuration (ru_maxrss rise, function traced beforehand), two
   processes at a time.
2. Forward + backward time (gradients of the inputs and of every weight),
   tf.function without and then with jit_compile, both layers interleaved
   (warm-up, then local dense local dense ..., median of --repeats), with
   the achieved GFLOP/s next to the float32 matmul roofline of this run
   (FLOPs actually executed: dense computes all T x T pairs, local its
   512-key windows).

Goals (issue 7): time grows linearly with T; >= 5x faster and >= 10x less
memory than dense at T = 8192.

The run is kept under --budget seconds (default 280): configurations whose
predicted time (x2 per doubling of T for local, x4 for dense) or memory
(dense: about four (H, T, T) float32 buffers) does not fit are reported as
"skipped (out of budget)" and not run.

Run: `python benchmarks/local_block_attention_benchmark.py [--quick]
[--lengths 1024 2048 ...] [--repeats 5] [--budget 280]`. Prints a markdown
table and writes benchmarks/results/local_block_attention.json. The inputs
are random activations: speed and memory do not depend on the values.
"""

import argparse
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import peak_memory  # noqa: E402

MODEL_DIM, NUM_HEADS, KEY_DIM, BATCH = 256, 8, 32, 1
BLOCK_SIZE, MEMORY_FLANGE = 256, 256
LENGTHS = (1024, 2048, 4096, 8192, 16384)
LAYERS = ("local", "dense")
GROWTH = {"local": 2.0, "dense": 4.0}  # cost factor per doubling of T
MEMORY_BUDGET_S = 90  # of the total budget, for the memory processes


def _available_bytes():
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def dense_bytes(length):
    # About four live (H, T, T) float32 buffers in dense forward + backward
    # (4 x 537 MB measured as 2.1 GiB at T = 4096).
    return 4 * BATCH * NUM_HEADS * length * length * 4


def memory_skip_reason(layer, length):
    free = _available_bytes()
    if layer == "dense" and free is not None and dense_bytes(length) > 0.75 * free:
        return (
            f"skipped (out of budget: ~{dense_bytes(length) / 2**30:.0f} GiB estimated, "
            f"{free / 2**30:.0f} GiB free)"
        )
    return None


def make_step(tf, name, jit_compile):
    import keras

    from keras_attn.layers import LocalBlockAttention

    if name == "local":
        layer = LocalBlockAttention(
            num_heads=NUM_HEADS,
            key_dim=KEY_DIM,
            block_size=BLOCK_SIZE,
            memory_flange=MEMORY_FLANGE,
            name="local",
        )
        layer.build((None, None, MODEL_DIM))
        forward = lambda x: layer(x, use_causal_mask=True)  # noqa: E731
    else:
        layer = keras.layers.MultiHeadAttention(num_heads=NUM_HEADS, key_dim=KEY_DIM, name="dense")
        layer.build((None, None, MODEL_DIM), (None, None, MODEL_DIM))
        forward = lambda x: layer(x, x, use_causal_mask=True)  # noqa: E731
    return harness.forward_backward_step(forward, layer.trainable_weights, jit_compile)


def inputs(tf, length):
    return tf.random.stateless_normal((BATCH, length, MODEL_DIM), seed=(1, length))


def executed_flops(name, length):
    keys = min(length, BLOCK_SIZE + MEMORY_FLANGE) if name == "local" else length
    return harness.attention_flops(
        BATCH, length, MODEL_DIM, NUM_HEADS, KEY_DIM, key_length=keys, backward=True
    )


def memory_worker(config):
    tf = harness.setup_tensorflow()
    step = make_step(tf, config["layer"], jit_compile=False)
    x = inputs(tf, config["length"])
    peak_memory.memory_worker(lambda: step(x), prepare=lambda: step.get_concrete_function(x))


def main():
    parser = harness.add_common_arguments(
        argparse.ArgumentParser(description=__doc__.splitlines()[0])
    )
    parser.add_argument("--lengths", type=int, nargs="+", default=list(LENGTHS))
    parser.add_argument("--skip-memory", action="store_true")
    args = parser.parse_args()
    if args.memory_worker:
        return memory_worker(json.loads(args.memory_worker))
    lengths = sorted(args.lengths)
    if args.quick:
        lengths = [1024]
        args.repeats = min(args.repeats, 2)
    budget = harness.Budget(args.budget)
    env_start = harness.environment()
    tf = harness.setup_tensorflow()

    # 1. Peak memory, the most telling length first.
    memory = {}
    if not args.skip_memory:
        middle = [t for t in lengths if t <= 8192][-1:] or lengths[:1]
        order = [(layer, t) for t in middle for layer in LAYERS]
        order += [(layer, t) for t in lengths for layer in LAYERS if t not in middle]
        runnable = []
        for layer, length in order:
            reason = memory_skip_reason(layer, length)
            if reason:
                memory[(layer, length)] = {"skipped": reason}
            else:
                runnable.append({"layer": layer, "length": length})
        memory_budget = harness.Budget(min(MEMORY_BUDGET_S, 0.35 * budget.left()))
        records = peak_memory.measure_memory_many(
            __file__, runnable, budget=memory_budget, timeout=90
        )
        memory.update({(c["layer"], c["length"]): r for c, r in zip(runnable, records)})
        print(f"memory done ({budget.elapsed():.0f} s)", file=sys.stderr, flush=True)

    # 2. Timing, without XLA then with.
    roofline = [harness.matmul_roofline()]
    last = {}  # (layer, jit) -> (length, seconds of warm-up + repeats)
    skipped = {}

    def predicted(layer, jit, length):
        if (layer, jit) not in last:
            return 0.0
        previous_length, seconds = last[(layer, jit)]
        return seconds * GROWTH[layer] ** max(0.0, math.log2(length / previous_length))

    def candidates(config):
        length, jit = config
        x = inputs(tf, length)
        chosen = {}
        for layer in LAYERS:
            reason = memory_skip_reason(layer, length)
            cost = predicted(layer, jit, length)
            others = sum(predicted(o, jit, length) for o in LAYERS if o != layer)
            if reason is None and cost + others > budget.left():
                reason = (
                    f"skipped (out of budget: ~{cost:.0f} s predicted, "
                    f"{max(0.0, budget.left() - others):.0f} s left)"
                )
            if reason:
                skipped[(layer, length, jit)] = {"skipped": reason}
                continue
            step = make_step(tf, layer, jit)
            chosen[layer] = lambda step=step: step(x)
        return chosen

    def on_result(config, records):
        length, jit = config
        for layer, record in records.items():
            record["gflops"] = executed_flops(layer, length) / record["median_s"] / 1e9
            last[(layer, jit)] = (length, record["first_s"] + sum(record["runs_s"]))

    configs = [(t, jit) for jit in (False, True) for t in lengths]
    compared = harness.compare(
        configs,
        candidates,
        args.repeats,
        budget,
        group=lambda c: c[1],
        growth=None,
        log=lambda c: f"T={c[0]} jit={c[1]}",
        on_result=on_result,
    )
    timing = {}
    for (length, jit), records in compared.items():
        for layer in LAYERS:
            timing[(layer, length, jit)] = records.get(layer) or skipped.get((layer, length, jit))
    roofline.append(harness.matmul_roofline())
    env_end = harness.environment()
    peak = max(r["gflops"] for r in roofline)

    def speedup(a, b):
        return (
            f"{b['median_s'] / a['median_s']:.1f}x"
            if a and b and "median_s" in a and "median_s" in b
            else "-"
        )

    def mem(record):
        return (
            f"{record['peak_mib']:.0f}"
            if record and "peak_mib" in record
            else ((record or {}).get("skipped", "not measured"))
        )

    rows = []
    for length in lengths:
        lg, dg = timing.get(("local", length, False)), timing.get(("dense", length, False))
        lx, dx = timing.get(("local", length, True)), timing.get(("dense", length, True))
        lm, dm = memory.get(("local", length)), memory.get(("dense", length))
        memory_ratio = (
            f"{dm['peak_mib'] / lm['peak_mib']:.1f}x"
            if lm and dm and "peak_mib" in lm and "peak_mib" in dm and lm["peak_mib"] > 0
            else "-"
        )
        rows.append(
            [
                length,
                harness.fmt_ms(lg),
                harness.fmt_ms(dg),
                speedup(lg, dg),
                harness.fmt_ms(lx),
                harness.fmt_ms(dx),
                speedup(lx, dx),
                harness.fmt_gflops(lg, peak),
                harness.fmt_gflops(dg, peak),
                mem(lm),
                mem(dm),
                memory_ratio,
            ]
        )
    lines = [
        f"LocalBlockAttention (block_size={BLOCK_SIZE}, memory_flange={MEMORY_FLANGE}, causal) vs "
        f"keras.layers.MultiHeadAttention (causal), d_model={MODEL_DIM}, heads={NUM_HEADS}, "
        f"key_dim={KEY_DIM}, batch={BATCH}; forward+backward, median of {args.repeats} interleaved calls (ms); "
        f"GFLOP/s without XLA (% of the {peak:.0f} GFLOP/s matmul roofline of this run); peak = ru_maxrss "
        "rise over one call in a fresh process, no XLA (MiB). Goals: >= 5x faster, >= 10x less memory "
        "at T = 8192.",
        "",
        harness.markdown_table(
            [
                "T",
                "local ms",
                "dense ms",
                "speed-up",
                "local XLA ms",
                "dense XLA ms",
                "speed-up XLA",
                "local GFLOP/s",
                "dense GFLOP/s",
                "local peak MiB",
                "dense peak MiB",
                "memory ratio",
            ],
            rows,
        ),
        "",
        f"Total {budget.elapsed():.0f} s; {harness.load_note(env_start, env_end)}.",
    ]
    print("\n".join(lines))
    harness.write_results(
        harness.output_path(args, "local_block_attention"),
        {
            "config": {
                "model_dim": MODEL_DIM,
                "num_heads": NUM_HEADS,
                "key_dim": KEY_DIM,
                "batch_size": BATCH,
                "block_size": BLOCK_SIZE,
                "memory_flange": MEMORY_FLANGE,
                "causal": True,
                "repeats": args.repeats,
                "budget_s": args.budget,
                "quick": args.quick,
                "grappler_constant_folding": False,
            },
            "environment": {"start": env_start, "end": env_end},
            "matmul_roofline": roofline,
            "timing": [
                {"layer": n, "length": t, "jit_compile": j, **(r or {"skipped": "not run"})}
                for (n, t, j), r in timing.items()
            ],
            "peak_memory": [
                {"layer": n, "length": t, "jit_compile": False, **r} for (n, t), r in memory.items()
            ],
            "table": "\n".join(lines),
            "total_s": budget.elapsed(),
        },
    )


if __name__ == "__main__":
    main()
