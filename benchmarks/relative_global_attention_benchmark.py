"""Speed and memory of RelativeGlobalAttention (skewing) against its anchors.

Compares, for causal self-attention with 8 heads, key_dim 64 (d_model 512)
and batch size 1:

- `skew`: keras_attn's RelativeGlobalAttention (Huang et al. 2018, the
  memory-efficient skewing; relative table of O(T·K)),
- `gather`: the naive relative attention of Shaw et al. 2018, which gathers
  the (T, T, K) tensor of relative embeddings and contracts it with the
  queries (written below with keras.ops, sharing the projections, masking and
  softmax of the library so that only the relative term differs),
- `keras_mha`: keras.layers.MultiHeadAttention with `use_causal_mask=True`
  (no relative term: the cost floor of dense attention),
- `mhsa` (timing only): keras_attn's MultiHeadSelfAttention, the base class
  of the skew layer without the relative term, which separates the cost of
  the relative term from that of the shared attention core.

Both relative versions use one table for all heads (as Shaw et al.; the
per-head gather would be 8x larger still) and max_relative_position = T.

Measured:
1. Peak memory: in a fresh subprocess per configuration (implementation,
   T, no-XLA tf.function), the rise of the resident-set high-water mark
   (`resource.getrusage(...).ru_maxrss`) over one forward + backward call,
   the function being traced beforehand. Run first, while this process is
   small: Linux hands a child the parent's ru_maxrss at fork, which would
   hide the child's own peak.
2. Forward + backward (gradients of all weights) time, tf.function with and
   without jit_compile, median of REPEATS calls after one warm-up call;
   implementations and modes interleaved in one process, so that the noise
   of the machine falls on all of them alike. Wall time and the process's
   CPU time (all threads, user + system) are both recorded: on a shared
   machine the CPU time is the steadier comparison.
3. Cached sampling: time per token of a jit-compiled one-token decoding step
   at positions ~128, 512 and 2047 of a 2048-slot cache, for the skew layer
   and for MultiHeadSelfAttention (the same cache, no relative term).

Run: `python benchmarks/relative_global_attention_benchmark.py` (about 190 s
of CPU time: 3-4 minutes on 2 idle cores, more on a loaded machine). Prints
markdown tables and writes `benchmarks/results/relative_global_attention.json`.
The inputs are random activations: speed and memory do not depend on values.
"""

import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from keras import ops  # noqa: E402

from keras_attn.layers import MultiHeadSelfAttention, RelativeGlobalAttention  # noqa: E402
from keras_attn.layers import attention_ops  # noqa: E402

NUM_HEADS, KEY_DIM, MODEL_DIM, BATCH = 8, 64, 512, 1
LENGTHS = (256, 512, 1024, 2048)
IMPLEMENTATIONS = ("skew", "gather", "keras_mha")  # timed and measured
TIMED = IMPLEMENTATIONS + ("mhsa",)
REPEATS = 5
DECODE_POSITIONS = (128, 512, 2040)
DECODE_CACHE_LENGTH = 2048
DECODE_STEPS = 8
RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "relative_global_attention.json")


