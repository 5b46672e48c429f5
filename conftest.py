"""Quiet TensorFlow for every pytest run from the repository root: the test
suite, its worker processes (`-n 2`) and the docstring examples under
keras_attn/ (tests/conftest.py holds the suite's own setup).

TensorFlow's C++ start-up lines ignore TF_CPP_MIN_LOG_LEVEL; pytest hides
them in its own process, but not in pytest-xdist's workers. So, as the
examples do (`examples/quiet.py`, the one home of that trick), tensorflow is
imported once with standard error on /dev/null, unless `--verbose`/`-v`.
On other backends tensorflow is imported only inside the tests that need it,
where pytest captures its output.
"""

import importlib.util
import os
import sys
import warnings

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # also for the tests' subprocesses

_VERBOSE = any(arg == "--verbose" or arg.startswith("-v") for arg in sys.argv[1:])
_TENSORFLOW = os.environ["KERAS_BACKEND"] == "tensorflow"
if _TENSORFLOW and not _VERBOSE and "tensorflow" not in sys.modules:
    _spec = importlib.util.spec_from_file_location(
        "_keras_attn_quiet", os.path.join(os.path.dirname(__file__), "examples", "quiet.py")
    )
    _quiet = importlib.util.module_from_spec(_spec)
    _formatwarning = warnings.formatwarning
    _spec.loader.exec_module(_quiet)  # imports tensorflow itself when it may
    warnings.formatwarning = _formatwarning  # the scripts' one-line warnings stay out of pytest's
    if "tensorflow" not in sys.modules:  # a worker: the level is inherited
        _quiet.import_tensorflow_silently()
