"""What every exporter shares: the versioned folder and the archive write."""

import contextlib
import ctypes
import errno
import os
import secrets
import shutil
import sys
import tempfile

from keras_attn.checks import is_int, require
from keras_attn.layers.position_writes import select_writes


def versioned_export_path(export_dir, version, overwrite=False):
    """`export_dir/<version>`, checked for TF Serving (which serves the highest number).

    Args:
        export_dir: the model's base folder.
        version: positive int.
        overwrite: allow replacing an existing version folder.

    Returns:
        The version folder's path (not created).

    Raises:
        ValueError: a `version` that is not a positive int, an `export_dir` that is not a
            folder path, or an existing version folder without `overwrite`.

    Example:
    >>> import os, tempfile
    >>> from keras_attn.export import versioned_export_path
    >>> folder = tempfile.TemporaryDirectory()
    >>> path = versioned_export_path(folder.name, 3)
    >>> os.path.relpath(path, folder.name), os.path.exists(path)  # not created
    ('3', False)
    >>> os.mkdir(path)
    >>> versioned_export_path(folder.name, 3)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
        ...
    ValueError: ...3 already exists. Pass a new `version` or `overwrite=True`.
    >>> versioned_export_path(folder.name, 3, overwrite=True) == path
    True
    >>> folder.cleanup()
    """
    require(is_int(version, 1), "version", version, "a positive integer (a folder name)")
    path_like = isinstance(export_dir, (str, os.PathLike))
    ok = path_like and (os.path.isdir(export_dir) or not os.path.exists(export_dir))
    require(ok, "export_dir", export_dir, "a folder path (str or os.PathLike), not a file")
    path = os.path.join(os.fspath(export_dir), str(int(version)))
    if os.path.lexists(path) and not overwrite:
        raise _exists_error(path)
    return path


def _exists_error(path):
    return ValueError(f"{path} already exists. Pass a new `version` or `overwrite=True`.")


def xla_function(function, jit_compile, input_signature=None):
    """`function` as the `tf.function` an exporter serves its decoding loop through.

    Args:
        function: a Python function of tensors (the exporter's loop).
        jit_compile: compile it with XLA (served on CPU only with
            `--xla_cpu_compilation_enabled=true`) or not (False: runs on any server; traced
            in `position_writes.select_writes`: a step's position written with a select).
        input_signature: optional list of `tf.TensorSpec`; the widest one traces the loop once
            for endpoints of different static shapes.

    Returns:
        A `tf.function` of `function` (autograph off).

    Example:
    >>> import tensorflow as tf
    >>> from keras_attn.export.archive import xla_function
    >>> double = xla_function(lambda x: 2.0 * x, jit_compile=True)
    >>> double(tf.constant([1.0, 2.5])).numpy().tolist()
    [2.0, 5.0]
    >>> hlo = double.experimental_get_compiler_ir(tf.constant([1.0]))(stage="hlo")
    >>> hlo.startswith("HloModule")  # compiled by XLA
    True
    """
    import tensorflow as tf

    if not jit_compile:
        function = select_writes()(function)  # traced in the scope

    return tf.function(
        function, input_signature=input_signature, jit_compile=bool(jit_compile), autograph=False
    )


def write_archive(path, trackables, endpoints, overwrite=False):
    """Writes a SavedModel with `keras.export.ExportArchive`, atomically.

    It is written to a temporary sibling folder, then renamed into place: a server never sees a
    half-written version, and a failed write leaves `path` as it was (docs/guides/serving.md).

    Args:
        path: the version folder.
        trackables: Keras models/layers and `tf.Module`s whose variables the endpoints use.
        endpoints: dict name -> `tf.function` with an input signature ("serving_default" first).
        overwrite: replace an existing `path` (swapped atomically where the system allows).

    Returns:
        `path`.

    Raises:
        ValueError: if `path` exists (or appeared during the write) and `overwrite` is False.

    Example:
    >>> import os, tempfile
    >>> import keras
    >>> import tensorflow as tf
    >>> from keras_attn.export import write_archive
    >>> model = keras.Sequential([keras.Input((2,)),
    ...                           keras.layers.Dense(1, kernel_initializer="ones")])
    >>> @tf.function(input_signature=[tf.TensorSpec((None, 2), tf.float32, name="x")])
    ... def total(x):
    ...     return {"total": model(x)}
    >>> folder = tempfile.TemporaryDirectory()
    >>> path = write_archive(os.path.join(folder.name, "1"), [model], {"serving_default": total})
    >>> sorted(os.listdir(folder.name))  # no temporary folder left behind
    ['1']
    >>> serve = tf.saved_model.load(path).signatures["serving_default"]
    >>> serve(x=tf.constant([[1.0, 2.0]]))["total"].numpy().tolist()  # 1 + 2
    [[3.0]]
    >>> folder.cleanup()
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
        if overwrite:
            _replace_folder(temporary, os.path.join(parent, name))
        elif not _rename_no_replace(temporary, os.path.join(parent, name)):
            raise _exists_error(path)
    except BaseException:
        with contextlib.suppress(OSError):
            _remove(temporary)  # after a swap: the old version (or link)
        raise
    return path


def _rename_no_replace(source, destination):
    """Moves `source` to `destination` unless something is there (then False)."""
    moved = _renameat2(source, destination, _RENAME_NOREPLACE)
    if moved is not None:
        return moved
    if os.path.lexists(destination):  # no renameat2: a check, then the rename
        return False
    try:
        os.rename(source, destination)
    except OSError as error:  # a full folder appeared meanwhile (Windows: anything)
        if isinstance(error, FileExistsError) or error.errno in (errno.EEXIST, errno.ENOTEMPTY):
            return False
        raise
    return True


def _replace_folder(source, destination):
    """Moves `source` to `destination`, deleting what was there once the new folder is in place."""
    if not os.path.lexists(destination):
        os.rename(source, destination)
        return
    if _renameat2(source, destination, _RENAME_EXCHANGE):  # None: not offered here
        _remove(source)  # now holds the old version
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


_RENAME_NOREPLACE = 1  # linux/fs.h
_RENAME_EXCHANGE = 2


def _renameat2(source, destination, flags):
    """Linux `renameat2`: True once done, False if NOREPLACE found a file, None if unsupported."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):  # glibc < 2.28, musl
        return None
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p] * 2 + [ctypes.c_uint]
    renameat2.restype = ctypes.c_int
    at_fdcwd = -100
    result = renameat2(at_fdcwd, os.fsencode(source), at_fdcwd, os.fsencode(destination), flags)
    if result == 0:
        return True
    error = ctypes.get_errno()
    if error == errno.EEXIST and flags & _RENAME_NOREPLACE:
        return False
    if error in (errno.EINVAL, errno.ENOSYS, errno.EPERM, errno.ENOTSUP):
        return None  # not supported here
    raise OSError(error, os.strerror(error), destination)


def _remove(path):
    """Deletes a folder; a link (the link itself) or a file is unlinked."""
    if os.path.islink(path) or not os.path.isdir(path):
        os.unlink(path)
    else:
        shutil.rmtree(path)
