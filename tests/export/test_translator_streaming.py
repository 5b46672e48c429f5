"""The translator's `prefill` and `step` signatures: a client-driven loop that equals the
whole-loop signatures token for token, greedy (`serving_default`, `translate_tokens`) and
sampled (`sample_tokens`) (issue 48)."""

import json
import sys
import textwrap

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")  # a module of TensorFlow-only tests
import keras

from keras_attn.export import export_translator
from keras_attn.export.streaming import PackedState
from keras_attn.generation import CachedDecoder, greedy_search, sample
from keras_attn.models import translation_transformer
from keras_attn.preprocessing.subword_tokenizer import SubwordTokenizer
from keras_attn.preprocessing.text import encode_source
from tests.export.helpers import run_fresh_python
from tests.export.serving_models import TRANSLATION_EXAMPLE

pytestmark = pytest.mark.requires_tensorflow

MAX_LENGTH = 10
# One layer of width 16: per position its keys and values (2 x 16) and a mask bit.
WIDTH = 2 * 16 + 1
SENTENCES = ["Ein Hund rennt.", "", "Zwei Kinder spielen im Schnee.", "Ein Mann fährt Fahrrad."]
REQUESTS = [
    dict(temperature=1.0, top_k=1, top_p=1.0, seed=0),  # greedy
    dict(temperature=1.0, top_k=0, top_p=1.0, seed=5),
    dict(temperature=0.5, top_k=20, top_p=0.9, seed=3),
    dict(temperature=0.7, top_k=0, top_p=1.0, seed=[21, -8, 4, 9]),  # a seed per row
]
DTYPES = dict(temperature=tf.float32, top_p=tf.float32)

# The client loop of examples/serving/client.py, written with TensorFlow only.
_STREAM = f"""
def stream(signatures, source, controls):
    out, calls = signatures["prefill"](**source, **controls), 0
    memory = out["memory"]  # computed once, sent with every step
    while not out["done"]:
        state = {{k: out[k] for k in ("tokens", "cache", "finished")}}
        out, calls = signatures["step"](**controls, memory=memory, **state), calls + 1
        assert out["cache"].shape[1] == int(out["position"]) == out["tokens"].shape[1] - 1
    tokens = np.zeros((out["tokens"].shape[0], {MAX_LENGTH}), np.int32)
    tokens[:, : out["tokens"].shape[1]] = out["tokens"]
    text = out["translation"].numpy().tolist() if "translation" in out else None
    return tokens.tolist(), text, calls
"""


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    if TRANSLATION_EXAMPLE not in sys.path:
        sys.path.insert(0, TRANSLATION_EXAMPLE)
    from multi30k import load_multi30k

    german, english = load_multi30k(split="val")
    tokenizer = SubwordTokenizer.train(german[:300] + english[:300], vocabulary_size=500)
    keras.utils.set_random_seed(1)
    model = translation_transformer(
        tokenizer.vocabulary_size,
        num_layers=1,
        hidden_dim=16,
        num_heads=2,
        intermediate_dim=32,
        dropout=0.0,
    )
    # Peaked logits and an end id about as likely as the best piece: rows end at different
    # positions, some run to max_length.
    kernel, bias = model.get_layer("logits").get_weights()
    bias[tokenizer.end_id] = 1.5
    model.get_layer("logits").set_weights([kernel * 3.0, bias])
    base = tmp_path_factory.mktemp("translator")
    common = dict(max_length=MAX_LENGTH, num_beams=1)
    text_path = export_translator(model, tokenizer, base / "text", **common)
    tokens_path = export_translator(
        model, tokenizer, base / "tokens", include_text_signature=False, **common
    )
    return model, tokenizer, text_path, tokens_path


def _source(tokenizer, sentences=SENTENCES, width=MAX_LENGTH):
    return encode_source(tokenizer, tf.constant(sentences), MAX_LENGTH).to_tensor(
        shape=[None, width]
    )


