"""Loading the Multi30k task-1 corpus (English-German image captions).

Multi30k (Elliott et al. 2016) is small enough to ship whole: the six files
below live in `examples/translation/data/multi30k/` (1.3 MB). Each split is a
pair of gzip-compressed UTF-8 text files, `<split>.<language>.gz`, one
sentence per line, aligned by line number. The text is untokenized and keeps
its original case, so detokenized model output can be scored with sacrebleu
against it directly.

This module only reads files; tokenization lives in
`keras_attn.preprocessing`. `resolve_data_dir` also takes the files from
`keras_attn.datasets.multi30k` (the same six files, sha256-checked: an
offline folder, else its cache, else a download from the authors'
repository).

Reference:
    Elliott, Frank, Sima'an, Specia. "Multi30K: Multilingual English-German
    Image Descriptions." Proceedings of the 5th Workshop on Vision and
    Language, 2016.
"""

import os

from keras_attn.datasets.multi30k import read_lines

DEFAULT_DATA_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "multi30k")
SPLITS = ("train", "val", "test_2016_flickr")
LANGUAGES = ("de", "en")
OFFICIAL = "multi30k"  # --data_dir multi30k: keras_attn.datasets.multi30k


def resolve_data_dir(data_dir):
    """The folder of `<split>.<language>.gz` files a `--data_dir` names.

    Args:
        data_dir: `"multi30k"` for the official files through
            `keras_attn.datasets.multi30k` (from `$KERAS_ATTN_DATA` if set,
            else its cache `~/.keras/datasets/keras_attn/multi30k`, else
            downloaded once, 1.3 MB); a folder laid out as the project's
            shared data folder (holding `multi30k/`) for its files, checked
            against their sha256; any other folder (or None, the shipped
            copy) as it is.

    Returns:
        a folder for `load_multi30k`.

    Raises:
        ValueError, OSError: from `keras_attn.datasets.multi30k` (a file
            with another sha256, a missing file, a failed download).
    """
    if data_dir is None:
        return DEFAULT_DATA_DIR
    if data_dir == OFFICIAL or os.path.isdir(os.path.join(data_dir, "multi30k")):
        from keras_attn.datasets import multi30k

        return multi30k.fetch(data_dir=None if data_dir == OFFICIAL else data_dir)
    return data_dir


def load_multi30k(
    data_dir=DEFAULT_DATA_DIR,
    split="train",
    source_language="de",
    target_language="en",
):
    """Reads one split of Multi30k task 1 as aligned sentence lists.

    Sentences are returned exactly as stored (original case, punctuation and
    spacing; only the line break is removed).

    Args:
        data_dir: folder holding `<split>.<language>.gz` files. Defaults to
            the copy shipped in `examples/translation/data/multi30k`. `None`
            also means the shipped copy.
        split: one of `"train"` (29,000 pairs), `"val"` (1,014) or
            `"test_2016_flickr"` (1,000; the customary BLEU test set).
        source_language: `"de"` or `"en"`.
        target_language: `"de"` or `"en"`, different from `source_language`.

    Returns:
        `(source_sentences, target_sentences)`: two lists of `str` of equal
        length; element i of one is the translation of element i of the other.

    Raises:
        ValueError: if `split` or a language is unknown, the two languages
            are equal, a file is missing, or the two files of the split do
            not have the same number of lines.

    Example:

    >>> de, en = load_multi30k(split="val")
    >>> len(de), len(en)
    (1014, 1014)

    Reference:
        Elliott et al. 2016, "Multi30K: Multilingual English-German Image
        Descriptions" (derived from Flickr30K, Young et al. 2014).
    """
    if data_dir is None:
        data_dir = DEFAULT_DATA_DIR
    if split not in SPLITS:
        raise ValueError(
            f"Unknown Multi30k split. Received: split={split!r}. Expected one of {SPLITS}."
        )
    for name, language in (
        ("source_language", source_language),
        ("target_language", target_language),
    ):
        if language not in LANGUAGES:
            raise ValueError(
                f"Unknown Multi30k language. Received: {name}={language!r}. "
                f"Expected one of {LANGUAGES}."
            )
    if source_language == target_language:
        raise ValueError(
            "`source_language` and `target_language` must differ. Received: "
            f"source_language={source_language!r}, "
            f"target_language={target_language!r}."
        )
    sentences = []
    for language in (source_language, target_language):
        path = os.path.join(data_dir, f"{split}.{language}.gz")
        if not os.path.isfile(path):
            raise ValueError(
                f"Multi30k file not found. Tried: {path!r}. Expected the "
                f"gzip text files `<split>.<language>.gz` (e.g. "
                f"`{split}.{language}.gz`) in that folder; pass the folder "
                "holding the full Multi30k data with the --data_dir flag "
                f"(the project ships them in {DEFAULT_DATA_DIR!r})."
            )
        sentences.append(read_lines(path))
    source, target = sentences
    if len(source) != len(target):
        raise ValueError(
            f"Multi30k split {split!r} is not aligned: "
            f"{split}.{source_language}.gz has {len(source)} lines but "
            f"{split}.{target_language}.gz has {len(target)}. Expected the "
            "same number of lines in both files."
        )
    return source, target
