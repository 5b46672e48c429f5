"""Client for the keras_attn models served by TF Serving, over REST or gRPC.

    python examples/serving/client.py translate "Ein Hund rennt im Schnee."
    python examples/serving/client.py --grpc localhost:8500 translate "Ein Hund rennt im Schnee."
    python examples/serving/client.py translate-tokens --sentencepiece-model tokenizer.model "Ein Hund."
    python examples/serving/client.py super-resolve photo.png --output big.png --temperature 0.9 --seed 1
    python examples/serving/client.py generate-music --primer 1 --num-steps 64 --top-p 0.95 --seed 7
    python examples/serving/client.py --grpc localhost:8500 stream-music --primer 1 --num-steps 64
    python examples/serving/client.py --grpc localhost:8500 stream-translate "Ein Hund rennt."

As a library (from this folder, or with it on `sys.path`):

    import client
    client.translate(["Ein Hund rennt."], rest_url="http://localhost:8501")
    inputs = client.music_generator_inputs([[1]], num_steps=32, seed=3)
    body = client.rest_request_body(inputs)          # the JSON TF Serving's REST API takes
    request = client.grpc_request("music_generator", inputs)   # a PredictRequest

This file is the command line; the library it re-exports lives beside it:
client_signatures.py (`SIGNATURES`, the three models' signatures exactly as the
keras_attn exporters write them, checked by tests/export/test_serving_client.py,
and the inputs they take), client_transport.py (REST and gRPC), client_commands.py
(one request per call) and client_streaming.py (`prefill`, then `step`s). The REST
part needs only the standard library and NumPy; the gRPC part imports `tensorflow`
and `tensorflow-serving-api` when first used. See README.md in this folder for the
server side.
"""

import argparse
import json
import os
import sys

import numpy as np

sys.path.append(os.path.dirname(os.path.abspath(__file__)))  # the modules below, when imported

# isort: split

from client_commands import (  # noqa: E402
    SentencePieceCodec,
    generate_music,
    super_resolve,
    translate,
    translate_tokens,
)
from client_signatures import (  # noqa: E402
    DEFAULT_SIGNATURE,
    MUSIC_PAD_ID,
    MUSIC_START_ID,
    SIGNATURES,
    TEXT_END_ID,
    TEXT_PAD_ID,
    TEXT_START_ID,
    TEXT_UNKNOWN_ID,
    Signature,
    Spec,
    make_inputs,
    music_generator_inputs,
    signature,
    super_resolver_inputs,
    translator_inputs,
)
from client_streaming import (  # noqa: E402
    _streamed_rows,
    _streamed_translations,
    stream_music,
    stream_translate,
)
from client_transport import (  # noqa: E402
    DEFAULT_GRPC_TARGET,
    DEFAULT_REST_URL,
    ServingError,
    grpc_predict,
    grpc_request,
    parse_grpc_response,
    parse_rest_response,
    predict,
    rest_endpoint,
    rest_predict,
    rest_request_body,
)

__all__ = [
    "DEFAULT_GRPC_TARGET",
    "DEFAULT_REST_URL",
    "DEFAULT_SIGNATURE",
    "MUSIC_PAD_ID",
    "MUSIC_START_ID",
    "SIGNATURES",
    "TEXT_END_ID",
    "TEXT_PAD_ID",
    "TEXT_START_ID",
    "TEXT_UNKNOWN_ID",
    "SentencePieceCodec",
    "ServingError",
    "Signature",
    "Spec",
    "generate_music",
    "grpc_predict",
    "grpc_request",
    "main",
    "make_inputs",
    "music_generator_inputs",
    "parse_grpc_response",
    "parse_rest_response",
    "predict",
    "rest_endpoint",
    "rest_predict",
    "rest_request_body",
    "signature",
    "stream_music",
    "stream_translate",
    "super_resolve",
    "super_resolver_inputs",
    "translate",
    "translate_tokens",
    "translator_inputs",
]


# ---------------------------------------------------------------- CLI


