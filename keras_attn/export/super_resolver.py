"""SavedModel export of an Image Transformer super-resolution model: a
low-resolution uint8 image in, a sampled high-resolution uint8 image out."""

import numpy as np
import tensorflow as tf

from keras_attn.checks import is_int, is_number, require
from keras_attn.export.archive import versioned_export_path, write_archive, xla_function
from keras_attn.export.request_checks import (
    batch_check,
    checked,
    row_seeds,
    sampling_checks,
    seed_check,
)

DEFAULT_TEMPERATURE = 1.0
DEFAULT_SEED = 0


def image_sizes(model):
    """The image shapes a `super_resolution_transformer` model works on.

    Args:
        model: a model from `keras_attn.models.super_resolution_transformer`
            (layers `encoder_embedding` and `decoder_embedding`).

    Returns:
        `((h, w, C), (H, W, C))`: low- and high-resolution image shapes.

    Raises:
        ValueError: if the model lacks those layers.

    Example:
    >>> from keras_attn.export.super_resolver import image_sizes
    >>> from keras_attn.models import super_resolution_transformer
    >>> model = super_resolution_transformer(low_resolution_size=2, image_size=8,
    ...                                      num_layers=1, num_encoder_layers=1,
    ...                                      hidden_dim=8, num_heads=2,
    ...                                      intermediate_dim=8)
    >>> image_sizes(model)
    ((2, 2, 3), (8, 8, 3))
    """
    try:
        low, high = model.get_layer("encoder_embedding"), model.get_layer("decoder_embedding")
    except (ValueError, AttributeError):  # no such layer; not a model (None, a path)
        low = high = None
    require(
        hasattr(low, "image_size") and hasattr(high, "image_size"),
        "model",
        getattr(model, "name", model),
        "a `keras_attn.models.super_resolution_transformer` "
        "model (PixelEmbedding layers `encoder_embedding` and `decoder_embedding`)",
    )
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
    """Samples high-resolution images given low-resolution ones, with the cache.

    Raster sequence of the low-resolution image -> encoder (run once) ->
    `keras_attn.generation.sample` from the start token, one channel
    intensity per step through the decoder's caches -> image. Works eagerly,
    inside `tf.function` (also with `jit_compile=True`) and in an exported
    graph (tensor `seed` and `temperature`). The same seed gives the same
    images; each image of the batch draws its own noise. With one seed per
    image ((B, 1)), an image's result depends only on it and its seed, not
    on its place in the batch.

    Args:
        model: a `super_resolution_transformer` model.
        low_resolution: (B, h, w, C) uint8 (or int) images, intensities
            0..255 (a NumPy array, tensor or nested list).
        seed: int, or an int scalar / (2,) tensor (one seed for the batch),
            or a (B, 1) int tensor: one seed per image (see
            `keras_attn.generation.sample`).
        temperature: positive float or float scalar tensor (1.0 samples the
            model's distribution; lower is sharper).
        decoder: an optional `keras_attn.generation.CachedDecoder(model)` to
            reuse (planning the graph costs a little each call).
        top_k: optional: sample among the k most likely intensities (a
            positive int, or an int scalar tensor where 0 = no filter).
        top_p: optional nucleus mass in (0, 1] (float or float scalar
            tensor; 1 = no filter).

    Returns:
        (B, H, W, C) uint8 tensor.

    Raises:
        ValueError: if `model` is not a super-resolution model (see
            `image_sizes`), the images are not of an integer dtype or do
            not have the model's low-resolution shape (h, w, C), or the
            sampling controls are out of range (see
            `keras_attn.generation.sample`).

    Example:
    >>> import numpy as np
    >>> import tensorflow as tf
    >>> from keras_attn.export.super_resolver import super_resolve
    >>> from keras_attn.generation import CachedDecoder
    >>> from keras_attn.models import super_resolution_transformer
    >>> model = super_resolution_transformer(low_resolution_size=1, image_size=2,
    ...                                      channels=1, num_layers=1,
    ...                                      num_encoder_layers=1, hidden_dim=8,
    ...                                      num_heads=2, intermediate_dim=8)
    >>> decoder = CachedDecoder(model)  # reused by both calls
    >>> low_resolution = np.full((2, 1, 1, 1), 128, np.uint8)  # two 1x1 gray images
    >>> images = super_resolve(model, low_resolution, seed=7, decoder=decoder)
    >>> tuple(images.shape), images.dtype.name  # 2x2 images: 4 sampled steps
    ((2, 2, 2, 1), 'uint8')
    >>> again = super_resolve(model, low_resolution, seed=7, decoder=decoder)
    >>> bool(tf.reduce_all(images == again))  # the same seed, the same images
    True

    Reference:
        Parmar et al. 2018, "Image Transformer", sections 4 (sampling) and
        5.2 (super resolution; temperatures 1.0 and 0.9).
    """
    from keras_attn.generation import CachedDecoder

    (h, w, c), (height, width, channels) = image_sizes(model)
    if not hasattr(low_resolution, "dtype"):
        low_resolution = tf.convert_to_tensor(low_resolution)  # nested lists
    dtype = tf.as_dtype(low_resolution.dtype)
    require(
        dtype.is_integer,
        "low_resolution.dtype",
        dtype.name,
        "an integer dtype (intensities 0..255: a cast would make floats in [0, 1] black)",
        "For floats in [0, 1], pass `np.round(images * 255).astype(np.uint8)`.",
    )
    shape = tuple(low_resolution.shape)
    require(
        shape[1:] == (h, w, c),
        "low_resolution.shape",
        shape,
        f"(batch, {h}, {w}, {c})",
        "Resize or convert the images (e.g. with `keras_attn.preprocessing.images.downsample`).",
    )
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
    """Samples images from an Image Transformer, one channel intensity per
    step from the start token: the one image-sampling loop of the library
    (`super_resolve` and the example's generators use it).

    Args:
        decoder: a `keras_attn.generation.CachedDecoder` (or
            `RecomputingDecoder`) of an `image_transformer` or
            `super_resolution_transformer` model.
        batch_size: B, int or int32 scalar tensor.
        image_shape: (H, W, C) of the sampled images.
        seed, temperature, top_k, top_p: as in `super_resolve`.
        inputs: the model's other inputs (`low_resolution` (B, h*w*C) or
            `class_label` (B,)), or None for an unconditional model.

    Returns:
        (B, H, W, C) uint8 tensor.

    Raises:
        ValueError: on sampling controls out of range (see
            `keras_attn.generation.sample`).

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

    The graph holds the whole job: the encoder over the low-resolution image
    (run once per request), the sampling loop over the decoder's caches
    (`super_resolve`), batched. Two signatures, because a SavedModel
    signature has no optional inputs:

    - `serving_default`: `image` uint8 (B, h, w, C) -> `image` uint8
      (B, H, W, C), sampled at `default_temperature`, every image with
      `default_seed` as its own seed: an image's output depends on that
      image only, not on the other images of its batch nor its row (so
      TF Serving's server-side batching changes nothing);
    - `sample_with_options`: `image` uint8 (B, h, w, C), `temperature`
      float32 scalar (> 0), `seed` int64, `top_k` int32 scalar
      (>= 0; 0 = all intensities), `top_p` float32 scalar (in (0, 1];
      1 = no nucleus filter) -> `image` uint8 (B, H, W, C). `seed` is
      either a scalar, one seed for the batch (rows draw different noise;
      row 0 draws what the image would alone), or of shape (B,), one seed
      per image: each image then gets what it gets alone with its seed.

    Inputs of another size or channel count (grayscale (B, 8, 8, 1), RGBA
    (B, 8, 8, 4), (B, 16, 16, 3), ...) are refused with an error naming the
    received and the expected shape: a session client (TF Serving,
    `saved_model_cli run`) is stopped by the signature's static shape
    ("Cannot feed value of shape (1, 8, 8, 1) for Tensor
    serving_default_image:0, which has shape (None, 8, 8, 3)"), a TF2
    client calling `signatures[...]` by an in-graph `EnsureShape`
    (`InvalidArgumentError`: "Shape of tensor image [1,8,8,1] is not
    compatible with expected shape [?,8,8,3]"). A non-positive temperature
    fails an in-graph check whose message says so, and so does an empty
    batch (0 images), with or without XLA: it is checked before the loop.

    The exported graph needs only `tensorflow` (no keras, no keras_attn),
    and runs under the session-based loader too (written with
    `keras.export.ExportArchive`). By default the loop is not XLA-compiled,
    so that any server runs it; `jit_compile=True` compiles the sampling
    loop with XLA (measured here about 6x faster on CPU for a small model),
    but TF Serving then needs `--xla_cpu_compilation_enabled=true`
    (experimental there) and fails the request otherwise.

    Args:
        model: a `keras_attn.models.super_resolution_transformer` model.
        export_dir: base folder; the SavedModel goes to `export_dir/<version>/`.
        version: positive int (TF Serving serves the highest).
        default_temperature: temperature of `serving_default`, a finite
            number > 0 that float32 holds (from about 1.2e-38 to 3.4e38).
        default_seed: seed of `serving_default`, an int that int64 holds.
        jit_compile: XLA-compile the sampling loop (see above).
        overwrite: replace an existing version folder.

    Returns:
        The path of the version folder.

    Raises:
        ValueError: on a bad `version`, an existing folder without
            `overwrite`, a model that is not a super-resolution model, a
            `default_temperature` float32 does not hold as a number > 0,
            or a `default_seed` int64 does not hold.

    Example:
    >>> import tempfile
    >>> import tensorflow as tf
    >>> from keras_attn.export import export_super_resolver
    >>> from keras_attn.models import super_resolution_transformer
    >>> model = super_resolution_transformer(low_resolution_size=2, image_size=8,
    ...                                      num_layers=1, num_encoder_layers=1,
    ...                                      hidden_dim=16, num_heads=2,
    ...                                      intermediate_dim=32)
    >>> folder = tempfile.TemporaryDirectory()
    >>> export_dir = folder.name
    >>> path = export_super_resolver(model, export_dir, version=1)
    >>> served = tf.saved_model.load(path)
    >>> low_res = tf.zeros((2, 2, 2, 3), tf.uint8)
    >>> tuple(served.signatures["serving_default"](image=low_res)["image"].shape)
    (2, 8, 8, 3)
    >>> folder.cleanup()

    Reference:
        Parmar et al. 2018, "Image Transformer", section 5.2; TF Serving's
        versioned model layout.
    """
    from keras_attn.generation import CachedDecoder

    (h, w, c), _ = image_sizes(model)
    # The graph holds both as float32 and int64 constants: values those
    # cannot hold would become 0 or inf (every request refused) or wrap.
    low, high = float(np.finfo(np.float32).tiny), float(np.finfo(np.float32).max)
    require(
        is_number(default_temperature, low, high),
        "default_temperature",
        default_temperature,
        f"a number from {low} to {high} (a finite temperature > 0 that float32 holds)",
    )
    require(
        is_int(default_seed, -(2**63), 2**63 - 1),
        "default_seed",
        default_seed,
        f"an int from {-(2**63)} to {2**63 - 1} (an int that int64 holds)",
    )
    path = versioned_export_path(export_dir, version, overwrite)
    decoder = CachedDecoder(model)
    sampler = xla_function(
        lambda image, seed, temperature, top_k=None, top_p=None: super_resolve(
            model, image, seed, temperature, decoder, top_k=top_k, top_p=top_p
        ),
        jit_compile,
    )
    image_spec = tf.TensorSpec((None, h, w, c), tf.uint8, name="image")

    def checked_image(image, seed=None, *options):
        # The signature's static shape documents the input, but a TF2 client
        # calling the signature is not stopped by it: EnsureShape refuses
        # other sizes at run time with an error naming both shapes. The
        # request is checked here, before the loop (XLA drops assertions).
        image = tf.ensure_shape(image, (None, h, w, c))
        if seed is None:
            return checked(image, [batch_check("image", image)])
        conditions = [batch_check("image", image), seed_check(seed, tf.shape(image)[0])]
        return checked((image, seed) + options, conditions + sampling_checks(*options))

    @tf.function(input_signature=[image_spec])
    def serve(image):
        image = checked_image(image)
        # One seed per image, so an image's output does not depend on its batch.
        seed = tf.fill([tf.shape(image)[0], 1], tf.constant(default_seed, tf.int64))
        temperature = tf.constant(default_temperature, tf.float32)
        return {"image": sampler(image, seed, temperature)}

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
        image, seed, temperature, top_k, top_p = checked_image(
            image, seed, temperature, top_k, top_p
        )
        return {"image": sampler(image, row_seeds(seed), temperature, top_k, top_p)}

    return write_archive(
        path,
        [model],
        {"serving_default": serve, "sample_with_options": serve_with_options},
        overwrite=overwrite,
    )
