"""Shared machinery of the benchmark scripts in this folder.

Every figure of `benchmarks/` is a ratio against an anchor timed in the same
process, so this module (with `peak_memory.py` for memory) holds the one way
of timing, measuring and reporting that all scripts use:

* `time_interleaved`: one warm-up call per candidate (tracing, XLA
  compilation), then `repeats` rounds A B A B ... so that the noise of a
  shared machine falls on every candidate alike; the median of the wall
  times and of the process CPU times (all threads, user + system) is kept.
* `compile_function`: `tf.function` with or without `jit_compile=True`.
* `forward_backward_step`: a compiled step computing the gradients of the
  inputs and of every trainable weight (what a training step pays).
* peak memory of one call, each configuration in a fresh process, is
  `peak_memory.py`'s (`measure_memory`, `memory_worker`, `memory_table`).
* `matmul_roofline`: the GFLOP/s of a large float32 matmul timed in the same
  run, the ceiling next to which every achieved GFLOP/s is printed.
* `environment`: machine, versions and load average (`os.getloadavg`), to
  store with every result; `markdown_table` and `write_results` for the
  output (`benchmarks/results/<name>.json`).
* `Budget`: each script runs in under 5 minutes on 2 cores; a configuration
  whose predicted cost does not fit is reported as skipped, never run.

Scripts import it as `harness` (they put this folder on `sys.path`), so each
runs as `python benchmarks/<script>.py` from the project root.
"""

import argparse
import json
import os
import platform
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

RESULTS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
PROJECT_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# ------------------------------------------------------------------ setup
VERBOSE = "--verbose" in sys.argv[1:]


def setup_tensorflow(constant_folding=False):
    """Imports TensorFlow quietly and returns it.

    Unless the command line has `--verbose`, TensorFlow is imported the way
    the examples import it (`examples/quiet.py`), with its C++ start-up
    lines (oneDNN, CUDA-driver and absl notes, which no log level hides)
    kept off the terminal, so a run prints its tables and little else.

    Grappler's constant folding is off by default: keras' MultiHeadAttention
    builds causal masks from static shapes, and folding a (T, T) constant
    took 13-26 s at T = 4096 here, time that says nothing about steady-state
    speed and eats the 5-minute budget.
    """
    if not VERBOSE and "tensorflow" not in sys.modules:
        sys.path.insert(0, os.path.join(PROJECT_ROOT, "examples"))
        from quiet import import_tensorflow_silently

        import_tensorflow_silently()
    import tensorflow as tf

    tf.get_logger().setLevel("ERROR")
    if not constant_folding:
        tf.config.optimizer.set_experimental_options({"constant_folding": False})
    return tf


def add_common_arguments(parser, repeats=5, budget=280.0):
    """The flags every script has: --quick, --repeats, --budget, --output,
    --verbose, and the hidden --memory-worker used by
    `peak_memory.measure_memory`."""
    parser.add_argument(
        "--quick",
        action="store_true",
        help="smoke run: smallest configurations, 2 repeats, nothing written "
        "unless --output is given",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=repeats,
        help="timed calls per candidate after the warm-up (median reported)",
    )
    parser.add_argument(
        "--budget",
        type=float,
        default=budget,
        help="seconds for the whole run; configurations that would not fit are skipped",
    )
    parser.add_argument(
        "--output", default=None, help="JSON file to write (default benchmarks/results/<name>.json)"
    )
    parser.add_argument(
        "--verbose",
        action="store_true",
        help="keep TensorFlow's start-up log lines (read by `setup_tensorflow`)",
    )
    parser.add_argument("--memory-worker", default=None, help=argparse.SUPPRESS)
    return parser


def add_language_model_arguments(parser):
    """The decoder-only LM the generation benchmarks decode (default: 6
    layers, d 512, 8 heads, d_ff 2048, 512 ids), the batch size and the
    numbers of generated tokens (--lengths, default `lengths`)."""
    parser.add_argument("--num-layers", type=int, default=6)
    parser.add_argument("--hidden-dim", type=int, default=512)
    parser.add_argument("--num-heads", type=int, default=8)
    parser.add_argument("--intermediate-dim", type=int, default=2048)
    parser.add_argument("--vocabulary-size", type=int, default=512)
    parser.add_argument("--batch-size", type=int, default=1)
    return parser


