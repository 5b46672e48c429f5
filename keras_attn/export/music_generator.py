"""SavedModel export of a Music Transformer as an event sampler for TF Serving."""

import tensorflow as tf

from keras_attn.checks import is_int, require
from keras_attn.export.archive import versioned_export_path, write_archive, xla_function
from keras_attn.export.request_checks import (
    SAMPLING_INPUTS,
    checked_request,
    id_range_check,
    primer_checks,
    stream_state_checks,
)
from keras_attn.export.streaming import (
    PackedState,
    TokenStream,
    sample_choice,
    sampling_controls,
)
from keras_attn.generation import CachedDecoder, arguments, decoding
from keras_attn.models.music_transformer import MUSIC_SUPPRESSED_TOKEN_IDS

# The pad and end ids of both music vocabularies (performance events, JSB Chorales).
from keras_attn.preprocessing.music import END_ID as _END_ID
from keras_attn.preprocessing.music import PAD_ID as _PAD_ID

# The sampling settings the music example recommends for its models, by task: what a request's
# `temperature`, `top_k` (0 = off) and `top_p` (1 = off) should be. Chosen on one half of the
# held-out pieces, reported on the other (examples/music/README.md, "Do the samples sound like
# the training music?"). JSB Chorales: samples longer than the training length L drift into
# held chords, so a long piece is made L events at a time, each request primed with the last
# L/2 events of the one before (what examples/music/generate.py's --context does).
RECOMMENDED_SAMPLING = {
    "jsb": {"temperature": 1.0, "top_k": 5, "top_p": 1.0},
    "performance": {"temperature": 0.9, "top_k": 40, "top_p": 1.0},
}


def export_music_generator(
    model,
    export_dir,
    version=1,
    max_length=2048,
    max_primer_length=None,
    end_token_id=_END_ID,
    overwrite=False,
    suppressed_token_ids=MUSIC_SUPPRESSED_TOKEN_IDS,
    jit_compile=False,
    streaming=True,
):
    """Writes a SavedModel that continues event sequences by sampling, the loop in the graph.

    Signature `serving_default` (also `generate`); see docs/guides/serving.md for the details:

    * `primer`: int32 (B, T) event ids, right-padded with 0, each row starting with the start
      token 1; 1 <= T <= `max_primer_length`.
    * `num_steps`: int32 scalar, events to add to each row; T + num_steps <= `max_length`.
    * `temperature`: float32 scalar > 0; `top_k`: int32 scalar (0 = off); `top_p`: float32
      scalar in (0, 1] (1 = off). A signature has no optional inputs: the defaults to send are
      `RECOMMENDED_SAMPLING[task]` (JSB Chorales: temperature 1.0, top-k 5, at most the
      training length per request; performances: temperature 0.9, top-k 40), the settings the
      music example chose on held-out pieces.
    * `seed`: int32 scalar (one for the batch) or (B,) (one per row: a row then gets what it
      gets alone).
    * output `events`: int32 (B, T + num_steps): each primer, its new events (ending early at
      the end token), then 0-padding.

    Signatures `prefill` and `step` (with `streaming`) sample the same events one position per
    call, the state in tensors a client carries (examples/serving/README.md, "Streaming").

    A bad request fails with an `InvalidArgumentError` naming what was received.

    Args:
        model: a `music_transformer` or any language model `CachedDecoder` adapts.
        export_dir: base folder; the SavedModel goes to `export_dir/<version>/`.
        version: positive int, the version folder TF Serving reads.
        max_length: the longest `events` row, in [2, 2**31 - 1]: the size of the caches.
        max_primer_length: the widest `primer`, in [1, max_length); default `max_length // 2`.
        end_token_id: the event id that ends a piece (2 in the library's music vocabularies).
        overwrite: replace an existing version folder, atomically.
        suppressed_token_ids: event ids never sampled; padding (0) is always added.
        jit_compile: XLA-compile the sampling loop (TF Serving on CPU then needs
            `--xla_cpu_compilation_enabled=true`).
        streaming: also write the `prefill` and `step` signatures.

    Returns:
        The path of the written version folder (str).

    Raises:
        ValueError: for a model `CachedDecoder` cannot adapt, a bad `version`, `max_length`,
            `max_primer_length`, `end_token_id` or `suppressed_token_ids`, a model whose state
            cannot stream (with `streaming`), or an existing version folder without `overwrite`.

    Example:
    >>> import tempfile
    >>> import tensorflow as tf
    >>> from keras_attn.export import export_music_generator
    >>> from keras_attn.models import music_transformer
    >>> model = music_transformer(391, num_layers=1, hidden_dim=32, num_heads=2,
    ...                           intermediate_dim=64, max_relative_position=32)
    >>> folder = tempfile.TemporaryDirectory()
    >>> path = export_music_generator(model, folder.name, max_length=64)
    >>> generator = tf.saved_model.load(path).signatures["serving_default"]
    >>> events = generator(primer=tf.constant([[1]]), num_steps=tf.constant(16),
    ...                    temperature=tf.constant(1.0), top_k=tf.constant(0),
    ...                    top_p=tf.constant(1.0), seed=tf.constant(7))["events"]
    >>> tuple(events.shape)
    (1, 17)
    >>> folder.cleanup()

    Reference:
        Huang et al. 2018, "Music Transformer: Generating Music with Long-Term Structure".
    """
    settings = _settings(model, max_length, max_primer_length, end_token_id, suppressed_token_ids)
    # autograph=False as ExportArchive does: the loop is `ops.while_loop`.
    serve = tf.function(
        _whole_loop(*settings, jit_compile), input_signature=_REQUEST, autograph=False
    )
    endpoints = {"serving_default": serve, "generate": serve}
    if streaming:
        endpoints.update(_streaming_functions(*settings, jit_compile))
    path = versioned_export_path(export_dir, version, overwrite)
    return write_archive(path, [model], endpoints, overwrite=overwrite)


