"""Attention over key chunks with an online softmax: memory linear in T.

No buffer larger than (B, H, C, C) exists; the gradient recomputes each chunk from the saved
log-sum-exp. Loops and relative logits: docs/guides/relative_attention.md.

Reference:
    Rabe & Staats 2021, "Self-attention Does Not Need O(n²) Memory"; Dao et al. 2022,
    "FlashAttention", section 3.1 and appendix B.
"""

from keras import ops

from keras_attn.layers.attention_masks import AttentionMasks
from keras_attn.layers.attention_ops import MASKED_LOGIT


def chunked_attention(query, key, value, masks=None, chunk_size=256, relative_embeddings=None):
    """softmax(Q·Kᵀ/√K) · V computed chunk by chunk (no (B, H, T, S) buffer).

    Equals the dense core without dropout, to float tolerance; a row with no key gives zeros.

    Args:
        query: (B, T, H, K) float queries.
        key: (B, S, H, K) float keys.
        value: (B, S, H, V) float values.
        masks: an `AttentionMasks` record (None: nothing masked), its attention mask 4D
            (B, 1 or H, T, S); not a cached one (the layers run the dense core on a cache).
        chunk_size: C (int >= 1, checked by the layers), positions per query and key chunk
            (memory O(B·H·C²)).
        relative_embeddings: optional table E, (2M - 1, K) or (H, 2M - 1, K): adds q_t · E[s - t].

    Returns:
        (B, T, H, V) outputs in the value's dtype (logits, softmax, sums in float32).

    Example:
    >>> import numpy as np
    >>> from keras_attn.layers.attention_masks import AttentionMasks
    >>> x = np.random.default_rng(0).normal(size=(1, 6, 2, 4)).astype("float32")
    >>> out = chunked_attention(x, x, x, AttentionMasks(use_causal_mask=True), chunk_size=4)
    >>> tuple(out.shape)
    (1, 6, 2, 4)
    """
    output_dtype = value.dtype
    scale = 1.0 / float(query.shape[-1]) ** 0.5
    # (B, H, n, C, K): heads in front and the sequences cut into chunks.
    query_length, key_length = ops.shape(query)[1], ops.shape(key)[1]
    q = _chunks(ops.cast(query, "float32") * scale, chunk_size)
    k = _chunks(ops.cast(key, "float32"), chunk_size)
    v = _chunks(ops.cast(value, "float32"), chunk_size)
    chunk_mask = _ChunkMask(masks or AttentionMasks(), query_length, key_length, chunk_size)
    if relative_embeddings is not None:
        # A tensor (not the layer's variable) enters the custom gradient.
        relative_embeddings = ops.cast(relative_embeddings, "float32")
    outputs = _attention(q, k, v, relative_embeddings, chunk_mask)
    # (B, H, nq, C, V) -> (B, T, H, V).
    batch, heads, num_chunks, _, value_dim = ops.shape(outputs)
    outputs = ops.reshape(outputs, (batch, heads, num_chunks * chunk_size, value_dim))
    outputs = ops.transpose(outputs, (0, 2, 1, 3))[:, :query_length]
    return ops.cast(outputs, output_dtype)


