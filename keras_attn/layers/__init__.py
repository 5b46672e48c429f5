"""Attention layers and Transformer blocks (keras.ops only)."""

from keras_attn.layers.layer_norm import LayerNorm
from keras_attn.layers.local_block_attention import LocalBlockAttention
from keras_attn.layers.multi_head_attention import MultiHeadAttention
from keras_attn.layers.multi_head_self_attention import MultiHeadSelfAttention
from keras_attn.layers.relative_global_attention import RelativeGlobalAttention
from keras_attn.layers.sinusoidal_position_encoding import SinusoidalPositionEncoding
from keras_attn.layers.token_and_position_embedding import TokenAndPositionEmbedding
from keras_attn.layers.token_embedding import TokenEmbedding
from keras_attn.layers.transformer_decoder import TransformerDecoder
from keras_attn.layers.transformer_encoder import TransformerEncoder

__all__ = [
    "LayerNorm",
    "LocalBlockAttention",
    "MultiHeadAttention",
    "MultiHeadSelfAttention",
    "RelativeGlobalAttention",
    "SinusoidalPositionEncoding",
    "TokenAndPositionEmbedding",
    "TokenEmbedding",
    "TransformerDecoder",
    "TransformerEncoder",
]
