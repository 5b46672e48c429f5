"""Generation speed: cached greedy decoding, keras_attn vs keras-hub.

Decoder-only language model, untrained (speed does not depend on the
weights or the tokens): token + learned position embedding, --num-layers
(default 6) post-norm TransformerDecoder blocks of width 512, 8 heads,
d_ff 2048, and a Projection (Dense) to the --vocabulary-size (512) logits; batch 1;
prompt = the 16 token ids 1..16; greedy, no end token.

- keras_attn: `TokenAndPositionEmbedding`, `TransformerDecoder` with
  `MultiHeadSelfAttention` (or, with --attention, LocalBlockAttention /
  RelativeGlobalAttention), decoded through `CachedDecoder` / `greedy_search`.
- keras-hub: the same stack built from keras_hub.layers
  (TokenAndPositionEmbedding, TransformerDecoder over its
  CachedMultiHeadAttention, Dense), prompt prefilled through the caches as
  keras-hub's CausalLM does, decoded by `keras_hub.samplers.GreedySampler`.

Everything runs as one XLA program (`tf.function(jit_compile=True)`).
Measured (shared code in `harness.py`):

1. Per-token cost, by position: one XLA program running 16 greedy decoding
   steps (argmax fed back, the caches updated in place) from an early
   position (16) and from a late one (L - 16) of a cache of L = 16 + N
   slots, N = 128, 512, 2048; keras_attn and keras-hub interleaved, median
   of --repeats. Every step attends over the whole fixed-size cache (the
   loop compiles once), so the cost per token depends on L, not on the
   position: early ~ late is the "flat in position" check. Tokens/s of
   generating N tokens = 1 / (per-token cost at L = 16 + N, mean of early
   and late).
2. End-to-end check at N = 128 (and 512 when the budget allows): the full
   `greedy_search` vs `GreedySampler.__call__` programs (prefill + N
   steps), interleaved, median of 3; tokens/s = N / time.

Why not end-to-end at every N: a full 2048-token run with 6 layers takes
about a minute per call for keras-hub on 2 cores, and the harness needs a
warm-up plus at least 3 timed calls per side: ~8 minutes, over the 5-minute
budget of a script. The 16-step programs measure the same steps
(same cache size, same positions) in a fraction of the time.

3. With --floor (lengths default to N = 256, 2048, 8192): the per-token
   cost next to the memory-bound floor of a step, (bytes of the weights a
   step reads + bytes of all caches at L) / the read bandwidth measured in
   the same run (`harness.read_bandwidth`: a 256 MiB array summed, and read
   by a matvec, under XLA; the faster of the two). A step reads every
   weight once except the embedding tables, of which it reads one row.
   Beside it, timed in the same interleaved rounds, the step's weight
   matrices alone as a chain of XLA matvecs (`matvec_program`): the floor
   of this machine's XLA for these shapes, so "measured / matvecs" is
   what the rest of a step (attention, norms, softmax, cache writes)
   adds.

Run: `python benchmarks/generation_benchmark.py [--quick] [--num-layers 6]
[--attention MultiHeadSelfAttention ...] [--repeats 5] [--budget 280]
[--floor]`. Prints markdown tables and writes
benchmarks/results/generation.json (with --floor: generation_floor.json).
"""

import argparse
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

PROMPT_LENGTH = 16
LENGTHS = (128, 512, 2048)
FLOOR_LENGTHS = (256, 2048, 8192)
STEPS = 16  # decoding steps per timed program of the per-token measurement
KINDS = ("MultiHeadSelfAttention", "LocalBlockAttention", "RelativeGlobalAttention")


def self_attention(kind, args, index):
    import keras_attn.layers as attn

    common = dict(
        num_heads=args.num_heads,
        key_dim=args.hidden_dim // args.num_heads,
        name=f"self_attention_{index}",
    )
    if kind == "MultiHeadSelfAttention":
        return attn.MultiHeadSelfAttention(**common)
    if kind == "LocalBlockAttention":
        return attn.LocalBlockAttention(
            block_size=args.block_size, memory_flange=args.block_size, **common
        )
    return attn.RelativeGlobalAttention(max_relative_position=args.max_relative_position, **common)


