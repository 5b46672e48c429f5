"""The Image Transformer (Parmar et al. 2018): the builders and the layers that serve only them.

See docs/guides/image_transformer.md for the layout and the low-resolution conditioning.
"""

from keras_attn.models.image_transformer.low_resolution_block_sums import LowResolutionBlockSums
from keras_attn.models.image_transformer.low_resolution_embedding import LowResolutionEmbedding
from keras_attn.models.image_transformer.low_resolution_logit_bias import LowResolutionLogitBias
from keras_attn.models.image_transformer.low_resolution_values import LowResolutionValues
from keras_attn.models.image_transformer.model import (
    NUM_INTENSITIES,
    START_TOKEN,
    image_transformer,
    super_resolution_transformer,
)
from keras_attn.models.image_transformer.pixel_embedding import PixelEmbedding
from keras_attn.models.image_transformer.pixel_position_encoding import PixelPositionEncoding
from keras_attn.models.image_transformer.sequence_delay import SequenceDelay

__all__ = [
    "NUM_INTENSITIES",
    "START_TOKEN",
    "LowResolutionBlockSums",
    "LowResolutionEmbedding",
    "LowResolutionLogitBias",
    "LowResolutionValues",
    "PixelEmbedding",
    "PixelPositionEncoding",
    "SequenceDelay",
    "image_transformer",
    "super_resolution_transformer",
]