_REQUEST = [
    tf.TensorSpec((None, None), tf.int32, name="primer"),
    tf.TensorSpec((), tf.int32, name="num_steps"),
] + SAMPLING_INPUTS


def _settings(model, max_length, max_primer_length, end_token_id, suppressed_token_ids):
    """`(decoder, max_length, max_primer_length, end_token_id, suppressed ids)`, checked."""
    decoder = CachedDecoder(model)  # validates the model
    vocabulary_size = decoder.vocabulary_size
    require(is_int(max_length, 2, 2**31 - 1), "max_length", max_length, "an int in [2, 2**31)")
    max_primer_length = max_length // 2 if max_primer_length is None else max_primer_length
    ok = is_int(max_primer_length, 1, max_length - 1)
    require(ok, "max_primer_length", max_primer_length, f"an int in [1, max_length={max_length})")
    expected = f"an event id in [1, {vocabulary_size})"
    require(is_int(end_token_id, 1, vocabulary_size - 1), "end_token_id", end_token_id, expected)
    # Padding inside a row would break the output's layout: always suppressed.
    suppressed = arguments.check_suppressed_token_ids(
        tuple(suppressed_token_ids or ()) + (_PAD_ID,), end_token_id, vocabulary_size
    )
    return decoder, max_length, max_primer_length, end_token_id, suppressed


def _generation_function(model, max_length, max_primer_length, end_token_id):
    """The Python function behind the signature (the default suppressed ids, not compiled), to
    trace with `tf.function` (benchmarks/served_generation_benchmark.py)."""
    settings = _settings(
        model, max_length, max_primer_length, end_token_id, MUSIC_SUPPRESSED_TOKEN_IDS
    )
    return _whole_loop(*settings, jit_compile=False)


def _checked_request(primer, num_steps, controls, settings, state=(), state_checks=()):
    """`((primer, num_steps, state), controls)` once the checks hold (the primer's, then
    `state_checks`, then the controls'), the seed as `sample` takes it."""
    decoder, max_length, max_primer_length, _, _ = settings
    size = decoder.vocabulary_size
    conditions = primer_checks(primer, num_steps, size, max_length, max_primer_length)
    values = (primer, num_steps, state)
    return checked_request(values, tf.shape(primer)[0], controls, conditions + list(state_checks))


def _prompt(primer, num_steps, max_primer_length):
    """`(padded (B, max_primer_length), lengths (B,), limits (B,))`: one static primer width, so
    the graph serves every primer length; a row's events end at its limit."""
    lengths = tf.reduce_sum(tf.cast(tf.not_equal(primer, _PAD_ID), tf.int32), axis=1)
    padded = tf.pad(primer, [[0, 0], [0, max_primer_length - tf.shape(primer)[1]]])
    return tf.ensure_shape(padded, (None, max_primer_length)), lengths, lengths + num_steps


def _choice(logits, position, end_token_id, limits, *controls):
    """`sample_choice`, except `end_token_id` at and past each row's limit (primer length +
    num_steps), so the loop stops once every row has its events; (B,) int32."""
    chosen = tf.cast(sample_choice(logits, position, *controls), tf.int32)
    return tf.where(position >= limits, end_token_id, chosen)


