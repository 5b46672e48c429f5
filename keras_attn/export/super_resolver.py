"""SavedModel export of an Image Transformer super-resolution model: a
low-resolution uint8 image in, a sampled high-resolution uint8 image out."""

import functools

import numpy as np
import tensorflow as tf

from keras_attn.checks import is_int, is_number, require
from keras_attn.export.archive import versioned_export_path, write_archive, xla_function
from keras_attn.export.request_checks import batch_check, checked, checked_request

DEFAULT_TEMPERATURE = 1.0
DEFAULT_SEED = 0


def image_sizes(model):
    """The image shapes a `super_resolution_transformer` model works on.

    Args:
        model: a `keras_attn.models.super_resolution_transformer` model.

    Returns:
        `((h, w, C), (H, W, C))`: low- and high-resolution image shapes.

    Raises:
        ValueError: if the model lacks those layers.

    Example:
    >>> from keras_attn.export.super_resolver import image_sizes
    >>> from keras_attn.models import super_resolution_transformer
    >>> model = super_resolution_transformer(low_resolution_size=2, image_size=8, num_layers=1,
    ...                                      num_encoder_layers=1, hidden_dim=8, num_heads=2,
    ...                                      intermediate_dim=8)
    >>> image_sizes(model)
    ((2, 2, 3), (8, 8, 3))
    """
    try:
        low, high = model.get_layer("encoder_embedding"), model.get_layer("decoder_embedding")
    except (ValueError, AttributeError):  # no such layer; not a model (None, a path)
        low = high = None
    ok = hasattr(low, "image_size") and hasattr(high, "image_size")
    require(ok, "model", getattr(model, "name", model), "a `super_resolution_transformer` model")
    return low.image_size + (low.channels,), high.image_size + (high.channels,)


def super_resolve(
    model,
    low_resolution,
    seed=DEFAULT_SEED,
    temperature=DEFAULT_TEMPERATURE,
    decoder=None,
    top_k=None,
    top_p=None,
):
    """Samples high-resolution images given low-resolution ones, with the decoder's caches.

    Works eagerly, in `tf.function` (also XLA-compiled) and in an exported graph. The same seed
    gives the same images; with one seed per image ((B, 1)) an image's result does not depend on
    its batch.

    Args:
        model: a `super_resolution_transformer` model.
        low_resolution: (B, h, w, C) integer images, intensities 0..255.
        seed: int or int scalar tensor (one for the batch), or (B, 1) int tensor (one per image).
        temperature: float or float scalar tensor > 0 (1.0 samples the model's distribution).
        decoder: an optional `CachedDecoder(model)` to reuse.
        top_k: optional int: sample among the k most likely intensities (tensor: 0 = off).
        top_p: optional nucleus mass in (0, 1] (1 = off).

    Returns:
        (B, H, W, C) uint8 tensor.

    Raises:
        ValueError: if `model` is not a super-resolution model, the images are not integers of
            the model's low-resolution shape, or a sampling control is out of range.

    Example:
    >>> import numpy as np
    >>> from keras_attn.export.super_resolver import super_resolve
    >>> from keras_attn.models import super_resolution_transformer
    >>> model = super_resolution_transformer(low_resolution_size=1, image_size=2, channels=1,
    ...                                      num_layers=1, num_encoder_layers=1, hidden_dim=8,
    ...                                      num_heads=2, intermediate_dim=8)
    >>> low_resolution = np.full((2, 1, 1, 1), 128, np.uint8)  # two 1x1 gray images
    >>> images = super_resolve(model, low_resolution, seed=7)
    >>> tuple(images.shape), images.dtype.name  # 2x2 images: 4 sampled steps
    ((2, 2, 2, 1), 'uint8')

    Reference:
        Parmar et al. 2018, "Image Transformer", sections 4 and 5.2.
    """
    from keras_attn.generation import CachedDecoder

    (h, w, c), (height, width, channels) = image_sizes(model)
    low_resolution = tf.convert_to_tensor(low_resolution)  # also nested lists
    dtype = tf.as_dtype(low_resolution.dtype)
    fix = "For floats in [0, 1], pass `np.round(images * 255).astype(np.uint8)`."
    require(dtype.is_integer, "low_resolution.dtype", dtype.name, "integer (0..255)", fix)
    shape = tuple(low_resolution.shape)
    fix = "Resize them, e.g. with `keras_attn.preprocessing.images.downsample`."
    require(shape[1:] == (h, w, c), "low_resolution.shape", shape, f"(batch, {h}, {w}, {c})", fix)
    batch = tf.shape(low_resolution)[0]
    tokens = tf.reshape(tf.cast(low_resolution, tf.int32), [batch, h * w * c])
    return sample_images(
        decoder or CachedDecoder(model),
        batch,
        (height, width, channels),
        seed=seed,
        temperature=temperature,
        top_k=top_k,
        top_p=top_p,
        inputs={"low_resolution": tokens},
    )


