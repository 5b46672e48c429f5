"""Masks, the masked softmax and the dense attention core the attention
layers share.

Everything here uses `keras.ops` only, so it runs on every Keras backend.
One mask convention holds everywhere: a boolean mask with `True` meaning
"this query may attend to this key" (or, for a padding mask, "this position
is a real token").
"""

import keras
from keras import ops

from keras_attn import checks, keras_internals

# Logits of blocked positions are replaced by this value before the softmax:
# the lowest finite float32 (the softmax runs in float32). It is finite, so
# neither the softmax nor its gradient can produce NaN, and no finite real
# logit is below it, so a row with one visible key gives every blocked key
# exactly zero weight whatever the logits' size. (A constant such as -1e9,
# Keras' choice, hands a blocked key all the weight when the visible logits
# are below it: a causal mask then leaks the future.)
MASKED_LOGIT = -3.4028234663852886e38


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
        expected_shape: optional tuple of the expected shape, with `None`
            for dimensions that are not checked. Checked against the
            trailing dimensions when the mask's rank is larger. Entries may
            be scalar tensors (sizes known only at run time, as
            `ops.shape` gives them).
        batch_size, num_heads: for attention masks, (B, T, S) or
            (B, H, T, S): the batch size and head count the leading axes
            must match, each either equal or 1 (broadcast). `None` = not
            checked; a scalar tensor = known only at run time.

    Returns:
        The mask as a boolean tensor.

    Raises:
        ValueError: if the mask is not boolean or integer (floating masks
            included), has the wrong rank, or a known dimension that
            differs from `expected_shape`, `batch_size` or `num_heads`.
            Where a size is known only at run time, TensorFlow checks it in
            the graph with the same message (`InvalidArgumentError`). A
            symbolic mask (a `keras.KerasTensor`, while a functional model
            is built) gets the checks of what is known then.
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
    # (condition, message) where a size is known only at run time; none for
    # a symbolic mask, whose unknown sizes are checked when the model runs.
    traced = []
    symbolic = isinstance(mask, keras.KerasTensor)
    if expected_shape is not None:
        offset = rank - len(expected_shape)
        for axis, want in enumerate(expected_shape, start=offset):
            got, known = mask.shape[axis], checks.static_int(want)
            if got is not None and known is not None and got != known:
                raise ValueError(
                    f"`{name}` has shape {tuple(mask.shape)}, which does not "
                    f"match the expected shape {_shape_str(expected_shape)} "
                    "(batch, [heads,] queries, keys) for these inputs. "
                    "Build the mask from the same batch it is used with."
                )
            if want is not None and (got is None or known is None) and not symbolic:
                size = ops.shape(mask)[axis]
                traced.append((ops.equal(size, want), [
                    f"`{name}` does not match the expected shape "
                    f"{_shape_str(expected_shape)} (batch, [heads,] queries, keys) for "
                    "these inputs. Build the mask from the same batch it is used with. "
                    "Received: size ", size, f" on axis {axis}, expected ", want, ".",
                ]))
    leading = [("batch", 0, batch_size, "the batch size of the inputs")]
    if rank == 4:
        leading.append(("heads", 1, num_heads, "the layer's num_heads"))
    for label, axis, want, meaning in leading:
        got, known = mask.shape[axis], checks.static_int(want)
        if known is not None and got is not None and got not in (1, known):
            raise ValueError(
                f"`{name}` has shape {tuple(mask.shape)}: its {label} axis "
                f"(axis {axis}) has size {got}, expected {known} ({meaning}) or "
                f"1 (shared). The layout is (batch, queries, keys) or (batch, "
                "heads, queries, keys)."
            )
        if want is not None and (got is None or known is None) and not symbolic:
            size = ops.shape(mask)[axis]
            traced.append((ops.logical_or(ops.equal(size, 1), ops.equal(size, want)), [
                f"`{name}`: its {label} axis (axis {axis}) has size ", size,
                ", expected ", want, f" ({meaning}) or 1 (shared). The layout is "
                "(batch, queries, keys) or (batch, heads, queries, keys).",
            ]))
    if keras.backend.backend() == "tensorflow":
        for condition, message in traced:
            mask = checks.check_in_graph(condition, message, mask)
    if dtype != "bool":
        mask = ops.not_equal(mask, 0)
    return mask


