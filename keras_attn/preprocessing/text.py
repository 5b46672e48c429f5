"""tf.data pipelines for translation, tokenized in the graph with `SubwordTokenizer`. Id layout:

    encoder_tokens = pieces(source)[: max_length - 1] + [end]
    decoder_tokens = [start] + pieces(target)[: max_length - 1]
    targets        =           pieces(target)[: max_length - 1] + [end]

padded with 0. An exporter encodes source text with `encode_source`, as training does.
"""

import itertools
import math

import numpy as np

from keras_attn import checks
from keras_attn.extras import needs_extra
from keras_attn.preprocessing.subword_tokenizer import PAD_ID, START_ID, SubwordTokenizer

with needs_extra("tensorflow", "keras_attn.preprocessing.text"):
    import tensorflow as tf


def encode_source(tokenizer, sentences, max_length):
    """Source sentences to encoder ids: pieces, truncated, then the end id.

    Args:
        tokenizer: a `SubwordTokenizer`.
        sentences: (B,) string tensor or list of str.
        max_length: int >= 2, the most ids per sentence (end id included).

    Returns:
        (B, None) int32 `tf.RaggedTensor`; `.to_tensor()` gives the (B, S) `encoder_tokens`.

    Raises:
        ValueError: as `tokenizer.tokenize` (`max_length` < 2, `sentences` not rank 1).
    """
    return tokenizer.tokenize(sentences, max_length=max_length, add_end=True)


def encode_target(tokenizer, sentences, max_length):
    """Target sentences to teacher-forcing decoder inputs and targets.

    Args:
        tokenizer: a `SubwordTokenizer`.
        sentences: (B,) string tensor or list of str.
        max_length: int >= 2, the most ids per row.

    Returns:
        `(decoder_tokens, targets)`: (B, None) int32 `tf.RaggedTensor`s of equal row lengths.

    Raises:
        ValueError: as `tokenizer.tokenize` (`max_length` < 2, `sentences` not rank 1).
    """
    targets = tokenizer.tokenize(sentences, max_length=max_length, add_end=True)
    start = tf.ones_like(targets[:, :1]) * START_ID  # every row holds its end id
    return tf.concat([start, targets[:, :-1]], axis=1), targets


def bucket_boundaries(max_length, min_length=8, step=1.1):
    """Length-bucket boundaries growing by `step` from `min_length` to `max_length + 1`.

    Args:
        max_length: int >= 1, the longest sequence.
        min_length: int >= 1, the first boundary.
        step: float > 1, the ratio between consecutive boundaries.

    Returns:
        Sorted list of ints; bucket i holds lengths in `[boundaries[i - 1], boundaries[i])`.

    Raises:
        ValueError: if an argument is out of range.

    Example:
    >>> from keras_attn.preprocessing.text import bucket_boundaries
    >>> bucket_boundaries(20, min_length=8, step=1.2)
    [8, 9, 10, 12, 14, 16, 19, 21]

    Reference:
        Vaswani et al. 2018, "Tensor2Tensor for Neural Machine Translation".
    """
    for name, value in (("max_length", max_length), ("min_length", min_length)):
        checks.require(checks.is_int(value, 1), name, value, "a positive int")
    # "2" gave a TypeError, inf an OverflowError.
    ok = checks.is_number(step) and 1 < step < math.inf
    checks.require(ok, "step", step, "a finite number > 1")
    boundaries = []
    length = int(min_length)
    while length <= max_length:
        boundaries.append(length)
        length = max(length + 1, int(math.floor(length * step)))
    boundaries.append(int(max_length) + 1)
    return boundaries


