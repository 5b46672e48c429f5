"""Speed and memory of LocalBlockAttention against dense attention.

Compares causal self-attention at d_model 256 (8 heads, key_dim 32),
batch size 1, T = 1024 ... 16384:

- `local`: keras_attn's LocalBlockAttention, 1D, block_size 256 and
  memory_flange 256 (each query sees the previous block and its own block
  up to itself, at most 512 keys; the paper's 1D setting of a 256-long
  query block in a 512-long memory block);
- `dense`: keras.layers.MultiHeadAttention(num_heads=8, key_dim=32) with
  `use_causal_mask=True`, the dense (T, T) anchor.

Measured:
1. Forward + backward time (gradients of the inputs and of every weight),
   under tf.function without and with jit_compile: one warm-up call, then
   REPEATS calls per layer interleaved (local, dense, local, dense, ...) in
   one process so that the noise of the shared machine falls on both; the
   median is reported.
2. Peak memory: in a fresh subprocess per configuration (layer, T;
   tf.function without XLA), the rise of the resident-set high-water mark
   (`resource.getrusage(...).ru_maxrss`) over one forward + backward call,
   the function being traced beforehand so that only execution counts.
   Two such processes run at a time (each reads its own high-water mark).

Grappler's constant folding is switched off in every process: keras'
MultiHeadAttention builds its causal mask from static shapes, and folding
that (T, T) constant made its first call take 26 s at T = 4096 here, which
would eat the time budget without changing the steady-state numbers.

The whole run is kept under BUDGET_S seconds (default 280 s, for "under 5
minutes on 2 cores"). It measures, in order of importance, the timings
without XLA, the peak memory, then the timings with XLA. Before each
configuration its cost is predicted from the previous length (time x4 per
doubling of T for dense, x2 for local; dense memory from the size of its
(H, T, T) buffers) and it is reported as "skipped (out of budget)" when it
would not fit in the time left or in three quarters of the free memory;
every subprocess also runs under a timeout, so the script never hangs.

Run: `python benchmarks/local_block_attention_benchmark.py [--budget 280]
[--lengths 1024 2048 ...] [--repeats 5]`. Prints a markdown table and writes
`benchmarks/results/local_block_attention.json`. The inputs are random
activations: speed and memory do not depend on the values.
"""

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time

MODEL_DIM, NUM_HEADS, KEY_DIM, BATCH = 256, 8, 32, 1
BLOCK_SIZE, MEMORY_FLANGE = 256, 256
LENGTHS = (1024, 2048, 4096, 8192, 16384)
REPEATS = 5
BUDGET_S = 280
LAYERS = ("local", "dense")
MODES = ("graph", "xla")
# Time kept back for the memory subprocesses while the timing runs.
MEMORY_RESERVE_S = 80
RESULTS = os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "results", "local_block_attention.json"
)
GROWTH = {"local": 2.0, "dense": 4.0}  # cost factor per doubling of T


def _available_memory_bytes():
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _dense_bytes_estimate(length):
    # About four live (H, T, T) float32 buffers in dense forward + backward
    # (4 x 537 MB measured as 2.1 GiB at T = 4096).
    return 4 * BATCH * NUM_HEADS * length * length * 4


# ---------------------------------------------------------------- workers
def _setup_tensorflow():
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    import tensorflow as tf

    tf.config.optimizer.set_experimental_options({"constant_folding": False})
    return tf


