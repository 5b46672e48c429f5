"""The data sets of keras_attn's examples (`multi30k`, `jsb_chorales`, `cifar10`, `pop909`).

Each file comes from an offline folder (`data_dir` or `$KERAS_ATTN_DATA`), else the Keras cache,
else a download, and is checked against its sha256 (docs/guides/preprocessing.md).
"""

from keras_attn.datasets import (
    cifar10,  # noqa: F401
    jsb_chorales,  # noqa: F401
    multi30k,  # noqa: F401
    pop909,  # noqa: F401
)
from keras_attn.datasets._files import DATA_ENV_VAR  # noqa: F401
