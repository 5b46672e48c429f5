"""keras_attn: attention layers for Keras 3.

Multi-head, local block (Image Transformer) and relative (Music Transformer)
attention, Transformer blocks, model builders, generation and TF Serving
export. See README.md.

Importing the package registers every serializable class (layers, losses,
metrics, the learning-rate schedule), so `keras.saving.load_model` restores
compiled models without further imports.

`pip install keras_attn` brings Keras, NumPy and ml-dtypes only, which is
all the layers, models and generation import, on every Keras backend; the
exporters and the data preprocessing name the extra they need
(`pip install "keras_attn[tensorflow]"`, `[music]`, `[images]`: see
`keras_attn.extras`). The version below is the one CHANGELOG.md and the
package metadata (setup.cfg reads it) carry.
"""

__version__ = "0.1.0"

from keras_attn import distribution, layers, losses, metrics, schedules  # noqa: E402,F401
