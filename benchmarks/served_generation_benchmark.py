"""Served generation vs the same decoding in Python, side by side in one run.

Three exported generators (--generators, default all), each with the example's model size and
seeded random weights (the decoding work does not depend on them):

* `super_resolver`: the super-resolution Image Transformer (8x8 -> 32x32 RGB, 2 encoder + 3 decoder
  blocks, width 64, 4 heads, d_ff 256, local blocks of 96 with a memory flange of 96), sampling all
  3,072 intensities of an image with the cached decoder;
* `translator`: the translation Transformer of the README demo (2 layers, width 128), beam 4 up to
  64 tokens, through both signatures (string in and token ids in);
* `music_generator`: the JSB Music Transformer (3 layers, width 128, relative attention), 1 -> 256
  events with END never sampled, so every row runs all its steps.

Each is called two or three ways:

* **in Python**: the same decoding function the exporter wraps, under
  `tf.function(jit_compile=True)`, as the examples sample;
* **served**: the SavedModel loaded in a fresh process that imports only tensorflow (+
  tensorflow_text for the translator), its signature called as a client would; the default export
  (no XLA, which any TF Serving build runs) and `jit_compile=True` (the decoding loop XLA-compiled
  inside the SavedModel, which TF Serving runs on CPU with `--xla_cpu_compilation_enabled=true`,
  and on GPU); `served_eigen`: the default export with oneDNN off (`TF_ENABLE_ONEDNN_OPTS=0`),
  on by default in the pip TensorFlow on x86, absent from TF Serving builds without oneDNN.

For each batch size (--batch-sizes, default 1 and 8) every way is warmed up once, then timed
alternately (Python, served, Python, ...; each served worker waits on its stdin between calls); the
median wall time per call is reported, with the ratio served / Python, by wall time and by each
process's CPU time (all its threads; the steadier ratio on a shared machine). Goal (issue 48): the
default export within 3x of Python at batch 1 and 2x at batch 8. `--intra-op-threads N` runs every
process with N intra-op threads (TF Serving's `--tensorflow_intra_op_parallelism`).

`--budget` (seconds) bounds each generator's *timing* (not its setup: tokenizer training, exports,
XLA compiles, loads); a batch size whose predicted timing does not fit is reported as skipped.

Nodes per step: for each generator the nodes of one step of the default export's decoding loop (the
largest While body under serving_default, with the functions it calls; the branches of its
conditionals, of which one runs, counted apart) are counted by op type and by source, each node
attributed to the innermost keras_attn frame of the stack that created it (from the SavedModel's
debug info): mask, cache (the layers' cache updates and CachedDecoder's plumbing), check,
sampling/search, loop (the while loop's own bookkeeping), layer (everything else in layers/ and
models/). They go to stderr as each generator is exported, to the table's last column and to the
JSON; `--nodes` counts them without timing anything.

Run: `python benchmarks/served_generation_benchmark.py [--quick] [--nodes] [--generators ...]
[--batch-sizes 1 8] [--repeats 3] [--budget 280] [--intra-op-threads 0]` (`--help`). Prints a
markdown table and writes benchmarks/results/served_generation.json (keeping the results of
generators not measured in this run).
"""

import argparse
import contextlib
import inspect
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

_REPLY = "@@reply "  # prefix of protocol lines on the worker's stdout

