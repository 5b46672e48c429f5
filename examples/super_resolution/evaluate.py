"""Evaluation of the example's Image Transformers: validation bits/dim,
sampling with the cache (seconds per image), PSNR/SSIM against bicubic
upsampling, and PNG grids. Used by train.py (also with --skip_training)."""

import os
import time

import numpy as np
import tensorflow as tf

from keras_attn.export.super_resolver import super_resolve
from keras_attn.generation import CachedDecoder, sample
from keras_attn.models.image_transformer import START_TOKEN
from keras_attn.preprocessing import images

TEMPERATURES = (1.0, 0.9)


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
    print(f"Validation bits/dim: {figures['validation_bits_per_dim']:.3f} "
          f"({figures['validation_bits_per_dim_images']} images)")
    if args.mode == "super_resolution":
        # Spread over the validation set (CIFAR-10 files are sorted by class).
        pick = np.linspace(0, len(validation_images) - 1, args.num_samples).round().astype(int)
        figures.update(super_resolution_samples(args, model, validation_images[pick]))
    else:
        figures.update(generated_samples(args, model))
    return figures


def _timed_sampler(model, inputs_name, jit_compile=True):
    """A compiled sampling function taking (inputs, seed, temperature) as
    tensors, so both temperatures share one XLA compilation."""
    decoder = CachedDecoder(model)
    if inputs_name == "low_resolution":
        def run(condition, seed, temperature):
            return super_resolve(model, condition, seed, temperature, decoder)
    else:
        def run(condition, seed, temperature):
            batch = tf.shape(condition)[0]
            inputs = {"class_label": condition} if inputs_name == "class_label" else None
            tokens = sample(
                decoder, tf.fill([batch, 1], START_TOKEN), max_length=32 * 32 * 3 + 1,
                seed=seed, temperature=temperature, prompt_lengths=tf.ones([batch], tf.int32),
                inputs=inputs,
            )
            return tf.reshape(tf.cast(tf.convert_to_tensor(tokens)[:, 1:], tf.uint8), [batch, 32, 32, 3])
    return tf.function(run, jit_compile=jit_compile, autograph=False)


def _sample_all(sampler, condition, seed):
    """Samples at each temperature; the first call compiles, the timed
    figure is the mean of the runs after it (the second run also compiled
    nothing new)."""
    samples, seconds = {}, []
    for i, temperature in enumerate(TEMPERATURES):
        start = time.time()
        out = sampler(condition, tf.constant(seed, tf.int64), tf.constant(temperature, tf.float32))
        samples[temperature] = np.asarray(out)
        seconds.append(time.time() - start)
    return samples, seconds


def super_resolution_samples(args, model, originals):
    low = images.downsample(originals, 4)
    bicubic = images.upsample_bicubic(low, 32)
    sampler = _timed_sampler(model, "low_resolution")
    samples, seconds = _sample_all(sampler, tf.constant(low), args.seed)
    batch = len(originals)
    figures = {
        "samples": batch,
        "sampling_seconds_first_call_with_compilation": round(seconds[0], 2),
        "sampling_seconds_per_batch": round(seconds[1], 2),
        "sampling_seconds_per_image": round(seconds[1] / batch, 3),
    }
    for name, candidate in [("bicubic", bicubic)] + [
        (f"sample_T{t}", samples[t]) for t in TEMPERATURES
    ]:
        psnr, ssim = _psnr_ssim(candidate, originals)
        figures[f"psnr_{name}"], figures[f"ssim_{name}"] = psnr, ssim
        print(f"{name:>14}: PSNR {psnr:6.2f} dB  SSIM {ssim:.3f}")
    print(f"Sampling: {figures['sampling_seconds_per_image']:.2f} s per 32x32 image "
          f"(batch of {batch}, cached, XLA; first call with compilation "
          f"{figures['sampling_seconds_first_call_with_compilation']:.0f} s)")
    columns = [
        ("low resolution 8x8", np.repeat(np.repeat(low, 4, axis=1), 4, axis=2)),
        ("bicubic", bicubic),
        ("sample T=1.0", samples[1.0]),
        ("sample T=0.9", samples[0.9]),
        ("original", originals),
    ]
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
    samples, seconds = _sample_all(sampler, condition, args.seed)
    batch = int(condition.shape[0])
    figures = {
        "samples": batch,
        "sampling_seconds_first_call_with_compilation": round(seconds[0], 2),
        "sampling_seconds_per_batch": round(seconds[1], 2),
        "sampling_seconds_per_image": round(seconds[1] / batch, 3),
    }
    print(f"Sampling: {figures['sampling_seconds_per_image']:.2f} s per 32x32 image (batch of {batch})")
    for temperature in TEMPERATURES:
        pictures = samples[temperature]
        rows = len(names) if labels is not None else int(np.ceil(batch / 8))
        per_row = args.num_samples if labels is not None else 8
        path = os.path.join(args.output_dir, f"samples_T{temperature}.png")
        _mosaic(pictures, rows, per_row, path,
                row_names=names if labels is not None else None,
                title=f"{args.mode.replace('_', ' ')}, temperature {temperature}")
        print(f"Saved {path}")
    return figures


def _psnr_ssim(candidate, reference):
    """Mean PSNR (dB) and SSIM over the images, on 0..255 intensities."""
    a = tf.convert_to_tensor(candidate)
    b = tf.convert_to_tensor(reference)
    psnr = tf.image.psnr(a, b, max_val=255)
    ssim = tf.image.ssim(a, b, max_val=255)
    return round(float(tf.reduce_mean(psnr)), 2), round(float(tf.reduce_mean(ssim)), 4)


def _grid(columns, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = len(columns[0][1])
    fig, axes = plt.subplots(rows, len(columns), figsize=(1.6 * len(columns), 1.6 * rows),
                             squeeze=False)
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

    fig, axes = plt.subplots(rows, per_row, figsize=(1.2 * per_row + 0.8, 1.2 * rows), squeeze=False)
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
