import os
import re

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")  # a module of TensorFlow-only tests

from keras_attn.export import export_translator
from keras_attn.generation import greedy_search
from keras_attn.models import translation_transformer
from keras_attn.preprocessing.subword_tokenizer import SubwordTokenizer
from keras_attn.preprocessing.text import encode_source
from tests.export.helpers import run_fresh_python, session_loader_code

pytestmark = pytest.mark.requires_tensorflow

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "translation")
SENTENCES = ["Ein Mann fährt Fahrrad.", "Zwei Hunde spielen im Schnee."]


@pytest.fixture(scope="module")
def translator(tmp_path_factory):
    import sys

    sys.path.insert(0, EXAMPLES)
    from multi30k import load_multi30k

    german, english = load_multi30k(split="val")
    tokenizer = SubwordTokenizer.train(german + english, vocabulary_size=600)
    model = translation_transformer(
        tokenizer.vocabulary_size, num_layers=1, hidden_dim=16, num_heads=2, intermediate_dim=32
    )
    base = tmp_path_factory.mktemp("translator")
    path = export_translator(model, tokenizer, base / "text", max_length=10, num_beams=1)
    tokens_path = export_translator(
        model,
        tokenizer,
        base / "tokens",
        max_length=10,
        num_beams=1,
        include_text_signature=False,
        streaming=False,  # streaming: test_translator_streaming.py
    )
    return model, tokenizer, path, tokens_path


def _expected(model, tokenizer, sentences):
    tokens = encode_source(tokenizer, tf.constant(sentences), 10).to_tensor(shape=[None, 10])
    start = tf.fill([len(sentences), 1], tokenizer.start_id)
    ids = greedy_search(
        model,
        start,
        10,
        end_token_id=tokenizer.end_id,
        inputs={"encoder_tokens": tokens},
        suppressed_token_ids=(tokenizer.pad_id, tokenizer.start_id),
    )
    return np.asarray(ids), tokenizer.detokenize(ids).numpy()


def test_versioned_layout_and_signatures(translator, tmp_path):
    model, tokenizer, path, tokens_path = translator
    assert os.path.basename(path) == "1" and os.path.exists(os.path.join(path, "saved_model.pb"))
    loaded = tf.saved_model.load(path)
    streaming = ["prefill", "sample_tokens", "serving_default", "step", "translate_tokens"]
    assert sorted(loaded.signatures.keys()) == streaming
    assert list(tf.saved_model.load(tokens_path).signatures.keys()) == ["serving_default"]
    serving = loaded.signatures["serving_default"]
    assert serving.structured_input_signature[1]["text"].dtype == tf.string
    assert set(serving.structured_outputs) == {"translation"}
    ids, texts = _expected(model, tokenizer, SENTENCES)
    got = serving(text=tf.constant(SENTENCES + ["", "   "]))["translation"].numpy()
    assert list(got[:2]) == list(texts)
    assert list(got[2:]) == [b"", b""]  # empty input -> empty translation
    token_ids = encode_source(tokenizer, tf.constant(SENTENCES), 10).to_tensor()
    got_ids = loaded.signatures["translate_tokens"](encoder_tokens=token_ids)["tokens"].numpy()
    np.testing.assert_array_equal(got_ids, ids)
    # Padding and the start id are never generated: 0s only after the end id.
    for row in got_ids:
        generated = row[1:]
        ends = np.flatnonzero(generated == tokenizer.end_id)
        cut = ends[0] + 1 if ends.size else len(generated)
        assert not np.isin(generated[:cut], (tokenizer.pad_id, tokenizer.start_id)).any(), row
        assert (generated[cut:] == tokenizer.pad_id).all(), row
    with pytest.raises(ValueError, match="already exists"):
        export_translator(model, tokenizer, os.path.dirname(path), max_length=10)
    with pytest.raises(ValueError, match="positive integer"):
        export_translator(model, tokenizer, tmp_path, version=0)