def sample_images(
    decoder,
    batch_size,
    image_shape,
    seed=DEFAULT_SEED,
    temperature=DEFAULT_TEMPERATURE,
    top_k=None,
    top_p=None,
    inputs=None,
):
    """Samples images from an Image Transformer, one channel intensity per step.

    Args:
        decoder: a `CachedDecoder` (or `RecomputingDecoder`) of an Image Transformer model.
        batch_size: B, int or int32 scalar tensor.
        image_shape: (H, W, C) of the sampled images.
        seed, temperature, top_k, top_p: as in `super_resolve`.
        inputs: the model's other inputs (`low_resolution` (B, h*w*C) or `class_label` (B,)).

    Returns:
        (B, H, W, C) uint8 tensor.

    Raises:
        ValueError: on sampling controls out of range (see `keras_attn.generation.sample`).

    Example:
    >>> from keras_attn.export.super_resolver import sample_images
    >>> from keras_attn.generation import CachedDecoder
    >>> from keras_attn.models import image_transformer
    >>> model = image_transformer(image_size=2, num_layers=1, hidden_dim=8,
    ...                           num_heads=2, intermediate_dim=8)
    >>> tuple(sample_images(CachedDecoder(model), 2, (2, 2, 3)).shape)
    (2, 2, 2, 3)

    Reference:
        Parmar et al. 2018, "Image Transformer", section 4 (sampling).
    """
    from keras_attn.generation import sample
    from keras_attn.preprocessing.images import START_TOKEN

    height, width, channels = image_shape
    sequence = sample(
        decoder,
        tf.fill([batch_size, 1], START_TOKEN),
        max_length=height * width * channels + 1,
        seed=seed,
        temperature=temperature,
        top_k=top_k,
        top_p=top_p,
        prompt_lengths=tf.ones([batch_size], tf.int32),
        inputs=inputs,
    )
    pixels = tf.cast(tf.convert_to_tensor(sequence)[:, 1:], tf.uint8)
    return tf.reshape(pixels, [batch_size, height, width, channels])


