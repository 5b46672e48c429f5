import io
import os

import numpy as np
import pytest

from keras_attn.preprocessing import images

SAMPLE = os.path.join(
    os.path.dirname(__file__),
    "..",
    "..",
    "examples",
    "super_resolution",
    "data",
    "cifar10_sample.npz",
)


@pytest.fixture(scope="module")
def sample_images():
    """The first 24 images of the shipped CIFAR-10 sample (real photos).
    Decoding the JPEGs takes TensorFlow (skipped in a venv without it)."""
    pytest.importorskip("tensorflow", reason="the sample's JPEGs are decoded with TensorFlow")
    return images.load_cifar10(SAMPLE, split="all")[0][:24]


def test_raster_order_is_pixel_by_pixel_rgb_and_round_trips(sample_images):
    sequences = images.to_raster(sample_images)
    assert sequences.shape == (24, 3072) and sequences.dtype == np.int32
    # Index (row * W + column) * C + channel, by hand for a few entries.
    for row, column, channel in [(0, 0, 0), (0, 0, 2), (0, 1, 0), (5, 31, 1), (31, 31, 2)]:
        index = (row * 32 + column) * 3 + channel
        np.testing.assert_array_equal(sequences[:, index], sample_images[:, row, column, channel])
    back = images.from_raster(sequences, 32, 32, 3)
    assert back.dtype == np.uint8
    np.testing.assert_array_equal(back, sample_images)


def test_raster_errors():
    with pytest.raises(
        ValueError,
        match=r"`images` must be uint8 of shape \(batch, height, width, channels\). Received: uint8 \(32, 32, 3\)\.",
    ):
        images.to_raster(np.zeros((32, 32, 3), np.uint8))
    with pytest.raises(ValueError, match=r"Expected \(batch, 3072\) intensities"):
        images.from_raster(np.zeros((1, 3000), np.int32), 32, 32)
    with pytest.raises(
        ValueError, match=r"intensities in 0..255. Received: shape \(1, 3\), values in 0..256"
    ):
        images.from_raster(np.array([[0, 256, 3]]), 1, 1, 3)


def test_decoder_inputs_shift_right_behind_the_start_token():
    targets = np.array([[5, 0, 255, 7], [1, 2, 3, 4]])
    np.testing.assert_array_equal(
        images.decoder_inputs(targets), [[256, 5, 0, 255], [256, 1, 2, 3]]
    )
    from keras_attn.models.image_transformer import NUM_INTENSITIES, START_TOKEN

    assert images.START_TOKEN == START_TOKEN == 256
    assert images.NUM_INTENSITIES == NUM_INTENSITIES == 256


def test_downsample_is_the_rounded_block_mean():
    image = np.zeros((1, 4, 8, 3), np.uint8)
    # Block (0, 0), channel 0: 16 values summing to 8 -> mean 0.5 -> 1 (half up).
    image[0, :2, :4, 0] = 1
    # Block (0, 1), channel 1: fifteen 255s and one 0 -> 239.0625 -> 239.
    image[0, :, 4:, 1] = 255
    image[0, 3, 7, 1] = 0
    # Channel 2: a ramp 0..15 in block (0, 0) -> mean 7.5 -> 8.
    image[0, :, :4, 2] = np.arange(16).reshape(4, 4)
    out = images.downsample(image, 4)
    assert out.shape == (1, 1, 2, 3) and out.dtype == np.uint8
    np.testing.assert_array_equal(out[0, 0, 0], [1, 0, 8])
    np.testing.assert_array_equal(out[0, 0, 1], [0, 239, 0])


def test_downsample_real_images_against_float_mean(sample_images):
    low = images.downsample(sample_images, 4)
    assert low.shape == (24, 8, 8, 3)
    blocks = sample_images.astype(np.float64).reshape(24, 8, 4, 8, 4, 3).mean(axis=(2, 4))
    np.testing.assert_array_equal(low, np.floor(blocks + 0.5).astype(np.uint8))
    for factor in (3, 0, 2.0):
        with pytest.raises(
            ValueError,
            match=rf"`factor` must be a positive int dividing the image sides 32x32. "
            rf"Received: factor={factor}\.",
        ):
            images.downsample(sample_images, factor)


def test_bicubic_upsampling_keeps_constants_and_reproduces_ramps(sample_images):
    flat = np.full((1, 8, 8, 3), 77, np.uint8)
    np.testing.assert_array_equal(images.upsample_bicubic(flat, 32), np.full((1, 32, 32, 3), 77))
    # Cubic convolution reproduces a linear ramp away from the borders; with
    # half-pixel centres output column X samples source column (X + 0.5) / 4 - 0.5.
    ramp = np.broadcast_to((20 + 25 * np.arange(8))[None, None, :, None], (1, 8, 8, 3))
    up = images.upsample_bicubic(ramp.astype(np.uint8), 32)
    source = (np.arange(32) + 0.5) / 4 - 0.5
    interior = (source >= 1) & (source <= 6)
    np.testing.assert_array_equal(up[0, 10, interior, 1], np.round(20 + 25 * source[interior]))
    low = images.downsample(sample_images, 4)
    assert images.upsample_bicubic(low, (32, 32)).shape == (24, 32, 32, 3)


