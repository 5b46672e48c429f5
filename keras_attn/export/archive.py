"""What every exporter shares: the versioned folder and the archive write."""

import ctypes
import errno
import numbers
import os
import secrets
import shutil
import sys
import tempfile


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


def xla_function(function, jit_compile):
    """`function` as the `tf.function` an exporter serves its decoding loop
    through: XLA-compiled with `jit_compile=True`, else a plain graph.

    XLA inside a SavedModel runs where the server can compile it: TF
    Serving's GPU builds, and its CPU builds only with
    `--xla_cpu_compilation_enabled=true` (experimental there; without it
    the request fails). The default (False) runs on any server.
    """
    import tensorflow as tf

    return tf.function(function, jit_compile=bool(jit_compile), autograph=False)


def write_archive(path, trackables, endpoints):
    """Writes a SavedModel with `keras.export.ExportArchive`, atomically.

    The archive route matters: a Keras model held by a plain `tf.Module` and
    written with `tf.saved_model.save` loads in TF2 Python but fails under
    the session-based loader TF Serving uses ("Could not find variable").

    The SavedModel is written to a temporary sibling folder (a name that is
    not a number, which TF Serving ignores) and renamed into place once
    complete, so a server watching the base path never sees a half-written
    version. An existing `path` (overwrite) is swapped with the new folder
    in one atomic step where the system allows it (Linux
    `renameat2(RENAME_EXCHANGE)`), else moved aside and replaced by two
    renames; the old folder is deleted only after the new one is in place,
    and none of its files survive. If writing fails, the temporary folder
    is removed and `path` is left as it was.

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
        tracing an endpoint, writing the files) and of the file system
        propagate unchanged. An existing `path` is replaced: check it first
        with `versioned_export_path`.
    """
    import keras

    parent, name = os.path.split(os.path.abspath(os.fspath(path)))
    os.makedirs(parent, exist_ok=True)
    # os.mkdir, not tempfile.mkdtemp: the folder keeps the umask's
    # permissions (mkdtemp's 0700 would hide the model from the server).
    temporary = os.path.join(parent, f".{name}.incomplete-{secrets.token_hex(6)}")
    os.mkdir(temporary)
    try:
        archive = keras.export.ExportArchive()
        for trackable in trackables:
            archive.track(trackable)
        for endpoint_name, function in endpoints.items():
            archive.add_endpoint(endpoint_name, function)
        archive.write_out(temporary, verbose=False)
        _replace_folder(temporary, os.path.join(parent, name))
    except BaseException:
        shutil.rmtree(temporary, ignore_errors=True)
        raise
    return path


def _replace_folder(source, destination):
    """Moves the folder `source` to `destination`, replacing what is there;
    the old contents are deleted after the new folder is in place."""
    if not os.path.lexists(destination):
        os.rename(source, destination)  # atomic (refused if a full folder appeared meanwhile)
        return
    if _exchange(source, destination):
        shutil.rmtree(source)  # now holds the old version
        return
    parent, name = os.path.split(destination)
    old = tempfile.mkdtemp(prefix=f".{name}.old-", dir=parent)
    moved_aside = os.path.join(old, name)
    os.rename(destination, moved_aside)
    try:
        os.rename(source, destination)
    except BaseException:
        os.rename(moved_aside, destination)  # put the old version back
        shutil.rmtree(old, ignore_errors=True)
        raise
    shutil.rmtree(old)


_RENAME_EXCHANGE = 2  # linux/fs.h


def _exchange(first, second):
    """Swaps two paths atomically with Linux `renameat2`; False where the
    system, C library or file system does not offer it."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):  # glibc < 2.28, musl
        return False
    renameat2.argtypes = [
        ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint
    ]
    renameat2.restype = ctypes.c_int
    at_fdcwd = -100
    result = renameat2(
        at_fdcwd, os.fsencode(first), at_fdcwd, os.fsencode(second), _RENAME_EXCHANGE
    )
    if result == 0:
        return True
    error = ctypes.get_errno()
    if error in (errno.EINVAL, errno.ENOSYS, errno.EPERM, errno.ENOTSUP):
        return False  # not supported here: fall back to two renames
    raise OSError(error, os.strerror(error), second)
