"""Tests for the translation tf.data pipeline and the Multi30k loader."""

import collections
import importlib.util
import os
import unicodedata

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")  # a module of TensorFlow-only tests

from keras_attn.preprocessing import text
from keras_attn.preprocessing.subword_tokenizer import SubwordTokenizer

pytestmark = pytest.mark.requires_tensorflow

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _multi30k_module():
    path = os.path.join(REPO, "examples", "translation", "multi30k.py")
    spec = importlib.util.spec_from_file_location("multi30k", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _normalized(sentence):
    return " ".join(unicodedata.normalize("NFKC", sentence).split())


@pytest.fixture(scope="module")
def multi30k():
    return _multi30k_module()


@pytest.fixture(scope="module")
def pairs(multi30k):
    german, english = multi30k.load_multi30k(split="train")
    return german[:2000], english[:2000]


@pytest.fixture(scope="module")
def tokenizer(pairs):
    german, english = pairs
    return SubwordTokenizer.train(german + english, vocabulary_size=1000)


def _rows(batch):
    """Non-padding ids of each row of a (B, L) batch."""
    return [list(row[row != 0]) for row in np.asarray(batch)]


def _batches(dataset):
    return [
        (x["encoder_tokens"].numpy(), x["decoder_tokens"].numpy(), y.numpy()) for x, y in dataset
    ]


# Multi30k loader ---------------------------------------------------------------


def test_load_multi30k_reads_every_split(multi30k):
    sizes = {"train": 29000, "val": 1014, "test_2016_flickr": 1000}
    for split, size in sizes.items():
        german, english = multi30k.load_multi30k(split=split)
        assert len(german) == len(english) == size
    german, english = multi30k.load_multi30k(split="train")
    assert german[0] == "Zwei junge weiße Männer sind im Freien in der Nähe vieler Büsche."
    assert english[0] == "Two young, White males are outside near many bushes."
    english_first, german_second = multi30k.load_multi30k(
        split="train", source_language="en", target_language="de"
    )
    assert english_first[0] == english[0] and german_second[0] == german[0]
    assert (
        multi30k.load_multi30k(None, "val")[0][:3]
        == multi30k.load_multi30k(multi30k.DEFAULT_DATA_DIR, "val")[0][:3]
    )


def test_load_multi30k_errors(multi30k, tmp_path):
    with pytest.raises(ValueError, match="Unknown Multi30k split.*'dev'"):
        multi30k.load_multi30k(split="dev")
    with pytest.raises(ValueError, match="Unknown Multi30k language.*'fr'"):
        multi30k.load_multi30k(target_language="fr")
    with pytest.raises(ValueError, match="must differ"):
        multi30k.load_multi30k(source_language="en", target_language="en")
    missing = str(tmp_path / "nowhere")
    with pytest.raises(ValueError, match="(?s)nowhere/val.de.gz.*--data_dir"):
        multi30k.load_multi30k(missing, split="val")
    import gzip

    for language, lines in (("de", "a\nb\n"), ("en", "a\n")):
        with gzip.open(tmp_path / f"val.{language}.gz", "wt") as f:
            f.write(lines)
    with pytest.raises(ValueError, match="not aligned"):
        multi30k.load_multi30k(str(tmp_path), split="val")


# Encoding ---------------------------------------------------------------------


def test_encode_source_and_target(tokenizer, pairs):
    german, english = pairs[0][:8], pairs[1][:8]
    pieces_de = tokenizer.tokenize(german).to_list()
    pieces_en = tokenizer.tokenize(english).to_list()
    assert text.encode_source(tokenizer, german, 64).to_list() == [p + [3] for p in pieces_de]
    decoder, targets = text.encode_target(tokenizer, english, 64)
    assert decoder.to_list() == [[2] + p for p in pieces_en]
    assert targets.to_list() == [p + [3] for p in pieces_en]
    # Truncation keeps the first pieces and the special ids.
    source = text.encode_source(tokenizer, german, 6).to_list()
    assert source == [p[:5] + [3] for p in pieces_de]
    decoder, targets = text.encode_target(tokenizer, english, 6)
    assert decoder.to_list() == [[2] + p[:5] for p in pieces_en]
    assert targets.to_list() == [p[:5] + [3] for p in pieces_en]


def test_bucket_boundaries():
    assert text.bucket_boundaries(20, min_length=8, step=1.2) == [8, 9, 10, 12, 14, 16, 19, 21]
    boundaries = text.bucket_boundaries(128)
    assert boundaries[:13] == list(range(8, 21))
    assert boundaries[-1] == 129
    assert all(b > a for a, b in zip(boundaries, boundaries[1:]))
    # Above 20 consecutive boundaries are ~10% apart.
    ratios = [b / a for a, b in zip(boundaries[13:-1], boundaries[14:-1])]
    assert max(ratios) < 1.15
    assert text.bucket_boundaries(5) == [6]


# The dataset -------------------------------------------------------------------


def test_dataset_content_in_order(tokenizer, pairs):
    german, english = pairs[0][:100], pairs[1][:100]
    dataset = text.make_translation_dataset(
        german,
        english,
        tokenizer,
        tokenizer,
        batch_size=32,
        max_length=64,
        shuffle=False,
        bucketing=False,
    )
    spec_inputs, spec_targets = dataset.element_spec
    assert set(spec_inputs) == {"encoder_tokens", "decoder_tokens"}
    assert spec_inputs["encoder_tokens"].dtype == tf.int32
    assert spec_targets.dtype == tf.int32
    batches = _batches(dataset)
    assert [len(b[0]) for b in batches] == [32, 32, 32, 4]
    pieces_de = tokenizer.tokenize(german).to_list()
    pieces_en = tokenizer.tokenize(english).to_list()
    encoder = [row for b in batches for row in _rows(b[0])]
    decoder = [row for b in batches for row in _rows(b[1])]
    targets = [row for b in batches for row in _rows(b[2])]
    assert encoder == [p + [3] for p in pieces_de]
    assert decoder == [[2] + p for p in pieces_en]
    assert targets == [p + [3] for p in pieces_en]
    for encoder_batch, decoder_batch, target_batch in batches:
        # Padded to the longest row of the batch, with zeros after the row.
        lengths = (encoder_batch != 0).sum(axis=1)
        assert encoder_batch.shape[1] == lengths.max()
        assert np.all(encoder_batch[np.arange(len(lengths)), lengths - 1] == 3)
        positions = np.arange(encoder_batch.shape[1])[None, :]
        assert np.all((encoder_batch != 0) == (positions < lengths[:, None]))
        assert decoder_batch.shape == target_batch.shape


def _check_teacher_forcing(decoder_batch, target_batch):
    real = decoder_batch != 0
    assert np.array_equal(real, target_batch != 0)
    assert np.all(decoder_batch[:, 0] == 2)
    # decoder_tokens[1:] == targets[:-1] wherever the decoder row is real.
    shifted = decoder_batch[:, 1:] == target_batch[:, :-1]
    assert np.all(shifted | ~real[:, 1:])
    lengths = real.sum(axis=1)
    assert np.all(target_batch[np.arange(len(lengths)), lengths - 1] == 3)
    assert np.all((target_batch == 3).sum(axis=1) == 1)
    assert np.all((decoder_batch == 3).sum(axis=1) == 0)


def test_bucketed_dataset_holds_every_pair_once(tokenizer, pairs):
    german, english = pairs
    dataset = text.make_translation_dataset(
        german, english, tokenizer, tokenizer, batch_size=64, max_length=128, seed=5
    )
    batches = _batches(dataset)
    count = 0
    restored_targets, restored_sources = [], []
    for encoder_batch, decoder_batch, target_batch in batches:
        _check_teacher_forcing(decoder_batch, target_batch)
        assert len(encoder_batch) <= 64
        count += len(encoder_batch)
        restored_targets += [t.decode() for t in tokenizer.detokenize(target_batch).numpy()]
        restored_sources += [t.decode() for t in tokenizer.detokenize(encoder_batch).numpy()]
    assert count == len(german)
    assert collections.Counter(restored_targets) == collections.Counter(
        _normalized(s) for s in english
    )
    assert collections.Counter(restored_sources) == collections.Counter(
        _normalized(s) for s in german
    )
    # Pairs stay aligned through shuffling and bucketing.
    expected = {_normalized(g): _normalized(e) for g, e in zip(german, english)}
    assert all(expected[s] == t for s, t in zip(restored_sources, restored_targets))


def test_bucketing_reduces_padding(tokenizer, pairs):
    german, english = pairs
    common = dict(batch_size=64, max_length=64, seed=3)
    plain = text.padding_fraction(
        text.make_translation_dataset(
            german, english, tokenizer, tokenizer, bucketing=False, **common
        )
    )
    bucketed = text.padding_fraction(
        text.make_translation_dataset(german, english, tokenizer, tokenizer, **common)
    )
    # Measured: 0.52 plain, 0.09 bucketed.
    assert plain > 0.4
    assert bucketed < 0.15
    assert bucketed < plain / 4


def test_deterministic_with_a_seed(tokenizer, pairs):
    german, english = pairs[0][:300], pairs[1][:300]

    def dataset(seed):
        return text.make_translation_dataset(
            german, english, tokenizer, tokenizer, batch_size=32, max_length=48, seed=seed
        )

    first, second = dataset(11), dataset(11)
    first_epochs = [_batches(first), _batches(first)]
    second_epochs = [_batches(second), _batches(second)]
    for epoch_a, epoch_b in zip(first_epochs, second_epochs):
        assert len(epoch_a) == len(epoch_b)
        for batch_a, batch_b in zip(epoch_a, epoch_b):
            for a, b in zip(batch_a, batch_b):
                np.testing.assert_array_equal(a, b)

    # Each epoch is reshuffled, and another seed gives another order.
    def order(epoch):
        return [tuple(row) for batch in epoch for row in _rows(batch[2])]

    assert sorted(order(first_epochs[0])) == sorted(order(first_epochs[1]))
    assert order(first_epochs[0]) != order(first_epochs[1])
    assert order(_batches(dataset(12))) != order(first_epochs[0])


def test_truncation_to_max_length(tokenizer, pairs):
    german, english = pairs[0][:300], pairs[1][:300]
    dataset = text.make_translation_dataset(
        german, english, tokenizer, tokenizer, batch_size=50, max_length=10, seed=0
    )
    long_rows = 0
    for encoder_batch, decoder_batch, target_batch in _batches(dataset):
        assert encoder_batch.shape[1] <= 10 and decoder_batch.shape[1] <= 10
        _check_teacher_forcing(decoder_batch, target_batch)
        lengths = (encoder_batch != 0).sum(axis=1)
        assert np.all(encoder_batch[np.arange(len(lengths)), lengths - 1] == 3)
        long_rows += int(np.sum(lengths == 10))
    assert long_rows > 100  # most Multi30k sentences exceed 9 pieces


def test_batching_by_tokens(tokenizer, pairs):
    german, english = pairs
    dataset = text.make_translation_dataset(
        german, english, tokenizer, tokenizer, tokens_per_batch=600, max_length=64, seed=0
    )
    boundaries = text.bucket_boundaries(64)
    uppers = [b - 1 for b in boundaries] + [64]
    count = full = 0
    batches = _batches(dataset)
    for encoder_batch, decoder_batch, _ in batches:
        assert encoder_batch.size <= 600 and decoder_batch.size <= 600
        longest = max(encoder_batch.shape[1], decoder_batch.shape[1])
        bucket = int(np.searchsorted(boundaries, longest, side="right"))
        # Each bucket's batch holds 600 // (its longest allowed row) pairs;
        # only the last batch of a bucket may be smaller.
        assert len(encoder_batch) <= 600 // uppers[bucket]
        full += len(encoder_batch) == 600 // uppers[bucket]
        count += len(encoder_batch)
    assert count == len(german)
    assert full >= len(batches) // 2
    assert len({len(b[0]) for b in batches}) > 5


def test_pad_to_bucket_boundary_gives_fixed_shapes(tokenizer, pairs):
    german, english = pairs[0][:500], pairs[1][:500]
    boundaries = [10, 20, 40, 65]
    dataset = text.make_translation_dataset(
        german,
        english,
        tokenizer,
        tokenizer,
        batch_size=16,
        max_length=64,
        seed=0,
        boundaries=boundaries,
        pad_to_bucket_boundary=True,
        drop_remainder=True,
    )
    shapes = set()
    for encoder_batch, decoder_batch, target_batch in _batches(dataset):
        assert encoder_batch.shape == decoder_batch.shape == target_batch.shape
        shapes.add(encoder_batch.shape)
        _check_teacher_forcing(decoder_batch, target_batch)
    assert shapes <= {(16, 9), (16, 19), (16, 39), (16, 64)}
    assert len(shapes) >= 2


def test_errors(tokenizer, pairs):
    german, english = pairs[0][:10], pairs[1][:10]
    make = text.make_translation_dataset
    with pytest.raises(
        ValueError,
        match=r"aligned, non-empty lists. Received: a list of 10 and a list of 9\.",
    ):
        make(german, english[:9], tokenizer, tokenizer)
    with pytest.raises(ValueError, match="empty"):
        make([], [], tokenizer, tokenizer)
    # One string was read as a list of one-character sentences.
    with pytest.raises(
        ValueError,
        match=r"`source_sentences` and `target_sentences` must be aligned, non-empty "
        r"lists. Received: a str of 3 and a str of 3\.",
    ):
        make("abc", "def", tokenizer, tokenizer)
    with pytest.raises(
        ValueError,
        match=r"`target_tokenizer` must be a `SubwordTokenizer`. Received: target_tokenizer='tokenizer.model'\.",
    ):
        make(german, english, tokenizer, "tokenizer.model")
    with pytest.raises(ValueError, match="max_length=1"):
        make(german, english, tokenizer, tokenizer, max_length=1)
    for encode in (text.encode_source, text.encode_target):
        with pytest.raises(
            ValueError,
            match=r"`max_length` must be None or an int > 1\. Received: max_length=1\.",
        ):
            encode(tokenizer, german, 1)
    with pytest.raises(ValueError, match="batch_size=0"):
        make(german, english, tokenizer, tokenizer, batch_size=0)
    # A TypeError from tf.data, 0 read as "the whole corpus", a flag ignored,
    # and an empty dataset.
    for seed in ("x", 1.5, True):
        with pytest.raises(
            ValueError,
            match=rf"`seed` must be an int, an integer scalar tensor or None. Received: seed={seed!r}\.",
        ):
            make(german, english, tokenizer, tokenizer, seed=seed)
    # A seed tensor (the example shuffles each epoch with seed + epoch) is a seed.
    make(german, english, tokenizer, tokenizer, seed=tf.constant(3, tf.int64))
    for size in (0, -1):
        with pytest.raises(
            ValueError, match=rf"`shuffle_buffer_size` must be a positive int.*={size}\."
        ):
            make(german, english, tokenizer, tokenizer, shuffle_buffer_size=size)
    with pytest.raises(
        ValueError,
        match=r"`bucketing` must be True with `pad_to_bucket_boundary`. Received: bucketing=False\.",
    ):
        make(german, english, tokenizer, tokenizer, bucketing=False, pad_to_bucket_boundary=True)
    with pytest.raises(
        ValueError,
        match=r"`drop_remainder=True` with 10 sentence pairs and batch_size=64 would "
        r"drop every pair",
    ):
        make(german, english, tokenizer, tokenizer, drop_remainder=True)
    with pytest.raises(
        ValueError,
        match=r"`bucketing` must be True with `tokens_per_batch`. Received: bucketing=False",
    ):
        make(german, english, tokenizer, tokenizer, tokens_per_batch=100, bucketing=False)
    with pytest.raises(ValueError, match="strictly increasing"):
        make(german, english, tokenizer, tokenizer, boundaries=[10, 5])
    with pytest.raises(
        ValueError,
        match=r"`boundaries` must be a non-empty, strictly increasing list, ending above "
        r"max_length=64. Received: boundaries=\[10, 64\]",
    ):
        make(
            german,
            english,
            tokenizer,
            tokenizer,
            max_length=64,
            boundaries=[10, 64],
            pad_to_bucket_boundary=True,
        )
    for step in (1.0, float("inf"), "2", True, float("nan")):  # "2": TypeError, inf: OverflowError
        with pytest.raises(ValueError, match=r"`step` must be a finite number > 1"):
            text.bucket_boundaries(64, step=step)
