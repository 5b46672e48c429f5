"""Served super resolution vs the same sampling in Python, side by side in one run.

The super-resolution Image Transformer of the example (8x8 -> 32x32 RGB,
2 encoder + 3 decoder blocks, width 64, 4 heads, d_ff 256, local blocks of
96 with a memory flange of 96; weights from seed 0: the decoding work does
not depend on them) samples every one of the 3,072 intensities of an image
with the cached decoder:

* **in Python**: `keras_attn.export.super_resolver.super_resolve` under
  `tf.function(jit_compile=True)`, as the example's training script samples;
* **served**: the SavedModel of `export_super_resolver` loaded in a fresh
  process that imports only tensorflow, `serving_default` called as a
  client would; twice: the default export (no XLA, which any TF Serving
  build runs) and `jit_compile=True` (the sampling loop XLA-compiled inside
  the SavedModel, which TF Serving runs on CPU with
  `--xla_cpu_compilation_enabled=true`, and on GPU).

For each batch size (--batch-sizes, default 1 and 8) both are warmed up
once, then timed alternately (Python, served, Python, ...; the served worker
waits on its stdin between calls); the median wall time per image is
reported, with the ratio served / Python. Goal (issue "Attention that never
materialises..."): served within 2x of Python at batch 1 and 8.

Run: `python benchmarks/served_generation_benchmark.py [--quick]
[--batch-sizes 1 8] [--repeats 3] [--budget 280]`. Prints a markdown table
and writes benchmarks/results/served_generation.json.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

_REPLY = "@@reply "  # prefix of protocol lines on the worker's stdout

# The worker: tensorflow only. It loads the SavedModel, answers "warm B" and
# "time B" lines with the seconds one `serving_default` call took.
_WORKER = r"""
import json, os, sys, time
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import tensorflow as tf
serve = tf.saved_model.load(sys.argv[1]).signatures["serving_default"]
assert "keras_attn" not in sys.modules
print("@@reply ready", flush=True)
for line in sys.stdin:
    _, batch = line.split()
    image = tf.zeros((int(batch), 8, 8, 3), tf.uint8)
    start = time.perf_counter()
    serve(image=image)["image"].numpy()
    print("@@reply " + json.dumps(time.perf_counter() - start), flush=True)
"""


def build_model():
    import keras

    from keras_attn.models import super_resolution_transformer

    keras.utils.set_random_seed(0)
    return super_resolution_transformer(
        low_resolution_size=8, image_size=32, num_encoder_layers=2, num_layers=3,
        hidden_dim=64, num_heads=4, intermediate_dim=256, block_size=96, memory_flange=96,
    )


# The served variants: name -> `export_super_resolver(jit_compile=...)`.
SERVED = {"served": False, "served_xla": True}


def _time_batch(tf, sampler, workers, batch, repeats, budget):
    """Median seconds per image of each way to sample, calls interleaved."""
    image = tf.zeros((batch, 8, 8, 3), tf.uint8)

    def python_call():
        start = time.perf_counter()
        sampler(image).numpy()
        return time.perf_counter() - start

    def served_call(worker, kind="time"):
        worker.stdin.write(f"{kind} {batch}\n")
        worker.stdin.flush()
        return json.loads(_reply(worker))

    # Warm-up: traces and compiles.
    first = python_call() + sum(served_call(w, "warm") for w in workers.values())
    if not budget.fits(first * repeats):
        return {"skipped": "out of budget"}
    times = {"python_xla": [], **{name: [] for name in workers}}
    for _ in range(repeats):
        times["python_xla"].append(python_call())
        for name, worker in workers.items():
            times[name].append(served_call(worker))
    record = {
        name: {"samples_s": values, "median_s_per_image": statistics.median(values) / batch}
        for name, values in times.items()
    }
    print(f"batch {batch}: " + ", ".join(
        f"{name} {r['median_s_per_image']:.2f} s/image" for name, r in record.items()
    ), file=sys.stderr, flush=True)
    return record


def _reply(worker):
    for line in worker.stdout:
        if line.startswith(_REPLY):
            return line[len(_REPLY):].strip()
    raise RuntimeError("the served worker stopped: " + worker.stderr.read()[-2000:])


def main():
    parser = harness.add_common_arguments(argparse.ArgumentParser(description=__doc__), repeats=3)
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 8])
    args = parser.parse_args()
    if args.quick:
        args.batch_sizes, args.repeats = [1], 1
    tf = harness.setup_tensorflow(constant_folding=True)
    from keras_attn.export import export_super_resolver
    from keras_attn.export.super_resolver import super_resolve

    budget = harness.Budget(args.budget)
    env_start = harness.environment()
    model = build_model()
    sampler = tf.function(lambda image: super_resolve(model, image), jit_compile=True)
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        workers = {}
        for name, jit_compile in SERVED.items():
            path = export_super_resolver(
                model, os.path.join(tmp, name), version=1, jit_compile=jit_compile
            )
            workers[name] = subprocess.Popen(
                [sys.executable, "-c", _WORKER, path], stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            )
        try:
            for worker in workers.values():
                _reply(worker)
            for batch in args.batch_sizes:
                results[batch] = _time_batch(tf, sampler, workers, batch, args.repeats, budget)
        finally:
            for worker in workers.values():
                worker.stdin.close()
                worker.wait(timeout=60)
    env_end = harness.environment()

    rows = []
    for batch, record in results.items():
        if "skipped" in record:
            rows.append([batch, record["skipped"]] + ["-"] * 4)
            continue
        python_s = record["python_xla"]["median_s_per_image"]
        row = [batch, f"{python_s:.2f}"]
        for name in SERVED:
            served_s = record[name]["median_s_per_image"]
            row += [f"{served_s:.2f}", f"{served_s / python_s:.1f}x"]
        rows.append(row)
    print(
        "Super resolution 8x8 -> 32x32 (3,072 cached decoding steps per image): in-Python "
        "sampling compiled with XLA vs the exported SavedModel, without and with XLA inside "
        f"(`jit_compile`), in a fresh tensorflow-only process; median of {args.repeats} "
        "interleaved calls after a warm-up, seconds per image. Goal: served <= 2x Python.\n"
    )
    print(harness.markdown_table(
        ["batch", "Python + XLA s/image", "served s/image", "served / Python",
         "served + XLA s/image", "served + XLA / Python"], rows))
    print(f"\nTotal {budget.elapsed():.0f} s; {harness.load_note(env_start, env_end)}.")
    harness.write_results(
        harness.output_path(args, "served_generation"),
        {"results": {str(k): v for k, v in results.items()}, "environment": env_start,
         "environment_end": env_end, "repeats": args.repeats},
    )


if __name__ == "__main__":
    main()
