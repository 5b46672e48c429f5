"""The version folder every exporter writes: replaced atomically on
overwrite, left intact when an export fails."""

import hashlib
import os
import re

import keras
import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")  # a module of TensorFlow-only tests

from keras_attn.export import archive, export_music_generator
from keras_attn.models import music_transformer

pytestmark = pytest.mark.requires_tensorflow

MAX_LENGTH = 8


def _model(seed):
    keras.utils.set_random_seed(seed)
    return music_transformer(
        20,
        num_layers=1,
        hidden_dim=8,
        num_heads=2,
        intermediate_dim=16,
        dropout=0.0,
        max_relative_position=4,
    )


def _export(model, base, **kwargs):
    return export_music_generator(
        model, str(base), max_length=MAX_LENGTH, max_primer_length=2, **kwargs
    )


def _events(path):
    generate = tf.saved_model.load(path).signatures["serving_default"]
    request = dict(
        primer=tf.constant([[1, 5]]),
        num_steps=tf.constant(5),
        temperature=tf.constant(0.7),
        top_k=tf.constant(0),
        top_p=tf.constant(1.0),
        seed=tf.constant(3),
    )
    return generate(**request)["events"].numpy()


def _snapshot(folder):
    """Every file under `folder` (relative path -> sha256)."""
    files = {}
    for root, _, names in os.walk(folder):
        for name in names:
            full = os.path.join(root, name)
            with open(full, "rb") as f:
                files[os.path.relpath(full, folder)] = hashlib.sha256(f.read()).hexdigest()
    return files


@pytest.fixture(scope="module")
def old_version(tmp_path_factory):
    """Model A exported as version 1, plus the files a stale export leaves."""
    base = tmp_path_factory.mktemp("base")
    path = _export(_model(1), base)
    os.makedirs(os.path.join(path, "assets"), exist_ok=True)
    with open(os.path.join(path, "assets", "old_vocabulary.txt"), "w") as f:
        f.write("from the old model\n")
    with open(os.path.join(path, "stray.txt"), "w") as f:
        f.write("left by hand\n")
    return base, path


def _copy_of(old_version, tmp_path):
    import shutil

    base, _ = old_version
    shutil.copytree(base, tmp_path / "base")
    return tmp_path / "base", str(tmp_path / "base" / "1")


@pytest.mark.parametrize("exchange", [True, False], ids=["renameat2", "two_renames"])
def test_overwrite_replaces_the_whole_version_folder(old_version, tmp_path, monkeypatch, exchange):
    base, path = _copy_of(old_version, tmp_path)
    old_events = _events(path)
    if not exchange:  # systems without renameat2(RENAME_EXCHANGE)
        monkeypatch.setattr(archive, "_renameat2", lambda source, destination, flags: None)
    new_model = _model(2)
    assert _export(new_model, base, overwrite=True) == path
    # Nothing of the old folder survives (it used to: assets/, stray.txt).
    assert not os.path.exists(os.path.join(path, "stray.txt"))
    assert not os.path.exists(os.path.join(path, "assets", "old_vocabulary.txt"))
    assert sorted(os.listdir(base)) == ["1"]  # no temporary or old folder left
    # The new model answers: a fresh export of it gives the same events, the
    # old one other events.
    reference = _export(new_model, tmp_path / "reference")
    np.testing.assert_array_equal(_events(path), _events(reference))
    assert (_events(path) != old_events).any()


def test_a_failed_export_leaves_the_old_version_byte_identical(old_version, tmp_path, monkeypatch):
    base, path = _copy_of(old_version, tmp_path)
    before = _snapshot(path)
    assert "saved_model.pb" in before and "stray.txt" in before
    save = tf.saved_model.save  # what ExportArchive.write_out calls

    def fail_midway(obj, export_dir, *args, **kwargs):
        save(obj, export_dir, *args, **kwargs)  # the new files are written ...
        raise OSError("No space left on device")  # ... then the disk fills

    monkeypatch.setattr(tf.saved_model, "save", fail_midway)
    with pytest.raises(OSError, match="No space left"):
        _export(_model(2), base, overwrite=True)
    assert _snapshot(path) == before
    assert sorted(os.listdir(base)) == ["1"]


def test_a_failed_final_rename_puts_the_old_version_back(old_version, tmp_path, monkeypatch):
    base, path = _copy_of(old_version, tmp_path)
    before = _snapshot(path)
    monkeypatch.setattr(archive, "_renameat2", lambda source, destination, flags: None)
    rename = os.rename

    def failing_rename(source, destination):
        if os.path.basename(str(source)).startswith(".1.incomplete-"):
            raise OSError("Device or resource busy")
        rename(source, destination)

    monkeypatch.setattr(archive.os, "rename", failing_rename)
    with pytest.raises(OSError, match="busy"):
        _export(_model(2), base, overwrite=True)
    assert _snapshot(path) == before
    assert sorted(os.listdir(base)) == ["1"]