# The worker: tensorflow (+ tensorflow_text for the translator's string
# signature) only. It loads the SavedModel, answers "warm B" and "time B"
# lines with the seconds one signature call took. argv: path, kind, JSON.
_WORKER = r"""
import json, os, sys, time
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import tensorflow as tf
path, kind, extra, threads = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), int(sys.argv[4])
if threads:
    tf.config.threading.set_intra_op_parallelism_threads(threads)
if kind in ("text", "tokens"):  # the translator SavedModel holds TF Text ops
    import tensorflow_text  # noqa: F401  (registers the SentencePiece ops)
model = tf.saved_model.load(path)
assert "keras_attn" not in sys.modules
def request(batch):
    if kind == "super":
        return "serving_default", {"image": tf.zeros((batch, 8, 8, 3), tf.uint8)}
    if kind == "text":
        return "serving_default", {"text": tf.constant([extra] * batch)}
    if kind == "tokens":
        return "translate_tokens", {"encoder_tokens": tf.constant([extra] * batch, tf.int32)}
    return "serving_default", dict(
        primer=tf.ones((batch, 1), tf.int32), num_steps=tf.constant(extra, tf.int32),
        temperature=tf.constant(1.0), top_k=tf.constant(0), top_p=tf.constant(1.0),
        seed=tf.constant(0))
print("@@reply ready", flush=True)
for line in sys.stdin:
    _, batch = line.split()
    name, inputs = request(int(batch))
    start, cpu = time.perf_counter(), time.process_time()
    [value.numpy() for value in model.signatures[name](**inputs).values()]
    print("@@reply " + json.dumps([time.perf_counter() - start, time.process_time() - cpu]), flush=True)
"""


def build_model():
    import keras

    from keras_attn.models import super_resolution_transformer

    keras.utils.set_random_seed(0)
    return super_resolution_transformer(
        low_resolution_size=8,
        image_size=32,
        num_encoder_layers=2,
        num_layers=3,
        hidden_dim=64,
        num_heads=4,
        intermediate_dim=256,
        block_size=96,
        memory_flange=96,
    )


# The served variants: name -> (`jit_compile` of the exporter, the worker's extra environment);
# served_xla only for exporters that take `jit_compile` (served_eigen: the module docstring).
SERVED = {
    "served": (False, {}),
    "served_eigen": (False, {"TF_ENABLE_ONEDNN_OPTS": "0"}),
    "served_xla": (True, {}),
}
SENTENCE = "Ein Mann mit einem orangefarbenen Hut, der etwas anstarrt."
TRANSLATION_LENGTH = 64  # export_translator's default max_length
MUSIC_LENGTH = 256  # the music example's training window


class Generator:
    """One exported generator: the in-Python XLA call, its exports and how
    a served worker calls them (`kind`, `extra`: see _WORKER)."""

    def __init__(self, title, steps, python, make_input, exporter, export, workers):
        self.title, self.steps, self.python, self.make_input = title, steps, python, make_input
        export.exporter = exporter  # the keras_attn function: does it take jit_compile?
        self.export, self.workers = export, workers  # workers: [(suffix, kind, extra)]


def super_resolver(tf):
    from keras_attn.export import export_super_resolver
    from keras_attn.export.super_resolver import super_resolve

    model = build_model()
    return Generator(
        "super resolution 8x8 -> 32x32 (the example's model)",
        3072,
        tf.function(lambda image: super_resolve(model, image), jit_compile=True),
        lambda batch: (tf.zeros((batch, 8, 8, 3), tf.uint8),),
        export_super_resolver,
        lambda path, **kw: export_super_resolver(model, path, version=1, **kw),
        [("", "super", None)],
    )