def _library(model, tokenizer, source, controls):
    """What `greedy_search` (top_k 1) or `sample` gives for the request."""
    start = tf.fill([source.shape[0], 1], tokenizer.start_id)
    common = dict(
        end_token_id=tokenizer.end_id,
        inputs={"encoder_tokens": source},
        suppressed_token_ids=(tokenizer.pad_id, tokenizer.start_id),
    )
    if controls["top_k"] == 1:
        return np.asarray(greedy_search(model, start, MAX_LENGTH, **common))
    seed = np.asarray(controls["seed"])
    seed = seed[:, None] if seed.ndim else int(seed)  # the engine's (B, 1) per-row seeds
    controls = dict(controls, seed=seed, top_k=controls["top_k"] or None)  # 0: off
    return np.asarray(sample(model, start, MAX_LENGTH, **controls, **common))


def _controls(request):
    return {k: tf.constant(v, DTYPES.get(k, tf.int32)) for k, v in request.items()}


@pytest.mark.slow
def test_streamed_tokens_equal_the_whole_loop_in_a_tensorflow_only_process(exported):
    model, tokenizer, text_path, tokens_path = exported
    # The token model at the source's own width, the text model at max_length.
    narrow = _source(tokenizer, width=None).numpy().tolist()
    wide = _source(tokenizer).numpy().tolist()
    stdout = run_fresh_python(
        "import json\nimport numpy as np\nimport tensorflow as tf, tensorflow_text  # only these\n"
        + _STREAM
        + textwrap.dedent(f"""
        text_model = tf.saved_model.load({str(text_path)!r}).signatures
        token_model = tf.saved_model.load({str(tokens_path)!r}).signatures
        dtypes = dict(temperature=tf.float32, top_p=tf.float32)
        results = []
        for request in {REQUESTS!r}:
            controls = {{k: tf.constant(v, dtypes.get(k, tf.int32)) for k, v in request.items()}}
            greedy = request["top_k"] == 1
            narrow, wide = tf.constant({narrow!r}), tf.constant({wide!r})
            tokens, _, calls = stream(token_model, dict(encoder_tokens=narrow), controls)
            if greedy:
                whole = token_model["serving_default"](encoder_tokens=narrow)["tokens"]
                text_whole = text_model["translate_tokens"](encoder_tokens=wide)["tokens"]
                translation = text_model["serving_default"](text=tf.constant({SENTENCES!r}))
                translation = translation["translation"].numpy().tolist()
            else:
                whole = token_model["sample_tokens"](encoder_tokens=narrow, **controls)["tokens"]
                text_whole = text_model["sample_tokens"](encoder_tokens=wide, **controls)["tokens"]
                translation = None
            text_tokens, text, _ = stream(text_model, dict(text=tf.constant({SENTENCES!r})), controls)
            results.append(dict(
                tokens=tokens, whole=whole.numpy().tolist(), calls=calls,
                text_tokens=text_tokens, text_whole=text_whole.numpy().tolist(),
                text=[t.decode() for t in text], translation=translation and [t.decode() for t in translation],
            ))
        # The session-based loader TF Serving uses: a sampled request, step by step.
        with tf.compat.v1.Session(graph=tf.Graph()) as session:
            meta = tf.compat.v1.saved_model.loader.load(session, ["serve"], {str(tokens_path)!r})
            def run(name, feeds):
                signature = meta.signature_def[name]
                fetches = {{k: v.name for k, v in signature.outputs.items()}}
                return session.run(fetches, {{signature.inputs[k].name: v for k, v in feeds.items()}})
            controls = {{k: np.asarray(v, dtypes.get(k, tf.int32).as_numpy_dtype)
                         for k, v in {REQUESTS[2]!r}.items()}}
            out = run("prefill", dict(controls, encoder_tokens=np.asarray({narrow!r}, np.int32)))
            memory = out["memory"]
            while not out["done"]:
                state = {{k: out[k] for k in ("tokens", "cache", "finished")}}
                out = run("step", dict(controls, memory=memory, **state))
        print(json.dumps([results, out["tokens"].tolist()]))
        """)
    )
    results, session_tokens = json.loads(stdout.strip().splitlines()[-1])
    session_tokens = np.asarray(session_tokens)
    np.testing.assert_array_equal(
        session_tokens, np.asarray(results[2]["tokens"])[:, : len(session_tokens[0])]
    )
    lengths = []
    for request, result in zip(REQUESTS, results):
        tokens = np.asarray(result["tokens"])
        np.testing.assert_array_equal(tokens, result["whole"])
        np.testing.assert_array_equal(
            tokens, _library(model, tokenizer, _source(tokenizer, width=None), request)
        )
        # The text model: the same tokens, but an empty sentence ends at once (translation "").
        text_tokens, text_whole = (
            np.asarray(result["text_tokens"]),
            np.asarray(result["text_whole"]),
        )
        np.testing.assert_array_equal(text_tokens[[0, 2, 3]], text_whole[[0, 2, 3]])
        assert text_tokens[1].tolist() == [tokenizer.start_id] + [0] * (MAX_LENGTH - 1)
        assert result["text"] == [t.decode() for t in tokenizer.detokenize(text_tokens).numpy()]
        assert result["text"][1] == ""
        if result["translation"] is not None:  # greedy: the text signature's translations
            assert result["text"] == result["translation"]
        # One step per position after the first, until every row has ended.
        ends = [
            list(row).index(tokenizer.end_id) if tokenizer.end_id in row else MAX_LENGTH
            for row in tokens
        ]
        lengths += ends
        assert result["calls"] == min(max(ends), MAX_LENGTH - 1) - 1
    # The requests exercise rows that end early and rows that run to max_length.
    assert min(lengths) < MAX_LENGTH - 2 and max(lengths) == MAX_LENGTH


