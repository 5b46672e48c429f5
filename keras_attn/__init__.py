"""keras_attn: attention layers for Keras 3.

Multi-head, local block (Image Transformer) and relative (Music Transformer)
attention, Transformer blocks, model builders, generation and TF Serving
export. See README.md.
"""

__version__ = "0.1.0"

from keras_attn import layers  # noqa: E402,F401
