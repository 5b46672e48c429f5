"""Image generation speed: 1D vs 2D local attention, cached, one whole image.

Two decoder-only "Image Transformer" language models of equal size over the
32x32x3 = 3072 intensities of an image (channels folded into the width: an
intensity grid of 32 rows by 96 columns), a start token first, so a
sequence is 3073 tokens: token + learned position embedding
(`TokenAndPositionEmbedding(257, D, sequence_length=3073)`), --num-layers
(default 2) post-norm TransformerDecoder blocks of width D = 128, 4 heads,
d_ff 512, and a Dense to the 256 intensity logits. Untrained random weights:
the speed of a decoding step depends on the shapes, not on the weights or
the tokens drawn.

- 1D local: `LocalBlockAttention(block_size=96, memory_flange=96,
  rolling_cache=True)` over raster order (a query sees its row of 96
  intensities up to itself and the row above: a cache of 192 slots).
- 2D local: `LocalBlockAttention(block_size=(8, 24), memory_flange=(8, 24),
  image_size=(32, 96))` over block-raster order: a step reads the blocks
  around its window as 2 contiguous runs of the cache of 3073 slots (the
  block-row above: 3 blocks of 192; its own: 2), 960 slots, masking those
  outside the (8 + 8) x (24 + 2 * 24) = 1152-slot window.
- "2D gather" (unless --no-gather): the same 2D model whose steps gather
  the window's 1152 slots element by element (`_read_runs = False`, the
  step before the runs; still the path of caches of dynamic length).

Measured (shared code in `harness.py`), each one XLA program
(`tf.function(jit_compile=True)`), the models interleaved, median of
--repeats:

1. `sample` (temperature 1) of one whole image: 3072 new tokens after the
   start token, batch 1, then (after 3.) batch 8 as the budget allows.
2. Linearity: half an image (1536 new tokens) vs the whole image, batch 1.
3. The 2D model without a cache: `RecomputingDecoder` (the full model over
   the 3073-token buffer at every step), a program of 8 steps; seconds per
   image *extrapolated* as 3072 x its per-step cost (a whole image takes
   minutes per call, past the 5-minute budget with warm-up and repeats, so
   it is never run).

Run: `python benchmarks/local_2d_generation_benchmark.py [--quick]
[--num-layers 2] [--hidden-dim 128] [--repeats 3] [--budget 400] [--no-gather]`.
Prints a markdown table and writes benchmarks/results/local_2d_generation.json.
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

HEIGHT, WIDTH = 32, 96  # 32x32 pixels, 3 channels folded into the width
PIXELS = HEIGHT * WIDTH
START_TOKEN = 256
RECOMPUTE_STEPS = 8


def build_model(kind, args):
    """Functional decoder-only LM (tokens -> 256 intensity logits)."""
    import keras

    import keras_attn.layers as attn

    tokens = keras.Input((None,), dtype="int32", name="tokens")
    x = attn.TokenAndPositionEmbedding(
        START_TOKEN + 1, args.hidden_dim, sequence_length=PIXELS + 1, name="embedding"
    )(tokens)
    for i in range(args.num_layers):
        common = dict(
            num_heads=args.num_heads,
            key_dim=args.hidden_dim // args.num_heads,
            name=f"self_attention_{i}",
        )
        if kind == "1D":
            attention = attn.LocalBlockAttention(
                block_size=WIDTH, memory_flange=WIDTH, rolling_cache=True, **common
            )
        else:
            attention = attn.LocalBlockAttention(
                block_size=tuple(args.block),
                memory_flange=tuple(args.flange),
                image_size=(HEIGHT, WIDTH),
                **common,
            )
            attention._read_runs = kind != "2D gather"
        x = attn.TransformerDecoder(
            args.intermediate_dim, self_attention=attention, name=f"decoder_layer_{i}"
        )(x)
    return keras.Model(tokens, keras.layers.Dense(START_TOKEN, name="logits")(x))


def _run_sizes(args):
    """Slots of the contiguous runs a 2D step reads: ceil(fh / bh) block-rows
    above of 2 ceil(fw / bw) + 1 blocks, its own of ceil(fw / bw) + 1."""
    (bh, bw), (fh, fw) = args.block, args.flange
    side = -(-fw // bw)
    return [(2 * side + 1) * bh * bw] * -(-fh // bh) + [(side + 1) * bh * bw]


def sample_program(tf, model, batch_size, new_tokens):
    """Compiled `sample` of `new_tokens` intensities after the start token."""
    from keras_attn.generation import sample

    prompt = tf.fill((batch_size, 1), START_TOKEN)
    run = harness.compile_function(
        lambda prompt: sample(model, prompt, new_tokens + 1, seed=0), jit_compile=True
    )
    return lambda: run(prompt)


def recomputing_program(tf, model, batch_size):
    """Compiled RECOMPUTE_STEPS steps of `RecomputingDecoder` over the
    whole (B, 3073) buffer, greedy choice fed back."""
    from keras import ops

    from keras_attn.generation import RecomputingDecoder

    decoder = RecomputingDecoder(model)

    def steps(token):
        state = decoder.initial_state(batch_size, PIXELS + 1)

        def body(i, token, state):
            logits, state = decoder(token, i, state)
            return i + 1, ops.cast(ops.argmax(logits[:, -1], axis=-1), "int32")[:, None], state

        _, token, _ = ops.while_loop(lambda i, t, s: i < RECOMPUTE_STEPS, body, (0, token, state))
        return token

    run = harness.compile_function(steps, jit_compile=True)
    token = tf.fill((batch_size, 1), START_TOKEN)
    return lambda: run(token)


def time_recomputing(tf, model, budget):
    """Per-step cost of the 2D model without a cache, and the seconds per
    image extrapolated from it (None when out of budget)."""
    if not budget.fits(60.0):
        return None
    records = harness.time_interleaved(
        {"2D recomputing": recomputing_program(tf, model, 1)}, repeats=3, budget=budget
    )
    record = records["2D recomputing"]
    record["s_per_step"] = record["median_s"] / RECOMPUTE_STEPS
    record["extrapolated_s_per_image"] = record["s_per_step"] * PIXELS
    print(
        f"recomputing: {record['s_per_step'] * 1e3:.1f} ms/step ({budget.elapsed():.0f} s)",
        file=sys.stderr,
        flush=True,
    )
    return record


def main():
    parser = harness.add_common_arguments(
        argparse.ArgumentParser(description=__doc__.splitlines()[0]), repeats=3, budget=400.0
    )
    parser.add_argument("--num-layers", type=int, default=2)
    parser.add_argument("--hidden-dim", type=int, default=128)
    parser.add_argument("--num-heads", type=int, default=4)
    parser.add_argument("--intermediate-dim", type=int, default=512)
    parser.add_argument(
        "--block", type=int, nargs=2, default=[8, 24], help="2D query block (rows, columns)"
    )
    parser.add_argument("--flange", type=int, nargs=2, default=[8, 24], help="2D memory flange")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 8])
    parser.add_argument(
        "--no-gather",
        action="store_true",
        help="skip the 2D model whose steps gather the window (the step before the runs)",
    )
    args = parser.parse_args()
    if args.quick:
        args.num_layers, args.batch_sizes = 1, [1]
        args.repeats = min(args.repeats, 2)
    budget = harness.Budget(args.budget)
    env_start = harness.environment()
    tf = harness.setup_tensorflow()
    import keras

    kinds = ("1D", "2D") if args.no_gather else ("1D", "2D", "2D gather")
    models, params = {}, {}
    for kind in kinds:
        keras.utils.set_random_seed(0)
        models[kind] = build_model(kind, args)
        params[kind] = models[kind].count_params()
    repeats = max(3, args.repeats)

    # 1. + 2. Whole images (and half an image at batch 1), 1D vs 2D
    # interleaved; 3. the 2D model without a cache, before the larger batches.
    timings, last, recompute = {}, None, None
    configs = [(1, PIXELS), (1, PIXELS // 2), "recomputing"]
    configs += [(b, PIXELS) for b in args.batch_sizes if b != 1]
    for config in configs:
        if config == "recomputing":
            recompute = time_recomputing(tf, models["2D"], budget)
            continue
        batch_size, new_tokens = config
        if last is not None:
            # Warm-up + repeats per model at the last measured rate (taken
            # linear in batch and tokens), plus about 20 s of XLA compilation
            # per model.
            scale = batch_size / last[0] * new_tokens / last[1]
            predicted = 40.0 + (1 + repeats) * scale * last[2]
            if not budget.fits(predicted):
                timings[(batch_size, new_tokens)] = {
                    "skipped": f"skipped (out of budget: ~{predicted:.0f} s predicted, "
                    f"{max(0.0, budget.left()):.0f} s left)"
                }
                continue
        candidates = {
            kind: sample_program(tf, models[kind], batch_size, new_tokens) for kind in models
        }
        records = harness.time_interleaved(candidates, repeats=repeats, budget=budget)
        timings[(batch_size, new_tokens)] = records
        last = (batch_size, new_tokens, sum(r["median_s"] for r in records.values()))
        print(
            f"batch {batch_size}, {new_tokens} tokens: "
            + ", ".join(f"{k} {r['median_s']:.2f} s" for k, r in records.items())
            + f" ({budget.elapsed():.0f} s)",
            file=sys.stderr,
            flush=True,
        )

    env_end = harness.environment()

    def seconds(batch_size, new_tokens, kind):
        record = timings.get((batch_size, new_tokens), {})
        if "skipped" in record:
            return record["skipped"]
        return f"{record[kind]['median_s']:.2f}" if kind in record else "-"

    rows = []
    window_slots = (args.flange[0] + args.block[0]) * (args.block[1] + 2 * args.flange[1])
    run_slots = sum(_run_sizes(args))
    for kind in kinds:
        window = {
            "1D": f"{2 * WIDTH} (rolling cache)",
            "2D": f"{window_slots} (reads {run_slots} in runs)",
            "2D gather": f"{window_slots} (gathered)",
        }[kind]
        half, whole = timings.get((1, PIXELS // 2), {}), timings.get((1, PIXELS), {})
        ratio = (
            f"{whole[kind]['median_s'] / half[kind]['median_s']:.2f}"
            if kind in half and kind in whole
            else "-"
        )
        rows.append(
            [
                kind,
                f"{params[kind]:,}",
                window,
                seconds(1, PIXELS // 2, kind),
                seconds(1, PIXELS, kind),
                ratio,
            ]
            + [seconds(b, PIXELS, kind) for b in args.batch_sizes if b != 1]
        )
    if recompute is not None:
        rows.append(
            [
                "2D, no cache (RecomputingDecoder)",
                f"{params['2D']:,}",
                "whole buffer",
                "-",
                f"~{recompute['extrapolated_s_per_image']:.0f} (extrapolated from "
                f"{RECOMPUTE_STEPS} steps: {recompute['s_per_step'] * 1e3:.0f} ms/step)",
                "-",
            ]
            + ["-" for b in args.batch_sizes if b != 1]
        )
    lines = [
        f"Sampling one 32x32x3 image (3072 intensities after a start token), decoder-only LM: "
        f"{args.num_layers} layers, d {args.hidden_dim}, {args.num_heads} heads, d_ff {args.intermediate_dim}, "
        f"random weights; 1D: block 96, flange 96, rolling cache; 2D: block {tuple(args.block)}, flange "
        f"{tuple(args.flange)}, image (32, 96) in block-raster order, steps reading contiguous runs of the cache"
        + (
            ""
            if args.no_gather
            else "; 2D gather: the same 2D model, its steps gathering the window element by element"
        )
        + ". One XLA program per call, median of "
        f"{repeats} interleaved calls, seconds.",
        "",
        harness.markdown_table(
            [
                "model",
                "params",
                "window slots",
                "s / half image (b=1)",
                "s / image (b=1)",
                "whole / half",
            ]
            + [f"s / {b} images" for b in args.batch_sizes if b != 1],
            rows,
        ),
        "",
        f"Total {budget.elapsed():.0f} s; {harness.load_note(env_start, env_end)}.",
    ]
    print("\n".join(lines))
    harness.write_results(
        harness.output_path(args, "local_2d_generation"),
        {
            "config": {k: v for k, v in vars(args).items() if k not in ("output", "memory_worker")},
            "environment": {"start": env_start, "end": env_end},
            "parameters": params,
            "sample": [
                {
                    "batch_size": b,
                    "new_tokens": n,
                    **({"skipped": r["skipped"]} if "skipped" in r else r),
                }
                for (b, n), r in timings.items()
            ],
            "recomputing": recompute,
            "table": "\n".join(lines),
            "total_s": budget.elapsed(),
        },
    )


if __name__ == "__main__":
    main()
