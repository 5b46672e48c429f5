"""What every exporter shares: the versioned folder and the archive write."""

import numbers
import os


def versioned_export_path(export_dir, version, overwrite=False):
    """`export_dir/<version>`, checked for TF Serving.

    TF Serving watches `model_base_path` for numbered sub-folders and serves
    the highest, so the version must be a positive integer.

    Args:
        export_dir: the model's base folder.
        version: positive int.
        overwrite: allow replacing an existing version folder.

    Returns:
        The version folder's path (not created).

    Raises:
        ValueError: if `version` is not a positive integer, or the folder
            exists and `overwrite` is False.
    """
    if isinstance(version, bool) or not isinstance(version, numbers.Integral) or version <= 0:
        raise ValueError(
            "`version` must be a positive integer (TF Serving serves numbered "
            f"folders under the model's base path). Received: version={version!r}."
        )
    path = os.path.join(os.fspath(export_dir), str(int(version)))
    if os.path.exists(path) and not overwrite:
        raise ValueError(
            f"{path} already exists. Pass a new `version` (TF Serving then "
            "switches to it) or `overwrite=True`."
        )
    return path


def write_archive(path, trackables, endpoints):
    """Writes a SavedModel with `keras.export.ExportArchive`.

    The archive route matters: a Keras model held by a plain `tf.Module` and
    written with `tf.saved_model.save` loads in TF2 Python but fails under
    the session-based loader TF Serving uses ("Could not find variable").

    Args:
        path: the version folder.
        trackables: Keras models/layers and `tf.Module`s whose variables and
            resources the endpoints use.
        endpoints: dict name -> `tf.function` with an input signature; the
            first one named "serving_default" becomes the default signature.

    Returns:
        `path`.

    Raises:
        Nothing of its own: errors of `keras.export.ExportArchive` (tracking,
        tracing an endpoint, writing the files) propagate unchanged. Check
        `path` first with `versioned_export_path`.
    """
    import keras

    archive = keras.export.ExportArchive()
    for trackable in trackables:
        archive.track(trackable)
    for name, function in endpoints.items():
        archive.add_endpoint(name, function)
    archive.write_out(path, verbose=False)
    return path
