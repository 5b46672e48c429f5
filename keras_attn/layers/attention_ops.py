"""The few pure functions the attention layers share.

Everything here uses `keras.ops` only, so it runs on every Keras backend.
One mask convention holds everywhere: a boolean mask with `True` meaning
"this query may attend to this key" (or, for a padding mask, "this position
is a real token").
"""

import numbers
import operator

import keras
from keras import ops

from keras_attn import keras_internals

# Logits of blocked positions are replaced by this value before the softmax.
# It is finite so that neither the softmax nor its gradient can produce NaN,
# and far below any real logit so that blocked keys get exactly zero weight
# after the exponential underflows.
MASKED_LOGIT = -1e9


def static_int(value):
    """Returns `value` as a Python int when it is known now, else `None`.

    Python ints, NumPy scalars and eager tensors are known; symbolic tensors
    (inside `tf.function`, a Keras functional graph or a JAX trace) are not.

    Args:
        value: a scalar: Python/NumPy integer or a backend tensor.

    Returns:
        `int` or `None`.
    """
    if value is None:
        return None
    try:
        # `operator.index`, not `int`: inside a `tf.function`, AutoGraph
        # rewrites `int(tensor)` into a cast that returns a symbolic tensor.
        return operator.index(value)
    except (TypeError, ValueError, AttributeError):
        return None
    except Exception:  # symbolic tensors of some backends raise their own
        return None


def check_positive_int(owner, name, value):
    """Raises a ValueError unless `value` is a positive integer.

    Args:
        owner: the layer (or any object) whose argument is checked; its class
            name starts the message.
        name: the argument's name.
        value: the value received.

    Raises:
        ValueError: if `value` is not a positive integer (bools refused).
    """
    if (
        isinstance(value, bool)
        or not isinstance(value, numbers.Integral)
        or value <= 0
    ):
        raise ValueError(
            f"{type(owner).__name__}: `{name}` must be a positive integer. "
            f"Received: {name}={value!r}."
        )


def check_index(value, name):
    """Raises a ValueError unless `value` is an integer scalar.

    Positions (`cache_index`, `start_index`) are Python ints, NumPy integer
    scalars or rank-0 integer tensors (eager or traced). A float would be
    truncated silently and an array would fail deep inside a slice.

    Args:
        value: the value received.
        name: the argument's name, for the message.

    Raises:
        ValueError: if `value` is a bool, a float, or not of rank 0.
    """
    if isinstance(value, bool):
        ok = False
    elif isinstance(value, numbers.Integral):
        ok = True
    elif hasattr(value, "dtype") and hasattr(value, "shape"):
        dtype = keras.backend.standardize_dtype(value.dtype)
        ok = "int" in dtype and len(value.shape) == 0
    else:
        ok = False
    if not ok:
        described = (
            f"{type(value).__name__} of dtype "
            f"{keras.backend.standardize_dtype(value.dtype)} and shape "
            f"{tuple(value.shape)}"
            if hasattr(value, "dtype") and hasattr(value, "shape")
            else type(value).__name__
        )
        raise ValueError(
            f"`{name}` must be an integer scalar (a Python int or a rank-0 "
            f"int32 tensor): an absolute position. Received: {name}={value!r} "
            f"({described})."
        )


def check_rate(owner, name, value):
    """Raises a ValueError unless `value` is a float in [0, 1).

    Raises:
        ValueError: if `value` is not a number in [0, 1).
    """
    if (
        isinstance(value, bool)
        or not isinstance(value, numbers.Real)
        or not 0.0 <= float(value) < 1.0
    ):
        raise ValueError(
            f"{type(owner).__name__}: `{name}` must be a number in [0, 1). "
            f"Received: {name}={value!r}."
        )


def get_implicit_mask(x):
    """Returns the Keras implicit mask attached to `x`, if any.

    Args:
        x: a tensor, possibly produced by a layer with `mask_zero=True` or
            another mask-producing layer.

    Returns:
        The boolean mask of shape `x.shape[:-1]`, or `None`.
    """
    return keras_internals.get_mask(x)


