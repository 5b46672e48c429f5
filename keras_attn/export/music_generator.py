"""SavedModel export of a Music Transformer as an event sampler for TF Serving."""

import tensorflow as tf

from keras_attn.checks import is_int, require
from keras_attn.export.archive import versioned_export_path, write_archive, xla_function
from keras_attn.export.request_checks import (
    checked,
    primer_checks,
    row_seeds,
    sampling_checks,
    seed_check,
)
from keras_attn.generation import CachedDecoder, arguments, sample
from keras_attn.models.music_transformer import MUSIC_SUPPRESSED_TOKEN_IDS

# The pad and end ids of both music vocabularies (performance events, JSB Chorales).
from keras_attn.preprocessing.music import END_ID as _END_ID
from keras_attn.preprocessing.music import PAD_ID as _PAD_ID


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
):
    """Writes a SavedModel that continues event sequences by sampling.

    The whole sampling loop runs inside the graph: the primer is prefilled
    through the model's caches in one pass, then one cached step runs per
    new event (`keras_attn.generation.sample` over a `CachedDecoder`), for
    the whole batch. The graph loads and runs in a process that imports only
    `tensorflow`, with the TF2 loader (`tf.saved_model.load`) and with the
    session-based loader TF Serving uses (`saved_model_cli run`,
    `tf.compat.v1.saved_model.load`). It is written with
    `keras.export.ExportArchive` (the model tracked, the loop added as an
    endpoint), which keeps the model's variables visible to the session
    loader.

    Signature `serving_default` (also under the name `generate`), traced
    once for every batch size and primer length:

    * inputs
        - `primer`: int32 (B, T), event ids, right-padded with 0. Each row
          holds at least one event: the start token (id 1) to generate from
          nothing, or the start token followed by the events of a primer.
          1 <= T <= `max_primer_length`.
        - `num_steps`: int32 scalar, events to generate after each row's
          primer; 0 <= num_steps and T + num_steps <= `max_length`.
        - `temperature`: float32 scalar > 0 (1 = the model's distribution).
        - `top_k`: int32 scalar; keep the k most likely events at each step
          (0 = no top-k filter).
        - `top_p`: float32 scalar in (0, 1]; nucleus sampling (1 = off).
        - `seed`: int32, a scalar (one seed for the batch: the engine's
          noise is a pure function of seed, position, row and event id) or
          of shape (B,), one seed per row: row b's events then depend only
          on its primer, its seed and the scalars, not on its place in the
          batch nor on the other rows (what TF Serving's server-side
          batching, which stacks requests along axis 0, needs). The same
          seed and inputs give the same events.
    * output `events`: int32 (B, T + num_steps). Row b is its primer (its
      l_b non-zero events), then the sampled events, then 0-padding. A row
      gets `num_steps` new events, fewer if the model samples the end
      token (which is kept; padding follows); rows with a shorter primer end
      with more padding. The suppressed ids (padding and start) are never
      sampled, so every output is a valid `primer` for the next request.

    The loop runs at most until every row has its `num_steps` events: a
    short request does not pay for `max_length` steps (the prefill runs
    over the fixed primer width `max_primer_length`). Bad requests (an empty
    primer or an empty row, a primer wider than `max_primer_length`, ids
    outside the vocabulary, padding inside a row, `num_steps` negative or
    past `max_length`, a temperature that is not a finite number > 0, a
    negative `top_k`, a `top_p` outside (0, 1], a `seed` neither a scalar
    nor one per row) fail with an
    `InvalidArgumentError` whose message says what was received and what
    is expected (`keras_attn.export.request_checks`, run before the loop);
    the server keeps running.

    Args:
        model: the Music Transformer (`keras_attn.models.music_transformer`)
            or any functional keras_attn language model with one int token
            input (B, T) and logits (B, T, V) that `CachedDecoder` adapts.
        export_dir: base folder; the SavedModel goes to
            `export_dir/<version>/`.
        version: positive int, the version folder TF Serving reads.
        max_length: the longest `events` row (primer + generated), a static
            int: the size of the caches in the graph. Relative attention
            samples well at twice the training length.
        max_primer_length: the widest `primer` accepted, 1 <= . <
            `max_length`; default `max_length // 2`.
        end_token_id: the event id that ends a piece (2 in both of the
            library's music vocabularies); a row stops after sampling it.
        overwrite: replace an existing version folder, atomically (see
            `keras_attn.export.write_archive`).
        suppressed_token_ids: event ids never sampled; padding (0) is
            always added to them. Default: the Music Transformer's
            `MUSIC_SUPPRESSED_TOKEN_IDS` (padding, start).
        jit_compile: XLA-compile the sampling loop (prefill and steps;
            the checks of `primer` and `num_steps` run before it, outside
            XLA). On CPU, the default export of the JSB example's size ran
            11.5x slower than the same loop under XLA in Python
            (benchmarks/served_generation_benchmark.py). The default graph runs on any
            server; XLA inside runs in TF Serving's GPU builds, and on CPU
            only with `--xla_cpu_compilation_enabled=true` (experimental;
            the request fails otherwise).

    Returns:
        The path of the written version folder (str).

    Raises:
        ValueError: for a model `CachedDecoder` cannot adapt, a bad
            `version`, `max_length` (2 .. 2**31 - 1), `max_primer_length`,
            `end_token_id` or `suppressed_token_ids`, or an existing version
            folder without `overwrite`.

    Example:
    >>> import tempfile
    >>> import tensorflow as tf
    >>> from keras_attn.export import export_music_generator
    >>> from keras_attn.models import music_transformer
    >>> model = music_transformer(391, num_layers=1, hidden_dim=32, num_heads=2,
    ...                           intermediate_dim=64, max_relative_position=32)
    >>> folder = tempfile.TemporaryDirectory()
    >>> export_dir = folder.name
    >>> path = export_music_generator(model, export_dir, max_length=64)
    >>> generator = tf.saved_model.load(path).signatures["serving_default"]
    >>> events = generator(primer=tf.constant([[1]]), num_steps=tf.constant(16),
    ...                    temperature=tf.constant(1.0), top_k=tf.constant(0),
    ...                    top_p=tf.constant(1.0), seed=tf.constant(7))["events"]
    >>> tuple(events.shape)
    (1, 17)
    >>> folder.cleanup()

    Reference:
        Huang et al. 2018, "Music Transformer: Generating Music with
        Long-Term Structure", section 5 (sampling performances from nothing
        and continuing primers, with relative attention's cache).
    """
    generate = _generation_function(
        model, max_length, max_primer_length, end_token_id, suppressed_token_ids, jit_compile
    )
    path = versioned_export_path(export_dir, version, overwrite)
    signature = [
        tf.TensorSpec((None, None), tf.int32, name="primer"),
        tf.TensorSpec((), tf.int32, name="num_steps"),
        tf.TensorSpec((), tf.float32, name="temperature"),
        tf.TensorSpec((), tf.int32, name="top_k"),
        tf.TensorSpec((), tf.float32, name="top_p"),
        tf.TensorSpec(None, tf.int32, name="seed"),  # () or (B,)
    ]
    # autograph=False as ExportArchive does: the loop is `ops.while_loop`.
    serve = tf.function(generate, input_signature=signature, autograph=False)
    return write_archive(
        path, [model], {"serving_default": serve, "generate": serve}, overwrite=overwrite
    )


