"""Images for the Image Transformer: loading, splitting, downsampling and the
raster order of channel intensities.

The layout every image model of the library uses (Parmar et al. 2018,
section 3.1, the 1D local variant):

    image (B, H, W, C) uint8  ->  sequence (B, H * W * C) int32 in 0..255

in raster order of channel intensities: pixel by pixel, row by row, and the
C channels (R, G, B) of a pixel one after the other, i.e. sequence index
``(row * W + column) * C + channel``. This is NumPy's C-order reshape, so
`to_raster` / `from_raster` are exact inverses.

The decoder of an Image Transformer reads the target sequence shifted right
by one with a start token in front (`decoder_inputs`):

    decoder_tokens = [START_TOKEN] + targets[:-1]       START_TOKEN = 256

so the decoder's input vocabulary has 257 ids (256 intensities and the start
token) while its softmax has 256 (`keras_attn.models.image_transformer`).

Super resolution (section 5.2) maps an 8x8 image to a 32x32 one; the low
resolution input is made by `downsample`, an area (box) average of each
4x4 block rounded to the nearest integer, as tensor2tensor's CIFAR-10
super-resolution problems do (`resize_by_area`). The classical baseline is
`upsample_bicubic`.

Data: the CIFAR-10 training images as JPEG bytes in an `.npz` (format in
`load_cifar10`), and a folder of the user's own pictures
(`load_image_directory`, Pillow: RGB, centre crop, resize). The split into
training and validation images is deterministic (`split_indices`).

Reference:
    Parmar et al. 2018, "Image Transformer", sections 3.1 (pixels as
    sequences of categorical channel intensities) and 5 (CIFAR-10
    generation, 8x8 -> 32x32 super resolution).
"""

import numbers
import os

import numpy as np

from keras_attn.checks import check_image_size, check_sizes

NUM_INTENSITIES = 256
START_TOKEN = 256
CIFAR10_CLASS_NAMES = (
    "airplane", "automobile", "bird", "cat", "deer",
    "dog", "frog", "horse", "ship", "truck",
)
IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp")


# ------------------------------------------------------------------ layout
def _check_images(images, name="images"):
    images = np.asarray(images)
    if images.ndim != 4 or images.dtype != np.uint8:
        raise ValueError(
            f"`{name}` must be a uint8 array of shape (batch, height, width, "
            f"channels). Received dtype {images.dtype} and shape {images.shape}. "
            "Convert with `np.asarray(x, np.uint8)` and add a batch axis."
        )
    return images


def to_raster(images):
    """Images to sequences of channel intensities in raster order.

    Args:
        images: (B, H, W, C) uint8.

    Returns:
        (B, H * W * C) int32 in 0..255; index `(row * W + column) * C +
        channel` holds `images[:, row, column, channel]`.

    Raises:
        ValueError: if `images` is not a rank-4 uint8 array.

    Example:
    >>> import numpy as np
    >>> from keras_attn.preprocessing.images import to_raster
    >>> to_raster(np.zeros((2, 32, 32, 3), np.uint8)).shape
    (2, 3072)

    Reference:
        Parmar et al. 2018, section 3.1.
    """
    images = _check_images(images)
    # Not reshape(B, -1): an empty batch has no -1 to infer.
    return images.reshape(images.shape[0], int(np.prod(images.shape[1:]))).astype(np.int32)


def from_raster(sequences, height, width, channels=3):
    """Sequences of channel intensities back to images (inverse of `to_raster`).

    Args:
        sequences: (B, H * W * C) integers in 0..255 (NumPy or a tensor).
        height, width, channels: the image size.

    Returns:
        (B, H, W, C) uint8.

    Raises:
        ValueError: if a size is not a positive int, the length is not
            `height * width * channels` or a value lies outside 0..255.

    Example:
    >>> import numpy as np
    >>> from keras_attn.preprocessing.images import from_raster
    >>> from_raster(np.arange(12)[None], 2, 2, 3)[0, 1, 0].tolist()
    [6, 7, 8]
    """
    check_sizes(height=height, width=width, channels=channels)
    sequences = np.asarray(sequences)
    size = height * width * channels
    if sequences.ndim != 2 or sequences.shape[1] != size:
        raise ValueError(
            f"Expected sequences of shape (batch, {size}) for {height}x{width} "
            f"images with {channels} channels. Received shape {sequences.shape}."
        )
    if sequences.size and (sequences.min() < 0 or sequences.max() >= NUM_INTENSITIES):
        raise ValueError(
            "Channel intensities must lie in 0..255. Received values in "
            f"{sequences.min()}..{sequences.max()}."
        )
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
    if targets.ndim != 2:
        raise ValueError(
            f"`targets` must be of shape (batch, length). Received shape {targets.shape}."
        )
    start = np.full((targets.shape[0], 1), start_token, np.int32)
    return np.concatenate([start, targets[:, :-1].astype(np.int32)], axis=1)


