"""SavedModel export of a translation Transformer: string in, string out."""

import tensorflow as tf

from keras_attn.checks import is_int, require
from keras_attn.export.archive import versioned_export_path, write_archive, xla_function
from keras_attn.export.request_checks import batch_check, checked, id_range_check
from keras_attn.generation import arguments


def export_translator(
    model,
    tokenizer,
    export_dir,
    version=1,
    max_length=64,
    num_beams=4,
    length_penalty_alpha=0.6,
    source_tokenizer=None,
    include_text_signature=True,
    overwrite=False,
    jit_compile=False,
):
    """Writes a translation model as a SavedModel for TF Serving: string in, string out.

    The graph holds tokenization (tensorflow-text ops), the encoder, beam (or greedy) search
    with the decoder's caches and detokenization. Signatures (see docs/guides/serving.md):

    - `serving_default`: `text` (B,) string -> `translation` (B,) string.
    - `translate_tokens`: `encoder_tokens` (B, S) int32 ids as `encode_source` makes them ->
      `tokens` (B, max_length) int32 (start id, pieces, end id, then 0s).

    With `include_text_signature=False` only the token signature is written, as
    `serving_default`, and the graph has no TF Text op. A bad request (an empty batch, ids
    outside the vocabulary, a source longer than a learned position table) fails with an
    `InvalidArgumentError` naming what was received.

    Args:
        model: a `keras_attn.models.translation_transformer` model.
        tokenizer: the target `SubwordTokenizer` (also the source one by default).
        export_dir: base folder; the SavedModel goes to `export_dir/<version>/`.
        version: positive int (TF Serving serves the highest).
        max_length: static length of sources and translations, in [3, 2**31 - 1].
        num_beams: beam size, fixed at export (1 = greedy).
        length_penalty_alpha: alpha of the GNMT length penalty (0.6 in Vaswani et al. 2017).
        source_tokenizer: optional separate source `SubwordTokenizer`.
        include_text_signature: False writes the token signature only (no TF Text op).
        overwrite: replace an existing version folder, atomically.
        jit_compile: XLA-compile the search (TF Serving on CPU then needs
            `--xla_cpu_compilation_enabled=true`).

    Returns:
        The path of the version folder.

    Raises:
        ValueError: for a bad `version`, `max_length`, `num_beams`, `length_penalty_alpha` or
            tokenizer, a model `CachedDecoder` cannot adapt, or an existing folder without
            `overwrite`.

    Example:
    >>> import os
    >>> import tempfile
    >>> from keras_attn.export import export_translator
    >>> from keras_attn.models import translation_transformer
    >>> from keras_attn.preprocessing.subword_tokenizer import SubwordTokenizer
    >>> sentences = ["Ein Hund rennt.", "A dog runs."] * 50
    >>> tokenizer = SubwordTokenizer.train(sentences, vocabulary_size=300)
    >>> model = translation_transformer(tokenizer.vocabulary_size, num_layers=1,
    ...                                 hidden_dim=8, num_heads=2, intermediate_dim=8)
    >>> folder = tempfile.TemporaryDirectory()
    >>> os.mkdir(os.path.join(folder.name, "1"))  # version 1 exists already
    >>> export_translator(model, tokenizer, folder.name, version=1)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
        ...
    ValueError: ...1 already exists. Pass a new `version` or `overwrite=True`.
    >>> folder.cleanup()

    Reference:
        Vaswani et al. 2017, "Attention Is All You Need" (beam 4, alpha 0.6).
    """
    from keras_attn.preprocessing.text import encode_source

    require(is_int(max_length, 3, 2**31 - 1), "max_length", max_length, "an int in [3, 2**31)")
    arguments.check_beam_arguments(num_beams, length_penalty_alpha)  # not first while tracing
    source_tokenizer = source_tokenizer or tokenizer
    for name, value in (("tokenizer", tokenizer), ("source_tokenizer", source_tokenizer)):
        ok = all(hasattr(value, a) for a in ("tokenize", "detokenize", "pad_id"))
        require(ok, name, value, "the `SubwordTokenizer` the model was trained with")
    path = versioned_export_path(export_dir, version, overwrite)
    # One trace of the decoding loop serves both endpoints (the text endpoint's
    # (B, max_length) tokens fit the (B, S) signature).
    decoding_loop = xla_function(
        translation_function(model, tokenizer, max_length, num_beams, length_penalty_alpha),
        jit_compile,
        input_signature=[tf.TensorSpec((None, None), tf.int32, name="encoder_tokens")],
    )
    embedding = next((layer for layer in model.layers if layer.name == "encoder_embedding"), None)
    vocabulary_size = getattr(embedding, "vocabulary_size", getattr(embedding, "input_dim", None))
    max_positions = getattr(embedding, "max_positions", None)

    def generate(tokens):
        # The request is checked here, before the loop (XLA drops assertions;
        # the layers trust their inputs). A TF2 client calling a signature is
        # not stopped by its static shape: EnsureShape refuses another rank.
        tokens = tf.ensure_shape(tokens, (None, None))
        conditions = [batch_check("encoder_tokens", tokens)]
        if vocabulary_size is not None:
            conditions.append(id_range_check("encoder_tokens", tokens, vocabulary_size))
        if max_positions is not None:
            length = tf.shape(tokens)[1]
            message = f"`encoder_tokens` must hold at most {max_positions} tokens. Received:"
            conditions.append((length <= max_positions, message, length))
        return decoding_loop(checked(tokens, conditions))

    @tf.function(input_signature=[tf.TensorSpec((None,), tf.string, name="text")])
    def serve_text(text):
        text = tf.ensure_shape(text, (None,))
        text = checked(text, [batch_check("text", text)])
        tokens = encode_source(source_tokenizer, text, max_length)
        tokens = tokens.to_tensor(default_value=0, shape=[None, max_length])
        translation = tokenizer.detokenize(tf.cast(generate(tokens), tf.int32))
        empty = tf.equal(tf.strings.length(tf.strings.strip(text)), 0)
        return {"translation": tf.where(empty, tf.constant(""), translation)}

    @tf.function(input_signature=[tf.TensorSpec((None, None), tf.int32, name="encoder_tokens")])
    def serve_tokens(encoder_tokens):
        return {"tokens": tf.cast(generate(encoder_tokens), tf.int32)}

    if not include_text_signature:
        return write_archive(path, [model], {"serving_default": serve_tokens}, overwrite=overwrite)
    trackables = [model, tokenizer] + (
        [source_tokenizer] if source_tokenizer is not tokenizer else []
    )
    return write_archive(
        path,
        trackables,
        {"serving_default": serve_text, "translate_tokens": serve_tokens},
        overwrite=overwrite,
    )