def _load_images(paths, size):
    """The pictures as the model's (N, size, size, 3) uint8 input: upright
    (EXIF), RGB, the largest centred square area-averaged to `size`, as
    examples/super_resolution/super_resolve.py prepares them (a picture
    that is not square is cropped, not squashed; 16-bit grayscale scaled to
    8 bits, float grayscale read as 0-1 when no value exceeds 1, where
    Pillow's RGB conversion would clip them to white or black)."""
    from PIL import Image, ImageOps

    images = []
    for path in paths:
        with Image.open(path) as image:
            image = ImageOps.exif_transpose(image)
            if image.mode.startswith("I") or image.mode == "F":  # 16/32-bit or float levels
                levels = np.nan_to_num(np.asarray(image, np.float64))
                scale = (
                    1 / 257 if image.mode != "F" else 255.0 if levels.max(initial=0) <= 1 else 1.0
                )
                image = Image.fromarray(np.clip(np.rint(levels * scale), 0, 255).astype(np.uint8))
            image = image.convert("RGB")
            image = ImageOps.fit(image, (size, size), method=Image.Resampling.BOX)
            images.append(np.asarray(image, dtype=np.uint8))
    return np.stack(images)


def _bounded(kind, requirement, low=None, high=None, low_open=False):
    """An argparse type: `kind(text)` within [low, high] ((low, high] with
    `low_open`), else a one-line usage error naming the requirement."""

    def parse(text):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {requirement}, received {text!r}") from None
        below = low is not None and (value <= low if low_open else value < low)
        if value != value or below or (high is not None and value > high):  # NaN too
            raise argparse.ArgumentTypeError(f"expected {requirement}, received {text!r}")
        return value

    return parse


def _primer(text):
    """`--primer`: rows of comma-separated event ids, ';' between rows."""
    try:
        return [[int(i) for i in row.split(",") if i.strip()] for row in text.split(";")]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated integer event ids, ';' between rows, received {text!r}"
        ) from None


