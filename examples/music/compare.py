"""Side by side: validation NLL of several train.py runs, as a table and a plot.

    python examples/music/compare.py runs/music_jsb_relative runs/music_jsb_absolute

Prints a Markdown table (parameters, training length L, validation NLL per
token at each evaluated window length, from each run's nll.json) and writes
<first run>/../comparison.png: the validation curves over training steps,
and NLL against the evaluation window length.
"""

import argparse
import csv
import json
import os


def load(parser, run_dir):
    def read(name):
        path = os.path.join(run_dir, name)
        try:
            with open(path) as f:
                return json.load(f)
        except (OSError, ValueError) as error:
            parser.error(
                f"{path} cannot be read ({error}): pass the --output_dir of finished "
                "examples/music/train.py runs (the same command there writes it again)."
            )

    result = read("nll.json")
    result["config"] = read("config.json")
    history = os.path.join(run_dir, "history.csv")
    result["history"] = []
    if os.path.exists(history):
        with open(history) as f:
            result["history"] = list(csv.DictReader(f))
    return result


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("run_dirs", nargs="+")
    parser.add_argument("--output", default=None, help="PNG path (default: next to the first run)")
    args = parser.parse_args(argv)
    output = args.output or os.path.join(
        os.path.dirname(os.path.normpath(args.run_dirs[0])), "comparison.png"
    )
    if not os.path.isdir(os.path.dirname(os.path.abspath(output))):
        parser.error(
            f"--output {output}: the folder {os.path.dirname(os.path.abspath(output))} does "
            "not exist; create it or pass a path in an existing folder."
        )
    runs = [load(parser, d) for d in args.run_dirs]
    keys = []
    for run in runs:
        keys += [k for k in run["nll"] if k not in keys]
    header = "| run | attention | parameters | L | " + " | ".join(f"NLL @ {k}" for k in keys) + " |"
    print(header)
    print("|" + "---|" * (4 + len(keys)))
    for run_dir, run in zip(args.run_dirs, runs):
        cells = [f"{run['nll'][k]['nll_per_token']:.4f}" if k in run["nll"] else "" for k in keys]
        print(
            f"| {os.path.basename(os.path.normpath(run_dir))} | {run['attention']} | "
            f"{run['parameters']:,} | {run['sequence_length']} | " + " | ".join(cells) + " |"
        )

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    for run_dir, run in zip(args.run_dirs, runs):
        label = f"{run['attention']} ({os.path.basename(os.path.normpath(run_dir))})"
        steps_per_epoch = run["config"]["steps_per_epoch"]
        rows = run["history"]
        axes[0].plot(
            [(int(r["epoch"]) + 1) * steps_per_epoch for r in rows],
            [float(r["val_loss"]) for r in rows],
            marker="o",
            label=label,
        )
        lengths = [
            (run["nll"][k]["window_length"], run["nll"][k]["nll_per_token"]) for k in run["nll"]
        ]
        lengths.sort()
        axes[1].plot([x for x, _ in lengths], [y for _, y in lengths], marker="o", label=label)
        axes[1].axvline(run["sequence_length"], color="grey", linestyle=":", linewidth=1)
    axes[0].set_xlabel("training step")
    axes[0].set_ylabel("validation NLL per token (nats)")
    axes[0].set_title("validation at the training length")
    axes[1].set_xscale("log", base=2)
    axes[1].set_xlabel("evaluation window length (tokens; dotted: training length)")
    axes[1].set_ylabel("validation NLL per token (nats)")
    axes[1].set_title("longer than trained")
    for axis in axes:
        axis.legend()
    fig.tight_layout()
    fig.savefig(output, dpi=120)
    print(f"Wrote {output}")


if __name__ == "__main__":
    main()
