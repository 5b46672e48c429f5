"""Masks, the masked softmax and the dense attention core the attention
layers share.

Everything here uses `keras.ops` only, so it runs on every Keras backend.
One mask convention holds everywhere: a boolean mask with `True` meaning
"this query may attend to this key" (or, for a padding mask, "this position
is a real token").
"""

import keras
from keras import ops

from keras_attn import keras_internals

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


def check_mask(mask, name, ranks, shape, batch_size=None, num_heads=None):
    """Returns a user mask as a boolean tensor (an integer mask read as
    `mask != 0`, the 0/1 masks tokenizers make), after its static checks.

    Args:
        mask: the mask given, or None (returned as it is).
        name: its argument name, for the messages.
        ranks: a tuple of the ranks allowed.
        shape: the expected sizes of its trailing axes (None = any).
        batch_size, num_heads: for attention masks, (B, T, S) or
            (B, H, T, S): the sizes the leading axes must have, or 1
            (shared); None = any.

    Raises:
        ValueError: if the mask is not boolean or integer (a float mask is
            usually additive, of the opposite polarity), or its rank or a
            known size differs from the expected ones.
    """
    if mask is None:
        return None
    if not hasattr(mask, "dtype") or not hasattr(mask, "shape"):
        mask = ops.convert_to_tensor(mask)
    dtype, got = keras.backend.standardize_dtype(mask.dtype), tuple(mask.shape)
    if dtype != "bool" and "int" not in dtype:
        fix = (
            " Additive (0 = visible): pass `mask == 0`; 0/1 floats: `mask > 0.5`."
            if "float" in dtype
            else ""
        )
        raise ValueError(
            f"`{name}` must be boolean (True = may attend / real token) or integer "
            f"(0 = blocked / padding). Received a mask of dtype {dtype}.{fix}"
        )
    wanted = [(batch_size, num_heads)[: rank - len(shape)] + tuple(shape) for rank in ranks]
    shared = len(got) - len(shape)  # leading (batch, heads) axes: their size or 1

    def fits(want):
        return len(got) == len(want) and all(
            None in (g, w) or g == w or (g == 1 and axis < shared)
            for axis, (g, w) in enumerate(zip(got, want))
        )

    def show(want):
        lead = len(want) - len(shape)
        return (
            "("
            + ", ".join(
                "?" if d is None else f"{d} or 1" if i < lead else str(d)
                for i, d in enumerate(want)
            )
            + ")"
        )

    if not any(map(fits, wanted)):
        layouts = " or ".join(map(show, wanted))
        raise ValueError(
            f"`{name}` must have shape {layouts} for these inputs. Received: "
            f"{name}.shape={got}. Build the mask from the inputs it is used with."
        )
    return mask if dtype == "bool" else ops.not_equal(mask, 0)


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
    query_positions = ops.arange(query_length, dtype="int32") + ops.cast(cache_index, "int32")
    key_positions = ops.arange(key_length, dtype="int32")
    return ops.greater_equal(ops.expand_dims(query_positions, 1), ops.expand_dims(key_positions, 0))


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
    query,
    key,
    value,
    mask=None,
    dropout_layer=None,
    training=None,
    may_have_empty_rows=True,
    extra_logits=None,
    cache_layout=False,
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
        logits = _query_key_products(query, key, cache_layout) + ops.cast(extra_logits, "float32")
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
