"""Long sequences: chunked (memory-efficient) attention against the dense core and keras MHA.

Self-attention with a causal mask, batch 1, d_model 512, 8 heads x 64,
forward + backward (gradients of the inputs and of every weight), no XLA:

- `chunked`: keras_attn MultiHeadSelfAttention(chunk_size=C) (online
  softmax over key chunks, gradient recomputed per chunk),
- `dense`: keras_attn MultiHeadSelfAttention (the dense core),
- `keras_mha`: keras.layers.MultiHeadAttention called as
  `mha(x, x, use_causal_mask=True)`;
- `relative_chunked` (memory only, shortest and longest T):
  RelativeGlobalAttention(max_relative_position=M (default 1024), chunk_size=C).

Peak memory of one step in a fresh process per configuration (ru_maxrss
rise) at T = 2k, 4k, 8k, 16k for the chunked layer and at T = 2k, 4k (8k
with --large) for the dense ones, whose (B, H, T, T) buffers grow as T²;
time interleaved (median of --repeats) at T = 1k, 2k, 4k. Chunk sizes:
--chunk_size (default 256), and the sweep --sweep over 256, 512, 1024 at
T = 2k that chose it.

Goal (issue 15): at T = 4,096 peak memory <= 1/8 of keras MHA's and time
<= 1.0x keras MHA's; training at T = 16,384 on 24 GiB, memory linear in T.

Run: `python benchmarks/long_sequence_benchmark.py [--quick] [--sweep]
[--max_relative_position M]`; `--any_length`: "auto" in a step traced for
any length (None, as `fit` after two lengths or an export), its memory at
T = 8192 against the step traced at 8192 and its time against the dense and
chunked cores at T = 128, 512, 2048 (issue 46).
Prints markdown tables and writes benchmarks/results/long_sequence.json.
The inputs are random activations: speed and memory do not depend on the
values.
"""

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import peak_memory  # noqa: E402

BATCH, MODEL_DIM, NUM_HEADS, KEY_DIM = 1, 512, 8, 64
TIMING_LENGTHS = (1024, 2048, 4096)
CHUNKED_MEMORY_LENGTHS = (2048, 4096, 8192, 16384)
DENSE_MEMORY_LENGTHS = (2048, 4096)
LAYERS = ("chunked", "dense", "keras_mha")


def make_forward(name, chunk_size, max_relative_position=1024):
    import keras

    from keras_attn.layers import MultiHeadSelfAttention, RelativeGlobalAttention

    if name == "auto":
        layer = MultiHeadSelfAttention(num_heads=NUM_HEADS, key_dim=KEY_DIM)
        layer.build((None, None, MODEL_DIM))
        return (lambda x: layer(x, use_causal_mask=True)), layer
    if name.startswith("relative"):
        layer = RelativeGlobalAttention(
            num_heads=NUM_HEADS,
            key_dim=KEY_DIM,
            max_relative_position=max_relative_position,
            chunk_size=chunk_size if name == "relative_chunked" else None,
        )
        layer.build((None, None, MODEL_DIM))
        return (lambda x: layer(x, use_causal_mask=True)), layer
    if name == "keras_mha":
        layer = keras.layers.MultiHeadAttention(num_heads=NUM_HEADS, key_dim=KEY_DIM)
        layer.build((None, None, MODEL_DIM), (None, None, MODEL_DIM))
        return (lambda x: layer(x, x, use_causal_mask=True)), layer
    layer = MultiHeadSelfAttention(
        num_heads=NUM_HEADS, key_dim=KEY_DIM, chunk_size=chunk_size if name == "chunked" else None
    )
    layer.build((None, None, MODEL_DIM))
    return (lambda x: layer(x, use_causal_mask=True)), layer


def make_step(name, chunk_size, any_length=False, max_relative_position=1024):
    """fwd+bwd step; `any_length`: traced once for every length (a None
    length, as `fit` after two lengths or an export), so "auto" chooses at
    run time."""
    forward, layer = make_forward(name, chunk_size, max_relative_position)
    step = harness.forward_backward_step(forward, layer.trainable_weights, jit_compile=False)
    if not any_length:
        return step
    import tensorflow as tf

    return harness.compile_function(
        step.python_function, False, input_signature=[tf.TensorSpec((BATCH, None, MODEL_DIM))]
    )


