"""The split of `LocalBlockAttention` (issue 45): one idea per module, files
and docstrings a reader can follow, the public class unchanged."""

import ast
import os

import keras

from keras_attn.layers import LocalBlockAttention

LAYERS = os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, "keras_attn", "layers")
MODULES = (
    "local_block_attention",
    "local_attention_windows",
    "local_attention_cache",
    "local_attention_raster",
    "blocking",
)


def _tree(module):
    with open(os.path.join(LAYERS, module + ".py"), encoding="utf-8") as f:
        source = f.read()
    return source, ast.parse(source)


def test_modules_functions_and_class_docstrings_stay_short():
    for module in MODULES:
        source, tree = _tree(module)
        assert len(source.splitlines()) <= 600, module
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef):
                body = node.body[1:] if ast.get_docstring(node) else node.body
                length = body[-1].end_lineno - body[0].lineno + 1
                assert length <= 80, (module, node.name, length)
            if isinstance(node, ast.ClassDef) and ast.get_docstring(node):
                docstring = node.body[0]
                assert docstring.end_lineno - docstring.lineno + 1 <= 60, (module, node.name)


def test_class_docstring_keeps_its_sections():
    docstring = LocalBlockAttention.__doc__
    for section in ("Args:", "Call arguments:", "Returns:", "Raises:", "Example:", "Reference:"):
        assert section in docstring, section
    assert "docs/guides/local_attention.md" in docstring


def test_public_class_and_registered_name_are_unchanged():
    assert LocalBlockAttention.__module__ == "keras_attn.layers.local_block_attention"
    assert keras.saving.get_registered_name(LocalBlockAttention) == "keras_attn>LocalBlockAttention"
    layer = LocalBlockAttention(2, 4, block_size=(2, 3), memory_flange=(1, 2), image_size=(4, 6))
    config = layer.get_config()
    assert {
        k: config[k] for k in ("block_size", "memory_flange", "rolling_cache", "image_size")
    } == {
        "block_size": (2, 3),
        "memory_flange": (1, 2),
        "rolling_cache": False,
        "image_size": (4, 6),
    }
    assert type(LocalBlockAttention.from_config(config)) is LocalBlockAttention
