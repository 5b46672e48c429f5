"""Functional model builders: each returns a `keras.Model`."""

from keras_attn.models.translation import translation_transformer

__all__ = ["translation_transformer"]
