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
    """Writes a translation model as a SavedModel for TF Serving.

    The graph holds the whole job: SentencePiece tokenization (tensorflow-text
    ops, the vocabulary embedded), the encoder run once, beam search with the
    decoder's caches (or greedy search with `num_beams=1`), and
    detokenization. Two signatures:

    - `serving_default`: `text` (B,) string -> `translation` (B,) string.
    - `translate_tokens`: `encoder_tokens` (B, S) int32 source ids (0 =
      padding, each row ending with the end id as `encode_source` makes
      them) -> `tokens` (B, max_length) int32 target ids (start id first,
      end id, then 0s). Padding and the start id are never generated.

    A server built without tensorflow-text cannot load a graph that holds
    any TF Text op, whichever signature is called; for such servers export
    with `include_text_signature=False`: the SavedModel then has only the
    token signature, as `serving_default`, and no TF Text op at all (the
    client tokenizes).

    Input handling, documented for clients: sources longer than
    `max_length - 1` pieces are truncated (the first pieces are kept; the
    end id is always appended); an empty or whitespace-only string
    translates to the empty string; bytes that are not valid UTF-8 are read
    with U+FFFD replacement characters (no error). Translations are at most
    `max_length - 2` pieces long. Requests the model cannot answer fail with
    an InvalidArgumentError holding the library's message: an empty batch
    (`text` or `encoder_tokens` of no rows), token ids outside the
    vocabulary or a source longer than a learned position table (of the
    model's `encoder_embedding` layer, when it has one), a tensor of
    another rank than the signature's ("Shape of tensor text [1,1] is not
    compatible with expected shape [?]"). These checks run before the
    decoding loop, so an XLA-compiled export (which drops assertions inside
    its program) makes them too.

    By default the decoding loop is a plain graph, which any server runs;
    `jit_compile=True` XLA-compiles the search (the encoder run and the
    whole beam or greedy loop; tokenization stays outside XLA): on CPU, the
    default export of the demo's size ran 2.2-2.4x slower than the same
    search under XLA in Python (benchmarks/served_generation_benchmark.py).
    TF Serving runs it in its GPU builds, and on CPU only with
    `--xla_cpu_compilation_enabled=true` (experimental; the request fails
    otherwise).

    Args:
        model: a `keras_attn.models.translation_transformer` model (inputs
            `encoder_tokens`, `decoder_tokens`; logits out).
        tokenizer: the target `SubwordTokenizer` (also the source one unless
            `source_tokenizer` is given).
        export_dir: base folder; the SavedModel goes to
            `export_dir/<version>/`.
        version: positive int (TF Serving serves the highest).
        max_length: static length of sources and of generated sequences.
        num_beams: beam size, fixed at export (1 = greedy).
        length_penalty_alpha: alpha of the GNMT length penalty
            (`keras_attn.generation.length_penalty`; 0.6 in Vaswani et al. 2017).
        source_tokenizer: optional separate source `SubwordTokenizer`.
        include_text_signature: False writes the token-id model only (no
            TF Text op in the graph).
        overwrite: replace an existing version folder, atomically (see
            `keras_attn.export.write_archive`).
        jit_compile: XLA-compile the search (see above).

    Returns:
        The path of the version folder.

    Raises:
        ValueError: for a bad `version`, an existing folder without
            `overwrite`, a `max_length` that is not an int in 3 .. 2**31 - 1,
            a `num_beams` / `length_penalty_alpha` that `beam_search`
            refuses (not a positive int; a negative alpha), a tokenizer
            that is not a `SubwordTokenizer`, or a model `CachedDecoder`
            cannot adapt.

    Example:
    >>> # A real export, even of a one-layer model, traces two decoding loops
    >>> # (about 4 s): shown here as a comment, with the refusal of a version
    >>> # that exists. `translation_function` shows the decoding it serves.
    >>> import os
    >>> import tempfile
    >>> from keras_attn.export import export_translator
    >>> from keras_attn.models import translation_transformer
    >>> from keras_attn.preprocessing.subword_tokenizer import SubwordTokenizer
    >>> tokenizer = SubwordTokenizer.train(["Ein Hund rennt.", "A dog runs."] * 50,
    ...                                    vocabulary_size=300)
    >>> # export_translator(model, tokenizer, "models/translator", version=1)
    >>> # writes models/translator/1/ with `serving_default` (text in,
    >>> # translation out) and `translate_tokens` ((B, S) ids in, (B, L) out).
    >>> model = translation_transformer(tokenizer.vocabulary_size, num_layers=1,
    ...                                 hidden_dim=8, num_heads=2, intermediate_dim=8)
    >>> folder = tempfile.TemporaryDirectory()
    >>> os.mkdir(os.path.join(folder.name, "1"))  # version 1 exists already
    >>> export_translator(model, tokenizer, folder.name, version=1)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
        ...
    ValueError: ...1 already exists. Pass a new `version` ... or `overwrite=True`.
    >>> folder.cleanup()

    Reference:
        Vaswani et al. 2017 (beam 4, alpha 0.6); TF Serving's versioned
        model layout.
    """
    from keras_attn.preprocessing.text import encode_source

    require(
        is_int(max_length, 3, 2**31 - 1),
        "max_length",
        max_length,
        "an int from 3 to "
        "2147483647 (start, one token and end; the static length of sources and translations)",
    )
    arguments.check_beam_arguments(num_beams, length_penalty_alpha)  # not first while tracing
    source_tokenizer = source_tokenizer or tokenizer
    for name, value in (("tokenizer", tokenizer), ("source_tokenizer", source_tokenizer)):
        require(
            all(hasattr(value, a) for a in ("tokenize", "detokenize", "pad_id")),
            name,
            value,
            "the `SubwordTokenizer` the model was trained with (keras_attn.preprocessing)",
        )
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
            what = "source tokens of the vocabulary"
            conditions.append(id_range_check("encoder_tokens", tokens, vocabulary_size, what))
        if max_positions is not None:
            conditions.append(
                (
                    tf.shape(tokens)[1] <= max_positions,
                    "`encoder_tokens` is longer "
                    "than the learned position table: truncate sources to "
                    f"{max_positions} tokens. Received length:",
                    tf.shape(tokens)[1],
                )
            )
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
    """The decoding behind both of `export_translator`'s signatures, for
    tracing with `tf.function` (also with `jit_compile=True`) or timing in
    Python exactly what the SavedModel serves.

    Args:
        model: a `translation_transformer` model (inputs `encoder_tokens`,
            `decoder_tokens`).
        tokenizer: the `SubwordTokenizer` whose `start_id`, `end_id` and
            `pad_id` the model was trained with (pad and start are never
            generated).
        max_length: target length L, the start token included.
        num_beams: 1 for greedy search, else beam search with this many
            beams (Wu et al. 2016 length penalty).
        length_penalty_alpha: the GNMT length penalty's alpha (beams only).

    Returns:
        A function (B, S) int32 source ids -> (B, L) int32 target ids.

    Raises:
        ValueError: at once if `CachedDecoder` cannot adapt `model`; when
            the returned function is called (or traced), for the arguments
            `greedy_search` / `beam_search` refuse (e.g. `num_beams` < 1 or
            a negative `length_penalty_alpha`), as for `export_translator`.

    Example:
    >>> from keras_attn.export.translator import translation_function
    >>> from keras_attn.models import translation_transformer
    >>> from keras_attn.preprocessing.subword_tokenizer import SubwordTokenizer
    >>> tokenizer = SubwordTokenizer.train(["Ein Hund rennt.", "A dog runs."] * 50,
    ...                                    vocabulary_size=300)
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