def build_keras_attn(kind, args, max_length):
    """Functional decoder-only LM (tokens -> logits)."""
    import keras

    import keras_attn.layers as attn
    from keras_attn.layers.projection import Projection

    tokens = keras.Input((None,), dtype="int32", name="tokens")
    x = attn.TokenAndPositionEmbedding(
        args.vocabulary_size,
        args.hidden_dim,
        sequence_length=max_length,
        mask_zero=True,
        name="embedding",
    )(tokens)
    for i in range(args.num_layers):
        x = attn.TransformerDecoder(
            args.intermediate_dim,
            self_attention=self_attention(kind, args, i),
            name=f"decoder_layer_{i}",
        )(x)
    logits = Projection(args.vocabulary_size, name="logits")(x)  # as keras_attn.models do
    return keras.Model(tokens, logits)


class KerasHubLM:
    """The same stack from keras_hub.layers, run through its caches."""

    def __init__(self, args, max_length):
        import keras
        import keras_hub
        from keras import ops

        self.args, self.max_length = args, max_length
        # No implicit mask, as keras-hub's CausalLM backbones: with a cache,
        # keras-hub's decoder would compare it with the cache length.
        self.embedding = keras_hub.layers.TokenAndPositionEmbedding(
            args.vocabulary_size, max_length, args.hidden_dim
        )
        self.decoders = [
            keras_hub.layers.TransformerDecoder(args.intermediate_dim, args.num_heads)
            for _ in range(args.num_layers)
        ]
        self.dense = keras.layers.Dense(args.vocabulary_size)
        x = self.embedding(ops.ones((1, 2), "int32"))
        for layer in self.decoders:
            x = layer(x)
        self.dense(x)
        self.num_params = (
            self.embedding.count_params()
            + self.dense.count_params()
            + sum(layer.count_params() for layer in self.decoders)
        )
        self.version = keras_hub.__version__

    def empty_cache(self, batch):
        from keras import ops

        head_dim = self.args.hidden_dim // self.args.num_heads
        return ops.zeros(
            (batch, self.args.num_layers, 2, self.max_length, self.args.num_heads, head_dim),
            "float32",
        )

    def __call__(self, tokens, cache, index):
        from keras import ops

        x = self.embedding(tokens, start_index=index)
        caches = []
        for i, layer in enumerate(self.decoders):
            x, layer_cache = layer(
                x, self_attention_cache=cache[:, i], self_attention_cache_update_index=index
            )
            caches.append(layer_cache)
        return self.dense(x), ops.stack(caches, axis=1)


def step_bytes(model, batch_size, max_length):
    """Bytes one decoding step must read: the weights (one row of each
    embedding table) and every layer's cache at `max_length` slots."""
    weights = 0
    for variable in model.weights:
        size = 4 * int(math.prod(variable.shape))
        if "embedding" in variable.path:
            size = 4 * int(variable.shape[-1])  # one row of the table
        weights += size
    caches = 0
    for layer in model._flatten_layers():
        if hasattr(layer, "init_cache") and not hasattr(layer, "self_attention"):
            caches += 4 * int(math.prod(layer.init_cache(batch_size, max_length).shape))
    return weights, caches


def matvec_program(tf, model, batch_size):
    """The step's weight matrices alone: one XLA program running STEPS
    passes of a (B, d) vector through every kernel of `model` in step order
    (no attention, norms, softmax or cache; a slice or zero pad between
    two matrices of different widths, and nothing else). What reading the
    weights as XLA matvecs costs on this machine: the part of a step that
    no attention code can remove."""
    from keras import ops

    kernels = [v for v in model.weights if len(v.shape) == 2 and "embedding" not in v.path]

    def fit(h, width):
        if h.shape[1] >= width:
            return h[:, :width]
        return ops.pad(h, [(0, 0), (0, width - h.shape[1])])

    def passes(h):
        def body(i, h):
            for kernel in kernels:
                h = ops.matmul(fit(h, kernel.shape[0]), kernel)
            return i + 1, h

        return ops.while_loop(lambda i, h: i < STEPS, body, (0, h))[1]

    run = harness.compile_function(passes, jit_compile=True)
    start = tf.fill((batch_size, int(kernels[-1].shape[1])), 0.01)
    return lambda: run(start)