def inputs(tf, length):
    return tf.random.stateless_normal((BATCH, length, MODEL_DIM), seed=(1, length))


def memory_worker(config):
    tf = harness.setup_tensorflow()
    step = make_step(
        config["layer"],
        config["chunk_size"],
        config.get("any_length", False),
        config.get("max_relative_position", 1024),
    )
    x = inputs(tf, config["length"])
    peak_memory.memory_worker(lambda: step(x), prepare=lambda: step.get_concrete_function(x))


def main():
    parser = harness.add_common_arguments(
        argparse.ArgumentParser(description=__doc__.splitlines()[0]), budget=600.0
    )
    parser.add_argument("--chunk_size", type=int, default=256)
    parser.add_argument(
        "--sweep", action="store_true", help="also time chunk sizes 256, 512, 1024 at T = 2048"
    )
    parser.add_argument(
        "--crossover",
        action="store_true",
        help="only time dense against chunked, both layers, T = 512 .. 4096 "
        "(the measurement behind chunk_size='auto')",
    )
    parser.add_argument(
        "--max_relative_position",
        type=int,
        default=1024,
        help="M of the relative_chunked rows; 0: M = T at each length (the table as long as "
        "the sequence)",
    )
    parser.add_argument(
        "--relative",
        default=None,
        help="only RelativeGlobalAttention against MultiHeadSelfAttention, both chunk_size=C, "
        "at these lengths (comma-separated): peak memory, time interleaved (issue 46)",
    )
    parser.add_argument(
        "--any_length",
        action="store_true",
        help="only chunk_size='auto' traced for any length (None): time against "
        "dense and chunked at T = 128, 512, 2048, memory at T = 8192 against "
        "'auto' traced at that length",
    )
    parser.add_argument(
        "--large",
        action="store_true",
        help="also measure the dense layers' memory at T = 8192 (about 10 GiB)",
    )
    args = parser.parse_args()
    if args.memory_worker:
        return memory_worker(json.loads(args.memory_worker))
    budget = harness.Budget(args.budget)
    timing_lengths, chunked_lengths, dense_lengths = (
        TIMING_LENGTHS,
        CHUNKED_MEMORY_LENGTHS,
        DENSE_MEMORY_LENGTHS,
    )
    if args.large:
        dense_lengths = dense_lengths + (8192,)
    if args.quick:
        timing_lengths, chunked_lengths, dense_lengths = (512,), (512,), (512,)
        args.repeats = min(args.repeats, 2)
    env_start = harness.environment()
    tf = harness.setup_tensorflow()
    if args.crossover:
        return crossover(args, budget, env_start, tf)
    if args.any_length:
        return any_length(args, budget, env_start, tf)
    if args.relative:
        return relative_against_mhsa(args, budget, env_start, tf)

    configs = [
        {"layer": "chunked", "length": t, "chunk_size": args.chunk_size} for t in chunked_lengths
    ]
    configs += [
        {"layer": name, "length": t, "chunk_size": args.chunk_size}
        for t in dense_lengths
        for name in ("dense", "keras_mha")
    ]
    # RelativeGlobalAttention (M = --max_relative_position) chunked, at the ends of the range.
    configs += [
        {
            "layer": "relative_chunked",
            "length": t,
            "chunk_size": args.chunk_size,
            "max_relative_position": args.max_relative_position,
        }
        for t in (chunked_lengths[0], chunked_lengths[-1])
    ]
    # One worker at a time: two 10 GiB workers side by side would not fit.
    records = peak_memory.measure_memory_many(
        __file__, configs, parallel=1, timeout=300.0, budget=budget
    )
    memory = {(c["layer"], c["length"]): r for c, r in zip(configs, records)}
    print(f"memory done ({budget.elapsed():.0f} s)", file=sys.stderr, flush=True)

    steps = {name: make_step(name, args.chunk_size) for name in LAYERS}

    def candidates(length):
        x = inputs(tf, length)
        return {name: (lambda s=s: s(x)) for name, s in steps.items()}

    compared = harness.compare(
        list(timing_lengths), candidates, args.repeats, budget, log=lambda t: f"fwd+bwd T={t}"
    )
    sweep = {}
    if args.sweep and not args.quick:
        sweep_steps = {f"chunk {c}": make_step("chunked", c) for c in (256, 512, 1024)}
        x = inputs(tf, 2048)
        sweep = harness.time_interleaved(
            {n: (lambda s=s: s(x)) for n, s in sweep_steps.items()},
            repeats=args.repeats,
            budget=budget,
        )
    env_end = harness.environment()

    rows = []
    for length in sorted(set(chunked_lengths) | set(dense_lengths)):
        c, d, k = (memory.get((n, length)) for n in LAYERS)
        ratio = (
            f"{c['peak_mib'] / k['peak_mib']:.3f}x"
            if c and k and "peak_mib" in c and "peak_mib" in k and k["peak_mib"] > 0
            else "-"
        )
        seconds = f"{c['seconds']:.2f}" if c and "seconds" in c else "-"
        rows.append(
            [
                length,
                peak_memory.fmt_mib(c),
                seconds,
                peak_memory.fmt_mib(d),
                peak_memory.fmt_mib(k),
                ratio,
            ]
        )
    relative = [
        f"T {t}: {peak_memory.fmt_mib(memory.get(('relative_chunked', t)))} MiB, "
        f"{memory.get(('relative_chunked', t), {}).get('seconds', float('nan')):.2f} s"
        for t in (chunked_lengths[0], chunked_lengths[-1])
    ]
    lines = [
        f"Causal self-attention, batch {BATCH}, d_model {MODEL_DIM}, {NUM_HEADS} heads x {KEY_DIM}, "
        f"forward + backward, no XLA; chunked = MultiHeadSelfAttention(chunk_size={args.chunk_size}).",
        "",
        "Peak memory of one step: ru_maxrss rise in a fresh process (MiB); the chunked step's time "
        "in that process (s). Goal: chunked <= 1/8 of keras MHA at T = 4096; linear in T.",
        "",
        harness.markdown_table(
            ["T", "chunked MiB", "chunked s", "dense MiB", "keras MHA MiB", "chunked / keras"], rows
        ),
        "",
        f"RelativeGlobalAttention(max_relative_position={args.max_relative_position}, chunk_size=C), "
        "same step: " + "; ".join(relative) + ".",
        "",
        f"Time, median of {args.repeats} interleaved calls after a warm-up (ms). Goal: chunked / keras "
        "MHA <= 1.00 at T = 4096.",
        "",
    ]
    timing_rows = []
    for length in timing_lengths:
        records = compared.get(length, {})
        c, d, k = (records.get(n) for n in LAYERS)
        timing_rows.append(
            [
                length,
                harness.fmt_ms(c),
                harness.fmt_ms(d),
                harness.fmt_ms(k),
                harness.fmt_ratio(c, k),
                harness.fmt_ratio(c, k, "cpu_median_s"),
                harness.fmt_ratio(d, k),
            ]
        )
    lines.append(
        harness.markdown_table(
            [
                "T",
                "chunked ms",
                "dense ms",
                "keras MHA ms",
                "chunked / keras (wall)",
                "chunked / keras (CPU)",
                "dense / keras (wall)",
            ],
            timing_rows,
        )
    )
    if sweep:
        lines += [
            "",
            "Chunk size at T = 2048 (ms, median): "
            + ", ".join(f"{n}: {1000 * r['median_s']:.0f}" for n, r in sweep.items()),
        ]
    lines += ["", f"Total {budget.elapsed():.0f} s; {harness.load_note(env_start, env_end)}."]
    report(
        args,
        "long_sequence",
        lines,
        budget,
        (env_start, env_end),
        compared,
        {"quick": args.quick, "budget_s": args.budget},
        chunk_size_sweep=[{"chunk_size": n, **r} for n, r in sweep.items()],
        peak_memory=[{"layer": n, "length": t, **r} for (n, t), r in memory.items()],
    )


