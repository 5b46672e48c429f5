"""The hash tables against the data this project holds: the samples shipped
with the examples are the official files (Multi30k, POP909) or the accepted
project copy (JSB Chorales), and the project's offline data folder, where a
machine has it, passes every loader as it is. Also: keras_attn.datasets
imports no TensorFlow."""

import hashlib
import os
import subprocess
import sys
import textwrap

import pytest

from keras_attn.datasets import cifar10, jsb_chorales, multi30k, pop909
from tests.datasets.conftest import ROOT, SHIPPED_JSB, SHIPPED_MULTI30K, SHIPPED_POP909

SHARED = os.path.normpath(os.path.join(ROOT, "..", "shared", "data"))


def _sha256(path):
    with open(path, "rb") as handle:
        return hashlib.sha256(handle.read()).hexdigest()


def test_the_shipped_samples_are_the_files_the_loaders_check():
    for name, expected in multi30k.SHA256.items():
        assert _sha256(os.path.join(SHIPPED_MULTI30K, name)) == expected, name
    for song in ("001", "002", "003", "004", "005", "006"):
        assert _sha256(os.path.join(SHIPPED_POP909, f"{song}.mid")) == pop909.SHA256[song], song
    assert _sha256(SHIPPED_JSB) == jsb_chorales.SHA256[jsb_chorales.SEPARATED][1]


@pytest.mark.skipif(not os.path.isdir(SHARED), reason="no shared data folder beside the repository")
def test_the_shared_data_folder_passes_every_loader(server):
    # Offline: every file checked against its sha256, nothing requested.
    assert multi30k.fetch(data_dir=SHARED, base_url=server.url) == os.path.join(SHARED, "multi30k")
    for name in (jsb_chorales.SEPARATED, jsb_chorales.PIANO_ROLL):
        assert jsb_chorales.fetch(name, data_dir=SHARED, base_url=server.url).startswith(SHARED)
    assert pop909.fetch(data_dir=SHARED, base_url=server.url) == os.path.join(
        SHARED, "pop909", "POP909"
    )
    assert cifar10.fetch(data_dir=SHARED, base_url=server.url) == os.path.join(
        SHARED, "cifar10", cifar10.JPEG_COPY
    )
    assert server.total() == 0


def test_no_tensorflow_import():
    pytest.importorskip("jax")
    child = textwrap.dedent(
        """
        import sys

        class RefuseTensorFlow:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0].startswith("tensorflow"):
                    raise ImportError(f"importing {name!r} is blocked in this test")

        sys.meta_path.insert(0, RefuseTensorFlow())
        from keras_attn.datasets import multi30k, jsb_chorales, pop909, cifar10
        german, english = multi30k.load_data("val", data_dir="examples/translation/data")
        assert len(german) == 1014
        print(sorted(m for m in sys.modules if m.startswith("tensorflow")))
        """
    )
    env = dict(os.environ, KERAS_BACKEND="jax")
    env.pop("KERAS_ATTN_DATA", None)
    result = subprocess.run(
        [sys.executable, "-c", child],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().splitlines()[-1] == "[]"