def translation_function(model, tokenizer, max_length, num_beams=4, length_penalty_alpha=0.6):
    """The decoding both of `export_translator`'s signatures serve, to trace or time in Python.

    Args:
        model: a `translation_transformer` model.
        tokenizer: the `SubwordTokenizer` the model was trained with.
        max_length: target length L, the start token included.
        num_beams: 1 for greedy search, else the beam size.
        length_penalty_alpha: the GNMT length penalty's alpha (beams only).

    Returns:
        A function (B, S) int32 source ids -> (B, L) int32 target ids.

    Raises:
        ValueError: if `CachedDecoder` cannot adapt `model`; when called, for the arguments
            `greedy_search` / `beam_search` refuse.

    Example:
    >>> from keras_attn.export.translator import translation_function
    >>> from keras_attn.models import translation_transformer
    >>> from keras_attn.preprocessing.subword_tokenizer import SubwordTokenizer
    >>> sentences = ["Ein Hund rennt.", "A dog runs."] * 50
    >>> tokenizer = SubwordTokenizer.train(sentences, vocabulary_size=300)
    >>> model = translation_transformer(tokenizer.vocabulary_size, num_layers=1,
    ...                                 hidden_dim=8, num_heads=2, intermediate_dim=8)
    >>> generate = translation_function(model, tokenizer, max_length=6, num_beams=1)
    >>> source = tokenizer.tokenize(["Ein Hund rennt."], add_end=True).to_tensor()
    >>> tokens = generate(source)  # untrained: the ids after the start are arbitrary
    >>> tuple(tokens.shape), int(tokens[0, 0]) == tokenizer.start_id
    ((1, 6), True)
    >>> tokenizer.start_id in tokens[0, 1:].numpy().tolist()  # never generated
    False
    """
    from keras_attn.generation import CachedDecoder, beam_search, greedy_search

    decoder = CachedDecoder(model)
    # Padding and the start id are never generated (see translation_transformer).
    suppressed = (tokenizer.pad_id, tokenizer.start_id)

    def generate(encoder_tokens):
        start = tf.fill([tf.shape(encoder_tokens)[0], 1], tokenizer.start_id)
        inputs = {"encoder_tokens": encoder_tokens}
        if num_beams == 1:
            return greedy_search(
                decoder,
                start,
                max_length,
                end_token_id=tokenizer.end_id,
                inputs=inputs,
                suppressed_token_ids=suppressed,
            )
        return beam_search(
            decoder,
            start,
            max_length,
            num_beams=num_beams,
            length_penalty_alpha=length_penalty_alpha,
            end_token_id=tokenizer.end_id,
            inputs=inputs,
            suppressed_token_ids=suppressed,
        )

    return generate
