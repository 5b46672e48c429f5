"""Tests for SubwordTokenizer on real Multi30k sentences."""

import importlib.util
import os
import subprocess
import sys
import textwrap
import unicodedata

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")  # a module of TensorFlow-only tests

from keras_attn.preprocessing.subword_tokenizer import SubwordTokenizer

pytestmark = pytest.mark.requires_tensorflow

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _load_multi30k(split):
    path = os.path.join(REPO, "examples", "translation", "multi30k.py")
    spec = importlib.util.spec_from_file_location("multi30k", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.load_multi30k(split=split, source_language="de", target_language="en")


def _normalized(sentence):
    """What the tokenizer's nmt_nfkc normalization should give back."""
    return " ".join(unicodedata.normalize("NFKC", sentence).split())


@pytest.fixture(scope="module")
def corpus():
    train_de, train_en = _load_multi30k("train")
    val_de, val_en = _load_multi30k("val")
    return {"train": train_de[:2000] + train_en[:2000], "val": val_de + val_en}


@pytest.fixture(scope="module")
def tokenizer(corpus):
    return SubwordTokenizer.train(corpus["train"], vocabulary_size=1000)


def _texts(tensor):
    return [t.decode("utf-8") for t in tensor.numpy()]


def test_round_trip_on_real_sentences(tokenizer, corpus):
    sentences = corpus["val"]
    restored = _texts(tokenizer.detokenize(tokenizer.tokenize(sentences)))
    assert restored == [_normalized(s) for s in sentences]
    # Multi30k val is clean text: all but one sentence come back byte for byte.
    exact = sum(r == s for r, s in zip(restored, sentences))
    assert exact == sum(_normalized(s) == s for s in sentences) >= len(sentences) - 1


def test_ids_are_subwords_and_avoid_reserved_ids(tokenizer, corpus):
    sentences = corpus["val"]
    ids = tokenizer.tokenize(sentences)
    assert ids.dtype == tf.int32
    lengths = ids.row_lengths().numpy()
    words = np.array([len(s.split()) for s in sentences])
    characters = np.array([len(s) for s in sentences])
    # Pieces never cross a space, so there are at least as many as words, and
    # a 1000-piece vocabulary must merge characters.
    assert np.all(lengths >= words)
    assert lengths.sum() < 0.5 * characters.sum()
    flat = ids.flat_values.numpy()
    assert flat.min() >= 4 and flat.max() < 1000
    assert (tokenizer.pad_id, tokenizer.unknown_id) == (0, 1)
    assert (tokenizer.start_id, tokenizer.end_id) == (2, 3)
    assert tokenizer.vocabulary_size == 1000


def test_matches_the_sentencepiece_library(tokenizer, corpus, tmp_path):
    sentencepiece = pytest.importorskip("sentencepiece")
    path = str(tmp_path / "multi30k.model")
    tokenizer.save(path)
    reference = sentencepiece.SentencePieceProcessor(model_file=path)
    assert reference.pad_id() == 0 and reference.unk_id() == 1
    assert reference.bos_id() == 2 and reference.eos_id() == 3
    sentences = corpus["val"][:300]
    assert tokenizer.tokenize(sentences).to_list() == reference.encode(sentences)


def test_save_and_from_file_give_the_same_tokenizer(tokenizer, corpus, tmp_path):
    path = str(tmp_path / "shared.model")
    tokenizer.save(path)
    with open(path, "rb") as f:
        assert f.read() == tokenizer.model_proto
    restored = SubwordTokenizer.from_file(path)
    sentences = corpus["val"][:50]
    assert restored.tokenize(sentences).to_list() == tokenizer.tokenize(sentences).to_list()
    assert restored.vocabulary_size == tokenizer.vocabulary_size


def test_training_is_deterministic(corpus, tokenizer):
    again = SubwordTokenizer.train(corpus["train"], vocabulary_size=1000)
    assert again.model_proto == tokenizer.model_proto
    other = SubwordTokenizer.train(corpus["train"][:1500], vocabulary_size=1000)
    assert other.model_proto != tokenizer.model_proto


def test_start_end_and_truncation(tokenizer):
    sentence = "Ein Mann in einem blauen Hemd steht auf einer Leiter und putzt ein Fenster."
    pieces = tokenizer.tokenize([sentence]).to_list()[0]
    assert len(pieces) > 6
    full = tokenizer.tokenize([sentence], add_start=True, add_end=True).to_list()[0]
    assert full == [2] + pieces + [3]
    cut = tokenizer.tokenize([sentence, "Ein Hund."], max_length=5, add_start=True, add_end=True)
    cut = cut.to_list()
    assert cut[0] == [2] + pieces[:3] + [3]
    short = tokenizer.tokenize(["Ein Hund."]).to_list()[0]
    assert len(short) <= 3 and cut[1] == [2] + short + [3]
    assert tokenizer.tokenize([sentence], max_length=4).to_list()[0] == pieces[:4]
    only_end = tokenizer.tokenize([sentence], max_length=3, add_end=True).to_list()[0]
    assert only_end == pieces[:2] + [3]


def test_empty_string(tokenizer):
    assert tokenizer.tokenize([""]).to_list() == [[]]
    ids = tokenizer.tokenize(["", ""], add_start=True, add_end=True)
    assert ids.to_list() == [[2, 3], [2, 3]]
    assert _texts(tokenizer.detokenize(ids)) == ["", ""]
    empty_batch = tokenizer.tokenize(tf.constant([], tf.string))
    assert empty_batch.shape[0] == 0
    assert tokenizer.detokenize(tf.zeros((0, 4), tf.int32)).shape == (0,)


def test_invalid_utf8_becomes_replacement_characters(tokenizer):
    texts = tokenizer.detokenize(tokenizer.tokenize([b"\xff\xfe", b"ab\xffcd"]))
    assert _texts(texts) == ["\ufffd\ufffd", "ab\ufffdcd"]


def test_unseen_characters_round_trip_through_byte_fallback(tokenizer):
    sentences = ["Ein Café in Zürich – 日本語 ☃ naïve"]
    ids = tokenizer.tokenize(sentences)
    assert 1 not in ids.flat_values.numpy()
    assert _texts(tokenizer.detokenize(ids)) == sentences


def test_detokenize_strips_padding_and_stops_at_end(tokenizer):
    sentences = ["Zwei Hunde spielen im Schnee.", "A girl in a red dress."]
    ids = tokenizer.tokenize(sentences, add_start=True, add_end=True)
    dense = ids.to_tensor().numpy()
    # Generation keeps writing after the end id; that must be ignored.
    garbage = np.array([[500, 3, 600], [0, 700, 0]], np.int32)
    dense = np.concatenate([dense, garbage], axis=1)
    assert _texts(tokenizer.detokenize(dense)) == sentences
    assert _texts(tokenizer.detokenize(dense.astype(np.int64))) == sentences
    assert _texts(tokenizer.detokenize(ids)) == sentences
    without_special = tokenizer.tokenize(sentences)
    assert _texts(tokenizer.detokenize(without_special)) == sentences
    # Unknown and out-of-range ids read as the unknown piece " ⁇ ".
    unknown = tokenizer.detokenize([[1], [5000], [-7]])
    assert _texts(unknown) == [" \u2047 "] * 3
    # Compared before the cast to int32: 2**32 + 5 was read as piece 5.
    wrapped = tokenizer.detokenize(np.array([[5, 2**32 + 5]], np.int64))
    assert _texts(wrapped) == [_texts(tokenizer.detokenize([[5, 1]]))[0]]


def test_id_to_piece_reads_ids_outside_the_vocabulary_as_the_unknown_piece(tokenizer):
    # SentencePiece crashed the whole process (segmentation fault) on them.
    size = tokenizer.vocabulary_size
    pieces = tokenizer.id_to_piece(np.array([size, 10_000, -1, 2**32 + 5], np.int64)).numpy()
    assert [p.decode() for p in pieces] == ["<unk>"] * 4
    assert tokenizer.id_to_piece([size - 1]).numpy()[0].decode() != "<unk>"
    with pytest.raises(
        ValueError, match=r"`ids` must be integer token ids. Received: ids=.*dtype=float32"
    ):
        tokenizer.id_to_piece(np.array([1.0], np.float32))


def test_works_inside_tf_function(tokenizer, corpus):
    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def round_trip(strings):
        ids = tokenizer.tokenize(strings, max_length=64, add_start=True, add_end=True)
        return ids.to_tensor(), tokenizer.detokenize(ids.to_tensor())

    sentences = corpus["val"][:20]
    ids, texts = round_trip(tf.constant(sentences))
    expected = tokenizer.tokenize(sentences, max_length=64, add_start=True, add_end=True)
    np.testing.assert_array_equal(ids.numpy(), expected.to_tensor().numpy())
    assert _texts(texts) == [_normalized(s) for s in sentences]


def test_survives_clearing_the_kernel_cache(corpus):
    # tf.random.set_seed (and keras.utils.set_random_seed) clear TF's eager
    # kernel cache, which deletes tensorflow-text's kernel-owned resources.
    tokenizer = SubwordTokenizer.train(corpus["train"][:500], vocabulary_size=400)
    before = tokenizer.tokenize(corpus["val"][:5]).to_list()
    tf.random.set_seed(7)
    assert tokenizer.tokenize(corpus["val"][:5]).to_list() == before
    assert _texts(tokenizer.detokenize(tokenizer.tokenize(["Ein Hund."]))) == ["Ein Hund."]


def test_errors(tokenizer, corpus):
    with pytest.raises(ValueError, match="is not a SentencePiece model"):
        SubwordTokenizer(b"not a model")
    with pytest.raises(ValueError, match="must be the bytes of a SentencePiece model"):
        SubwordTokenizer("path/to/file.model")
    with pytest.raises(ValueError, match="rank-1"):
        tokenizer.tokenize([["Ein", "Hund"]])
    with pytest.raises(ValueError, match="max_length"):
        tokenizer.tokenize(["Ein Hund."], max_length=2, add_start=True, add_end=True)
    with pytest.raises(ValueError, match="rank-2"):
        tokenizer.detokenize([4, 5, 6])
    with pytest.raises(
        ValueError,
        match=r"`path` must be a SentencePiece model file. Received: "
        r"path='/nonexistent/dir/x.model'.$",
    ):
        SubwordTokenizer.from_file("/nonexistent/dir/x.model")
    # A folder gave FailedPreconditionError, ids a TypeError.
    with pytest.raises(
        ValueError, match=r"`path` must be a SentencePiece model file. Received: path='/tmp'\."
    ):
        SubwordTokenizer.from_file("/tmp")
    with pytest.raises(
        ValueError,
        match=r"`strings` must be a rank-1 batch of `str`. Received: strings=\[1, 2\]\. Wrap",
    ):
        tokenizer.tokenize([1, 2])
    # One string was trained on as a list of one-character sentences.
    with pytest.raises(
        ValueError,
        match=r"`sentences` must be a non-empty list of `str`. Received: one string.$",
    ):
        SubwordTokenizer.train("some text", vocabulary_size=300)
    with pytest.raises(ValueError, match="empty"):
        SubwordTokenizer.train([])
    with pytest.raises(
        ValueError,
        match=r"`sentences` must be a non-empty list of `str`. Received: 1 items of types \['bytes'\]",
    ):
        SubwordTokenizer.train([b"bytes"])
    with pytest.raises(ValueError, match="model_type"):
        SubwordTokenizer.train(corpus["train"], model_type="wordpiece")
    with pytest.raises(ValueError, match="vocabulary_size"):
        SubwordTokenizer.train(corpus["train"], vocabulary_size=100)
    with pytest.raises(ValueError, match="SentencePiece training failed"):
        SubwordTokenizer.train(corpus["train"][:20], vocabulary_size=5000)


def test_train_refuses_text_sentencepiece_cannot_use():
    # Each failed with SentencePiece's internal message, e.g.
    # "trainer_interface.cc(467) [!sentences_.empty()]".
    usable = r"`sentences` needs a non-blank one of <= 4192 bytes. Received: "
    with pytest.raises(ValueError, match=usable + r"3 blank, 0 longer.$"):
        SubwordTokenizer.train(["", "", ""], vocabulary_size=300)
    with pytest.raises(ValueError, match=usable + r"3 blank, 0 longer."):
        SubwordTokenizer.train([" ", "\t ", " \n "], vocabulary_size=300)
    with pytest.raises(ValueError, match=usable + r"1 blank, 2 longer."):
        SubwordTokenizer.train(["ab " * 2000, "", "é" * 2097], vocabulary_size=300)


def _pieces(tokenizer):
    return set(_texts(tokenizer.id_to_piece(tf.range(260, tokenizer.vocabulary_size))))


def test_train_warns_about_the_sentences_it_leaves_out():
    # SentencePiece silently dropped sentences over 4192 bytes (UTF-8 bytes,
    # not characters: 2097 "é" are 4194 bytes).
    with pytest.warns(
        UserWarning,
        match=r"^1 of the 3 sentences are longer than SentencePiece's limit of 4192 "
        r"UTF-8 bytes and are left out of training. Split them to use them.$",
    ):
        left_out = SubwordTokenizer.train(["ab", "ab ba", "é" * 2097], vocabulary_size=263)
    assert _pieces(left_out) == {"a", "b", "▁"}  # no room for "é": it was indeed left out
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # 4192 bytes exactly: kept, no warning
        kept = SubwordTokenizer.train(["ab", "ab ba", "é" * 2096], vocabulary_size=264)
    assert _pieces(kept) == {"a", "b", "é", "▁"}


@pytest.mark.parametrize("model_type", ["bpe", "unigram"])
def test_the_smallest_documented_vocabulary_trains(model_type):
    # 261 was allowed and failed with SentencePiece's "261 vs 262": "▁" is a
    # piece too.
    tokenizer = SubwordTokenizer.train(["a"], vocabulary_size=262, model_type=model_type)
    assert tokenizer.vocabulary_size == 262 and _pieces(tokenizer) == {"a", "▁"}
    ids = tokenizer.tokenize(["a a", "b"])  # "b": byte pieces
    assert _texts(tokenizer.detokenize(ids)) == ["a a", "b"]
    without_bytes = SubwordTokenizer.train(
        ["a"], vocabulary_size=6, model_type=model_type, byte_fallback=False
    )
    assert without_bytes.vocabulary_size == 6
    assert _texts(without_bytes.detokenize(without_bytes.tokenize(["a a"]))) == ["a a"]
    with pytest.raises(
        ValueError,
        match=r"`vocabulary_size` must be an int >= 262. Received: vocabulary_size=261.",
    ):
        SubwordTokenizer.train(["a"], vocabulary_size=261, model_type=model_type)
    with pytest.raises(ValueError, match=r"`vocabulary_size` must be an int >= 6. Received"):
        SubwordTokenizer.train(["a"], vocabulary_size=5, byte_fallback=False)


def test_rejects_models_without_the_reserved_ids(corpus):
    sentencepiece = pytest.importorskip("sentencepiece")
    import io

    writer = io.BytesIO()
    # sentencepiece's defaults: unk = 0, bos = 1, eos = 2, no padding id.
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(corpus["train"]),
        model_writer=writer,
        vocab_size=500,
        minloglevel=2,
    )
    with pytest.raises(
        ValueError,
        match=r"must reserve ids 0-3 \(pad, unk, start, end\). Received: 500 ids, unknown = 0\.",
    ):
        SubwordTokenizer(writer.getvalue())