def _make_step(tf, name, jit_compile):
    """Returns (step, layer): step(x) runs forward + backward and returns a
    scalar that depends on every gradient (so that all of them are made)."""
    import keras

    from keras_attn.layers import LocalBlockAttention

    if name == "local":
        layer = LocalBlockAttention(
            num_heads=NUM_HEADS, key_dim=KEY_DIM, block_size=BLOCK_SIZE,
            memory_flange=MEMORY_FLANGE, name="local",
        )
        call = lambda x: layer(x, use_causal_mask=True)  # noqa: E731
    else:
        layer = keras.layers.MultiHeadAttention(num_heads=NUM_HEADS, key_dim=KEY_DIM, name="dense")
        call = lambda x: layer(x, x, use_causal_mask=True)  # noqa: E731
    call(tf.zeros((BATCH, 8, MODEL_DIM)))  # build

    @tf.function(jit_compile=jit_compile)
    def step(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            loss = tf.reduce_sum(tf.square(call(x)))
        grads = tape.gradient(loss, [x] + layer.trainable_weights)
        return tf.add_n([tf.reduce_sum(g) for g in grads])

    return step


def _inputs(tf, length):
    return tf.random.stateless_normal((BATCH, length, MODEL_DIM), seed=(1, length))


def _timed(step, x):
    start = time.perf_counter()
    step(x).numpy()
    return time.perf_counter() - start


def worker_time(lengths, modes, repeats, deadline):
    """Timing of both layers, both modes; prints one JSON line per result."""
    tf = _setup_tensorflow()
    measured = {}  # (layer, mode) -> (length, first_s, median_s)
    free = _available_memory_bytes()

    def emit(record):
        print(json.dumps(record), flush=True)

    def predicted_cost(layer, mode, length):
        previous = measured.get((layer, mode))
        if previous is None:
            return 0.0
        _, first, median = previous
        factor = GROWTH[layer] ** max(0.0, _log2(length / previous[0]))
        # The first call is tracing/compilation (about constant) plus a run.
        return max(0.0, first - median) + (1 + repeats) * factor * median

    for mode in modes:
        for length in lengths:
            x = _inputs(tf, length)
            active = []
            for layer in LAYERS:
                record = {"kind": "time", "mode": mode, "length": length, "layer": layer}
                left = deadline - time.time()
                cost = predicted_cost(layer, mode, length)
                if layer == "dense":
                    # The local runs still due at this length are kept back.
                    reserve = repeats * (measured.get(("local", mode)) or (0, 0, 0))[2] * 2
                    if free is not None and _dense_bytes_estimate(length) > 0.75 * free:
                        record["skipped"] = (
                            f"skipped (out of budget: ~{_dense_bytes_estimate(length) / 2**30:.0f} GiB "
                            f"estimated, {free / 2**30:.0f} GiB free)"
                        )
                    elif cost > left - reserve:
                        record["skipped"] = (
                            f"skipped (out of budget: ~{cost:.0f} s predicted, "
                            f"{max(0.0, left - reserve):.0f} s left)"
                        )
                elif cost > left:
                    record["skipped"] = f"skipped (out of budget: ~{cost:.0f} s predicted, {left:.0f} s left)"
                if "skipped" in record:
                    emit(record)
                    continue
                step = _make_step(tf, layer, jit_compile=mode == "xla")
                record["first_s"] = _timed(step, x)  # tracing (+ XLA compile) and one run
                active.append((layer, step, record))
            runs = {layer: [] for layer, _, _ in active}
            for _ in range(repeats):
                for layer, step, _ in active:
                    runs[layer].append(_timed(step, x))
            for layer, _, record in active:
                record["runs_s"] = runs[layer]
                record["median_s"] = statistics.median(runs[layer])
                measured[(layer, mode)] = (length, record["first_s"], record["median_s"])
                emit(record)


def worker_memory(layer, length):
    """Peak memory of one forward + backward call, in a fresh process."""
    import gc
    import resource

    tf = _setup_tensorflow()
    step = _make_step(tf, layer, jit_compile=False)
    x = _inputs(tf, length)
    step.get_concrete_function(x)  # trace now: only execution is measured
    gc.collect()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    seconds = _timed(step, x)
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"peak_mib": (after - before) / 1024.0, "seconds": seconds}), flush=True)


def _log2(value):
    import math

    return math.log2(value)


# ----------------------------------------------------------------- parent
def _run_worker(arguments, timeout):
    """Runs this script as a worker; returns (JSON records, note)."""
    command = [sys.executable, os.path.abspath(__file__)] + arguments
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        stdout, stderr = process.communicate(timeout=max(1.0, timeout))
        note = None if process.returncode == 0 else f"exit {process.returncode}: {stderr.strip()[-300:]}"
    except subprocess.TimeoutExpired:
        process.kill()
        stdout, _ = process.communicate()
        note = "skipped (out of budget: timed out)"
    records = []
    for line in stdout.splitlines():
        if line.startswith("{"):
            records.append(json.loads(line))
    return records, note


