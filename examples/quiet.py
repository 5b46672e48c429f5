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

Quiet endings too: each script's `__main__` calls `quiet.run(main)`, which
turns a mistake in what the user passed (a missing file, a flag value the
library refuses) into one line `<script>: error: <message>` instead of a
traceback through TensorFlow, and Ctrl-C into a line and a SIGINT death;
Python warnings (a picture skipped, say) print as `<script>: warning: ...`.
"""

import os
import signal
import sys
import warnings

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


def one_line_warning(message, category, filename, lineno, line=None):
    """`warnings.formatwarning` for the scripts: `<script>: warning: <message>`,
    without the file, line number and source line of where it was raised
    (which `--verbose` keeps)."""
    return f"{os.path.basename(sys.argv[0])}: warning: {message}\n"


if not VERBOSE and "TF_CPP_MIN_LOG_LEVEL" not in os.environ:
    import_tensorflow_silently()
if not VERBOSE:
    warnings.formatwarning = one_line_warning


def run(main, verbose=VERBOSE, interrupted=None):
    """Runs a script's `main()` and ends it as a command-line tool should.

    - A `ValueError` (the library's and the examples' messages say what was
      received and what to pass instead) or an `OSError` (a file or folder
      missing, unreadable or in the way) prints `<script>: error: <message>`
      and a hint on `--verbose` to standard error and exits with status 1
      (argparse's own usage errors exit with 2).
    - Ctrl-C prints `interrupted` (if given) and then dies of SIGINT, as
      Python's own handling does, so a shell loop running several scripts
      stops there too (status 130 where the signal does not end it).

    With `verbose` (`--verbose` on the command line) both keep Python's
    traceback. Other exceptions, bugs rather than mistakes, always do.

    Args:
        main: the script's `main()`, called without arguments.
        verbose: keep tracebacks.
        interrupted: what to print on Ctrl-C, e.g. how to resume.
    """
    try:
        main()
    except KeyboardInterrupt:
        if verbose:
            raise
        if interrupted:
            print(f"\n{interrupted}", file=sys.stderr)
        sys.stderr.flush()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
        sys.exit(130)  # where SIGINT does not end the process
    except (ValueError, OSError) as error:
        if verbose:
            raise
        script = os.path.basename(sys.argv[0])
        message = str(error) or type(error).__name__
        sys.exit(f"{script}: error: {message}\n(add --verbose to see where it was raised)")