def prompt_tokens(tf, batch_size):
    import numpy as np

    return tf.constant(np.tile(np.arange(1, PROMPT_LENGTH + 1, dtype="int32"), (batch_size, 1)))


def step_programs(tf, model, hub, batch_size, max_length):
    """Compiled programs running STEPS greedy steps from a given position
    (the state is prefilled with the prompt first, outside the timing)."""
    from keras import ops

    from keras_attn.generation import CachedDecoder

    decoder = CachedDecoder(model)
    prompt = prompt_tokens(tf, batch_size)

    def ours_prefill(prompt):
        state = decoder.initial_state(batch_size, max_length)
        logits, state = decoder(prompt, 0, state, logits_index=PROMPT_LENGTH - 1)
        return ops.cast(ops.argmax(logits[:, -1], axis=-1), "int32")[:, None], state

    def ours_steps(token, start, state):
        def body(i, token, state):
            logits, state = decoder(token, start + i, state)
            return i + 1, ops.cast(ops.argmax(logits[:, -1], axis=-1), "int32")[:, None], state

        _, token, state = ops.while_loop(lambda i, t, s: i < STEPS, body, (0, token, state))
        return token

    def hub_prefill(prompt):
        logits, cache = hub(prompt, hub.empty_cache(batch_size), 0)
        return ops.cast(ops.argmax(logits[:, -1], axis=-1), "int32")[:, None], cache

    def hub_steps(token, start, cache):
        def body(i, token, cache):
            logits, cache = hub(token, cache, start + i)
            return i + 1, ops.cast(ops.argmax(logits[:, -1], axis=-1), "int32")[:, None], cache

        _, token, cache = ops.while_loop(lambda i, t, c: i < STEPS, body, (0, token, cache))
        return token

    programs = {}
    for name, prefill, steps in (
        ("keras_attn", ours_prefill, ours_steps),
        ("keras_hub", hub_prefill, hub_steps),
    ):
        if name == "keras_hub" and hub is None:
            continue
        token, state = harness.compile_function(prefill, jit_compile=True)(prompt)
        run = harness.compile_function(steps, jit_compile=True)
        programs[name] = (run, token, state)
    return programs


def full_programs(tf, model, hub, batch_size, n):
    """Compiled end-to-end generation of n tokens after the prompt."""
    from keras import ops

    from keras_attn.generation import greedy_search

    max_length = PROMPT_LENGTH + n
    programs = {
        "keras_attn": harness.compile_function(
            lambda prompt: greedy_search(model, prompt, max_length), jit_compile=True
        )
    }
    if hub is not None:
        import keras_hub

        sampler = keras_hub.samplers.GreedySampler()

        def generate(prompt):
            batch = ops.shape(prompt)[0]
            _, cache = hub(prompt, hub.empty_cache(batch), 0)  # prefill, as CausalLM._build_cache
            padded = ops.pad(prompt, [[0, 0], [0, n]])
            mask = ops.broadcast_to(
                ops.arange(max_length)[None, :] < PROMPT_LENGTH, ops.shape(padded)
            )

            def next_fn(tokens, cache, index):
                token = ops.slice(tokens, [0, index - 1], [batch, 1])
                logits, cache = hub(token, cache, index - 1)
                return logits[:, 0], None, cache

            return sampler(next_fn, padded, cache=cache, index=PROMPT_LENGTH, mask=mask)

        programs["keras_hub"] = harness.compile_function(generate, jit_compile=True)
    prompt = prompt_tokens(tf, batch_size)
    return {name: (lambda p=p: p(prompt)) for name, p in programs.items()}