def check_mask(
    mask, name, expected_rank, expected_shape=None, batch_size=None, num_heads=None
):
    """Validates a user mask and returns it as a boolean tensor.

    Boolean masks are used as they are; integer masks are read as
    `mask != 0` (the 0/1 masks tokenizers produce). Floating masks are
    refused: they are usually additive masks (0 / -inf), whose polarity is
    the opposite of this library's, and reading them silently would let a
    model see what it must not.

    Args:
        mask: the mask given by the user.
        name: its argument name, for the error message.
        expected_rank: an int or a tuple of allowed ranks.
        expected_shape: optional tuple of the expected static shape, with
            `None` for dimensions that are not checked. Checked against the
            trailing dimensions when the mask's rank is larger.
        batch_size, num_heads: for attention masks, (B, T, S) or
            (B, H, T, S): the batch size and head count the leading axes
            must match, each either equal or 1 (broadcast). `None` = not
            checked.

    Returns:
        The mask as a boolean tensor.

    Raises:
        ValueError: if the mask is not boolean or integer (floating masks
            included), has the wrong rank, or a known dimension that
            differs from `expected_shape`, `batch_size` or `num_heads`.
    """
    if mask is None:
        return None
    if not hasattr(mask, "dtype") or not hasattr(mask, "shape"):
        mask = ops.convert_to_tensor(mask)
    dtype = keras.backend.standardize_dtype(mask.dtype)
    if "float" in dtype or "complex" in dtype:
        raise ValueError(
            f"`{name}` must be boolean (True = may attend / real token). "
            f"Received a mask of dtype {dtype}. If this is an additive mask "
            "(0 for visible, -inf for blocked), convert it with "
            "`mask == 0`; if it is a 0/1 float mask, use `mask > 0.5`."
        )
    if dtype != "bool" and "int" not in dtype:
        raise ValueError(
            f"`{name}` must be boolean (True = may attend / real token) or "
            f"integer (0 = blocked / padding). Received a mask of dtype {dtype}."
        )
    ranks = (expected_rank,) if isinstance(expected_rank, int) else expected_rank
    rank = len(mask.shape)
    if rank not in ranks:
        raise ValueError(
            f"`{name}` must have rank {' or '.join(map(str, ranks))}"
            f"{' with shape ' + _shape_str(expected_shape) if expected_shape else ''}. "
            f"Received: {name}.shape={tuple(mask.shape)}."
        )
    if expected_shape is not None:
        got = tuple(mask.shape)[-len(expected_shape):]
        for got_dim, want_dim in zip(got, expected_shape):
            if got_dim is not None and want_dim is not None and got_dim != want_dim:
                raise ValueError(
                    f"`{name}` has shape {tuple(mask.shape)}, which does not "
                    f"match the expected shape {_shape_str(expected_shape)} "
                    "(batch, [heads,] queries, keys) for these inputs. "
                    "Build the mask from the same batch it is used with."
                )
    leading = [("batch", 0, batch_size, "the batch size of the inputs")]
    if rank == 4:
        leading.append(("heads", 1, num_heads, "the layer's num_heads"))
    for label, axis, want, meaning in leading:
        got = mask.shape[axis]
        if want is not None and got is not None and got not in (1, want):
            raise ValueError(
                f"`{name}` has shape {tuple(mask.shape)}: its {label} axis "
                f"(axis {axis}) has size {got}, expected {want} ({meaning}) or "
                f"1 (shared). The layout is (batch, queries, keys) or (batch, "
                "heads, queries, keys)."
            )
    if dtype != "bool":
        mask = ops.not_equal(mask, 0)
    return mask


def _shape_str(shape):
    if shape is None:
        return ""
    return "(" + ", ".join("?" if d is None else str(d) for d in shape) + ")"


def causal_mask(query_length, key_length, cache_index=0):
    """Lower-triangular mask aligned to absolute positions.

    Query `i` sits at absolute position `cache_index + i` and may attend to
    key `j` when `j <= cache_index + i`. Built from iotas inside the graph
    (a constant (T, S) mask makes TF's optimizer constant-fold it, which
    costs seconds at T = 4096).

    Args:
        query_length: T, an int or scalar tensor.
        key_length: S, an int or scalar tensor.
        cache_index: absolute position of the first query (the cache
            index), an int or scalar tensor.

    Returns:
        Boolean tensor of shape (T, S).
    """
    query_positions = ops.arange(query_length, dtype="int32") + ops.cast(
        cache_index, "int32"
    )
    key_positions = ops.arange(key_length, dtype="int32")
    return ops.greater_equal(
        ops.expand_dims(query_positions, 1), ops.expand_dims(key_positions, 0)
    )


