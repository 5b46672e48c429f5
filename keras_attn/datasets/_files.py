"""Where a data set's files come from: an offline folder, the cache, or a download.

Each file is checked against its sha256 wherever it comes from (docs/guides/preprocessing.md).
"""

import contextlib
import hashlib
import os

DATA_ENV_VAR = "KERAS_ATTN_DATA"
CACHE_SUBDIR = os.path.join("datasets", "keras_attn")


def sha256(path, chunk_size=1 << 20):
    """The sha256 of a file, as 64 hex digits."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(chunk_size), b""):
            digest.update(chunk)
    return digest.hexdigest()


def offline_dir(data_dir):
    """The offline folder to read (`data_dir`, else `$KERAS_ATTN_DATA`), or None.

    Returns `(folder, source)`, source `"data_dir"` or `"$KERAS_ATTN_DATA"`, or `(None, None)`.
    """
    if data_dir is not None and os.fspath(data_dir) != "":
        return os.path.expanduser(os.fspath(data_dir)), "data_dir"
    from_env = os.environ.get(DATA_ENV_VAR)
    if from_env:
        return os.path.expanduser(from_env), f"${DATA_ENV_VAR}"
    return None, None


def cache_root(cache_dir=None):
    """`<cache_dir>/datasets/keras_attn`, `cache_dir` defaulting as in `keras.utils.get_file`."""
    if cache_dir is None:
        if "KERAS_HOME" in os.environ:
            cache_dir = os.environ["KERAS_HOME"]
        else:
            home = os.path.expanduser("~")
            cache_dir = os.path.join(home if os.access(home, os.W_OK) else "/tmp", ".keras")
    return os.path.join(os.path.expanduser(os.fspath(cache_dir)), CACHE_SUBDIR)


def _download(relative_path, expected, url, cache_dir):
    """Downloads `url` into the cache at `relative_path` (keras.utils.get_file)
    unless a verified copy is there; returns its path."""
    import keras

    target = os.path.join(cache_root(cache_dir), *relative_path.split("/"))
    folder, name = os.path.split(target)
    try:
        # An absolute cache_subdir is used as the folder itself. get_file
        # returns a cached file whose hash matches without any network access,
        # downloads again one whose hash does not (an earlier partial
        # download), and removes what it wrote when the transfer fails.
        path = keras.utils.get_file(
            fname=name,
            origin=url,
            file_hash=expected,
            hash_algorithm="sha256",
            cache_dir=folder,
            cache_subdir=folder,
        )
    except ValueError:
        # Downloaded whole but with other bytes: a truncated transfer the
        # server did not announce, or another file. Never left to be used.
        received = sha256(target) if os.path.isfile(target) else "(no file)"
        if os.path.isfile(target):
            os.remove(target)
        hashes = f"sha256 {received}, expected {expected}"
        raise ValueError(f"{url} gave another file ({hashes}); {target!r} was removed.") from None
    except Exception as error:  # keras.utils.get_file's "URL fetch failure ..."
        fix = f"Offline, pass `data_dir` (or set ${DATA_ENV_VAR})."
        raise OSError(f"Could not download {url} to {target!r}: {error}. {fix}") from error
    return path


def fetch_file(relative_path, expected, url, data_dir=None, cache_dir=None, what="file"):
    """The verified local path of one file of a data set.

    Args:
        relative_path: the path in an offline folder and in the cache, e.g. `"multi30k/a.gz"`.
        expected: its sha256, or a tuple of accepted ones (the first is what `url` serves).
        url: where to download it from.
        data_dir: the offline folder (else `$KERAS_ATTN_DATA`, else none).
        cache_dir: the Keras cache folder (default `~/.keras`).
        what: how errors name the file.

    Returns:
        the path of a file whose sha256 is in `expected`.

    Raises:
        FileNotFoundError: an offline folder is given but lacks the file.
        ValueError: the file (offline, or downloaded) has another sha256.
        OSError: the download failed.
    """
    accepted = (expected,) if isinstance(expected, str) else tuple(expected)
    folder, source = offline_dir(data_dir)
    if folder is None:
        return _download(relative_path, accepted[0], url, cache_dir)
    path = os.path.join(folder, *relative_path.split("/"))
    if not os.path.isfile(path):
        hint = f"unset ${DATA_ENV_VAR}" if source != "data_dir" else "pass data_dir=None"
        where = f"No {what} at {path!r} (offline folder from {source})"
        raise FileNotFoundError(f"{where}. Copy the data set there, or {hint} to download.")
    received = sha256(path)
    if received not in accepted:
        hashes = f"sha256 {received}, expected {' or '.join(accepted)}"
        raise ValueError(
            f"The {what} in the offline folder {path!r} is corrupt or another version: {hashes}."
        )
    return path


@contextlib.contextmanager
def quiet_downloads():
    """A context in which keras.utils.get_file prints neither its
    "Downloading data from" line nor a progress bar (for data sets of many
    small files, which report their own progress)."""
    import keras

    was_enabled = keras.config.is_interactive_logging_enabled()
    keras.config.disable_interactive_logging()
    try:
        yield
    finally:
        if was_enabled:
            keras.config.enable_interactive_logging()