def test_a_new_version_appears_complete_and_keeps_the_umask_permissions(tmp_path):
    base = tmp_path / "base"
    path = _export(_model(1), base, version=4)
    assert sorted(os.listdir(base)) == ["4"]
    umask = os.umask(0)
    os.umask(umask)
    assert os.stat(path).st_mode & 0o777 == 0o777 & ~umask


_RENAME_IDS = ["renameat2", "two_renames"]


def _without_renameat2(monkeypatch, renameat2, tmp_path):
    """The renameat2 case runs only where the system offers it (else it
    would silently test the fallback twice); the other case hides it."""
    if not renameat2:
        monkeypatch.setattr(archive, "_renameat2", lambda source, destination, flags: None)
        return
    probe = tmp_path / ".renameat2-probe"
    probe.mkdir()
    if (
        archive._renameat2(
            str(probe), str(tmp_path / ".renameat2-probed"), archive._RENAME_NOREPLACE
        )
        is None
    ):
        pytest.skip("renameat2 is not offered here")
    (tmp_path / ".renameat2-probed").rmdir()


@pytest.mark.parametrize("renameat2", [True, False], ids=_RENAME_IDS)
def test_a_version_written_meanwhile_is_kept_without_overwrite(tmp_path, monkeypatch, renameat2):
    # Another export of version 1 finishes while ours writes: ours is
    # refused at the final rename, theirs stays (it used to be replaced).
    base = tmp_path / "base"
    _without_renameat2(monkeypatch, renameat2, tmp_path)
    rename_no_replace = archive._rename_no_replace

    def another_export_meanwhile(source, destination):
        os.makedirs(base / "1")  # after our archive was written, before it moves in
        (base / "1" / "saved_model.pb").write_text("the other export")
        return rename_no_replace(source, destination)

    monkeypatch.setattr(archive, "_rename_no_replace", another_export_meanwhile)
    with pytest.raises(ValueError, match=r"1 already exists. Pass a new `version`"):
        _export(_model(1), base, version=1)
    assert (base / "1" / "saved_model.pb").read_text() == "the other export"
    assert sorted(os.listdir(base)) == ["1"]


@pytest.mark.parametrize("renameat2", [True, False], ids=_RENAME_IDS)
def test_overwrite_replaces_a_linked_version_and_leaves_its_target(
    tmp_path, monkeypatch, renameat2
):
    # A version folder that is a link (a deployment pointing at a build):
    # the link is replaced by the new folder, the folder it pointed to is
    # left alone (the exchange used to end in "Cannot call rmtree on a
    # symbolic link" after the new version was in place).
    elsewhere = _export(_model(1), tmp_path / "elsewhere")
    before = _snapshot(elsewhere)
    base = tmp_path / "base"
    base.mkdir()
    os.symlink(elsewhere, base / "1")
    _without_renameat2(monkeypatch, renameat2, tmp_path)
    path = _export(_model(2), base, overwrite=True)
    assert sorted(os.listdir(base)) == ["1"] and not os.path.islink(path)
    assert _snapshot(elsewhere) == before
    assert _snapshot(path)["saved_model.pb"] != before["saved_model.pb"]  # model 2 is in place
    dangling = tmp_path / "dangling"
    dangling.mkdir()
    os.symlink(tmp_path / "removed", dangling / "1")
    with pytest.raises(ValueError, match="already exists"):  # a broken link is still taken
        _export(_model(2), dangling, version=1)


@pytest.mark.parametrize("renameat2", [True, False], ids=_RENAME_IDS)
def test_a_file_in_the_version_place_is_replaced_without_leftovers(
    tmp_path, monkeypatch, renameat2
):
    # The exchange left the file under the temporary name (rmtree failed on it).
    _without_renameat2(monkeypatch, renameat2, tmp_path)
    base = tmp_path / "base"
    new = base / ".1.incomplete-test"
    new.mkdir(parents=True)
    (new / "saved_model.pb").write_text("new")
    (base / "1").write_text("not a folder")
    archive._replace_folder(str(new), str(base / "1"))
    assert sorted(os.listdir(base)) == ["1"]
    assert (base / "1" / "saved_model.pb").read_text() == "new"


def test_export_dir_must_be_a_folder_path(tmp_path):
    # None gave a TypeError from os.fspath, a file a bare FileExistsError.
    from keras_attn.export import versioned_export_path

    with pytest.raises(
        ValueError, match=r"^`export_dir` must be a folder path .*Received: export_dir=None\.$"
    ):
        versioned_export_path(None, 1)
    a_file = tmp_path / "model.keras"
    a_file.write_text("not a folder")
    with pytest.raises(
        ValueError,
        match=rf"^`export_dir` must be a folder path .*not a file.*Received: export_dir={re.escape(repr(a_file))}\.$",
    ):
        versioned_export_path(a_file, 1)
    assert versioned_export_path(tmp_path / "new", 2) == str(tmp_path / "new" / "2")