def _whole_loop(decoder, max_length, max_primer_length, end_token_id, suppressed, jit_compile):
    """The `serving_default` function: the request checked, then the sampling loop."""
    settings = (decoder, max_length, max_primer_length, end_token_id, suppressed)

    def generate(primer, num_steps, *controls):
        (primer, num_steps, _), controls = _checked_request(primer, num_steps, controls, settings)
        return decode(primer, num_steps, *controls)

    def decode_loop(primer, num_steps, *controls):
        padded, lengths, limits = _prompt(primer, num_steps, max_primer_length)
        controls = sampling_controls(*controls, max_length)

        def choose(logits, position):
            return _choice(logits, position, end_token_id, limits, *controls)

        # start_search's others: prompt lengths, no other model inputs, the suppressed ids.
        events = decoding.token_loop(
            choose, decoder, padded, max_length, end_token_id, _PAD_ID, lengths, None, suppressed
        )
        # The end token forced at each row's limit only stops the loop.
        events = tf.where(tf.range(max_length) < limits[:, None], events, _PAD_ID)
        return {"events": events[:, : tf.shape(primer)[1] + num_steps]}

    decode = xla_function(decode_loop, jit_compile)
    return generate


def _streaming_functions(decoder, max_length, max_primer_length, end_token_id, suppressed, jit):
    """`{"prefill": ..., "step": ...}`: a client-driven loop (examples/serving/README.md)."""
    settings = (decoder, max_length, max_primer_length, end_token_id, suppressed)
    packed = PackedState(decoder, max_length)
    stream = TokenStream(decoder, packed, suppressed, end_token_id, _PAD_ID, _choice)

    def prefill_core(primer, num_steps, *controls):
        padded, lengths, limits = _prompt(primer, num_steps, max_primer_length)
        # `_choice`'s arguments after the logits and the position.
        choice_arguments = (end_token_id, limits, *sampling_controls(*controls, max_length))
        token, position, cache, _, finished = stream.prefill(padded, lengths, choice_arguments)
        return _stream_outputs(token, position, cache, finished, limits)

    def step_core(events, position, cache, finished, primer, num_steps, *controls):
        padded, lengths, limits = _prompt(primer, num_steps, max_primer_length)
        choice_arguments = (end_token_id, limits, *sampling_controls(*controls, max_length))
        token, cache, finished = stream.step(
            padded, lengths, choice_arguments, events[:, 0], position, cache, finished
        )
        return _stream_outputs(token, position + 1, cache, finished, limits)

    def prefill(primer, num_steps, *controls):
        (primer, num_steps, _), controls = _checked_request(primer, num_steps, controls, settings)
        return _trimmed(prefill_loop(primer, num_steps, *controls))

    def step(primer, num_steps, temperature, top_k, top_p, seed, events, cache, finished):
        position = tf.shape(cache)[1]
        controls = (temperature, top_k, top_p, seed)
        rows = {"events": events, "cache": cache, "finished": finished, "primer": primer}
        state_checks = stream_state_checks(rows, position, max_length)
        state_checks.append(id_range_check("events", events, decoder.vocabulary_size))
        request = _checked_request(
            primer, num_steps, controls, settings, (events, cache, finished), state_checks
        )
        (primer, num_steps, (events, cache, finished)), controls = request
        full = packed.padded(cache)
        return _trimmed(step_loop(events, position, full, finished, primer, num_steps, *controls))

    prefill_loop, step_loop = xla_function(prefill_core, jit), xla_function(step_core, jit)
    state = [
        tf.TensorSpec((None, 1), tf.int32, name="events"),
        tf.TensorSpec((None, None, packed.width), tf.float32, name="cache"),
        tf.TensorSpec((None,), tf.bool, name="finished"),
    ]
    return {
        "prefill": tf.function(prefill, input_signature=_REQUEST, autograph=False),
        "step": tf.function(step, input_signature=_REQUEST + state, autograph=False),
    }


def _stream_outputs(token, position, cache, finished, limits):
    """The outputs of `prefill` and `step`, the cache all `max_length` positions long."""
    events = tf.where(position < limits, token, _PAD_ID)[:, None]
    done = tf.reduce_all(finished | (position + 1 >= limits))
    return {
        "events": events,
        "position": position,
        "cache": cache,
        "finished": finished,
        "done": done,
    }


def _trimmed(outputs):
    """The outputs with the cache cut to the positions before `position` (what a step reads)."""
    return dict(outputs, cache=outputs["cache"][:, : outputs["position"]])
