"""Running exported models the way a server does: in a fresh process."""

import os
import subprocess
import sys
import textwrap

_BLOCK_LIBRARY = "import sys\nsys.modules['keras_attn'] = None  # any import of it fails\n"


def run_fresh_python(code, timeout=300):
    """Runs `code` in a new Python process and returns its stdout.

    The process starts without this test session's imports, so it proves an
    exported model needs nothing but what `code` imports; importing
    keras_attn is made to fail there. (`import tensorflow` itself loads
    parts of keras when keras is installed, so keras cannot be blocked.)

    Raises:
        AssertionError: with the process's stderr, if it fails.
    """
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    result = subprocess.run(
        [sys.executable, "-c", _BLOCK_LIBRARY + textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return result.stdout


def session_loader_code(path, feeds, fetch, imports="import tensorflow as tf"):
    """Code that loads a SavedModel with the TF1 session-based loader (the
    path TF Serving takes) and prints the named output of serving_default.

    Args:
        path: the version folder.
        feeds: dict input name -> Python literal (as source text).
        fetch: output name.
        imports: import lines (add `import tensorflow_text` for text graphs).
    """
    feed_lines = ", ".join(
        f"signature.inputs[{name!r}].name: {value}" for name, value in feeds.items()
    )
    return f"""
{imports}
tf.compat.v1.disable_eager_execution()
with tf.compat.v1.Session(graph=tf.Graph()) as session:
    meta = tf.compat.v1.saved_model.loader.load(session, ["serve"], {str(path)!r})
    signature = meta.signature_def["serving_default"]
    out = session.run(signature.outputs[{fetch!r}].name, feed_dict={{{feed_lines}}})
    print(repr(out.tolist()))
"""