def _generation_function(
    model,
    max_length,
    max_primer_length,
    end_token_id,
    suppressed_token_ids=MUSIC_SUPPRESSED_TOKEN_IDS,
    jit_compile=False,
):
    """The Python function behind the signature (trace it with tf.function):
    the export arguments are checked here, the request in `generate`."""
    decoder = CachedDecoder(model)  # validates the model
    vocabulary_size = decoder.vocabulary_size
    require(
        is_int(max_length, 2, 2**31 - 1),
        "max_length",
        max_length,
        "an int from 2 to 2147483647 (int32 positions)",
    )
    max_primer_length = max_length // 2 if max_primer_length is None else max_primer_length
    require(
        is_int(max_primer_length, 1, max_length - 1),
        "max_primer_length",
        max_primer_length,
        f"an int from 1 to {max_length - 1} (below `max_length`, leaving room for new events)",
    )
    require(
        is_int(end_token_id, 1, vocabulary_size - 1),
        "end_token_id",
        end_token_id,
        f"an int from 1 to {vocabulary_size - 1} (an event of the vocabulary)",
    )
    # Padding inside a row would break the output's layout: always suppressed.
    suppressed = arguments.check_suppressed_token_ids(
        tuple(suppressed_token_ids or ()) + (_PAD_ID,), end_token_id, vocabulary_size
    )

    def generate(primer, num_steps, temperature, top_k, top_p, seed):
        conditions = primer_checks(
            primer, num_steps, vocabulary_size, max_length, max_primer_length
        ) + sampling_checks(temperature, top_k, top_p)
        conditions.append(seed_check(seed, tf.shape(primer)[0]))
        *request, seed = checked((primer, num_steps, temperature, top_k, top_p, seed), conditions)
        return decode(*request, row_seeds(seed))

    def decode_loop(primer, num_steps, temperature, top_k, top_p, seed):
        width = tf.shape(primer)[1]
        lengths = tf.reduce_sum(tf.cast(tf.not_equal(primer, _PAD_ID), tf.int32), axis=1)
        # One static primer width, so the graph serves every primer length.
        padded = tf.pad(primer, [[0, 0], [0, max_primer_length - width]])
        padded = tf.ensure_shape(padded, (None, max_primer_length))
        limits = lengths + num_steps
        stepper = _StepLimitedDecoder(decoder, limits, end_token_id)
        events = sample(
            stepper,
            padded,
            max_length,
            seed=seed,
            temperature=temperature,
            top_k=top_k,
            top_p=top_p,
            end_token_id=end_token_id,
            pad_token_id=_PAD_ID,
            prompt_lengths=lengths,
            suppressed_token_ids=suppressed,
        )
        events = events[:, : width + num_steps]
        # The end token forced at each row's limit only stops the loop.
        positions = tf.range(tf.shape(events)[1])[None, :]
        events = tf.where(positions < limits[:, None], events, _PAD_ID)
        return {"events": tf.cast(events, tf.int32)}

    decode = xla_function(decode_loop, jit_compile)
    return generate