# -------------------------------------------------------------- resampling
def downsample(images, factor=4):
    """Area (box) downsampling by an integer factor, rounded to nearest.

    Each output pixel is the mean of a `factor` x `factor` block of input
    pixels, per channel, rounded half up: `(sum + factor**2 // 2) //
    factor**2` in exact integer arithmetic (tensor2tensor's CIFAR-10
    super-resolution problems make their 8x8 inputs by area resizing).

    Args:
        images: (B, H, W, C) uint8 with H and W divisible by `factor`.
        factor: positive int (4 for 32x32 -> 8x8).

    Returns:
        (B, H / factor, W / factor, C) uint8.

    Raises:
        ValueError: on a non-positive factor or sides not divisible by it.

    Example:
    >>> import numpy as np
    >>> from keras_attn.preprocessing.images import downsample
    >>> downsample(np.full((1, 32, 32, 3), 7, np.uint8)).shape
    (1, 8, 8, 3)

    Reference:
        Parmar et al. 2018, section 5.2 (4x super resolution, 8x8 -> 32x32).
    """
    images = _check_images(images)
    if isinstance(factor, bool) or not isinstance(factor, numbers.Integral) or factor <= 0:
        raise ValueError(f"`factor` must be a positive int. Received: factor={factor!r}.")
    batch, height, width, channels = images.shape
    if height % factor or width % factor:
        raise ValueError(
            f"Image sides {height}x{width} must be divisible by factor={factor}. "
            "Crop or resize the images first (e.g. `load_image_directory`)."
        )
    blocks = images.reshape(batch, height // factor, factor, width // factor, factor, channels)
    total = blocks.astype(np.int64).sum(axis=(2, 4))
    area = factor * factor
    return ((total + area // 2) // area).astype(np.uint8)


def upsample_bicubic(images, size):
    """Bicubic upsampling, the classical super-resolution baseline.

    `tf.image.resize(method="bicubic")` (Keys' cubic convolution, a = -0.5,
    half-pixel centres; at the borders the taps that fall outside the image
    are dropped and the remaining weights renormalised), rounded and clipped
    to 0..255.

    Args:
        images: (B, h, w, C) uint8.
        size: output side (int) or (height, width).

    Returns:
        (B, height, width, C) uint8.

    Raises:
        ValueError: if `images` is not a rank-4 uint8 array, or `size` is
            not a positive int or a pair of them.

    Example:
    >>> import numpy as np
    >>> from keras_attn.preprocessing.images import upsample_bicubic
    >>> flat = np.full((1, 2, 2, 3), 7, np.uint8)
    >>> upsampled = upsample_bicubic(flat, 4)  # a flat image stays flat
    >>> upsampled.shape, np.unique(upsampled).tolist()
    ((1, 4, 4, 3), [7])
    >>> row = np.array([100, 200], np.uint8).reshape(1, 1, 2, 1)
    >>> upsample_bicubic(row, (1, 4))[0, 0, :, 0].tolist()  # cubic overshoot
    [91, 121, 179, 209]

    Reference:
        Keys 1981, "Cubic Convolution Interpolation for Digital Image
        Processing" (a = -0.5).
    """
    import tensorflow as tf

    images = _check_images(images)
    size = check_image_size(size, "size")
    resized = tf.image.resize(tf.cast(images, tf.float32), size, method="bicubic")
    return np.asarray(tf.cast(tf.clip_by_value(tf.round(resized), 0, 255), tf.uint8))


# ------------------------------------------------------------------- data
def split_indices(num_examples, validation_fraction=0.1, seed=0):
    """Deterministic training / validation split.

    A fixed permutation of `range(num_examples)` (NumPy's PCG64 with
    `seed`); its first `round(num_examples * validation_fraction)` entries
    (at least 1, at most N - 1) are the validation set. The same arguments
    always give the same split, on every machine.

    Args:
        num_examples: N, positive int.
        validation_fraction: in (0, 1).
        seed: int seed of the permutation.

    Returns:
        `(train_indices, validation_indices)`: sorted int64 arrays.

    Raises:
        ValueError: on N that is not an int >= 2, a fraction outside
            (0, 1), or a seed that is not an int.

    Example:
    >>> import numpy as np
    >>> from keras_attn.preprocessing.images import split_indices
    >>> train, validation = split_indices(10, validation_fraction=0.2)
    >>> len(train), len(validation)
    (8, 2)
    >>> sorted(np.concatenate([train, validation]).tolist()) == list(range(10))
    True
    >>> np.array_equal(split_indices(10, 0.2)[1], validation)  # deterministic
    True
    """
    if not 0.0 < validation_fraction < 1.0:
        raise ValueError(
            "`validation_fraction` must be in (0, 1). Received: "
            f"validation_fraction={validation_fraction!r}."
        )
    check_sizes(num_examples=num_examples)
    if num_examples < 2:
        raise ValueError(f"Need at least 2 examples to split. Received: {num_examples}.")
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise ValueError(f"`seed` must be an int. Received: seed={seed!r}.")
    order = np.random.default_rng(seed).permutation(num_examples)
    count = min(max(1, int(round(num_examples * validation_fraction))), num_examples - 1)
    return np.sort(order[count:]), np.sort(order[:count])


def decode_jpegs(jpeg_bytes, offsets, indices=None, batch_size=1024):
    """Decodes concatenated JPEG files with `tf.io.decode_jpeg` in tf.data.

    The accurate integer DCT is used (`dct_method="INTEGER_ACCURATE"`), which
    gives the same pixels as Pillow / libjpeg's default decoding.

    Args:
        jpeg_bytes: (total,) uint8, the files one after the other.
        offsets: (N + 1,) int, file i is `jpeg_bytes[offsets[i]:offsets[i+1]]`.
        indices: which files to decode (default all), in this order.
        batch_size: files decoded per tf.data batch.

    Returns:
        (len(indices), H, W, 3) uint8 (all files must share one size);
        (0, 32, 32, 3) when `indices` is empty.

    Raises:
        ValueError: if the offsets do not fit the bytes (not rising from 0
            to `len(jpeg_bytes)`, or an empty file).

    Example:
    >>> import io
    >>> import numpy as np
    >>> from PIL import Image
    >>> from keras_attn.preprocessing.images import decode_jpegs
    >>> files = []
    >>> for level in (10, 200):  # two 4x4 gray JPEG files
    ...     buffer = io.BytesIO()
    ...     Image.new("L", (4, 4), level).save(buffer, "JPEG")
    ...     files.append(buffer.getvalue())
    >>> jpeg_bytes = np.frombuffer(b"".join(files), np.uint8)
    >>> offsets = np.cumsum([0] + [len(f) for f in files])
    >>> images = decode_jpegs(jpeg_bytes, offsets, indices=[1, 0])
    >>> images.shape, images[:, 0, 0].tolist()
    ((2, 4, 4, 3), [[200, 200, 200], [10, 10, 10]])
    >>> pillow = np.asarray(Image.open(io.BytesIO(files[1])).convert("RGB"))
    >>> np.array_equal(images[0], pillow)  # the same pixels as Pillow
    True
    """
    import tensorflow as tf

    offsets = np.asarray(offsets, np.int64)
    if offsets.ndim != 1 or offsets.size == 0 or offsets[0] != 0 or offsets[-1] != len(jpeg_bytes) or np.any(np.diff(offsets) <= 0):
        raise ValueError(
            "`offsets` must rise from 0 to len(jpeg_bytes) (N + 1 entries). "
            f"Received {offsets.size} offsets ending at {offsets.reshape(-1)[-1] if offsets.size else None} "
            f"for {len(jpeg_bytes)} bytes."
        )
    if indices is None:
        indices = np.arange(len(offsets) - 1)
    indices = np.asarray(indices, np.int64)
    data = np.asarray(jpeg_bytes, np.uint8).tobytes()
    files = [data[offsets[i]:offsets[i + 1]] for i in indices]

    def decode(jpeg):
        # The accurate integer DCT: TF's default ("fast") differs from
        # libjpeg's reference decoding (and Pillow's) by up to 4 levels.
        return tf.io.decode_jpeg(jpeg, channels=3, dct_method="INTEGER_ACCURATE")

    dataset = (
        tf.data.Dataset.from_tensor_slices(tf.constant(files, tf.string))
        .map(decode, num_parallel_calls=tf.data.AUTOTUNE)
        .batch(batch_size)
    )
    decoded = [np.asarray(batch) for batch in dataset]
    if not decoded:
        return np.zeros((0, 32, 32, 3), np.uint8)
    return np.concatenate(decoded, axis=0)


def load_cifar10(path, split="train", validation_fraction=0.1, seed=0):
    """CIFAR-10 images from the project's JPEG `.npz`, with a held-out split.

    The file holds `jpeg` (all JPEG files concatenated, uint8), `offsets`
    (N + 1,) int64, `labels` (N,) class ids in the order of
    `CIFAR10_CLASS_NAMES`, and `names` (N,) (not read here) — the format of
    `shared/data/cifar10/cifar10_train_jpeg.npz` (the 50,000 CIFAR-10
    training images) and of the small sample shipped in
    `examples/super_resolution/data/`. The images are decoded with
    `tf.io.decode_jpeg`. Because they went through JPEG, bits/dim measured
    on them is not comparable to published CIFAR-10 figures.

    Args:
        path: the `.npz` file.
        split: "train", "validation" (see `split_indices`) or "all".
        validation_fraction, seed: of `split_indices`.

    Returns:
        `(images, labels)`: (N', 32, 32, 3) uint8 and (N',) int32.

    Raises:
        ValueError: on an unknown split, a file that is not a `.npz`
            archive, or one missing the arrays above.
        FileNotFoundError: if `path` does not exist.

    Example:
    >>> import io
    >>> import os
    >>> import tempfile
    >>> import numpy as np
    >>> from PIL import Image
    >>> from keras_attn.preprocessing.images import load_cifar10
    >>> files = []
    >>> for level in (0, 60, 120, 180):  # four flat gray 32x32 "images"
    ...     buffer = io.BytesIO()
    ...     Image.new("RGB", (32, 32), (level,) * 3).save(buffer, "JPEG")
    ...     files.append(buffer.getvalue())
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     path = os.path.join(folder, "tiny_cifar10.npz")
    ...     np.savez(path, jpeg=np.frombuffer(b"".join(files), np.uint8),
    ...              offsets=np.cumsum([0] + [len(f) for f in files]),
    ...              labels=np.array([3, 5, 3, 8]),
    ...              names=np.array(["a.png", "b.png", "c.png", "d.png"]))
    ...     images, labels = load_cifar10(path, split="all")
    ...     train, _ = load_cifar10(path, split="train")
    ...     validation, _ = load_cifar10(path, split="validation")
    >>> images.shape, labels.tolist(), images[:, 0, 0, 0].tolist()
    ((4, 32, 32, 3), [3, 5, 3, 8], [0, 60, 120, 180])
    >>> len(train), len(validation)  # round(4 * 0.1) = 0, raised to 1
    (3, 1)

    Reference:
        Krizhevsky 2009, "Learning Multiple Layers of Features from Tiny
        Images" (CIFAR-10).
    """
    if split not in ("train", "validation", "all"):
        raise ValueError(
            f'`split` must be "train", "validation" or "all". Received: split={split!r}.'
        )
    if not os.path.exists(path):
        raise FileNotFoundError(f"No CIFAR-10 file at {path!r}.")
    try:
        data = np.load(path)
    except (ValueError, OSError) as error:  # e.g. a picture: NumPy tries to unpickle it
        raise ValueError(
            f"{path!r} is not a NumPy .npz archive ({error}); expected the CIFAR-10 JPEG .npz "
            "described in `load_cifar10` (for a folder of pictures, see `load_image_directory`)."
        ) from None
    if not hasattr(data, "files"):  # a single-array .npy
        raise ValueError(
            f"{path!r} holds one array, not a .npz archive; expected `jpeg`, `offsets` and `labels`."
        )
    with data:
        missing = {"jpeg", "offsets", "labels"} - set(data.files)
        if missing:
            raise ValueError(
                f"{path!r} lacks the arrays {sorted(missing)}; expected `jpeg`, "
                "`offsets` and `labels` (see `load_cifar10`)."
            )
        jpeg, offsets, labels = data["jpeg"], data["offsets"], data["labels"]
    count = len(offsets) - 1
    if split == "all":
        indices = np.arange(count)
    else:
        train, validation = split_indices(count, validation_fraction, seed)
        indices = train if split == "train" else validation
    images = decode_jpegs(jpeg, offsets, indices)
    return images, np.asarray(labels, np.int32)[indices]


def load_image(path, size=32):
    """One picture as a `size` x `size` RGB image (Pillow).

    Converted to RGB (grayscale is repeated, 16-bit grayscale scaled to 8
    bits, 32-bit float grayscale read as 0-1 if no value exceeds 1, else
    as 0-255, an alpha channel dropped), the
    largest centred square is cropped and resized to `size` with Pillow's
    antialiased bicubic filter (`PIL.ImageOps.fit`).

    Args:
        path: an image file Pillow can open.
        size: output side in pixels.

    Returns:
        (size, size, 3) uint8.

    Raises:
        OSError: if Pillow cannot read the file.
        ValueError: if `size` is not a positive int.

    Example:
    >>> import os
    >>> import tempfile
    >>> import numpy as np
    >>> from PIL import Image
    >>> from keras_attn.preprocessing.images import load_image
    >>> row = np.array([0, 40, 80, 120, 160, 200])  # a 6x2 gray picture
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     path = os.path.join(folder, "wide.png")
    ...     Image.fromarray(np.stack([row, row]).astype(np.uint8)).save(path)
    ...     image = load_image(path, size=2)  # the centred 2x2 square
    ...     Image.fromarray(np.stack([row, row]).astype(np.uint16) * 257).save(path)
    ...     deep = load_image(path, size=2)  # 16-bit: scaled to 8 bits
    >>> image.shape, image[..., 0].tolist(), image[0, 0].tolist()
    ((2, 2, 3), [[80, 120], [80, 120]], [80, 80, 80])
    >>> np.array_equal(deep, image)
    True
    """
    check_sizes(size=size)
    from PIL import Image
    from PIL import ImageOps

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
    """All pictures of a folder (not recursive) as `size` x `size` RGB images.

    Files are taken in sorted name order; those with an image extension
    (`IMAGE_EXTENSIONS`) are read with `load_image` (RGB, centre crop,
    bicubic resize). Files Pillow cannot read are skipped with a warning.

    Args:
        directory: a folder of images.
        size: output side (32 for the CIFAR-10 models).

    Returns:
        `(images, names)`: (N, size, size, 3) uint8 and the N file names.

    Raises:
        ValueError: if `directory` holds no readable image.
        FileNotFoundError: if `directory` does not exist.

    Example:
    >>> import os
    >>> import tempfile
    >>> from PIL import Image
    >>> from keras_attn.preprocessing.images import load_image_directory
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     Image.new("RGB", (8, 8), (255, 0, 0)).save(os.path.join(folder, "red.png"))
    ...     Image.new("L", (8, 8), 90).save(os.path.join(folder, "gray.jpg"))
    ...     with open(os.path.join(folder, "notes.txt"), "w") as notes:
    ...         _ = notes.write("not an image: skipped")
    ...     images, names = load_image_directory(folder, size=4)
    >>> images.shape, names
    ((2, 4, 4, 3), ['gray.jpg', 'red.png'])
    >>> images[:, 0, 0].tolist()
    [[90, 90, 90], [255, 0, 0]]
    """
    import warnings

    if not os.path.isdir(directory):
        raise FileNotFoundError(f"No directory at {directory!r}.")
    images, names = [], []
    for name in sorted(os.listdir(directory)):
        if not name.lower().endswith(IMAGE_EXTENSIONS):
            continue
        try:
            images.append(load_image(os.path.join(directory, name), size))
        except OSError as error:
            warnings.warn(f"Skipping {name!r}: {error}")
            continue
        names.append(name)
    if not images:
        raise ValueError(
            f"No readable image in {directory!r} (extensions {', '.join(IMAGE_EXTENSIONS)})."
        )
    return np.stack(images), names


def super_resolution_dataset(images, batch_size, factor=4, shuffle=False, seed=0,
                             repeat=False):
    """A tf.data pipeline of (inputs, targets) for the super-resolution model.

    Args:
        images: (N, H, W, C) uint8 high-resolution images.
        batch_size: positive int.
        factor: downsampling factor (`downsample`).
        shuffle: shuffle the images (each epoch, seeded).
        seed: shuffle seed.
        repeat: repeat forever (use with `steps_per_epoch`).

    Returns:
        `tf.data.Dataset` of `({"low_resolution": (B, h * w * C) int32,
        "decoder_tokens": (B, H * W * C) int32}, targets (B, H * W * C)
        int32)`, with `decoder_tokens = decoder_inputs(targets)`.

    Raises:
        ValueError: as `downsample`.

    Example:
    >>> import numpy as np
    >>> from keras_attn.preprocessing.images import super_resolution_dataset
    >>> images = np.full((3, 8, 8, 3), 50, np.uint8)
    >>> dataset = super_resolution_dataset(images, batch_size=2, factor=4)
    >>> inputs, targets = next(iter(dataset))
    >>> tuple(inputs["low_resolution"].shape), tuple(targets.shape)
    ((2, 12), (2, 192))
    >>> inputs["decoder_tokens"][0, :3].numpy().tolist()  # start token first
    [256, 50, 50]
    >>> [int(batch[1].shape[0]) for batch in dataset]  # 3 images, batches of 2
    [2, 1]
    """
    images = _check_images(images)
    low = to_raster(downsample(images, factor)).astype(np.uint8)
    high = images.reshape(len(images), -1)
    return _dataset({"low_resolution": low}, high, batch_size, shuffle, seed, repeat)


def generation_dataset(images, batch_size, labels=None, shuffle=False, seed=0, repeat=False):
    """A tf.data pipeline of (inputs, targets) for (class-)conditional or
    unconditional image generation.

    Args:
        images: (N, H, W, C) uint8.
        batch_size: positive int.
        labels: (N,) int class ids for a class-conditional model, or None.
        shuffle, seed, repeat: as in `super_resolution_dataset`.

    Returns:
        `tf.data.Dataset` of `({"decoder_tokens": (B, H * W * C) int32
        [, "class_label": (B,) int32]}, targets (B, H * W * C) int32)`.

    Raises:
        ValueError: if `images` is not uint8 (N, H, W, C) or the labels do
            not match it.

    Example:
    >>> import numpy as np
    >>> from keras_attn.preprocessing.images import generation_dataset
    >>> images = np.arange(2 * 2 * 2 * 3, dtype=np.uint8).reshape(2, 2, 2, 3)
    >>> dataset = generation_dataset(images, batch_size=2, labels=[7, 1])
    >>> inputs, targets = next(iter(dataset))
    >>> sorted(inputs), inputs["class_label"].numpy().tolist()
    (['class_label', 'decoder_tokens'], [7, 1])
    >>> targets[0, :4].numpy().tolist(), inputs["decoder_tokens"][0, :4].numpy().tolist()
    ([0, 1, 2, 3], [256, 0, 1, 2])
    """
    images = _check_images(images)
    extra = {}
    if labels is not None:
        given = np.asarray(labels)
        if given.shape != (len(images),):
            raise ValueError(
                f"`labels` must be of shape ({len(images)},). Received {given.shape}."
            )
        numeric = given.dtype.kind in "iuf"
        if given.size and (not numeric or given.min() < 0
                           or not np.array_equal(given, np.floor(given))):
            # An int32 cast read 1.5 as 1; -1 would index the class table from its end.
            received = (f"labels from {given.min()} to {given.max()}" if numeric
                        else f"labels of dtype {given.dtype}")
            raise ValueError(
                f"`labels` must be class ids, whole numbers >= 0. Received {received}."
            )
        labels = given.astype(np.int32)
        extra["class_label"] = labels
    return _dataset(extra, images.reshape(len(images), -1), batch_size, shuffle, seed, repeat)


def _dataset(extra, targets, batch_size, shuffle, seed, repeat):
    import tensorflow as tf

    check_sizes(batch_size=batch_size)
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
