"""Images for the Image Transformer: loading, splitting, downsampling, raster order.

An image (B, H, W, C) uint8 is a sequence (B, H * W * C) of intensities 0..255 in raster order
(docs/guides/preprocessing.md); the decoder reads it shifted right after `START_TOKEN` (256).

Reference:
    Parmar et al. 2018, "Image Transformer", sections 3.1 and 5.
"""

import numpy as np

from keras_attn import checks
from keras_attn.extras import needs_extra
from keras_attn.preprocessing.image_files import (
    CIFAR10_CLASS_NAMES,  # noqa: F401 (re-exported: image files)
    IMAGE_EXTENSIONS,  # noqa: F401
    decode_jpegs,  # noqa: F401
    load_cifar10,  # noqa: F401
    load_image,  # noqa: F401
    load_image_directory,  # noqa: F401
    split_indices,  # noqa: F401
)

NUM_INTENSITIES = 256
START_TOKEN = 256


# ------------------------------------------------------------------ layout
def _check_images(images):
    images = np.asarray(images)
    if images.ndim != 4 or images.dtype != np.uint8:
        expected = "`images` must be uint8 of shape (batch, height, width, channels)"
        raise ValueError(f"{expected}. Received: {images.dtype} {images.shape}.")
    return images


def _flat(array):
    """(B, ...) to (B, N); not reshape(B, -1): an empty batch has no -1 to infer."""
    return array.reshape(array.shape[0], int(np.prod(array.shape[1:])))


def to_raster(images):
    """Images to sequences of channel intensities in raster order.

    Args:
        images: (B, H, W, C) uint8.

    Returns:
        (B, H * W * C) int32 in 0..255; index `(row * W + column) * C + channel`.

    Raises:
        ValueError: if `images` is not a rank-4 uint8 array.

    Example:
    >>> import numpy as np
    >>> from keras_attn.preprocessing.images import to_raster
    >>> to_raster(np.zeros((2, 32, 32, 3), np.uint8)).shape
    (2, 3072)
    """
    return _flat(_check_images(images)).astype(np.int32)


def from_raster(sequences, height, width, channels=3):
    """Sequences of channel intensities back to images (inverse of `to_raster`).

    Args:
        sequences: (B, H * W * C) integers in 0..255 (NumPy or a tensor).
        height, width, channels: the image size.

    Returns:
        (B, H, W, C) uint8.

    Raises:
        ValueError: for a bad size, or `sequences` not (B, H * W * C) in 0..255.

    Example:
    >>> import numpy as np
    >>> from keras_attn.preprocessing.images import from_raster
    >>> from_raster(np.arange(12)[None], 2, 2, 3)[0, 1, 0].tolist()
    [6, 7, 8]
    """
    checks.check_sizes(height=height, width=width, channels=channels)
    sequences = np.asarray(sequences)
    size = height * width * channels
    low, high = (sequences.min(), sequences.max()) if sequences.size else (0, 0)
    if sequences.ndim != 2 or sequences.shape[1] != size or low < 0 or high >= NUM_INTENSITIES:
        received = f"shape {sequences.shape}, values in {low}..{high}"
        raise ValueError(f"Expected (batch, {size}) intensities in 0..255. Received: {received}.")
    return sequences.astype(np.uint8).reshape(-1, height, width, channels)


def decoder_inputs(targets, start_token=START_TOKEN):
    """The decoder's input: targets shifted right by one, start token first.

    Args:
        targets: (B, T) int, the raster sequence the model predicts.
        start_token: the id put at position 0 (256, outside the intensities).

    Returns:
        (B, T) int32 `[start_token, targets[:, 0], ..., targets[:, T - 2]]`.

    Raises:
        ValueError: if `targets` is not rank 2.

    Example:
    >>> import numpy as np
    >>> from keras_attn.preprocessing.images import decoder_inputs
    >>> decoder_inputs(np.array([[5, 6, 7]])).tolist()
    [[256, 5, 6]]
    """
    targets = np.asarray(targets)
    checks.require(targets.ndim == 2, "targets.shape", targets.shape, "(batch, length)")
    start = np.full((targets.shape[0], 1), start_token, np.int32)
    return np.concatenate([start, targets[:, :-1].astype(np.int32)], axis=1)


