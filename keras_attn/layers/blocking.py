"""Blocking helpers of the local attention of Parmar et al. 2018
(`LocalBlockAttention`): query blocks and overlapping memory blocks.

They treat axes 1 .. n of a tensor (B, *spatial, ...) as the positions of a
sequence (n = 1) or an image (n = 2) and leave the trailing axes alone.
Sizes may be static ints or scalar tensors (a `None` length in a functional
model). `keras.ops` only.
"""

from keras import ops


def dims(x):
    """Returns the shape of `x` as a list: static ints where known, scalar
    tensors elsewhere.

    Args:
        x: a tensor.

    Returns:
        A list of `int` or scalar int tensors, one per axis.
    """
    dynamic = None
    result = []
    for i, d in enumerate(x.shape):
        if d is None:
            if dynamic is None:
                dynamic = ops.shape(x)
            d = dynamic[i]
        result.append(d)
    return result


def num_blocks(length, block):
    """ceil(length / block), as an int when `length` is static.

    Args:
        length: an int or scalar int tensor.
        block: a positive int.

    Returns:
        The number of blocks of size `block` that cover `length` positions.
    """
    return (length + block - 1) // block


def pad_to_multiple(x, multiple, axis, constant_values=0):
    """Pads `x` at the end of `axis` to the next multiple of `multiple`.

    Args:
        x: a tensor.
        multiple: a positive int.
        axis: the axis to pad (non-negative).
        constant_values: the fill value (use `False` for boolean masks).

    Returns:
        `x` with `axis` of length `ceil(length / multiple) * multiple`; `x`
        itself when the length is already a static multiple.
    """
    length = dims(x)[axis]
    if isinstance(length, int) and length % multiple == 0:
        return x
    pad = (multiple - length % multiple) % multiple
    widths = [[0, 0] for _ in x.shape]
    widths[axis] = [0, pad]
    return ops.pad(x, widths, constant_values=constant_values)


def blockify(x, block_shape, constant_values=0):
    """Splits the positions of `x` into non-overlapping blocks.

    Axes 1 .. n (n = len(block_shape)) are padded at the end to multiples
    of the block and cut into blocks, which are listed in raster order of
    the block grid; inside a block, positions are in raster order too.

    Args:
        x: (B, L1, ..., Ln, ...) tensor.
        block_shape: tuple of n positive ints (b1, ..., bn).
        constant_values: fill value of the padding.

    Returns:
        (B, N, b1 * ... * bn, ...) with N = prod(ceil(Li / bi)).
    """
    n = len(block_shape)
    for i, b in enumerate(block_shape):
        x = pad_to_multiple(x, b, 1 + i, constant_values)
    shape = dims(x)
    rest = shape[1 + n :]
    split = [shape[0]]
    for i, b in enumerate(block_shape):
        split += [shape[1 + i] // b, b]
    return _merge_grid(ops.reshape(x, split + rest), n)


def unblockify(x, block_shape, spatial_shape):
    """Inverse of `blockify`: puts blocks back in place and removes padding.

    Args:
        x: (B, N, b1 * ... * bn, ...) tensor, as returned by `blockify`.
        block_shape: the tuple (b1, ..., bn) given to `blockify`.
        spatial_shape: the unpadded (L1, ..., Ln) (ints or scalar tensors).

    Returns:
        (B, L1, ..., Ln, ...).
    """
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
    """Replaces `axis` (length a multiple of `block`) by two axes
    (num_blocks, before + block + after): window j covers positions
    [j * block - before, (j + 1) * block + after), out-of-range positions
    filled with `constant_values`. Built from shifted slices (no gather), so
    the gradient is a plain sum of slices."""
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
    """Cuts the positions of `x` into overlapping windows, one per block.

    The grid of blocks is the one of `blockify(x, block_shape)`; the window
    of a block extends it by `before[i]` positions before and `after[i]`
    after it along each spatial axis i (the memory flange of local
    attention). Positions outside `x` (or in the padding to a multiple of
    the block) are filled with `constant_values`. Memory and time are
    O(prod(L) * window / block), never quadratic.

    Args:
        x: (B, L1, ..., Ln, ...) tensor.
        block_shape: tuple of n positive ints.
        before, after: tuples of n non-negative ints.
        constant_values: fill value.

    Returns:
        (B, N, w1 * ... * wn, ...) with wi = before[i] + block_shape[i] +
        after[i], windows in the same order as `blockify`'s blocks and
        positions in raster order inside each window.
    """
    n = len(block_shape)
    for i, b in enumerate(block_shape):
        x = pad_to_multiple(x, b, 1 + i, constant_values)
    for i in reversed(range(n)):
        # Axis 1 + i becomes (Ni, wi); earlier axes keep their index.
        x = _overlap_axis(x, 1 + i, block_shape[i], before[i], after[i], constant_values)
    return _merge_grid(x, n)


def _merge_grid(x, n):
    """(B, N1, w1, ..., Nn, wn, ...) -> (B, N1 * ... * Nn, w1 * ... * wn, ...):
    blocks in raster order of their grid, positions in raster order inside
    each block. The w's must be static."""
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