def test_saved_model_keeps_two_vocabularies_apart(tokenizer, corpus, tmp_path):
    # With tensorflow-text 2.21's own resource, two tokenizers in one
    # SavedModel both use the last model after `tf.saved_model.load`.
    english = SubwordTokenizer.train(corpus["train"][2000:], vocabulary_size=700)
    module = tf.Module()
    module.joint = tokenizer
    module.english = english
    signature = [tf.TensorSpec([None], tf.string)]
    module.joint_ids = tf.function(
        lambda s: tokenizer.tokenize(s).to_tensor(), input_signature=signature
    )
    module.english_ids = tf.function(
        lambda s: english.tokenize(s).to_tensor(), input_signature=signature
    )
    tf.saved_model.save(module, str(tmp_path / "two"))
    loaded = tf.saved_model.load(str(tmp_path / "two"))
    sentences = tf.constant(corpus["val"][1014:1020])
    joint_ids = tokenizer.tokenize(sentences).to_tensor().numpy()
    english_ids = english.tokenize(sentences).to_tensor().numpy()
    assert joint_ids.shape != english_ids.shape or np.any(joint_ids != english_ids)
    np.testing.assert_array_equal(loaded.joint_ids(sentences).numpy(), joint_ids)
    np.testing.assert_array_equal(loaded.english_ids(sentences).numpy(), english_ids)