class ShawGatherAttention(MultiHeadSelfAttention):
    """Relative attention the naive way (Shaw et al. 2018): gathers the
    (T, S, K) tensor of clipped relative embeddings. Benchmark anchor only."""

    def __init__(self, num_heads, key_dim, max_relative_position, **kwargs):
        super().__init__(num_heads=num_heads, key_dim=key_dim, **kwargs)
        self.max_relative_position = max_relative_position

    def _build_attention_core(self, inputs_shape):
        self.relative_embeddings = self.add_weight(
            name="relative_embeddings",
            shape=(2 * self.max_relative_position - 1, self.key_dim),
            initializer=keras.initializers.RandomNormal(stddev=self.key_dim ** -0.5),
        )

    def _attend(self, query, key, value, padding_mask, attention_mask, use_causal_mask,
                query_offset, valid_key_length, cached, spatial_shape,
                return_attention_scores, training):
        query_length, key_length = ops.shape(query)[1], ops.shape(key)[1]
        limit = self.max_relative_position - 1
        distances = ops.arange(key_length)[None, :] - (
            ops.arange(query_length)[:, None] + ops.cast(query_offset, "int32")
        )
        rows = ops.clip(distances, -limit, limit) + limit
        relative = ops.take(self.relative_embeddings, rows, axis=0)  # (T, S, K)
        extra = ops.einsum("bthk,tsk->bhts", query, relative)
        mask = attention_ops.merge_masks(
            ops.shape(query)[0], query_length, key_length,
            key_padding_mask=padding_mask, attention_mask=attention_mask,
            use_causal_mask=use_causal_mask, query_offset=query_offset,
            valid_key_length=valid_key_length,
        )
        return attention_ops.scaled_dot_product_attention(
            query, key, value, mask, may_have_empty_rows=False, extra_logits=extra,
        )


def make_layer(name, length):
    if name == "skew":
        return RelativeGlobalAttention(
            NUM_HEADS, KEY_DIM, max_relative_position=length,
            heads_share_relative_embedding=True,
        )
    if name == "gather":
        return ShawGatherAttention(NUM_HEADS, KEY_DIM, max_relative_position=length)
    if name == "keras_mha":
        return keras.layers.MultiHeadAttention(NUM_HEADS, KEY_DIM)
    if name == "mhsa":
        return MultiHeadSelfAttention(NUM_HEADS, KEY_DIM)
    raise ValueError(f"Unknown implementation {name!r}; expected one of {TIMED}.")


def make_train_step(name, length, jit_compile):
    """Builds the layer and a tf.function computing loss and all gradients."""
    layer = make_layer(name, length)
    shape = (BATCH, length, MODEL_DIM)
    if name == "keras_mha":
        layer.build(shape, shape)

        def forward(x):
            return layer(x, x, use_causal_mask=True)
    else:
        layer.build(shape)

        def forward(x):
            return layer(x, use_causal_mask=True)

    @tf.function(jit_compile=jit_compile)
    def step(x):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(forward(x)))
        return loss, tape.gradient(loss, layer.trainable_weights)

    activations = tf.constant(
        np.random.default_rng(0).standard_normal(shape).astype("float32")
    )
    return step, activations


def run_step(step, activations):
    loss, grads = step(activations)
    # Pull one scalar to the host: the call has finished when it arrives.
    float(loss) + float(tf.reduce_sum(grads[0]))


def time_forward_backward():
    timings = {}
    for length in LENGTHS:
        steps = {}
        for name in TIMED:
            for jit in (False, True):
                step, activations = make_train_step(name, length, jit)
                start = time.perf_counter()
                run_step(step, activations)  # warm-up: trace, compile, fold constants
                first = time.perf_counter() - start
                steps[(name, jit)] = (step, activations)
                timings[(name, jit, length)] = {
                    "first_call_s": first, "samples_s": [], "cpu_samples_s": []
                }
        for _ in range(REPEATS):
            for key, (step, activations) in steps.items():
                start, cpu_start = time.perf_counter(), time.process_time()
                run_step(step, activations)
                record = timings[key + (length,)]
                record["samples_s"].append(time.perf_counter() - start)
                record["cpu_samples_s"].append(time.process_time() - cpu_start)
        print(f"  timed T={length}", file=sys.stderr, flush=True)
    for record in timings.values():
        record["median_s"] = statistics.median(record["samples_s"])
        record["cpu_median_s"] = statistics.median(record["cpu_samples_s"])
    return timings


def peak_memory_child(name, length):
    """Runs in a fresh process: RSS high-water rise over one call (MiB)."""
    step, activations = make_train_step(name, length, jit_compile=False)
    step.get_concrete_function(activations)  # trace before measuring
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    run_step(step, activations)
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # ru_maxrss is in KiB on Linux. If the high-water mark was inherited
    # from the parent (above this process's own RSS), the rise is hidden.
    inherited = before > 1.1 * _resident_kib()
    print(json.dumps({"peak_rise_mib": (after - before) / 1024.0, "maxrss_inherited": inherited}))


