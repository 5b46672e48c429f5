"""SavedModel export of a translation Transformer: string in, string out."""

import tensorflow as tf

from keras_attn.checks import is_int, require
from keras_attn.export.archive import versioned_export_path, write_archive, xla_function
from keras_attn.export.request_checks import (
    SAMPLING_INPUTS,
    batch_check,
    checked,
    checked_request,
    id_range_check,
    stream_state_checks,
)
from keras_attn.export.streaming import (
    PackedState,
    TokenStream,
    greedy_or_sample_choice,
    sampling_controls,
)
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
    streaming=True,
):
    """Writes a translation model as a SavedModel for TF Serving: string in, string out.

    The graph holds tokenization (tensorflow-text ops), the encoder, beam (or greedy) search
    with the decoder's caches and detokenization. Signatures (see docs/guides/serving.md):

    - `serving_default`: `text` (B,) string -> `translation` (B,) string.
    - `translate_tokens`: `encoder_tokens` (B, S) int32 ids as `encode_source` makes them ->
      `tokens` (B, max_length) int32 (start id, pieces, end id, then 0s).
    - With `streaming`: `sample_tokens` (`encoder_tokens`, `temperature`, `top_k`, `top_p`,
      `seed` -> `tokens`: sampled; `top_k=1` is greedy search), and `prefill` and `step`,
      which give the same greedy or sampled tokens one position per call, the decoding state
      in tensors the client carries (docs/guides/serving.md, "Streaming translation").

    With `include_text_signature=False` the token signatures are written, `translate_tokens`
    as `serving_default`, `prefill` taking `encoder_tokens`, and the graph has no TF Text op. A bad request (an empty batch, ids
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
        streaming: also write `sample_tokens`, `prefill` and `step`.

    Returns:
        The path of the version folder.

    Raises:
        ValueError: for a bad `version`, `max_length`, `num_beams`, `length_penalty_alpha` or
            tokenizer, a model `CachedDecoder` cannot adapt (or, with `streaming`, whose state
            cannot stream), or an existing folder without `overwrite`.

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
        input_signature=[_SOURCE],
    )
    source_checks = _source_checks(model)

    def generate(tokens):
        # The request is checked here, before the loop (XLA drops assertions;
        # the layers trust their inputs).
        tokens, conditions = source_checks(tokens)
        return decoding_loop(checked(tokens, conditions))

    def encode(text):
        tokens = encode_source(source_tokenizer, text, max_length)
        return tokens.to_tensor(default_value=0, shape=[None, max_length])

    @tf.function(input_signature=[tf.TensorSpec((None,), tf.string, name="text")])
    def serve_text(text):
        text = tf.ensure_shape(text, (None,))
        text = checked(text, [batch_check("text", text)])
        translation = tokenizer.detokenize(tf.cast(generate(encode(text)), tf.int32))
        return {"translation": tf.where(_blank(text), tf.constant(""), translation)}

    @tf.function(input_signature=[_SOURCE])
    def serve_tokens(encoder_tokens):
        return {"tokens": tf.cast(generate(encoder_tokens), tf.int32)}

    if include_text_signature:
        endpoints = {"serving_default": serve_text, "translate_tokens": serve_tokens}
        # One object listed twice (a shared tokenizer) is saved once.
        trackables = [model, tokenizer, source_tokenizer]
    else:
        endpoints, trackables = {"serving_default": serve_tokens}, [model]
    if streaming:
        text_encoder = encode if include_text_signature else None
        settings = (model, tokenizer, max_length, source_checks, text_encoder)
        endpoints.update(_streaming_endpoints(*settings, jit_compile))
    return write_archive(path, trackables, endpoints, overwrite=overwrite)


_SOURCE = tf.TensorSpec((None, None), tf.int32, name="encoder_tokens")


def _blank(text):
    """(B,) bool: the empty or whitespace-only sentences (translated to "")."""
    return tf.equal(tf.strings.length(tf.strings.strip(text)), 0)


def _source_checks(model):
    """`checks(encoder_tokens) -> (encoder_tokens, conditions)`: the checks of a served source
    (`request_checks.checked`): a rank of 2 (a TF2 client calling a signature is not stopped by
    its static shape: EnsureShape refuses another rank), rows, ids in the vocabulary, a length
    that fits a learned position table."""
    embedding = next((layer for layer in model.layers if layer.name == "encoder_embedding"), None)
    vocabulary_size = getattr(embedding, "vocabulary_size", getattr(embedding, "input_dim", None))
    max_positions = getattr(embedding, "max_positions", None)

    def checks(tokens):
        tokens = tf.ensure_shape(tokens, (None, None))
        found = [batch_check("encoder_tokens", tokens)]
        if vocabulary_size is not None:
            found.append(id_range_check("encoder_tokens", tokens, vocabulary_size))
        if max_positions is not None:
            length = tf.shape(tokens)[1]
            message = f"`encoder_tokens` must hold at most {max_positions} tokens. Received:"
            found.append((length <= max_positions, message, length))
        return tokens, found

    return checks


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
        options = dict(
            end_token_id=tokenizer.end_id, inputs=inputs, suppressed_token_ids=suppressed
        )
        if num_beams == 1:
            return greedy_search(decoder, start, max_length, **options)
        return beam_search(decoder, start, max_length, num_beams, length_penalty_alpha, **options)

    return generate


def _streaming_endpoints(model, tokenizer, max_length, source_checks, encode, jit_compile):
    """`sample_tokens`, `prefill` and `step`: greedy (`top_k=1`) or sampled decoding as one
    loop and as a loop a client drives (docs/guides/serving.md, "Streaming translation").

    The state a step needs: the target tokens so far, the self-attention caches (`cache`, one
    position per token fed), the encoder's memory (`memory`: each layer's cross-attention keys
    and values and the source mask, computed once by `prefill`; cheaper per step than the
    encoder's output, whose keys and values every step would project again), the finished
    flags; the sampling noise is a function of the seed and the position.

    Args:
        model, tokenizer, max_length: as `export_translator`'s.
        source_checks: `_source_checks(model)`.
        encode: `text (B,) -> encoder_tokens (B, max_length)`: `prefill` takes text and both
            signatures return the `translation` so far; None: `prefill` takes `encoder_tokens`.
        jit_compile: XLA-compile the decoding (the checks and text stay outside).

    Returns:
        `{name: tf.function}`.

    Raises:
        ValueError: if the model's state cannot be carried as position-major tensors.
    """
    from keras_attn.generation import CachedDecoder, decoding

    decoder = CachedDecoder(model)
    size, end_id, pad_id = decoder.vocabulary_size, tokenizer.end_id, tokenizer.pad_id
    packed = PackedState(
        decoder, max_length, lambda n: {"encoder_tokens": tf.ones((1, n), tf.int32)}
    )
    suppressed = arguments.check_suppressed_token_ids((pad_id, tokenizer.start_id), end_id, size)
    stream = TokenStream(decoder, packed, suppressed, end_id, pad_id, greedy_or_sample_choice)

    def start(rows):
        """The decoder's prompt, the start id of each row, and its length."""
        return tf.fill([rows, 1], tokenizer.start_id), tf.ones([rows], tf.int32)

    def sample_core(encoder_tokens, *controls):
        controls = sampling_controls(*controls, max_length)

        def choose(logits, position):
            return greedy_or_sample_choice(logits, position, *controls)

        prompt, _ = start(tf.shape(encoder_tokens)[0])
        inputs = {"encoder_tokens": encoder_tokens}
        return decoding.token_loop(
            choose, decoder, prompt, max_length, end_id, pad_id, None, inputs, suppressed
        )

    def prefill_core(encoder_tokens, *controls):
        prompt, lengths = start(tf.shape(encoder_tokens)[0])
        controls = sampling_controls(*controls, max_length)
        return stream.prefill(prompt, lengths, controls, {"encoder_tokens": encoder_tokens})

    def step_core(token, position, cache, memory, finished, *controls):
        prompt, lengths = start(tf.shape(token)[0])
        controls = sampling_controls(*controls, max_length)
        return stream.step(prompt, lengths, controls, token, position, cache, finished, memory)

    sample_loop, prefill_loop, step_loop = (
        xla_function(core, jit_compile) for core in (sample_core, prefill_core, step_core)
    )

    def outputs(tokens, position, cache, finished, **more):
        """The outputs of `prefill` and `step`: the cache cut to the positions fed."""
        done = tf.reduce_all(finished) | (position + 1 >= max_length)
        if encode is not None:
            more["translation"] = tokenizer.detokenize(tokens)
        state = {"tokens": tokens, "cache": cache[:, :position], "finished": finished}
        return dict(state, position=position, done=done, **more)

    def checked_source(tokens, controls):
        tokens, conditions = source_checks(tokens)
        return checked_request(tokens, tf.shape(tokens)[0], controls, conditions)

    def sample_tokens(encoder_tokens, *controls):
        tokens, controls = checked_source(encoder_tokens, controls)
        return {"tokens": sample_loop(tokens, *controls)}

    def prefill_tokens(encoder_tokens, *controls):
        return first_token(*checked_source(encoder_tokens, controls))

    def prefill_text(text, *controls):
        text = tf.ensure_shape(text, (None,))
        conditions = [batch_check("text", text)]
        text, controls = checked_request(text, tf.shape(text)[0], controls, conditions)
        # An empty sentence translates to "" (as `serving_default`): its row ends at once.
        return first_token(encode(text), controls, blank=_blank(text))

    def first_token(encoder_tokens, controls, blank=None):
        token, position, cache, memory, finished = prefill_loop(encoder_tokens, *controls)
        tokens = tf.concat([start(tf.shape(token)[0])[0], token[:, None]], axis=1)
        if blank is not None:
            tokens = tf.where(blank[:, None], [[tokenizer.start_id, pad_id]], tokens)
            finished = finished | blank
        return outputs(tokens, position, cache, finished, memory=memory)

    def step(temperature, top_k, top_p, seed, tokens, cache, memory, finished):
        cache = tf.ensure_shape(cache, (None, None, packed.width))
        memory = tf.ensure_shape(memory, (None, None, packed.memory_width))
        state = {"tokens": tokens, "cache": cache, "memory": memory, "finished": finished}
        position, sources = tf.shape(cache)[1], tf.shape(memory)[1]
        width = tf.shape(tokens)[1]
        conditions = stream_state_checks(state, position, max_length) + [
            (width == position + 1, "`tokens` must hold the cache positions + 1. Received:", width),
            id_range_check("tokens", tokens, size),
            (sources > 0, "`memory` must hold at least one source position. Received:", sources),
        ]
        controls = (temperature, top_k, top_p, seed)
        state, controls = checked_request(state, tf.shape(tokens)[0], controls, conditions)
        full = packed.padded(state["cache"])
        token, cache, finished = step_loop(
            state["tokens"][:, -1], position, full, state["memory"], state["finished"], *controls
        )
        tokens = tf.concat([state["tokens"], token[:, None]], axis=1)
        return outputs(tokens, position + 1, cache, finished)

    text = tf.TensorSpec((None,), tf.string, name="text")
    prefill = (prefill_tokens, _SOURCE) if encode is None else (prefill_text, text)
    state = [
        tf.TensorSpec((None, None), tf.int32, name="tokens"),
        tf.TensorSpec((None, None, packed.width), tf.float32, name="cache"),
        tf.TensorSpec((None, None, packed.memory_width), tf.float32, name="memory"),
        tf.TensorSpec((None,), tf.bool, name="finished"),
    ]
    signatures = {
        "sample_tokens": (sample_tokens, [_SOURCE] + SAMPLING_INPUTS),
        "prefill": (prefill[0], [prefill[1]] + SAMPLING_INPUTS),
        "step": (step, SAMPLING_INPUTS + state),
    }
    return {
        name: tf.function(function, input_signature=specs, autograph=False)
        for name, (function, specs) in signatures.items()
    }
