"""The real data sets of keras_attn's examples: fetched once, checked, cached.

One module per data set, each with `fetch(...)` (the local path of the
files) and, where NumPy suffices, `load_data(...)` (the data itself):

- `multi30k`: Multi30k task 1, English-German captions (Elliott et al.
  2016); `load_data` gives two aligned lists of sentences.
- `jsb_chorales`: JSB Chorales on a 16th-note grid (Boulanger-Lewandowski et
  al. 2012); `load_data` gives (steps, 4) int32 voice grids.
- `cifar10`: CIFAR-10 (Krizhevsky 2009); `load_data` gives (N, 32, 32, 3)
  uint8 images and (N,) labels.
- `pop909`: POP909 piano arrangements (Wang et al. 2020); `fetch` gives a
  folder of .mid files (reading MIDI needs `keras_attn.preprocessing.music`).

Each file comes from, in order:

1. an offline folder, when one is given: the `data_dir` argument, else
   `$KERAS_ATTN_DATA` (how this project's machines run). It is laid out as
   `<folder>/multi30k/<split>.<lang>.gz`, `<folder>/jsb_chorales/*.json`,
   `<folder>/cifar10/...`, `<folder>/pop909/POP909/NNN/NNN.mid`; when one
   is given, nothing is downloaded;
2. the cache, `~/.keras/datasets/keras_attn/<data set>/` (`cache_dir`
   replaces `~/.keras`, as for `keras.utils.get_file`; `$KERAS_HOME` too);
3. a download from the data set's official public URL (each module's
   `BASE_URL`, which `base_url=` overrides, e.g. for a mirror), with
   `keras.utils.get_file`.

Every file is checked against a sha256 written in its module, wherever it
comes from: a file with other bytes (corrupted, truncated, another version)
is refused with a `ValueError` naming its path, the expected and the
received hash, and never used; in the cache it is downloaded again. The
second call finds verified files in the cache and makes no network access.

These modules import NumPy and Keras only (Pillow, lazily, to decode this
project's JPEG copy of CIFAR-10).
"""

from keras_attn.datasets import (
    cifar10,  # noqa: F401
    jsb_chorales,  # noqa: F401
    multi30k,  # noqa: F401
    pop909,  # noqa: F401
)
from keras_attn.datasets._files import DATA_ENV_VAR  # noqa: F401