def test_bad_export_arguments_are_refused_before_tracing(translator, tmp_path):
    # Each gave a TypeError, an error from deep in the trace, or (num_beams=True) an export.
    model, tokenizer = translator[:2]
    for bad in ("10", None, 2, 2**40, True):
        with pytest.raises(
            ValueError,
            match=rf"^`max_length` must be an int in \[3, 2\*\*31\)\. Received: max_length={re.escape(repr(bad))}\.$",
        ):
            export_translator(model, tokenizer, tmp_path, max_length=bad)
    for bad in (True, 0, 1.5):
        with pytest.raises(
            ValueError,
            match=rf"^`num_beams` must be a positive int. Received: num_beams={bad!r}\.$",
        ):
            export_translator(model, tokenizer, tmp_path, num_beams=bad)
    with pytest.raises(ValueError, match=r"^`length_penalty_alpha` must be a number >= 0"):
        export_translator(model, tokenizer, tmp_path, length_penalty_alpha=-1.0)
    with pytest.raises(
        ValueError,
        match=r"^`tokenizer` must be the `SubwordTokenizer` the model was trained with\. Received: tokenizer=None\.$",
    ):
        export_translator(model, None, tmp_path)
    with pytest.raises(
        ValueError,
        match=r"^`source_tokenizer` must be the `SubwordTokenizer` .*source_tokenizer='de.model'\.$",
    ):
        export_translator(model, tokenizer, tmp_path, source_tokenizer="de.model")
    assert not os.listdir(tmp_path)  # nothing written


def test_odd_inputs_do_not_crash_the_graph(translator):
    _, _, path, _ = translator
    serving = tf.saved_model.load(path).signatures["serving_default"]
    model, tokenizer, _, _ = translator
    odd = [b"\xff\xfe kaputt", ("Hund " * 500).encode()]
    out = serving(text=tf.constant(odd))["translation"].numpy()
    # Invalid UTF-8 is read with replacement characters and a long input is
    # cut to its first max_length - 1 pieces, exactly as in Python.
    _, expected = _expected(model, tokenizer, odd)
    assert list(out) == list(expected)
    _, shorter = _expected(model, tokenizer, [("Hund " * 20).encode()])
    assert out[1] == shorter[0]  # everything past the first pieces is ignored


def test_both_endpoints_share_one_trace_of_the_decoding_loop(translator, tmp_path, monkeypatch):
    import keras_attn.generation as generation

    model, tokenizer, _, _ = translator
    traced_shapes = []
    greedy = generation.greedy_search

    def counted(*args, **kwargs):
        traced_shapes.append(kwargs["inputs"]["encoder_tokens"].shape.as_list())
        return greedy(*args, **kwargs)

    monkeypatch.setattr(generation, "greedy_search", counted)
    export_translator(model, tokenizer, tmp_path, max_length=10, num_beams=1, streaming=False)
    # The text endpoint's (B, 10) tokens reuse the token endpoint's (B, S)
    # trace. TF traces once when an endpoint is added and once more while
    # saving (the save context is part of its cache key): two traces, not four.
    assert traced_shapes and len(traced_shapes) <= 2, traced_shapes
    assert all(shape == [None, None] for shape in traced_shapes), traced_shapes


@pytest.mark.parametrize("jit_compile", [False, True])
def test_bad_requests_fail_with_the_engines_messages_also_under_xla(
    translator, tmp_path, jit_compile
):
    model, tokenizer, path, _ = translator
    if jit_compile:  # XLA drops assertions: the request is checked before the loop
        path = export_translator(
            model,
            tokenizer,
            tmp_path,
            max_length=10,
            num_beams=1,
            jit_compile=True,
            streaming=False,
        )
    served = tf.saved_model.load(path).signatures
    tokens = served["translate_tokens"]
    vocabulary = tokenizer.vocabulary_size
    for bad, low, high in (([[5, vocabulary, 2]], 2, vocabulary), ([[5, -3, 2]], -3, 5)):
        message = (
            rf"`encoder_tokens` ids must be in \[0, {vocabulary}\). Received min, max:\] "
            rf"\[{low}\] \[{high}\]"
        )
        with pytest.raises(tf.errors.InvalidArgumentError, match=message):
            tokens(encoder_tokens=tf.constant(bad, tf.int32))
    # TF prints an assertion's pieces in brackets: the received shape is [0 3].
    empty = "`{0}` must hold at least one row. Received shape:] [{1}]"
    with pytest.raises(
        tf.errors.InvalidArgumentError, match=re.escape(empty.format("encoder_tokens", "0 3"))
    ):
        tokens(encoder_tokens=tf.zeros((0, 3), tf.int32))
    with pytest.raises(tf.errors.InvalidArgumentError, match=re.escape(empty.format("text", "0"))):
        served["serving_default"](text=tf.constant([], tf.string))
    # Another rank than the signature's: refused by name, not answered.
    for name, bad in (
        ("text", [["x"]]),
        ("text", "x"),
        ("encoder_tokens", [5, 2]),
        ("encoder_tokens", [[[5, 2]]]),
    ):
        signature = served["serving_default" if name == "text" else "translate_tokens"]
        with pytest.raises(
            tf.errors.InvalidArgumentError,
            match=rf"Shape of tensor {name} \[[\d,]*\] is not compatible with expected shape",
        ):
            signature(**{name: tf.constant(bad, tf.string if name == "text" else tf.int32)})
    # A good request still translates (the checks pass their values on).
    ids, _ = _expected(model, tokenizer, SENTENCES)
    source = encode_source(tokenizer, tf.constant(SENTENCES), 10).to_tensor()
    np.testing.assert_array_equal(tokens(encoder_tokens=source)["tokens"].numpy(), ids)