def main():
    parser = harness.add_common_arguments(
        argparse.ArgumentParser(description=__doc__.splitlines()[0])
    )
    harness.add_language_model_arguments(parser)
    parser.add_argument("--block-size", type=int, default=128)
    parser.add_argument("--max-relative-position", type=int, default=512)
    parser.add_argument(
        "--lengths", type=int, nargs="+", default=list(LENGTHS), help="numbers of generated tokens"
    )
    parser.add_argument(
        "--attention",
        nargs="+",
        default=["MultiHeadSelfAttention"],
        choices=KINDS,
        help="self-attention types of the keras_attn model (the first is compared with "
        "keras-hub end to end)",
    )
    parser.add_argument("--skip-keras-hub", action="store_true")
    parser.add_argument(
        "--floor",
        action="store_true",
        help="report ms/token against the memory-bound floor (lengths 256 2048 8192 "
        "unless --lengths is given)",
    )
    args = parser.parse_args()
    if args.floor and args.lengths == list(LENGTHS):
        args.lengths = list(FLOOR_LENGTHS)
    lengths = sorted(args.lengths)
    if args.quick:
        lengths, args.num_layers = [128], 2
        args.repeats = min(args.repeats, 2)
    budget = harness.Budget(args.budget)
    env_start = harness.environment()
    tf = harness.setup_tensorflow()
    import keras

    use_hub = not args.skip_keras_hub
    if use_hub:
        try:
            import keras_hub  # noqa: F401
        except ImportError:
            use_hub = False
    roofline = [harness.matmul_roofline()]
    bandwidth = [harness.read_bandwidth()] if args.floor else []
    floor_bytes = {}

    # 1. Per-token cost by position, per cache size.
    per_token, params = {}, {}
    for kind_index, kind in enumerate(args.attention):
        for n in lengths:
            max_length = PROMPT_LENGTH + n
            keras.utils.set_random_seed(0)
            model = build_keras_attn(kind, args, max_length)
            params[kind] = model.count_params()
            if args.floor and kind_index == 0:
                floor_bytes[n] = step_bytes(model, args.batch_size, max_length)
            hub = KerasHubLM(args, max_length) if use_hub and kind_index == 0 else None
            if hub is not None:
                params["keras_hub"] = hub.num_params
            programs = step_programs(tf, model, hub, args.batch_size, max_length)
            positions = {"early": PROMPT_LENGTH, "late": max_length - STEPS}
            candidates = {}
            for name, (run, token, state) in programs.items():
                for where, start in positions.items():
                    index = tf.constant(start, "int32")
                    candidates[(name, where)] = (
                        lambda run=run, token=token, index=index, state=state: run(
                            token, index, state
                        )
                    )
            if args.floor and kind_index == 0:
                candidates[("matvecs", "early")] = matvec_program(tf, model, args.batch_size)
            records = harness.time_interleaved(candidates, repeats=args.repeats, budget=budget)
            for (name, where), record in records.items():
                key = {"keras_attn": kind}.get(name, name)
                per_token.setdefault((key, n), {})[where] = {
                    "ms_per_token": 1e3 * record["median_s"] / STEPS,
                    "cpu_ms_per_token": 1e3 * record["cpu_median_s"] / STEPS,
                    "first_call_s": record["first_s"],
                    "repeats_done": record["repeats_done"],
                }
            for key in {kind} | ({"keras_hub"} if hub is not None else set()):
                entry = per_token[(key, n)]
                entry["tokens_per_s"] = 2e3 / (
                    entry["early"]["ms_per_token"] + entry["late"]["ms_per_token"]
                )
            print(
                f"{kind} L={max_length}: "
                + ", ".join(
                    f"{k} {v['early']['ms_per_token']:.1f}/{v['late']['ms_per_token']:.1f} ms"
                    for (k, m), v in per_token.items()
                    if m == n and "late" in v
                )
                + f" ({budget.elapsed():.0f} s)",
                file=sys.stderr,
                flush=True,
            )

    # 2. End to end, first attention type vs keras-hub, while the budget lasts.
    end_to_end = {}
    kind = args.attention[0]
    for n in lengths:
        # Warm-up + 3 calls per side at the measured per-token rates, plus
        # about 30 s of XLA compilation.
        rates = [
            per_token[key]["tokens_per_s"]
            for key in ((kind, n), ("keras_hub", n))
            if key in per_token
        ]
        predicted = 30.0 + sum(4 * n / rate for rate in rates)
        if not budget.fits(predicted):
            end_to_end[n] = {
                "skipped": f"skipped (out of budget: ~{predicted:.0f} s predicted, "
                f"{max(0.0, budget.left()):.0f} s left)"
            }
            continue
        keras.utils.set_random_seed(0)
        model = build_keras_attn(kind, args, PROMPT_LENGTH + n)
        hub = KerasHubLM(args, PROMPT_LENGTH + n) if use_hub else None
        records = harness.time_interleaved(
            full_programs(tf, model, hub, args.batch_size, n),
            repeats=min(args.repeats, 3),
            budget=budget,
        )
        for record in records.values():
            record["tokens_per_s"] = n * args.batch_size / record["median_s"]
        end_to_end[n] = records
        print(
            f"end to end N={n}: "
            + ", ".join(f"{k} {r['tokens_per_s']:.1f} tok/s" for k, r in records.items())
            + f" ({budget.elapsed():.0f} s)",
            file=sys.stderr,
            flush=True,
        )
    roofline.append(harness.matmul_roofline())
    if args.floor:
        bandwidth.append(harness.read_bandwidth())
    env_end = harness.environment()

    rows = []
    for n in lengths:
        for key in list(args.attention) + (["keras_hub"] if use_hub else []):
            entry = per_token.get((key, n))
            if not entry:
                continue
            hub_entry = per_token.get(("keras_hub", n))
            ratio = (
                f"{entry['tokens_per_s'] / hub_entry['tokens_per_s']:.2f}x"
                if hub_entry and key != "keras_hub"
                else "-"
            )
            full = end_to_end.get(n, {})
            side = "keras_hub" if key == "keras_hub" else ("keras_attn" if key == kind else None)
            measured = full.get(side) if side and "skipped" not in full else None
            flat = entry["late"]["ms_per_token"] / entry["early"]["ms_per_token"]
            rows.append(
                [
                    n,
                    PROMPT_LENGTH + n,
                    key,
                    f"{params.get(key, 0):,}",
                    f"{entry['early']['ms_per_token']:.1f}",
                    f"{entry['late']['ms_per_token']:.1f}",
                    f"{flat:.2f}",
                    f"{entry['tokens_per_s']:.1f}",
                    ratio,
                    f"{measured['tokens_per_s']:.1f}" if measured else full.get("skipped", "-"),
                ]
            )
    lines = [
        f"Cached greedy decoding, decoder-only LM: {args.num_layers} layers, d {args.hidden_dim}, "
        f"{args.num_heads} heads, d_ff {args.intermediate_dim}, vocabulary {args.vocabulary_size}, batch "
        f"{args.batch_size}, prompt {PROMPT_LENGTH} tokens, one XLA program per measurement. Per-token cost: "
        f"{STEPS}-step programs from the first (early) and last (late) positions of a cache of L = prompt + N "
        f"slots, median of {args.repeats} interleaved calls; tokens/s = 1 / mean per-token cost. End to end: "
        "the whole generation (prefill + N steps), median of 3 interleaved calls. Goal: keras_attn tokens/s "
        ">= keras-hub's, late / early ~ 1.",
        "",
        harness.markdown_table(
            [
                "N",
                "cache L",
                "model",
                "params",
                "ms/token early",
                "ms/token late",
                "late / early",
                "tokens/s",
                "vs keras-hub",
                "end-to-end tokens/s",
            ],
            rows,
        ),
        "",
        f"Total {budget.elapsed():.0f} s; {harness.load_note(env_start, env_end)}.",
    ]
    floor_rows = []
    if args.floor:
        gbps = max(b["gbps"] for b in bandwidth)
        for n in lengths:
            weights, caches = floor_bytes[n]
            floor_ms = 1e3 * (weights + caches) / (gbps * 1e9)
            ours, hub_entry = per_token.get((kind, n)), per_token.get(("keras_hub", n))
            if not ours:
                continue
            ms = 1e3 / ours["tokens_per_s"]
            matvecs = per_token.get(("matvecs", n), {}).get("early", {}).get("ms_per_token")
            full = end_to_end.get(n, {})
            e2e = full.get("keras_attn") if "skipped" not in full else None
            floor_rows.append(
                [
                    n,
                    PROMPT_LENGTH + n,
                    f"{weights / 2**20:.1f}",
                    f"{caches / 2**20:.1f}",
                    f"{floor_ms:.2f}",
                    f"{ms:.2f}",
                    f"{ms / floor_ms:.2f}x",
                    f"{matvecs:.2f} ({ms / matvecs:.2f}x)" if matvecs else "-",
                    f"{1e3 * e2e['median_s'] / n:.2f} ({1e3 * e2e['median_s'] / n / floor_ms:.2f}x)"
                    if e2e
                    else "-",
                    f"{1e3 / hub_entry['tokens_per_s']:.2f}" if hub_entry else "-",
                    f"{ours['tokens_per_s'] / hub_entry['tokens_per_s']:.2f}x"
                    if hub_entry
                    else "-",
                ]
            )
        lines += [
            "",
            f"Per-token cost vs the memory-bound floor ({kind}): floor = (weight bytes a step reads + all "
            f"caches at L) / {gbps:.1f} GB/s, the read bandwidth of this run (best of a 256 MiB float32 sum "
            "and a (1, 4096) x (4096, 16384) matvec under XLA: "
            + "; ".join(
                f"sum {b['sum_gbps']:.1f}, matvec {b['matvec_gbps']:.1f} GB/s" for b in bandwidth
            )
            + " at start and end). ms/token: mean of early and late 16-step programs; matvecs: the "
            "same weight matrices read as a chain of XLA matvecs and nothing else, 16 passes per program, "
            "timed in the same interleaved rounds (measured / that in brackets); end to end: "
            "(prefill + N steps) / N.",
            "",
            harness.markdown_table(
                [
                    "N",
                    "cache L",
                    "weights MiB",
                    "caches MiB",
                    "floor ms/token",
                    "ms/token",
                    "measured / floor",
                    "matvecs ms/token (measured / matvecs)",
                    "end-to-end ms/token (/ floor)",
                    "keras-hub ms/token",
                    "tokens/s vs keras-hub",
                ],
                floor_rows,
            ),
        ]
    print("\n".join(lines))
    harness.write_results(
        harness.output_path(args, "generation_floor" if args.floor else "generation"),
        {
            "config": {
                **{k: v for k, v in vars(args).items() if k not in ("output", "memory_worker")},
                "lengths": lengths,
                "prompt_length": PROMPT_LENGTH,
                "steps_per_program": STEPS,
            },
            "environment": {"start": env_start, "end": env_end},
            "matmul_roofline": roofline,
            "read_bandwidth": bandwidth,
            "floor": [
                {"generated_tokens": n, "weight_bytes": w, "cache_bytes": c}
                for n, (w, c) in floor_bytes.items()
            ],
            "parameters": params,
            "per_token": [
                {"model": k, "generated_tokens": n, "cache_length": PROMPT_LENGTH + n, **v}
                for (k, n), v in per_token.items()
            ],
            "end_to_end": {str(n): v for n, v in end_to_end.items()},
            "table": "\n".join(lines),
            "total_s": budget.elapsed(),
        },
    )


if __name__ == "__main__":
    main()
