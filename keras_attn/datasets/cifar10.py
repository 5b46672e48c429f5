"""CIFAR-10: 60,000 32x32 colour images in 10 classes, as uint8 arrays.

The official archive, or this project's lossy JPEG copy of the training images (sources:
docs/guides/preprocessing.md).

Reference:
    Krizhevsky 2009, "Learning Multiple Layers of Features from Tiny Images".
"""

import io
import os
import pickle
import tarfile

import numpy as np

from keras_attn.checks import require
from keras_attn.datasets import _files

ARCHIVE = "cifar-10-python.tar.gz"
BASE_URL = "https://www.cs.toronto.edu/~kriz/"
# The sha256 Keras checks for the same archive (keras/src/datasets/cifar10.py,
# Keras 3.15.1). The archive is not on this project's machines: the hash is
# Keras's, not recomputed here.
ARCHIVE_SHA256 = "6d958be074577803d12ecdefd02955f39262c83c16fe9348329d7fe0b5c001ce"

# This project's JPEG copy of the training images (offline folders only; never
# downloaded). sha256 computed with hashlib from the project's copy.
JPEG_COPY = "cifar10_train_jpeg.npz"
JPEG_COPY_SHA256 = "bf155f4357181f12dd4ab2ec82c22d0e2db613985536c5623852be178a07342f"

SPLITS = ("train", "test")
CLASS_NAMES = (
    "airplane",
    "automobile",
    "bird",
    "cat",
    "deer",
    "dog",
    "frog",
    "horse",
    "ship",
    "truck",
)
_BATCHES = {
    "train": tuple(f"cifar-10-batches-py/data_batch_{i}" for i in range(1, 6)),
    "test": ("cifar-10-batches-py/test_batch",),
}


def fetch(data_dir=None, cache_dir=None, base_url=None):
    """The local path of the CIFAR-10 data: the official archive, or the JPEG copy.

    Args:
        data_dir: offline folder holding `cifar10/cifar-10-python.tar.gz` (else `$KERAS_ATTN_DATA`).
        cache_dir: the Keras cache folder (default `$KERAS_HOME` or `~/.keras`).
        base_url: where to download the archive from (default `BASE_URL`).

    Returns:
        the path (str) of the `.tar.gz` archive, or (offline folders only) the `.npz` JPEG copy.

    Raises:
        ValueError: the file has another sha256.
        FileNotFoundError: the offline folder holds neither file.
        OSError: the download failed.

    Example:
    `cifar10.fetch()` downloads the archive once (163 MB), then returns the cached copy.
    """
    name, expected = ARCHIVE, ARCHIVE_SHA256
    folder, _ = _files.offline_dir(data_dir)  # offline: the archive, else the JPEG copy
    if folder is not None and not os.path.isfile(os.path.join(folder, "cifar10", ARCHIVE)):
        if os.path.isfile(os.path.join(folder, "cifar10", JPEG_COPY)):
            name, expected = JPEG_COPY, JPEG_COPY_SHA256
    return _files.fetch_file(
        f"cifar10/{name}",
        expected,
        (base_url or BASE_URL) + ARCHIVE,
        data_dir=data_dir,
        cache_dir=cache_dir,
        what=f"CIFAR-10 file {name}",
    )


class _ArraysOnly(pickle.Unpickler):
    """Unpickles NumPy arrays and plain containers, nothing else (defence beyond the hash)."""

    _ALLOWED = frozenset(
        {
            ("numpy", "ndarray"),
            ("numpy", "dtype"),
            ("numpy.core.multiarray", "_reconstruct"),
            ("numpy._core.multiarray", "_reconstruct"),
        }
    )

    def find_class(self, module, name):
        if (module, name) in self._ALLOWED:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(
            f"CIFAR-10 batch: refusing to load {module}.{name}; the file "
            "may be corrupted or malicious."
        )


def _read_archive(path, split):
    images, labels = [], []
    with tarfile.open(path, "r:gz") as archive:
        for member in _BATCHES[split]:
            batch = _ArraysOnly(archive.extractfile(member), encoding="bytes").load()
            data = np.asarray(batch[b"data"], np.uint8)
            images.append(data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1))
            labels.append(np.asarray(batch[b"labels"], np.uint8))
    return np.ascontiguousarray(np.concatenate(images)), np.concatenate(labels)


def _read_jpeg_copy(path):
    from keras_attn.extras import needs_extra

    with needs_extra("images", "keras_attn.datasets.cifar10 (decoding the JPEG copy)"):
        from PIL import Image

    with np.load(path) as data:
        jpeg, offsets, labels = data["jpeg"], data["offsets"], data["labels"]
    images = np.empty((len(offsets) - 1, 32, 32, 3), np.uint8)
    for i in range(len(images)):
        with Image.open(io.BytesIO(jpeg[offsets[i] : offsets[i + 1]].tobytes())) as picture:
            images[i] = np.asarray(picture.convert("RGB"))
    return images, np.asarray(labels, np.uint8)


def load_data(split="train", data_dir=None, cache_dir=None, base_url=None):
    """One split of CIFAR-10 as uint8 arrays.

    Args:
        split: `"train"` (50,000 images) or `"test"` (10,000; the official archive only).
        data_dir, cache_dir, base_url: as for `fetch`.

    Returns:
        `(images, labels)`: (N, 32, 32, 3) uint8 RGB and (N,) uint8 class ids (`CLASS_NAMES`).

    Raises:
        ValueError: an unknown split, or a file with another sha256.
        FileNotFoundError, OSError: as for `fetch`.

    Example:
    `images, labels = cifar10.load_data("train")` gives images of shape (50000, 32, 32, 3).
    """
    require(split in SPLITS, "split", split, f"a CIFAR-10 split, one of {SPLITS}")
    path = fetch(data_dir, cache_dir, base_url)
    if path.endswith(".npz"):
        require(
            split == "train",
            "split",
            split,
            f"'train' for {path!r}, this project's JPEG "
            "copy of the training images (no 'test' split)",
            f"Put the official {ARCHIVE} beside it.",
        )
        return _read_jpeg_copy(path)
    return _read_archive(path, split)