def crossover(args, budget, env_start, tf):
    """Dense against chunked core, MultiHeadSelfAttention and RelativeGlobalAttention,
    interleaved in one process: where the chunked core starts to pay."""
    names = ("chunked", "dense", "relative_chunked", "relative_dense")
    steps = {name: make_step(name, args.chunk_size) for name in names}
    lengths = [512] if args.quick else [512, 1024, 1536, 2048, 3072, 4096]

    def candidates(length):
        x = inputs(tf, length)
        return {name: (lambda s=s: s(x)) for name, s in steps.items()}

    compared = harness.compare(
        lengths, candidates, args.repeats, budget, log=lambda t: f"crossover T={t}"
    )
    env_end = harness.environment()
    rows = []
    for length in lengths:
        r = compared.get(length, {})
        rows.append(
            [
                length,
                harness.fmt_ms(r.get("chunked")),
                harness.fmt_ms(r.get("dense")),
                harness.fmt_ratio(r.get("chunked"), r.get("dense")),
                harness.fmt_ms(r.get("relative_chunked")),
                harness.fmt_ms(r.get("relative_dense")),
                harness.fmt_ratio(r.get("relative_chunked"), r.get("relative_dense")),
            ]
        )
    lines = [
        f"Dense vs chunked core (chunk_size={args.chunk_size}), causal, batch {BATCH}, d_model {MODEL_DIM}, "
        f"{NUM_HEADS} heads x {KEY_DIM}, forward + backward, no XLA, median of {args.repeats} "
        "interleaved calls (ms); relative = RelativeGlobalAttention(max_relative_position=1024).",
        "",
        harness.markdown_table(
            [
                "T",
                "MHSA chunked",
                "MHSA dense",
                "chunked / dense",
                "relative chunked",
                "relative dense",
                "chunked / dense",
            ],
            rows,
        ),
        "",
        f"Total {budget.elapsed():.0f} s; {harness.load_note(env_start, env_end)}.",
    ]
    report(
        args,
        "long_sequence_crossover",
        lines,
        budget,
        (env_start, env_end),
        compared,
        {"quick": args.quick},
    )