def _shape_str(shape):
    if shape is None:
        return ""
    sizes = [checks.static_int(d) for d in shape]  # "?": known only at run time
    return "(" + ", ".join("?" if d is None else str(d) for d in sizes) + ")"


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

    Blocked logits are replaced (not offset) by the lowest finite float32
    (`MASKED_LOGIT`), so the result is exact zeros for blocked keys whatever
    the visible logits' size (even below -1e9). A
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
    may_have_empty_rows=True, extra_logits=None, cache_layout=False,
):
    """Dense attention core: softmax(Q·Kᵀ/√K [+ extra]) · V.

    Args:
        query: (B, T, H, K).
        key: (B, S, H, K), or with `cache_layout` (B, H, K, S).
        value: (B, S, H, V), or with `cache_layout` (B, H, V, S).
        mask: boolean, broadcastable to (B, H, T, S), True = may attend.
        dropout_layer: optional `keras.layers.Dropout` applied to the
            attention probabilities.
        training: passed to the dropout layer.
        may_have_empty_rows: see `masked_softmax`.
        extra_logits: optional (B, H, T, S) logits added to Q·Kᵀ before the
            scaling (the relative-position term of Huang et al. 2018).
        cache_layout: whether `key` and `value` come in the layout of a
            key/value cache, heads first and positions last (see
            `MultiHeadSelfAttention.init_cache`).

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
    if extra_logits is None:
        # Scaling the (B, T, H, K) query is cheaper than the (B, H, T, S) logits.
        logits = _query_key_products(query * scale, key, cache_layout)
    else:
        logits = _query_key_products(query, key, cache_layout) + ops.cast(
            extra_logits, "float32"
        )
        logits = logits * scale
    probs = masked_softmax(logits, mask, may_have_empty_rows=may_have_empty_rows)
    weights = ops.cast(probs, value.dtype)
    if dropout_layer is not None:
        weights = dropout_layer(weights, training=training)
    return _weighted_values(weights, value, cache_layout), probs


# With `cache_layout` the products are matmuls over one batch axis of B * H,
# a free reshape (each head's keys (K, S) and values (V, S) are contiguous),
# so a decoding step (T = 1) is B * H matrix-vector products that read the
# cache in place. One batch axis rather than two matters on CPU XLA: 6-layer
# d512 decoding step loops (TensorFlow 2.21, L 2,064), ms per token at batch
# 1 / 2 / 8: matmuls over (B, H) 8.0 / 28.8 / 114, multiply-and-reduce
# 8.6 / 14.4 / 61, over B * H 7.8 / 13.8 / 54.


def _merge_batch_heads(x):
    """(B, H, ·, ·) -> (B * H, ·, ·)."""
    dims = ops.shape(x)
    return ops.reshape(x, (dims[0] * dims[1],) + tuple(dims[2:]))


def _query_key_products(query, key, cache_layout):
    """Q·Kᵀ (B, H, T, S) of queries (B, T, H, K) and keys (B, S, H, K), or
    with `cache_layout` keys (B, H, K, S)."""
    if not cache_layout:
        return ops.einsum("bthk,bshk->bhts", query, key)
    batch, heads, _, length = ops.shape(key)
    query = ops.transpose(query, (0, 2, 1, 3))  # (B, H, T, K)
    products = ops.matmul(_merge_batch_heads(query), _merge_batch_heads(key))
    return ops.reshape(products, (batch, heads, ops.shape(query)[2], length))


def _weighted_values(weights, value, cache_layout):
    """Outputs (B, T, H, V) of weights (B, H, T, S) over values (B, S, H, V),
    or with `cache_layout` values (B, H, V, S)."""
    if not cache_layout:
        return ops.einsum("bhts,bshv->bthv", weights, value)
    batch, heads, value_dim, _ = ops.shape(value)
    outputs = ops.matmul(  # (B * H, T, V)
        _merge_batch_heads(weights), ops.swapaxes(_merge_batch_heads(value), -1, -2)
    )
    outputs = ops.reshape(outputs, (batch, heads, ops.shape(weights)[2], value_dim))
    return ops.transpose(outputs, (0, 2, 1, 3))