def make_translation_dataset(
    source_sentences,
    target_sentences,
    source_tokenizer,
    target_tokenizer,
    batch_size=64,
    max_length=128,
    shuffle=True,
    seed=None,
    tokens_per_batch=None,
    bucketing=True,
    boundaries=None,
    pad_to_bucket_boundary=False,
    drop_remainder=False,
    shuffle_buffer_size=None,
):
    """The tokenized, batched (inputs, targets) dataset for translation (guide: preprocessing).

    Args:
        source_sentences, target_sentences: aligned lists of `str`.
        source_tokenizer, target_tokenizer: `SubwordTokenizer`s (one object for a joint one).
        batch_size: sentence pairs per batch, when `tokens_per_batch` is None.
        max_length: int >= 2, the most ids per encoder / decoder row.
        shuffle, seed: shuffle the pairs each epoch, with this int seed.
        tokens_per_batch: optional int: about this many ids per batch side (needs bucketing).
        bucketing: group pairs of similar length (False: `padded_batch` in input order).
        boundaries: optional sorted bucket boundaries (default `bucket_boundaries(max_length)`).
        pad_to_bucket_boundary: pad to the bucket's upper length (fixed shapes, for XLA).
        drop_remainder: drop each bucket's last incomplete batch.
        shuffle_buffer_size: shuffle buffer; defaults to the whole corpus.

    Returns:
        `tf.data.Dataset` of `({"encoder_tokens": (B, S), "decoder_tokens": (B, T)}, (B, T))`,
        int32, 0-padded; S, T <= `max_length`.

    Raises:
        ValueError: for empty or unaligned sentence lists, a bad tokenizer or argument.

    Example:
    >>> from keras_attn.preprocessing.subword_tokenizer import SubwordTokenizer
    >>> from keras_attn.preprocessing.text import make_translation_dataset
    >>> sentences = ["Ein Hund rennt.", "A dog runs."] * 50
    >>> tokenizer = SubwordTokenizer.train(sentences, vocabulary_size=300)
    >>> dataset = make_translation_dataset(["Ein Hund rennt."] * 4, ["A dog runs."] * 4, tokenizer,
    ...                                    tokenizer, batch_size=2, max_length=16, seed=1)
    >>> inputs, targets = next(iter(dataset))
    >>> inputs["encoder_tokens"].shape[0], targets.dtype.name
    (2, 'int32')

    Reference:
        Vaswani et al. 2017, "Attention Is All You Need", section 5.1.
    """
    sentences = (source_sentences, target_sentences)
    one_string = any(isinstance(side, (str, bytes)) for side in sentences)  # read as characters
    count = len(source_sentences)
    if one_string or count != len(target_sentences) or not count:
        received = " and ".join(f"a {type(side).__name__} of {len(side)}" for side in sentences)
        expected = "`source_sentences` and `target_sentences` must be aligned, non-empty lists"
        raise ValueError(f"{expected}. Received: {received}.")
    tokenizers = {"source_tokenizer": source_tokenizer, "target_tokenizer": target_tokenizer}
    for name, tokenizer in tokenizers.items():
        ok = isinstance(tokenizer, SubwordTokenizer)
        checks.require(ok, name, tokenizer, "a `SubwordTokenizer`")
    checks.require(checks.is_int(max_length, 2), "max_length", max_length, "an int >= 2")
    by_tokens = tokens_per_batch is not None
    size_name = "tokens_per_batch" if by_tokens else "batch_size"
    size = tokens_per_batch if by_tokens else batch_size
    checks.require(checks.is_int(size, 1), size_name, size, "a positive int")
    bucketed = {"tokens_per_batch": by_tokens, "pad_to_bucket_boundary": pad_to_bucket_boundary}
    for flag, used in bucketed.items():
        checks.require(bucketing or not used, "bucketing", bucketing, f"True with `{flag}`")
    # tf.data raised a TypeError on a float seed and read a buffer of 0 as the whole corpus.
    integer_tensor = hasattr(seed, "dtype") and tf.as_dtype(seed.dtype).is_integer
    ok = seed is None or checks.is_int(seed) or integer_tensor
    checks.require(ok, "seed", seed, "an int, an integer scalar tensor or None")
    buffer_size = shuffle_buffer_size
    ok = buffer_size is None or checks.is_int(buffer_size, 1)
    checks.require(ok, "shuffle_buffer_size", buffer_size, "a positive int or None (all)")
    if drop_remainder and not by_tokens and count < batch_size:
        pairs = f"{count} sentence pairs and batch_size={batch_size}"
        raise ValueError(f"`drop_remainder=True` with {pairs} would drop every pair.")
    boundaries = (
        bucket_boundaries(max_length) if boundaries is None else [int(b) for b in boundaries]
    )
    increasing = boundaries and all(a < b for a, b in zip(boundaries, boundaries[1:]))
    above = f", ending above max_length={max_length}" if pad_to_bucket_boundary else ""
    ok = increasing and (not above or boundaries[-1] > max_length)
    checks.require(ok, "boundaries", boundaries, f"a non-empty, strictly increasing list{above}")

    pairs = [tf.constant(list(side), tf.string) for side in sentences]
    dataset = tf.data.Dataset.from_tensor_slices(tuple(pairs))
    if shuffle:
        buffer_size = shuffle_buffer_size or count
        dataset = dataset.shuffle(buffer_size, seed=seed, reshuffle_each_iteration=True)

    def encode(source, target):
        encoder_tokens = encode_source(source_tokenizer, source, max_length)
        decoder_tokens, targets = encode_target(target_tokenizer, target, max_length)
        return {"encoder_tokens": encoder_tokens, "decoder_tokens": decoder_tokens}, targets

    # One tokenizer call per chunk, not per sentence: per-element ops cost
    # more than the tokenization itself.
    dataset = dataset.batch(1024).map(
        encode, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True
    )
    # Unbatched ragged rows have a RaggedTensorSpec of ragged rank 0, which
    # `padded_batch` refuses; an identity map turns them into plain tensors.
    dataset = dataset.unbatch().map(lambda inputs, targets: (inputs, targets))
    if not bucketing:
        dataset = dataset.padded_batch(
            batch_size, padding_values=PAD_ID, drop_remainder=drop_remainder
        )
    else:
        # Rows of similar length (the longer of the two sides) batched together.
        if by_tokens:
            upper = [b - 1 for b in boundaries] + [max_length]
            batch_sizes = [max(1, int(tokens_per_batch) // max(u, 1)) for u in upper]
        else:
            batch_sizes = [int(batch_size)] * (len(boundaries) + 1)
        dataset = dataset.bucket_by_sequence_length(
            element_length_func=_pair_length,
            bucket_boundaries=boundaries,
            bucket_batch_sizes=batch_sizes,
            padding_values=PAD_ID,
            pad_to_bucket_boundary=pad_to_bucket_boundary,
            drop_remainder=drop_remainder,
        )
    options = tf.data.Options()
    options.deterministic = True
    return dataset.with_options(options).prefetch(tf.data.AUTOTUNE)


def _pair_length(inputs, targets):
    """The longer side of a pair of id rows."""
    del targets
    return tf.maximum(tf.shape(inputs["encoder_tokens"])[0], tf.shape(inputs["decoder_tokens"])[0])


def padding_fraction(dataset, max_batches=None):
    """Fraction of token positions that are padding in a translation dataset.

    Args:
        dataset: a dataset from `make_translation_dataset`.
        max_batches: optional int, only look at the first batches.

    Returns:
        Python float in [0, 1) (0.0 for an empty dataset).
    """
    padded = total = 0
    for inputs, _ in itertools.islice(dataset, max_batches):  # None: all
        for key in ("encoder_tokens", "decoder_tokens"):
            tokens = np.asarray(inputs[key])
            padded += int(np.sum(tokens == PAD_ID))
            total += tokens.size
    return padded / total if total else 0.0
