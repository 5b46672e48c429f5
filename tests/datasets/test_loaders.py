"""The JSB Chorales, POP909 and CIFAR-10 loaders against a file server on
127.0.0.1: the shipped samples (and a small CIFAR-10 archive in the official
format) served at the official layout, checked, cached and read."""

import hashlib
import io
import os
import pickle
import shutil
import tarfile

import numpy as np
import pytest

from keras_attn.datasets import cifar10, jsb_chorales, pop909
from tests.datasets.conftest import SHIPPED_CIFAR10, SHIPPED_JSB, SHIPPED_POP909


def _sha256(path):
    with open(path, "rb") as handle:
        return hashlib.sha256(handle.read()).hexdigest()


# ------------------------------------------------------------- JSB Chorales
def test_jsb_downloads_only_the_official_file(server, cache_dir):
    # The shipped file is this project's copy (no test split), accepted
    # offline but not as a download of the official URL.
    server.add(SHIPPED_JSB, jsb_chorales.SEPARATED)
    with pytest.raises(ValueError, match=jsb_chorales.SHA256[jsb_chorales.SEPARATED][0]):
        jsb_chorales.fetch(cache_dir=cache_dir, base_url=server.url)
    assert not os.listdir(os.path.join(cache_dir, "datasets", "keras_attn", "jsb_chorales"))


def test_jsb_download_cache_and_splits(server, cache_dir, monkeypatch):
    server.add(SHIPPED_JSB, jsb_chorales.SEPARATED)
    # Served as if it were the official file.
    monkeypatch.setitem(jsb_chorales.SHA256, jsb_chorales.SEPARATED, (_sha256(SHIPPED_JSB),))
    path = jsb_chorales.fetch(cache_dir=cache_dir, base_url=server.url)
    assert path == os.path.join(
        cache_dir, "datasets", "keras_attn", "jsb_chorales", "Jsb16thSeparated.json"
    )
    server.stop()
    train = jsb_chorales.load_data("train", cache_dir=cache_dir, base_url=server.url)
    valid = jsb_chorales.load_data("valid", cache_dir=cache_dir, base_url=server.url)
    assert (len(train), len(valid)) == (229, 76)
    assert all(c.ndim == 2 and c.shape[1] == 4 and c.dtype == np.int32 for c in train)
    assert train[0][0].tolist() == [74, 70, 65, 58]
    with pytest.raises(ValueError, match="leaves out the test split"):
        jsb_chorales.load_data("test", cache_dir=cache_dir)
    assert server.total() == 1


def test_jsb_offline_copy_is_accepted(tmp_path, monkeypatch):
    offline = tmp_path / "offline"
    (offline / "jsb_chorales").mkdir(parents=True)
    shutil.copyfile(SHIPPED_JSB, offline / "jsb_chorales" / "Jsb16thSeparated.json")
    monkeypatch.setenv("KERAS_ATTN_DATA", str(offline))
    assert len(jsb_chorales.load_data("valid")) == 76
    with pytest.raises(ValueError, match="name='bach.json'"):
        jsb_chorales.fetch("bach.json")


# ------------------------------------------------------------------- POP909
SONGS = (1, 2, 3, 4, 5, 6)


def _serve_pop909(server):
    for song in SONGS:
        server.add(
            os.path.join(SHIPPED_POP909, f"{song:03d}.mid"), f"POP909/{song:03d}/{song:03d}.mid"
        )
    server.add(os.path.join(SHIPPED_POP909, "LICENSE"), "LICENSE")


def test_pop909_download_cache_and_layout(server, cache_dir):
    _serve_pop909(server)
    folder = pop909.fetch(SONGS, cache_dir=cache_dir, base_url=server.url)
    assert folder == os.path.join(cache_dir, "datasets", "keras_attn", "pop909", "POP909")
    assert sorted(os.listdir(folder)) == [f"{s:03d}" for s in SONGS]
    for song in SONGS:
        name = f"{song:03d}"
        assert _sha256(os.path.join(folder, name, f"{name}.mid")) == pop909.SHA256[name]
    assert os.path.isfile(os.path.join(os.path.dirname(folder), "LICENSE"))
    assert server.total() == len(SONGS) + 1
    server.stop()
    assert pop909.fetch(["001", 6], cache_dir=cache_dir, base_url=server.url) == folder


def test_pop909_a_corrupted_song_is_refused(server, cache_dir):
    _serve_pop909(server)
    server.modes["POP909/004/004.mid"] = "corrupt"
    with pytest.raises(ValueError) as error:
        pop909.fetch(SONGS, cache_dir=cache_dir, base_url=server.url)
    assert "004.mid" in str(error.value) and pop909.SHA256["004"] in str(error.value)
    assert not os.path.exists(
        os.path.join(cache_dir, "datasets", "keras_attn", "pop909", "POP909", "004", "004.mid")
    )


