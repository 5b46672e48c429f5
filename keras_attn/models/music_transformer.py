"""The Music Transformer (Huang et al. 2018): a decoder-only model over music events."""

import math

import keras

from keras_attn.checks import require
from keras_attn.layers import (
    RelativeGlobalAttention,
    TokenAndPositionEmbedding,
    TokenEmbedding,
    TransformerDecoder,
)
from keras_attn.layers.projection import Projection
from keras_attn.models._blocks import block_arguments, check_model_arguments, stack_blocks
from keras_attn.preprocessing import music

ATTENTION_TYPES = ("relative", "absolute")

# The ids a Music Transformer must never generate: padding (0) and the start token (1), the same
# in both music vocabularies. Pass them as `suppressed_token_ids` (`export_music_generator` does).
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

    Causal `TransformerDecoder` blocks with `RelativeGlobalAttention` ("relative") or the paper's
    baseline, `MultiHeadSelfAttention` and sinusoidal positions ("absolute"). Decode with
    `suppressed_token_ids=MUSIC_SUPPRESSED_TOKEN_IDS`. Layer names: guides/relative_attention.md.

    Args:
        vocabulary_size: V, event ids, e.g. `music.VOCABULARY_SIZE` (391).
        num_layers: N, decoder blocks.
        hidden_dim: D (divisible by `num_heads`; even for `attention="absolute"`).
        num_heads: H.
        intermediate_dim: feed-forward width.
        dropout: rate of the embedding, residual and attention dropouts, in [0, 1).
        max_relative_position: M, distances 0..M-1 get their own embedding (at most the length).
        attention: "relative" or "absolute".
        heads_share_relative_embedding: one relative table for all heads (True) or one per head.
        normalize_first: True = pre-norm blocks and a final layer norm; False = post-norm.
        name: model name.

    Returns:
        `keras.Model` with input `tokens` (B, T) int32 (0 = padding) and output next-event
        logits (B, T, V) float32 (also under mixed precision).

    Raises:
        ValueError: for a bad size, `hidden_dim`, `dropout` or `attention`.

    Example:
    >>> import keras
    >>> from keras_attn.models import music_transformer
    >>> from keras_attn.preprocessing import music
    >>> model = music_transformer(music.JSB_VOCABULARY_SIZE, num_layers=1, hidden_dim=16,
    ...                           num_heads=2, intermediate_dim=32, max_relative_position=8)
    >>> tuple(model(keras.ops.ones((2, 10), "int32")).shape)
    (2, 10, 132)

    Reference:
        Huang et al. 2018, "Music Transformer", sections 3.4, 4 and 5; Vaswani et al. 2017,
        section 3.5.
    """
    require(
        attention in ATTENTION_TYPES,
        "attention",
        attention,
        '"relative" (the Music Transformer) or "absolute" (the baseline with sinusoidal positions)',
    )
    # intermediate_dim, max_relative_position: the blocks check them.
    check_model_arguments(
        hidden_dim, num_heads, dropout, vocabulary_size=vocabulary_size, num_layers=num_layers
    )

    tokens = keras.Input((None,), dtype="int32", name="tokens")
    if attention == "relative":
        x = TokenEmbedding(vocabulary_size, hidden_dim, mask_zero=True, name="token_embedding")(
            tokens
        )
        # The baseline's √D scaling: the two differ only in how they see positions.
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

    def relative_attention():
        return RelativeGlobalAttention(
            num_heads=num_heads,
            key_dim=hidden_dim // num_heads,
            max_relative_position=max_relative_position,
            heads_share_relative_embedding=heads_share_relative_embedding,
            dropout=dropout,
            name="self_attention",
        )

    blocks = block_arguments(intermediate_dim, num_heads, dropout, normalize_first)
    attention = relative_attention if attention == "relative" else None
    x = stack_blocks(
        x, TransformerDecoder, "decoder", num_layers, blocks, None, attention, "final_norm"
    )
    logits = Projection(vocabulary_size, dtype="float32", name="logits")(x)
    return keras.Model(tokens, logits, name=name)
