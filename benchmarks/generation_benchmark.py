"""Generation speed: cached greedy decoding vs full recomputation vs keras-hub.

Decoder-only language model (TokenAndPositionEmbedding with learned
positions, TransformerDecoder blocks, logits), untrained: speed does not
depend on the weights or on the tokens. The prompt is a fixed primer of 16
token ids (1..16); every run generates exactly N tokens (no end token).

Measured, per self-attention type available in keras_attn.layers:

* cached greedy decoding (`greedy_search` through `CachedDecoder`, one XLA
  program: `tf.function(jit_compile=True, autograph=False)`), tokens per
  second for N = 128, 512, 2048 (cache size 16 + N). Each program is run
  once to compile, then timed on a second run;
* full recomputation: the model's forward pass over the whole prefix for
  each new token. Its cost per token is measured at prefix lengths
  16 + {128, 512, 2048} (graph mode, dynamic length, as a naive loop runs
  it) and summed over the N positions with the quadratic through those
  three points (the forward cost is a + b·p + c·p²). At N = 128 the real
  loop (`greedy_search` through `RecomputingDecoder`) is also timed, to
  check the estimate;
* per-token cost at an early (16) and a late (2000) position: one cached
  step compiled alone (XLA) over a cache of 2064 positions, median of
  interleaved repetitions. A standalone call also copies the caches in and
  out, so its absolute time is above the in-loop cost; what matters is
  early vs late.

keras-hub: `keras_hub.samplers.GreedySampler` driving the equivalent
keras-hub stack (TokenAndPositionEmbedding, TransformerDecoder with its
CachedMultiHeadAttention, Dense), prompt prefilled through the caches as
keras-hub's CausalLM does, XLA-compiled the same way; skipped if keras-hub
is not installed (it is in the `benchmarks` extra).

Run: python benchmarks/generation_benchmark.py [--num-layers 6]
Writes benchmarks/results/generation.json and prints markdown tables.
"""

import argparse
import json
import os
import platform
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

tf.get_logger().setLevel("ERROR")  # one tf.function per length is on purpose
from keras import ops  # noqa: E402

import keras_attn.layers as attn  # noqa: E402
from keras_attn.generation import CachedDecoder, RecomputingDecoder, greedy_search  # noqa: E402

PROMPT_LENGTH = 16
LENGTHS = (128, 512, 2048)
EARLY, LATE = 16, 2000


def self_attention(kind, args, index):
    common = dict(num_heads=args.num_heads, key_dim=args.hidden_dim // args.num_heads,
                  name=f"self_attention_{index}")
    if kind == "MultiHeadSelfAttention":
        return attn.MultiHeadSelfAttention(**common)
    if kind == "LocalBlockAttention":
        return attn.LocalBlockAttention(block_size=args.block_size, memory_flange=args.block_size,
                                        **common)
    return attn.RelativeGlobalAttention(max_relative_position=args.max_relative_position, **common)


def build_model(kind, args, max_length):
    tokens = keras.Input((None,), dtype="int32", name="tokens")
    x = attn.TokenAndPositionEmbedding(
        args.vocabulary_size, args.hidden_dim, sequence_length=max_length, mask_zero=True,
        name="embedding",
    )(tokens)
    for i in range(args.num_layers):
        x = attn.TransformerDecoder(
            args.intermediate_dim, self_attention=self_attention(kind, args, i),
            name=f"decoder_layer_{i}",
        )(x)
    logits = keras.layers.Dense(args.vocabulary_size, name="logits")(x)
    return keras.Model(tokens, logits)


def prompt_tokens(batch_size):
    return tf.constant(np.tile(np.arange(1, PROMPT_LENGTH + 1, dtype="int32"), (batch_size, 1)))


def time_call(fn, *args):
    start = time.perf_counter()
    out = fn(*args)
    keras.tree.map_structure(lambda x: np.asarray(x), out)
    return time.perf_counter() - start


def compiled_twice(fn, *args):
    """(first call = compile + run, second call) in seconds."""
    first = time_call(fn, *args)
    return first, time_call(fn, *args)


def bench_cached(model, n, batch_size):
    function = tf.function(
        lambda prompt: greedy_search(model, prompt, PROMPT_LENGTH + n),
        jit_compile=True, autograph=False,
    )
    first, run = compiled_twice(function, prompt_tokens(batch_size))
    return {"compile_and_first_run_s": first, "run_s": run, "tokens_per_s": n * batch_size / run}


def bench_step_positions(model, batch_size, repeats):
    """Median time of one cached step at an early and a late position."""
    decoder = CachedDecoder(model)
    cache_length = PROMPT_LENGTH + max(LENGTHS)
    state = decoder.initial_state(batch_size, cache_length)
    step = tf.function(lambda token, index, state: decoder(token, index, state),
                       jit_compile=True, autograph=False)
    token = tf.ones((batch_size, 1), "int32")
    positions = {"early": tf.constant(EARLY), "late": tf.constant(LATE)}
    for index in positions.values():
        time_call(step, token, index, state)
    times = {name: [] for name in positions}
    for _ in range(repeats):
        for name, index in positions.items():  # interleaved: same machine noise
            times[name].append(time_call(step, token, index, state))
    return {f"{name}_ms": 1000 * statistics.median(t) for name, t in times.items()}


