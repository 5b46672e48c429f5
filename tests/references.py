"""Naive NumPy references the layers are checked against.

Written for clarity, with explicit loops over batch and heads, so they share
no code (and no bug) with the library.
"""

import numpy as np


def softmax_attention(query, key, value, mask=None, extra_logits=None):
    """Attention of one head, the textbook way.

    Args:
        query: (T, K); key: (S, K); value: (S, V).
        mask: (T, S) bool, True = may attend; None = all visible.
        extra_logits: (T, S) added to Q·Kᵀ before the 1/√K scaling.

    Returns:
        (outputs (T, V), probabilities (T, S)); rows with no visible key
        are zero.
    """
    logits = query @ key.T
    if extra_logits is not None:
        logits = logits + extra_logits
    logits = logits / np.sqrt(query.shape[-1])
    if mask is None:
        mask = np.ones(logits.shape, bool)
    probs = np.zeros_like(logits, dtype=np.float64)
    for t in range(logits.shape[0]):
        visible = mask[t]
        if visible.any():
            row = np.exp(logits[t][visible] - logits[t][visible].max())
            probs[t][visible] = row / row.sum()
    return probs @ value, probs


def dense_mask(
    batch,
    query_length,
    key_length,
    padding_mask=None,
    attention_mask=None,
    causal=False,
    cache_index=0,
    num_heads=1,
):
    """The full (B, H, T, S) boolean mask, built element by element."""
    mask = np.ones((batch, num_heads, query_length, key_length), bool)
    for b in range(batch):
        for h in range(num_heads):
            for t in range(query_length):
                for s in range(key_length):
                    ok = True
                    if padding_mask is not None:
                        ok &= bool(padding_mask[b, s])
                    if attention_mask is not None:
                        am = attention_mask[b, h] if attention_mask.ndim == 4 else attention_mask[b]
                        ok &= bool(am[t, s])
                    if causal:
                        ok &= s <= t + cache_index
                    mask[b, h, t, s] = ok
    return mask


def self_attention_projections(layer, x):
    """Queries, keys and values of a MultiHeadSelfAttention-family layer,
    computed from its weights: (B, T, H, K), (B, T, H, K), (B, T, H, V)."""
    kernel = np.asarray(layer.query_key_value_dense.kernel, np.float64)
    qkv = np.asarray(x, np.float64) @ kernel
    if layer.use_bias:
        qkv = qkv + np.asarray(layer.query_key_value_dense.bias, np.float64)
    h, k = layer.num_heads, layer.key_dim
    qkv = qkv.reshape(x.shape[0], x.shape[1], h, -1)
    return qkv[..., :k], qkv[..., k : 2 * k], qkv[..., 2 * k :]


def output_projection(layer, heads):
    """(B, T, H, V) head outputs -> (B, T, D) through the output dense."""
    b, t = heads.shape[:2]
    y = heads.reshape(b, t, -1) @ np.asarray(layer.output_dense.kernel, np.float64)
    if layer.use_bias:
        y = y + np.asarray(layer.output_dense.bias, np.float64)
    return y


def multi_head_self_attention(layer, x, mask):
    """Reference forward pass of a MultiHeadSelfAttention layer.

    Args:
        layer: a built MultiHeadSelfAttention.
        x: (B, T, D) inputs.
        mask: (B, H, T, T) bool.

    Returns:
        (outputs (B, T, D), probabilities (B, H, T, T)).
    """
    q, k, v = self_attention_projections(layer, x)
    b, t, h = q.shape[:3]
    heads = np.zeros(q.shape[:3] + (v.shape[-1],))
    probs = np.zeros((b, h, t, t))
    for i in range(b):
        for j in range(h):
            heads[i, :, j], probs[i, j] = softmax_attention(
                q[i, :, j], k[i, :, j], v[i, :, j], mask[i, j]
            )
    return output_projection(layer, heads), probs


def dense(layer, x):
    """x @ kernel + bias of a keras Dense sublayer, in float64."""
    y = np.asarray(x, np.float64) @ np.asarray(layer.kernel, np.float64)
    if layer.use_bias:
        y = y + np.asarray(layer.bias, np.float64)
    return y


def multi_head_cross_attention(layer, query, value, mask):
    """Reference forward pass of MultiHeadAttention (key = value).

    Args:
        layer: a built MultiHeadAttention.
        query: (B, T, D); value: (B, S, Dv).
        mask: (B, H, T, S) bool.

    Returns:
        (outputs (B, T, D), probabilities (B, H, T, S)).
    """
    b, t = query.shape[:2]
    s = value.shape[1]
    h, k = layer.num_heads, layer.key_dim
    q = dense(layer.query_dense, query).reshape(b, t, h, k)
    kk = dense(layer.key_dense, value).reshape(b, s, h, k)
    v = dense(layer.value_dense, value).reshape(b, s, h, -1)
    heads = np.zeros((b, t, h, v.shape[-1]))
    probs = np.zeros((b, h, t, s))
    for i in range(b):
        for j in range(h):
            heads[i, :, j], probs[i, j] = softmax_attention(
                q[i, :, j], kk[i, :, j], v[i, :, j], mask[i, j]
            )
    return dense(layer.output_dense, heads.reshape(b, t, -1)), probs