def translator(tf):
    import keras

    from keras_attn.export import export_translator
    from keras_attn.export.translator import translation_function
    from keras_attn.models import translation_transformer
    from keras_attn.preprocessing.subword_tokenizer import SubwordTokenizer
    from keras_attn.preprocessing.text import encode_source

    sys.path.insert(
        0,
        os.path.join(
            os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples", "translation"
        ),
    )
    from multi30k import load_multi30k

    german, english = load_multi30k(split="val")
    tokenizer = SubwordTokenizer.train(german + english, vocabulary_size=2000)
    keras.utils.set_random_seed(0)
    # The README demo's size (2 layers, width 128, 4 heads, d_ff 512), random weights.
    model = translation_transformer(
        tokenizer.vocabulary_size,
        num_layers=2,
        hidden_dim=128,
        num_heads=4,
        intermediate_dim=512,
        dropout=0.0,
        normalize_first=True,
    )
    generate = translation_function(model, tokenizer, TRANSLATION_LENGTH)
    tokens = encode_source(tokenizer, tf.constant([SENTENCE]), TRANSLATION_LENGTH)
    tokens = tokens.to_tensor(default_value=0, shape=[None, TRANSLATION_LENGTH])[0]
    return Generator(
        f"translation, beam 4, max_length {TRANSLATION_LENGTH} (the demo's size, random weights)",
        TRANSLATION_LENGTH - 1,
        tf.function(generate, jit_compile=True),
        lambda batch: (tf.tile(tokens[None], [batch, 1]),),
        export_translator,
        lambda path, **kw: export_translator(
            model, tokenizer, path, max_length=TRANSLATION_LENGTH, **kw
        ),
        [(" text", "text", SENTENCE), (" tokens", "tokens", tokens.numpy().tolist())],
    )


def music_generator(tf):
    import keras

    from keras_attn.export import export_music_generator
    from keras_attn.export.music_generator import _generation_function
    from keras_attn.models import music_transformer
    from keras_attn.preprocessing import music

    keras.utils.set_random_seed(0)
    # The JSB example's size (3 layers, width 128, 4 heads, d_ff 512, relative), random weights.
    model = music_transformer(
        music.JSB_VOCABULARY_SIZE,
        num_layers=3,
        hidden_dim=128,
        num_heads=4,
        intermediate_dim=512,
        dropout=0.0,
        max_relative_position=MUSIC_LENGTH,
    )
    # END never sampled: every row runs all its steps, served and in Python.
    kernel, bias = model.get_layer("logits").get_weights()
    bias[music.JSB_END_ID] = -1e4
    model.get_layer("logits").set_weights([kernel, bias])
    generate = _generation_function(model, MUSIC_LENGTH, None, music.JSB_END_ID)
    steps = MUSIC_LENGTH - 1
    return Generator(
        f"music, JSB, 1 -> {MUSIC_LENGTH} events (the example's size, random weights)",
        steps,
        tf.function(generate, jit_compile=True),
        lambda batch: (
            tf.ones((batch, 1), tf.int32),
            tf.constant(steps),
            tf.constant(1.0),
            tf.constant(0),
            tf.constant(1.0),
            tf.constant(0),
        ),
        export_music_generator,
        lambda path, **kw: export_music_generator(model, path, max_length=MUSIC_LENGTH, **kw),
        [("", "music", steps)],
    )


GENERATORS = {
    "super_resolver": super_resolver,
    "translator": translator,
    "music_generator": music_generator,
}


def _time_batch(generator, workers, batch, repeats, budget):
    """Median seconds per call of each way to generate, calls interleaved."""
    inputs = generator.make_input(batch)

    def python_call():
        start, cpu = time.perf_counter(), time.process_time()
        tf_nest_numpy(generator.python(*inputs))
        return time.perf_counter() - start, time.process_time() - cpu

    def served_call(worker, kind="time"):
        worker.stdin.write(f"{kind} {batch}\n")
        worker.stdin.flush()
        return tuple(json.loads(_reply(worker)))

    # Warm-up: traces and compiles.
    first = python_call()[0] + sum(served_call(w, "warm")[0] for w in workers.values())
    if not budget.fits(first * repeats):
        return {"skipped": "out of budget"}
    times = {"python_xla": [], **{name: [] for name in workers}}
    for _ in range(repeats):
        times["python_xla"].append(python_call())
        for name, worker in workers.items():
            times[name].append(served_call(worker))
    record = {}
    for name, values in times.items():
        median = statistics.median(wall for wall, _ in values)
        record[name] = {
            "samples_s": [wall for wall, _ in values],
            "cpu_samples_s": [cpu for _, cpu in values],
            "median_s_per_call": median,
            "median_cpu_s_per_call": statistics.median(cpu for _, cpu in values),
            "median_s_per_item": median / batch,
            "median_ms_per_step": 1000 * median / generator.steps,
        }
    print(
        f"{generator.title}, batch {batch}: "
        + ", ".join(f"{name} {r['median_s_per_call']:.3f} s/call" for name, r in record.items()),
        file=sys.stderr,
        flush=True,
    )
    return record


