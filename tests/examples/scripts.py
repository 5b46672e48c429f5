"""Loads an example script as a module, so tests call its functions in this
process (one home for the importlib steps the example tests share)."""

import importlib.util
import os
import warnings

EXAMPLES = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "examples"))


def load_script(relative_path, name=None):
    """Executes examples/<relative_path> and returns it as a fresh module.

    Args:
        relative_path: path below examples/, e.g. "music/generate.py".
        name: module name (default: the path with "/" and "." as "_",
            plus "_under_test").

    Python's warning format is restored afterwards: the scripts load
    examples/quiet.py, whose one-line format would leak into pytest's
    summary.
    """
    name = name or relative_path.replace("/", "_").replace(".", "_") + "_under_test"
    spec = importlib.util.spec_from_file_location(name, os.path.join(EXAMPLES, relative_path))
    module = importlib.util.module_from_spec(spec)
    formatwarning = warnings.formatwarning
    try:
        spec.loader.exec_module(module)
    finally:
        warnings.formatwarning = formatwarning
    return module
