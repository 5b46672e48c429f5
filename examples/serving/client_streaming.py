"""Streamed generation: `prefill`, then one `step` per position, the state carried between.

`stream_music` yields each position's events and `stream_translate` the translations so
far, as the served model writes them (README.md, "Streaming").
"""

from client_commands import _blanked
from client_signatures import (
    _STREAM_STATE,
    _TRANSLATION_STATE,
    MUSIC_PAD_ID,
    make_inputs,
    music_generator_inputs,
)
from client_transport import predict


def stream_translate(
    sentences,
    temperature=1.0,
    top_k=1,
    top_p=1.0,
    seed=0,
    codec=None,
    predict_fn=None,
    **connection,
):
    """Translations as the served translator writes them: `prefill`, then one `step` per token.

    Greedy by default (`top_k=1`: `translate`'s result for a translator exported with
    `num_beams=1`); with another `top_k` (0 = off) it samples the tokens `sample_tokens` gives
    for the same controls and seed. The state (the target tokens and caches so far, and
    the encoder memory `prefill` computed) goes with every call. Stop iterating to stop.

    Args:
        sentences: a str, or a list of str / bytes.
        temperature, top_k, top_p, seed: as `music_generator_inputs`; `top_k=1` is greedy.
        codec: a `SentencePieceCodec` to tokenize here and call the token model
            (`translator_tokens`); None: the string model (`translator`).
        predict_fn: optional `(signature_name, inputs) -> outputs`; default `predict` over
            REST or gRPC with `connection`.

    Yields:
        `(position, translations)`: the target position written and each translation so far.
    """
    if isinstance(sentences, (str, bytes)):
        sentences = [sentences]
    model = "translator" if codec is None else "translator_tokens"
    if codec is None:
        source = {"text": list(sentences)}
    else:
        source = {"encoder_tokens": codec.encode(sentences)}
    if predict_fn is None:

        def predict_fn(signature_name, inputs):
            return predict(model, inputs, signature_name, **connection)

    controls = dict(temperature=temperature, top_k=top_k, top_p=top_p, seed=seed)
    out = predict_fn("prefill", make_inputs(model, "prefill", **source, **controls))
    memory = out["memory"]  # the same for every step
    while True:
        if codec is None:
            texts = [t.decode("utf-8") for t in out["translation"]]
        else:
            texts = _blanked(sentences, codec.decode(out["tokens"]))
        yield int(out["position"]), texts
        if out["done"]:
            return
        state = {name: out[name] for name in _TRANSLATION_STATE}
        out = predict_fn("step", make_inputs(model, "step", **controls, **state, memory=memory))


def _streamed_translations(stream, on_words=None):
    """The last translations of `stream_translate`, calling `on_words(row, words)` as each
    sentence's words are complete: a text's last word may still grow until the next one starts
    or the stream ends."""
    shown, texts = {}, []

    def show(texts, final):
        for row, text in enumerate(texts):
            words = text.split()
            complete, before = words if final else words[:-1], shown.get(row, 0)
            if len(complete) > before and on_words is not None:
                on_words(row, complete[before:])
            shown[row] = max(before, len(complete))

    for _, texts in stream:
        show(texts, final=False)
    show(texts, final=True)
    return texts


def stream_music(
    primer, num_steps, temperature=1.0, top_k=0, top_p=1.0, seed=0, predict_fn=None, **connection
):
    """Events as the served `music_generator` samples them: `prefill`, then one `step` each.

    The loop's state (the caches so far) goes back and forth with every call; the events equal
    `generate_music`'s for the same arguments. Stop iterating to stop generating.

    Args:
        primer, num_steps, temperature, top_k, top_p, seed: as `music_generator_inputs`.
        predict_fn: optional `(signature_name, inputs) -> outputs`; default `predict` over
            REST or gRPC with `connection`.

    Yields:
        `(position, events)`: a position and each row's event there (0: the row has ended).
    """
    request = music_generator_inputs(primer, num_steps, temperature, top_k, top_p, seed)
    if predict_fn is None:

        def predict_fn(signature_name, inputs):
            return predict("music_generator", inputs, signature_name, **connection)

    width = request["primer"].shape[1] + int(num_steps)
    out = predict_fn("prefill", request)
    while True:
        position = int(out["position"])
        if position < width:  # past the request's width: padding only
            yield position, [int(e) for e in out["events"][:, 0]]
        if out["done"]:
            return
        state = {name: out[name] for name in _STREAM_STATE}
        out = predict_fn("step", make_inputs("music_generator", "step", **request, **state))


def _streamed_rows(primer, stream, on_events=None):
    """The rows of `generate_music` built from `stream_music`'s events, as they come."""
    rows = {}
    for position, events in stream:
        if on_events is not None:
            on_events(position, events)
        rows[position] = events
    out = []
    for b, row in enumerate(primer):
        events = list(row) + [rows[p][b] for p in sorted(rows) if p >= len(row)]
        out.append([int(e) for e in events if e != MUSIC_PAD_ID])
    return out
