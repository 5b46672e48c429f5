"""JSB Chorales: J.S. Bach's four-part chorales on a 16th-note grid (docs/guides/preprocessing.md).

Reference:
    Boulanger-Lewandowski et al. 2012, "Modeling Temporal Dependencies in High-Dimensional
    Sequences"; Huang et al. 2017, "Counterpoint by Convolution" (separated voices).
"""

from keras_attn.checks import require
from keras_attn.datasets import _files
from keras_attn.preprocessing.jsb_chorales import load_jsb_chorales

SEPARATED = "Jsb16thSeparated.json"
PIANO_ROLL = "jsb-chorales-16th.json"
SPLITS = ("train", "valid", "test")

# The repository at a fixed commit (its master of 2021-02-12, which added the
# JSON files).
BASE_URL = (
    "https://raw.githubusercontent.com/czhuang/JSB-Chorales-dataset/"
    "9a7f733ddb4ed91f48da64ac7f0f621c34aadd4d/"
)

# Accepted sha256 per file: first the official file at BASE_URL (hashlib over
# the file's bytes in that commit of the repository), then this project's
# copy without the test split (see the module docstring).
SHA256 = {
    SEPARATED: (
        "79294cc374f9252e95ef4b703161524c1c53dc1f712c236f00f1c1f5d54af5a7",
        "8b0d1bccb7d6b0d485ef2c69905b56f538afa180d47d091e9db35414593ba27f",
    ),
    PIANO_ROLL: (
        "8730aca7b64e7d29493733d1cf19fad4a5b351d8f1845e57dac27728104fd39f",
        "9df0846cb4a1bf7c0537c7978fd15f9edbf86a90d28088b88b772a106bf4a986",
    ),
}


def fetch(name=SEPARATED, data_dir=None, cache_dir=None, base_url=None):
    """The local path of one JSB Chorales JSON file, checked.

    Args:
        name: `SEPARATED` (`"Jsb16thSeparated.json"`) or `PIANO_ROLL`.
        data_dir: an offline folder holding `jsb_chorales/<name>` (default `$KERAS_ATTN_DATA`).
        cache_dir: the Keras cache folder (default `$KERAS_HOME` or `~/.keras`).
        base_url: where to download from (default `BASE_URL`).

    Returns:
        the path (str) of the file, whose sha256 is one of `SHA256[name]`.

    Raises:
        ValueError: an unknown `name`, or a file with another sha256.
        FileNotFoundError: the offline folder lacks the file.
        OSError: the download failed.

    Example:
    >>> import os, shutil, tempfile
    >>> from keras_attn.datasets import jsb_chorales
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     os.makedirs(os.path.join(folder, "jsb_chorales"))
    ...     _ = shutil.copy("examples/music/data/Jsb16thSeparated.json",
    ...                     os.path.join(folder, "jsb_chorales"))
    ...     chorales = jsb_chorales.load_data("valid", data_dir=folder)  # offline: no download
    >>> len(chorales), chorales[0].shape[1]
    (76, 4)
    """
    require(name in SHA256, "name", name, f"a JSB Chorales file, one of {tuple(SHA256)}")
    return _files.fetch_file(
        f"jsb_chorales/{name}",
        SHA256[name],
        (base_url or BASE_URL) + name,
        data_dir=data_dir,
        cache_dir=cache_dir,
        what=f"JSB Chorales file {name}",
    )


def load_data(split="train", data_dir=None, cache_dir=None, base_url=None):
    """The chorales of one split as four-voice grids (`Jsb16thSeparated.json`).

    Args:
        split: `"train"` (229 chorales), `"valid"` (76) or `"test"` (77).
        data_dir, cache_dir, base_url: as for `fetch`.

    Returns:
        list of np.int32 arrays (steps, 4): the pitches of S, A, T, B per 16th note, -1 = rest.

    Raises:
        ValueError: an unknown split, or a file with another sha256.
        FileNotFoundError, OSError: as for `fetch`.
    """
    require(split in SPLITS, "split", split, f"a JSB Chorales split, one of {SPLITS}")
    return load_jsb_chorales(fetch(SEPARATED, data_dir, cache_dir, base_url), split)
