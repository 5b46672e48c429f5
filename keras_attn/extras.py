"""What the optional parts of keras_attn need, and the error that says how to install it.

`pip install keras_attn` installs Keras, NumPy and ml-dtypes only: the
layers, models, losses, metrics, schedules and generation run on every Keras
backend (JAX, PyTorch, TensorFlow) with nothing else. The other parts name
the extra that installs what they import:

- `tensorflow` (tensorflow, tensorflow-text, sentencepiece): `keras_attn.export`
  (TF Serving), the subword tokenizer, the tf.data pipelines, TensorFlow's image
  ops, tf.distribute;
- `music` (symusic): reading and writing MIDI;
- `images` (Pillow): reading picture files;
- `examples` (the three above, sacrebleu, tensorboard, matplotlib,
  tensorflow-serving-api): `examples/`;
- `tests` (`examples`, pytest, pytest-xdist, hypothesis, jax): the test suites;
- `docs` (mkdocs, mkdocs-material, mkdocstrings): the API reference;
- `benchmarks` (`tensorflow`, keras-hub): `benchmarks/`.

A module that needs an extra imports through `needs_extra`, so that a
missing package is reported with the `pip install` line that brings it:

    with needs_extra("tensorflow", "keras_attn.export"):
        import tensorflow as tf
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
        raise ValueError(
            f"`extra` must be one of {sorted(EXTRA_MODULES)}. Received: extra={extra!r}."
        )
    return f'pip install "keras_attn[{extra}]"'


@contextlib.contextmanager
def needs_extra(extra, user):
    """Turns a missing package of `extra` into an error that names its install line.

    Imports inside the `with` block that fail because a module of `extra`
    (see `EXTRA_MODULES`) is not installed raise `ModuleNotFoundError`
    saying what needs it and the exact `pip install` line (`pip install
    keras_attn` leaves the extras out); any other error passes through
    unchanged (a broken install keeps its own message).

    Args:
        extra: the extra that installs the imported packages:
            `"tensorflow"`, `"music"` or `"images"`.
        user: what needs them, as the user knows it (a module or function
            name), e.g. `"keras_attn.export"`.

    Raises:
        ModuleNotFoundError: a module of `extra` is missing; its `name` is
            the missing module's.
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
