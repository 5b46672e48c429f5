import keras
from keras import ops

from keras_attn import checks
from keras_attn.layers.chunked_attention import chunked_attention
from keras_attn.layers.multi_head_self_attention import MultiHeadSelfAttention


def _dim(x, axis):
    # Static size when known (XLA and JAX want static shapes), else dynamic.
    static = x.shape[axis]
    return static if static is not None else ops.shape(x)[axis]


@keras.saving.register_keras_serializable(package="keras_attn")
class RelativeGlobalAttention(MultiHeadSelfAttention):
    """Multi-head self-attention with learned relative-position logits.

    Each head adds to its content logits Q·Kᵀ a relative term Srel, where
    Srel[t, s] = q_t · E[s - t] and E holds one learned embedding per
    relative distance; distances beyond ±(`max_relative_position` - 1) share
    the outermost embedding. The logits are then scaled by 1/√key_dim,
    masked and normalised as in `MultiHeadSelfAttention`:
    softmax((Q·Kᵀ + Srel)/√key_dim)·V.

    Srel is computed as in the Music Transformer: one matmul of the queries
    against a (W, K) table of embeddings (W = the number of distances that
    occur, gathered from E with clamped indices), then the "skewing"
    procedure (pad, reshape, slice; see `skew`) moves each
    logit to its key. The (T, S, K) tensor of relative embeddings of Shaw et
    al. 2018 is never made: the extra memory is O(T·K) for the table plus
    one logits-sized buffer. Causal calls (`use_causal_mask=True`) use a
    table of the T distances 0 .. -(T - 1) (the paper's masked variant);
    non-causal calls use both directions (2T - 1 distances).

    Use it where order and distance matter more than absolute position:
    music (the Music Transformer), long sequences sampled at lengths longer
    than those seen in training. Positions are the indices of the sequence
    (padding does not shift them). With the cache, query t of a call sits at
    absolute position `cache_index + t` and is compared with the absolute
    positions of the cached keys, so token-by-token decoding equals the full
    pass, and a step costs the same at every position (it attends over the
    whole fixed-size cache, unfilled slots masked).

    The table holds the distances -(max_relative_position - 1) ..
    max_relative_position - 1 for every layer, since causality is chosen per
    call; a model used only causally never trains the positive distances.

    Args:
        num_heads: H, number of attention heads (positive int).
        key_dim: K, size of each head's query, key and relative embedding
            (positive int).
        max_relative_position: M, number of distinct distances in each
            direction (positive int): distances -(M - 1) .. M - 1 get their
            own embedding, farther ones share the outermost. Any sequence
            length works with any M.
        heads_share_relative_embedding: if True, one (2M - 1, K) table for
            all heads (Shaw et al.); if False (default, as the Music
            Transformer), one per head, (H, 2M - 1, K).
        **kwargs: the other arguments of `MultiHeadSelfAttention`
            (`value_dim`, `dropout`, `use_bias`, `output_dim`,
            `kernel_initializer`, `bias_initializer`, `seed`, `chunk_size`:
            with it the relative logits are made per chunk of queries and
            keys from the 2C - 1 distances each pair needs, so training
            memory is linear in T; on causal query blocks, each block's
            from the distances its keys are at), and the base `keras.layers.Layer`
            arguments (`name`, `dtype`, ...).

    The relative embeddings are initialised from N(0, key_dim ** -0.5), as in
    tensor2tensor. Under mixed precision they are read in float32 (not
    autocast), so the relative logits, like the content logits, are float32.

    Call arguments:
        As `MultiHeadSelfAttention.call`: `inputs` (B, T, D); `padding_mask`
        (B, S) bool (S = T, or the cache length with a cache; defaults to
        the implicit mask without a cache); `attention_mask` (B, T, S) or
        (B, H, T, S) bool; `use_causal_mask`; `cache` (B, H, K + V,
        max_length) from `init_cache`; `cache_index` (the absolute position of
        `inputs[:, 0]`, which the relative distances are measured from, so
        cached decoding equals the full pass); `return_attention_scores`;
        `training`. Masks: bool, True = may attend, AND-ed together.

    Returns:
        As `MultiHeadSelfAttention`: `outputs` (B, T, output_dim), then the
        `attention_scores` (B, H, T, S) when asked for, then the updated
        `cache` when one was passed.

    Raises:
        ValueError: on an invalid `max_relative_position` or
            `heads_share_relative_embedding`; otherwise as
            `MultiHeadSelfAttention`.

    Example:
    >>> import keras
    >>> from keras_attn.layers import RelativeGlobalAttention
    >>> layer = RelativeGlobalAttention(num_heads=2, key_dim=8, max_relative_position=16)
    >>> x = keras.random.normal((2, 5, 16))
    >>> tuple(layer(x, use_causal_mask=True).shape)
    (2, 5, 16)
    >>> cache = layer.init_cache(batch_size=2, max_length=10)
    >>> y, cache = layer(x[:, :1], cache=cache, cache_index=0, use_causal_mask=True)

    Reference:
        Huang et al. 2018, "Music Transformer: Generating Music with
        Long-Term Structure", section 3.4 (relative attention, skewing).
        Shaw et al. 2018, "Self-Attention with Relative Position
        Representations", section 3 (clipped relative distances).
    """

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
        checks.check_bool(
            self,
            "heads_share_relative_embedding",
            heads_share_relative_embedding,
            "True = one table for all heads",
        )
        self.max_relative_position = max_relative_position
        self.heads_share_relative_embedding = heads_share_relative_embedding

    def _build_attention_core(self, inputs_shape):
        num_distances = 2 * self.max_relative_position - 1
        shape = (num_distances, self.key_dim)
        if not self.heads_share_relative_embedding:
            shape = (self.num_heads,) + shape
        # Row r is the embedding of the distance r - (M - 1) (key minus query).
        # Not autocast: the relative logits are made in float32, as the
        # content logits are; a table read in float16 under mixed precision
        # would round them by up to 2^-11 of their size (~1e-2 at logits of
        # 30), which moves near-tied attention weights by ~1e-3, several
        # times what the other layers show.
        self.relative_embeddings = self.add_weight(
            name="relative_embeddings",
            shape=shape,
            initializer=keras.initializers.RandomNormal(stddev=self.key_dim**-0.5),
            autocast=False,
        )

    def _relative_logits(self, query, key_length, cache_index, causal):
        """Srel (B, H, T, S) in float32, by table matmul + skewing."""
        query_length = _dim(query, 1)
        # Column j of the table is the distance j - (cache_index + T - 1): key j
        # as seen from the last query; skewing shifts row t by T - 1 - t
        # places, which puts every column at its key for every query. Causal
        # calls need the distances <= 0 only, which W = S columns cover
        # (cache_index + T <= S); the columns past them reach only masked keys.
        width = key_length if causal else key_length + query_length - 1
        first = -(ops.cast(cache_index, "int32") + query_length - 1)
        limit = self.max_relative_position - 1
        distances = ops.arange(width, dtype="int32") + first
        rows = ops.clip(distances, -limit, limit) + limit
        table = ops.cast(ops.take(self.relative_embeddings, rows, axis=-2), "float32")
        # A zero row in front of the table gives the skew's padding column
        # as part of the matmul, saving a copy of the logits.
        zero_row = ops.zeros_like(table[..., :1, :])
        table = ops.concatenate([zero_row, table], axis=-2)
        # (B, H, T, K) @ (K, W+1) -> (B, H, T, W+1): made in the layout of
        # the logits, so no logits-sized transpose follows. The operands get
        # equal batch shapes on purpose: TF 2.21's oneDNN batch matmul
        # returns wrong values, or corrupts the heap, when it broadcasts a
        # (B, 1, T, K) operand (one head) against a table without the batch
        # axis (pinned by test_single_head_matches_reference).
        query = ops.transpose(ops.cast(query, "float32"), (0, 2, 1, 3))
        table = ops.swapaxes(table, -1, -2)
        if self.heads_share_relative_embedding:
            batch, heads = ops.shape(query)[0], ops.shape(query)[1]
            flat = ops.matmul(ops.reshape(query, (-1, ops.shape(query)[-1])), table)
            padded = ops.reshape(flat, (batch, heads, query_length, -1))
        else:
            table = ops.broadcast_to(table[None], (ops.shape(query)[0],) + tuple(ops.shape(table)))
            padded = ops.matmul(query, table)
        return skew_padded(padded, key_length)

    def _extra_logits(self, query, key_length, masks):
        return self._relative_logits(
            query, key_length, masks.cache_index, causal=bool(masks.use_causal_mask)
        )

    def _attend_chunked(self, query, key, value, masks, chunk_size):
        return chunked_attention(
            query, key, value, masks, chunk_size, relative_embeddings=self.relative_embeddings
        )


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
    shape = tuple(relative_logits.shape)
    rank, keys = len(shape), checks.static_int(key_length)
    fits = rank >= 2 and (None in (keys, shape[-1]) or keys <= shape[-1])
    checks.require(
        fits,
        "relative_logits.shape",
        shape,
        f"(..., queries, W) of rank >= 2, W >= key_length={key_length}",
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
    if checks.static_int(key_length) is None or checks.static_int(key_length) != checks.static_int(
        width
    ):
        out = ops.slice(out, (0,) * rank, lead + (length, key_length))
    return out
