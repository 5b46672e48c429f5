"""Export small untrained demo models in TF Serving's layout, to try the server and client.py.

    python examples/serving/export_demo_models.py --output /tmp/tf_serving_models

Writes, under --output:

    translator/1/             strings in, strings out (SentencePiece ops of TF Text in the graph)
    translator_tokens/1/      token ids in and out (no TF Text op: any TF Serving build)
    tokenizer.model           the SentencePiece model for client.py translate-tokens
    super_resolver/1/         uint8 (B, 8, 8, 3) -> uint8 (B, 32, 32, 3)
    music_generator/1/        primer event ids -> sampled events
    models.config             serves every model under --output from one server (see README.md)

The weights are random, so the outputs are noise (repeated pieces, random
pixels and events): these models exist to check the serving set-up, the
signatures and the client end to end. For real ones, train with
examples/translation/train.py, examples/music/train.py and
examples/super_resolution/ (each writes `export/<version>/`), and point the
models.config at those folders. The tokenizer is trained on the Multi30k
sentences shipped in examples/translation/data.
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import quiet  # noqa: E402,F401  (first: TensorFlow's start-up logs only with --verbose)

HERE = os.path.dirname(os.path.abspath(__file__))
TRANSLATION = os.path.join(HERE, "..", "translation")

MODEL_NAMES = ("translator", "translator_tokens", "super_resolver", "music_generator")


def demo_tokenizer(num_sentences=1000, vocabulary_size=1000):
    """A SentencePiece tokenizer trained on the first Multi30k training pairs (German + English)."""
    sys.path.insert(0, TRANSLATION)
    from multi30k import load_multi30k

    from keras_attn.preprocessing.subword_tokenizer import SubwordTokenizer

    german, english = load_multi30k(split="train")
    return SubwordTokenizer.train(
        german[:num_sentences] + english[:num_sentences], vocabulary_size=vocabulary_size
    )


def export_translators(
    output, tokenizer, max_length=32, num_beams=4, hidden_dim=32, version=1, overwrite=False
):
    """Exports one untrained translation model twice: `translator` (text) and `translator_tokens`.

    Returns:
        `(model, text_path, tokens_path)`.
    """
    from keras_attn.export import export_translator
    from keras_attn.models import translation_transformer

    model = translation_transformer(
        tokenizer.vocabulary_size,
        num_layers=1,
        hidden_dim=hidden_dim,
        num_heads=2,
        intermediate_dim=2 * hidden_dim,
        dropout=0.0,
    )
    common = dict(version=version, max_length=max_length, num_beams=num_beams, overwrite=overwrite)
    text_path = export_translator(model, tokenizer, os.path.join(output, "translator"), **common)
    tokens_path = export_translator(
        model,
        tokenizer,
        os.path.join(output, "translator_tokens"),
        include_text_signature=False,
        **common,
    )
    return model, text_path, tokens_path


def export_demo_super_resolver(
    output, low_resolution_size=8, image_size=32, hidden_dim=32, version=1, overwrite=False
):
    """An untrained `super_resolution_transformer` exported to `output/super_resolver/<version>`."""
    from keras_attn.export import export_super_resolver
    from keras_attn.models import super_resolution_transformer

    model = super_resolution_transformer(
        low_resolution_size=low_resolution_size,
        image_size=image_size,
        num_encoder_layers=1,
        num_layers=1,
        hidden_dim=hidden_dim,
        num_heads=2,
        intermediate_dim=2 * hidden_dim,
        dropout=0.0,
    )
    path = export_super_resolver(
        model, os.path.join(output, "super_resolver"), version=version, overwrite=overwrite
    )
    return model, path


def export_demo_music_generator(
    output, vocabulary_size=391, max_length=256, hidden_dim=32, version=1, overwrite=False
):
    """An untrained `music_transformer` (performance-event vocabulary) exported to
    `output/music_generator/<version>`."""
    from keras_attn.export import export_music_generator
    from keras_attn.models import music_transformer

    model = music_transformer(
        vocabulary_size,
        num_layers=1,
        hidden_dim=hidden_dim,
        num_heads=2,
        intermediate_dim=2 * hidden_dim,
        dropout=0.0,
        max_relative_position=64,
    )
    path = export_music_generator(
        model,
        os.path.join(output, "music_generator"),
        version=version,
        max_length=max_length,
        overwrite=overwrite,
    )
    return model, path


def models_config(names=MODEL_NAMES, container_root="/models"):
    """The text of a TF Serving `--model_config_file` serving each name from `<root>/<name>`."""
    entries = "".join(
        "  config {\n"
        f'    name: "{name}"\n'
        f'    base_path: "{container_root}/{name}"\n'
        '    model_platform: "tensorflow"\n'
        "  }\n"
        for name in names
    )
    return "model_config_list {\n" + entries + "}\n"


def served_models(output):
    """The names of MODEL_NAMES that have a numbered version folder under
    `output`: what models.config serves, whether this run exported them or
    an earlier one did (`--skip`)."""

    def has_version(name):
        folder = os.path.join(output, name)
        return os.path.isdir(folder) and any(d.isdigit() for d in os.listdir(folder))

    return [name for name in MODEL_NAMES if has_version(name)]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--output", default="/tmp/tf_serving_models")
    parser.add_argument("--version", type=int, default=1)
    parser.add_argument(
        "--verbose", action="store_true", help="show TensorFlow's start-up logs (hidden by default)"
    )
    parser.add_argument("--overwrite", action="store_true", help="replace existing version folders")
    parser.add_argument(
        "--skip", nargs="*", default=[], choices=["translator", "super_resolver", "music_generator"]
    )
    args = parser.parse_args(argv)
    if args.version < 1:
        parser.error(f"argument --version: expected a number > 0, received {args.version}")
    kinds = [k for k in ("translator", "super_resolver", "music_generator") if k not in args.skip]
    folders = {"translator": ("translator", "translator_tokens")}
    existing = [
        os.path.join(args.output, folder, str(args.version))
        for kind in kinds
        for folder in folders.get(kind, (kind,))
        if os.path.lexists(os.path.join(args.output, folder, str(args.version)))
    ]
    if existing and not args.overwrite:  # before a minute of tokenizer training and tracing
        parser.error(
            f"version {args.version} is exported already ({', '.join(existing)}): pass "
            f"--overwrite to replace it, or --version {args.version + 1} to add a version."
        )
    os.makedirs(args.output, exist_ok=True)
    if "translator" not in args.skip:
        tokenizer = demo_tokenizer()
        tokenizer.save(os.path.join(args.output, "tokenizer.model"))
        _, text_path, tokens_path = export_translators(
            args.output, tokenizer, version=args.version, overwrite=args.overwrite
        )
        print(f"translator -> {text_path}\ntranslator_tokens -> {tokens_path}")
    if "super_resolver" not in args.skip:
        _, path = export_demo_super_resolver(
            args.output, version=args.version, overwrite=args.overwrite
        )
        print(f"super_resolver -> {path}")
    if "music_generator" not in args.skip:
        _, path = export_demo_music_generator(
            args.output, version=args.version, overwrite=args.overwrite
        )
        print(f"music_generator -> {path}")
    # Every model there, so that a run with --skip keeps serving the others.
    with open(os.path.join(args.output, "models.config"), "w") as f:
        f.write(models_config(served_models(args.output)))
    print(
        f"wrote {os.path.join(args.output, 'models.config')}; serve with:\n"
        f"  docker run --rm -p 8500:8500 -p 8501:8501 --mount type=bind,source={os.path.abspath(args.output)},"
        "target=/models tensorflow/serving --model_config_file=/models/models.config"
    )


if __name__ == "__main__":
    quiet.run(main)