def merge_masks(
    batch_size,
    query_length,
    key_length,
    key_padding_mask=None,
    attention_mask=None,
    use_causal_mask=False,
    cache_index=0,
    valid_key_length=None,
):
    """Combines every mask source into one broadcastable boolean mask.

    The result keeps the smallest shape that holds all sources: (1, 1, T, S)
    for a causal mask alone, (B, 1, 1, S) for a padding mask alone, (B, 1, T, S)
    or (B, H, T, S) with an attention mask. It is never expanded to the heads
    unless the caller's attention mask already has them, so no full-size
    buffer is made here.

    Args:
        batch_size, query_length, key_length: B, T and S.
        key_padding_mask: (B, S) bool, True = real key.
        attention_mask: (B, T, S) or (B, H, T, S) bool, True = may attend.
        use_causal_mask: bool; query i sees keys j <= cache_index + i.
        cache_index: absolute position of the first query (cache index).
        valid_key_length: optional int/scalar; keys at positions >= it are
            blocked (unfilled cache slots).

    Returns:
        A boolean tensor broadcastable to (B, H, T, S), or `None` when every
        key is visible to every query.
    """
    mask = None

    def _and(a, b):
        return b if a is None else ops.logical_and(a, b)

    if key_padding_mask is not None:
        mask = _and(mask, key_padding_mask[:, None, None, :])
    if attention_mask is not None:
        if len(attention_mask.shape) == 3:
            attention_mask = attention_mask[:, None, :, :]
        mask = _and(mask, attention_mask)
    if use_causal_mask:
        mask = _and(mask, causal_mask(query_length, key_length, cache_index)[None, None])
    elif valid_key_length is not None:
        key_positions = ops.arange(key_length, dtype="int32")
        valid = ops.less(key_positions, ops.cast(valid_key_length, "int32"))
        mask = _and(mask, valid[None, None, None, :])
    return mask


def masked_softmax(logits, mask=None, axis=-1, may_have_empty_rows=True):
    """Softmax over `axis` in float32, masked with `where`.

    Blocked logits are replaced (not offset) by a large negative constant, so
    the result is exact zeros for blocked keys whatever the logits' size. A
    row with no visible key gives all zeros and finite gradients rather than
    a uniform distribution or NaN.

    Args:
        logits: (..., S) tensor of any float dtype.
        mask: boolean tensor broadcastable to `logits`, True = may attend,
            or `None`.
        axis: the key axis.
        may_have_empty_rows: set to False when every row is known to keep at
            least one visible key (e.g. a causal mask alone), to skip the
            zeroing pass.

    Returns:
        float32 probabilities, same shape as `logits`.
    """
    logits = ops.cast(logits, "float32")
    if mask is None:
        return _softmax(logits, axis)
    logits = ops.where(mask, logits, MASKED_LOGIT)
    probs = _softmax(logits, axis)
    if may_have_empty_rows:
        row_has_key = ops.any(mask, axis=axis, keepdims=True)
        probs = ops.where(row_has_key, probs, 0.0)
    return probs


def _softmax(logits, axis):
    """`ops.softmax`, without its warning on an axis of size 1.

    Keras warns ("Did you mean to use a sigmoid?") when the softmax axis
    has size 1, which is a mistake in a classifier head but normal here:
    a single key (a 1-token prompt or source, a one-slot cache, a local
    window of one position). The textbook formula gives the same result
    (1 per row, NaN for a NaN logit) and the same zero gradient, without
    the warning; longer axes keep the backend's fused softmax.
    """
    if logits.shape[axis] != 1:
        return ops.softmax(logits, axis=axis)
    exponentials = ops.exp(logits - ops.max(logits, axis=axis, keepdims=True))
    return exponentials / ops.sum(exponentials, axis=axis, keepdims=True)


def scaled_dot_product_attention(
    query, key, value, mask=None, dropout_layer=None, training=None,
    may_have_empty_rows=True, extra_logits=None,
):
    """Dense attention core: softmax(Q·Kᵀ/√K [+ extra]) · V.

    Args:
        query: (B, T, H, K).
        key: (B, S, H, K).
        value: (B, S, H, V).
        mask: boolean, broadcastable to (B, H, T, S), True = may attend.
        dropout_layer: optional `keras.layers.Dropout` applied to the
            attention probabilities.
        training: passed to the dropout layer.
        may_have_empty_rows: see `masked_softmax`.
        extra_logits: optional (B, H, T, S) logits added to Q·Kᵀ before the
            scaling (the relative-position term of Huang et al. 2018).

    Returns:
        `(outputs, probabilities)`: (B, T, H, V) in the query's dtype, and
        (B, H, T, S) float32 probabilities (before dropout).
    """
    key_dim = query.shape[-1]
    scale = 1.0 / float(key_dim) ** 0.5
    # The logits are made in float32 directly: the softmax needs them in
    # float32 anyway, and a 16-bit Q·Kᵀ loses up to a few tenths on logits
    # of size 50, enough to move sharp attention weights by several percent.
    # Casting the small (B, T, H, K) operands costs less than casting the
    # (B, H, T, S) product.
    query = ops.cast(query, "float32")
    key = ops.cast(key, "float32")
    if query.shape[1] == 1:
        return _single_query_attention(
            query, key, value, mask, scale, dropout_layer, training,
            may_have_empty_rows, extra_logits,
        )
    if extra_logits is None:
        # Scaling the (B, T, H, K) query is cheaper than the (B, H, T, S) logits.
        logits = ops.einsum("bthk,bshk->bhts", query * scale, key)
    else:
        logits = ops.einsum("bthk,bshk->bhts", query, key) + ops.cast(
            extra_logits, "float32"
        )
        logits = logits * scale
    probs = masked_softmax(logits, mask, may_have_empty_rows=may_have_empty_rows)
    weights = ops.cast(probs, value.dtype)
    if dropout_layer is not None:
        weights = dropout_layer(weights, training=training)
    outputs = ops.einsum("bhts,bshv->bthv", weights, value)
    return outputs, probs


