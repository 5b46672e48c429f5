"""A preprocessing module that needs an optional extra names its `pip install` line (issue 47)."""

import importlib
import sys

import pytest

from keras_attn.preprocessing import images, music


def test_a_missing_extra_is_named_with_its_pip_install_line(monkeypatch):
    # A module set to None in sys.modules is not installed, as far as `import` can tell.
    monkeypatch.setitem(sys.modules, "tensorflow", None)
    monkeypatch.delitem(sys.modules, "keras_attn.preprocessing.subword_tokenizer", raising=False)
    with pytest.raises(
        ModuleNotFoundError,
        match=r"^keras_attn.preprocessing.subword_tokenizer needs "
        r'tensorflow: pip install "keras_attn\[tensorflow\]"$',
    ):
        importlib.import_module("keras_attn.preprocessing.subword_tokenizer")
    monkeypatch.setitem(sys.modules, "symusic", None)
    with pytest.raises(
        ModuleNotFoundError, match=r'needs symusic: pip install "keras_attn\[music\]"$'
    ):
        music.load_midi(b"MThd")
    monkeypatch.setitem(sys.modules, "PIL", None)
    with pytest.raises(
        ModuleNotFoundError,
        match=r"^keras_attn.preprocessing.images.load_image needs PIL: "
        r'pip install "keras_attn\[images\]"$',
    ):
        images.load_image("picture.png")