def test_split_is_deterministic_disjoint_and_complete():
    train, validation = images.split_indices(1000, 0.1, seed=0)
    assert len(train) == 900 and len(validation) == 100
    assert not set(train) & set(validation)
    assert sorted(np.concatenate([train, validation])) == list(range(1000))
    again = images.split_indices(1000, 0.1, seed=0)
    np.testing.assert_array_equal(again[1], validation)
    assert not np.array_equal(images.split_indices(1000, 0.1, seed=1)[1], validation)
    with pytest.raises(ValueError, match=r"`validation_fraction` must be a number in \(0, 1\)"):
        images.split_indices(10, 1.0)


def test_load_cifar10_sample_splits_and_decodes_like_pillow():
    from PIL import Image

    pytest.importorskip("tensorflow", reason="the sample's JPEGs are decoded with TensorFlow")
    train, train_labels = images.load_cifar10(SAMPLE, "train")
    validation, validation_labels = images.load_cifar10(SAMPLE, "validation")
    assert train.shape == (900, 32, 32, 3) and validation.shape == (100, 32, 32, 3)
    assert np.bincount(np.concatenate([train_labels, validation_labels])).tolist() == [100] * 10
    with np.load(SAMPLE) as data:
        jpeg, offsets = data["jpeg"], data["offsets"]
    _, validation_index = images.split_indices(1000, 0.1, 0)
    for k in (0, 57, 99):
        i = validation_index[k]
        pil = np.asarray(
            Image.open(io.BytesIO(jpeg[offsets[i] : offsets[i + 1]].tobytes())).convert("RGB")
        )
        np.testing.assert_array_equal(validation[k], pil)
    with pytest.raises(ValueError, match='split` must be "train", "validation" or "all"'):
        images.load_cifar10(SAMPLE, "test")


