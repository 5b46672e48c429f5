"""Writing a decoding step's positions (`write_positions`), and the plain-graph scope in which
they are written the way a TensorFlow graph run without XLA (a served SavedModel) runs fastest."""

import contextlib
import contextvars

from keras import ops

from keras_attn.layers.attention_ops import positions

_IN_PLAIN_GRAPH = contextvars.ContextVar("keras_attn_plain_graph", default=False)


@contextlib.contextmanager
def plain_graph():
    """Within it, decoding steps are traced for a TensorFlow graph that runs without XLA.

    There `write_positions` writes one position with a select over the buffer: `ops.slice_update`
    is `XlaDynamicUpdateSlice`, an XLA computation launched on its own at every step, which costs
    more than the select (a served music step 20-30 % faster; benchmarks/README.md). Under XLA
    (JAX, `jit_compile=True`) `slice_update` writes in place, so the exporters trace only their
    plain-graph loops in this scope (`export.archive.xla_function`).

    Example:
    >>> import numpy as np
    >>> from keras_attn.layers.plain_graph import plain_graph, write_positions
    >>> with plain_graph():
    ...     tokens = write_positions(np.zeros((1, 4), "int32"), np.array([[7]], "int32"), 2, 1)
    >>> np.asarray(tokens).tolist()
    [[0, 0, 7, 0]]
    """
    token = _IN_PLAIN_GRAPH.set(True)
    try:
        yield
    finally:
        _IN_PLAIN_GRAPH.reset(token)


def in_plain_graph():
    """Whether the calls now are traced within `plain_graph`."""
    return _IN_PLAIN_GRAPH.get()


def write_positions(buffer, update, index, axis):
    """`buffer` with `update` written from position `index` along `axis`.

    Args:
        buffer: a tensor, L positions along `axis`.
        update: `buffer`'s shape and dtype except T along `axis`.
        index: int or int32 scalar, the first position written; index + T <= L.
        axis: int, the axis of positions.

    Returns:
        `buffer`'s shape and dtype.
    """
    length = buffer.shape[axis]
    if in_plain_graph() and update.shape[axis] == 1 and length is not None:
        shape = [1] * len(buffer.shape)
        shape[axis] = length
        at_index = ops.reshape(ops.equal(positions(length), index), shape)
        return ops.where(at_index, update, buffer)
    start = [0] * len(buffer.shape)
    start[axis] = index
    return ops.slice_update(buffer, tuple(start), update)
