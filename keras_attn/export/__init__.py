"""SavedModel exporters for TF Serving.

Each exporter writes `export_dir/<version>/` (a positive integer folder, as
TF Serving's `model_base_path` expects) with a `serving_default` signature
whose inputs and outputs have names, dtypes and shapes a client can read
with `saved_model_cli show --all`. The generation loop, with its cache,
runs inside the graph; the exported models load in a process that imports
only `tensorflow` (plus `tensorflow_text` where the graph tokenizes text).
"""

from keras_attn.export.archive import versioned_export_path, write_archive  # noqa: E402
from keras_attn.export.music_generator import export_music_generator  # noqa: E402
from keras_attn.export.super_resolver import export_super_resolver  # noqa: E402
from keras_attn.export.translator import export_translator  # noqa: E402
