"""The encoder-decoder Transformer for translation (Vaswani et al. 2017)."""

import keras

from keras_attn.layers import TokenAndPositionEmbedding, TransformerDecoder, TransformerEncoder
from keras_attn.layers.projection import Projection
from keras_attn.models._blocks import block_arguments, check_model_arguments, stack_blocks


def translation_transformer(
    encoder_vocabulary_size,
    decoder_vocabulary_size=None,
    num_layers=3,
    hidden_dim=256,
    num_heads=8,
    intermediate_dim=512,
    dropout=0.1,
    position="sinusoidal",
    max_length=None,
    normalize_first=False,
    name="translation_transformer",
):
    """Builds the encoder-decoder Transformer as a functional `keras.Model`.

    Source tokens are embedded (scaled by √D, plus positions) and encoded by `TransformerEncoder`
    blocks; `TransformerDecoder` blocks over the shifted target tokens attend to them; a final
    projection gives next-token logits. Id 0 is padding on both sides (implicit masks). Decode
    with `suppressed_token_ids=(tokenizer.pad_id, tokenizer.start_id)`, as
    `keras_attn.export.export_translator` does. The paper's base model is `num_layers=6,
    hidden_dim=512, num_heads=8, intermediate_dim=2048`; the defaults train on a CPU.

    Layer names: `encoder_embedding`, `encoder_layer_<i>`, `decoder_embedding`,
    `decoder_layer_<i>`, `encoder_final_norm` / `decoder_final_norm` (pre-norm), `logits`.

    Args:
        encoder_vocabulary_size: source vocabulary size (ids 0..V-1, 0 = pad).
        decoder_vocabulary_size: target vocabulary size; default the source's.
        num_layers: encoder and decoder blocks (N).
        hidden_dim: model width D (divisible by `num_heads`).
        num_heads: attention heads H.
        intermediate_dim: feed-forward width (d_ff).
        dropout: dropout rate of embeddings, residuals and attention.
        position: "sinusoidal" (the paper; any length) or "learned".
        max_length: rows of learned position tables (required for learned).
        normalize_first: pre-norm blocks (plus a final layer norm) instead of post-norm.
        name: model name.

    Returns:
        `keras.Model` with inputs `encoder_tokens` (B, S) int32 and `decoder_tokens` (B, T)
        int32, and output logits (B, T, V) float32 (also under mixed precision).

    Raises:
        ValueError: on non-positive sizes, `hidden_dim` not divisible by `num_heads`,
            `dropout` outside [0, 1), a learned position table without `max_length`.

    Example:
    >>> import keras
    >>> from keras_attn.models import translation_transformer
    >>> model = translation_transformer(8000, num_layers=2, hidden_dim=64,
    ...                                 num_heads=2, intermediate_dim=128)
    >>> logits = model({"encoder_tokens": keras.ops.ones((2, 7), "int32"),
    ...                 "decoder_tokens": keras.ops.ones((2, 5), "int32")})
    >>> tuple(logits.shape)
    (2, 5, 8000)

    Reference:
        Vaswani et al. 2017, "Attention Is All You Need", sections 3 and 5.
    """
    if decoder_vocabulary_size is None:
        decoder_vocabulary_size = encoder_vocabulary_size
    # intermediate_dim: the blocks check it.
    check_model_arguments(
        hidden_dim,
        num_heads,
        dropout,
        encoder_vocabulary_size=encoder_vocabulary_size,
        num_layers=num_layers,
        decoder_vocabulary_size=decoder_vocabulary_size,
        **({} if max_length is None else {"max_length": max_length}),
    )
    encoder_tokens = keras.Input((None,), dtype="int32", name="encoder_tokens")
    decoder_tokens = keras.Input((None,), dtype="int32", name="decoder_tokens")

    def embed(tokens, vocabulary_size, prefix):
        x = TokenAndPositionEmbedding(
            vocabulary_size,
            hidden_dim,
            sequence_length=max_length,
            position=position,
            mask_zero=True,
            scale_token_embeddings=True,
            name=f"{prefix}_embedding",
        )(tokens)
        return keras.layers.Dropout(dropout, name=f"{prefix}_embedding_dropout")(x)

    blocks = block_arguments(intermediate_dim, num_heads, dropout, normalize_first)
    x = embed(encoder_tokens, encoder_vocabulary_size, "encoder")
    encoder_outputs = stack_blocks(x, TransformerEncoder, "encoder", num_layers, blocks)
    y = embed(decoder_tokens, decoder_vocabulary_size, "decoder")
    y = stack_blocks(y, TransformerDecoder, "decoder", num_layers, blocks, encoder_outputs)
    logits = Projection(decoder_vocabulary_size, dtype="float32", name="logits")(y)
    return keras.Model(
        {"encoder_tokens": encoder_tokens, "decoder_tokens": decoder_tokens}, logits, name=name
    )