def test_signatures_state_layout_and_bytes_per_position(exported):
    _, tokenizer, text_path, tokens_path = exported
    text_model = tf.saved_model.load(text_path).signatures
    assert sorted(text_model.keys()) == [
        "prefill",
        "sample_tokens",
        "serving_default",
        "step",
        "translate_tokens",
    ]
    step = text_model["step"].structured_input_signature[1]
    assert {k: (v.dtype, v.shape.rank and v.shape.as_list()) for k, v in step.items()} == {
        "temperature": (tf.float32, 0),
        "top_k": (tf.int32, 0),
        "top_p": (tf.float32, 0),
        "seed": (tf.int32, None),
        "tokens": (tf.int32, [None, None]),
        "cache": (tf.float32, [None, None, WIDTH]),
        "memory": (tf.float32, [None, None, WIDTH]),
        "finished": (tf.bool, [None]),
    }
    controls = _controls(REQUESTS[0])
    out = text_model["prefill"](text=tf.constant(SENTENCES[:2]), **controls)
    assert int(out["position"]) == 1 and out["tokens"].shape == (2, 2)
    assert out["tokens"].numpy()[:, 0].tolist() == [tokenizer.start_id] * 2
    assert out["cache"].shape == (2, 1, WIDTH)  # 4 * 33 = 132 bytes per row and target token
    assert out["memory"].shape == (2, MAX_LENGTH, WIDTH)  # and per source position
    assert out["finished"].numpy().tolist() == [False, True]  # the empty sentence
    step = text_model["step"](
        **controls, **{k: out[k] for k in ("tokens", "cache", "memory")}, finished=out["finished"]
    )
    assert "memory" not in step  # the client keeps it
    assert int(step["position"]) == 2 and step["cache"].shape == (2, 2, WIDTH)
    # The token model: no text in or out, no TF Text op.
    token_model = tf.saved_model.load(tokens_path).signatures
    assert sorted(token_model.keys()) == ["prefill", "sample_tokens", "serving_default", "step"]
    out = token_model["prefill"](encoder_tokens=_source(tokenizer, width=None), **controls)
    assert "translation" not in out
    assert out["memory"].shape == (4, _source(tokenizer, width=None).shape[1], WIDTH)


