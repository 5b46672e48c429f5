"""Masks, the masked softmax and the dense attention core (boolean masks, True = may attend)."""

import keras
import numpy as np
from keras import ops

from keras_attn import keras_internals

# Blocked logits are replaced by the lowest finite float32: finite (no NaN in the softmax or its
# gradient) and below every real logit, so a blocked key gets exactly zero weight (a -1e9 fill hands
# it all the weight when the visible logits are below -1e9).
MASKED_LOGIT = -3.4028234663852886e38


def dim(x, axis):
    """The size of `x` along `axis`: a Python int when static, else a scalar tensor.

    Static sizes keep shapes constant in TensorFlow's graph (no Shape -> StridedSlice chain
    for a served step to run) and are what XLA and JAX want.
    """
    return x.shape[axis] if x.shape[axis] is not None else ops.shape(x)[axis]


def get_implicit_mask(x):
    """Returns the Keras implicit mask attached to `x` (shape `x.shape[:-1]`), or `None`."""
    return keras_internals.get_mask(x)


def check_mask(mask, name, ranks, shape, batch_size=None, num_heads=None):
    """A user mask (or None) checked against `ranks` and sizes, as bool (an int one: `!= 0`),
    in the longest of `ranks`: an attention mask (B, T, S) comes back (B, 1, T, S)."""
    if mask is None:
        return None
    if not hasattr(mask, "dtype") or not hasattr(mask, "shape"):
        mask = ops.convert_to_tensor(mask)
    dtype, got = keras.backend.standardize_dtype(mask.dtype), tuple(mask.shape)
    if dtype != "bool" and "int" not in dtype:
        fix = " Additive (0 = visible): pass `mask == 0`; 0/1 floats: `mask > 0.5`."
        raise ValueError(
            f"`{name}` must be boolean (True = may attend / real token) or integer "
            f"(0 = blocked / padding). Received a mask of dtype {dtype}."
            + (fix if "float" in dtype else "")
        )
    leading = len(got) - len(shape)  # (batch, heads) axes: their size, or 1
    wanted = (batch_size, num_heads)[:leading] + tuple(shape)
    if len(got) not in ranks or not all(
        None in (g, w) or g == w or (g == 1 and axis < leading)
        for axis, (g, w) in enumerate(zip(got, wanted))
    ):
        layouts = " or ".join(
            _shape_text((batch_size, num_heads)[: rank - len(shape)], shape) for rank in ranks
        )
        raise ValueError(
            f"`{name}` must have shape {layouts} for these inputs. Received: "
            f"{name}.shape={got}. Build the mask from the inputs it is used with."
        )
    mask = mask if dtype == "bool" else ops.not_equal(mask, 0)
    return mask[:, None] if len(got) < max(ranks) else mask


def _shape_text(leading, trailing):
    """A mask layout for the messages: "(2 or 1, ?, 5, 5)"."""
    dims = ["?" if d is None else f"{d} or 1" for d in leading]
    return "(" + ", ".join(dims + ["?" if d is None else str(d) for d in trailing]) + ")"


def positions(length):
    """(length,) int32 `0 .. length - 1`: a constant (no graph node to run) for a Python int."""
    if isinstance(length, int):
        return np.arange(length, dtype="int32")
    return ops.arange(length, dtype="int32")


def causal_mask(query_length, key_length, cache_index=0):
    """(T, S) bool lower-triangular mask: query `i` sees key `j` when `j <= cache_index + i`."""
    query_positions = ops.add(positions(query_length)[:, None], ops.cast(cache_index, "int32"))
    return ops.greater_equal(query_positions, positions(key_length)[None, :])


