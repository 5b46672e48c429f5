"""Peak memory of one call, measured in a fresh process per configuration
(the benchmark scripts' memory columns):

* `measure_memory` runs `script --memory-worker <json config>` (the hidden
  flag of `harness.add_common_arguments`), whose `memory_worker` reports
  the rise of `resource.getrusage(RUSAGE_SELF).ru_maxrss` over one call,
  the function traced beforehand so that only execution counts;
  `measure_memory_many` runs several at a time. The worker is started
  through a small Python trampoline: Linux carries the parent's high-water
  mark into a child across fork + exec, which would hide the child's own
  peak (measured: a child of a 1.9 GiB process reports 1.9 GiB at start;
  through the trampoline 14 MiB).
* `memory_table` and `fmt_mib` show the records.
"""

import json
import os
import resource
import subprocess
import sys
import time

from harness import PROJECT_ROOT, block, markdown_table

# Runs the command given as its arguments. Used between a benchmark and its
# memory worker so that the worker starts with a small ru_maxrss (see above).
_TRAMPOLINE = "import subprocess, sys; sys.exit(subprocess.call(sys.argv[1:]))"


def _resident_kib():
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def memory_worker(run_once, prepare=None):
    """Body of a memory worker process: prints one JSON line.

    Args:
        run_once: callable running the measured call once (its result is
            copied to the host).
        prepare: optional callable run before the measurement (tracing,
            `get_concrete_function`), so that only execution counts.
    """
    import gc

    if prepare is not None:
        prepare()
    gc.collect()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    resident = _resident_kib()
    start = time.perf_counter()
    block(run_once())
    seconds = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(
        json.dumps(
            {
                "peak_mib": (after - before) / 1024.0,  # ru_maxrss is in KiB on Linux
                "maxrss_before_mib": before / 1024.0,
                "resident_before_mib": None if resident is None else resident / 1024.0,
                # A high-water mark above the resident size at the start means it
                # was inherited, and the rise understates the call's peak.
                "maxrss_inherited": resident is not None and before > 1.1 * resident,
                "seconds": seconds,
            }
        ),
        flush=True,
    )


def measure_memory(script, config, timeout=120.0):
    """Runs `script --memory-worker <json config>` in a fresh process
    (through the trampoline) and returns the worker's JSON record, or
    {"skipped": reason} when it failed or timed out."""
    command = [
        sys.executable,
        "-c",
        _TRAMPOLINE,
        sys.executable,
        os.path.abspath(script),
        "--memory-worker",
        json.dumps(config),
    ]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [PROJECT_ROOT, os.path.dirname(os.path.abspath(__file__))]
        + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])
    )
    try:
        result = subprocess.run(
            command, capture_output=True, text=True, timeout=max(5.0, timeout), env=env
        )
    except subprocess.TimeoutExpired:
        return {"skipped": f"skipped (out of budget: memory worker ran over {timeout:.0f} s)"}
    for line in reversed(result.stdout.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    return {"skipped": f"failed (exit {result.returncode}): {result.stderr.strip()[-300:]}"}


def measure_memory_many(script, configs, parallel=2, timeout=120.0, budget=None):
    """`measure_memory` for each config, `parallel` processes at a time
    (each reads only its own high-water mark). Returns a list of records in
    the order of `configs`; configurations started after the budget ran
    out are reported as skipped."""
    from concurrent.futures import ThreadPoolExecutor

    def one(config):
        if budget is not None and budget.left() < 15:
            return {"skipped": "skipped (out of budget)"}
        limit = timeout if budget is None else min(timeout, max(5.0, budget.left()))
        return measure_memory(script, config, limit)

    with ThreadPoolExecutor(max_workers=parallel) as pool:
        return list(pool.map(one, configs))


def memory_table(memory, configs, names, key_headers, value_headers):
    """Markdown table of peak memory: one row per config (a tuple), the
    MiB of `names[0]` and `names[1]`, and their ratio.

    `memory` maps (name,) + config -> a `measure_memory` record."""
    rows = []
    for config in configs:
        config = tuple(config)
        a, b = memory.get((names[0],) + config, {}), memory.get((names[1],) + config, {})
        ratio = (
            f"{a['peak_mib'] / b['peak_mib']:.2f}x"
            if "peak_mib" in a and "peak_mib" in b and b["peak_mib"] > 0
            else "-"
        )
        rows.append(list(config) + [fmt_mib(a), fmt_mib(b), ratio])
    return markdown_table(list(key_headers) + list(value_headers), rows)


def fmt_mib(record):
    """A memory record's peak in MiB, or why it was skipped."""
    if record and "peak_mib" in record:
        return f"{record['peak_mib']:.0f}"
    return (record or {}).get("skipped", "-")
