"""Evaluation of the example's Image Transformers: validation bits/dim,
sampling with the cache (seconds per image), PSNR/SSIM against bicubic
upsampling, and PNG grids. Used by train.py (also with --skip_training)."""

if __name__ == "__main__":  # first, before TensorFlow's start-up lines
    # A module of train.py, not a command: say so rather than exit silently.
    import sys

    sys.exit(
        "evaluate.py holds train.py's measurements and has no command of its own. To "
        "evaluate a trained run: python examples/super_resolution/train.py --output_dir "
        "<run> --skip_training"
    )

import os  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from keras_attn.export.super_resolver import sample_images, super_resolve  # noqa: E402
from keras_attn.generation import CachedDecoder  # noqa: E402
from keras_attn.preprocessing import images  # noqa: E402

TEMPERATURES = (1.0, 0.9, 0.8)
# Rows of the super-resolution table: (name, temperature, top_k); top_k = 1
# is the per-pixel mode (argmax decoding).
DECODINGS = tuple((f"sample_T{t}", t, 0) for t in TEMPERATURES) + (("mode", 1.0, 1),)
MAX_PSNR = 100.0  # dB: what an exact match counts as (tf.image.psnr gives inf)


def report(args, model, data, make_dataset):
    """Runs every measurement for `args.mode`; returns a dict of figures."""
    _, _, validation_images, validation_labels = data
    count = args.eval_images or len(validation_images)
    subset = slice(0, count)
    labels = None if validation_labels is None else validation_labels[subset]
    start = time.time()
    scores = model.evaluate(
        make_dataset(args, validation_images[subset], labels), verbose=0, return_dict=True
    )
    figures = {
        "validation_bits_per_dim": float(scores["bits_per_dim"]),
        "validation_bits_per_dim_images": int(min(count, len(validation_images))),
        "evaluation_seconds": round(time.time() - start, 1),
    }
    print(
        f"Validation bits/dim: {figures['validation_bits_per_dim']:.3f} "
        f"({figures['validation_bits_per_dim_images']} images)"
    )
    if args.mode == "super_resolution":
        set_sampling_max_correction(model, args.sampling_max_correction)
        # Spread over the validation set (CIFAR-10 files are sorted by class).
        pick = np.linspace(0, len(validation_images) - 1, args.num_samples).round().astype(int)
        figures.update(super_resolution_samples(args, model, validation_images[pick]))
    else:
        figures.update(generated_samples(args, model))
    return figures


def set_sampling_max_correction(model, levels):
    """Bounds the offset prior's per-pixel consistency correction at
    `levels` intensity levels for what follows (sampling, export); 0 or
    None keeps the trained setting. Measured on the hour run's weights (32
    validation images, T = 0.8): without a bound a block whose first pixels
    overshot is pulled back by single pixels driven to black or white,
    17.8 dB PSNR / 36.1 dB consistency; bounded at 24 levels 19.4 / 30.1.
    """
    if not levels or "low_resolution_logit_bias" not in [layer.name for layer in model.layers]:
        return
    model.get_layer("low_resolution_logit_bias").max_correction = float(levels)


def _timed_sampler(model, inputs_name, jit_compile=True):
    """A compiled sampling function taking (inputs, seed, temperature,
    top_k) as tensors, so every decoding shares one XLA compilation."""
    decoder = CachedDecoder(model)
    if inputs_name == "low_resolution":

        def run(condition, seed, temperature, top_k):
            return super_resolve(model, condition, seed, temperature, decoder, top_k=top_k)
    else:

        def run(condition, seed, temperature, top_k):
            inputs = {"class_label": condition} if inputs_name == "class_label" else None
            return sample_images(
                decoder,
                tf.shape(condition)[0],
                (32, 32, 3),
                seed=seed,
                temperature=temperature,
                top_k=top_k,
                inputs=inputs,
            )

    return tf.function(run, jit_compile=jit_compile, autograph=False)


def _sample_all(sampler, condition, seed, decodings, batch_size):
    """Samples every decoding of `decodings` for all of `condition`, in
    batches of `batch_size`. Returns ({name: samples}, seconds of each
    batch call in order); the first call compiles."""
    samples, seconds = {}, []
    for name, temperature, top_k in decodings:
        parts = []
        for begin in range(0, len(condition), batch_size):
            start = time.time()
            out = sampler(
                tf.constant(condition[begin : begin + batch_size]),
                tf.constant(seed, tf.int64),
                tf.constant(temperature, tf.float32),
                tf.constant(top_k, tf.int32),
            )
            parts.append(np.asarray(out))
            seconds.append(time.time() - start)
        samples[name] = np.concatenate(parts)
    return samples, seconds


def psnr(candidates, references):
    """Mean over the images of `tf.image.psnr` (dB, intensities 0..255); an
    exact match counts as MAX_PSNR instead of infinity."""
    values = tf.image.psnr(
        tf.convert_to_tensor(candidates), tf.convert_to_tensor(references), max_val=255
    )
    return round(float(tf.reduce_mean(tf.minimum(values, MAX_PSNR))), 2)


def ssim(candidates, references):
    """Mean over the images of `tf.image.ssim` (intensities 0..255)."""
    values = tf.image.ssim(
        tf.convert_to_tensor(candidates), tf.convert_to_tensor(references), max_val=255
    )
    return round(float(tf.reduce_mean(values)), 4)


