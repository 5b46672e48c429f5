"""Image files: the CIFAR-10 JPEG `.npz`, a folder of pictures, the training / validation split.

`keras_attn.preprocessing.images` re-exports every public name here.
"""

import os
import zipfile

import numpy as np

from keras_attn import checks
from keras_attn.datasets.cifar10 import CLASS_NAMES as CIFAR10_CLASS_NAMES  # noqa: F401
from keras_attn.extras import needs_extra

IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp")


def split_indices(num_examples, validation_fraction=0.1, seed=0):
    """Deterministic training / validation split of a seeded permutation of N examples.

    Args:
        num_examples: N, positive int.
        validation_fraction: in (0, 1).
        seed: int seed of the permutation.

    Returns:
        `(train_indices, validation_indices)`: sorted int64 arrays.

    Raises:
        ValueError: for an N that is not an int >= 2, a bad fraction or seed.

    Example:
    >>> from keras_attn.preprocessing.images import split_indices
    >>> train, validation = split_indices(10, validation_fraction=0.2)
    >>> len(train), len(validation)
    (8, 2)
    """
    fraction = validation_fraction
    ok = checks.is_number(fraction) and 0 < fraction < 1
    checks.require(ok, "validation_fraction", fraction, "a number in (0, 1)")
    checks.require(checks.is_int(num_examples, 2), "num_examples", num_examples, "an int >= 2")
    checks.require(checks.is_int(seed), "seed", seed, "an int")
    order = np.random.default_rng(seed).permutation(num_examples)
    count = min(max(1, int(round(num_examples * validation_fraction))), num_examples - 1)
    return np.sort(order[count:]), np.sort(order[:count])


def decode_jpegs(jpeg_bytes, offsets, indices=None, batch_size=1024):
    """Decodes concatenated JPEG files with `tf.io.decode_jpeg` (the same pixels as Pillow).

    Args:
        jpeg_bytes: (total,) uint8, the files one after the other.
        offsets: (N + 1,) int, file i is `jpeg_bytes[offsets[i]:offsets[i+1]]`.
        indices: which files to decode (default all), in order; negative ones count from the end.
        batch_size: files decoded per tf.data batch.

    Returns:
        (len(indices), H, W, 3) uint8 (one size for all files); (0, 32, 32, 3) for no index.

    Raises:
        ValueError: for offsets that do not fit the bytes, a bad index or an undecodable file.

    Example:
    >>> import numpy as np
    >>> import tensorflow as tf
    >>> from keras_attn.preprocessing.images import decode_jpegs
    >>> files = [tf.io.encode_jpeg(tf.fill((4, 4, 1), np.uint8(v))).numpy() for v in (10, 200)]
    >>> offsets = np.cumsum([0] + [len(f) for f in files])
    >>> images = decode_jpegs(np.frombuffer(b"".join(files), np.uint8), offsets, indices=[1, 0])
    >>> images[:, 0, 0, 0].tolist()
    [200, 10]
    """
    with needs_extra("tensorflow", "keras_attn.preprocessing.images.decode_jpegs"):
        import tensorflow as tf
    offsets = np.asarray(offsets, np.int64)
    rising = offsets.ndim == 1 and offsets.size and offsets[0] == 0 and np.all(np.diff(offsets) > 0)
    expected = f"rising from 0 to len(jpeg_bytes) = {len(jpeg_bytes)}"
    ok = rising and offsets[-1] == len(jpeg_bytes)
    checks.require(ok, "offsets", offsets.ravel().tolist()[:8], expected)
    count = len(offsets) - 1
    indices = np.arange(count) if indices is None else np.asarray(indices)
    integer = indices.ndim == 1 and (indices.dtype.kind in "iu" or not indices.size)
    checks.require(integer, "indices", indices, "a list of ints (file indices)")
    outside = np.flatnonzero((indices < -count) | (indices >= count))[:1]
    for k in outside:
        checks.require(
            False, f"indices[{k}]", int(indices[k]), f"a file index in [-{count}, {count})"
        )
    indices = np.where(indices < 0, indices + count, indices).astype(np.int64)
    data = np.asarray(jpeg_bytes, np.uint8).tobytes()
    files = [data[offsets[i] : offsets[i + 1]] for i in indices]

    def decode(jpeg):
        # The accurate integer DCT: TF's default ("fast") differs from
        # libjpeg's reference decoding (and Pillow's) by up to 4 levels.
        return tf.io.decode_jpeg(jpeg, channels=3, dct_method="INTEGER_ACCURATE")

    dataset = (
        tf.data.Dataset.from_tensor_slices(tf.constant(files, tf.string))
        .map(decode, num_parallel_calls=tf.data.AUTOTUNE)
        .batch(batch_size)
    )
    decoded = []
    try:
        for batch in dataset:
            decoded.append(np.asarray(batch))
    except tf.errors.InvalidArgumentError:
        # tf.data does not say which file failed: decode the failing batch's
        # files one by one (only on this error path) to name it.
        start = len(decoded) * batch_size
        for k in range(start, min(start + batch_size, len(files))):
            try:
                decode(files[k])
            except tf.errors.InvalidArgumentError as error:
                reason = error.message.split("}}")[-1].split("[Op:")[0].strip()  # no node names
                start, end = offsets[indices[k]], offsets[indices[k] + 1]
                where = f"JPEG file {indices[k]} (bytes {start}:{end})"
                raise ValueError(f"{where} cannot be decoded: {reason}") from None
        raise
    if not decoded:
        return np.zeros((0, 32, 32, 3), np.uint8)
    return np.concatenate(decoded, axis=0)