def output_path(args, name):
    """Where the results go: --output, else results/<name>.json, or None
    for a --quick run without --output (smoke runs overwrite nothing)."""
    if args.output:
        return args.output
    if args.quick:
        return None
    return os.path.join(RESULTS_DIR, f"{name}.json")


class Budget:
    """Wall-clock budget of a script run."""

    def __init__(self, seconds):
        self.seconds = seconds
        self.start = time.perf_counter()

    def elapsed(self):
        return time.perf_counter() - self.start

    def left(self):
        return self.seconds - self.elapsed()

    def fits(self, predicted_s):
        return predicted_s <= self.left()


# ----------------------------------------------------------------- timing
def block(value):
    """Waits until every tensor in `value` is computed (copies to host)."""
    import keras
    import numpy as np

    keras.tree.map_structure(lambda x: np.asarray(x) if hasattr(x, "shape") else x, value)
    return value


def compile_function(fn, jit_compile, **kwargs):
    """`tf.function(fn, jit_compile=jit_compile)` (autograph off: the
    benchmarked code is written with keras.ops and Python control flow)."""
    import tensorflow as tf

    return tf.function(fn, jit_compile=jit_compile, autograph=False, **kwargs)


def forward_backward_step(forward, variables, jit_compile):
    """Compiled training-like step: loss = mean(square(forward(x))) and its
    gradients with respect to `x` and every variable in `variables`.

    Returns a function of `x` returning one scalar that depends on every
    gradient, so that none is pruned and only a scalar crosses to the host.
    """
    import tensorflow as tf

    def step(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            loss = tf.reduce_mean(tf.square(tf.cast(forward(x), "float32")))
        grads = tape.gradient(loss, [x] + list(variables))
        return tf.add_n([tf.reduce_sum(tf.cast(g, "float32")) for g in grads])

    return compile_function(step, jit_compile)


def forward_step(forward, jit_compile):
    """Compiled forward pass returning the sum of the outputs (a scalar, so
    the host copy costs nothing)."""
    import tensorflow as tf

    def step(x):
        return tf.reduce_sum(tf.cast(forward(x), "float32"))

    return compile_function(step, jit_compile)


def _timed_call(fn):
    wall, cpu = time.perf_counter(), time.process_time()
    block(fn())
    return time.perf_counter() - wall, time.process_time() - cpu


def time_interleaved(candidates, repeats=5, warmup=1, budget=None):
    """Times zero-argument callables interleaved: A B A B ...

    Args:
        candidates: dict name -> callable taking no argument (e.g.
            `lambda: step(x)`); its result is copied to the host before the
            clock stops.
        repeats: timed rounds after the warm-up (the median is reported).
        warmup: untimed calls per candidate before the rounds (the first one,
            with tracing and XLA compilation, is recorded as `first_s`).
        budget: optional `Budget`; rounds stop early (never below 3) when
            the next round would not fit, and `repeats_done` says so.

    Returns:
        dict name -> {"first_s", "runs_s", "cpu_runs_s", "median_s",
        "cpu_median_s", "repeats_done"}.
    """
    records = {name: {"runs_s": [], "cpu_runs_s": []} for name in candidates}
    for name, fn in candidates.items():
        for i in range(warmup):
            wall, _ = _timed_call(fn)
            if i == 0:
                records[name]["first_s"] = wall
    for round_index in range(repeats):
        if budget is not None and round_index >= 3:
            last_round = sum(r["runs_s"][-1] for r in records.values())
            if not budget.fits(last_round):
                break
        for name, fn in candidates.items():
            wall, cpu = _timed_call(fn)
            records[name]["runs_s"].append(wall)
            records[name]["cpu_runs_s"].append(cpu)
    for record in records.values():
        record["median_s"] = statistics.median(record["runs_s"])
        record["cpu_median_s"] = statistics.median(record["cpu_runs_s"])
        record["repeats_done"] = len(record["runs_s"])
    return records


def compare(
    configs, make_candidates, repeats, budget, group=None, growth=3.0, log=None, on_result=None
):
    """Times candidates side by side over a list of configurations.

    Args:
        configs: list of configurations (hashable, e.g. tuples), cheapest
            first within each group.
        make_candidates: config -> dict name -> zero-argument callable.
        repeats: timed rounds per configuration (see `time_interleaved`).
        budget: `Budget`; a configuration is skipped when `growth` times the
            time its group's previous configuration took does not fit.
        group: config -> key of the configurations whose cost predicts each
            other (e.g. same pass and mode, growing T); default: one group.
        growth: predicted cost ratio between consecutive configurations of a
            group (3 sits between linear and quadratic growth per doubling);
            None = no prediction here (the script's `make_candidates` leaves
            out what does not fit).
        log: optional config -> str, printed to stderr with the times.
        on_result: optional callback(config, records) after each timed
            configuration (e.g. to feed a script's own cost predictions).

    Returns:
        dict config -> dict name -> record (or {"skipped": reason}).
    """
    group = group or (lambda config: None)
    results, spent = {}, {}
    for config in configs:
        previous = spent.get(group(config))
        if growth is not None and previous is not None and not budget.fits(growth * previous):
            reason = (
                f"skipped (out of budget: ~{growth * previous:.0f} s predicted, "
                f"{max(0.0, budget.left()):.0f} s left)"
            )
            results[config] = {"_skipped": reason}
            print(f"{log(config) if log else config}: {reason}", file=sys.stderr, flush=True)
            continue
        started = budget.elapsed()
        records = time_interleaved(make_candidates(config), repeats=repeats, budget=budget)
        spent[group(config)] = budget.elapsed() - started
        results[config] = records
        if on_result is not None:
            on_result(config, records)
        names = list(records)
        text = ", ".join(f"{n} {1000 * records[n]['median_s']:.1f} ms" for n in names)
        print(
            f"{log(config) if log else config}: {text} ({budget.elapsed():.0f} s)",
            file=sys.stderr,
            flush=True,
        )
    return {
        config: (
            {name: {"skipped": r["_skipped"]} for name in _names_of(results)}
            if "_skipped" in r
            else r
        )
        for config, r in results.items()
    }


def _names_of(results):
    for records in results.values():
        if "_skipped" not in records:
            return list(records)
    return []


def matmul_roofline(size=2048, repeats=5, jit_compile=False):
    """GFLOP/s of a (size, size) x (size, size) float32 matmul.

    The ceiling the achieved GFLOP/s of the attention calls is compared
    with; measured in the same process as they are (same threads, same
    load). The best of `repeats` calls is the roofline (matmul time is
    what the machine can do when nothing interferes).

    Returns:
        {"size", "gflops" (best), "median_gflops", "jit_compile"}.
    """
    import tensorflow as tf

    a = tf.random.stateless_normal((size, size), seed=(0, 1))
    b = tf.random.stateless_normal((size, size), seed=(0, 2))
    matmul = compile_function(lambda x, y: tf.reduce_sum(tf.matmul(x, y)), jit_compile)
    block(matmul(a, b))
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        block(matmul(a, b))
        times.append(time.perf_counter() - start)
    flops = 2.0 * size**3
    return {
        "size": size,
        "jit_compile": jit_compile,
        "gflops": flops / min(times) / 1e9,
        "median_gflops": flops / statistics.median(times) / 1e9,
    }


def read_bandwidth(mebibytes=256, repeats=5):
    """GB/s at which an XLA program reads a large float32 array, two ways.

    The memory-bound floor of a decoding step (every weight and the cache
    read once) is bytes / this rate. Both programs read `mebibytes` of
    float32 that no cache holds: `sum`, the sum of a flat array (one
    streaming reduction), and `matvec`, a (1, 4096) x (4096, n) product
    (the shape of a decoding step's projections). Compiled with
    `jit_compile=True`, as the decoding programs; best of `repeats` calls.

    Returns:
        {"mebibytes", "sum_gbps", "matvec_gbps", "gbps" (the larger)}.
    """
    import tensorflow as tf

    count = mebibytes * 2**20 // 4
    flat = tf.random.stateless_uniform((count,), seed=(0, 3))
    matrix = tf.reshape(flat, (4096, count // 4096))
    vector = tf.ones((1, 4096))
    programs = {
        "sum": (compile_function(tf.reduce_sum, True), (flat,)),
        "matvec": (
            compile_function(lambda v, m: tf.reduce_sum(tf.matmul(v, m)), True),
            (vector, matrix),
        ),
    }
    result = {"mebibytes": mebibytes}
    for name, (fn, args) in programs.items():
        block(fn(*args))
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            block(fn(*args))
            times.append(time.perf_counter() - start)
        result[f"{name}_gbps"] = 4.0 * count / min(times) / 1e9
    result["gbps"] = max(result["sum_gbps"], result["matvec_gbps"])
    return result


def attention_flops(
    batch, length, model_dim, num_heads, key_dim, key_length=None, backward=False, projections=True
):
    """Multiply-adds x 2 of one multi-head attention call.

    Projections Q, K, V (D -> H*K each) and output (H*K -> D), plus Q·Kᵀ and
    P·V (H*T*S*K each). Softmax and masking are not counted (they are
    memory-bound, not FLOPs). A backward pass costs twice the forward
    matmuls, so forward + backward = 3x forward.
    """
    key_length = key_length or length
    flops = 2.0 * batch * num_heads * length * key_length * key_dim * 2
    if projections:
        flops += 2.0 * batch * length * model_dim * num_heads * key_dim * 3
        flops += 2.0 * batch * length * num_heads * key_dim * model_dim
    return flops * (3.0 if backward else 1.0)


# ---------------------------------------------------------------- reports
def environment():
    """Machine, library versions, allocator settings and load average."""
    info = {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "load_average": list(os.getloadavg()),
        # Allocator and TensorFlow runtime settings that change timings; named
        # one by one (a bare "TF_" prefix also catches other tools' settings).
        "malloc_env": {
            k: v
            for k, v in os.environ.items()
            if k.startswith(("MALLOC", "GLIBC", "TF_ENABLE_", "TF_NUM_", "TF_XLA_"))
        },
    }
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    info["cpu_model"] = line.split(":", 1)[1].strip()
                    break
        with open("/proc/meminfo") as f:
            info["memory_gib"] = round(int(f.readline().split()[1]) / 2**20, 1)
    except OSError:
        pass
    from importlib.metadata import PackageNotFoundError, version

    for package in ("tensorflow", "keras", "keras-hub", "numpy"):
        try:
            info[package] = version(package)
        except PackageNotFoundError:
            info[package] = None
    return info


def load_note(env_start, env_end=None):
    """One line for the table footers: load average before and after."""
    text = f"load average {env_start['load_average'][0]:.1f}"
    if env_end is not None:
        text += f" at start, {env_end['load_average'][0]:.1f} at end"
    return text + f" on {env_start['cpus']} CPUs ({env_start.get('cpu_model', 'unknown CPU')})"


def markdown_table(headers, rows):
    """Markdown table from a header list and a list of row lists."""
    lines = ["| " + " | ".join(str(h) for h in headers) + " |", "|" + "---|" * len(headers)]
    for row in rows:
        lines.append("| " + " | ".join(str(c) for c in row) + " |")
    return "\n".join(lines)


def fmt_gflops(record, peak):
    """GFLOP/s and its share of `peak` (the matmul roofline), or "-"."""
    if not record or "gflops" not in record:
        return "-"
    return f"{record['gflops']:.0f} ({100 * record['gflops'] / peak:.0f}%)"


def fmt_ms(record, key="median_s"):
    if record is None:
        return "skipped (out of budget)"
    if "skipped" in record:
        return record["skipped"]
    return f"{1000 * record[key]:.1f}"


def fmt_ratio(numerator, denominator, key="median_s"):
    """`numerator / denominator` as '0.93x', or '-' if either is missing."""
    if not numerator or not denominator or key not in numerator or key not in denominator:
        return "-"
    return f"{numerator[key] / denominator[key]:.2f}x"


def write_results(path, payload):
    """Writes `payload` as JSON to `path` (creating the folder); returns it."""
    if path is None:
        return None
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(payload, f, indent=1, default=str)
    print(f"\nwrote {os.path.relpath(path)}", file=sys.stderr)
    return path
