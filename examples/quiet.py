"""Quiet start-up for the example scripts: import this module first.

    import quiet  # noqa: F401  (before keras / tensorflow)

TensorFlow's C++ runtime writes start-up lines straight to the process's
standard error before its logging is configured ("All log messages before
absl::InitializeLog() ...", oneDNN and CUDA-driver notes, a `cuInit` error
on machines without a GPU); no environment variable silences those. Unless
the command line has `--verbose`, this module raises TensorFlow's C++ log
threshold to errors-that-matter-only (`TF_CPP_MIN_LOG_LEVEL=3`) and imports
tensorflow once with file descriptor 2 pointed at /dev/null, so the
examples print only what they have to say. Python warnings and exceptions
are untouched. With `--verbose` (or `TF_CPP_MIN_LOG_LEVEL` already set by
the user) nothing is hidden.
"""

import os
import sys

VERBOSE = "--verbose" in sys.argv[1:]


def import_tensorflow_silently():
    """Imports tensorflow with file descriptor 2 on /dev/null (see above)."""
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
    sys.stderr.flush()
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    try:
        import tensorflow as tf

        tf.config.list_physical_devices()  # the CUDA probe logs here
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


if not VERBOSE and "TF_CPP_MIN_LOG_LEVEL" not in os.environ:
    import_tensorflow_silently()