_FRESH_PROCESS = textwrap.dedent(
    """
    import json, sys
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the Sentencepiece ops)
    assert not [m for m in sys.modules if m.split(".")[0] == "keras_attn"]
    sentences = json.loads(sys.argv[2])
    results = {}
    for name in ("module", "archive"):
        path = sys.argv[1] + "/" + name
        loaded = tf.saved_model.load(path)
        # Clearing the eager kernel cache (as tf.random.set_seed does) must
        # not destroy the loaded tokenizer's model.
        tf.random.set_seed(0)
        out = loaded.signatures["serving_default"](text=tf.constant(sentences))
        results[name] = {k: v.numpy().tolist() for k, v in out.items()}
        # The session-based loader, the path TF Serving takes.
        with tf.Graph().as_default(), tf.compat.v1.Session() as session:
            graph = tf.compat.v1.saved_model.loader.load(session, ["serve"], path)
            signature = graph.signature_def["serving_default"]
            fetches = {k: v.name for k, v in signature.outputs.items()}
            feed = {signature.inputs["text"].name: sentences}
            out = session.run(fetches, feed)
            results[name + "_session"] = {k: v.tolist() for k, v in out.items()}
    for result in results.values():
        for key, value in result.items():
            if value and isinstance(value[0], bytes):
                result[key] = [v.decode("utf-8") for v in value]
    print("RESULT" + json.dumps(results))
    """
)


