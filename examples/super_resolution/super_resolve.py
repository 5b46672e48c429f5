"""Super-resolve your own pictures with an exported super resolver (8x8 -> 32x32).

    python examples/super_resolution/super_resolve.py runs/super_resolution/export \\
        --image_dir ~/Pictures --output_dir runs/my_pictures

Each picture is converted to RGB, centre-cropped and resized to 32x32
(Pillow, `keras_attn.preprocessing.images.load_image`), then area-averaged to
the 8x8 input the model takes; the SavedModel (the highest version folder
under the given base folder, as TF Serving picks it) samples the 32x32
image in its graph. Saves one PNG per picture (input | bicubic | sample |
the 32x32 picture, each column named above it) and prints PSNR/SSIM of sample and bicubic against it.
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import quiet  # noqa: E402,F401  (first: TensorFlow's start-up logs only with --verbose)

# isort: split

import numpy as np  # noqa: E402
import served  # noqa: E402  (the newest version, as TF Serving loads it)
import tensorflow as tf  # noqa: E402

from keras_attn.preprocessing import images  # noqa: E402

COLUMNS = ("input (8x8)", "bicubic", "sample", "your picture")


def labelled(strip):
    """`strip` (the four 128-pixel columns of COLUMNS) under a row of their names."""
    from PIL import Image, ImageDraw

    page = Image.new("RGB", (strip.width, strip.height + 18), "white")
    page.paste(strip, (0, 18))
    draw = ImageDraw.Draw(page)
    width = strip.width // len(COLUMNS)
    for i, name in enumerate(COLUMNS):
        draw.text((i * width + 4, 3), name, fill="black")
    return page


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("export_dir", help="base folder of the exported super resolver")
    parser.add_argument("--image_dir", required=True, help="folder of pictures")
    parser.add_argument("--output_dir", default=os.path.join("runs", "super_resolved"))
    parser.add_argument(
        "--temperature",
        type=float,
        default=0.9,
        help="sampling temperature (default 0.9, as the README's figures; the "
        "export's serving_default samples at 1.0)",
    )
    parser.add_argument(
        "--verbose", action="store_true", help="show TensorFlow's start-up logs (hidden by default)"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--top_k", type=int, default=0, help="0 = sample among all intensities")
    parser.add_argument("--top_p", type=float, default=1.0, help="nucleus mass; 1 = no filter")
    args = parser.parse_args(argv)
    if not args.temperature > 0:
        parser.error(
            f"--temperature must be > 0 (1 = the model's distribution), received {args.temperature}"
        )
    if args.top_k < 0:
        parser.error(f"--top_k must be >= 0 (0 = off), received {args.top_k}")
    if not 0 < args.top_p <= 1:
        parser.error(f"--top_p must be in (0, 1] (1 = off), received {args.top_p}")
    if not os.path.isdir(args.image_dir):
        parser.error(
            f"--image_dir {args.image_dir}: no such folder. Pass a folder of your own "
            "pictures (JPEG/PNG; each is centre-cropped and resized to 32x32)."
        )
    if os.path.exists(args.output_dir) and not os.path.isdir(args.output_dir):
        parser.error(f"--output_dir {args.output_dir} is a file; pass a folder for the pictures.")

    _, sample = served.load_signature(
        args.export_dir,
        "sample_with_options",
        inputs=("image", "temperature", "seed", "top_k", "top_p"),
        written_by="examples/super_resolution/train.py",
    )
    originals, names = images.load_image_directory(args.image_dir, size=32)
    low = images.downsample(originals, 4)
    sampled = sample(
        image=tf.constant(low),
        temperature=tf.constant(args.temperature, tf.float32),
        seed=tf.constant(args.seed, tf.int64),
        top_k=tf.constant(args.top_k, tf.int32),
        top_p=tf.constant(args.top_p, tf.float32),
    )["image"].numpy()
    bicubic = images.upsample_bicubic(low, 32)
    os.makedirs(args.output_dir, exist_ok=True)
    from PIL import Image

    stems = [os.path.splitext(name)[0] for name in names]
    for name, stem, small, cubic, sample, original in zip(
        names, stems, low, bicubic, sampled, originals
    ):
        strip = np.concatenate(
            [np.repeat(np.repeat(small, 4, axis=0), 4, axis=1), cubic, sample, original], axis=1
        )
        if stems.count(stem) > 1:  # x.png and x.jpg: keep both
            stem = name.replace(".", "_")
        out = os.path.join(args.output_dir, stem + "_super_resolved.png")
        labelled(
            Image.fromarray(strip).resize(
                (strip.shape[1] * 4, strip.shape[0] * 4), Image.Resampling.NEAREST
            )
        ).save(out)
        psnr = [float(tf.image.psnr(x, original, 255)) for x in (sample, cubic)]
        ssim = [
            float(tf.image.ssim(tf.constant(x), tf.constant(original), 255))
            for x in (sample, cubic)
        ]
        print(
            f"{name}: sample PSNR {psnr[0]:.2f} dB SSIM {ssim[0]:.3f} | "
            f"bicubic PSNR {psnr[1]:.2f} dB SSIM {ssim[1]:.3f} -> {out}"
        )


if __name__ == "__main__":
    quiet.run(main)
