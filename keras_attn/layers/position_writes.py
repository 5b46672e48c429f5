"""Writing a decoding step's positions into a cache or buffer (`write_positions`), and the scope
in which a single position is written with a select (`select_writes`)."""

import contextlib
import contextvars

from keras import ops

from keras_attn.layers.attention_ops import positions

_SELECT_WRITES = contextvars.ContextVar("keras_attn_select_writes", default=False)


@contextlib.contextmanager
def select_writes():
    """Within it, `write_positions` writes a single position with a select over the buffer.

    For functions traced into a TensorFlow graph that runs without XLA (a served SavedModel):
    there `ops.slice_update` is `XlaDynamicUpdateSlice`, an XLA computation launched on its own
    at every decoding step, which costs more than the select (a served music step 20-30 % faster;
    benchmarks/README.md). Under XLA (JAX, `jit_compile=True`) `slice_update` writes in place,
    so only the exporters' plain-graph loops are traced in this scope
    (`export.archive.xla_function`). It is read when a function is traced: a function traced
    before keeps its writes. Both ways write the same values.

    Example:
    >>> import numpy as np
    >>> from keras_attn.layers.position_writes import select_writes, write_positions
    >>> with select_writes():
    ...     tokens = write_positions(np.zeros((1, 4), "int32"), np.array([[7]], "int32"), 2, 1)
    >>> np.asarray(tokens).tolist()
    [[0, 0, 7, 0]]
    """
    token = _SELECT_WRITES.set(True)
    try:
        yield
    finally:
        _SELECT_WRITES.reset(token)


def _selecting():
    """Whether the calls now are traced within `select_writes`."""
    return _SELECT_WRITES.get()


def write_positions(buffer, update, index, axis):
    """`buffer` with `update` written from position `index` along `axis`.

    Args:
        buffer: a tensor, L positions along `axis`.
        update: `buffer`'s shape except T along `axis`, and its dtype.
        index: int or int32 scalar, the first position written; 0 <= index <= L - T (callers
            check it; another dtype or index is undefined).
        axis: int, the axis of positions.

    Returns:
        `buffer`'s shape and dtype.
    """
    length = buffer.shape[axis]
    if _selecting() and update.shape[axis] == 1 and length is not None:
        shape = [1] * len(buffer.shape)
        shape[axis] = length
        at_index = ops.reshape(ops.equal(positions(length), index), shape)
        return ops.where(at_index, update, buffer)
    start = [0] * len(buffer.shape)
    start[axis] = index
    return ops.slice_update(buffer, tuple(start), update)