def consistency_psnr(candidates, low_resolution, factor=4):
    """PSNR between the candidates downsampled by the same box average that
    made the input (`images.downsample`) and the input itself: a super
    resolver must not contradict its input (Dahl et al. 2017, "Pixel
    Recursive Super Resolution", section 5)."""
    return psnr(images.downsample(candidates, factor), low_resolution)


def super_resolution_samples(args, model, originals):
    low = images.downsample(originals, 4)
    bicubic = images.upsample_bicubic(low, 32)
    sampler = _timed_sampler(model, "low_resolution")
    batch_size = min(args.sample_batch_size, len(originals))
    samples, seconds = _sample_all(sampler, low, args.seed, DECODINGS, batch_size)
    timed = seconds[1:] or seconds
    figures = {
        "samples": len(originals),
        "sampling_batch_size": batch_size,
        "sampling_seconds_first_call_with_compilation": round(seconds[0], 2),
        "sampling_seconds_per_batch": round(float(np.mean(timed)), 2),
        "sampling_seconds_per_image": round(float(np.mean(timed)) / batch_size, 3),
    }
    print(
        f"{'':>14}  {'PSNR':>8}  {'SSIM':>6}  {'consistency (8x8 PSNR)':>22}   "
        f"({len(originals)} validation images)"
    )
    for name, candidate in [("bicubic", bicubic)] + [(n, samples[n]) for n, _, _ in DECODINGS]:
        figures[f"psnr_{name}"] = psnr(candidate, originals)
        figures[f"ssim_{name}"] = ssim(candidate, originals)
        figures[f"consistency_psnr_{name}"] = consistency_psnr(candidate, low)
        print(
            f"{name:>14}  {figures[f'psnr_{name}']:6.2f} dB  {figures[f'ssim_{name}']:.3f}  "
            f"{figures[f'consistency_psnr_{name}']:19.2f} dB"
        )
    print(
        f"Sampling: {figures['sampling_seconds_per_image']:.2f} s per 32x32 image "
        f"(batch of {batch_size}, cached, XLA; first call with compilation "
        f"{figures['sampling_seconds_first_call_with_compilation']:.0f} s)"
    )
    # Eight rows spread over the samples (the file is sorted by class).
    rows = np.linspace(0, len(originals) - 1, min(8, len(originals))).round().astype(int)
    columns = (
        [
            ("low resolution 8x8", np.repeat(np.repeat(low[rows], 4, axis=1), 4, axis=2)),
            ("bicubic", bicubic[rows]),
            ("mode (argmax)", samples["mode"][rows]),  # the model's most faithful output
        ]
        + [(f"sample T={t}", samples[f"sample_T{t}"][rows]) for t in TEMPERATURES]
        + [
            ("original", originals[rows]),
        ]
    )
    path = os.path.join(args.output_dir, "samples.png")
    _grid(columns, path)
    print(f"Saved {path}")
    return figures


def generated_samples(args, model):
    if args.mode == "class_conditional":
        names = images.CIFAR10_CLASS_NAMES
        labels = np.repeat(np.arange(len(names)), args.num_samples).astype(np.int32)
        sampler = _timed_sampler(model, "class_label")
        condition = tf.constant(labels)
    else:
        labels = None
        sampler = _timed_sampler(model, None)
        condition = tf.zeros([args.num_samples], tf.int32)  # only its batch size is read
    decodings = [(t, t, 0) for t in TEMPERATURES[:2]]
    samples, seconds = _sample_all(
        sampler, np.asarray(condition), args.seed, decodings, len(condition)
    )
    batch = int(condition.shape[0])
    figures = {
        "samples": batch,
        "sampling_seconds_first_call_with_compilation": round(seconds[0], 2),
        "sampling_seconds_per_batch": round(seconds[1], 2),
        "sampling_seconds_per_image": round(seconds[1] / batch, 3),
    }
    print(
        f"Sampling: {figures['sampling_seconds_per_image']:.2f} s per 32x32 image (batch of {batch})"
    )
    for temperature, _, _ in decodings:
        pictures = samples[temperature]
        rows = len(names) if labels is not None else int(np.ceil(batch / 8))
        per_row = args.num_samples if labels is not None else 8
        path = os.path.join(args.output_dir, f"samples_T{temperature}.png")
        _mosaic(
            pictures,
            rows,
            per_row,
            path,
            row_names=names if labels is not None else None,
            title=f"{args.mode.replace('_', ' ')}, temperature {temperature}",
        )
        print(f"Saved {path}")
    return figures


def _grid(columns, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = len(columns[0][1])
    fig, axes = plt.subplots(
        rows, len(columns), figsize=(1.6 * len(columns), 1.6 * rows), squeeze=False
    )
    for j, (title, pictures) in enumerate(columns):
        for i in range(rows):
            axes[i, j].imshow(pictures[i], interpolation="nearest")
            axes[i, j].axis("off")
        axes[0, j].set_title(title, fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _mosaic(pictures, rows, per_row, path, row_names=None, title=None):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(
        rows, per_row, figsize=(1.2 * per_row + 0.8, 1.2 * rows), squeeze=False
    )
    for i in range(rows):
        for j in range(per_row):
            k = i * per_row + j
            axes[i, j].axis("off")
            if k < len(pictures):
                axes[i, j].imshow(pictures[k], interpolation="nearest")
        if row_names is not None:
            axes[i, 0].text(-4, 16, row_names[i], ha="right", va="center", fontsize=8)
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
