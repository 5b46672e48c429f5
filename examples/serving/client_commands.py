"""One request per call: translate, translate_tokens, super_resolve, generate_music.

Each builds its model's inputs (client_signatures.py), runs one prediction
(client_transport.py) and returns plain Python values.
"""

import os

import numpy as np
from client_signatures import (
    DEFAULT_SIGNATURE,
    MUSIC_PAD_ID,
    TEXT_END_ID,
    TEXT_PAD_ID,
    TEXT_START_ID,
    TEXT_UNKNOWN_ID,
    make_inputs,
    music_generator_inputs,
    super_resolver_inputs,
    translator_inputs,
)
from client_transport import predict


def translate(sentences, **connection):
    """Translations (str) of sentences by the served `translator` (string signature).

    `connection`: `model_name`, `rest_url` or `grpc_target`, `version`, `label`, `timeout`.
    """
    outputs = predict("translator", translator_inputs(sentences), **connection)
    return [t.decode("utf-8") for t in outputs["translation"]]


class SentencePieceCodec:
    """Client-side tokenization for the token-id translator (no TF Text on the server).

    Reproduces what the exported graph does around `translate_tokens`:
    `encode` = `keras_attn.preprocessing.text.encode_source` (pieces, the
    first `max_length - 1` kept, the end id 3 appended, 0-padded) and
    `decode` = `SubwordTokenizer.detokenize` (start and padding ids dropped,
    each row cut at its first end id). Uses the `sentencepiece` package and
    the tokenizer's `.model` file (`SubwordTokenizer.save`;
    examples/translation/train.py writes `tokenizer.model`).

    Args:
        model_file: path of the SentencePiece model.
        max_length: the `max_length` the translator was exported with.
    """

    def __init__(self, model_file, max_length=64):
        import sentencepiece

        if max_length < 2:
            raise ValueError(f"`max_length` must be at least 2. Received: max_length={max_length}.")
        self.processor = sentencepiece.SentencePieceProcessor(model_file=os.fspath(model_file))
        self.max_length = max_length

    def encode(self, sentences):
        """(B, S) int32 encoder ids, S <= max_length."""
        rows = []
        for sentence in sentences:
            # bytes go in as they are: SentencePiece reads invalid UTF-8 as the graph does
            # (each bad byte becomes U+FFFD), which str.decode(errors="replace") would not match.
            rows.append(self.processor.encode(sentence)[: self.max_length - 1] + [TEXT_END_ID])
        width = max(len(r) for r in rows)
        return np.asarray([r + [TEXT_PAD_ID] * (width - len(r)) for r in rows], dtype=np.int32)

    def decode(self, tokens):
        """Sentences (str) of (B, L) generated ids."""
        size = self.processor.get_piece_size()
        texts = []
        for row in np.asarray(tokens):
            ids = []
            for i in row.tolist():
                i = TEXT_UNKNOWN_ID if not 0 <= i < size else i
                if i == TEXT_END_ID:
                    break
                if i not in (TEXT_PAD_ID, TEXT_START_ID):
                    ids.append(i)
            texts.append(self.processor.decode(ids))
        return texts


def translate_tokens(
    sentences, codec, model="translator_tokens", signature_name=DEFAULT_SIGNATURE, **connection
):
    """Translations through a token-id signature, tokenizing on the client.

    For `translator_tokens` (exported with `include_text_signature=False`)
    or the text model's `translate_tokens` signature (`model="translator"`,
    `signature_name="translate_tokens"`). Empty or whitespace-only
    sentences translate to "" as in the string signature.
    """
    if isinstance(sentences, (str, bytes)):
        sentences = [sentences]
    inputs = make_inputs(model, signature_name, encoder_tokens=codec.encode(sentences))
    outputs = predict(model, inputs, signature_name, **connection)
    return _blanked(sentences, codec.decode(outputs["tokens"]))


def _blanked(sentences, texts):
    """`texts`, "" for the empty or whitespace-only sentences (as the string signature does)."""
    blank = [
        (s.decode("utf-8", "replace") if isinstance(s, bytes) else s).strip() == ""
        for s in sentences
    ]
    return ["" if b else t for b, t in zip(blank, texts)]


def super_resolve(images, temperature=None, seed=None, top_k=None, top_p=None, **connection):
    """(B, H, W, 3) uint8 images sampled by the served `super_resolver`."""
    signature_name, inputs = super_resolver_inputs(images, temperature, seed, top_k, top_p)
    return predict("super_resolver", inputs, signature_name, **connection)["image"]


def generate_music(primer, num_steps, temperature=1.0, top_k=0, top_p=1.0, seed=0, **connection):
    """Event-id lists (primer + sampled events, padding removed) from the served `music_generator`."""
    inputs = music_generator_inputs(primer, num_steps, temperature, top_k, top_p, seed)
    events = predict("music_generator", inputs, **connection)["events"]
    return [[int(e) for e in row if e != MUSIC_PAD_ID] for row in events]