def _fmt_time(record):
    if record is None:
        return "skipped (out of budget)"
    if "skipped" in record:
        return record["skipped"]
    return f"{record['median_s']:.3f}"


def _ratio(a, b):
    if a is None or b is None or "median_s" not in a or "median_s" not in b:
        return "-"
    return f"{b['median_s'] / a['median_s']:.1f}x"


def _measure_memory(lengths, timing, deadline):
    """Peak memory per (layer, length), each in a fresh process; two
    processes at a time (each reads only its own high-water mark), the
    most telling configurations first, skipping what would not fit."""
    free = _available_memory_bytes()
    middle = [t for t in lengths if t <= 8192][-1:] or lengths[:1]
    order = [(layer, t) for t in middle for layer in LAYERS]
    order += [(layer, t) for t in lengths for layer in LAYERS if t not in middle]
    memory, running, overhead = {}, [], [15.0]

    def expected_seconds(layer, length):
        graph = timing.get((layer, "graph", length)) or {}
        return overhead[0] + graph.get("first_s", 10.0)

    def collect(job):
        (layer, length), process, began = job
        stdout, stderr = process.communicate()
        records = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
        if records:
            memory[(layer, length)] = records[0]
            overhead[0] = max(5.0, time.time() - began - records[0]["seconds"])
        else:
            memory[(layer, length)] = {"skipped": f"failed: {stderr.strip()[-200:]}"}

    while order or running:
        for job in list(running):
            if job[1].poll() is not None:
                running.remove(job)
                collect(job)
            elif time.time() > deadline:
                job[1].kill()
                job[1].communicate()
                running.remove(job)
                memory[job[0]] = {"skipped": "skipped (out of budget: timed out)"}
        if order and len(running) < 2:
            layer, length = order.pop(0)
            estimate = _dense_bytes_estimate(length) if layer == "dense" else 0
            left = deadline - time.time()
            if free is not None and estimate > 0.75 * free:
                memory[(layer, length)] = {
                    "skipped": f"skipped (out of budget: ~{estimate / 2**30:.0f} GiB estimated, "
                               f"{free / 2**30:.0f} GiB free)"
                }
            elif expected_seconds(layer, length) > left:
                memory[(layer, length)] = {
                    "skipped": f"skipped (out of budget: ~{expected_seconds(layer, length):.0f} s "
                               f"predicted, {max(0.0, left):.0f} s left)"
                }
            else:
                command = [sys.executable, os.path.abspath(__file__), "--worker", "memory",
                           "--layer", layer, "--lengths", str(length)]
                process = subprocess.Popen(
                    command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
                )
                running.append(((layer, length), process, time.time()))
            continue
        time.sleep(0.2)
    return memory


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=list(LENGTHS))
    parser.add_argument("--repeats", type=int, default=REPEATS)
    parser.add_argument("--budget", type=float, default=BUDGET_S, help="seconds for the whole run")
    parser.add_argument("--output", default=RESULTS)
    parser.add_argument("--worker", choices=("time", "memory"), help=argparse.SUPPRESS)
    parser.add_argument("--modes", nargs="+", default=list(MODES), help=argparse.SUPPRESS)
    parser.add_argument("--layer", help=argparse.SUPPRESS)
    parser.add_argument("--deadline", type=float, help=argparse.SUPPRESS)
    args = parser.parse_args()
    lengths = sorted(args.lengths)
    if args.worker == "time":
        return worker_time(lengths, args.modes, args.repeats, args.deadline)
    if args.worker == "memory":
        return worker_memory(args.layer, lengths[0])

    start = time.time()
    deadline = start + args.budget
    load_before = os.getloadavg()

    def run_timing(mode, until):
        records, note = _run_worker(
            ["--worker", "time", "--modes", mode, "--deadline", str(until),
             "--repeats", str(args.repeats), "--lengths"] + [str(t) for t in lengths],
            timeout=until - time.time() + 20,
        )
        if note:
            print(f"timing worker ({mode}): {note}", file=sys.stderr)
        return {(r["layer"], r["mode"], r["length"]): r for r in records}

    # In order of importance, as the budget may not cover everything:
    # 1. timing without XLA, 2. peak memory, 3. timing with XLA.
    timing = run_timing("graph", deadline - MEMORY_RESERVE_S)
    memory = _measure_memory(lengths, timing, deadline)
    if deadline - time.time() > 20:  # else not even the process start fits
        timing.update(run_timing("xla", deadline))

    # 3. Report.
    lines = [
        f"LocalBlockAttention (block_size={BLOCK_SIZE}, memory_flange={MEMORY_FLANGE}, causal) vs "
        f"keras.layers.MultiHeadAttention (causal), d_model={MODEL_DIM}, heads={NUM_HEADS}, "
        f"key_dim={KEY_DIM}, batch={BATCH}; forward+backward, median of {args.repeats} "
        "(seconds); peak = ru_maxrss rise over one call, no XLA (MiB).",
        "",
        "| T | local (s) | dense (s) | speed-up | local XLA (s) | dense XLA (s) | speed-up XLA "
        "| local peak (MiB) | dense peak (MiB) | memory ratio |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    rows = []
    for length in lengths:
        local_g, dense_g = timing.get(("local", "graph", length)), timing.get(("dense", "graph", length))
        local_x, dense_x = timing.get(("local", "xla", length)), timing.get(("dense", "xla", length))
        local_m, dense_m = memory.get(("local", length), {}), memory.get(("dense", length), {})

        def mem(record):
            return f"{record['peak_mib']:.0f}" if "peak_mib" in record else record.get("skipped", "skipped (out of budget)")

        memory_ratio = (
            f"{dense_m['peak_mib'] / local_m['peak_mib']:.1f}x"
            if "peak_mib" in local_m and "peak_mib" in dense_m and local_m["peak_mib"] > 0 else "-"
        )
        lines.append(
            f"| {length} | {_fmt_time(local_g)} | {_fmt_time(dense_g)} | {_ratio(local_g, dense_g)} "
            f"| {_fmt_time(local_x)} | {_fmt_time(dense_x)} | {_ratio(local_x, dense_x)} "
            f"| {mem(local_m)} | {mem(dense_m)} | {memory_ratio} |"
        )
        rows.append({
            "length": length,
            "time": {f"{layer}_{mode}": timing.get((layer, mode, length))
                     for layer in LAYERS for mode in MODES},
            "memory": {"local": local_m, "dense": dense_m},
        })
    elapsed = time.time() - start
    load_after = os.getloadavg()
    lines += [
        "",
        f"Total {elapsed:.0f} s; load average {load_before[0]:.1f} before, {load_after[0]:.1f} after "
        f"on {os.cpu_count()} CPUs (a shared machine: timings are noisy; compare within a row).",
    ]
    print("\n".join(lines))

    from importlib.metadata import version

    os.makedirs(os.path.dirname(args.output), exist_ok=True)
    with open(args.output, "w") as f:
        json.dump(
            {
                "config": {
                    "model_dim": MODEL_DIM, "num_heads": NUM_HEADS, "key_dim": KEY_DIM,
                    "batch_size": BATCH, "block_size": BLOCK_SIZE, "memory_flange": MEMORY_FLANGE,
                    "causal": True, "repeats": args.repeats, "budget_s": args.budget,
                    "grappler_constant_folding": False,
                },
                "environment": {
                    "platform": platform.platform(), "python": platform.python_version(),
                    "tensorflow": version("tensorflow"), "keras": version("keras"),
                    "cpus": os.cpu_count(), "load_average_before": load_before,
                    "load_average_after": load_after, "elapsed_s": elapsed,
                },
                "results": rows,
                "table": "\n".join(lines),
            },
            f,
            indent=1,
        )
    print(f"\nwrote {os.path.relpath(args.output)}")


if __name__ == "__main__":
    main()
