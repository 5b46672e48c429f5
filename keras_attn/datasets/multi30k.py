"""Multi30k task 1: English-German image captions, as published by its authors.

Splits `train` (29,000 pairs), `val` (1,014), `test_2016_flickr` (1,000); where files come from:
docs/guides/preprocessing.md.

Reference:
    Elliott et al. 2016, "Multi30K: Multilingual English-German Image Descriptions".
"""

import gzip
import os

from keras_attn.checks import require
from keras_attn.datasets import _files

SPLITS = ("train", "val", "test_2016_flickr")
LANGUAGES = ("de", "en")

# The raw files at a fixed commit of the authors' repository (the files were
# last changed in its commit c40b37b2 of 2020-11-09).
BASE_URL = (
    "https://raw.githubusercontent.com/multi30k/dataset/"
    "a3d2e0d26b56f3846f66a952536ffed4e401d05a/data/task1/raw/"
)

# sha256 of each file (hashlib over the files at BASE_URL, whose git blob ids
# match that commit's tree byte for byte).
SHA256 = {
    "train.de.gz": "726e39b2fa9eb9ffb6dc763fb35a179f80fae06ffc5d28b6ace5faa883de28a6",
    "train.en.gz": "d79cfa999dd4c51d2cb42499b6796d5a882c3a8a961923c25a898c90f8bbd56f",
    "val.de.gz": "f0cba2f995189cf5770f29a8a9a537a3ad3f51657ad873405082ff6863a5e75a",
    "val.en.gz": "14f7d25ddd868909a9213e361768460edcacdd6ab9d1e77b92560dc10c10dc28",
    "test_2016_flickr.de.gz": "9204244e408ccb38d2a55cfcd344df15005fc42a07a6e55ca6c52b6ababb8cc8",
    "test_2016_flickr.en.gz": "611d361c6334bc7246101d48097c13cf5c4413c5befc793cc629934359d532d9",
}


def fetch(splits=SPLITS, languages=LANGUAGES, data_dir=None, cache_dir=None, base_url=None):
    """The folder holding Multi30k's `<split>.<language>.gz` files, each checked.

    Args:
        splits: the splits to fetch, from `SPLITS`.
        languages: the languages to fetch, from `LANGUAGES`.
        data_dir: offline folder holding `multi30k/<split>.<language>.gz` (else `$KERAS_ATTN_DATA`).
        cache_dir: the Keras cache folder (default `$KERAS_HOME` or `~/.keras`).
        base_url: where to download from (default `BASE_URL`, at a fixed commit).

    Returns:
        the folder (str) holding every requested file, each with its sha256 in `SHA256`.

    Raises:
        ValueError: an unknown split or language, or a file with another sha256.
        FileNotFoundError: the offline folder lacks a file.
        OSError: a download failed.

    Example:
    >>> from keras_attn.datasets import multi30k
    >>> folder = multi30k.fetch(["val"], data_dir="examples/translation/data")
    >>> sorted(os.listdir(folder))[-2:]
    ['val.de.gz', 'val.en.gz']
    """
    splits = (splits,) if isinstance(splits, str) else tuple(splits)
    languages = (languages,) if isinstance(languages, str) else tuple(languages)
    for name, values, allowed in (("split", splits, SPLITS), ("language", languages, LANGUAGES)):
        require(bool(values), f"{name}s", values, f"at least one Multi30k {name}")
        for value in values:
            require(value in allowed, name, value, f"a Multi30k {name}, one of {allowed}")
    for name in (f"{split}.{language}.gz" for split in splits for language in languages):
        path = _files.fetch_file(
            f"multi30k/{name}",
            SHA256[name],
            (base_url or BASE_URL) + name,
            data_dir,
            cache_dir,
            what=f"Multi30k file {name}",
        )
    return os.path.dirname(path)


def read_lines(path):
    """The sentences of one gzip text file of Multi30k, one per line (split on "\n" only)."""
    with gzip.open(path, "rb") as handle:
        text = handle.read().decode("utf-8")
    # "\n" only: str.splitlines would also split on U+2028 or U+000C.
    lines = text.split("\n")
    return lines[:-1] if lines[-1] == "" else lines


def load_data(
    split="train",
    source_language="de",
    target_language="en",
    data_dir=None,
    cache_dir=None,
    base_url=None,
):
    """One split of Multi30k task 1 as two aligned lists of sentences.

    Args:
        split: `"train"`, `"val"` or `"test_2016_flickr"`.
        source_language, target_language: `"de"` and `"en"`, in either order.
        data_dir, cache_dir, base_url: as for `fetch`.

    Returns:
        `(source_sentences, target_sentences)`: aligned lists of `str`, exactly as published.

    Raises:
        ValueError: an unknown split or language, or a file with another sha256.
        FileNotFoundError, OSError: as for `fetch`.

    Example:
    >>> from keras_attn.datasets import multi30k
    >>> german, english = multi30k.load_data("val", data_dir="examples/translation/data")
    >>> len(german), len(english)
    (1014, 1014)
    """
    # fetch refuses an unknown split or language.
    require(
        source_language != target_language,
        "target_language",
        target_language,
        f"another language than source_language={source_language!r}",
    )
    folder = fetch(split, (source_language, target_language), data_dir, cache_dir, base_url)
    source, target = (
        read_lines(os.path.join(folder, f"{split}.{language}.gz"))
        for language in (source_language, target_language)
    )
    if len(source) != len(target):
        raise ValueError(
            f"Multi30k split {split!r} in {folder!r} is not aligned: {len(source)} "
            f"{source_language} lines, {len(target)} {target_language} lines."
        )
    return source, target
