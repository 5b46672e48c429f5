"""Tiny untrained models for the generation tests: exactness, not quality."""

import keras
import numpy as np

import keras_attn.layers as attn_layers
from keras_attn.layers import TokenAndPositionEmbedding, TransformerDecoder
from keras_attn.models import translation_transformer
from tests import attention_kinds

VOCABULARY = 13
# "rolling": local attention whose cache keeps the last block + flange
# positions only (no position can be written twice).
KINDS = attention_kinds.SELF_ATTENTION_KINDS + ("rolling",)


def self_attention(kind, index):
    """A `kind` self-attention layer (see `tests.attention_kinds`) for the
    tiny models: key_dim 8, zero output bias; local blocks of 3 with a
    flange of 2, so sequences of 12 cross several blocks."""
    options = {
        "multi_head": {},
        "local": {"block_size": 3, "memory_flange": 2},
        "rolling": {"block_size": 3, "memory_flange": 2, "rolling_cache": True},
        "relative": {"max_relative_position": 4},
    }[kind]
    return attention_kinds.self_attention(
        "local" if kind == "rolling" else kind,
        key_dim=8,
        bias_initializer="zeros",
        name=f"{kind}_{index}",
        **options,
    )


def language_model(
    kind="multi_head",
    vocabulary=VOCABULARY,
    num_layers=2,
    position="learned",
    normalize_first=False,
    max_length=16,
):
    """Decoder-only LM: embedding, decoder blocks with `kind` self-attention,
    logits. Single input `tokens`."""
    tokens = keras.Input((None,), dtype="int32", name="tokens")
    x = TokenAndPositionEmbedding(
        vocabulary,
        16,
        sequence_length=max_length,
        position=position,
        mask_zero=True,
        name="embedding",
    )(tokens)
    for i in range(num_layers):
        x = TransformerDecoder(
            intermediate_dim=32,
            self_attention=self_attention(kind, i),
            normalize_first=normalize_first,
            name=f"decoder_layer_{i}",
        )(x)
    if normalize_first:
        x = keras.layers.LayerNormalization(name="final_norm")(x)
    logits = keras.layers.Dense(vocabulary, name="logits")(x)
    return keras.Model(tokens, logits)


def bare_attention_model(vocabulary=VOCABULARY):
    """A self-attention layer called directly, a residual `Add`, an `x * 2.0`
    op, layer norm: the position-wise pieces a hand-built model may use."""
    tokens = keras.Input((None,), dtype="int32", name="tokens")
    x = keras.layers.Embedding(vocabulary, 16, name="token_embedding")(tokens)
    x = x + attn_layers.SinusoidalPositionEncoding(name="positions")(x)
    y = attn_layers.MultiHeadSelfAttention(num_heads=2, key_dim=8, name="attention")(
        x, use_causal_mask=True
    )
    x = keras.layers.LayerNormalization(name="norm")(keras.layers.Add()([x, y]) * 2.0)
    return keras.Model(tokens, keras.layers.Dense(vocabulary, name="logits")(x))


def translation_model(normalize_first=False, num_layers=2):
    return translation_transformer(
        VOCABULARY,
        num_layers=num_layers,
        hidden_dim=16,
        num_heads=2,
        intermediate_dim=32,
        dropout=0.1,
        normalize_first=normalize_first,
    )


def sharpen(model, scale=4.0):
    """Scales the logits layer so the untrained model's distributions are
    peaked: greedy choices are then far from ties, and beams differ."""
    layer = model.get_layer("logits")
    kernel, bias = layer.get_weights()
    layer.set_weights([kernel * scale, bias])
    return model


SOURCE = np.array([[5, 6, 7, 8, 9, 2], [4, 11, 2, 0, 0, 0]], "int32")


def three_strategies(model, prompt, max_length=12, end_token_id=5):
    """Greedy, beam (3 beams) and seeded top-k sampling of `model` from
    `prompt`: what the compiled-generation tests compare with eager runs."""
    from keras_attn.generation import beam_search, greedy_search, sample

    return (
        greedy_search(model, prompt, max_length, end_token_id=end_token_id),
        beam_search(model, prompt, max_length, num_beams=3, end_token_id=end_token_id),
        sample(model, prompt, max_length, seed=1, top_k=5),
    )


def naive_greedy(model, prompt, max_length, end_token_id=None, inputs=None, token_input="tokens"):
    """Greedy decoding the textbook way: run the whole model on the prefix
    for every new token (NumPy loop, one row at a time)."""
    rows = []
    for b in range(len(prompt)):
        tokens = [int(t) for t in prompt[b] if t != 0]
        while len(tokens) < max_length:
            feed = {token_input: np.array([tokens], "int32")}
            if inputs is not None:
                feed.update({k: v[b : b + 1] for k, v in inputs.items()})
            if len(feed) == 1:
                feed = feed[token_input]
            logits = np.asarray(model(feed))[0, -1]
            tokens.append(int(np.argmax(logits)))
            if end_token_id is not None and tokens[-1] == end_token_id:
                break
        rows.append(tokens + [0] * (max_length - len(tokens)))
    return np.array(rows)


def mixed_model(vocabulary=VOCABULARY):
    """Blocks with different attention types and cache shapes in one stack."""
    tokens = keras.Input((None,), dtype="int32", name="tokens")
    x = TokenAndPositionEmbedding(vocabulary, 16, sequence_length=16, mask_zero=True)(tokens)
    layers = [attn_layers.MultiHeadSelfAttention(num_heads=1, key_dim=16, name="global")]
    for kind in ("local", "relative"):
        layers.append(self_attention(kind, len(layers)))
    layers.append(
        attn_layers.MultiHeadSelfAttention(num_heads=4, key_dim=2, value_dim=6, name="narrow")
    )
    for i, layer in enumerate(layers):
        x = TransformerDecoder(
            intermediate_dim=24, self_attention=layer, name=f"decoder_layer_{i}"
        )(x)
    return keras.Model(tokens, keras.layers.Dense(vocabulary, name="logits")(x))
