"""tf.data pipelines for sequence-to-sequence text (translation).

Tokenization runs inside the pipeline with `SubwordTokenizer`, so the same
graph ops serve training and the exported model. The id layout, shared with
`keras_attn.preprocessing.subword_tokenizer`:

    encoder_tokens = pieces(source)[: max_length - 1] + [end]
    decoder_tokens = [start] + pieces(target)[: max_length - 1]
    targets        =           pieces(target)[: max_length - 1] + [end]

(teacher forcing: `decoder_tokens[1:] == targets[:-1]`), padded with 0.
An exporter must encode source text with `encode_source` so that serving sees
what training saw.
"""

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
        max_length: int >= 2, the most ids per sentence (end id included);
            longer sentences keep their first `max_length - 1` pieces.

    Returns:
        (B, None) int32 `tf.RaggedTensor`; `.to_tensor()` gives the 0-padded
        (B, S) `encoder_tokens`.

    Raises:
        ValueError: as `tokenizer.tokenize` (`max_length` < 2, `sentences`
            not rank 1).
    """
    return tokenizer.tokenize(sentences, max_length=max_length, add_end=True)


def encode_target(tokenizer, sentences, max_length):
    """Target sentences to teacher-forcing decoder inputs and targets.

    Args:
        tokenizer: a `SubwordTokenizer`.
        sentences: (B,) string tensor or list of str.
        max_length: int >= 2, the most ids per row; longer sentences keep
            their first `max_length - 1` pieces.

    Returns:
        `(decoder_tokens, targets)`: two (B, None) int32 `tf.RaggedTensor`s
        with the same row lengths, `[start] + pieces` and `pieces + [end]`.

    Raises:
        ValueError: as `tokenizer.tokenize` (`max_length` < 2, `sentences`
            not rank 1).
    """
    targets = tokenizer.tokenize(sentences, max_length=max_length, add_end=True)
    start = tf.ones_like(targets[:, :1]) * START_ID  # every row holds its end id
    return tf.concat([start, targets[:, :-1]], axis=1), targets


def bucket_boundaries(max_length, min_length=8, step=1.1):
    """Geometric length-bucket boundaries for `bucket_by_sequence_length`.

    Boundaries grow by the factor `step` (at least 1) from `min_length`, so a
    sequence is padded by at most about `step - 1` of its length (10% by
    default), and end with `max_length + 1` so every sequence of length
    <= `max_length` falls in a bucket. This is the scheme of tensor2tensor's
    length bucketing.

    Args:
        max_length: int >= 1, the longest sequence.
        min_length: int >= 1, the first boundary (shorter sequences share the
            first bucket).
        step: float > 1, the ratio between consecutive boundaries.

    Returns:
        Sorted list of ints; bucket i holds lengths in
        `[boundaries[i - 1], boundaries[i])`.

    Raises:
        ValueError: if an argument is out of range.

    Example:

    >>> from keras_attn.preprocessing.text import bucket_boundaries
    >>> bucket_boundaries(20, min_length=8, step=1.2)
    [8, 9, 10, 12, 14, 16, 19, 21]

    Reference:
        tensor2tensor `data_reader._bucket_boundaries` (Vaswani et al. 2018,
        "Tensor2Tensor for Neural Machine Translation").
    """
    for name, value in (("max_length", max_length), ("min_length", min_length)):
        checks.require(checks.is_int(value, 1), name, value, "a positive int")
    # "2" gave a TypeError, inf an OverflowError.
    checks.require(
        checks.is_number(step) and 1 < step < math.inf, "step", step, "a finite number > 1"
    )
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
    """Builds the tokenized, batched (inputs, targets) dataset for translation.

    The pipeline: (shuffle) -> tokenize chunks of 1024 sentence pairs with
    the tokenizers' graph ops -> truncate -> group by length
    (`tf.data.Dataset.bucket_by_sequence_length`, keyed on the longer of
    encoder and decoder rows) -> pad each batch with 0. Bucketing keeps the
    padding small (Multi30k train, joint 8000-piece vocabulary, 64 pairs per
    batch: 7% of encoder + decoder positions are padding, against 52% for a
    plain `padded_batch` of shuffled pairs; what remains is mostly the
    source/target length difference), so fewer FLOPs go to padding. Batches come
    out in the order their buckets fill, so sentence order is not kept; use
    `bucketing=False, shuffle=False` for an evaluation set that must line up
    with references.

    Batch size: either `batch_size` sentence pairs per batch (default), or,
    when `tokens_per_batch` is given, a per-bucket number of pairs so that
    each side of a batch holds at most about `tokens_per_batch` ids, padding
    included (as the Transformer paper's ~25,000-token batches):
    `max(1, tokens_per_batch // (bucket upper length))`.

    Truncation: sentences longer than `max_length` ids are cut, keeping the
    first pieces (see `encode_source` / `encode_target`); the end id is always
    present. Empty sentences give `[end]` / `[start]` / `[end]`.

    Determinism: with `shuffle=True` and a `seed`, the order of every epoch is
    fixed (different each epoch, same across runs); the rest of the pipeline
    is deterministic.

    Args:
        source_sentences: list (or 1-D array) of source `str`.
        target_sentences: list of target `str`, aligned with the source.
        source_tokenizer: `SubwordTokenizer` for the source language.
        target_tokenizer: `SubwordTokenizer` for the target language (the same
            object for a joint vocabulary).
        batch_size: sentence pairs per batch, when `tokens_per_batch` is None.
        max_length: int >= 2, the most ids per encoder / decoder row.
        shuffle: shuffle the pairs each epoch.
        seed: int seed of the shuffle.
        tokens_per_batch: optional int; batch by tokens (see above). Needs
            `bucketing=True`.
        bucketing: group pairs of similar length; if False, a plain
            `padded_batch` in input order.
        boundaries: optional sorted bucket boundaries; defaults to
            `bucket_boundaries(max_length)` (8, 9, ..., x1.1 each, to
            `max_length + 1`).
        pad_to_bucket_boundary: pad each batch to its bucket's upper length
            instead of its longest row: a fixed set of shapes (good for XLA),
            at the cost of more padding.
        drop_remainder: drop each bucket's last incomplete batch (fixed batch
            sizes).
        shuffle_buffer_size: shuffle buffer; defaults to the whole corpus.

    Returns:
        `tf.data.Dataset` of `(inputs, targets)`, where inputs is
        `{"encoder_tokens": (B, S) int32, "decoder_tokens": (B, T) int32}` and
        targets is (B, T) int32, all 0-padded; S, T <= `max_length`. Ready for
        `model.fit`.

    Raises:
        ValueError: if the sentence lists are empty or of different lengths,
            a tokenizer is not a `SubwordTokenizer`, or an argument is out of
            range or needs `bucketing=True`.

    Example:

    >>> from keras_attn.preprocessing.subword_tokenizer import SubwordTokenizer
    >>> from keras_attn.preprocessing.text import make_translation_dataset
    >>> tokenizer = SubwordTokenizer.train(
    ...     ["Ein Hund rennt.", "A dog runs."] * 50, vocabulary_size=300)
    >>> dataset = make_translation_dataset(
    ...     ["Ein Hund rennt."] * 4, ["A dog runs."] * 4, tokenizer, tokenizer,
    ...     batch_size=2, max_length=16, seed=1)
    >>> inputs, targets = next(iter(dataset))
    >>> inputs["encoder_tokens"].shape[0], targets.dtype.name
    (2, 'int32')

    Reference:
        Vaswani et al. 2017, "Attention Is All You Need", section 5.1
        (batches of sentence pairs of similar length).
    """
    sentences = (source_sentences, target_sentences)
    one_string = any(isinstance(side, (str, bytes)) for side in sentences)  # read as characters
    count = len(source_sentences)
    if one_string or count != len(target_sentences) or not count:
        received = " and ".join(f"a {type(side).__name__} of {len(side)}" for side in sentences)
        raise ValueError(
            "`source_sentences` and `target_sentences` must be aligned, non-empty lists of "
            f"sentences. Received: {received}."
        )
    for name, tokenizer in (
        ("source_tokenizer", source_tokenizer),
        ("target_tokenizer", target_tokenizer),
    ):
        checks.require(
            isinstance(tokenizer, SubwordTokenizer), name, tokenizer, "a `SubwordTokenizer`"
        )
    checks.require(
        checks.is_int(max_length, 2), "max_length", max_length, "an int >= 2 (a piece, an end id)"
    )
    by_tokens = tokens_per_batch is not None
    size_name, size = (
        ("tokens_per_batch", tokens_per_batch) if by_tokens else ("batch_size", batch_size)
    )
    checks.require(checks.is_int(size, 1), size_name, size, "a positive int")
    for flag, used in (
        ("tokens_per_batch", by_tokens),
        ("pad_to_bucket_boundary", pad_to_bucket_boundary),
    ):
        checks.require(bucketing or not used, "bucketing", bucketing, f"True with `{flag}`")
    # tf.data raised a TypeError on a float seed and read a buffer of 0 as the whole corpus.
    integer_tensor = hasattr(seed, "dtype") and tf.as_dtype(seed.dtype).is_integer
    checks.require(
        seed is None or checks.is_int(seed) or integer_tensor,
        "seed",
        seed,
        "an int, an integer scalar tensor or None",
    )
    buffer_size = shuffle_buffer_size
    checks.require(
        buffer_size is None or checks.is_int(buffer_size, 1),
        "shuffle_buffer_size",
        buffer_size,
        "a positive int, or None for the whole corpus",
    )
    if drop_remainder and not by_tokens and count < batch_size:
        raise ValueError(
            f"`drop_remainder=True` with {count} sentence pairs and batch_size={batch_size} "
            "would drop every pair. Pass a smaller `batch_size` or drop_remainder=False."
        )
    boundaries = (
        bucket_boundaries(max_length) if boundaries is None else [int(b) for b in boundaries]
    )
    increasing = boundaries and all(a < b for a, b in zip(boundaries, boundaries[1:]))
    above = f", ending above max_length={max_length}" if pad_to_bucket_boundary else ""
    checks.require(
        increasing and (not above or boundaries[-1] > max_length),
        "boundaries",
        boundaries,
        f"a non-empty, strictly increasing list{above}",
    )
    dataset = _tokenized_pairs(
        source_sentences,
        target_sentences,
        source_tokenizer,
        target_tokenizer,
        max_length,
        shuffle,
        seed,
        shuffle_buffer_size,
    )
    if not bucketing:
        dataset = dataset.padded_batch(
            batch_size, padding_values=PAD_ID, drop_remainder=drop_remainder
        )
    else:
        dataset = _bucket_by_length(
            dataset,
            boundaries,
            max_length,
            batch_size,
            tokens_per_batch,
            pad_to_bucket_boundary,
            drop_remainder,
        )
    options = tf.data.Options()
    options.deterministic = True
    return dataset.with_options(options).prefetch(tf.data.AUTOTUNE)


def _tokenized_pairs(
    source_sentences,
    target_sentences,
    source_tokenizer,
    target_tokenizer,
    max_length,
    shuffle,
    seed,
    shuffle_buffer_size,
):
    """The (shuffled) sentence pairs as unbatched `(inputs, targets)` rows of ids."""
    pairs = [
        tf.constant(list(sentences), tf.string)
        for sentences in (source_sentences, target_sentences)
    ]
    dataset = tf.data.Dataset.from_tensor_slices(tuple(pairs))
    if shuffle:
        buffer_size = shuffle_buffer_size or len(source_sentences)
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
    return dataset.unbatch().map(lambda inputs, targets: (inputs, targets))


def _bucket_by_length(
    dataset,
    boundaries,
    max_length,
    batch_size,
    tokens_per_batch,
    pad_to_bucket_boundary,
    drop_remainder,
):
    """Pads the pairs into batches of rows of similar length (longer of the two sides)."""
    if tokens_per_batch is not None:
        upper = [b - 1 for b in boundaries] + [max_length]
        batch_sizes = [max(1, int(tokens_per_batch) // max(u, 1)) for u in upper]
    else:
        batch_sizes = [int(batch_size)] * (len(boundaries) + 1)

    def element_length(inputs, targets):
        del targets
        return tf.maximum(
            tf.shape(inputs["encoder_tokens"])[0], tf.shape(inputs["decoder_tokens"])[0]
        )

    return dataset.bucket_by_sequence_length(
        element_length_func=element_length,
        bucket_boundaries=boundaries,
        bucket_batch_sizes=batch_sizes,
        padding_values=PAD_ID,
        pad_to_bucket_boundary=pad_to_bucket_boundary,
        drop_remainder=drop_remainder,
    )


def padding_fraction(dataset, max_batches=None):
    """Fraction of token positions that are padding in a translation dataset.

    Counts `encoder_tokens` and `decoder_tokens` positions together.

    Args:
        dataset: a dataset from `make_translation_dataset`.
        max_batches: optional int, only look at the first batches.

    Returns:
        Python float in [0, 1) (0.0 for an empty dataset).

    Raises:
        Nothing of its own: errors of iterating `dataset` propagate.
    """
    padded = 0
    total = 0
    for step, (inputs, _) in enumerate(dataset):
        if max_batches is not None and step >= max_batches:
            break
        for key in ("encoder_tokens", "decoder_tokens"):
            tokens = np.asarray(inputs[key])
            padded += int(np.sum(tokens == PAD_ID))
            total += tokens.size
    return padded / total if total else 0.0
