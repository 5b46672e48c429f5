"""Attention layers and Transformer blocks (keras.ops only)."""

from keras_attn.layers.local_block_attention import LocalBlockAttention
from keras_attn.layers.low_resolution_block_sums import LowResolutionBlockSums
from keras_attn.layers.low_resolution_embedding import LowResolutionEmbedding
from keras_attn.layers.low_resolution_logit_bias import LowResolutionLogitBias
from keras_attn.layers.multi_head_attention import MultiHeadAttention
from keras_attn.layers.multi_head_self_attention import MultiHeadSelfAttention
from keras_attn.layers.pixel_embedding import PixelEmbedding
from keras_attn.layers.pixel_position_encoding import PixelPositionEncoding
from keras_attn.layers.projection import Projection
from keras_attn.layers.relative_global_attention import RelativeGlobalAttention
from keras_attn.layers.sequence_delay import SequenceDelay
from keras_attn.layers.sinusoidal_position_encoding import SinusoidalPositionEncoding
from keras_attn.layers.token_and_position_embedding import TokenAndPositionEmbedding
from keras_attn.layers.token_embedding import TokenEmbedding
from keras_attn.layers.transformer_decoder import TransformerDecoder
from keras_attn.layers.transformer_encoder import TransformerEncoder

__all__ = [
    "LocalBlockAttention",
    "LowResolutionBlockSums",
    "LowResolutionEmbedding",
    "LowResolutionLogitBias",
    "MultiHeadAttention",
    "MultiHeadSelfAttention",
    "PixelEmbedding",
    "PixelPositionEncoding",
    "Projection",
    "RelativeGlobalAttention",
    "SequenceDelay",
    "SinusoidalPositionEncoding",
    "TokenAndPositionEmbedding",
    "TokenEmbedding",
    "TransformerDecoder",
    "TransformerEncoder",
]
