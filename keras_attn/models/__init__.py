"""Functional model builders: each returns a `keras.Model`."""

from keras_attn.models.image_transformer import image_transformer, super_resolution_transformer
from keras_attn.models.music_transformer import music_transformer
from keras_attn.models.translation import translation_transformer

__all__ = [
    "image_transformer",
    "music_transformer",
    "super_resolution_transformer",
    "translation_transformer",
]