def masked_softmax(logits, mask=None, axis=-1, may_have_empty_rows=True):
    """Softmax over `axis` in float32; blocked keys get exactly 0, a row with none visible 0s.

    `may_have_empty_rows=False` (every row keeps a visible key) skips zeroing empty rows.
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
    """`ops.softmax` without its sigmoid warning on an axis of size 1 (a single key)."""
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
    return_probabilities=True,
):
    """Dense attention core: softmax(Q·Kᵀ/√K [+ extra]) · V.

    Runs `keras.ops.dot_product_attention` where it is faster and fits (guide: attention_layers).

    Args:
        query: (B, T, H, K).
        key: (B, S, H, K), or with `cache_layout` (B, H, K, S).
        value: (B, S, H, V), or with `cache_layout` (B, H, V, S).
        mask: boolean, broadcastable to (B, H, T, S), True = may attend.
        dropout_layer: optional `keras.layers.Dropout` applied to the probabilities.
        training: passed to the dropout layer.
        may_have_empty_rows: False when every query sees a key (see `masked_softmax`).
        extra_logits: optional (B, H, T, S) logits added to Q·Kᵀ before the scaling.
        cache_layout: whether `key` and `value` come in a key/value cache's layout.
        return_probabilities: whether the probabilities are returned.

    Returns:
        `(outputs, probabilities)`: (B, T, H, V) in the value's dtype (zeros for a query that
        sees no key); (B, H, T, S) float32 probabilities before dropout, or None.

    Example:
    >>> x = keras.ops.ones((2, 3, 4, 8))
    >>> outputs, probs = scaled_dot_product_attention(x, x, x, causal_mask(3, 3)[None, None])
    >>> tuple(outputs.shape), tuple(probs.shape)
    ((2, 3, 4, 8), (2, 4, 3, 3))

    Reference: Vaswani et al., 2017, "Attention is all you need" (arXiv:1706.03762).
    """
    scale = 1.0 / float(query.shape[-1]) ** 0.5
    dropout_active = dropout_layer is not None and training and dropout_layer.rate > 0
    fused = not (return_probabilities or dropout_active or cache_layout)
    if fused and extra_logits is None and _use_fused(query, value):
        return _fused_attention(query, key, value, mask, scale, may_have_empty_rows), None
    # The logits are made in float32 (the softmax needs them so; a 16-bit Q·Kᵀ moves sharp
    # weights by percents), from the cast (B, T, H, K) operands, cheaper than the product.
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
    outputs = _weighted_values(weights, value, cache_layout)
    return outputs, probs if return_probabilities else None


def _fused_op_is_faster():
    """Whether this backend has a faster fused kernel (torch; JAX off CPU)."""
    if keras.backend.backend() == "jax":
        return not keras.distribution.list_devices()[0].startswith("cpu")
    return keras.backend.backend() == "torch"


def fused_op_is_memory_linear():
    """Whether the fused op keeps memory linear in the length (torch), so no chunking is needed."""
    return keras.backend.backend() == "torch"


def _use_fused(query, value):
    """Whether the fused op runs: faster on this backend, K = V (JAX's op) and one dtype."""
    return (
        query.shape[-1] == value.shape[-1]
        and keras.backend.standardize_dtype(query.dtype)
        == keras.backend.standardize_dtype(value.dtype)
        and _fused_op_is_faster()
    )


def _fused_attention(query, key, value, mask, scale, may_have_empty_rows):
    """`ops.dot_product_attention` (B, T, H, V), zeroed for a query that sees no key."""
    outputs = ops.dot_product_attention(query, key, value, mask=mask, scale=scale)
    if mask is None or not may_have_empty_rows:
        return outputs
    for _ in range(4 - len(mask.shape)):
        mask = ops.expand_dims(mask, 0)
    row_has_key = ops.any(mask, axis=-1, keepdims=True)  # (B | 1, H | 1, T | 1, 1)
    return ops.where(ops.transpose(row_has_key, (0, 2, 1, 3)), outputs, ops.zeros_like(outputs))


# With `cache_layout` the products are matmuls over one batch axis of B * H (a free reshape: each
# head's keys (K, S) and values (V, S) are contiguous), so a decoding step is B * H matrix-vector
# products that read the cache in place; one batch axis rather than (B, H) is faster on CPU XLA.


# The sizes of these reshapes are static where known and B inferred (-1): constant shapes.
def _merge_batch_heads(x):
    """(B, H, ·, ·) -> (B * H, ·, ·)."""
    return ops.reshape(x, (-1, dim(x, 2), dim(x, 3)))


def _query_key_products(query, key, cache_layout):
    """Q·Kᵀ (B, H, T, S) of queries (B, T, H, K) and keys (B, S, H, K) or (B, H, K, S)."""
    if not cache_layout:
        return ops.einsum("bthk,bshk->bhts", query, key)
    query = ops.transpose(query, (0, 2, 1, 3))  # (B, H, T, K)
    products = ops.matmul(_merge_batch_heads(query), _merge_batch_heads(key))
    return ops.reshape(products, (-1, dim(key, 1), dim(query, 2), dim(key, 3)))


def _weighted_values(weights, value, cache_layout):
    """Outputs (B, T, H, V) of weights (B, H, T, S) over values (B, S, H, V) or (B, H, V, S)."""
    if not cache_layout:
        return ops.einsum("bhts,bshv->bthv", weights, value)
    outputs = ops.matmul(  # (B * H, T, V)
        _merge_batch_heads(weights), ops.swapaxes(_merge_batch_heads(value), -1, -2)
    )
    outputs = ops.reshape(outputs, (-1, dim(value, 1), dim(weights, 2), dim(value, 2)))
    return ops.transpose(outputs, (0, 2, 1, 3))
