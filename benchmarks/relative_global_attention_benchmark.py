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

Measured (shared code in `harness.py`):
1. Peak memory: in a fresh process per configuration (implementation, T,
   no-XLA tf.function), the rise of ru_maxrss over one forward + backward
   call, the function traced beforehand; two processes at a time.
2. Forward + backward (gradients of the inputs and all weights) time,
   tf.function without and with jit_compile, all implementations
   interleaved (warm-up, then A B C D A B C D ..., median of --repeats);
   wall and process CPU time (on a shared machine the CPU time is the
   steadier comparison), and the achieved GFLOP/s of the keras MHA and
   skew calls next to the float32 matmul roofline of this run.
3. Forward only at T = 1024 and 2048, with and without XLA, called with
   `training=False` as `model.predict` and serving call it: the skew layer
   as users get it (default `chunk_size="auto"`: causal query blocks of 256
   from T = 512), the dense skew core, keras MHA, and MHSA dense and
   default, interleaved. (Forward + backward calls pass `training=True`.)
4. Cached sampling: time per token of a jit-compiled one-token decoding step
   at positions ~128, 512 and 2040 of a 2048-slot cache, for the skew layer
   and for MultiHeadSelfAttention (the same cache, no relative term),
   interleaved.

Goals (issue 7): skew <= 1.3x keras MHA time; >= 10x less memory than the
gather version at T = 2048. Issue 15: forward <= 1.2x keras MHA at T = 2048.