def test_pop909_offline_folder_and_unknown_songs(server, tmp_path):
    _serve_pop909(server)
    offline = tmp_path / "offline"
    for song in SONGS:
        name = f"{song:03d}"
        (offline / "pop909" / "POP909" / name).mkdir(parents=True)
        shutil.copyfile(
            os.path.join(SHIPPED_POP909, f"{name}.mid"),
            offline / "pop909" / "POP909" / name / f"{name}.mid",
        )
    assert pop909.fetch(SONGS, data_dir=str(offline), base_url=server.url) == str(
        offline / "pop909" / "POP909"
    )
    with pytest.raises(FileNotFoundError, match="007.mid"):
        pop909.fetch([7], data_dir=str(offline), base_url=server.url)
    assert server.total() == 0
    for song in (0, 910, "1", True):
        with pytest.raises(
            ValueError,
            match=rf"^`song` must be a POP909 song number from 1 to 909 .*Received: song={song!r}\.$",
        ):
            pop909.fetch([song], data_dir=str(offline))
    with pytest.raises(
        ValueError,
        match=r"^`songs` must be at least one POP909 song, or None for all\. Received: songs=\[\]\.$",
    ):
        pop909.fetch([], data_dir=str(offline))
    assert len(pop909.SHA256) == pop909.NUM_SONGS == 909


# ----------------------------------------------------------------- CIFAR-10
def _cifar_archive(path, per_batch=3):
    """A small archive in the official format: five training batches and a
    test batch of `per_batch` images each, pixel value = image number."""
    rng = np.random.default_rng(0)
    with tarfile.open(path, "w:gz") as archive:
        for index, name in enumerate([f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]):
            numbers = index * per_batch + np.arange(per_batch)
            data = np.repeat(numbers.astype(np.uint8)[:, None], 3072, axis=1)
            data[:, 1024:2048] = 200  # green plane: channel order check
            batch = {
                b"data": data,
                b"labels": [int(x) for x in rng.integers(0, 10, per_batch)],
                b"batch_label": name.encode(),
            }
            payload = pickle.dumps(batch, protocol=4)  # arrays without _codecs
            info = tarfile.TarInfo(f"cifar-10-batches-py/{name}")
            info.size = len(payload)
            archive.addfile(info, io.BytesIO(payload))
    return path


def test_cifar10_download_cache_and_arrays(server, cache_dir, tmp_path, monkeypatch):
    archive = _cifar_archive(str(tmp_path / "cifar-10-python.tar.gz"))
    server.add(archive, "cifar-10-python.tar.gz")
    monkeypatch.setattr(cifar10, "ARCHIVE_SHA256", _sha256(archive))
    images, labels = cifar10.load_data("train", cache_dir=cache_dir, base_url=server.url)
    assert images.shape == (15, 32, 32, 3) and images.dtype == np.uint8
    assert labels.shape == (15,) and labels.dtype == np.uint8
    assert images[:, 0, 0, 0].tolist() == list(range(15)) and (images[..., 1] == 200).all()
    server.stop()
    test_images, _ = cifar10.load_data("test", cache_dir=cache_dir, base_url=server.url)
    assert test_images[:, 5, 7, 0].tolist() == [15, 16, 17]
    assert server.total() == 1


def test_cifar10_the_official_hash_refuses_another_archive(server, cache_dir, tmp_path):
    server.add(_cifar_archive(str(tmp_path / "fake.tar.gz")), "cifar-10-python.tar.gz")
    with pytest.raises(ValueError, match=cifar10.ARCHIVE_SHA256):
        cifar10.fetch(cache_dir=cache_dir, base_url=server.url)


def test_cifar10_batches_unpickle_arrays_only(tmp_path, monkeypatch):
    archive = str(tmp_path / "evil.tar.gz")
    with tarfile.open(archive, "w:gz") as handle:
        payload = pickle.dumps({b"data": shutil.copyfile, b"labels": []}, protocol=4)
        info = tarfile.TarInfo("cifar-10-batches-py/test_batch")
        info.size = len(payload)
        handle.addfile(info, io.BytesIO(payload))
    os.makedirs(tmp_path / "offline" / "cifar10")
    shutil.copyfile(archive, tmp_path / "offline" / "cifar10" / "cifar-10-python.tar.gz")
    monkeypatch.setattr(cifar10, "ARCHIVE_SHA256", _sha256(archive))
    with pytest.raises(pickle.UnpicklingError, match="shutil.copyfile"):
        cifar10.load_data("test", data_dir=str(tmp_path / "offline"))


def test_cifar10_offline_jpeg_copy(tmp_path, monkeypatch, server):
    pytest.importorskip("PIL")
    from PIL import Image

    offline = tmp_path / "offline" / "cifar10"
    offline.mkdir(parents=True)
    shutil.copyfile(
        SHIPPED_CIFAR10, offline / cifar10.JPEG_COPY
    )  # the sample, in the copy's format
    with pytest.raises(ValueError, match=cifar10.JPEG_COPY_SHA256):
        cifar10.fetch(data_dir=str(offline.parent))
    monkeypatch.setattr(cifar10, "JPEG_COPY_SHA256", _sha256(SHIPPED_CIFAR10))
    images, labels = cifar10.load_data("train", data_dir=str(offline.parent), base_url=server.url)
    with np.load(SHIPPED_CIFAR10) as sample:
        jpeg, offsets = sample["jpeg"], sample["offsets"]
        assert labels.tolist() == sample["labels"].tolist()
    assert images.shape == (1000, 32, 32, 3)
    for i in (0, 999):
        picture = Image.open(io.BytesIO(jpeg[offsets[i] : offsets[i + 1]].tobytes())).convert("RGB")
        np.testing.assert_array_equal(images[i], np.asarray(picture))
    with pytest.raises(ValueError, match="no 'test' split"):
        cifar10.load_data("test", data_dir=str(offline.parent))
    (offline / cifar10.JPEG_COPY).unlink()
    with pytest.raises(FileNotFoundError, match="cifar-10-python.tar.gz"):
        cifar10.fetch(data_dir=str(offline.parent))
    assert server.total() == 0
