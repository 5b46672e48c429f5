"""Tiny exported models shared by the serving tests: each exported once per test process.

test_serving_client.py and test_tf_text_ops.py both need the translator
SavedModels; exporting them is most of their run time, so the exports are
cached here (a module-scoped fixture could not be shared by two modules).
The exports go through examples/serving/export_demo_models.py, so its code is
what is tested.
"""

import atexit
import collections
import functools
import importlib.util
import os
import shutil
import sys
import tempfile

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
SERVING_EXAMPLE = os.path.join(ROOT, "examples", "serving")
TRANSLATION_EXAMPLE = os.path.join(ROOT, "examples", "translation")
MAX_LENGTH = 10  # the translator's static length

Translator = collections.namedtuple(
    "Translator", "model tokenizer text_path tokens_path sentencepiece_file"
)
Exported = collections.namedtuple("Exported", "model path")


def example_module(name):
    """Imports examples/serving/<name>.py (as `examples_serving_<name>`, so a generic name
    such as `client` cannot clash with another module)."""
    module_name = f"examples_serving_{name}"
    if module_name not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            module_name, os.path.join(SERVING_EXAMPLE, f"{name}.py")
        )
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        spec.loader.exec_module(module)
    return sys.modules[module_name]


@functools.lru_cache(maxsize=None)
def _workdir():
    path = tempfile.mkdtemp(prefix="keras_attn_serving_tests_")
    atexit.register(shutil.rmtree, path, True)
    return path


@functools.lru_cache(maxsize=None)
def translator():
    """An untrained translator (tokenizer from 300 Multi30k validation pairs), exported as the
    string model `translator/1` and the token-id model `translator_tokens/1` (greedy)."""
    if TRANSLATION_EXAMPLE not in sys.path:
        sys.path.insert(0, TRANSLATION_EXAMPLE)
    from multi30k import load_multi30k

    from keras_attn.preprocessing.subword_tokenizer import SubwordTokenizer

    german, english = load_multi30k(split="val")
    tokenizer = SubwordTokenizer.train(german[:300] + english[:300], vocabulary_size=500)
    sentencepiece_file = os.path.join(_workdir(), "tokenizer.model")
    tokenizer.save(sentencepiece_file)
    demo = example_module("export_demo_models")
    model, text_path, tokens_path = demo.export_translators(
        _workdir(), tokenizer, max_length=MAX_LENGTH, num_beams=1, hidden_dim=16
    )
    return Translator(model, tokenizer, text_path, tokens_path, sentencepiece_file)


@functools.lru_cache(maxsize=None)
def music_generator():
    """An untrained Music Transformer (40 events, max_length 16, primers up to 6 events)."""
    from keras_attn.export import export_music_generator
    from keras_attn.models import music_transformer

    model = music_transformer(
        40,
        num_layers=1,
        hidden_dim=16,
        num_heads=2,
        intermediate_dim=32,
        dropout=0.0,
        max_relative_position=6,
    )
    # Peaked distributions, so different seeds and settings give different events.
    kernel, bias = model.get_layer("logits").get_weights()
    model.get_layer("logits").set_weights([kernel * 3.0, bias * 3.0])
    path = export_music_generator(
        model, os.path.join(_workdir(), "music_generator"), max_length=16, max_primer_length=6
    )
    return Exported(model, path)


@functools.lru_cache(maxsize=None)
def super_resolver():
    """An untrained super resolver, 2x2 -> 4x4 RGB (48 sampling steps)."""
    demo = example_module("export_demo_models")
    model, path = demo.export_demo_super_resolver(
        _workdir(), low_resolution_size=2, image_size=4, hidden_dim=16
    )
    return Exported(model, path)
