"""The super-resolution example's images: where they come from (`--data`:
the shipped 1,000-image CIFAR-10 sample, the full CIFAR-10 training set
through `keras_attn.datasets.cifar10`, or `--image_dir`: a folder of your
own pictures), their deterministic train/validation split, and the
`tf.data` batches train.py trains and evaluates on: the batches of each
mode, and the endless, resumable training stream.
"""

import os

import training_utils

from keras_attn.preprocessing import images

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_DATA = os.path.join(HERE, "data", "cifar10_sample.npz")
FULL_DATA = "cifar10"  # --data cifar10: all 50,000 training images, keras_attn.datasets.cifar10
# The project's shared data folder, beside the repository (its machines hold the full data sets).
SHARED_DATA_DIR = os.path.normpath(os.path.join(HERE, "..", "..", "..", "shared", "data"))


def offline_data_dir(data_dir=None):
    """The offline data folder for --data cifar10: --data_dir, else
    $KERAS_ATTN_DATA, else the shared data folder beside the repository where
    it holds cifar10/, else None (keras_attn.datasets' cache or a download)."""
    from keras_attn.datasets import DATA_ENV_VAR

    if data_dir or os.environ.get(DATA_ENV_VAR):
        return data_dir or os.environ[DATA_ENV_VAR]
    return SHARED_DATA_DIR if os.path.isdir(os.path.join(SHARED_DATA_DIR, "cifar10")) else None


def load_data(args):
    """(train_images, train_labels, validation_images, validation_labels)."""
    if args.image_dir:
        pictures, _ = images.load_image_directory(args.image_dir, size=32)
        train, validation = images.split_indices(
            len(pictures), args.validation_fraction, args.split_seed
        )
        return pictures[train], None, pictures[validation], None
    path = args.data
    if args.data == FULL_DATA:
        from keras_attn.datasets import cifar10

        data_dir = offline_data_dir(args.data_dir)
        path = args.data_source = cifar10.fetch(data_dir=data_dir)  # checked against its sha256
        print(f"CIFAR-10 from {path}", flush=True)
        if not path.endswith(".npz"):  # the official archive: lossless uint8 arrays
            pictures, labels = cifar10.load_data("train", data_dir=data_dir)
            labels = labels.astype("int32")
            train, validation = images.split_indices(
                len(pictures), args.validation_fraction, args.split_seed
            )
            return pictures[train], labels[train], pictures[validation], labels[validation]
        # The project's JPEG copy (an offline folder): read as any --data .npz.
    train_images, train_labels = images.load_cifar10(
        path, "train", args.validation_fraction, args.split_seed
    )
    validation_images, validation_labels = images.load_cifar10(
        path, "validation", args.validation_fraction, args.split_seed
    )
    return train_images, train_labels, validation_images, validation_labels


def dataset(args, pictures, labels, shuffle=False, repeat=False):
    if args.mode == "super_resolution":
        return images.super_resolution_dataset(
            pictures, args.batch_size, shuffle=shuffle, seed=args.seed, repeat=repeat
        )
    return images.generation_dataset(
        pictures,
        args.batch_size,
        labels=labels if args.mode == "class_conditional" else None,
        shuffle=shuffle,
        seed=args.seed,
        repeat=repeat,
    )


def training_stream(args, pictures, labels, start_step=0):
    """Endless global batches of `dataset(args, ...)`'s elements, each pass
    over the pictures shuffled with its own seed, starting `start_step`
    batches in (skipping whole passes without computing them)."""
    elements = dataset(args, pictures, labels).unbatch()
    count = len(pictures)
    first_pass, offset = divmod(start_step * args.batch_size, count)
    stream = training_utils.shuffled_passes(
        lambda seed: elements.shuffle(count, seed=seed, reshuffle_each_iteration=False),
        args.seed,
        first_pass=first_pass,
    )
    return stream.skip(offset).batch(args.batch_size).prefetch(4)