def load_cifar10(path, split="train", validation_fraction=0.1, seed=0):
    """CIFAR-10 images from the project's JPEG `.npz` (docs/guides/preprocessing.md).

    Args:
        path: the `.npz` file.
        split: "train", "validation" (see `split_indices`) or "all".
        validation_fraction, seed: of `split_indices`.

    Returns:
        `(images, labels)`: (N', 32, 32, 3) uint8 and (N',) int32.

    Raises:
        ValueError: for an unknown split, a file that is not the JPEG `.npz`, or a bad image.
        FileNotFoundError: if `path` does not exist.

    Example:
    >>> import os, tempfile
    >>> import numpy as np
    >>> import tensorflow as tf
    >>> from keras_attn.preprocessing.images import load_cifar10
    >>> files = [tf.io.encode_jpeg(tf.fill((32, 32, 3), np.uint8(v))).numpy() for v in range(4)]
    >>> jpeg, offsets = np.frombuffer(b"".join(files), np.uint8), np.cumsum([0, *map(len, files)])
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     path = os.path.join(folder, "tiny_cifar10.npz")
    ...     np.savez(path, jpeg=jpeg, offsets=offsets, labels=np.array([3, 5, 3, 8]))
    ...     images, labels = load_cifar10(path, split="all")
    >>> images.shape, labels.tolist()
    ((4, 32, 32, 3), [3, 5, 3, 8])

    Reference:
        Krizhevsky 2009, "Learning Multiple Layers of Features from Tiny Images".
    """
    ok = split in ("train", "validation", "all")
    checks.require(ok, "split", split, '"train", "validation" or "all"')
    if not os.path.exists(path):
        raise FileNotFoundError(f"No CIFAR-10 file at {path!r}.")
    keys = ("jpeg", "offsets", "labels")
    try:  # a picture: NumPy tries to unpickle it; a .npy is one array, not a context manager
        with np.load(path) as data:
            arrays = {key: data[key] for key in keys if key in data.files}
        problem = f"lacks the arrays {sorted(set(keys) - set(arrays))}" if len(arrays) < 3 else ""
    except (ValueError, OSError, TypeError, AttributeError, zipfile.BadZipFile) as error:
        # BadZipFile: a truncated archive.
        problem = f"is not a NumPy .npz archive (or is truncated or damaged: {error})"
    if problem:
        raise ValueError(f"{path!r} {problem}; for a folder of pictures: `load_image_directory`.")
    jpeg, offsets, labels = (arrays[key] for key in keys)
    count = len(offsets) - 1
    if split == "all":
        indices = np.arange(count)
    else:
        train, validation = split_indices(count, validation_fraction, seed)
        indices = train if split == "train" else validation
    try:
        images = decode_jpegs(jpeg, offsets, indices)
    except ValueError as error:  # bad offsets or a corrupt JPEG: say in which file
        raise ValueError(f"{path!r}: {error}") from None
    return images, np.asarray(labels, np.int32)[indices]