def bench_recompute(model, batch_size, measure_loop):
    forward = tf.function(
        lambda tokens: model(tokens, training=False),
        input_signature=[tf.TensorSpec((batch_size, None), tf.int32)], autograph=False,
    )
    lengths = [PROMPT_LENGTH + n for n in LENGTHS]
    time_call(forward, tf.ones((batch_size, PROMPT_LENGTH), "int32"))  # trace
    forward_s = {}
    for length in lengths:
        tokens = tf.ones((batch_size, length), "int32")
        time_call(forward, tokens)
        forward_s[length] = min(time_call(forward, tokens) for _ in range(2))
    # cost(p) = a + b p + c p^2 through the three points; a new token at
    # position p costs a forward over p + 1 positions.
    coefficients = np.polyfit(lengths, [forward_s[p] for p in lengths], 2)
    result = {"forward_ms": {str(p): 1000 * s for p, s in forward_s.items()}}
    for n in LENGTHS:
        positions = np.arange(PROMPT_LENGTH, PROMPT_LENGTH + n) + 1
        total = float(np.polyval(coefficients, positions).sum())
        result[f"estimated_tokens_per_s_{n}"] = n * batch_size / total
    if measure_loop:
        n = LENGTHS[0]
        loop = tf.function(
            lambda prompt: greedy_search(RecomputingDecoder(model), prompt, PROMPT_LENGTH + n),
            autograph=False,
        )
        first, run = compiled_twice(loop, prompt_tokens(batch_size))
        result[f"measured_tokens_per_s_{n}"] = n * batch_size / run
    return result


def bench_keras_hub(args, n, batch_size):
    import keras_hub

    max_length = PROMPT_LENGTH + n
    head_dim = args.hidden_dim // args.num_heads
    # No implicit mask, as keras-hub's CausalLM backbones: with a cache,
    # keras-hub's decoder would compare it with the cache length.
    embedding = keras_hub.layers.TokenAndPositionEmbedding(
        args.vocabulary_size, max_length, args.hidden_dim
    )
    decoders = [
        keras_hub.layers.TransformerDecoder(args.intermediate_dim, args.num_heads)
        for _ in range(args.num_layers)
    ]
    dense = keras.layers.Dense(args.vocabulary_size)
    x = embedding(ops.ones((1, 2), "int32"))
    for layer in decoders:
        x = layer(x)
    dense(x)
    num_params = (embedding.count_params() + dense.count_params()
                  + sum(layer.count_params() for layer in decoders))
    sampler = keras_hub.samplers.GreedySampler()

    def run_stack(tokens, cache, index):
        x = embedding(tokens, start_index=index)
        caches = []
        for i, layer in enumerate(decoders):
            x, layer_cache = layer(x, self_attention_cache=cache[:, i],
                                   self_attention_cache_update_index=index)
            caches.append(layer_cache)
        return dense(x), ops.stack(caches, axis=1)

    def generate(prompt):
        batch = ops.shape(prompt)[0]
        cache = ops.zeros(
            (batch, args.num_layers, 2, max_length, args.num_heads, head_dim), "float32"
        )
        _, cache = run_stack(prompt, cache, 0)  # prefill, as CausalLM._build_cache
        padded = ops.pad(prompt, [[0, 0], [0, n]])
        mask = ops.arange(max_length)[None, :] < PROMPT_LENGTH
        mask = ops.broadcast_to(mask, ops.shape(padded))

        def next_fn(tokens, cache, index):
            token = ops.slice(tokens, [0, index - 1], [batch, 1])
            logits, cache = run_stack(token, cache, index - 1)
            return logits[:, 0], None, cache

        return sampler(next_fn, padded, cache=cache, index=PROMPT_LENGTH, mask=mask)

    function = tf.function(generate, jit_compile=True, autograph=False)
    first, run = compiled_twice(function, prompt_tokens(batch_size))
    return {"compile_and_first_run_s": first, "run_s": run,
            "tokens_per_s": n * batch_size / run, "num_params": num_params,
            "version": keras_hub.__version__}