def tf_nest_numpy(outputs):
    import tensorflow as tf

    return [value.numpy() for value in tf.nest.flatten(outputs)]


def _reply(worker):
    for line in worker.stdout:
        if line.startswith(_REPLY):
            return line[len(_REPLY) :].strip()
    raise RuntimeError("the served worker stopped: " + worker.stderr.read()[-2000:])


# ------------------------------------------------------------ nodes per step
# Where a served step's graph nodes come from: the body of the decoding loop
# (the largest While body reachable from serving_default, with the functions
# it calls) in the default export, each node attributed to the innermost
# keras_attn frame of the Python stack that created it (the SavedModel's
# debug info, written with `save_debug_info=True`).
_SOURCES = [  # (substring of "path inside keras_attn/:function", source), first match wins
    ("mask", "mask"),
    ("cache", "cache"),
    ("generation/decoder.py", "cache"),
    ("check", "check"),
    ("generation/sampling", "sampling/search"),
    ("generation/search", "sampling/search"),
    ("generation/decoding", "loop"),
    ("layers/", "layer"),
    ("models/", "layer"),
]


@contextlib.contextmanager
def _debug_info_exports():
    """Exports written inside also write debug/saved_model_debug_info.pb (node stack traces)."""
    import keras
    import tensorflow as tf

    archive_class = type(keras.export.ExportArchive())
    original = archive_class.write_out

    def write_out(self, filepath, options=None, verbose=True):
        return original(self, filepath, tf.saved_model.SaveOptions(save_debug_info=True), verbose)

    archive_class.write_out = write_out
    try:
        yield
    finally:
        archive_class.write_out = original


# Attributes naming the branches of a conditional: of those, one runs per step.
_BRANCHES = ("then_branch", "else_branch", "branches")


def _called(nodes, branches=False):
    """Functions the nodes call: outside conditionals' branches, or (`branches`) those only."""
    for node in nodes:
        for name, attr in node.attr.items():
            if (name in _BRANCHES) != branches:
                continue
            if attr.HasField("func"):
                yield attr.func.name
            yield from (function.name for function in attr.list.func)


def _loop_body(path, signature="serving_default"):
    """(body FunctionDef name, [(node, function name)] of one step, the same of the step's
    conditional branches (of each conditional one runs))."""
    from tensorflow.core.protobuf import saved_model_pb2

    saved = saved_model_pb2.SavedModel()
    with open(os.path.join(path, "saved_model.pb"), "rb") as file:
        saved.ParseFromString(file.read())
    graph = saved.meta_graphs[0].graph_def
    library = {function.signature.name: function for function in graph.library.function}
    outputs = saved.meta_graphs[0].signature_def[signature].outputs.values()
    roots = {output.name.split(":")[0] for output in outputs}
    roots = [node for node in graph.node if node.name in roots]
    stack = list(_called(roots)) + list(_called(roots, branches=True))

    def reachable(stack, branches=True):
        seen = set()
        while stack:
            name = stack.pop()
            if name in library and name not in seen:
                seen.add(name)
                stack.extend(_called(library[name].node_def))
                if branches:
                    stack.extend(_called(library[name].node_def, branches=True))
        return seen

    bodies = {
        node.attr["body"].func.name
        for name in reachable(stack)
        for node in library[name].node_def
        if node.op in ("While", "StatelessWhile")
    }
    step = {body: reachable([body]) for body in bodies}
    body = max(bodies, key=lambda b: sum(len(library[f].node_def) for f in step[b]))
    always = reachable([body], branches=False)

    def nodes(functions):
        return [(node, name) for name in sorted(functions) for node in library[name].node_def]

    return body, nodes(always), nodes(step[body] - always)


