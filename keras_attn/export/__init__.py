"""SavedModel exporters for TF Serving.

Each exporter writes `export_dir/<version>/` (a positive integer folder, as
TF Serving's `model_base_path` expects) with a `serving_default` signature
whose inputs and outputs have names, dtypes and shapes a client can read
with `saved_model_cli show --all`. The generation loop, with its cache,
runs inside the graph; the exported models load in a process that imports
only `tensorflow` (plus `tensorflow_text` where the graph tokenizes text).

Exporting needs TensorFlow whatever the Keras backend: install it with
`pip install "keras_attn[tensorflow]"` (importing this package without it
raises a `ModuleNotFoundError` that says so).
"""

from keras_attn.extras import needs_extra

with needs_extra("tensorflow", "keras_attn.export"):
    import tensorflow  # noqa: F401

from keras_attn.export.archive import versioned_export_path, write_archive  # noqa: E402
from keras_attn.export.music_generator import export_music_generator  # noqa: E402
from keras_attn.export.super_resolver import export_super_resolver  # noqa: E402
from keras_attn.export.translator import export_translator  # noqa: E402

__all__ = [
    "export_music_generator",
    "export_super_resolver",
    "export_translator",
    "versioned_export_path",
    "write_archive",
]