def relative_against_mhsa(args, budget, env_start, tf):
    """RelativeGlobalAttention(chunk_size=C) against MultiHeadSelfAttention(chunk_size=C) at
    the lengths of --relative (issue 46): peak memory of each in a fresh process, then the two
    steps timed interleaved in this process, one length at a time."""
    lengths = [int(t) for t in args.relative.split(",")]
    names = ("relative_chunked", "chunked")
    configs = [
        {
            "layer": name,
            "length": t,
            "chunk_size": args.chunk_size,
            "max_relative_position": args.max_relative_position or t,
        }
        for t in lengths
        for name in names
    ]
    records = peak_memory.measure_memory_many(
        __file__, configs, parallel=1, timeout=600.0, budget=budget
    )
    memory = {(c["layer"], c["length"]): r for c, r in zip(configs, records)}
    print(f"memory done ({budget.elapsed():.0f} s)", file=sys.stderr, flush=True)
    timing = {}
    for t in lengths:
        x = inputs(tf, t)
        steps = {
            name: make_step(
                name, args.chunk_size, max_relative_position=args.max_relative_position or t
            )
            for name in names
        }
        timing[t] = harness.time_interleaved(
            {n: (lambda s=s, x=x: s(x)) for n, s in steps.items()},
            repeats=args.repeats,
            budget=budget,
        )
        print(f"time T={t} done ({budget.elapsed():.0f} s)", file=sys.stderr, flush=True)
    env_end = harness.environment()
    rows = [
        [
            t,
            args.max_relative_position or t,
            peak_memory.fmt_mib(memory[("relative_chunked", t)]),
            peak_memory.fmt_mib(memory[("chunked", t)]),
            harness.fmt_ms(timing[t]["relative_chunked"]),
            harness.fmt_ms(timing[t]["chunked"]),
            harness.fmt_ratio(timing[t]["relative_chunked"], timing[t]["chunked"]),
            harness.fmt_ratio(timing[t]["relative_chunked"], timing[t]["chunked"], "cpu_median_s"),
        ]
        for t in lengths
    ]
    lines = [
        f"RelativeGlobalAttention vs MultiHeadSelfAttention, both chunk_size={args.chunk_size}, "
        f"causal, batch {BATCH}, d_model {MODEL_DIM}, {NUM_HEADS} heads x {KEY_DIM}, forward + "
        f"backward, no XLA; peak MiB in a fresh process, time median of {args.repeats} "
        "interleaved calls (ms).",
        "",
        harness.markdown_table(
            [
                "T",
                "M",
                "RGA MiB",
                "MHSA MiB",
                "RGA ms",
                "MHSA ms",
                "RGA / MHSA (wall)",
                "RGA / MHSA (CPU)",
            ],
            rows,
        ),
        "",
        f"Total {budget.elapsed():.0f} s; {harness.load_note(env_start, env_end)}.",
    ]
    report(
        args,
        "long_sequence_relative",
        lines,
        budget,
        (env_start, env_end),
        timing,
        {"max_relative_position": args.max_relative_position},
        peak_memory=[{**c, **r} for c, r in zip(configs, records)],
    )