def _source(frames):
    """'file.py:function' of the innermost keras_attn frame, and its source."""
    for file, function in reversed(frames):
        if "keras_attn/" in file:
            where = f"{file.rsplit('keras_attn/', 1)[1]}:{function}"
            return where, next((s for part, s in _SOURCES if part in where.lower()), "other")
    return "(no keras_attn frame)", "other"


def count_step_nodes(path):
    """Nodes in one step of the export at `path`: total, by op type, by source, by function."""
    from tensorflow.core.framework import graph_debug_info_pb2

    body, nodes, conditional = _loop_body(path)
    info = graph_debug_info_pb2.GraphDebugInfo()
    with open(os.path.join(path, "debug", "saved_model_debug_info.pb"), "rb") as file:
        info.ParseFromString(file.read())
    by_op, by_source, by_function = Counter(), Counter(), Counter()
    for node, function in nodes:
        trace = info.traces_by_id.get(info.name_to_trace_id.get(f"{node.name}@{function}", -1))
        frames = [
            (info.files[info.frames_by_id[i].file_index], info.frames_by_id[i].func)
            for i in (trace.frame_id if trace else [])
        ]
        where, source = _source(frames)
        by_op[node.op] += 1
        by_source[source] += 1
        by_function[where] += 1
    return {
        "body": body,
        "nodes": len(nodes),
        "in_conditional_branches": len(conditional),
        "by_op": dict(by_op.most_common()),
        "by_source": dict(by_source.most_common()),
        "by_function": dict(by_function.most_common()),
    }


def _node_report(title, counts):
    top = ", ".join(f"{op} {n}" for op, n in list(counts["by_op"].items())[:10])
    sources = ", ".join(f"{s} {n}" for s, n in counts["by_source"].items())
    functions = "\n".join(
        f"  {n:5d}  {where}" for where, n in list(counts["by_function"].items())[:15]
    )
    return (
        f"{title}: {counts['nodes']} nodes per step (default export, {counts['body']}), "
        f"+ {counts['in_conditional_branches']} in conditional branches (one of each runs)\n"
        f"  by op (top 10): {top}\n  by source: {sources}\n"
        f"  by keras_attn function (top 15):\n{functions}"
    )


