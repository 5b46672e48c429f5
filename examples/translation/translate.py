"""Translate sentences with an exported translator, as a server would run it.

    python examples/translation/translate.py runs/translation_de_en/export "Ein Hund rennt im Schnee."

Loads the newest version folder under the export directory (TF Serving's
rule) in this fresh process, which imports only `tensorflow` and
`tensorflow_text` — neither keras nor keras_attn — and prints each
translation. Without sentences, translates a few from the test set.
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import quiet  # noqa: E402,F401  (first: TensorFlow's start-up logs only with --verbose)

# isort: split

import served  # noqa: E402  (the newest version, as TF Serving loads it)
import tensorflow as tf  # noqa: E402
import tensorflow_text  # noqa: E402,F401  (registers the SentencePiece ops)

DEFAULT_SENTENCES = {
    "de": [
        "Ein Mann mit einem orangefarbenen Hut, der etwas anstarrt.",
        "Ein kleines Mädchen klettert in ein Spielhaus aus Holz.",
        "Zwei Hunde spielen im Schnee.",
    ],
    "en": [
        "A man in an orange hat starring at something.",
        "A little girl climbing into a wooden playhouse.",
        "Two dogs are playing in the snow.",
    ],
}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("export_dir", help="base folder holding <version>/ SavedModels")
    parser.add_argument("sentences", nargs="*")
    parser.add_argument(
        "--source", default="de", choices=["de", "en"], help="language of the default sentences"
    )
    parser.add_argument(
        "--verbose", action="store_true", help="show TensorFlow's start-up logs (hidden by default)"
    )
    args = parser.parse_args(argv)
    path, serve = served.load_signature(
        args.export_dir,
        "serving_default",
        inputs=("text",),
        written_by="examples/translation/train.py",
    )
    sentences = args.sentences or DEFAULT_SENTENCES[args.source]
    translations = serve(text=tf.constant(sentences))["translation"].numpy()
    print(f"Translations by {path} (this process imported tensorflow and tensorflow_text only):")
    for source, target in zip(sentences, translations):
        print(f"  {source}\n  -> {target.decode('utf-8')}")


if __name__ == "__main__":
    quiet.run(main)
