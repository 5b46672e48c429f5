"""SavedModel exporters for TF Serving (docs/guides/serving.md).

Each writes `export_dir/<version>/` with a `serving_default` signature; the generation loop runs
in the graph. Needs TensorFlow: `pip install "keras_attn[tensorflow]"`.
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