class _StepLimitedDecoder:
    """A `CachedDecoder` whose logits stop each row at its limit.

    The generation engine's decoder protocol: `initial_state`,
    `repeat_state` and `reorder_state` are the wrapped `CachedDecoder`'s; on
    the way out, for every position at or past its row's limit (primer
    length + num_steps), the logits put all the mass on the end token, so
    each row ends there and the loop stops once every row has its events.
    (Filters — suppressed ids, top-k, top-p — are the engine's, after this.)
    """

    def __init__(self, decoder, limits, end_token_id):
        self.decoder = decoder
        self.limits = limits
        self.end_token_id = end_token_id

    def __getattr__(self, name):  # initial_state, repeat_state, reorder_state
        return getattr(self.__dict__["decoder"], name)

    def __call__(self, token_ids, cache_index, state, logits_index=None):
        logits, state = self.decoder(token_ids, cache_index, state, logits_index=logits_index)
        logits = tf.cast(logits, tf.float32)
        vocabulary_size = logits.shape[-1]
        # logits[:, t] predicts the event at position start + t + 1.
        if logits_index is not None:
            predicted = tf.reshape(tf.cast(logits_index, tf.int32) + 1, (1,))
        else:
            predicted = tf.cast(cache_index, tf.int32) + 1 + tf.range(tf.shape(logits)[1])
        stop = predicted[None, :] >= self.limits[:, None]
        end_only = tf.where(tf.range(vocabulary_size) == self.end_token_id, 0.0, float("-inf"))
        logits = tf.where(stop[:, :, None], end_only[None, None, :], logits)
        return logits, state
