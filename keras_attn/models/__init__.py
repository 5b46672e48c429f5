"""Functional model builders: each returns a `keras.Model`."""

from keras_attn.models.image_transformer import image_transformer, super_resolution_transformer
from keras_attn.models.music_transformer import MUSIC_SUPPRESSED_TOKEN_IDS, music_transformer
from keras_attn.models.translation import translation_transformer

__all__ = [
    "MUSIC_SUPPRESSED_TOKEN_IDS",
    "image_transformer",
    "music_transformer",
    "super_resolution_transformer",
    "translation_transformer",
]