def test_packed_state_of_an_encoder_decoder_round_trips():
    model = translation_transformer(30, num_layers=2, hidden_dim=8, num_heads=2, intermediate_dim=8)
    decoder = CachedDecoder(model)
    packed = PackedState(decoder, 6, lambda n: {"encoder_tokens": tf.ones((1, n), tf.int32)})
    # Per layer: keys and values (2 x 8) and a mask bit, for the target and the source.
    assert (packed.width, packed.sizes) == (34, [16, 16, 1, 1])
    assert (packed.memory_width, packed.memory_sizes) == (34, [16, 1, 16, 1])
    source = tf.constant([[5, 6, 7, 3], [8, 3, 0, 0]])
    state = decoder.initial_state(2, 6, {"encoder_tokens": source})
    _, state = decoder(tf.constant([[2, 9], [2, 4]]), 0, state)
    cache, memory = packed.pack(state), packed.pack_memory(state)
    assert cache.shape == (2, 6, 34) and memory.shape == (2, 4, 34)
    again = packed.unpack(cache, memory)
    for got, want in zip(keras.tree.flatten(again), keras.tree.flatten(state)):
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)
    assert not np.asarray(again["memory"][0][1])[1, 2:].any()  # the source mask: padding
    with pytest.raises(
        ValueError, match="needs `memory_inputs`.*'decoder_tokens', 'encoder_tokens'"
    ):
        PackedState(decoder, 6)


def test_jit_compiled_streaming_equals_its_whole_loops(exported, tmp_path):
    model, tokenizer, _, _ = exported
    path = export_translator(
        model,
        tokenizer,
        tmp_path,
        max_length=MAX_LENGTH,
        num_beams=1,
        include_text_signature=False,
        jit_compile=True,
    )
    signatures = tf.saved_model.load(path).signatures
    namespace = {"np": np}
    exec(_STREAM, namespace)
    source = _source(tokenizer, width=None)
    for request in REQUESTS[:2]:
        controls = _controls(request)
        tokens, _, _ = namespace["stream"](signatures, dict(encoder_tokens=source), controls)
        if request["top_k"] == 1:
            whole = signatures["serving_default"](encoder_tokens=source)
        else:
            whole = signatures["sample_tokens"](encoder_tokens=source, **controls)
        np.testing.assert_array_equal(tokens, whole["tokens"])


@pytest.mark.parametrize(
    "change, message",
    [
        (
            dict(cache=np.zeros((3, 1, WIDTH))),
            r"`tokens`, `cache`, `memory`, `finished` need the same rows",
        ),
        (dict(finished=[False]), r"need the same rows. Received:\] \[2\] \[2\] \[2\] \[1\]"),
        (
            dict(cache=np.zeros((2, 0, WIDTH))),
            r"`cache` must hold 1 to 8 positions. Received:\] \[0\]",
        ),
        (dict(cache=np.zeros((2, 9, WIDTH))), r"`cache` must hold 1 to 8 positions.*\[9\]"),
        (
            dict(tokens=[[2], [2]]),
            r"`tokens` must hold the cache positions \+ 1. Received:\] \[1\]",
        ),
        (dict(tokens=[[2, 500], [2, 3]]), r"`tokens` ids must be in \[0, 500\)"),
        (dict(memory=np.zeros((2, 0, WIDTH))), r"`memory` must hold at least one source position"),
        (dict(temperature=0.0), r"`temperature` must be finite and > 0"),
        (dict(seed=[1, 2, 3]), r"`seed` must be a scalar or of shape \(batch,\)"),
    ],
)
def test_bad_step_requests_get_clear_errors(exported, change, message):
    _, tokenizer, _, tokens_path = exported
    signatures = tf.saved_model.load(tokens_path).signatures
    controls = _controls(REQUESTS[1])
    out = signatures["prefill"](encoder_tokens=_source(tokenizer, SENTENCES[:2]), **controls)
    request = dict(controls, **{k: out[k] for k in ("tokens", "cache", "memory", "finished")})
    for name, value in change.items():
        request[name] = tf.constant(value, request[name].dtype)
    with pytest.raises(tf.errors.InvalidArgumentError, match=message):
        signatures["step"](**request)
