"""What the optional parts of keras_attn need, and the error that says how to install it.

`pip install keras_attn` brings Keras, NumPy and ml-dtypes; the exporters and preprocessing
import through `needs_extra`, which names the `pip install "keras_attn[...]"` line of a missing
package (the extras: docs/guides/preprocessing.md).
"""

import contextlib

# The top-level modules each extra installs (what `needs_extra` recognises as
# "this extra is missing"; another missing module is reported as it is).
EXTRA_MODULES = {
    "tensorflow": ("tensorflow", "tensorflow_text", "sentencepiece"),
    "music": ("symusic",),
    "images": ("PIL",),
}


def install_line(extra):
    """The `pip install` command that installs `extra`.

    Example:
    >>> print(install_line("music"))
    pip install "keras_attn[music]"
    """
    if extra not in EXTRA_MODULES:
        raise ValueError(f"`extra` must be one of {sorted(EXTRA_MODULES)}. Received: {extra=}.")
    return f'pip install "keras_attn[{extra}]"'


@contextlib.contextmanager
def needs_extra(extra, user):
    """Turns a missing package of `extra` into an error that names its install line.

    Other errors (a broken install) pass through unchanged.

    Args:
        extra: `"tensorflow"`, `"music"` or `"images"`.
        user: what needs them, e.g. `"keras_attn.export"`.

    Raises:
        ModuleNotFoundError: a module of `extra` is missing (`name`: the missing module).
        ValueError: `extra` is not one of the extras above.

    Example:
    >>> try:
    ...     with needs_extra("music", "keras_attn.preprocessing.music"):
    ...         raise ModuleNotFoundError("No module named 'symusic'", name="symusic")
    ... except ModuleNotFoundError as error:
    ...     print(error)
    keras_attn.preprocessing.music needs symusic: pip install "keras_attn[music]"
    """
    line = install_line(extra)
    try:
        yield
    except ModuleNotFoundError as error:
        missing = (error.name or "").split(".")[0]
        if missing not in EXTRA_MODULES[extra]:
            raise
        raise ModuleNotFoundError(f"{user} needs {missing}: {line}", name=error.name) from error