def _resident_kib():
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return float("inf")


def measure_memory():
    memory = {}
    for length in LENGTHS:
        for name in IMPLEMENTATIONS:
            result = subprocess.run(
                [sys.executable, os.path.abspath(__file__), "--memory", name, str(length)],
                capture_output=True, text=True, check=True,
            )
            record = json.loads(result.stdout.strip().splitlines()[-1])
            if record["maxrss_inherited"]:
                print(f"  warning: {name} T={length}: maxrss inherited from the parent", file=sys.stderr)
            memory[(name, length)] = record["peak_rise_mib"]
        print(f"  memory T={length}", file=sys.stderr, flush=True)
    return memory


def time_cached_sampling():
    """Wall and CPU ms per token of a compiled one-token step at several
    positions."""
    results = {}
    shape = (BATCH, 1, MODEL_DIM)
    token = tf.constant(np.random.default_rng(1).standard_normal(shape).astype("float32"))
    layers = {
        "skew": RelativeGlobalAttention(
            NUM_HEADS, KEY_DIM, max_relative_position=DECODE_CACHE_LENGTH,
            heads_share_relative_embedding=True,
        ),
        "multi_head_self_attention": MultiHeadSelfAttention(NUM_HEADS, KEY_DIM),
    }
    for name, layer in layers.items():
        layer.build(shape)

        @tf.function(jit_compile=True)
        def step(x, cache, index, layer=layer):
            return layer(x, cache=cache, cache_index=index, use_causal_mask=True)

        cache = layer.init_cache(BATCH, DECODE_CACHE_LENGTH)
        step(token, cache, tf.constant(0))  # compile once
        for position in DECODE_POSITIONS:
            samples, cpu_samples = [], []
            for _ in range(3):
                start, cpu_start = time.perf_counter(), time.process_time()
                for i in range(DECODE_STEPS):
                    y, cache = step(token, cache, tf.constant(position + i))
                float(tf.reduce_sum(y))
                samples.append((time.perf_counter() - start) / DECODE_STEPS * 1e3)
                cpu_samples.append((time.process_time() - cpu_start) / DECODE_STEPS * 1e3)
            results[(name, position)] = {
                "ms": statistics.median(samples), "cpu_ms": statistics.median(cpu_samples)
            }
        assert step.experimental_get_tracing_count() == 1
    return results