def any_length(args, budget, env_start, tf):
    """chunk_size="auto" in a step traced for any length (issue 46): the
    core is chosen at run time. Memory of a T = 8192 step against the same
    layer traced at 8192; time against the dense and chunked cores traced
    the same way (what "auto" costs below the crossover)."""
    long = 512 if args.quick else 8192
    configs = [
        {"layer": "auto", "length": long, "chunk_size": args.chunk_size, "any_length": flag}
        for flag in (True, False)
    ]
    records = peak_memory.measure_memory_many(
        __file__, configs, parallel=1, timeout=300.0, budget=budget
    )
    steps = {
        name: make_step(name, args.chunk_size, any_length=True)
        for name in ("auto", "dense", "chunked")
    }
    lengths = [128] if args.quick else [128, 512, 2048]

    def candidates(length):
        x = inputs(tf, length)
        return {name: (lambda s=s: s(x)) for name, s in steps.items()}

    compared = harness.compare(
        lengths, candidates, args.repeats, budget, log=lambda t: f"any length T={t}"
    )
    env_end = harness.environment()
    rows = [
        [length]
        + [harness.fmt_ms(compared.get(length, {}).get(n)) for n in steps]
        + [
            harness.fmt_ratio(
                compared.get(length, {}).get("auto"), compared.get(length, {}).get("dense")
            )
        ]
        for length in lengths
    ]
    lines = [
        f"chunk_size='auto' traced for any length (TensorSpec (1, None, {MODEL_DIM})), causal, batch {BATCH}, "
        f"d_model {MODEL_DIM}, {NUM_HEADS} heads x {KEY_DIM}, forward + backward, no XLA.",
        "",
        f"Peak memory of a T = {long} step (fresh process, MiB): traced for any length "
        f"{peak_memory.fmt_mib(records[0])}, traced at {long} {peak_memory.fmt_mib(records[1])}.",
        "",
        f"Time, median of {args.repeats} interleaved calls (ms), every step traced for any length:",
        "",
        harness.markdown_table(["T", "auto", "dense", "chunked", "auto / dense"], rows),
        "",
        f"Total {budget.elapsed():.0f} s; {harness.load_note(env_start, env_end)}.",
    ]
    report(
        args,
        "long_sequence_any_length",
        lines,
        budget,
        (env_start, env_end),
        compared,
        {"quick": args.quick},
        peak_memory=[{**c, **r} for c, r in zip(configs, records)],
    )


def report(args, name, lines, budget, environment, timing, config, **sections):
    """Prints the table `lines` and writes results/<name>.json: the configuration (the shapes,
    chunk size and repeats, plus `config`), the (start, end) `environment`, `timing`
    ({length: {layer: record}}), the extra `sections`, the table and the total time."""
    print("\n".join(lines))
    harness.write_results(
        harness.output_path(args, name),
        {
            "config": {
                "batch_size": BATCH,
                "model_dim": MODEL_DIM,
                "num_heads": NUM_HEADS,
                "key_dim": KEY_DIM,
                "chunk_size": args.chunk_size,
                "repeats": args.repeats,
                **config,
            },
            "environment": {"start": environment[0], "end": environment[1]},
            "timing": [
                {"layer": n, "length": t, **r}
                for t, records in timing.items()
                for n, r in records.items()
            ],
            **sections,
            "table": "\n".join(lines),
            "total_s": budget.elapsed(),
        },
    )


if __name__ == "__main__":
    main()