@pytest.mark.slow
def test_saved_model_round_trip_in_a_fresh_process(tokenizer, corpus, tmp_path):
    import json

    import keras

    # A separate English vocabulary beside the joint one: with tensorflow-text
    # 2.21, two tokenizers whose ops share a name get one model after loading.
    english = SubwordTokenizer.train(corpus["train"][2000:], vocabulary_size=700)
    signature = [tf.TensorSpec([None], tf.string, name="text")]

    def serve(text):
        ids = tokenizer.tokenize(text, max_length=64, add_start=True, add_end=True)
        english_ids = english.tokenize(text).to_tensor()
        return {
            "ids": ids.to_tensor(),
            "text": tokenizer.detokenize(ids.to_tensor()),
            "english_ids": english_ids,
            "english_text": english.detokenize(english_ids),
        }

    module = tf.Module()
    module.tokenizer = tokenizer
    module.english = english
    module.serve = tf.function(serve, input_signature=signature)
    tf.saved_model.save(
        module, str(tmp_path / "module"), signatures={"serving_default": module.serve}
    )
    archive = keras.export.ExportArchive()
    archive.track(tokenizer)
    archive.track(english)
    archive.add_endpoint("serving_default", serve, input_signature=signature)
    archive.write_out(str(tmp_path / "archive"), verbose=False)

    sentences = corpus["val"][:3] + [corpus["val"][-1], "", "Zwei Hunde, ein Ball!"]
    expected = {k: v.numpy().tolist() for k, v in serve(tf.constant(sentences)).items()}
    expected["text"] = [_normalized(s) for s in sentences]
    expected["english_text"] = [_normalized(s) for s in sentences]
    assert expected["ids"] != expected["english_ids"]

    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    completed = subprocess.run(
        [sys.executable, "-c", _FRESH_PROCESS, str(tmp_path), json.dumps(sentences)],
        capture_output=True,
        text=True,
        env=env,
        cwd=str(tmp_path),
        timeout=300,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    line = [x for x in completed.stdout.splitlines() if x.startswith("RESULT")][-1]
    results = json.loads(line[len("RESULT") :])
    assert set(results) == {"module", "module_session", "archive", "archive_session"}
    for name, result in results.items():
        for key, value in expected.items():
            assert result[key] == value, (name, key)