def _measure(generator, args, tmp):
    """(results by batch size, nodes per step of the default export)."""
    with _debug_info_exports():
        plain = generator.export(os.path.join(tmp, "served"))
    nodes = count_step_nodes(plain)
    if args.nodes:
        return {}, nodes
    workers = {}
    for name, (jit_compile, environment) in SERVED.items():
        exporter = getattr(generator.export, "exporter", None)
        if jit_compile and "jit_compile" not in inspect.signature(exporter).parameters:
            continue  # this exporter has no XLA option
        path = generator.export(os.path.join(tmp, name), jit_compile=True) if jit_compile else plain
        for suffix, kind, extra in generator.workers:
            workers[name + suffix] = subprocess.Popen(
                [sys.executable, "-c", _WORKER, path, kind, json.dumps(extra), str(args.threads)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env={**os.environ, **environment},
            )
    results = {}
    try:
        for worker in workers.values():
            _reply(worker)
        budget = harness.Budget(args.budget)  # timing only: exports and loads are done
        for batch in args.batch_sizes:
            results[batch] = _time_batch(generator, workers, batch, args.repeats, budget)
    finally:
        for worker in workers.values():
            worker.stdin.close()
            worker.wait(timeout=60)
    return results, nodes


def main():
    parser = harness.add_common_arguments(argparse.ArgumentParser(description=__doc__), repeats=3)
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 8])
    parser.add_argument(
        "--generators",
        nargs="+",
        choices=list(GENERATORS),
        default=list(GENERATORS),
        help="measure these; the others' results in the output file are kept",
    )
    parser.add_argument("--nodes", action="store_true", help="only count the nodes per step")
    parser.add_argument(
        "--intra-op-threads", dest="threads", type=int, default=0, help="0: one per core"
    )
    args = parser.parse_args()
    if args.quick:
        args.batch_sizes, args.repeats = [1], 1
    tf = harness.setup_tensorflow(constant_folding=True)
    if args.threads:
        tf.config.threading.set_intra_op_parallelism_threads(args.threads)

    total = harness.Budget(None)
    env_start = harness.environment()
    results, titles, nodes = {}, {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.generators:
            generator = GENERATORS[name](tf)
            titles[name] = generator.title
            folder = os.path.join(tmp, name)
            results[name], nodes[name] = _measure(generator, args, folder)
            print(_node_report(name, nodes[name]), file=sys.stderr, flush=True)
    env_end = harness.environment()
    if args.nodes:
        print("\n\n".join(_node_report(name, counts) for name, counts in nodes.items()))
        return

    rows = []
    for name, by_batch in results.items():
        for batch, record in by_batch.items():
            if "skipped" in record:
                rows.append([titles[name], batch, record["skipped"]] + ["-"] * 5)
                continue
            python = record["python_xla"]
            for variant, served in record.items():
                if variant == "python_xla":
                    continue
                rows.append(
                    [
                        titles[name],
                        batch,
                        variant,
                        f"{python['median_s_per_call']:.3f} ({python['median_ms_per_step']:.2f} ms)",
                        f"{served['median_s_per_call']:.3f} ({served['median_ms_per_step']:.2f} ms)",
                        f"{served['median_s_per_call'] / python['median_s_per_call']:.1f}x",
                        f"{served['median_cpu_s_per_call'] / python['median_cpu_s_per_call']:.1f}x",
                        nodes[name]["nodes"] if not variant.startswith("served_xla") else "-",
                    ]
                )
    print(
        "Exported generators in a fresh tensorflow(+tensorflow_text)-only process vs the same "
        "decoding in Python compiled with XLA; served = the default export (no XLA), "
        "served_eigen = the same with TensorFlow's oneDNN kernels off "
        "(`TF_ENABLE_ONEDNN_OPTS=0`, as a TF Serving build without oneDNN runs it), "
        "served_xla = `jit_compile=True` (XLA inside the SavedModel); median of "
        f"{args.repeats} interleaved calls after a warm-up, seconds per call (ms per decoding "
        "step: super resolution 3,072 per image; translation 63 positions, the cap; "
        "music 255 events). Goal: served <= 3x Python at batch 1, <= 2x at batch 8.\n"
    )
    print(
        harness.markdown_table(
            [
                "generator",
                "batch",
                "served variant",
                "Python + XLA s/call (per step)",
                "served s/call (per step)",
                "served / Python",
                "served / Python (CPU time)",
                "nodes per step (served)",
            ],
            rows,
        )
    )
    print(f"\nTotal {total.elapsed():.0f} s; {harness.load_note(env_start, env_end)}.")
    output = harness.output_path(args, "served_generation")
    if output is None:  # --quick: smoke run, nothing written
        return
    kept = {}
    if os.path.exists(output):
        with open(output) as file:
            data = json.load(file)
        # Files written before the translator and music were added hold the super resolver only.
        kept = data.get("generators") or ({"super_resolver": data} if "results" in data else {})
    for name, by_batch in results.items():
        kept[name] = {
            "title": titles[name],
            "results": {str(k): v for k, v in by_batch.items()},
            "environment": env_start,
            "environment_end": env_end,
            "repeats": args.repeats,
            "nodes_per_step": nodes[name],
        }
    harness.write_results(output, {"generators": kept})


if __name__ == "__main__":
    main()