def export_super_resolver(
    model,
    export_dir,
    version=1,
    default_temperature=DEFAULT_TEMPERATURE,
    default_seed=DEFAULT_SEED,
    jit_compile=False,
    overwrite=False,
):
    """Writes a super-resolution model as a SavedModel for TF Serving.

    The graph holds the encoder and the cached sampling loop (`super_resolve`), batched. Two
    signatures (a signature has no optional inputs; see docs/guides/serving.md):

    - `serving_default`: `image` uint8 (B, h, w, C) -> `image` uint8 (B, H, W, C), sampled at
      `default_temperature` with `default_seed` for every image.
    - `sample_with_options`: `image`, `temperature` float32 scalar > 0, `seed` int64 scalar
      (one for the batch) or (B,) (one per image), `top_k` int32 scalar (0 = off), `top_p`
      float32 scalar in (0, 1] (1 = off) -> `image`.

    Another image shape, an empty batch or a bad option fails with an `InvalidArgumentError`
    naming what was received.

    Args:
        model: a `keras_attn.models.super_resolution_transformer` model.
        export_dir: base folder; the SavedModel goes to `export_dir/<version>/`.
        version: positive int (TF Serving serves the highest).
        default_temperature: temperature of `serving_default`, a float32 number > 0.
        default_seed: seed of `serving_default`, an int64.
        jit_compile: XLA-compile the sampling loop (TF Serving on CPU then needs
            `--xla_cpu_compilation_enabled=true`).
        overwrite: replace an existing version folder.

    Returns:
        The path of the version folder.

    Raises:
        ValueError: on a bad `version`, model, `default_temperature` or `default_seed`, or an
            existing folder without `overwrite`.

    Example:
    >>> import tempfile
    >>> import tensorflow as tf
    >>> from keras_attn.export import export_super_resolver
    >>> from keras_attn.models import super_resolution_transformer
    >>> model = super_resolution_transformer(low_resolution_size=2, image_size=8, num_layers=1,
    ...                                      num_encoder_layers=1, hidden_dim=16, num_heads=2,
    ...                                      intermediate_dim=32)
    >>> folder = tempfile.TemporaryDirectory()
    >>> served = tf.saved_model.load(export_super_resolver(model, folder.name))
    >>> image = tf.zeros((2, 2, 2, 3), tf.uint8)
    >>> tuple(served.signatures["serving_default"](image=image)["image"].shape)
    (2, 8, 8, 3)
    >>> folder.cleanup()

    Reference:
        Parmar et al. 2018, "Image Transformer", section 5.2.
    """
    from keras_attn.generation import CachedDecoder

    (h, w, c), _ = image_sizes(model)
    # The graph holds them as float32 and int64 constants: other values would become 0, inf or wrap.
    low, high = float(np.finfo(np.float32).tiny), float(np.finfo(np.float32).max)
    ok = is_number(default_temperature, low, high)
    require(ok, "default_temperature", default_temperature, f"a number in [{low}, {high}]")
    ok = is_int(default_seed, -(2**63), 2**63 - 1)
    require(ok, "default_seed", default_seed, "an int in [-2**63, 2**63)")
    path = versioned_export_path(export_dir, version, overwrite)
    sampler = xla_function(
        functools.partial(super_resolve, model, decoder=CachedDecoder(model)), jit_compile
    )
    image_spec = tf.TensorSpec((None, h, w, c), tf.uint8, name="image")

    @tf.function(input_signature=[image_spec])
    def serve(image):
        # EnsureShape refuses other sizes (a TF2 client is not stopped by the signature's shape).
        image = tf.ensure_shape(image, (None, h, w, c))
        image = checked(image, [batch_check("image", image)])
        # One seed per image, so an image's output does not depend on its batch.
        seed = tf.fill([tf.shape(image)[0], 1], tf.constant(default_seed, tf.int64))
        return {"image": sampler(image, seed, tf.constant(default_temperature, tf.float32))}

    @tf.function(
        input_signature=[
            image_spec,
            tf.TensorSpec((), tf.float32, name="temperature"),
            tf.TensorSpec(None, tf.int64, name="seed"),  # () or (B,)
            tf.TensorSpec((), tf.int32, name="top_k"),
            tf.TensorSpec((), tf.float32, name="top_p"),
        ]
    )
    def serve_with_options(image, temperature, seed, top_k, top_p):
        image = tf.ensure_shape(image, (None, h, w, c))
        controls = (temperature, top_k, top_p, seed)
        request = checked_request(
            image, tf.shape(image)[0], controls, [batch_check("image", image)]
        )
        image, (temperature, top_k, top_p, seed) = request
        return {"image": sampler(image, seed, temperature, top_k=top_k, top_p=top_p)}

    return write_archive(
        path,
        [model],
        {"serving_default": serve, "sample_with_options": serve_with_options},
        overwrite=overwrite,
    )
