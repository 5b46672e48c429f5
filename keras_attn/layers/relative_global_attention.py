import keras
from keras import ops

from keras_attn import checks
from keras_attn.layers import attention_ops
from keras_attn.layers.attention_ops import dim
from keras_attn.layers.chunked_attention import chunked_attention
from keras_attn.layers.multi_head_self_attention import MultiHeadSelfAttention


@keras.saving.register_keras_serializable(package="keras_attn")
class RelativeGlobalAttention(MultiHeadSelfAttention):
    """Multi-head self-attention with learned relative-position logits (Huang et al. 2018).

    softmax((Q·Kᵀ + Srel)/√key_dim)·V, Srel[t, s] = q_t · E[s - t] with one embedding per distance
    (key minus query, clamped to ±(M - 1)), made by the Music Transformer's skewing (section 3.4;
    the table, caches and the chunked core: docs/guides/relative_attention.md).

    Args:
        num_heads: H, number of attention heads (positive int).
        key_dim: K, size of each head's query, key and relative embedding.
        max_relative_position: M (positive int): distances -(M - 1) .. M - 1 get an embedding.
        heads_share_relative_embedding: True: one (2M - 1, K) table; False (default): (H, 2M - 1, K).
        **kwargs: those of `MultiHeadSelfAttention` (`chunk_size`: memory linear in T) and `Layer`.

    Call arguments:
        As `MultiHeadSelfAttention.call`; distances count from the absolute `cache_index`.

    Returns:
        As `MultiHeadSelfAttention`: outputs (B, T, output_dim), then scores and cache if asked.

    Raises:
        ValueError: on a bad `max_relative_position` or `heads_share_relative_embedding`.

    Example:
    >>> import keras
    >>> from keras_attn.layers import RelativeGlobalAttention
    >>> layer = RelativeGlobalAttention(num_heads=2, key_dim=8, max_relative_position=16)
    >>> tuple(layer(keras.random.normal((2, 5, 16)), use_causal_mask=True).shape)
    (2, 5, 16)

    Reference:
        Huang et al. 2018, "Music Transformer", section 3.4; Shaw et al. 2018, section 3.
    """

    _fused_core_fits = False  # the relative logits are not a mask: our cores add them

    def __init__(
        self,
        num_heads,
        key_dim,
        max_relative_position,
        heads_share_relative_embedding=False,
        **kwargs,
    ):
        super().__init__(num_heads=num_heads, key_dim=key_dim, **kwargs)
        checks.check_positive_int(self, "max_relative_position", max_relative_position)
        shared = heads_share_relative_embedding
        checks.check_bool(self, "heads_share_relative_embedding", shared, "True = one table")
        self.max_relative_position = max_relative_position
        self.heads_share_relative_embedding = heads_share_relative_embedding

    def _build_attention_core(self, inputs_shape):
        num_distances = 2 * self.max_relative_position - 1
        shape = (num_distances, self.key_dim)
        if not self.heads_share_relative_embedding:
            shape = (self.num_heads,) + shape
        # Row r: the distance r - (M - 1). Not autocast: float32 relative logits (see the guide).
        self.relative_embeddings = self.add_weight(
            name="relative_embeddings",
            shape=shape,
            initializer=keras.initializers.RandomNormal(stddev=self.key_dim**-0.5),
            autocast=False,
        )

    def _extra_logits(self, query, key_length, masks):
        """Srel (B, H, T, S) in float32: product with the table, then skewing (none for T = 1)."""
        query_length = dim(query, 1)
        # Column j: the distance j - (cache_index + T - 1), key j seen from the last query; its
        # table row is the distance clamped to +-(M - 1), plus M - 1. Causal calls need the
        # distances <= 0 only: W = S columns (the rest reach masked keys).
        width = key_length if masks.use_causal_mask else key_length + query_length - 1
        limit = self.max_relative_position - 1
        first_row = limit - (query_length - 1) - ops.cast(masks.cache_index, "int32")
        rows = ops.clip(ops.add(attention_ops.positions(width), first_row), 0, 2 * limit)
        table = ops.cast(ops.take(self.relative_embeddings, rows, axis=-2), "float32")
        # (B, T, H, K) x (H, W, K) -> (B, H, T, W) (W + 1 with the skew's padding row below),
        # the logits' layout: one einsum, with neither the table transposed nor broadcast to
        # the batch (TF 2.21's oneDNN batch matmul breaks on a broadcast operand, see the
        # guide; the einsum has none).
        product = f"bthk,{'' if self.heads_share_relative_embedding else 'h'}wk->bhtw"
        query = ops.cast(query, "float32")
        if checks.static_int(query_length) == 1:
            # One query (a decoding step): W = S and column j is already key j's distance, so
            # there is nothing to skew (nor a padding row to copy the table for).
            return ops.einsum(product, query, table)
        # A zero row in front gives the skew's padding column as part of the product.
        table = ops.pad(table, [[0, 0]] * (len(table.shape) - 2) + [[1, 0], [0, 0]])
        return skew_padded(ops.einsum(product, query, table), key_length)

    def _attend_chunked(self, query, key, value, masks, chunk_size):
        return chunked_attention(
            query, key, value, masks, chunk_size, relative_embeddings=self.relative_embeddings
        )


def skew_padded(padded_logits, key_length=None):
    """The skewing of Huang et al. 2018 (see the guide): (..., T, W + 1) logits by distance, column
    j + 1 the distance j - (T - 1), column 0 zero (a zero table row) -> (..., T, S <= W) by key:
    out[..., t, s] = padded_logits[..., t, s - t + T]; entries past column W are unspecified."""
    rank = len(padded_logits.shape)
    # The leading sizes static where known and the first inferred (-1): constant shapes.
    lead = tuple(-1 if a == 0 else dim(padded_logits, a) for a in range(rank - 2))
    length = dim(padded_logits, -2)
    width = dim(padded_logits, -1) - 1
    if key_length is None:
        key_length = width
    flat = ops.reshape(padded_logits, lead + (length * (width + 1),))
    # Dropping the first T entries shifts row t left by t places.
    out = ops.reshape(flat[..., length:], lead + (length, width))
    keys = checks.static_int(key_length)
    if keys is None or keys != checks.static_int(width):
        out = out[..., :key_length]
    return out
