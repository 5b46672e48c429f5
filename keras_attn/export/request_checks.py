"""The exporters' checks: their arguments at export, and a served request in
the graph.

A served request is the one untrusted value of an export: it is checked
once, in the signature, before the decoding loop (an XLA-compiled loop has
no assertions, and the layers inside trust their inputs). A failed check is
an `InvalidArgumentError` naming what was received and what is expected;
the server keeps running. (No quote marks in the messages: TensorFlow
escapes them in an assertion's text.)
"""

import numbers

import tensorflow as tf


def check_number(name, value, low, high, meaning, kind=numbers.Integral):
    """Refuses at export an argument that is not a Python int (or `kind`)
    from `low` to `high`."""
    if isinstance(value, bool) or not isinstance(value, kind) or not low <= value <= high:
        what = "an int" if kind is numbers.Integral else "a number"
        raise ValueError(
            f"`{name}` must be {what} from {low} to {high} ({meaning}). Received: {name}={value!r}."
        )


def checked(values, conditions):
    """`values` (a tensor or a structure of them), once every `(condition,
    message pieces)` holds when the graph runs. The checks run in order: the
    first that fails is reported, before any later use of the values."""
    dependencies = []
    for condition, message in conditions:
        with tf.control_dependencies(dependencies):
            dependencies = [tf.debugging.Assert(condition, message, summarize=16)]
    with tf.control_dependencies(dependencies):
        return tf.nest.map_structure(tf.identity, values)


def batch_check(name, value):
    """At least one row: there is nothing to generate for an empty batch."""
    return tf.shape(value)[0] > 0, [
        f"`{name}` must hold at least one row (batch size >= 1): there is nothing to "
        "generate for an empty batch. Received shape:", tf.shape(value)]


def id_range_check(name, ids, vocabulary_size, what):
    """Ids in [0, vocabulary_size) (an empty tensor passes: min > max)."""
    lowest, highest = tf.reduce_min(ids), tf.reduce_max(ids)
    return (lowest >= 0) & (highest < vocabulary_size), [
        f"`{name}` ids must be {what}, in [0, {vocabulary_size}). Received ids from",
        lowest, "to", highest]


def sampling_checks(temperature, top_k, top_p):
    """The sampling controls of a request, as `keras_attn.generation.sample`
    takes them (the tensor forms: top_k 0 and top_p 1 switch a filter off)."""
    return [
        ((temperature > 0.0) & (temperature < float("inf")), [  # NaN fails both
            "`temperature` must be a finite number > 0 (1 = sample the predicted "
            "distribution as is, < 1 sharpens it, > 1 flattens it). Received:", temperature]),
        (top_k >= 0, [
            "`top_k` must be >= 0 (the k most likely tokens kept; 0 = no top-k filter). "
            "Received:", top_k]),
        ((top_p > 0.0) & (top_p <= 1.0), [
            "`top_p` must be in (0, 1] (the nucleus mass kept; 1 = no nucleus filter). "
            "Received:", top_p]),
    ]


def primer_checks(primer, num_steps, vocabulary_size, max_length, max_primer_length):
    """A music primer (B, T), right-padded with 0, and its `num_steps`."""
    width = tf.shape(primer)[1]
    real = tf.cast(tf.not_equal(primer, 0), tf.int32)
    lengths = tf.reduce_sum(real, axis=1)
    return [
        ((tf.shape(primer)[0] > 0) & (tf.reduce_min(lengths) > 0), [
            "`primer` must hold at least one row, each of at least one event (e.g. the "
            "start token 1). Received events per row:", lengths]),
        (width <= max_primer_length, [
            f"`primer` is too wide: at most {max_primer_length} events (the exported "
            "max_primer_length; export again with a larger one, or send fewer events). "
            "Received width:", width]),
        id_range_check("primer", primer, vocabulary_size, "events of the vocabulary"),
        (tf.reduce_all(real[:, :-1] >= real[:, 1:]), [
            "`primer` rows must be right-padded: events first, then 0s, no 0 between "
            "events. Received events per row:", lengths]),
        # Not width + num_steps <= max_length: a huge num_steps would wrap
        # the int32 sum around and pass.
        ((num_steps >= 0) & (num_steps <= max_length - width), [
            f"`num_steps` must be >= 0 and <= {max_length} - the primer width (the "
            "exported max_length holds primer and new events). Received num_steps and "
            "width:", num_steps, width]),
    ]