# -------------------------------------------------------------- resampling
def downsample(images, factor=4):
    """Area (box) downsampling by an integer factor, each block mean rounded half up.

    Args:
        images: (B, H, W, C) uint8 with H and W divisible by `factor`.
        factor: positive int (4 for 32x32 -> 8x8).

    Returns:
        (B, H / factor, W / factor, C) uint8.

    Raises:
        ValueError: unless `factor` is a positive int dividing both sides.

    Example:
    >>> import numpy as np
    >>> from keras_attn.preprocessing.images import downsample
    >>> downsample(np.full((1, 32, 32, 3), 7, np.uint8)).shape
    (1, 8, 8, 3)

    Reference:
        Parmar et al. 2018, section 5.2 (4x super resolution, 8x8 -> 32x32).
    """
    images = _check_images(images)
    batch, height, width, channels = images.shape
    ok = checks.is_int(factor, 1) and not (height % factor or width % factor)
    checks.require(
        ok, "factor", factor, f"a positive int dividing the image sides {height}x{width}"
    )
    blocks = images.reshape(batch, height // factor, factor, width // factor, factor, channels)
    total = blocks.astype(np.int64).sum(axis=(2, 4))
    area = factor * factor
    return ((total + area // 2) // area).astype(np.uint8)


def upsample_bicubic(images, size):
    """Bicubic upsampling (`tf.image.resize`), the super-resolution baseline, rounded.

    Args:
        images: (B, h, w, C) uint8.
        size: output side (int) or (height, width).

    Returns:
        (B, height, width, C) uint8.

    Raises:
        ValueError: for `images` that are not rank-4 uint8, or a bad `size`.

    Example:
    >>> import numpy as np
    >>> from keras_attn.preprocessing.images import upsample_bicubic
    >>> row = np.array([100, 200], np.uint8).reshape(1, 1, 2, 1)
    >>> upsample_bicubic(row, (1, 4))[0, 0, :, 0].tolist()  # cubic overshoot
    [91, 121, 179, 209]

    Reference:
        Keys 1981, "Cubic Convolution Interpolation for Digital Image Processing".
    """
    with needs_extra("tensorflow", "keras_attn.preprocessing.images.upsample_bicubic"):
        import tensorflow as tf
    images = _check_images(images)
    size = checks.check_image_size(size, "size")
    resized = tf.image.resize(tf.cast(images, tf.float32), size, method="bicubic")
    return np.asarray(tf.cast(tf.clip_by_value(tf.round(resized), 0, 255), tf.uint8))


def super_resolution_dataset(images, batch_size, factor=4, shuffle=False, seed=0, repeat=False):
    """A tf.data pipeline of (inputs, targets) for the super-resolution model.

    Args:
        images: (N, H, W, C) uint8 high-resolution images.
        batch_size: positive int.
        factor: downsampling factor (`downsample`).
        shuffle, seed: shuffle the images each epoch, with this seed.
        repeat: repeat forever (use with `steps_per_epoch`).

    Returns:
        `tf.data.Dataset` of `({"low_resolution": (B, h*w*C), "decoder_tokens": (B, H*W*C)},
        targets (B, H*W*C))`, int32, with `decoder_tokens = decoder_inputs(targets)`.

    Raises:
        ValueError: as `downsample`, or if `batch_size` is not a positive int.

    Example:
    >>> import numpy as np
    >>> from keras_attn.preprocessing.images import super_resolution_dataset
    >>> images = np.full((3, 8, 8, 3), 50, np.uint8)
    >>> dataset = super_resolution_dataset(images, batch_size=2, factor=4)
    >>> inputs, targets = next(iter(dataset))
    >>> tuple(inputs["low_resolution"].shape), tuple(targets.shape)
    ((2, 12), (2, 192))
    """
    checks.check_sizes(batch_size=batch_size)
    low = downsample(images, factor)  # checks `images` and `factor`
    high = _flat(np.asarray(images))
    return _dataset({"low_resolution": _flat(low)}, high, batch_size, shuffle, seed, repeat)


def generation_dataset(images, batch_size, labels=None, shuffle=False, seed=0, repeat=False):
    """A tf.data pipeline of (inputs, targets) for (class-conditional) image generation.

    Args:
        images: (N, H, W, C) uint8.
        batch_size: positive int.
        labels: (N,) int class ids for a class-conditional model, or None.
        shuffle, seed, repeat: as in `super_resolution_dataset`.

    Returns:
        `tf.data.Dataset` of `({"decoder_tokens": (B, H * W * C) int32
        [, "class_label": (B,) int32]}, targets (B, H * W * C) int32)`.

    Raises:
        ValueError: if `images` is not uint8 (N, H, W, C) or the labels do not match it.

    Example:
    >>> import numpy as np
    >>> from keras_attn.preprocessing.images import generation_dataset
    >>> images = np.arange(2 * 2 * 2 * 3, dtype=np.uint8).reshape(2, 2, 2, 3)
    >>> dataset = generation_dataset(images, batch_size=2, labels=[7, 1])
    >>> inputs, targets = next(iter(dataset))
    >>> targets[0, :4].numpy().tolist(), inputs["decoder_tokens"][0, :4].numpy().tolist()
    ([0, 1, 2, 3], [256, 0, 1, 2])
    """
    images = _check_images(images)
    checks.check_sizes(batch_size=batch_size)
    extra = {}
    if labels is not None:
        labels = np.asarray(labels)
        # An int32 cast read 1.5 as 1; -1 would index the class table from its end.
        numeric = labels.dtype.kind in "iuf"
        whole = numeric and np.all((labels >= 0) & (labels == np.floor(labels)))
        if not whole or labels.shape != (len(images),):
            values = (
                f"from {labels.min()} to {labels.max()}"
                if numeric and labels.size
                else labels.dtype
            )
            expected = f"`labels` must be class ids, whole numbers >= 0, of shape ({len(images)},)"
            raise ValueError(f"{expected}. Received shape {labels.shape}, values {values}.")
        extra["class_label"] = labels.astype(np.int32)
    return _dataset(extra, _flat(images), batch_size, shuffle, seed, repeat)


def _dataset(extra, targets, batch_size, shuffle, seed, repeat):
    with needs_extra("tensorflow", "the tf.data pipelines of keras_attn.preprocessing.images"):
        import tensorflow as tf

    dataset = tf.data.Dataset.from_tensor_slices((extra, targets))
    if shuffle:
        dataset = dataset.shuffle(len(targets), seed=seed, reshuffle_each_iteration=True)
    if repeat:
        dataset = dataset.repeat()

    def to_model(extra, targets):
        targets = tf.cast(targets, tf.int32)
        start = tf.fill([tf.shape(targets)[0], 1], START_TOKEN)
        inputs = {name: tf.cast(value, tf.int32) for name, value in extra.items()}
        inputs["decoder_tokens"] = tf.concat([start, targets[:, :-1]], axis=1)
        return inputs, targets

    return dataset.batch(batch_size).map(to_model).prefetch(tf.data.AUTOTUNE)