def load_image(path, size=32):
    """One picture as a `size` x `size` RGB image: centre square, bicubic resize (Pillow).

    Args:
        path: an image file Pillow can open.
        size: output side in pixels.

    Returns:
        (size, size, 3) uint8.

    Raises:
        OSError: if Pillow cannot read the file.
        ValueError: if `size` is not a positive int.

    Example:
    >>> import os, tempfile
    >>> import numpy as np
    >>> from PIL import Image
    >>> from keras_attn.preprocessing.images import load_image
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     path = os.path.join(folder, "gray.png")
    ...     Image.new("L", (6, 2), 90).save(path)
    ...     image = load_image(path, size=2)
    >>> image.shape, image[0, 0].tolist()
    ((2, 2, 3), [90, 90, 90])
    """
    checks.check_sizes(size=size)
    with needs_extra("images", "keras_attn.preprocessing.images.load_image"):
        from PIL import Image, ImageOps

    with Image.open(path) as image:
        image = ImageOps.exif_transpose(image)
        if image.mode.startswith("I") or image.mode == "F":
            # convert("RGB") would clip 16-bit grayscale (Pillow's "I;16" /
            # "I", 0-65535) to white and truncate float grayscale on 0-1
            # to black: scale them to 0-255 first.
            levels = np.nan_to_num(np.asarray(image, np.float64))
            if image.mode != "F":
                levels = levels / 257.0
            elif levels.max(initial=0.0) <= 1.0:
                levels = levels * 255.0
            image = Image.fromarray(np.clip(np.rint(levels), 0, 255).astype(np.uint8), "L")
        image = image.convert("RGB")
        image = ImageOps.fit(image, (size, size), method=Image.Resampling.BICUBIC)
        return np.asarray(image, np.uint8)


def load_image_directory(directory, size=32):
    """The `IMAGE_EXTENSIONS` pictures of a folder, in name order, read with `load_image`.

    Files Pillow cannot read are skipped with a warning.

    Args:
        directory: a folder of images.
        size: output side (32 for the CIFAR-10 models).

    Returns:
        `(images, names)`: (N, size, size, 3) uint8 and the N file names.

    Raises:
        ValueError: if `directory` holds no readable image.
        FileNotFoundError: if `directory` does not exist (from `os.listdir`).

    Example:
    >>> import os, tempfile
    >>> from PIL import Image
    >>> from keras_attn.preprocessing.images import load_image_directory
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     Image.new("RGB", (8, 8), (255, 0, 0)).save(os.path.join(folder, "red.png"))
    ...     Image.new("L", (8, 8), 90).save(os.path.join(folder, "gray.jpg"))
    ...     images, names = load_image_directory(folder, size=4)
    >>> images.shape, names
    ((2, 4, 4, 3), ['gray.jpg', 'red.png'])
    """
    import warnings

    images, names = [], []
    for name in sorted(os.listdir(directory)):
        if not name.lower().endswith(IMAGE_EXTENSIONS):
            continue
        try:
            images.append(load_image(os.path.join(directory, name), size))
            names.append(name)
        except OSError as error:
            warnings.warn(f"Skipping {name!r}: {error}", stacklevel=2)
    if not images:
        raise ValueError(f"No readable image ({', '.join(IMAGE_EXTENSIONS)}) in {directory!r}.")
    return np.stack(images), names