def layer_norm(layer, x):
    """keras LayerNormalization over the last axis, in float64."""
    mean = x.mean(-1, keepdims=True)
    var = x.var(-1, keepdims=True)
    y = (x - mean) / np.sqrt(var + layer.epsilon)
    return y * np.asarray(layer.gamma, np.float64) + np.asarray(layer.beta, np.float64)


def transformer_encoder(block, x, mask):
    """Reference forward pass of a TransformerEncoder with the default
    self-attention and ReLU feed-forward network (inference: no dropout).

    Args:
        block: a built TransformerEncoder.
        x: (B, T, D); mask: (B, H, T, T) bool.
    """
    x = np.asarray(x, np.float64)

    def attention(h):
        return multi_head_self_attention(block._self_attention_layer, h, mask)[0]

    def feedforward(h):
        hidden = np.maximum(dense(block._feedforward_intermediate, h), 0.0)
        return dense(block._feedforward_output, hidden)

    for sublayer, norm in (
        (attention, block._self_attention_norm),
        (feedforward, block._feedforward_norm),
    ):
        if block.normalize_first:
            x = x + sublayer(layer_norm(norm, x))
        else:
            x = layer_norm(norm, x + sublayer(x))
    return x


def relative_position_embeddings(
    table, query_length, key_length, max_relative_position, cache_index=0
):
    """The (T, S, K) tensor of Shaw et al. 2018, by explicit gather.

    Args:
        table: (2M - 1, K); row r is the embedding of distance r - (M - 1).
        query_length, key_length: T and S.
        max_relative_position: M; distances are clipped to ±(M - 1).
        cache_index: absolute position of query 0.

    Returns:
        (T, S, K): entry [t, s] is the embedding of the distance
        s - (cache_index + t), clipped.
    """
    limit = max_relative_position - 1
    out = np.zeros((query_length, key_length, table.shape[-1]))
    for t in range(query_length):
        for s in range(key_length):
            distance = min(max(s - (cache_index + t), -limit), limit)
            out[t, s] = table[distance + limit]
    return out


def relative_global_attention(layer, x, mask):
    """Reference forward pass of a RelativeGlobalAttention layer: the
    relative logits q_t · E[s - t] from the explicit (T, S, K) gather,
    added to Q·Kᵀ before the scaling.

    Args:
        layer: a built RelativeGlobalAttention.
        x: (B, T, D) inputs; positions are their indices.
        mask: (B, H, T, T) bool.

    Returns:
        (outputs (B, T, D), probabilities (B, H, T, T)).
    """
    q, k, v = self_attention_projections(layer, x)
    b, t, h = q.shape[:3]
    embeddings = np.asarray(layer.relative_embeddings, np.float64)
    if embeddings.ndim == 2:
        embeddings = np.broadcast_to(embeddings, (h,) + embeddings.shape)
    heads = np.zeros(q.shape[:3] + (v.shape[-1],))
    probs = np.zeros((b, h, t, t))
    for j in range(h):
        relative = relative_position_embeddings(embeddings[j], t, t, layer.max_relative_position)
        for i in range(b):
            extra = np.einsum("tk,tsk->ts", q[i, :, j], relative)
            heads[i, :, j], probs[i, j] = softmax_attention(
                q[i, :, j], k[i, :, j], v[i, :, j], mask[i, j], extra_logits=extra
            )
    return output_projection(layer, heads), probs


def local_block_mask(spatial_shape, block_size, memory_flange, causal):
    """The (T, T) mask of local block attention (Parmar et al. 2018), pair
    by pair, over raster indices of a sequence (T,) or an image (height,
    width) with T = height * width. Blocks are anchored at position 0.

    1D, block b starting at s0 = (q // b) * b, flange f: key k is visible
    when s0 - f <= k < s0 + b + f; causal: s0 - f <= k <= q.
    2D, block (bh, bw) with top-left (r0, c0), flange (fh, fw): non-causal,
    the block grown by fh rows and fw columns on each side; causal (block
    raster order), the fh rows above over columns [c0 - fw, c0 + bw + fw),
    the fw columns left of the block in its rows, and the block's pixels up
    to the query in raster order inside the block.
    """
    length = int(np.prod(spatial_shape))
    mask = np.zeros((length, length), bool)
    if len(spatial_shape) == 1:
        b, f = block_size, memory_flange
        for q in range(length):
            start = (q // b) * b
            for k in range(length):
                if causal:
                    mask[q, k] = start - f <= k <= q
                else:
                    mask[q, k] = start - f <= k < start + b + f
        return mask
    _, width = spatial_shape
    (bh, bw), (fh, fw) = block_size, memory_flange
    for q in range(length):
        qr, qc = divmod(q, width)
        r0, c0 = (qr // bh) * bh, (qc // bw) * bw
        for k in range(length):
            kr, kc = divmod(k, width)
            if not causal:
                mask[q, k] = (r0 - fh <= kr < r0 + bh + fh) and (c0 - fw <= kc < c0 + bw + fw)
            elif r0 - fh <= kr < r0:
                mask[q, k] = c0 - fw <= kc < c0 + bw + fw
            elif r0 <= kr < r0 + bh:
                if c0 - fw <= kc < c0:
                    mask[q, k] = True
                elif c0 <= kc < c0 + bw:
                    mask[q, k] = (kr - r0) * bw + (kc - c0) <= (qr - r0) * bw + (qc - c0)
    return mask
