"""Loading an exported model as TF Serving picks it, for the example scripts
that call one in a fresh process with tensorflow alone (no keras, no
keras_attn): `translation/translate.py`, `super_resolution/super_resolve.py`.

    path, translate = served.load_signature(
        "runs/translation_demo/export", "serving_default", inputs=("text",),
        written_by="examples/translation/train.py")

A folder that holds no such model (another example's export, a typo) ends
in a `ValueError` naming what was found and what to pass, which
`quiet.run` prints as one line, instead of a traceback from inside the
loaded graph.
"""

import os

import tensorflow as tf


def newest_version(export_dir, written_by):
    """`export_dir` itself if it holds a SavedModel, else its highest
    numbered sub-folder (TF Serving's rule).

    Raises:
        ValueError: neither holds a SavedModel.
    """
    if os.path.exists(os.path.join(export_dir, "saved_model.pb")):
        return export_dir
    versions = (
        [int(d) for d in os.listdir(export_dir) if d.isdigit()] if os.path.isdir(export_dir) else []
    )
    if not versions:
        raise ValueError(
            f"no SavedModel in {export_dir} (nor a numbered version folder holding one): "
            f"pass the export folder that {written_by} wrote (<output_dir>/export)."
        )
    return os.path.join(export_dir, str(max(versions)))


def load_signature(export_dir, name, inputs, written_by):
    """The signature `name` of the newest SavedModel under `export_dir`.

    Args:
        export_dir: a version folder, or the base folder holding them.
        name: the signature, e.g. "serving_default".
        inputs: the input names the caller will pass; a signature without
            them belongs to another model.
        written_by: the script whose export is expected, for the messages.

    Returns:
        (the version folder loaded, the concrete function).

    Raises:
        ValueError: no SavedModel there, it cannot be loaded in this
            process (an op it lacks), or it has no such signature or inputs.
    """
    path = newest_version(export_dir, written_by)
    advice = f"pass the export folder that {written_by} wrote."
    try:
        loaded = tf.saved_model.load(path)
    except (RuntimeError, ValueError, OSError, tf.errors.OpError) as error:
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ValueError(f"cannot load the SavedModel in {path} ({reason}): {advice}") from None
    if name not in loaded.signatures:
        raise ValueError(
            f"{path} has no {name!r} signature (it has {sorted(loaded.signatures)}), "
            f"so it is not the model this script calls: {advice}"
        )
    signature = loaded.signatures[name]
    received = sorted(signature.structured_input_signature[1])
    if not set(inputs) <= set(received):
        raise ValueError(
            f"the {name!r} signature of {path} takes {received}, not {sorted(inputs)}, "
            f"so it is not the model this script calls: {advice}"
        )
    return path, signature
