"""Cached greedy decoding on TensorFlow and on JAX, side by side in one run.

The same decoder-only LM as `generation_benchmark.py` (token + learned
position embedding, --num-layers (default 6) post-norm TransformerDecoder
blocks of width 512 with MultiHeadSelfAttention, 8 heads, d_ff 2048, Projection
(Dense) to 512 logits; batch 1; prompt = the 16 token ids 1..16; greedy, no end
token), decoded end to end (prefill + N steps) by `greedy_search` over
`CachedDecoder`, compiled by `keras_attn.generation.compile_generation`:
`tf.function(jit_compile=True)` on TensorFlow, `jax.jit` (weights passed in
as state) on JAX. Both are XLA programs on the CPU.

A process has one Keras backend, so this script is a driver: it starts one
worker process per backend (`KERAS_BACKEND=tensorflow` and `=jax`) and keeps
both alive. The TensorFlow worker builds the model (seed 0) and saves its
weights to a `.weights.h5` file; the JAX worker builds the same architecture
and loads them: same weights on both sides. For each N the driver has both
workers compile and run once (warm-up; the generated tokens of the two are
compared), then asks for timed calls alternately, TF JAX TF JAX ... (the
idle worker waits on its stdin), and reports the median wall and process
CPU time of each (harness conventions: --repeats, --budget, --quick,
--output). tokens/s = N * batch / median wall time.

Run: `python benchmarks/generation_backends_benchmark.py [--quick]
[--lengths 128 512] [--repeats 5] [--budget 280]`. Needs jax installed
next to tensorflow. Prints a markdown table and writes
benchmarks/results/generation_backends.json.
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

PROMPT_LENGTH = 16
LENGTHS = (128, 512)
BACKENDS = ("tensorflow", "jax")
_REPLY = "@@reply "  # prefix of protocol lines on a worker's stdout


# ------------------------------------------------------------------ worker
def build_model(args, sequence_length):
    import keras

    import keras_attn.layers as attn
    from keras_attn.layers.projection import Projection

    tokens = keras.Input((None,), dtype="int32", name="tokens")
    x = attn.TokenAndPositionEmbedding(
        args.vocabulary_size,
        args.hidden_dim,
        sequence_length=sequence_length,
        mask_zero=True,
        name="embedding",
    )(tokens)
    for i in range(args.num_layers):
        x = attn.TransformerDecoder(
            args.intermediate_dim,
            self_attention=attn.MultiHeadSelfAttention(
                num_heads=args.num_heads,
                key_dim=args.hidden_dim // args.num_heads,
                name=f"self_attention_{i}",
            ),
            name=f"decoder_layer_{i}",
        )(x)
    return keras.Model(tokens, Projection(args.vocabulary_size, name="logits")(x))


def worker(args):
    """One backend: answers `compile N`, `run N`, `quit` on stdin."""
    # Under JAX too: keras.utils.set_random_seed imports TensorFlow (to seed
    # it) whenever it is installed, and the import should be a quiet one.
    harness.setup_tensorflow()
    import keras
    import numpy as np

    from keras_attn.generation import compile_generation, greedy_search

    assert keras.backend.backend() == args.worker, keras.backend.backend()
    keras.utils.set_random_seed(0)
    model = build_model(args, PROMPT_LENGTH + max(args.lengths))
    if args.save_weights:
        model.save_weights(args.weights)
    else:
        model.load_weights(args.weights)
    prompt = keras.ops.convert_to_tensor(
        np.tile(np.arange(1, PROMPT_LENGTH + 1, dtype="int32"), (args.batch_size, 1))
    )
    programs = {}

    def reply(**payload):
        print(_REPLY + json.dumps(payload), flush=True)

    reply(ready=True, params=model.count_params())
    for line in sys.stdin:
        command, *rest = line.split()
        if command == "quit":
            break
        n = int(rest[0])
        if command == "compile":
            programs[n] = compile_generation(
                lambda prompt, n=n: greedy_search(model, prompt, PROMPT_LENGTH + n), model
            )
        wall, cpu = time.perf_counter(), time.process_time()
        tokens = np.asarray(programs[n](prompt))
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        reply(
            wall_s=wall,
            cpu_s=cpu,
            tokens=tokens[0, PROMPT_LENGTH:].tolist() if command == "compile" else None,
        )


# ------------------------------------------------------------------ driver
class Worker:
    def __init__(self, backend, args, weights, save_weights):
        env = dict(os.environ, KERAS_BACKEND=backend)
        env["PYTHONPATH"] = os.pathsep.join(
            filter(None, [harness.PROJECT_ROOT, env.get("PYTHONPATH")])
        )
        command = [
            sys.executable,
            os.path.abspath(__file__),
            "--worker",
            backend,
            "--weights",
            weights,
            "--lengths",
            *map(str, args.lengths),
        ]
        for name in (
            "num_layers",
            "hidden_dim",
            "num_heads",
            "intermediate_dim",
            "vocabulary_size",
            "batch_size",
        ):
            command += [f"--{name.replace('_', '-')}", str(getattr(args, name))]
        if save_weights:
            command.append("--save-weights")
        self.backend = backend
        self.process = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
            cwd=harness.PROJECT_ROOT,
        )
        self.ready = self.read()

    def read(self):
        for line in self.process.stdout:
            if line.startswith(_REPLY):
                return json.loads(line[len(_REPLY) :])
        raise RuntimeError(
            f"the {self.backend} worker exited (code {self.process.wait()}); see its stderr"
        )

    def ask(self, command):
        self.process.stdin.write(command + "\n")
        self.process.stdin.flush()
        return self.read()

    def close(self):
        try:
            self.process.stdin.write("quit\n")
            self.process.stdin.close()
        except OSError:
            pass
        self.process.wait(timeout=60)


def backend_versions():
    from importlib.metadata import PackageNotFoundError, version

    versions = {}
    for package in ("tensorflow", "keras", "jax", "jaxlib"):
        try:
            versions[package] = version(package)
        except PackageNotFoundError:
            versions[package] = None
    return versions


def main():
    parser = harness.add_common_arguments(
        argparse.ArgumentParser(description=__doc__.splitlines()[0])
    )
    harness.add_language_model_arguments(parser)
    parser.add_argument(
        "--lengths", type=int, nargs="+", default=list(LENGTHS), help="numbers of generated tokens"
    )
    parser.add_argument("--worker", choices=BACKENDS, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--weights", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--save-weights", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.lengths = sorted(args.lengths)
    if args.worker:
        return worker(args)
    if args.quick:
        args.lengths, args.num_layers = [32], 2
        args.repeats = min(args.repeats, 2)
    budget = harness.Budget(args.budget)
    env_start = harness.environment()
    results, params, agree = {}, None, {}
    with tempfile.TemporaryDirectory() as folder:
        weights = os.path.join(folder, "lm.weights.h5")
        # TensorFlow first: it writes the weights the JAX worker loads.
        workers = {}
        for backend in BACKENDS:
            workers[backend] = Worker(backend, args, weights, save_weights=backend == "tensorflow")
        params = {b: w.ready["params"] for b, w in workers.items()}
        try:
            for n in args.lengths:
                if results:
                    # Warm-up + repeats per side at the rates of the last N,
                    # scaled by length, plus compilation as measured.
                    last = results[max(results)]
                    predicted = sum(
                        r["first_s"] + (1 + args.repeats) * r["median_s"] * n / max(results)
                        for r in last.values()
                    )
                    if not budget.fits(predicted):
                        results[n] = {
                            "skipped": f"skipped (out of budget: ~{predicted:.0f} s predicted, "
                            f"{max(0.0, budget.left()):.0f} s left)"
                        }
                        continue
                records = {}
                for backend, w in workers.items():
                    first = w.ask(f"compile {n}")
                    records[backend] = {
                        "first_s": first["wall_s"],
                        "tokens": first["tokens"],
                        "runs_s": [],
                        "cpu_runs_s": [],
                    }
                tf_tokens, jax_tokens = records["tensorflow"]["tokens"], records["jax"]["tokens"]
                same = [a == b for a, b in zip(tf_tokens, jax_tokens)]
                agree[n] = {
                    "equal": all(same),
                    "first_difference": None if all(same) else same.index(False),
                }
                for round_index in range(args.repeats):
                    if round_index >= 3 and not budget.fits(
                        sum(r["runs_s"][-1] for r in records.values())
                    ):
                        break
                    for backend, w in workers.items():
                        timed = w.ask(f"run {n}")
                        records[backend]["runs_s"].append(timed["wall_s"])
                        records[backend]["cpu_runs_s"].append(timed["cpu_s"])
                for record in records.values():
                    record["median_s"] = statistics.median(record["runs_s"])
                    record["cpu_median_s"] = statistics.median(record["cpu_runs_s"])
                    record["repeats_done"] = len(record["runs_s"])
                    record["tokens_per_s"] = n * args.batch_size / record["median_s"]
                    record["cpu_tokens_per_s"] = n * args.batch_size / record["cpu_median_s"]
                results[n] = records
                print(
                    f"N={n}: "
                    + ", ".join(f"{b} {r['tokens_per_s']:.1f} tok/s" for b, r in records.items())
                    + f" ({budget.elapsed():.0f} s)",
                    file=sys.stderr,
                    flush=True,
                )
        finally:
            for w in workers.values():
                w.close()
    env_end = harness.environment()

    rows = []
    for n in args.lengths:
        entry = results[n]
        if "skipped" in entry:
            rows.append([n, PROMPT_LENGTH + n, entry["skipped"], "-", "-", "-", "-", "-", "-"])
            continue
        tf_record, jax_record = entry["tensorflow"], entry["jax"]
        rows.append(
            [
                n,
                PROMPT_LENGTH + n,
                f"{tf_record['tokens_per_s']:.1f}",
                f"{jax_record['tokens_per_s']:.1f}",
                f"{jax_record['tokens_per_s'] / tf_record['tokens_per_s']:.2f}x",
                f"{1e3 * tf_record['cpu_median_s'] / n:.1f} / {1e3 * jax_record['cpu_median_s'] / n:.1f}",
                f"{tf_record['first_s']:.1f} / {jax_record['first_s']:.1f}",
                "yes"
                if agree[n]["equal"]
                else f"no (from generated token {agree[n]['first_difference']})",
                f"{tf_record['repeats_done']}",
            ]
        )
    versions = backend_versions()
    lines = [
        f"Cached greedy decoding, TensorFlow vs JAX backend, same weights: decoder-only LM, "
        f"{args.num_layers} layers, d {args.hidden_dim}, {args.num_heads} heads, d_ff {args.intermediate_dim}, "
        f"vocabulary {args.vocabulary_size}, {params['tensorflow']:,} parameters, batch {args.batch_size}, "
        f"prompt {PROMPT_LENGTH} tokens; end to end (prefill + N steps) as one XLA program "
        f"(`compile_generation`: tf.function(jit_compile=True) / jax.jit). Median of the interleaved calls "
        f"after a warm-up; tokens/s = N / median wall time. TensorFlow {versions['tensorflow']}, "
        f"JAX {versions['jax']} (jaxlib {versions['jaxlib']}), Keras {versions['keras']}.",
        "",
        harness.markdown_table(
            [
                "N",
                "cache L",
                "TF tokens/s",
                "JAX tokens/s",
                "JAX / TF",
                "CPU ms/token TF / JAX",
                "first call s TF / JAX",
                "same tokens",
                "calls",
            ],
            rows,
        ),
        "",
        f"Total {budget.elapsed():.0f} s; {harness.load_note(env_start, env_end)}.",
    ]
    print("\n".join(lines))
    harness.write_results(
        harness.output_path(args, "generation_backends"),
        {
            "config": {
                k: v
                for k, v in vars(args).items()
                if k not in ("output", "memory_worker", "worker", "weights", "save_weights")
            }
            | {"prompt_length": PROMPT_LENGTH},
            "environment": {"start": env_start, "end": env_end, "versions": versions},
            "parameters": params,
            "results": {str(n): v for n, v in results.items()},
            "same_tokens": {str(n): v for n, v in agree.items()},
            "table": "\n".join(lines),
            "total_s": budget.elapsed(),
        },
    )


if __name__ == "__main__":
    main()
