"""keras_attn: attention layers for Keras 3.

Importing the package registers every serializable class, so `keras.saving.load_model` restores
compiled models. Exporters and preprocessing need extras (see `keras_attn.extras`).
"""

__version__ = "0.1.0"

from keras_attn import distribution, layers, losses, metrics, models, schedules  # noqa: E402,F401