def main():
    global LENGTHS, LATE
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--num-layers", type=int, default=2)
    parser.add_argument("--hidden-dim", type=int, default=512)
    parser.add_argument("--num-heads", type=int, default=8)
    parser.add_argument("--intermediate-dim", type=int, default=2048)
    parser.add_argument("--vocabulary-size", type=int, default=512)
    parser.add_argument("--block-size", type=int, default=128)
    parser.add_argument("--max-relative-position", type=int, default=512)
    parser.add_argument("--batch-size", type=int, default=1)
    parser.add_argument("--step-repeats", type=int, default=15)
    parser.add_argument("--lengths", type=int, nargs="+", default=list(LENGTHS),
                        help="numbers of generated tokens (three, for the quadratic fit)")
    parser.add_argument("--skip-keras-hub", action="store_true")
    parser.add_argument("--output", default=os.path.join(os.path.dirname(__file__), "results",
                                                         "generation.json"))
    args = parser.parse_args()
    LENGTHS = tuple(args.lengths)
    LATE = min(LATE, PROMPT_LENGTH + max(LENGTHS) - 1)
    started = time.perf_counter()
    kinds = [k for k in ("MultiHeadSelfAttention", "LocalBlockAttention", "RelativeGlobalAttention")
             if k in attn.__all__]
    results = {
        "config": {**vars(args), "prompt_length": PROMPT_LENGTH, "lengths": LENGTHS,
                   "early_position": EARLY, "late_position": LATE},
        "environment": {"tensorflow": tf.__version__, "keras": keras.__version__,
                        "cpus": os.cpu_count(), "platform": platform.platform(),
                        "load_average_at_start": os.getloadavg()},
        "attention": {},
    }
    for kind in kinds:
        keras.utils.set_random_seed(0)
        entry = {}
        for n in LENGTHS:
            model = build_model(kind, args, PROMPT_LENGTH + n)
            entry[f"cached_{n}"] = bench_cached(model, n, args.batch_size)
            print(f"{kind} cached N={n}: {entry[f'cached_{n}']['tokens_per_s']:.1f} tok/s", flush=True)
        entry["num_params"] = model.count_params()
        entry["step_positions"] = bench_step_positions(model, args.batch_size, args.step_repeats)
        entry["recompute"] = bench_recompute(model, args.batch_size, measure_loop=True)
        print(f"{kind} steps {entry['step_positions']} recompute {entry['recompute']}", flush=True)
        results["attention"][kind] = entry
    if not args.skip_keras_hub:
        try:
            import keras_hub  # noqa: F401
        except ImportError:
            results["keras_hub"] = "not installed"
        else:
            results["keras_hub"] = {}
            for n in LENGTHS:
                keras.utils.set_random_seed(0)
                results["keras_hub"][str(n)] = bench_keras_hub(args, n, args.batch_size)
                print(f"keras-hub N={n}: {results['keras_hub'][str(n)]['tokens_per_s']:.1f} tok/s",
                      flush=True)
    results["environment"]["load_average_at_end"] = os.getloadavg()
    results["total_s"] = time.perf_counter() - started
    os.makedirs(os.path.dirname(args.output), exist_ok=True)
    with open(args.output, "w") as f:
        json.dump(results, f, indent=2)
    print_tables(results)


def print_tables(results):
    config = results["config"]
    keras_hub_results = results.get("keras_hub")
    print(f"\nDecoder-only LM: {config['num_layers']} layers, d {config['hidden_dim']}, "
          f"{config['num_heads']} heads, d_ff {config['intermediate_dim']}, "
          f"V {config['vocabulary_size']}, batch {config['batch_size']}, prompt "
          f"{PROMPT_LENGTH} tokens, greedy, tokens/s (higher is better).\n")
    print("| attention | params | N | cached (XLA) | full recompute | speedup | keras-hub GreedySampler |")
    print("|---|---|---|---|---|---|---|")
    for kind, entry in results["attention"].items():
        for n in LENGTHS:
            cached = entry[f"cached_{n}"]["tokens_per_s"]
            recompute = entry["recompute"][f"estimated_tokens_per_s_{n}"]
            measured = entry["recompute"].get(f"measured_tokens_per_s_{n}")
            text = f"{recompute:.1f} (est.)" + (f", {measured:.1f} measured" if measured else "")
            hub = ""
            if kind == "MultiHeadSelfAttention" and isinstance(keras_hub_results, dict):
                hub = f"{keras_hub_results[str(n)]['tokens_per_s']:.1f}"
            print(f"| {kind} | {entry['num_params']:,} | {n} | {cached:.1f} | {text} | "
                  f"{cached / recompute:.1f}x | {hub} |")
    print(f"\nPer-token cost by position (cache of {PROMPT_LENGTH + max(LENGTHS)}): one cached "
          "step compiled alone (median, ms; includes copying the caches in and out) and "
          "one full forward over the prefix (ms).\n")
    print(f"| attention | cached step @{EARLY} | cached step @{LATE} | "
          + " | ".join(f"forward @{PROMPT_LENGTH + n}" for n in LENGTHS) + " |")
    print("|---|---|---|" + "---|" * len(LENGTHS))
    for kind, entry in results["attention"].items():
        steps, forward = entry["step_positions"], entry["recompute"]["forward_ms"]
        print(f"| {kind} | {steps['early_ms']:.1f} | {steps['late_ms']:.1f} | "
              + " | ".join(f"{forward[str(PROMPT_LENGTH + n)]:.0f}" for n in LENGTHS) + " |")
    env = results["environment"]
    print(f"\nTotal {results['total_s']:.0f} s; load average at start {env['load_average_at_start'][0]:.1f}, "
          f"at end {env['load_average_at_end'][0]:.1f} on {env['cpus']} CPUs (shared machine: "
          "numbers are noisy).")


if __name__ == "__main__":
    main()