Run: `python benchmarks/relative_global_attention_benchmark.py [--quick]
[--repeats 5] [--forward-repeats 15] [--budget 280] [--skip-memory]`. Prints
markdown tables and writes `benchmarks/results/relative_global_attention.json`. The inputs are random
activations: speed and memory do not depend on values.
"""

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import peak_memory  # noqa: E402

NUM_HEADS, KEY_DIM, MODEL_DIM, BATCH = 8, 64, 512, 1
LENGTHS = (256, 512, 1024, 2048)
IMPLEMENTATIONS = ("skew", "gather", "keras_mha")  # timed and measured
TIMED = IMPLEMENTATIONS + ("mhsa",)
DECODE_POSITIONS = (128, 512, 2040)
DECODE_CACHE_LENGTH = 2048
DECODE_STEPS = 8
NAMES = {
    "skew": "skew",
    "gather": "gather",
    "keras_mha": "keras MHA",
    "mhsa": "MHSA",
    "skew_default": "skew (default core)",
    "mhsa_default": "MHSA (default core)",
}
# Forward-only timing (issue 15's goal: skew <= 1.2x keras MHA at T = 2048),
# with the layers as users get them (chunk_size="auto": causal query blocks
# from T = 512) beside the dense cores.
FORWARD_LENGTHS = (1024, 2048)
FORWARD_TIMED = ("skew_default", "skew", "keras_mha", "mhsa", "mhsa_default")


def _layers():
    import keras
    from keras import ops

    from keras_attn.layers import MultiHeadSelfAttention, RelativeGlobalAttention, attention_ops

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
                initializer=keras.initializers.RandomNormal(stddev=self.key_dim**-0.5),
            )

        def _attend(
            self, query, key, value, masks, spatial_shape, return_attention_scores, training
        ):
            query_length, key_length = ops.shape(query)[1], ops.shape(key)[1]
            limit = self.max_relative_position - 1
            distances = ops.arange(key_length)[None, :] - (
                ops.arange(query_length)[:, None] + ops.cast(masks.cache_index, "int32")
            )
            rows = ops.clip(distances, -limit, limit) + limit
            relative = ops.take(self.relative_embeddings, rows, axis=0)  # (T, S, K)
            extra = ops.einsum("bthk,tsk->bhts", query, relative)
            mask = masks.merged(query_length, key_length)
            return attention_ops.scaled_dot_product_attention(
                query,
                key,
                value,
                mask,
                may_have_empty_rows=False,
                extra_logits=extra,
            )

    return MultiHeadSelfAttention, RelativeGlobalAttention, ShawGatherAttention


def make_layer(name, length):
    import keras

    MultiHeadSelfAttention, RelativeGlobalAttention, ShawGatherAttention = _layers()
    # The dense cores (chunk_size=None): this benchmark measures skewing against
    # the gather; the chunked cores are long_sequence_benchmark.py's.
    if name == "skew":
        return RelativeGlobalAttention(
            NUM_HEADS,
            KEY_DIM,
            max_relative_position=length,
            heads_share_relative_embedding=True,
            chunk_size=None,
        )
    if name == "skew_default":
        return RelativeGlobalAttention(
            NUM_HEADS, KEY_DIM, max_relative_position=length, heads_share_relative_embedding=True
        )
    if name == "gather":
        return ShawGatherAttention(NUM_HEADS, KEY_DIM, max_relative_position=length)
    if name == "keras_mha":
        return keras.layers.MultiHeadAttention(NUM_HEADS, KEY_DIM)
    if name == "mhsa":
        return MultiHeadSelfAttention(NUM_HEADS, KEY_DIM, chunk_size=None)
    if name == "mhsa_default":
        return MultiHeadSelfAttention(NUM_HEADS, KEY_DIM)
    raise ValueError(f"Unknown implementation {name!r}; expected one of {TIMED}.")


def make_step(name, length, jit_compile, backward=True):
    """The compiled causal call of one implementation: forward + backward
    (gradients of the inputs and weights) with `training=True`, as
    `model.fit` calls it, or forward only with `training=False`, as
    `model.predict` and a served model call it (the default cores choose by
    it: see `MultiHeadSelfAttention`'s `chunk_size`)."""
    layer = make_layer(name, length)
    shape = (BATCH, length, MODEL_DIM)
    if name == "keras_mha":
        layer.build(shape, shape)
        forward = lambda x: layer(x, x, use_causal_mask=True, training=backward)  # noqa: E731
    else:
        layer.build(shape)
        forward = lambda x: layer(x, use_causal_mask=True, training=backward)  # noqa: E731
    if not backward:
        return harness.forward_step(forward, jit_compile)
    return harness.forward_backward_step(forward, layer.trainable_weights, jit_compile)


def inputs(tf, length):
    return tf.random.stateless_normal((BATCH, length, MODEL_DIM), seed=(3, length))


def memory_worker(config):
    tf = harness.setup_tensorflow()
    step = make_step(config["implementation"], config["length"], jit_compile=False)
    x = inputs(tf, config["length"])
    peak_memory.memory_worker(lambda: step(x), prepare=lambda: step.get_concrete_function(x))


def time_cached_sampling(tf, repeats):
    """Wall and CPU ms per token of a compiled one-token step at several
    positions, layers and positions interleaved."""
    MultiHeadSelfAttention, RelativeGlobalAttention, _ = _layers()
    shape = (BATCH, 1, MODEL_DIM)
    token = tf.random.stateless_normal(shape, seed=(4, 1))
    layers = {
        "skew": RelativeGlobalAttention(
            NUM_HEADS,
            KEY_DIM,
            max_relative_position=DECODE_CACHE_LENGTH,
            heads_share_relative_embedding=True,
        ),
        "multi_head_self_attention": MultiHeadSelfAttention(NUM_HEADS, KEY_DIM),
    }
    candidates = {}
    for name, layer in layers.items():
        layer.build(shape)

        def step(x, cache, index, layer=layer):
            return layer(x, cache=cache, cache_index=index, use_causal_mask=True)

        step = harness.compile_function(step, jit_compile=True)
        state = {"cache": layer.init_cache(BATCH, DECODE_CACHE_LENGTH)}
        for position in DECODE_POSITIONS:

            def run(step=step, state=state, position=position):
                for i in range(DECODE_STEPS):
                    y, state["cache"] = step(token, state["cache"], tf.constant(position + i))
                return y

            candidates[(name, position)] = run
    records = harness.time_interleaved(candidates, repeats=repeats)
    return {
        key: {
            "ms": 1e3 * r["median_s"] / DECODE_STEPS,
            "cpu_ms": 1e3 * r["cpu_median_s"] / DECODE_STEPS,
        }
        for key, r in records.items()
    }


def main():
    parser = harness.add_common_arguments(
        argparse.ArgumentParser(description=__doc__.splitlines()[0])
    )
    parser.add_argument("--skip-memory", action="store_true")
    parser.add_argument(
        "--forward-repeats",
        type=int,
        default=15,
        help="repeats of the forward-only table (its calls are short and the "
        "1.2x goal is close: more samples than --repeats)",
    )
    args = parser.parse_args()
    if args.memory_worker:
        return memory_worker(json.loads(args.memory_worker))
    lengths = LENGTHS
    if args.quick:
        lengths = (256,)
        args.repeats = min(args.repeats, 2)
    budget = harness.Budget(args.budget)
    env_start = harness.environment()
    tf = harness.setup_tensorflow()

    memory = {}
    if not args.skip_memory:
        configs = [{"implementation": n, "length": t} for t in lengths for n in IMPLEMENTATIONS]
        records = peak_memory.measure_memory_many(__file__, configs, budget=budget)
        memory = {(c["implementation"], c["length"]): r for c, r in zip(configs, records)}
        print(f"memory done ({budget.elapsed():.0f} s)", file=sys.stderr, flush=True)

    roofline = [harness.matmul_roofline()]
    # Cached sampling is measured before the long timings, so that the
    # budget, if short, cuts the largest T instead.
    sampling = time_cached_sampling(tf, 3 if not args.quick else 1)
    print(f"cached sampling done ({budget.elapsed():.0f} s)", file=sys.stderr, flush=True)

    def forward_candidates(config):
        length, jit = config
        x = inputs(tf, length)
        steps = {name: make_step(name, length, jit, backward=False) for name in FORWARD_TIMED}
        return {name: (lambda s=s: s(x)) for name, s in steps.items()}

    forward_configs = [
        (t, jit) for t in (lengths if args.quick else FORWARD_LENGTHS) for jit in (False, True)
    ]
    forward_repeats = args.repeats if args.quick else args.forward_repeats
    forward = harness.compare(
        forward_configs,
        forward_candidates,
        forward_repeats,
        budget,
        group=lambda c: c[1],
        log=lambda c: f"forward T={c[0]} jit={c[1]}",
    )

    def candidates(config):
        length, jit = config
        x = inputs(tf, length)
        steps = {name: make_step(name, length, jit) for name in TIMED}
        return {name: (lambda s=s: s(x)) for name, s in steps.items()}

    configs = [(t, jit) for t in lengths for jit in (False, True)]
    compared = harness.compare(
        configs,
        candidates,
        args.repeats,
        budget,
        group=lambda c: c[1],
        log=lambda c: f"T={c[0]} jit={c[1]}",
    )
    roofline.append(harness.matmul_roofline())
    env_end = harness.environment()
    peak = max(r["gflops"] for r in roofline)

    def ms(record, key="median_s"):
        return f"{1e3 * record[key]:.0f}" if record and key in record else "skipped (out of budget)"

    def ratio(a, b, key="median_s"):
        return f"{a[key] / b[key]:.2f}" if a and b and key in a and key in b else "-"

    rows = []
    for length, jit in configs:
        records = compared.get((length, jit), {})
        skew, mha = records.get("skew"), records.get("keras_mha")
        gflops = "-"
        if skew and mha and "median_s" in skew and "median_s" in mha:
            flops = harness.attention_flops(
                BATCH, length, MODEL_DIM, NUM_HEADS, KEY_DIM, backward=True
            )
            gflops = (
                f"{flops / skew['median_s'] / 1e9:.0f} / {flops / mha['median_s'] / 1e9:.0f} "
                f"({100 * flops / mha['median_s'] / 1e9 / peak:.0f}%)"
            )
        rows.append(
            [length, "yes" if jit else "no"]
            + [ms(records.get(n)) for n in TIMED]
            + [ratio(skew, mha)]
            + [ms(records.get(n), "cpu_median_s") for n in TIMED]
            + [ratio(skew, mha, "cpu_median_s"), gflops]
        )
    lines = [
        f"RelativeGlobalAttention benchmark: causal, batch {BATCH}, {NUM_HEADS} heads, key_dim {KEY_DIM}, "
        f"d_model {MODEL_DIM}. Forward+backward, median of {args.repeats} interleaved calls after a warm-up: "
        "wall ms and process CPU ms. MHSA = keras_attn MultiHeadSelfAttention (the skew layer's base, no "
        f"relative term). GFLOP/s (projections + QK + PV, the relative term not counted): skew / keras MHA "
        f"(keras MHA as % of the {peak:.0f} GFLOP/s matmul roofline of this run). Goal: skew / keras MHA <= 1.3.",
        "",
        harness.markdown_table(
            ["T", "XLA"]
            + [f"{NAMES[n]} ms" for n in TIMED]
            + ["skew / keras MHA (wall)"]
            + [f"{NAMES[n]} CPU ms" for n in TIMED]
            + ["skew / keras MHA (CPU)", "GFLOP/s skew / keras MHA"],
            rows,
        ),
    ]
    forward_rows = []
    for length, jit in forward_configs:
        records = forward.get((length, jit), {})
        mha = records.get("keras_mha")
        forward_rows.append(
            [length, "yes" if jit else "no"]
            + [ms(records.get(n)) for n in FORWARD_TIMED]
            + [ratio(records.get(n), mha) for n in ("skew_default", "skew", "mhsa_default")]
            + [ratio(records.get(n), mha, "cpu_median_s") for n in ("skew_default", "skew")]
        )
    lines += [
        "",
        f"Forward only, the same layers and interleaving, median of {forward_repeats}; "
        "skew (default core) = "
        'RelativeGlobalAttention with its default chunk_size="auto" called with '
        "training=False, as model.predict and serving call it (causal: the dense core on "
        "blocks of 256 queries from T = 512), skew = the dense core (chunk_size=None); "
        "MHSA likewise. Goal: <= 1.2x keras MHA at T = 2048.",
        "",
        harness.markdown_table(
            ["T", "XLA"]
            + [f"{NAMES[n]} ms" for n in FORWARD_TIMED]
            + [
                "default / keras MHA (wall)",
                "dense / keras MHA (wall)",
                "MHSA default / keras MHA (wall)",
                "default / keras MHA (CPU)",
                "dense / keras MHA (CPU)",
            ],
            forward_rows,
        ),
    ]
    if memory:
        mem_rows = []
        for length in lengths:
            mem = {n: memory.get((n, length), {}) for n in IMPLEMENTATIONS}
            value = {n: mem[n].get("peak_mib") for n in IMPLEMENTATIONS}
            fmt = {
                n: (f"{value[n]:.0f}" if value[n] is not None else mem[n].get("skipped", "-"))
                for n in IMPLEMENTATIONS
            }
            ok = all(v is not None for v in value.values())
            mem_rows.append(
                [length]
                + [fmt[n] for n in IMPLEMENTATIONS]
                + (
                    [
                        f"{value['gather'] / max(value['skew'], 1.0):.1f}",
                        f"{value['skew'] - value['keras_mha']:+.0f}",
                        f"{value['gather'] - value['keras_mha']:+.0f}",
                    ]
                    if ok
                    else ["-", "-", "-"]
                )
            )
        lines += [
            "",
            "Peak memory of one forward+backward call (no XLA): rise of ru_maxrss in a fresh "
            "process (MiB). Goal: gather / skew >= 10 at T = 2048.",
            "",
            harness.markdown_table(
                ["T"]
                + [NAMES[n] for n in IMPLEMENTATIONS]
                + ["gather / skew", "skew - keras MHA", "gather - keras MHA"],
                mem_rows,
            ),
        ]
    lines += [
        "",
        f"Cached sampling, one token per jit-compiled step, {DECODE_CACHE_LENGTH}-slot cache "
        "(wall ms / CPU ms per token):",
        "",
        harness.markdown_table(
            ["layer"] + [f"position {p}" for p in DECODE_POSITIONS],
            [
                [name]
                + [
                    f"{sampling[(name, p)]['ms']:.2f} / {sampling[(name, p)]['cpu_ms']:.2f}"
                    for p in DECODE_POSITIONS
                ]
                for name in ("skew", "multi_head_self_attention")
            ],
        ),
        "",
        f"Total {budget.elapsed():.0f} s; {harness.load_note(env_start, env_end)}.",
    ]
    print("\n".join(lines))
    harness.write_results(
        harness.output_path(args, "relative_global_attention"),
        {
            "config": {
                "batch_size": BATCH,
                "num_heads": NUM_HEADS,
                "key_dim": KEY_DIM,
                "model_dim": MODEL_DIM,
                "lengths": lengths,
                "repeats": args.repeats,
                "forward_repeats": forward_repeats,
                "causal": True,
                "heads_share_relative_embedding": True,
                "max_relative_position": "T",
                "quick": args.quick,
                "budget_s": args.budget,
            },
            "environment": {"start": env_start, "end": env_end},
            "matmul_roofline": roofline,
            "forward": [
                {"implementation": n, "jit_compile": j, "length": t, **r}
                for (t, j), records in forward.items()
                for n, r in records.items()
            ],
            "forward_backward": [
                {"implementation": n, "jit_compile": j, "length": t, **r}
                for (t, j), records in compared.items()
                for n, r in records.items()
            ],
            "peak_memory_mib": [
                {"implementation": n, "length": t, "jit_compile": False, **r}
                for (n, t), r in memory.items()
            ],
            "cached_sampling_per_token": [
                {"layer": n, "position": p, "cache_length": DECODE_CACHE_LENGTH, **v}
                for (n, p), v in sampling.items()
            ],
            "table": "\n".join(lines),
            "total_s": budget.elapsed(),
        },
    )


if __name__ == "__main__":
    main()
