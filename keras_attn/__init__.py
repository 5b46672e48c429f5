"""keras_attn: attention layers for Keras 3.

Multi-head, local block (Image Transformer) and relative (Music Transformer)
attention, Transformer blocks, model builders, generation and TF Serving
export. See README.md.

Importing the package registers every serializable class (layers, losses,
metrics, the learning-rate schedule), so `keras.saving.load_model` restores
compiled models without further imports.
"""

__version__ = "0.1.0"

from keras_attn import distribution  # noqa: E402,F401
from keras_attn import layers  # noqa: E402,F401
from keras_attn import losses  # noqa: E402,F401
from keras_attn import metrics  # noqa: E402,F401
from keras_attn import schedules  # noqa: E402,F401