def _chunks(x, chunk_size):
    """(B, L, H, D) -> (B, H, ceil(L / C), C, D), zero-padded."""
    length = ops.shape(x)[1]
    padding = (-length) % chunk_size
    x = ops.pad(x, ((0, 0), (0, padding), (0, 0), (0, 0)))
    batch, padded, heads, dim = ops.shape(x)
    x = ops.transpose(x, (0, 2, 1, 3))
    return ops.reshape(x, (batch, heads, padded // chunk_size, chunk_size, dim))


class _ChunkMask:
    """The (B|1, H|1, C, C) bool mask of query chunk i against key chunk j, made per chunk."""

    def __init__(self, masks, query_length, key_length, chunk_size):
        self.chunk_size = chunk_size
        self.key_length = key_length
        self.causal = masks.use_causal_mask
        self.cache_index = masks.cache_index
        self.padding = None
        self.attention = None
        if masks.padding_mask is not None:
            padding = ops.pad(masks.padding_mask, ((0, 0), (0, (-key_length) % chunk_size)))
            self.padding = ops.reshape(padding, (ops.shape(padding)[0], -1, chunk_size))
        if masks.attention_mask is not None:
            attention = ops.pad(
                masks.attention_mask,
                (
                    (0, 0),
                    (0, 0),
                    (0, (-query_length) % chunk_size),
                    (0, (-key_length) % chunk_size),
                ),
            )
            batch, heads, rows, columns = ops.shape(attention)
            self.attention = ops.reshape(
                attention,
                (batch, heads, rows // chunk_size, chunk_size, columns // chunk_size, chunk_size),
            )

    def key_chunk_end(self, i, num_key_chunks):
        """1 + the last key chunk query chunk i can see (causal: half the work)."""
        if not self.causal:
            return num_key_chunks
        last_query = i * self.chunk_size + self.chunk_size - 1 + self.cache_index
        return ops.minimum(num_key_chunks, last_query // self.chunk_size + 1)

    def last_diagonal(self):
        """The last chunk diagonal j - i with a visible key (causal)."""
        return (self.chunk_size - 1 + self.cache_index) // self.chunk_size

    def first_query_chunk(self, j):
        """The first query chunk that can see key chunk j."""
        if not self.causal:
            return 0
        return ops.maximum(0, (j * self.chunk_size - self.cache_index) // self.chunk_size)

    def __call__(self, i, j):
        size = self.chunk_size
        key_positions = ops.arange(size, dtype="int32") + j * size
        # Padded keys past S are never visible.
        mask = ops.less(key_positions, ops.cast(self.key_length, "int32"))[None, None, None, :]
        if self.causal:
            query_positions = ops.arange(size, dtype="int32") + i * size + self.cache_index
            causal = ops.greater_equal(query_positions[:, None], key_positions[None, :])
            mask = ops.logical_and(mask, causal[None, None])
        if self.padding is not None:
            padding = ops.take(self.padding, j, axis=1)  # (B, C)
            mask = ops.logical_and(mask, padding[:, None, None, :])
        if self.attention is not None:
            attention = ops.take(ops.take(self.attention, i, axis=2), j, axis=3)
            mask = ops.logical_and(mask, attention)
        return mask


class _ChunkLogits:
    """The scaled (B, H, C, C) logits of query chunk i against key chunk j, and their gradients."""

    def __init__(self, q, k, relative_embeddings, chunk_size):
        self.q, self.k, self.table = q, k, relative_embeddings
        self.chunk_size = chunk_size
        if relative_embeddings is not None:
            self.limit = (relative_embeddings.shape[-2] - 1) // 2
            self.shared = len(relative_embeddings.shape) == 2
            self.heads = "" if self.shared else "h"  # the table's axes: ([H,] 2C - 1, K)

    def _table(self, i, j):
        """(2C - 1) rows of E: the distances (j - i) * C - (C - 1) .. (j - i) * C + C - 1."""
        size = self.chunk_size
        distances = ops.arange(2 * size - 1, dtype="int32") + (j - i) * size - (size - 1)
        rows = ops.clip(distances, -self.limit, self.limit) + self.limit
        return ops.take(self.table, rows, axis=-2)

    def __call__(self, i, j):
        q_i = ops.take(self.q, i, axis=2)
        logits = ops.einsum("bhqk,bhsk->bhqs", q_i, ops.take(self.k, j, axis=2))
        if self.table is None:
            return logits
        by_distance = ops.einsum(f"bhqk,{self.heads}wk->bhqw", q_i, self._table(i, j))
        return logits + _skew(by_distance, self.chunk_size)

    def query_gradient(self, i, j, ds):
        grad = ops.einsum("bhqs,bhsk->bhqk", ds, ops.take(self.k, j, axis=2))
        if self.table is None:
            return grad
        by_distance = _unskew(ds, self.chunk_size)
        return grad + ops.einsum(f"bhqw,{self.heads}wk->bhqk", by_distance, self._table(i, j))

    def table_gradient(self, i, j, ds):
        """dE (2C - 1, [H,] K) of chunk pair (i, j) by (unclamped) distance."""
        q_i = ops.take(self.q, i, axis=2)
        return ops.einsum(f"bhqw,bhqk->w{self.heads}k", _unskew(ds, self.chunk_size), q_i)


def _skew(x, size):
    """(..., C, 2C - 1) logits by distance -> (..., C, C) by key: [r, c] = x[r, c - r + C - 1]."""
    if size == 1:
        return x
    lead = tuple(ops.shape(x)[:-2])
    x = ops.reshape(x, lead + (size * (2 * size - 1),))
    x = x[..., size - 1 : size - 1 + size * (2 * size - 2)]
    return ops.reshape(x, lead + (size, 2 * size - 2))[..., :size]


def _unskew(x, size):
    """The transpose of `_skew`: (..., C, C) by key -> (..., C, 2C - 1) by distance."""
    if size == 1:
        return x
    lead = tuple(ops.shape(x)[:-2])
    x = ops.pad(x, [(0, 0)] * len(lead) + [(0, 0), (0, size - 2)])
    x = ops.reshape(x, lead + (size * (2 * size - 2),))
    x = ops.pad(x, [(0, 0)] * len(lead) + [(size - 1, 1)])
    return ops.reshape(x, lead + (size, 2 * size - 1))


def _attention(q, k, v, relative_embeddings, chunk_mask):
    """Chunked q, k, v [, E] -> (B, H, nq, C, V), with the gradient of `_backward`."""

    def forward(*tensors):
        q, k, v = tensors[:3]
        logits = _ChunkLogits(q, k, tensors[3] if len(tensors) > 3 else None, chunk_mask.chunk_size)
        outputs, logsumexp = _forward(logits, v, chunk_mask)

        def gradient(*args, upstream=None):
            if upstream is None:
                (upstream,) = args
            return _backward(logits, v, outputs, logsumexp, upstream, chunk_mask)

        return outputs, gradient

    tensors = (q, k, v) if relative_embeddings is None else (q, k, v, relative_embeddings)
    return ops.custom_gradient(forward)(*tensors)


def _serial_map(f, n, zeros):
    """`f(i)` for i = 0 .. n - 1 stacked, one at a time; `zeros`: `f`'s output structure."""

    def step(carry, i):
        outputs = f(i)
        return outputs, outputs

    return ops.scan(step, zeros, ops.arange(n, dtype="int32"), unroll=1)[1]


def _forward(logits, v, chunk_mask):
    """Online softmax per query chunk: (outputs (B, H, nq, C, V), log-sum-exp (B, H, nq, C))."""
    num_key_chunks = ops.shape(v)[2]
    # One query chunk's (B, H, C) row sums and (B, H, C, V) outputs, zero.
    shape = tuple(ops.shape(logits.q)[:2]) + (chunk_mask.chunk_size,)
    zero_sums = ops.zeros(shape, "float32")
    zero_outputs = ops.zeros(shape + (ops.shape(v)[-1],), "float32")

    def query_chunk(i):
        def key_chunk(j, carry):
            maximum, total, accumulated = carry
            mask = chunk_mask(i, j)
            scores = ops.where(mask, logits(i, j), MASKED_LOGIT)
            new_maximum = ops.maximum(maximum, ops.max(scores, axis=-1))
            correction = ops.exp(maximum - new_maximum)
            probabilities = ops.where(mask, ops.exp(scores - new_maximum[..., None]), 0.0)
            total = total * correction + ops.sum(probabilities, axis=-1)
            accumulated = accumulated * correction[..., None] + ops.einsum(
                "bhqs,bhsv->bhqv", probabilities, ops.take(v, j, axis=2)
            )
            return new_maximum, total, accumulated

        init = (ops.full(shape, MASKED_LOGIT, "float32"), zero_sums, zero_outputs)
        maximum, total, accumulated = ops.fori_loop(
            0, chunk_mask.key_chunk_end(i, num_key_chunks), key_chunk, init
        )
        seen = ops.greater(total, 0.0)
        safe_total = ops.where(seen, total, 1.0)
        outputs = ops.where(seen[..., None], accumulated / safe_total[..., None], 0.0)
        logsumexp = ops.where(seen, maximum + ops.log(safe_total), 0.0)
        return outputs, logsumexp

    outputs, logsumexp = _serial_map(query_chunk, ops.shape(logits.q)[2], (zero_outputs, zero_sums))
    # map stacks on a new first axis: (nq, B, H, C, ...) -> (B, H, nq, C, ...).
    return ops.moveaxis(outputs, 0, 2), ops.moveaxis(logsumexp, 0, 2)


def _backward(logits, v, outputs, logsumexp, upstream, chunk_mask):
    """Gradients of q, k, v (and E), recomputing P = exp(logits - lse) (FlashAttention, app. B)."""
    q, k = logits.q, logits.k
    upstream = ops.cast(upstream, "float32")
    # rowsum(dO ∘ O): (B, H, nq, C).
    delta = ops.sum(upstream * outputs, axis=-1)
    num_query_chunks, num_key_chunks = ops.shape(q)[2], ops.shape(k)[2]

    def score_gradient(i, j):
        do_i = ops.take(upstream, i, axis=2)
        reference = ops.take(logsumexp, i, axis=2)[..., None]
        probabilities = ops.where(chunk_mask(i, j), ops.exp(logits(i, j) - reference), 0.0)
        dp = ops.einsum("bhqv,bhsv->bhqs", do_i, ops.take(v, j, axis=2))
        ds = probabilities * (dp - ops.take(delta, i, axis=2)[..., None])
        return do_i, probabilities, ds

    def query_gradient(i):
        def key_chunk(j, dq):
            return dq + logits.query_gradient(i, j, score_gradient(i, j)[2])

        end = chunk_mask.key_chunk_end(i, num_key_chunks)
        return ops.fori_loop(0, end, key_chunk, ops.zeros_like(ops.take(q, 0, axis=2)))

    def key_value_gradient(j):
        def query_chunk(i, carry):
            do_i, probabilities, ds = score_gradient(i, j)
            return (
                carry[0] + ops.einsum("bhqs,bhqk->bhsk", ds, ops.take(q, i, axis=2)),
                carry[1] + ops.einsum("bhqs,bhqv->bhsv", probabilities, do_i),
            )

        first = chunk_mask.first_query_chunk(j)
        return ops.fori_loop(first, num_query_chunks, query_chunk, key_value_zeros)

    key_value_zeros = (
        ops.zeros_like(ops.take(k, 0, axis=2)),
        ops.zeros_like(ops.take(v, 0, axis=2)),
    )
    dq = _serial_map(query_gradient, num_query_chunks, ops.zeros_like(ops.take(q, 0, axis=2)))
    dk, dv = _serial_map(key_value_gradient, num_key_chunks, key_value_zeros)
    grads = tuple(ops.moveaxis(g, 0, 2) for g in (dq, dk, dv))
    if logits.table is not None:
        grads += (_table_gradient(logits, score_gradient, chunk_mask, num_query_chunks),)
    return grads


def _table_gradient(logits, score_gradient, chunk_mask, num_query_chunks):
    """dE one chunk diagonal d = j - i at a time, summed into the table's rows."""
    size, table = chunk_mask.chunk_size, logits.table
    num_key_chunks = ops.shape(logits.k)[2]
    num_diagonals = num_query_chunks + num_key_chunks - 1
    per_head = () if logits.shared else (table.shape[0],)
    zeros = ops.zeros((2 * size - 1,) + per_head + (table.shape[-1],), "float32")

    def diagonal(m):
        d = m - (num_query_chunks - 1)
        first = ops.maximum(0, -d)
        end = ops.minimum(num_query_chunks, num_key_chunks - d)
        if chunk_mask.causal:
            end = ops.where(d > chunk_mask.last_diagonal(), first, end)

        def pair(i, total):
            return total + logits.table_gradient(i, i + d, score_gradient(i, i + d)[2])

        return ops.fori_loop(first, end, pair, zeros)

    per_diagonal = _serial_map(diagonal, num_diagonals, zeros)
    # Row r of diagonal m is the distance (m - (nq - 1)) * C + r - (C - 1).
    distances = (ops.arange(num_diagonals, dtype="int32")[:, None] - (num_query_chunks - 1)) * size
    distances = distances + ops.arange(2 * size - 1, dtype="int32")[None, :] - (size - 1)
    rows = ops.clip(distances, -logits.limit, logits.limit) + logits.limit
    flat = ops.reshape(per_diagonal, (-1,) + tuple(per_diagonal.shape[2:]))
    summed = ops.segment_sum(flat, ops.reshape(rows, (-1,)), num_segments=table.shape[-2])
    return summed if logits.shared else ops.transpose(summed, (1, 0, 2))