def test_a_source_longer_than_a_learned_position_table_is_refused(translator, tmp_path):
    tokenizer = translator[1]
    model = translation_transformer(
        tokenizer.vocabulary_size,
        num_layers=1,
        hidden_dim=8,
        num_heads=2,
        intermediate_dim=8,
        position="learned",
        max_length=12,
    )
    path = export_translator(
        model,
        tokenizer,
        tmp_path,
        max_length=10,
        num_beams=1,
        include_text_signature=False,
        streaming=False,
    )
    tokens = tf.saved_model.load(path).signatures["serving_default"]
    assert tokens(encoder_tokens=tf.fill([1, 12], 5))["tokens"].shape == (1, 10)
    with pytest.raises(
        tf.errors.InvalidArgumentError,
        match=r"`encoder_tokens` must hold at most 12 tokens. Received:\] \[13\]",
    ):
        tokens(encoder_tokens=tf.fill([1, 13], 5))


@pytest.mark.slow
def test_runs_in_fresh_processes_and_under_the_session_loader(translator):
    model, tokenizer, path, tokens_path = translator
    _, texts = _expected(model, tokenizer, SENTENCES[:1])
    out = run_fresh_python(f"""
        import tensorflow as tf, tensorflow_text  # only these
        model = tf.saved_model.load({str(path)!r})
        print(model.signatures["serving_default"](text=tf.constant({SENTENCES[:1]!r}))["translation"].numpy().tolist())
    """)
    assert repr([texts[0]]) in out
    out = run_fresh_python(
        session_loader_code(
            path,
            {"text": repr(SENTENCES[:1])},
            "translation",
            imports="import tensorflow as tf\nimport tensorflow_text",
        )
    )
    assert repr([texts[0]]) in out
    # The token model needs no tensorflow-text at all, even under the session loader.
    ids, _ = _expected(model, tokenizer, SENTENCES[:1])
    source = encode_source(tokenizer, tf.constant(SENTENCES[:1]), 10).to_tensor().numpy().tolist()
    out = run_fresh_python(
        session_loader_code(tokens_path, {"encoder_tokens": repr(source)}, "tokens")
    )
    assert repr(ids.tolist()) in out


@pytest.mark.slow
def test_xla_compiled_export_runs_in_a_fresh_process_like_the_default_one(translator, tmp_path):
    model, tokenizer, path, _ = translator
    common = dict(max_length=10, streaming=False)
    xla_path = export_translator(
        model, tokenizer, tmp_path, num_beams=1, jit_compile=True, **common
    )
    beams_path = export_translator(model, tokenizer, tmp_path, version=2, num_beams=3, **common)
    xla_beams_path = export_translator(
        model, tokenizer, tmp_path, version=3, num_beams=3, jit_compile=True, **common
    )
    source = encode_source(tokenizer, tf.constant(SENTENCES), 10).to_tensor().numpy().tolist()
    out = run_fresh_python(f"""
        import tensorflow as tf, tensorflow_text  # only these
        for path in ({str(path)!r}, {str(xla_path)!r}, {str(beams_path)!r}, {str(xla_beams_path)!r}):
            model = tf.saved_model.load(path)
            print(model.signatures["serving_default"](text=tf.constant({SENTENCES!r}))["translation"].numpy().tolist())
            print(model.signatures["translate_tokens"](encoder_tokens=tf.constant({source!r}))["tokens"].numpy().tolist())
    """)
    lines = out.strip().splitlines()[-8:]
    assert lines[2:4] == lines[0:2]  # greedy: XLA inside == default
    assert lines[6:8] == lines[4:6]  # beam search: XLA inside == default
    ids, texts = _expected(model, tokenizer, SENTENCES)
    assert lines[0] == repr(texts.tolist()) and lines[1] == repr(ids.tolist())