def _single_query_attention(
    query, key, value, mask, scale, dropout_layer, training,
    may_have_empty_rows, extra_logits,
):
    """`scaled_dot_product_attention` for one query per sequence (T = 1,
    a decoding step over a cache), as multiply-and-reduce instead of
    matmuls.

    A decoding step is memory-bound: it reads each cached key and value
    once. A matmul wants its operands with the batch axes (B, H) in front,
    so with the cache's (B, S, H, K) layout it first copies the keys and
    values into new buffers, which costs more than the attention itself
    (new memory is paged in at about 1 GB/s here: 8 ms per step and layer
    for a 2,064-slot cache of 8 heads x 128). Under XLA a multiply followed
    by a sum over K (or S) fuses into one loop that reads the cache in
    place, slices of the cache included.
    """
    # (B, 1, H, K) * (B, S, H, K) summed over K -> (B, S, H).
    if extra_logits is None:
        logits = ops.sum((query * scale) * key, axis=-1)
    else:
        logits = ops.sum(query * key, axis=-1)
    logits = ops.expand_dims(ops.transpose(logits, (0, 2, 1)), 2)  # (B, H, 1, S)
    if extra_logits is not None:
        logits = (logits + ops.cast(extra_logits, "float32")) * scale
    probs = masked_softmax(logits, mask, may_have_empty_rows=may_have_empty_rows)
    weights = ops.cast(probs, value.dtype)
    if dropout_layer is not None:
        weights = dropout_layer(weights, training=training)
    # (B, H, 1, S) -> (B, S, H, 1), times (B, S, H, V), summed over S,
    # accumulated in float32 as a matmul would (the casts are no-ops in
    # float32 and fuse into the reduction under XLA).
    weights = ops.expand_dims(ops.transpose(weights[:, :, 0, :], (0, 2, 1)), -1)
    outputs = ops.sum(
        ops.cast(weights, "float32") * ops.cast(value, "float32"), axis=1, keepdims=True
    )  # (B, 1, H, V)
    return ops.cast(outputs, value.dtype), probs


def _dim(x, axis):
    # Static size when known (XLA and JAX want static shapes), else dynamic.
    static = x.shape[axis]
    return static if static is not None else ops.shape(x)[axis]


def skew(relative_logits, key_length=None):
    """Turns logits indexed by relative distance into logits indexed by key.

    The memory-efficient "skewing" of Huang et al. 2018 (section 3.4): pad a
    zero column on the left, reshape, slice. No (T, S, K) tensor is made and
    no index tensor either; the cost is one copy of the logits.

    Column `j` of row `t` of `relative_logits` holds the logit of query `t`
    for the key at distance `j - (T - 1)` from it (key position minus query
    position: the last column of a square input is distance 0, the first
    -(T - 1)). The result holds it at the key's place:

        out[..., t, s] = relative_logits[..., t, s - t + T - 1]

    for every (t, s) with `0 <= s - t + T - 1 < W`. The other entries
    (keys further right than the table reaches, e.g. the future keys of a
    causal table with W = S) hold values of a neighbouring row or zero, and
    must be masked. Hand example, T = W = S = 3 (causal):

        [[a, b, c],        [[c, 0, d],        c: distance 0 of query 0
         [d, e, f],   ->    [e, f, 0],        e, f: distances -1, 0 of query 1
         [g, h, i]]         [g, h, i]]        g, h, i: -2, -1, 0 of query 2

    With W = S + T - 1 (distances -(T - 1) .. S - 1) every entry is exact,
    which is what non-causal attention needs.

    Args:
        relative_logits: (..., T, W) float tensor, W >= key_length.
        key_length: S, the number of keys to keep; defaults to W.

    Returns:
        (..., T, S) tensor of the input's dtype.

    Raises:
        ValueError: if the input has rank < 2 or a static `key_length`
            larger than a static W.

    Reference:
        Huang et al. 2018, "Music Transformer", section 3.4 and figure 1.
    """
    rank = len(relative_logits.shape)
    if rank < 2:
        raise ValueError(
            "`skew` expects logits of shape (..., queries, relative distances). "
            f"Received a tensor of rank {rank} with shape {tuple(relative_logits.shape)}."
        )
    width = _dim(relative_logits, -1)
    if key_length is None:
        key_length = width
    known_width, known_keys = static_int(width), static_int(key_length)
    if known_width is not None and known_keys is not None and known_keys > known_width:
        raise ValueError(
            f"`skew` needs at least as many relative distances as keys. Received "
            f"{known_width} distances (last axis of shape {tuple(relative_logits.shape)}) "
            f"for key_length={known_keys}. Build the table over W >= S distances."
        )
    padded = ops.pad(relative_logits, [[0, 0]] * (rank - 1) + [[1, 0]])
    return skew_padded(padded, key_length)


