"""The in-graph checks of a served request, the one untrusted value of an export.

They run once, in the signature, before the decoding loop (an XLA-compiled
loop has no assertions, and the layers inside trust their inputs). A failed
check is an `InvalidArgumentError` naming what was received and what is
expected; the server keeps running. (No quote marks in the messages:
TensorFlow escapes them in an assertion's text.)
"""

import tensorflow as tf


def checked(values, conditions):
    """`values` (a structure of tensors), once every `(condition, *message)`
    holds when the graph runs; checked in order, the first failure reported."""
    dependencies = []
    for condition, *message in conditions:
        with tf.control_dependencies(dependencies):
            dependencies = [tf.debugging.Assert(condition, message, summarize=16)]
    with tf.control_dependencies(dependencies):
        return tf.nest.map_structure(tf.identity, values)


def batch_check(name, value):
    """At least one row: there is nothing to generate for an empty batch."""
    shape = tf.shape(value)
    return shape[0] > 0, f"`{name}` must hold at least one row (batch >= 1). Received shape:", shape


def seed_check(seed, rows):
    """A served `seed`: a scalar (one seed for the batch) or (B,), one per row."""
    rank, size = tf.rank(seed), tf.size(seed)
    return (
        (rank == 0) | (rank == 1) & (size == rows),
        "`seed` must be a scalar (one seed for the "
        "batch) or of shape (batch,), one seed per row. Received shape, rows:",
        tf.shape(seed),
        rows,
    )


def row_seeds(seed):
    """A checked served `seed` as `sample`'s: (1, 1), one seed for the batch (a
    scalar), or (B, 1), one seed per row: row b then draws what it draws alone."""
    return tf.reshape(seed, [-1, 1])


def id_range_check(name, ids, vocabulary_size, what):
    """Ids in [0, vocabulary_size) (an empty tensor passes: min > max)."""
    low, high = tf.reduce_min(ids), tf.reduce_max(ids)
    expected = f"`{name}` ids must be {what}, in [0, {vocabulary_size}). Received ids from"
    return (low >= 0) & (high < vocabulary_size), expected, low, "to", high


def sampling_checks(temperature, top_k, top_p):
    """A request's sampling controls (top_k 0 and top_p 1 switch a filter off); NaN fails."""
    return [
        (
            (temperature > 0.0) & (temperature < float("inf")),
            "`temperature` must be a finite number > 0 (1 = as predicted). Received:",
            temperature,
        ),
        (top_k >= 0, "`top_k` must be >= 0 (0 = no top-k filter). Received:", top_k),
        (
            (top_p > 0.0) & (top_p <= 1.0),
            "`top_p` must be in (0, 1] (1 = no nucleus filter). Received:",
            top_p,
        ),
    ]


def primer_checks(primer, num_steps, vocabulary_size, max_length, max_primer_length):
    """A music primer (B, T), right-padded with 0, and its `num_steps`."""
    width, real = tf.shape(primer)[1], tf.cast(tf.not_equal(primer, 0), tf.int32)
    lengths = tf.reduce_sum(real, axis=1)
    return [
        (
            (tf.shape(primer)[0] > 0) & (tf.reduce_min(lengths) > 0),
            "`primer` must hold at least "
            "one row, each of at least one event (start token 1). Received events per row:",
            lengths,
        ),
        (
            width <= max_primer_length,
            f"`primer` is too wide: at most {max_primer_length} events "
            "(the exported max_primer_length). Received width:",
            width,
        ),
        id_range_check("primer", primer, vocabulary_size, "events of the vocabulary"),
        (
            tf.reduce_all(real[:, :-1] >= real[:, 1:]),
            "`primer` rows must be right-padded: events, then 0s. Received events per row:",
            lengths,
        ),
        # Not width + num_steps <= max_length: a huge num_steps would wrap the int32 sum around.
        (
            (num_steps >= 0) & (num_steps <= max_length - width),
            f"`num_steps` must be >= 0 and <= "
            f"{max_length} (the exported max_length) - the primer width. Received num_steps, width:",
            num_steps,
            width,
        ),
    ]