def main():
    started = time.perf_counter()
    print("peak memory (one subprocess per configuration) ...", file=sys.stderr, flush=True)
    memory = measure_memory()
    print("timing forward+backward ...", file=sys.stderr, flush=True)
    timings = time_forward_backward()
    print("cached sampling ...", file=sys.stderr, flush=True)
    sampling = time_cached_sampling()
    total = time.perf_counter() - started

    names = {"skew": "skew", "gather": "gather", "keras_mha": "keras MHA", "mhsa": "MHSA"}
    lines = [
        f"RelativeGlobalAttention benchmark: causal, batch {BATCH}, {NUM_HEADS} heads, "
        f"key_dim {KEY_DIM}, d_model {MODEL_DIM}. Forward+backward, median of {REPEATS} "
        "after warm-up: wall ms and process CPU ms (all threads). MHSA = keras_attn "
        "MultiHeadSelfAttention (the skew layer's base, no relative term).",
        "",
        "| T | XLA | " + " | ".join(f"{names[n]} ms" for n in TIMED)
        + " | skew/keras MHA wall | " + " | ".join(f"{names[n]} CPU ms" for n in TIMED)
        + " | skew/keras MHA CPU |",
        "|---" * (4 + 2 * len(TIMED)) + "|",
    ]
    for length in LENGTHS:
        for jit in (False, True):
            wall = {n: timings[(n, jit, length)]["median_s"] * 1e3 for n in TIMED}
            cpu = {n: timings[(n, jit, length)]["cpu_median_s"] * 1e3 for n in TIMED}
            lines.append(
                f"| {length} | {'yes' if jit else 'no'} | "
                + " | ".join(f"{wall[n]:.0f}" for n in TIMED)
                + f" | {wall['skew'] / wall['keras_mha']:.2f} | "
                + " | ".join(f"{cpu[n]:.0f}" for n in TIMED)
                + f" | {cpu['skew'] / cpu['keras_mha']:.2f} |"
            )
    lines += [
        "",
        "Peak memory of one forward+backward call (no XLA): rise of ru_maxrss in a fresh process (MiB).",
        "",
        "| T | " + " | ".join(names[n] for n in IMPLEMENTATIONS)
        + " | gather/skew | skew - keras MHA | gather - keras MHA |",
        "|---" * (len(IMPLEMENTATIONS) + 4) + "|",
    ]
    for length in LENGTHS:
        mem = {n: memory[(n, length)] for n in IMPLEMENTATIONS}
        lines.append(
            f"| {length} | " + " | ".join(f"{mem[n]:.0f}" for n in IMPLEMENTATIONS)
            + f" | {mem['gather'] / max(mem['skew'], 1.0):.1f}"
            + f" | {mem['skew'] - mem['keras_mha']:+.0f} | {mem['gather'] - mem['keras_mha']:+.0f} |"
        )
    lines += [
        "",
        f"Cached sampling, one token per jit-compiled step, {DECODE_CACHE_LENGTH}-slot cache "
        "(wall ms / CPU ms per token):",
        "",
        "| layer | " + " | ".join(f"position {p}" for p in DECODE_POSITIONS) + " |",
        "|---|" + "---|" * len(DECODE_POSITIONS),
    ]
    for name in ("skew", "multi_head_self_attention"):
        lines.append(
            f"| {name} | "
            + " | ".join(
                f"{sampling[(name, p)]['ms']:.1f} / {sampling[(name, p)]['cpu_ms']:.1f}"
                for p in DECODE_POSITIONS
            )
            + " |"
        )
    load = os.getloadavg()
    lines += [
        "",
        f"Total {total:.0f} s. Load average at the end {load[0]:.1f} on {os.cpu_count()} cores "
        "(a shared machine: other processes add noise; compare only numbers of this run).",
    ]
    print("\n".join(lines))

    os.makedirs(os.path.dirname(RESULTS), exist_ok=True)
    with open(RESULTS, "w") as f:
        json.dump(
            {
                "config": {
                    "batch_size": BATCH, "num_heads": NUM_HEADS, "key_dim": KEY_DIM,
                    "model_dim": MODEL_DIM, "lengths": LENGTHS, "repeats": REPEATS,
                    "causal": True, "heads_share_relative_embedding": True,
                    "max_relative_position": "T",
                },
                "environment": {
                    "tensorflow": tf.__version__, "keras": keras.__version__,
                    "python": platform.python_version(), "cpu_count": os.cpu_count(),
                    "load_average_end": load,
                },
                "forward_backward": [
                    {"implementation": n, "jit_compile": j, "length": t, **record}
                    for (n, j, t), record in timings.items()
                ],
                "peak_memory_mib": [
                    {"implementation": n, "length": t, "jit_compile": False, "peak_rise_mib": v}
                    for (n, t), v in memory.items()
                ],
                "cached_sampling_per_token": [
                    {"layer": n, "position": p, "cache_length": DECODE_CACHE_LENGTH, **v}
                    for (n, p), v in sampling.items()
                ],
                "total_seconds": total,
            },
            f,
            indent=1,
        )
    print(f"wrote {RESULTS}", file=sys.stderr)


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--memory":
        peak_memory_child(sys.argv[2], int(sys.argv[3]))
    else:
        main()