def skew_padded(padded_logits, key_length=None):
    """`skew` for logits that already carry its zero column in front.

    A matmul of the queries against a relative-embedding table with a zero
    row in front makes that column for free, which saves `skew`'s padding
    copy of the logits.

    Args:
        padded_logits: (..., T, W + 1) float tensor whose column 0 is zero
            (or anything: it lands only on entries `skew` leaves
            unspecified) and whose columns 1 .. W are `skew`'s input.
        key_length: S <= W, the number of keys to keep; defaults to W.

    Returns:
        (..., T, S) tensor, equal to `skew(padded_logits[..., 1:], key_length)`.

    Raises:
        Nothing of its own (no checks, for use inside layers that build the
        table themselves); `skew` validates its input.

    Reference:
        Huang et al. 2018, "Music Transformer", section 3.4.
    """
    rank = len(padded_logits.shape)
    lead = tuple(_dim(padded_logits, a) for a in range(rank - 2))
    length = _dim(padded_logits, -2)
    width = _dim(padded_logits, -1) - 1
    if key_length is None:
        key_length = width
    flat = ops.reshape(padded_logits, lead + (length * (width + 1),))
    # Dropping the first T entries shifts row t left by t places.
    flat = ops.slice(flat, (0,) * len(lead) + (length,), lead + (length * width,))
    out = ops.reshape(flat, lead + (length, width))
    if static_int(key_length) is None or static_int(key_length) != static_int(width):
        out = ops.slice(out, (0,) * rank, lead + (length, key_length))
    return out


# ---------------------------------------------------------------- blocking
# Helpers of the local (blocked) attention of Parmar et al. 2018. They treat
# axes 1 .. n of a tensor (B, *spatial, ...) as the positions of a sequence
# (n = 1) or an image (n = 2) and leave the trailing axes alone. Sizes may be
# static ints or scalar tensors (a `None` length in a functional model).


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
    rest = shape[1 + n:]
    split = [shape[0]]
    for i, b in enumerate(block_shape):
        split += [shape[1 + i] // b, b]
    x = ops.reshape(x, split + rest)
    if n > 1:
        # (B, N1, b1, N2, b2, ...) -> (B, N1, N2, b1, b2, ...)
        grid = [1 + 2 * i for i in range(n)]
        inner = [2 + 2 * i for i in range(n)]
        tail = list(range(1 + 2 * n, 1 + 2 * n + len(rest)))
        x = ops.transpose(x, [0] + grid + inner + tail)
    count = 1
    for i in range(n):
        count = count * split[1 + 2 * i]
    size = 1
    for b in block_shape:
        size *= b
    return ops.reshape(x, [shape[0], count, size] + rest)


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
    x = ops.reshape(
        x, [shape[0]] + [g * b for g, b in zip(grid, block_shape)] + rest
    )
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
    x = ops.reshape(
        x, shape[:axis] + [shape[axis] // block, block] + shape[axis + 1:]
    )
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
    shape = dims(x)
    rest = shape[1 + 2 * n:]
    if n > 1:
        grid = [1 + 2 * i for i in range(n)]
        inner = [2 + 2 * i for i in range(n)]
        tail = list(range(1 + 2 * n, 1 + 2 * n + len(rest)))
        x = ops.transpose(x, [0] + grid + inner + tail)
    count = 1
    size = 1
    for i in range(n):
        count = count * shape[1 + 2 * i]
        size *= before[i] + block_shape[i] + after[i]
    return ops.reshape(x, [shape[0], count, size] + rest)