def _existing_file(text):
    if not os.path.isfile(text):
        raise argparse.ArgumentTypeError(f"no such file: {text!r}")
    return text


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    positive_int = _bounded(int, "an int >= 1", low=1)
    temperature = _bounded(float, "a number > 0", low=0, low_open=True)
    top_k = _bounded(int, "an int >= 0 (0 = no filter)", low=0)
    top_p = _bounded(float, "a number in (0, 1]", low=0, high=1, low_open=True)
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--rest", default=None, help=f"REST base URL (default {DEFAULT_REST_URL})")
    where.add_argument("--grpc", default=None, help=f"gRPC host:port, e.g. {DEFAULT_GRPC_TARGET}")
    parser.add_argument(
        "--model-name", help="served model name (default: the command's model kind)"
    )
    parser.add_argument(
        "--version", type=positive_int, help="model version (default: newest served)"
    )
    parser.add_argument("--label", help="version label from models.config, e.g. stable")
    parser.add_argument(
        "--timeout",
        type=_bounded(float, "a number of seconds > 0", low=0, low_open=True),
        default=300.0,
        help="seconds",
    )
    parser.add_argument(
        "--verbose",
        action="store_true",
        help="show TensorFlow's start-up logs (--grpc imports it; hidden by default)",
    )
    commands = parser.add_subparsers(dest="command", required=True)

    text = commands.add_parser("translate", help="strings in, strings out (server needs TF Text)")
    text.add_argument("sentences", nargs="+")

    tokens = commands.add_parser("translate-tokens", help="token-id model; tokenizes here")
    tokens.add_argument("sentences", nargs="+")
    tokens.add_argument(
        "--sentencepiece-model",
        required=True,
        type=_existing_file,
        help="tokenizer.model of the run",
    )
    tokens.add_argument(
        "--max-length",
        type=_bounded(int, "an int >= 3", low=3),
        default=64,
        help="max_length used at export",
    )
    tokens.add_argument(
        "--model",
        default="translator_tokens",
        choices=["translator_tokens", "translator"],
        help="'translator' uses the text model's translate_tokens signature",
    )

    streamed = commands.add_parser(
        "stream-translate", help="translate, printing the words as the server writes them"
    )
    streamed.add_argument("sentences", nargs="+")
    streamed.add_argument("--temperature", type=temperature, default=1.0)
    streamed.add_argument("--top-k", type=top_k, default=1, help="1 = greedy (default), 0 = off")
    streamed.add_argument("--top-p", type=top_p, default=1.0)
    streamed.add_argument("--seed", type=int, default=0)
    streamed.add_argument(
        "--sentencepiece-model",
        type=_existing_file,
        help="tokenize here and call the token-id model (translator_tokens)",
    )
    streamed.add_argument(
        "--max-length",
        type=_bounded(int, "an int >= 3", low=3),
        default=64,
        help="max_length used at export (with --sentencepiece-model)",
    )

    images = commands.add_parser(
        "super-resolve", help="low-resolution images -> sampled high-resolution"
    )
    images.add_argument(
        "images", nargs="+", help="image files (centre square, area-averaged to --low-resolution)"
    )
    images.add_argument(
        "--output", nargs="+", required=True, help="one PNG path per image, in the same order"
    )
    images.add_argument(
        "--low-resolution", type=positive_int, default=8, help="the model's input size"
    )
    images.add_argument("--temperature", type=temperature)
    images.add_argument("--seed", type=int)
    images.add_argument("--top-k", type=top_k, help="sample among the k most likely intensities")
    images.add_argument("--top-p", type=top_p, help="nucleus mass in (0, 1]")

    for command, summary in (
        ("generate-music", "continue a primer of event ids"),
        ("stream-music", "the same, printing each position's events as they are sampled"),
    ):
        music = commands.add_parser(command, help=summary)
        music.add_argument(
            "--primer",
            type=_primer,
            default=[[MUSIC_START_ID]],
            help="comma-separated event ids starting with 1; ';' between rows",
        )
        music.add_argument("--num-steps", type=_bounded(int, "an int >= 0", low=0), default=128)
        music.add_argument("--temperature", type=temperature, default=1.0)
        music.add_argument("--top-k", type=top_k, default=0)
        music.add_argument("--top-p", type=top_p, default=1.0)
        music.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.grpc and not args.verbose:
        _import_tensorflow_quietly()
    connection = dict(
        model_name=args.model_name,
        rest_url=args.rest,
        grpc_target=args.grpc,
        version=args.version,
        label=args.label,
        timeout=args.timeout,
    )
    try:
        if args.command == "translate":
            for source, target in zip(args.sentences, translate(args.sentences, **connection)):
                print(f"{source}\n  -> {target}")
        elif args.command == "translate-tokens":
            codec = SentencePieceCodec(args.sentencepiece_model, args.max_length)
            signature_name = "translate_tokens" if args.model == "translator" else DEFAULT_SIGNATURE
            connection["model_name"] = connection["model_name"] or args.model
            results = translate_tokens(
                args.sentences, codec, args.model, signature_name, **connection
            )
            for source, target in zip(args.sentences, results):
                print(f"{source}\n  -> {target}")
        elif args.command == "stream-translate":
            codec = None
            if args.sentencepiece_model:
                codec = SentencePieceCodec(args.sentencepiece_model, args.max_length)
            controls = (args.temperature, args.top_k, args.top_p, args.seed)
            stream = stream_translate(args.sentences, *controls, codec=codec, **connection)
            results = _streamed_translations(stream, _word_printer(len(args.sentences)))
            if len(args.sentences) == 1:
                print()  # ends the line of words
            for source, target in zip(args.sentences, results):
                print(f"{source}\n  -> {target}")
        elif args.command == "super-resolve":
            if len(args.output) != len(args.images):
                parser.error("give one --output path per image")
            from PIL import Image

            result = super_resolve(
                _load_images(args.images, args.low_resolution),
                args.temperature,
                args.seed,
                args.top_k,
                args.top_p,
                **connection,
            )
            for image, path in zip(result, args.output):
                Image.fromarray(image).save(path)
                print(f"wrote {path} {image.shape}")
        else:
            music_args = (args.primer, args.num_steps, args.temperature, args.top_k, args.top_p)
            if args.command == "generate-music":
                rows = generate_music(*music_args, args.seed, **connection)
            else:

                def show(position, events):
                    print(json.dumps({"position": position, "events": events}), flush=True)

                stream = stream_music(*music_args, args.seed, **connection)
                rows = _streamed_rows(args.primer, stream, show)
            for row in rows:
                print(json.dumps(row))
    except (ServingError, ValueError, OSError) as error:  # OSError: a local file or folder
        sys.exit(f"error: {error}")


def _word_printer(count):
    """`on_words` of `_streamed_translations` for the terminal: one sentence's words on one
    line as they come, several sentences' as `[row] words` lines."""

    started = set()

    def on_words(row, words):
        if count == 1:
            print(" " * (row in started) + " ".join(words), end="", flush=True)
            started.add(row)
        else:
            print(f"[{row}] {' '.join(words)}", flush=True)

    return on_words


def _import_tensorflow_quietly():
    """Imports tensorflow as the other example scripts do (`quiet.py`:
    without the C++ runtime's start-up lines), for the gRPC client; a
    process that imported it already is left alone."""
    if "tensorflow" in sys.modules:
        return
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    try:
        import quiet  # noqa: F401
    except ImportError:
        pass  # _grpc_modules says what to install


if __name__ == "__main__":
    main()
