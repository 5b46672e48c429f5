"""Download, hash check, cache and offline folder of keras_attn.datasets,
against a file server on 127.0.0.1 serving the Multi30k files shipped with
the translation example (byte for byte the official files, so the loader's
own sha256 table checks them)."""

import os
import shutil

import pytest

from keras_attn.datasets import multi30k
from tests.datasets.conftest import SHIPPED_MULTI30K

VAL = ("val.de.gz", "val.en.gz")


def _serve_val(server):
    for name in VAL:
        server.add(os.path.join(SHIPPED_MULTI30K, name), f"raw/{name}")
    return server.url + "raw/"


def _cached(cache_dir, name):
    return os.path.join(cache_dir, "datasets", "keras_attn", "multi30k", name)


def test_download_checks_the_hash_and_the_second_call_needs_no_network(server, cache_dir):
    base_url = _serve_val(server)
    folder = multi30k.fetch(["val"], cache_dir=cache_dir, base_url=base_url)
    assert folder == os.path.dirname(_cached(cache_dir, "val.de.gz"))
    assert server.requests == {"raw/val.de.gz": 1, "raw/val.en.gz": 1}
    for name in VAL:
        with (
            open(os.path.join(folder, name), "rb") as got,
            open(os.path.join(SHIPPED_MULTI30K, name), "rb") as expected,
        ):
            assert got.read() == expected.read()
    server.stop()  # the cache alone answers now
    german, english = multi30k.load_data("val", "de", "en", cache_dir=cache_dir, base_url=base_url)
    assert len(german) == len(english) == 1014
    assert english[0] == "A group of men are loading cotton onto a truck"
    assert multi30k.fetch(["val"], cache_dir=cache_dir, base_url=base_url) == folder


def test_the_default_cache_is_keras_home(server, tmp_path):
    folder = multi30k.fetch(["val"], base_url=_serve_val(server))
    assert folder == str(tmp_path / "default_keras_home" / "datasets" / "keras_attn" / "multi30k")


def test_a_corrupted_download_is_refused_removed_and_fetched_again_later(server, cache_dir):
    base_url = _serve_val(server)
    server.modes["raw/val.de.gz"] = "corrupt"
    path = _cached(cache_dir, "val.de.gz")
    with pytest.raises(ValueError) as error:
        multi30k.fetch(["val"], cache_dir=cache_dir, base_url=base_url)
    message = str(error.value)
    assert path in message and multi30k.SHA256["val.de.gz"] in message
    received = message.split("sha256 ")[1].split(",")[0]
    assert len(received) == 64 and received != multi30k.SHA256["val.de.gz"]
    assert not os.path.exists(path)  # never left to be used
    server.modes.clear()
    assert multi30k.fetch(["val"], cache_dir=cache_dir, base_url=base_url) == os.path.dirname(path)
    assert server.requests["raw/val.de.gz"] == 2


def test_a_transfer_cut_short_is_not_kept(server, cache_dir):
    base_url = _serve_val(server)
    server.modes["raw/val.en.gz"] = "truncate"  # fewer bytes than its Content-Length
    with pytest.raises(OSError, match="Could not download"):
        multi30k.fetch(["val"], cache_dir=cache_dir, base_url=base_url)
    assert not os.path.exists(_cached(cache_dir, "val.en.gz"))
    assert os.path.exists(_cached(cache_dir, "val.de.gz"))  # complete and checked
    server.modes.clear()
    multi30k.fetch(["val"], cache_dir=cache_dir, base_url=base_url)
    assert server.requests == {"raw/val.de.gz": 1, "raw/val.en.gz": 2}


def test_an_unannounced_short_transfer_fails_the_hash_and_is_removed(server, cache_dir):
    base_url = _serve_val(server)
    server.modes["raw/val.de.gz"] = "truncate_unannounced"  # no Content-Length to compare with
    with pytest.raises(ValueError, match="expected " + multi30k.SHA256["val.de.gz"]):
        multi30k.fetch(["val"], cache_dir=cache_dir, base_url=base_url)
    assert not os.path.exists(_cached(cache_dir, "val.de.gz"))


def test_a_partial_file_left_in_the_cache_is_downloaded_again(server, cache_dir):
    base_url = _serve_val(server)
    path = _cached(cache_dir, "val.de.gz")
    os.makedirs(os.path.dirname(path))
    with open(os.path.join(SHIPPED_MULTI30K, "val.de.gz"), "rb") as handle:
        whole = handle.read()
    with open(path, "wb") as handle:  # what a killed download leaves
        handle.write(whole[: len(whole) // 3])
    german, _ = multi30k.load_data("val", cache_dir=cache_dir, base_url=base_url)
    assert len(german) == 1014
    assert server.requests["raw/val.de.gz"] == 1
    with open(path, "rb") as handle:
        assert handle.read() == whole


def _offline_copy(folder, names=VAL):
    os.makedirs(os.path.join(folder, "multi30k"), exist_ok=True)
    for name in names:
        shutil.copyfile(
            os.path.join(SHIPPED_MULTI30K, name), os.path.join(folder, "multi30k", name)
        )
    return folder


@pytest.mark.parametrize("given", ["argument", "environment"])
def test_an_offline_folder_is_preferred_to_the_cache_and_the_network(
    server, cache_dir, tmp_path, monkeypatch, given
):
    base_url = _serve_val(server)
    multi30k.fetch(["val"], cache_dir=cache_dir, base_url=base_url)  # a cache holds them too
    offline = _offline_copy(str(tmp_path / "offline"))
    if given == "environment":
        monkeypatch.setenv("KERAS_ATTN_DATA", offline)
        folder = multi30k.fetch(["val"], cache_dir=cache_dir, base_url=base_url)
    else:
        folder = multi30k.fetch(["val"], data_dir=offline, cache_dir=cache_dir, base_url=base_url)
    assert folder == os.path.join(offline, "multi30k")
    assert server.total() == 2  # the first call's downloads only


def test_an_offline_folder_never_downloads_what_it_lacks(server, tmp_path):
    base_url = _serve_val(server)
    offline = _offline_copy(str(tmp_path / "offline"), names=["val.de.gz"])
    with pytest.raises(FileNotFoundError, match="val.en.gz"):
        multi30k.fetch(["val"], data_dir=offline, base_url=base_url)
    assert server.total() == 0


def test_a_corrupted_file_in_the_offline_folder_is_refused_and_left_alone(tmp_path):
    offline = _offline_copy(str(tmp_path / "offline"))
    path = os.path.join(offline, "multi30k", "val.en.gz")
    with open(path, "r+b") as handle:
        handle.seek(100)
        handle.write(b"\0")
    with pytest.raises(ValueError) as error:
        multi30k.load_data("val", data_dir=offline)
    message = str(error.value)
    assert path in message and multi30k.SHA256["val.en.gz"] in message
    assert os.path.exists(path)


def test_arguments_are_checked_before_any_work(server, cache_dir):
    with pytest.raises(ValueError, match="split='dev'"):
        multi30k.fetch(["dev"], cache_dir=cache_dir, base_url=server.url)
    with pytest.raises(ValueError, match="another language than source_language='en'"):
        multi30k.load_data("val", "en", "en", cache_dir=cache_dir, base_url=server.url)
    assert server.total() == 0


def test_no_network_but_127_0_0_1(cache_dir):
    # The guard of conftest.py: the official URL is refused, not reached.
    with pytest.raises(OSError, match="Could not download"):
        multi30k.fetch(["val"], cache_dir=cache_dir)
