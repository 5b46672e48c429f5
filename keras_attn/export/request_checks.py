"""In-graph checks of a served request, the one untrusted input of an export.

They run in the signature, before the decoding loop (XLA drops assertions; the layers trust their
inputs). A failure is an `InvalidArgumentError` saying what is expected and what was received; the
server keeps running. No quote marks in messages: TensorFlow escapes them.
"""

import tensorflow as tf

# The sampling controls of a request, in the order `checked_request` takes them.
SAMPLING_INPUTS = [
    tf.TensorSpec((), tf.float32, name="temperature"),
    tf.TensorSpec((), tf.int32, name="top_k"),
    tf.TensorSpec((), tf.float32, name="top_p"),
    tf.TensorSpec(None, tf.int32, name="seed"),  # () or (B,)
]


def checked(values, conditions):
    """`values` once every `(condition, message, *received)` holds; the first failure is raised."""
    dependencies = []
    for condition, *message in conditions:
        with tf.control_dependencies(dependencies):
            dependencies = [tf.debugging.Assert(condition, message, summarize=16)]
    with tf.control_dependencies(dependencies):
        return tf.nest.map_structure(tf.identity, values)


def batch_check(name, value):
    """At least one row."""
    shape = tf.shape(value)
    return shape[0] > 0, f"`{name}` must hold at least one row. Received shape:", shape


def id_range_check(name, ids, vocabulary_size):
    """Ids in [0, vocabulary_size) (an empty tensor passes: min > max)."""
    low, high = tf.reduce_min(ids), tf.reduce_max(ids)
    inside = (low >= 0) & (high < vocabulary_size)
    return inside, f"`{name}` ids must be in [0, {vocabulary_size}). Received min, max:", low, high


def checked_request(values, rows, controls, conditions):
    """`(values, controls)` once `conditions` hold, then the sampling `controls`
    `(temperature, top_k, top_p, seed)` (top_k 0 and top_p 1 turn a filter off; NaN fails; the
    seed a scalar, one for the batch, or one per row of `rows`); the seed as `sample` takes it:
    (1, 1) for the batch or (B, 1) per row."""
    t, top_k, top_p, seed = controls
    seed_ok = (tf.rank(seed) == 0) | (tf.rank(seed) == 1) & (tf.size(seed) == rows)
    conditions = conditions + [
        ((t > 0.0) & (t < float("inf")), "`temperature` must be finite and > 0. Received:", t),
        (top_k >= 0, "`top_k` must be >= 0 (0 = off). Received:", top_k),
        ((top_p > 0.0) & (top_p <= 1.0), "`top_p` must be in (0, 1] (1 = off). Received:", top_p),
        (seed_ok, "`seed` must be a scalar or of shape (batch,). Received shape:", tf.shape(seed)),
    ]
    values, (t, top_k, top_p, seed) = checked((values, controls), conditions)
    return values, (t, top_k, top_p, tf.reshape(seed, [-1, 1]))


def primer_checks(primer, num_steps, vocabulary_size, max_length, max_primer_length):
    """A music primer (B, T): rows of events from the start token 1, right-padded with 0."""
    width, events = tf.shape(primer)[1], tf.not_equal(primer, 0)
    lengths = tf.reduce_sum(tf.cast(events, tf.int32), axis=1)
    filled = (tf.size(lengths) > 0) & (tf.reduce_min(lengths) > 0)
    right_padded = tf.reduce_all(events[:, :-1] | ~events[:, 1:])
    # Not width + num_steps <= max_length: a huge num_steps would wrap the int32 sum around.
    fits = width <= max_primer_length
    ok = (num_steps >= 0) & (num_steps <= max_length - width)
    return [
        (filled, "`primer` needs rows of at least one event. Received events per row:", lengths),
        (fits, f"`primer` is too wide: at most {max_primer_length} events. Received:", width),
        id_range_check("primer", primer, vocabulary_size),
        (right_padded, "`primer` rows must be right-padded: events, then 0s. Received:", lengths),
        (ok, f"`num_steps` must be in [0, {max_length} - width]. Received:", num_steps, width),
    ]


def stream_state_checks(state, position, max_length):
    """The state a streaming `step` gets back: `state` {name: tensor} of one row count, and a
    cache of `position` positions, in [1, max_length - 2] (a step writes position + 1)."""
    rows = [tf.shape(value)[0] for value in state.values()]
    same_rows = tf.reduce_all(tf.equal(tf.stack(rows), rows[0]))
    names = ", ".join(f"`{name}`" for name in state)
    fits = (position >= 1) & (position <= max_length - 2)
    return [
        (same_rows, f"{names} need the same rows. Received:", *rows),
        (fits, f"`cache` must hold 1 to {max_length - 2} positions. Received:", position),
    ]
