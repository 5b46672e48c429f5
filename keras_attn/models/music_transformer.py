"""The Music Transformer: a decoder-only language model over music events
(Huang et al. 2018), with relative or absolute position information."""

import math

import keras

from keras_attn.checks import check_heads_divide, check_rate, check_sizes, require
from keras_attn.layers import (
    Projection,
    RelativeGlobalAttention,
    TokenAndPositionEmbedding,
    TokenEmbedding,
    TransformerDecoder,
)
from keras_attn.preprocessing import music

ATTENTION_TYPES = ("relative", "absolute")

# The event ids a Music Transformer must never generate: padding (0) and the
# start token (1), the same in both of the library's music vocabularies
# (performance events and JSB Chorales, `keras_attn.preprocessing.music`).
# A 0 inside a piece would read as the end of its row and a start token as
# the start of another piece. Pass them to the generation functions as
# `suppressed_token_ids`; `export_music_generator` does.
MUSIC_SUPPRESSED_TOKEN_IDS = (music.PAD_ID, music.START_ID)


def music_transformer(
    vocabulary_size,
    num_layers=4,
    hidden_dim=256,
    num_heads=8,
    intermediate_dim=1024,
    dropout=0.1,
    max_relative_position=512,
    attention="relative",
    heads_share_relative_embedding=False,
    normalize_first=True,
    name="music_transformer",
):
    """Builds the Music Transformer as a functional `keras.Model`.

    A stack of causal `TransformerDecoder` blocks over event ids (performance
    events, or the serialised soprano/alto/tenor/bass grid of JSB Chorales)
    that predicts the next event at every position. With
    `attention="relative"` (the Music Transformer) each block's
    self-attention is a `RelativeGlobalAttention` (relative-position logits
    computed by skewing) and the embedding carries no absolute position;
    with `attention="absolute"` (the paper's baseline, the Transformer of
    Vaswani et al.) it is a `MultiHeadSelfAttention` and sinusoidal
    positions are added to the token embeddings. Everything else (sizes,
    embedding scaled by √D, dropout, pre- or post-norm, the float32 logits
    layer) is shared, so the two compare at the same budget.

    Relative attention generalises past the training length because a
    distance seen in training means the same thing at any position, and
    distances of `max_relative_position - 1` and more share one embedding.
    Keep `max_relative_position` at or below the training length: rows of
    the table for distances never seen in training stay at their random
    initialisation and would be used for longer sequences.

    Id 0 is padding: the embedding attaches an implicit mask (True = real
    token), so padded positions are never attended to. Padding and the
    start id (1) are never to be generated: pass
    `suppressed_token_ids=MUSIC_SUPPRESSED_TOKEN_IDS` to the generation
    functions. The model works with
    `keras_attn.generation` (`sample`, `greedy_search`, `CachedDecoder`): the
    layers are those the cached decoder replays one position at a time,
    with the stable names `token_embedding` (and `embedding_scale`, relative)
    or `token_and_position_embedding` (absolute), `embedding_dropout`,
    `decoder_layer_<i>`, `final_norm` (pre-norm only) and `logits`.

    Args:
        vocabulary_size: V, number of event ids (positive int), e.g.
            `music.VOCABULARY_SIZE` (391) or `music.JSB_VOCABULARY_SIZE` (132).
        num_layers: N, decoder blocks (positive int).
        hidden_dim: D, model width (positive int, divisible by `num_heads`;
            even for `attention="absolute"`).
        num_heads: H, attention heads (positive int).
        intermediate_dim: feed-forward width (positive int).
        dropout: rate of the embedding, residual and attention dropouts,
            in [0, 1).
        max_relative_position: M, distances 0..M-1 get their own relative
            embedding, longer ones share the last (positive int; relative
            attention only, ignored for "absolute").
        attention: `"relative"` (RelativeGlobalAttention, no absolute
            positions) or `"absolute"` (MultiHeadSelfAttention + sinusoids).
        heads_share_relative_embedding: one relative table for all heads
            (True) or one per head (False, as in the paper).
        normalize_first: True (default) = pre-norm blocks and a final layer
            norm, as tensor2tensor trains the Music Transformer; False =
            post-norm (Vaswani et al.).
        name: model name.

    Returns:
        `keras.Model` with one input `tokens` (B, T) int32 (0 = padding) and
        output next-event logits (B, T, V) float32 (float32 under mixed
        precision too): `logits[:, t]` is the distribution of event t + 1
        given events 0..t.

    Raises:
        ValueError: on sizes that are not positive integers, `hidden_dim`
            not divisible by `num_heads` (or odd, for absolute positions),
            `dropout` outside [0, 1), or an unknown `attention`.

    Example:
    >>> import keras
    >>> from keras_attn.models import music_transformer
    >>> from keras_attn.preprocessing import music
    >>> model = music_transformer(music.JSB_VOCABULARY_SIZE, num_layers=2,
    ...                           hidden_dim=64, num_heads=4,
    ...                           intermediate_dim=128, max_relative_position=64)
    >>> tuple(model(keras.ops.ones((2, 10), "int32")).shape)
    (2, 10, 132)

    Reference:
        Huang et al. 2018, "Music Transformer: Generating Music with
        Long-Term Structure", section 3.4 (relative attention), section 4
        (JSB Chorales: relative vs. the baseline Transformer), section 5
        (performances, generation beyond the training length).
        Vaswani et al. 2017, section 3.5 (sinusoidal positions).
    """
    require(
        attention in ATTENTION_TYPES,
        "attention",
        attention,
        '"relative" (the Music Transformer) or "absolute" (the baseline with sinusoidal positions)',
    )
    # intermediate_dim, max_relative_position: the blocks check them.
    check_sizes(
        vocabulary_size=vocabulary_size,
        num_layers=num_layers,
        hidden_dim=hidden_dim,
        num_heads=num_heads,
    )
    check_heads_divide(hidden_dim, num_heads)
    check_rate(None, "dropout", dropout)
    key_dim = hidden_dim // num_heads

    tokens = keras.Input((None,), dtype="int32", name="tokens")
    if attention == "relative":
        x = TokenEmbedding(vocabulary_size, hidden_dim, mask_zero=True, name="token_embedding")(
            tokens
        )
        # The same √D scaling as the baseline's embedding, so the two
        # differ only in how they see positions.
        x = keras.layers.Rescaling(math.sqrt(hidden_dim), name="embedding_scale")(x)
    else:
        x = TokenAndPositionEmbedding(
            vocabulary_size,
            hidden_dim,
            position="sinusoidal",
            mask_zero=True,
            scale_token_embeddings=True,
            name="token_and_position_embedding",
        )(tokens)
    x = keras.layers.Dropout(dropout, name="embedding_dropout")(x)
    for i in range(num_layers):
        self_attention = None
        if attention == "relative":
            self_attention = RelativeGlobalAttention(
                num_heads=num_heads,
                key_dim=key_dim,
                max_relative_position=max_relative_position,
                heads_share_relative_embedding=heads_share_relative_embedding,
                dropout=dropout,
                name="self_attention",
            )
        x = TransformerDecoder(
            intermediate_dim=intermediate_dim,
            num_heads=num_heads,
            dropout=dropout,
            normalize_first=normalize_first,
            self_attention=self_attention,
            name=f"decoder_layer_{i}",
        )(x)
    if normalize_first:
        x = keras.layers.LayerNormalization(epsilon=1e-5, name="final_norm")(x)
    logits = Projection(vocabulary_size, dtype="float32", name="logits")(x)
    return keras.Model(tokens, logits, name=name)