def test_load_cifar10_names_a_file_of_another_kind(tmp_path):
    # A picture passed as --data: NumPy's own error spoke of allow_pickle.
    (tmp_path / "cat.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(64))
    with pytest.raises(
        ValueError, match=r"cat.png' is not a NumPy .npz archive .*load_image_directory"
    ):
        images.load_cifar10(str(tmp_path / "cat.png"))
    np.save(tmp_path / "one.npy", np.zeros(3))
    with pytest.raises(ValueError, match=r"one.npy' is not a NumPy .npz archive"):
        images.load_cifar10(str(tmp_path / "one.npy"))
    np.savez(tmp_path / "other.npz", pixels=np.zeros(3))
    with pytest.raises(ValueError, match=r"lacks the arrays \['jpeg', 'labels', 'offsets'\]"):
        images.load_cifar10(str(tmp_path / "other.npz"))


def test_image_directory_rgb_centre_crop_resize(tmp_path, sample_images):
    from PIL import Image

    wide = np.concatenate(
        [sample_images[0][:, :4], sample_images[1], sample_images[2][:, :4]], axis=1
    )
    Image.fromarray(wide).save(tmp_path / "a_wide.png")  # 32 x 40: centre crop only
    Image.fromarray(sample_images[3]).convert("L").save(tmp_path / "b_gray.png")
    rgba = np.concatenate([sample_images[4], np.full((32, 32, 1), 128, np.uint8)], axis=-1)
    Image.fromarray(rgba, "RGBA").save(tmp_path / "c_rgba.png")
    Image.fromarray(sample_images[5]).resize((64, 64), Image.Resampling.NEAREST).save(
        tmp_path / "d_big.png"
    )
    (tmp_path / "notes.txt").write_text("not an image")
    (tmp_path / "e_broken.png").write_bytes(b"not a png")
    with pytest.warns(UserWarning, match="Skipping 'e_broken.png'"):
        loaded, names = images.load_image_directory(str(tmp_path))
    assert names == ["a_wide.png", "b_gray.png", "c_rgba.png", "d_big.png"]
    assert loaded.shape == (4, 32, 32, 3) and loaded.dtype == np.uint8
    np.testing.assert_array_equal(loaded[0], sample_images[1])
    gray = loaded[1].astype(int)
    assert (gray[..., 0] == gray[..., 1]).all() and (gray[..., 1] == gray[..., 2]).all()
    np.testing.assert_array_equal(loaded[2], sample_images[4])
    # 64 -> 32 with an antialiased filter: close to the pixel-doubled original.
    assert np.abs(loaded[3].astype(int) - sample_images[5]).mean() < 6
    with pytest.raises(ValueError, match="No readable image"):
        images.load_image_directory(_empty(tmp_path))


def _empty(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    return str(empty)


@pytest.mark.requires_tensorflow  # tf.data pipelines
def test_datasets_pair_inputs_with_shifted_targets(sample_images):
    labels = np.arange(24) % 10
    inputs, targets = next(iter(images.super_resolution_dataset(sample_images, 5)))
    np.testing.assert_array_equal(targets, images.to_raster(sample_images[:5]))
    np.testing.assert_array_equal(inputs["decoder_tokens"], images.decoder_inputs(targets))
    np.testing.assert_array_equal(
        inputs["low_resolution"], images.to_raster(images.downsample(sample_images[:5]))
    )
    inputs, targets = next(iter(images.generation_dataset(sample_images, 4, labels=labels)))
    np.testing.assert_array_equal(inputs["class_label"], labels[:4])
    np.testing.assert_array_equal(inputs["decoder_tokens"][:, 1:], np.asarray(targets)[:, :-1])
    assert set(inputs) == {"class_label", "decoder_tokens"}
    with pytest.raises(
        ValueError, match=r"`labels` must be class ids.* of shape \(24,\). Received shape \(3,\)"
    ):
        images.generation_dataset(sample_images, 4, labels=labels[:3])


def test_load_image_scales_16_bit_grayscale_to_8_bits(tmp_path):
    from PIL import Image

    # A 16-bit ramp 0..65535 across 32 columns: Pillow's convert("RGB")
    # clips it (every value over 255 turns white); it must come out as the
    # same ramp on 0..255, in all three channels.
    ramp = np.tile(np.linspace(0, 65535, 32).round().astype(np.uint16), (32, 1))
    path = str(tmp_path / "ramp16.png")
    Image.fromarray(ramp).save(path)
    with Image.open(path) as saved:
        assert saved.mode.startswith("I")
    loaded = images.load_image(path, size=32)
    expected = np.rint(ramp / 257.0).astype(np.uint8)
    np.testing.assert_array_equal(loaded, np.repeat(expected[..., None], 3, axis=-1))


@pytest.mark.parametrize("scale", [1.0, 255.0])
def test_load_image_reads_float_grayscale_on_either_scale(tmp_path, scale):
    from PIL import Image

    # A 32-bit float TIFF on 0..1 came out black (convert("RGB") truncates).
    ramp = np.tile(np.linspace(0.0, 1.0, 32, dtype=np.float32), (32, 1)) * np.float32(scale)
    path = str(tmp_path / "ramp.tif")
    Image.fromarray(ramp, "F").save(path)
    with Image.open(path) as saved:
        assert saved.mode == "F"
    loaded = images.load_image(path, size=32)
    expected = np.rint(ramp * (255.0 / scale)).astype(np.uint8)
    np.testing.assert_array_equal(loaded, np.repeat(expected[..., None], 3, axis=-1))


@pytest.mark.parametrize("offsets", [[], 0, [0, 3], [1, 4], [0, 2, 2, 4]])
def test_decode_jpegs_refuses_offsets_that_do_not_fit_the_bytes(offsets):
    # An empty list raised IndexError (offsets[0]) before the check.
    with pytest.raises(ValueError, match="`offsets` must be rising from 0 to len"):
        images.decode_jpegs(b"abcd", offsets)


def _jpeg_files(count):
    """`count` JPEG files of 8x8 noise (file i has red level 40 * i in its first pixel's block)."""
    from PIL import Image

    rng = np.random.default_rng(0)
    files = []
    for i in range(count):
        pixels = rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)
        pixels[:, :, 0] = 40 * i  # a flat red channel tells the files apart
        buffer = io.BytesIO()
        Image.fromarray(pixels).save(buffer, "JPEG", quality=95)
        files.append(buffer.getvalue())
    return files


def _concatenated(files):
    return np.frombuffer(b"".join(files), np.uint8), np.cumsum([0] + [len(f) for f in files])


def test_decode_jpegs_reads_negative_indices_as_numpy_does_and_names_one_out_of_range():
    # [-2] of three files returned the third, [-1] failed inside TensorFlow
    # and [3] raised an IndexError naming index 4.
    pytest.importorskip("tensorflow", reason="decode_jpegs decodes with TensorFlow")
    jpeg_bytes, offsets = _concatenated(_jpeg_files(3))

    def red(indices):
        return np.round(
            images.decode_jpegs(jpeg_bytes, offsets, indices)[:, :, :, 0].mean((1, 2)) / 40
        )

    assert red([-2]).tolist() == [1] and red([-1, 0, -3]).tolist() == [2, 0, 0]
    assert red(np.array([2, -1], np.int32)).tolist() == [2, 2]
    with pytest.raises(
        ValueError,
        match=r"`indices\[0\]` must be a file index in \[-3, 3\). "
        r"Received: indices\[0\]=3.",
    ):
        images.decode_jpegs(jpeg_bytes, offsets, [3])
    with pytest.raises(
        ValueError,
        match=r"`indices\[1\]` must be a file index in \[-3, 3\). "
        r"Received: indices\[1\]=-4.",
    ):
        images.decode_jpegs(jpeg_bytes, offsets, [0, -4, 7])
    with pytest.raises(
        ValueError,
        match=r"`indices` must be a list of ints \(file indices\). "
        r"Received: indices=array\(\[0.5, 1. \]\)",
    ):
        images.decode_jpegs(jpeg_bytes, offsets, [0.5, 1.0])


def test_a_corrupt_jpeg_is_named_by_its_index(tmp_path):
    # It failed with TensorFlow's "jpeg::Uncompress failed" from a tf.data
    # iterator, which names no file.
    pytest.importorskip("tensorflow", reason="decode_jpegs decodes with TensorFlow")
    files = _jpeg_files(5)
    files[3] = files[3][: len(files[3]) // 2]  # a truncated file
    jpeg_bytes, offsets = _concatenated(files)
    where = rf"JPEG file 3 \(bytes {offsets[3]}:{offsets[4]}\) cannot be decoded: jpeg::Uncompress failed"
    with pytest.raises(ValueError, match=where):
        images.decode_jpegs(jpeg_bytes, offsets)
    # In a later batch and through indices, still named by its index in the set.
    with pytest.raises(ValueError, match=where):
        images.decode_jpegs(jpeg_bytes, offsets, [4, 1, 0, -2], batch_size=2)
    assert images.decode_jpegs(jpeg_bytes, offsets, [4, 0, 1, 2], batch_size=2).shape == (
        4,
        8,
        8,
        3,
    )
    path = tmp_path / "damaged.npz"
    np.savez(path, jpeg=jpeg_bytes, offsets=offsets, labels=np.arange(5))
    with pytest.raises(ValueError, match=r"damaged.npz': " + where):
        images.load_cifar10(str(path), "all")


def test_load_cifar10_names_a_truncated_file(tmp_path):
    # A truncated .npz raised zipfile.BadZipFile.
    path = tmp_path / "cut.npz"
    jpeg_bytes, offsets = _concatenated([b"\xff\xd8 one", b"\xff\xd8 two"])
    np.savez(path, jpeg=jpeg_bytes, offsets=offsets, labels=np.array([1, 2]))
    path.write_bytes(path.read_bytes()[:-100])
    with pytest.raises(
        ValueError,
        match=r"cut.npz' is not a NumPy .npz archive \(or is truncated or damaged: "
        r"File is not a zip file\); for a folder",
    ):
        images.load_cifar10(str(path))


def test_sizes_seeds_and_labels_are_checked(tmp_path):
    # Each gave a NumPy or TensorFlow error of its own (AxisError, TypeError,
    # InvalidArgumentError), an empty image (size 0), or read a label 1.5 as 1.
    image = np.zeros((1, 2, 2, 3), np.uint8)
    for call, message in (
        (
            lambda: images.from_raster(np.zeros((1, 12)), 2.0, 2, 3),
            r"`height` must be a positive integer",
        ),
        (lambda: images.upsample_bicubic(image, 0), r"`size` must be a positive int or a pair"),
        (
            lambda: images.split_indices(10.0),
            r"`num_examples` must be an int >= 2. Received: num_examples=10.0",
        ),
        (lambda: images.split_indices(10, seed="a"), r"`seed` must be an int. Received: seed='a'"),
        (lambda: images.generation_dataset(image, 0), r"`batch_size` must be a positive integer"),
        (
            lambda: images.super_resolution_dataset(np.zeros((1, 8, 8, 3), np.uint8), 0),
            r"`batch_size` must be a positive integer",
        ),
        (
            lambda: images.load_image(tmp_path / "x.png", size=0),
            r"`size` must be a positive integer",
        ),
        (
            lambda: images.load_image(tmp_path / "x.png", size=8.5),
            r"`size` must be a positive integer",
        ),
    ):
        with pytest.raises(ValueError, match=message):
            call()
    two = np.zeros((2, 2, 2, 3), np.uint8)
    for labels in ([-1, 0], [1.5, 0], ["a", "b"]):
        with pytest.raises(ValueError, match=r"`labels` must be class ids, whole numbers >= 0"):
            images.generation_dataset(two, 2, labels=labels)
    inputs, _ = next(iter(images.generation_dataset(two, 2, labels=[3.0, 0])))
    assert inputs["class_label"].numpy().tolist() == [3, 0]
    assert images.to_raster(np.zeros((0, 2, 2, 3), np.uint8)).shape == (
        0,
        12,
    )  # a reshape error before
