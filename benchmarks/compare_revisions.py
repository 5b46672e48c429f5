"""The same benchmarks on two checkouts of keras_attn, side by side in one run.

For a change that should not cost speed (a refactoring), run the scripts of
this folder once against an earlier checkout (`--before`, e.g. a
`git worktree add ../before <commit>`) and once against this one, one
script after the other in one command, so that both see the same machine
and load. Each script times keras_attn interleaved with its own anchor
(keras `MultiHeadAttention`, keras-hub) in one process, so the anchor's
time tells how much the load changed between the two processes.

Printed: one markdown table per script, one row per timed figure (median
seconds, or ms per generated token): before, after, after / before, and
each revision's time over its anchor's, timed in the same process (the
figure to compare when the load changed between the two runs).
The scripts' JSON files go to `--output_dir` (default: a temporary folder);
`benchmarks/results/` is left alone.

Run: `python benchmarks/compare_revisions.py --before ../before
[--scripts mhsa blocks generation]`
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
# The figure each script writes per candidate, and the names of its anchors.
TIME_KEYS = ("median_s", "ms_per_token")
ANCHORS = ("keras_mha", "keras_hub", "keras-hub")


def run_script(script, tree, output, extra):
    """Runs benchmarks/<script>_benchmark.py with `tree`'s keras_attn first
    on the path; returns its JSON."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([tree, os.environ.get("PYTHONPATH", "")]))
    command = [sys.executable, os.path.join(HERE, f"{script}_benchmark.py"), "--output", output]
    subprocess.run(command + extra, env=env, check=True, stdout=subprocess.DEVNULL)
    with open(output) as file:
        return json.load(file)


def figures(node, path=()):
    """Yields (path, seconds) for every timed figure in a result JSON."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in TIME_KEYS and isinstance(value, (int, float)):
                yield path + (key,), float(value)
            else:
                yield from figures(value, path + (key,))
    elif isinstance(node, list):
        for item in node:
            if isinstance(item, dict):
                name = tuple(
                    f"{key}={item[key]}"
                    for key in sorted(item)
                    if isinstance(item[key], (str, int, bool)) and key not in ("repeats_done",)
                )
                yield from figures(item, path + name)


def is_anchor(path):
    return any(anchor in part for part in path for anchor in ANCHORS)


def anchor_of(path, timed):
    """The anchor figure timed beside `path` (same configuration, another
    candidate), or None."""
    for other in timed:
        if is_anchor(other) and len(other) == len(path):
            if sum(a != b for a, b in zip(path, other)) == 1:
                return timed[other]
    return None


def table(before, after):
    """Markdown rows: figure, before, after, after / before, and each
    revision's time over its anchor's in the same process."""
    before, after = dict(figures(before)), dict(figures(after))
    rows = [
        "| figure | before | after | after / before | before / anchor | after / anchor |",
        "|---|---|---|---|---|---|",
    ]
    for path, old in before.items():
        if path not in after or path[0] not in ("timing", "per_token", "end_to_end"):
            continue
        if is_anchor(path):
            continue
        new = after[path]
        old_anchor, new_anchor = anchor_of(path, before), anchor_of(path, after)
        versus = [
            f"{time / anchor:.2f}x" if anchor else "-"
            for time, anchor in ((old, old_anchor), (new, new_anchor))
        ]
        label = " ".join(part for part in path[1:-1])
        rows.append(
            f"| {label} | {old:.4g} | {new:.4g} | {new / old:.2f}x | {versus[0]} | {versus[1]} |"
        )
    return "\n".join(rows)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", required=True, help="root of the earlier checkout")
    parser.add_argument("--scripts", nargs="+", default=["mhsa", "blocks", "generation"])
    parser.add_argument("--output_dir", default=None)
    args, extra = parser.parse_known_args()
    output_dir = args.output_dir or tempfile.mkdtemp(prefix="compare_revisions_")
    for number, script in enumerate(args.scripts):
        trees = [("before", os.path.abspath(args.before)), ("after", ROOT)]
        if number % 2:  # alternate which revision runs first
            trees.reverse()
        results = {}
        for label, tree in trees:
            output = os.path.join(output_dir, f"{script}_{label}.json")
            print(f"running {script} on {label} ({tree})", file=sys.stderr, flush=True)
            results[label] = run_script(script, tree, output, extra)
        print(
            f"\n## {script}: before = {os.path.relpath(args.before, ROOT)}, after = this checkout "
            "(anchor rows: keras / keras-hub, the load check)\n"
        )
        print(table(results["before"], results["after"]))
    print(f"\nJSON: {output_dir}")


if __name__ == "__main__":
    main()
