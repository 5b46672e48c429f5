"""Query blocks and overlapping memory windows of `LocalBlockAttention` (Parmar et al. 2018).

Axes 1 .. n of a tensor (B, *spatial, ...) are the positions of a sequence (n = 1) or an image
(n = 2); sizes may be static ints or scalar tensors.
"""

from keras import ops


def dims(x):
    """The shape of `x` as a list: static ints where known, scalar tensors elsewhere."""
    static = list(x.shape)
    # `ops.shape` reads the dynamic sizes (in TensorFlow a Shape op: none when all are static).
    return static if None not in static else list(ops.shape(x))


def num_blocks(length, block):
    """ceil(length / block), an int when `length` is static."""
    return (length + block - 1) // block


def pad_to_multiple(x, multiple, axis, constant_values=0):
    """Pads `x` at the end of `axis` (>= 0) to a multiple of `multiple` with `constant_values`."""
    length = dims(x)[axis]
    if isinstance(length, int) and length % multiple == 0:
        return x
    pad = (multiple - length % multiple) % multiple
    widths = [[0, 0] for _ in x.shape]
    widths[axis] = [0, pad]
    return ops.pad(x, widths, constant_values=constant_values)


def blockify(x, block_shape, constant_values=0):
    """(B, L1, ..., Ln, ...) -> (B, N, b1 * ... * bn, ...): positions padded to whole blocks and
    cut into blocks, N = prod(ceil(Li / bi)); blocks and their positions in raster order.

    >>> import numpy as np
    >>> np.asarray(blockify(np.arange(5)[None], (2,))).tolist()
    [[[0, 1], [2, 3], [4, 0]]]
    """
    no_flange = (0,) * len(block_shape)
    return overlapping_blocks(x, block_shape, no_flange, no_flange, constant_values)


def unblockify(x, block_shape, spatial_shape):
    """Inverse of `blockify`: (B, N, b1 * ... * bn, ...) -> (B, *spatial_shape, ...)."""
    n = len(block_shape)
    shape = dims(x)
    rest = shape[3:]
    grid = [num_blocks(length, b) for length, b in zip(spatial_shape, block_shape)]
    x = ops.reshape(x, [shape[0]] + grid + list(block_shape) + rest)
    if n > 1:
        order = [0]
        for i in range(n):
            order += [1 + i, 1 + n + i]
        order += list(range(1 + 2 * n, 1 + 2 * n + len(rest)))
        x = ops.transpose(x, order)
    x = ops.reshape(x, [shape[0]] + [g * b for g, b in zip(grid, block_shape)] + rest)
    crop = (slice(None),) + tuple(slice(0, length) for length in spatial_shape)
    return x[crop]


def _overlap_axis(x, axis, block, before, after, constant_values):
    """Replaces `axis` (a multiple of `block`) by (num_blocks, before + block + after): window j
    covers [j * block - before, (j + 1) * block + after). Slices, no gather."""
    blocks_before = num_blocks(before, block)
    blocks_after = num_blocks(after, block)
    if blocks_before or blocks_after:
        widths = [[0, 0] for _ in x.shape]
        widths[axis] = [blocks_before * block, blocks_after * block]
        x = ops.pad(x, widths, constant_values=constant_values)
    shape = dims(x)
    x = ops.reshape(x, shape[:axis] + [shape[axis] // block, block] + shape[axis + 1 :])
    span = blocks_before + blocks_after + 1
    # The window, in the coordinates of `span` consecutive blocks laid end
    # to end.
    low = blocks_before * block - before
    high = blocks_before * block + block + after
    lead = (slice(None),) * axis
    pieces = []
    for i in range(span):
        start, stop = max(low - i * block, 0), min(high - i * block, block)
        if start >= stop:
            continue
        last = i - (span - 1)
        pieces.append(x[lead + (slice(i, last if last < 0 else None), slice(start, stop))])
    return pieces[0] if len(pieces) == 1 else ops.concatenate(pieces, axis=axis + 1)


def overlapping_blocks(x, block_shape, before, after, constant_values=0):
    """(B, L1, ..., Ln, ...) -> (B, N, w1 * ... * wn, ...): the window of each `blockify` block,
    extended by `before[i]` and `after[i]` positions on axis i (wi = before + block + after);
    positions outside `x` are `constant_values`.

    >>> import numpy as np
    >>> np.asarray(overlapping_blocks(np.arange(1, 5)[None], (2,), (1,), (0,))).tolist()
    [[[0, 1, 2], [2, 3, 4]]]
    """
    n = len(block_shape)
    for i, b in enumerate(block_shape):
        x = pad_to_multiple(x, b, 1 + i, constant_values)
    for i in reversed(range(n)):
        # Axis 1 + i becomes (Ni, wi); earlier axes keep their index.
        x = _overlap_axis(x, 1 + i, block_shape[i], before[i], after[i], constant_values)
    return _merge_grid(x, n)


def _merge_grid(x, n):
    """(B, N1, w1, ..., Nn, wn, ...) -> (B, N1 * ... * Nn, w1 * ... * wn, ...), w's static."""
    shape = dims(x)
    rest = shape[1 + 2 * n :]
    if n > 1:  # (B, N1, w1, N2, w2, ...) -> (B, N1, N2, w1, w2, ...)
        grid = [1 + 2 * i for i in range(n)]
        inner = [2 + 2 * i for i in range(n)]
        tail = list(range(1 + 2 * n, 1 + 2 * n + len(rest)))
        x = ops.transpose(x, [0] + grid + inner + tail)
    count, size = 1, 1
    for i in range(n):
        count = count * shape[1 + 2 * i]
        size = size * shape[2 + 2 * i]
    return ops.reshape(x, [shape[0], count, size] + rest)
