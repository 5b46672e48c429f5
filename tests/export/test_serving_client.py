"""examples/serving/client.py against the exported signatures, through a stand-in TF Serving.

The client's requests must carry exactly the input names and dtypes of the exported
`serving_default` (and other) signatures, read here from the SavedModels themselves. The
REST bodies and gRPC `PredictRequest`s it builds are decoded the way TF Serving decodes them
(fake_tf_serving.py), run through the loaded signatures in this process, and the answers
parsed back by the client; the results must equal calling the signature directly.
"""

import base64
import json
import os
import re

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")  # a module of TensorFlow-only tests
from tensorflow.core.framework import types_pb2

from keras_attn.preprocessing.text import encode_source
from tests.export import fake_tf_serving, serving_models

pytestmark = pytest.mark.requires_tensorflow

client = serving_models.example_module("client")
demo = serving_models.example_module("export_demo_models")
import client_commands  # beside client.py, which put its folder on sys.path

MAX_LENGTH = serving_models.MAX_LENGTH
README = os.path.join(serving_models.SERVING_EXAMPLE, "README.md")
SENTENCES = ["Ein Mann fährt Fahrrad.", "Zwei Hunde spielen im Schnee.", "Ein Kind lacht."]
ODD = ["", "   ", b"\xff\xfe kaputt"]  # empty, blank, not UTF-8
LONG = " ".join(["Hund"] * 40)  # truncated to MAX_LENGTH - 1 pieces + the end id


@pytest.fixture(scope="module")
def translator():
    exported = serving_models.translator()
    return (
        exported,
        tf.saved_model.load(exported.text_path).signatures,
        tf.saved_model.load(exported.tokens_path).signatures,
    )


@pytest.fixture(scope="module")
def music():
    exported = serving_models.music_generator()
    return exported, tf.saved_model.load(exported.path).signatures


def _client_dtype(spec):
    return tf.string if spec.dtype == "string" else tf.as_dtype(np.dtype(spec.dtype))


def assert_client_matches(kind, signatures):
    """The client's declared signatures are those of the SavedModel: names, dtypes, shapes."""
    assert set(client.SIGNATURES[kind]) <= set(signatures.keys())
    for name, declared in client.SIGNATURES[kind].items():
        function = signatures[name]
        inputs = function.structured_input_signature[1]
        assert sorted(inputs) == sorted(declared.inputs), (kind, name)
        for key, spec in inputs.items():
            assert _client_dtype(declared.inputs[key]) == spec.dtype, (kind, name, key)
            assert tf.TensorShape(declared.inputs[key].shape).is_compatible_with(spec.shape), (
                kind,
                name,
                key,
            )
        outputs = function.structured_outputs
        assert sorted(outputs) == sorted(declared.outputs), (kind, name)
        for key, spec in outputs.items():
            assert _client_dtype(declared.outputs[key]) == spec.dtype, (kind, name, key)
            assert tf.TensorShape(declared.outputs[key].shape).is_compatible_with(spec.shape), (
                kind,
                name,
                key,
            )


def assert_request_matches(inputs, function):
    """A request's inputs have exactly the signature's names, dtypes and compatible shapes."""
    specs = function.structured_input_signature[1]
    assert sorted(inputs) == sorted(specs)
    for name, value in inputs.items():
        dtype = tf.string if value.dtype == object else tf.as_dtype(value.dtype)
        assert dtype == specs[name].dtype, name
        assert specs[name].shape.is_compatible_with(value.shape), name


def direct(function, inputs):
    """The signature called in-process, the reference for every round trip."""
    specs = function.structured_input_signature[1]
    return {
        k: v.numpy()
        for k, v in function(
            **{name: tf.constant(value, specs[name].dtype) for name, value in inputs.items()}
        ).items()
    }


def rest_round_trip(kind, signatures, inputs, signature_name="serving_default", **options):
    body = client.rest_request_body(inputs, signature_name, **options)
    text = json.dumps(body)  # what goes over the wire
    _, _, decoded = fake_tf_serving.decode_rest_request(text, signatures)
    assert_request_matches(decoded, signatures[signature_name])
    answer = fake_tf_serving.rest_predict(text, signatures)
    return body, client.parse_rest_response(answer, kind, signature_name)


def grpc_round_trip(kind, models, model_name, inputs, signature_name="serving_default"):
    request = client.grpc_request(model_name, inputs, signature_name)
    response = fake_tf_serving.grpc_predict(models, request)
    return request, client.parse_grpc_response(response, kind, signature_name)


def test_client_signatures_match_the_exports(translator, music):
    _, text_signatures, token_signatures = translator
    assert_client_matches("translator", text_signatures)
    assert_client_matches("translator_tokens", token_signatures)
    assert_client_matches("music_generator", music[1])


def test_translator_over_rest_rows_columns_and_base64(translator):
    _, signatures, _ = translator
    inputs = client.translator_inputs(SENTENCES + ODD)
    assert_request_matches(inputs, signatures["serving_default"])
    want = direct(signatures["serving_default"], inputs)["translation"]
    assert list(want[3:5]) == [b"", b""]

    body, got = rest_round_trip("translator", signatures, inputs)
    # One input: rows are bare values; valid UTF-8 goes as text, the rest as base64.
    assert body["signature_name"] == "serving_default"
    assert body["instances"][:4] == SENTENCES + [""]
    assert body["instances"][5] == {"b64": base64.b64encode(b"\xff\xfe kaputt").decode()}
    np.testing.assert_array_equal(got["translation"], want)
    assert got["translation"].dtype == object and isinstance(got["translation"][0], bytes)

    body, got = rest_round_trip("translator", signatures, inputs, request_format="inputs")
    assert set(body) == {"signature_name", "inputs"} and set(body["inputs"]) == {"text"}
    np.testing.assert_array_equal(got["translation"], want)
    body, got = rest_round_trip("translator", signatures, inputs, binary=True)
    assert all(set(row) == {"b64"} for row in body["instances"])
    np.testing.assert_array_equal(got["translation"], want)

    # The text model's token signature, by name.
    tokens = encode_source(
        serving_models.translator().tokenizer, tf.constant(SENTENCES), MAX_LENGTH
    )
    inputs = client.make_inputs("translator", "translate_tokens", encoder_tokens=tokens.to_tensor())
    body, got = rest_round_trip("translator", signatures, inputs, "translate_tokens")
    assert body["signature_name"] == "translate_tokens"
    np.testing.assert_array_equal(
        got["tokens"], direct(signatures["translate_tokens"], inputs)["tokens"]
    )


def test_translator_grpc_request(translator):
    exported, signatures, _ = translator
    models = fake_tf_serving.Models({"translator": {1: signatures}})
    inputs = client.translator_inputs(SENTENCES + ODD)
    request, got = grpc_round_trip("translator", models, "translator", inputs)
    assert request.model_spec.name == "translator"
    assert request.model_spec.signature_name == "serving_default"
    assert not request.model_spec.HasField("version")
    assert list(request.inputs) == ["text"]
    proto = request.inputs["text"]
    assert proto.dtype == types_pb2.DT_STRING
    assert [d.size for d in proto.tensor_shape.dim] == [6]
    assert (
        proto.string_val[5] == b"\xff\xfe kaputt" and proto.string_val[0] == SENTENCES[0].encode()
    )
    np.testing.assert_array_equal(
        got["translation"], direct(signatures["serving_default"], inputs)["translation"]
    )

    pinned = client.grpc_request("translator", inputs, version=3)
    assert pinned.model_spec.version.value == 3
    labelled = client.grpc_request("translator", inputs, label="stable")
    assert labelled.model_spec.version_label == "stable"
    with pytest.raises(ValueError, match="not both"):
        client.grpc_request("translator", inputs, version=3, label="stable")


def test_client_side_tokenization_with_the_token_model_equals_the_text_model(translator):
    exported, text_signatures, token_signatures = translator
    codec = client.SentencePieceCodec(exported.sentencepiece_file, MAX_LENGTH)
    sentences = SENTENCES + [LONG, b"\xff\xfe kaputt"]
    ids = codec.encode(sentences)
    want_ids = (
        encode_source(exported.tokenizer, tf.constant(sentences), MAX_LENGTH).to_tensor().numpy()
    )
    np.testing.assert_array_equal(ids, want_ids)
    assert ids.dtype == np.int32 and ids.shape[1] == MAX_LENGTH and ids[3, -1] == client.TEXT_END_ID

    inputs = client.make_inputs("translator_tokens", encoder_tokens=ids)
    _, got = rest_round_trip("translator_tokens", token_signatures, inputs)
    generated = got["tokens"]
    assert generated.dtype == np.int32 and generated.shape == (5, MAX_LENGTH)
    texts = codec.decode(generated)
    assert texts == [t.decode() for t in exported.tokenizer.detokenize(generated).numpy()]
    # Client-side SentencePiece + the token model = the string model on the server.
    served = direct(text_signatures["serving_default"], client.translator_inputs(sentences))
    assert texts == [t.decode() for t in served["translation"]]
    # Out-of-range ids read as unknown, start/padding dropped, cut at the end id.
    unknown = exported.tokenizer.detokenize([[2, 900, 5, 3, 7]]).numpy()[0].decode()
    assert codec.decode(np.array([[2, 900, 5, 3, 7]])) == [unknown]


def test_music_generator_scalars_go_columnar(music):
    exported, signatures = music
    inputs = client.music_generator_inputs(
        [[1, 7, 9], [1]], num_steps=6, temperature=0.9, top_k=8, top_p=0.95, seed=5
    )
    assert_request_matches(inputs, signatures["serving_default"])
    np.testing.assert_array_equal(inputs["primer"], [[1, 7, 9], [1, 0, 0]])
    want = direct(signatures["serving_default"], inputs)["events"]
    assert want.shape == (2, 9) and (want[:, 3:] != 0).any()

    body, got = rest_round_trip("music_generator", signatures, inputs)
    assert set(body) == {"signature_name", "inputs"}  # auto: scalars force the columnar format
    assert body["inputs"]["num_steps"] == 6 and body["inputs"]["seed"] == 5
    assert (
        body["inputs"]["temperature"] == 0.9 and body["inputs"]["top_p"] == 0.95
    )  # short decimals
    assert body["inputs"]["primer"] == [[1, 7, 9], [1, 0, 0]]
    np.testing.assert_array_equal(got["events"], want)
    assert got["events"].dtype == np.int32
    with pytest.raises(ValueError, match="Scalars such as num_steps"):
        client.rest_request_body(inputs, request_format="instances")

    models = fake_tf_serving.Models({"music_generator": {1: signatures}})
    request, got = grpc_round_trip("music_generator", models, "music_generator", inputs, "generate")
    dtypes = {name: proto.dtype for name, proto in request.inputs.items()}
    assert dtypes == {
        "primer": types_pb2.DT_INT32,
        "num_steps": types_pb2.DT_INT32,
        "temperature": types_pb2.DT_FLOAT,
        "top_k": types_pb2.DT_INT32,
        "top_p": types_pb2.DT_FLOAT,
        "seed": types_pb2.DT_INT32,
    }
    assert request.inputs["num_steps"].tensor_shape.dim == [] and request.inputs[
        "num_steps"
    ].int_val == [6]
    np.testing.assert_array_equal(got["events"], want)


def test_stream_music_equals_the_one_shot_events_over_rest_grpc_and_the_cli(music, capsys):
    exported, signatures = music
    request = dict(num_steps=6, temperature=0.9, top_k=8, top_p=0.95, seed=5)
    primer = [[1, 7, 9], [1]]
    want = direct(signatures["serving_default"], client.music_generator_inputs(primer, **request))
    want = [[int(e) for e in row if e != 0] for row in want["events"]]
    models = fake_tf_serving.Models({"music_generator": {1: signatures}})

    def over_rest(name, inputs):
        return rest_round_trip("music_generator", signatures, inputs, name)[1]

    def over_grpc(name, inputs):
        return grpc_round_trip("music_generator", models, "music_generator", inputs, name)[1]

    calls = []

    def in_process(name, inputs):
        calls.append(name)
        return direct(signatures[name], inputs)

    transports = {"direct": in_process, "rest": over_rest, "grpc": over_grpc}
    for name, predict_fn in transports.items():
        seen = []
        stream = client.stream_music(primer, predict_fn=predict_fn, **request)
        rows = client._streamed_rows(
            primer, stream, lambda p, events, seen=seen: seen.append((p, events))
        )
        assert rows == want, name
        assert [p for p, _ in seen] == list(range(1, 1 + len(seen)))  # from the shortest primer
        assert seen[0][1][0] == 7  # the longer row's primer event, forced
    # One call per position; stopping the iteration stops generating.
    assert calls == ["prefill"] + ["step"] * (len(seen) - 1)
    calls.clear()
    stream = client.stream_music(primer, predict_fn=in_process, **request)
    next(stream), next(stream)
    assert calls == ["prefill", "step"]
    # The command line, over (stand-in) REST: a line per position, then the rows.
    with fake_tf_serving.RestServer(models) as rest:
        flags = ["--primer", "1,7,9;1", "--num-steps", "6", "--temperature", "0.9", "--top-k", "8"]
        client.main(["--rest", rest.url, "stream-music", *flags, "--top-p", "0.95", "--seed", "5"])
    lines = capsys.readouterr().out.splitlines()
    assert lines[-2:] == [json.dumps(row) for row in want]
    assert json.loads(lines[0]) == {"position": 1, "events": [7, want[1][1]]}


def test_stream_translate_equals_the_one_shot_translation_over_rest_grpc_and_the_cli(
    translator, capsys
):
    exported, text_signatures, token_signatures = translator
    sentences = SENTENCES + ["   "]
    greedy = direct(text_signatures["serving_default"], client.translator_inputs(sentences))
    greedy = [t.decode() for t in greedy["translation"]]
    codec = client.SentencePieceCodec(exported.sentencepiece_file, MAX_LENGTH)
    controls = dict(temperature=0.9, top_k=0, top_p=0.95, seed=5)
    inputs = client.make_inputs(
        "translator_tokens", "sample_tokens", encoder_tokens=codec.encode(sentences), **controls
    )
    sampled_tokens = direct(token_signatures["sample_tokens"], inputs)["tokens"]
    sampled = client_commands._blanked(sentences, codec.decode(sampled_tokens))
    assert sampled != greedy and sampled[-1] == greedy[-1] == ""
    models = fake_tf_serving.Models(
        {"translator": {1: text_signatures}, "translator_tokens": {1: token_signatures}}
    )
    for kind, signatures, options, want in (
        ("translator", text_signatures, {}, greedy),
        ("translator_tokens", token_signatures, dict(codec=codec, **controls), sampled),
    ):
        calls, last = [], {}

        def in_process(name, inputs, signatures=signatures, calls=calls, last=last):
            calls.append(name)
            last.update(direct(signatures[name], inputs))
            return dict(last)

        def over_rest(name, inputs, kind=kind, signatures=signatures):
            return rest_round_trip(kind, signatures, inputs, name)[1]

        def over_grpc(name, inputs, kind=kind):
            return grpc_round_trip(kind, models, kind, inputs, name)[1]

        for name, predict_fn in (("direct", in_process), ("rest", over_rest), ("grpc", over_grpc)):
            seen = []
            stream = client.stream_translate(sentences, predict_fn=predict_fn, **options)
            texts = client._streamed_translations(stream, lambda *w, seen=seen: seen.append(w))
            assert texts == want, (kind, name)
            for row, text in enumerate(want):  # each word once, in order
                assert [w for r, words in seen if r == row for w in words] == text.split()
        # One call per target position until done; the tokens are the one-shot ones.
        assert calls == ["prefill"] + ["step"] * (len(calls) - 1)
        assert 1 < len(calls) <= MAX_LENGTH - 1
        if kind == "translator_tokens":
            tokens = np.zeros_like(sampled_tokens)
            tokens[:, : last["tokens"].shape[1]] = last["tokens"]
            np.testing.assert_array_equal(tokens, sampled_tokens)
    # The command line, over (stand-in) REST: one sentence's words on a line as they come.
    codec_flags = ["--sentencepiece-model", exported.sentencepiece_file, "--max-length", "10"]
    with fake_tf_serving.RestServer(models) as rest:
        client.main(["--rest", rest.url, "stream-translate", SENTENCES[0]])
        # (Compared as whole strings: an untrained model's pieces may hold \r or \n.)
        lines = [" ".join(greedy[0].split()), SENTENCES[0], f"  -> {greedy[0]}", ""]
        assert capsys.readouterr().out == "\n".join(lines)
        flags = ["--top-k", "0", "--temperature", "0.9", "--top-p", "0.95", "--seed", "5"]
        client.main(["--rest", rest.url, "stream-translate", *SENTENCES, *flags, *codec_flags])
    out = capsys.readouterr().out
    pairs = "".join(f"{s}\n  -> {t}\n" for s, t in zip(SENTENCES, sampled))
    assert out.endswith(pairs)
    words = [line.split(" ", 1) for line in out[: -len(pairs)].splitlines()]
    assert " ".join(w for row, w in words if row == "[1]") == " ".join(sampled[1].split())


def test_bad_inputs_are_refused_before_sending():
    with pytest.raises(ValueError, match=r"Missing: \['seed'\]; unexpected: \['sed'\]"):
        client.make_inputs(
            "music_generator", primer=[[1]], num_steps=1, temperature=1.0, top_k=0, top_p=1.0, sed=0
        )
    with pytest.raises(
        ValueError,
        match=r"`image` must have shape \(\?, \?, \?, 3\) \(uint8\). "
        r"Received shape \(1, 8, 8, 1\)",
    ):
        client.super_resolver_inputs(np.zeros((1, 8, 8, 1), np.uint8))
    with pytest.raises(
        ValueError, match=r"out of the uint8 range \[0, 255\]. Received min 0, max 300"
    ):
        client.super_resolver_inputs(np.arange(192).reshape(1, 8, 8, 3) * 300 // 191)
    with pytest.raises(ValueError, match="`num_steps` must hold integers"):
        client.music_generator_inputs([[1]], num_steps=2.5)
    with pytest.raises(ValueError, match="`temperature` must be > 0"):
        client.super_resolver_inputs(np.zeros((1, 8, 8, 3), np.uint8), temperature=0.0)
    with pytest.raises(ValueError, match="at least one row of at least one event"):
        client.music_generator_inputs([[1], []], num_steps=2)
    with pytest.raises(ValueError, match="Unknown model 'translater'"):
        client.signature("translater")
    signature_name, inputs = client.super_resolver_inputs(np.zeros((2, 8, 8, 3), np.uint8), seed=4)
    assert signature_name == "sample_with_options"
    assert inputs["seed"].dtype == np.int64 and inputs["temperature"] == np.float32(1.0)


def test_models_config_serves_every_model_there_after_a_run_with_skip(tmp_path, capsys):
    # A run with --skip wrote a models.config of its own models only, and
    # the server restarted with it stopped serving the skipped ones.
    for folder in ("translator/1", "translator_tokens/1", "music_generator/3", "super_resolver"):
        os.makedirs(tmp_path / folder)
    demo.main(
        [
            "--output",
            str(tmp_path),
            "--version",
            "2",
            "--skip",
            "translator",
            "super_resolver",
            "music_generator",
        ]
    )
    config = (tmp_path / "models.config").read_text()
    assert config == demo.models_config(["translator", "translator_tokens", "music_generator"])
    assert "models.config; serve with" in capsys.readouterr().out


@pytest.mark.slow
def test_transport_over_http_and_grpc(translator, music, capsys):
    # The batch shapes of the tests above: a signature's first call with a new input shape is
    # slow (graph optimisation), later ones are fast.
    exported, text_signatures, token_signatures = translator
    models = fake_tf_serving.Models(
        {
            "translator": {1: text_signatures},
            "translator_tokens": {1: token_signatures},
            "music_generator": {1: music[1]},
        }
    )
    sentences = SENTENCES + ODD
    want = [
        t.decode()
        for t in direct(text_signatures["serving_default"], client.translator_inputs(sentences))[
            "translation"
        ]
    ]
    with (
        fake_tf_serving.RestServer(models) as rest,
        fake_tf_serving.GrpcServer(models) as grpc_server,
    ):
        assert client.translate(sentences, rest_url=rest.url) == want
        assert client.translate(sentences, grpc_target=grpc_server.target) == want
        codec = client.SentencePieceCodec(exported.sentencepiece_file, MAX_LENGTH)
        blank = SENTENCES + [LONG, "  "]  # "  ": "" without asking the model, as the string model
        want_blank = [
            t.decode()
            for t in direct(text_signatures["serving_default"], client.translator_inputs(blank))[
                "translation"
            ]
        ]
        assert want_blank[-1] == ""
        assert client.translate_tokens(blank, codec, rest_url=rest.url) == want_blank
        assert (
            client.translate_tokens(
                SENTENCES,
                codec,
                model="translator",
                model_name="translator",
                signature_name="translate_tokens",
                grpc_target=grpc_server.target,
            )
            == want_blank[:3]
        )
        request = dict(num_steps=6, temperature=0.9, top_k=8, top_p=0.95, seed=5)
        events = client.generate_music([[1, 7, 9], [1]], rest_url=rest.url, **request)
        assert events == client.generate_music(
            [[1, 7, 9], [1]], grpc_target=grpc_server.target, **request
        )
        want_events = direct(
            music[1]["serving_default"], client.music_generator_inputs([[1, 7, 9], [1]], **request)
        )["events"]
        assert events == [[int(e) for e in row if e != 0] for row in want_events]
        assert events[0][:3] == [1, 7, 9] and len(events[0]) > 3

        # TF Serving's refusals reach the caller with its message.
        with pytest.raises(
            client.ServingError, match=r"HTTP 404 .*Servable not found.*Latest\(nope\)"
        ):
            client.translate(SENTENCES, model_name="nope", rest_url=rest.url)
        with pytest.raises(client.ServingError, match=r"NOT_FOUND .*Specific\(translator, 2\)"):
            client.translate(SENTENCES, version=2, grpc_target=grpc_server.target)
        with pytest.raises(client.ServingError, match="(?s)HTTP 400 .*primer.*at most 6 events"):
            client.generate_music([[1] * 7], num_steps=1, rest_url=rest.url)
        with pytest.raises(client.ServingError, match="(?s)INVALID_ARGUMENT .*top_p"):
            client.generate_music([[1]], num_steps=1, top_p=1.5, grpc_target=grpc_server.target)

        text_args = SENTENCES + ["", "   ", "Hund"]  # six rows, the shape of `sentences`
        client.main(["--rest", rest.url, "translate"] + text_args)
        want_cli = [
            t.decode()
            for t in direct(
                text_signatures["serving_default"], client.translator_inputs(text_args)
            )["translation"]
        ]
        assert capsys.readouterr().out == "".join(
            f"{s}\n  -> {t}\n" for s, t in zip(text_args, want_cli)
        )
        client.main(
            [
                "--grpc",
                grpc_server.target,
                "generate-music",
                "--primer",
                "1,7,9;1",
                "--num-steps",
                "6",
                "--temperature",
                "0.9",
                "--top-k",
                "8",
                "--top-p",
                "0.95",
                "--seed",
                "5",
            ]
        )
        assert capsys.readouterr().out == "".join(json.dumps(row) + "\n" for row in events)
    with pytest.raises(SystemExit, match="Cannot reach TF Serving"):
        client.main(["--rest", rest.url, "translate", "x"])


def test_models_config_is_a_valid_tf_serving_config():
    from google.protobuf import text_format
    from tensorflow_serving.config import model_server_config_pb2

    config = text_format.Parse(demo.models_config(), model_server_config_pb2.ModelServerConfig())
    assert [(c.name, c.base_path, c.model_platform) for c in config.model_config_list.config] == [
        (name, f"/models/{name}", "tensorflow") for name in demo.MODEL_NAMES
    ]
    # Every models.config of the README parses, and names a model the client knows.
    with open(README, encoding="utf-8") as f:
        blocks = re.findall(r"```protobuf\n(.*?)```", f.read(), re.S)
    assert blocks
    for block in blocks:
        config = text_format.Parse(block, model_server_config_pb2.ModelServerConfig())
        assert {c.name for c in config.model_config_list.config} <= set(client.SIGNATURES)


@pytest.mark.slow
def test_super_resolver_over_rest_and_grpc():
    exported = serving_models.super_resolver()
    signatures = tf.saved_model.load(exported.path).signatures
    assert_client_matches("super_resolver", signatures)
    images = np.arange(2 * 2 * 2 * 3, dtype=np.uint8).reshape(2, 2, 2, 3) * 10
    name, inputs = client.super_resolver_inputs(images)
    assert name == "serving_default"
    want = direct(signatures[name], inputs)["image"]
    body, got = rest_round_trip("super_resolver", signatures, inputs)
    assert body["instances"][0] == images[0].tolist()  # one batched input: bare rows
    np.testing.assert_array_equal(got["image"], want)
    assert got["image"].dtype == np.uint8 and got["image"].shape == (2, 4, 4, 3)

    name, inputs = client.super_resolver_inputs(images, temperature=0.9, seed=5)
    want = direct(signatures[name], inputs)["image"]
    body, got = rest_round_trip("super_resolver", signatures, inputs, name)
    assert "inputs" in body and body["inputs"]["seed"] == 5
    np.testing.assert_array_equal(got["image"], want)
    models = fake_tf_serving.Models({"super_resolver": {1: signatures}})
    request, got = grpc_round_trip("super_resolver", models, "super_resolver", inputs, name)
    assert {k: v.dtype for k, v in request.inputs.items()} == {
        "image": types_pb2.DT_UINT8,
        "temperature": types_pb2.DT_FLOAT,
        "seed": types_pb2.DT_INT64,
        "top_k": types_pb2.DT_INT32,
        "top_p": types_pb2.DT_FLOAT,
    }
    np.testing.assert_array_equal(got["image"], want)


def test_pictures_are_read_as_super_resolve_py_reads_them(tmp_path):
    # As super_resolve.py prepares them: a wide picture keeps its centre
    # square (green here), area-averaged, instead of all three colour bands
    # squeezed together.
    from PIL import Image

    wide = np.zeros((4, 12, 3), np.uint8)
    wide[:, :4, 0], wide[:, 4:8, 1], wide[:, 8:, 2] = 255, 200, 255
    square = np.arange(64 * 3, dtype=np.uint8).reshape(8, 8, 3)
    Image.fromarray(wide).save(tmp_path / "wide.png")
    Image.fromarray(square).save(tmp_path / "square.png")
    loaded = client._load_images([str(tmp_path / "wide.png"), str(tmp_path / "square.png")], 2)
    assert loaded.shape == (2, 2, 2, 3) and loaded.dtype == np.uint8
    np.testing.assert_array_equal(loaded[0], np.full((2, 2, 3), (0, 200, 0)))
    # 2x2 area averages of the square picture.
    want = square.reshape(2, 4, 2, 4, 3).astype(float).mean(axis=(1, 3))
    np.testing.assert_allclose(loaded[1], want, atol=1)
    # 16-bit and float grayscale, which Pillow's RGB conversion clips, read as
    # keras_attn.preprocessing.images.load_image reads them.
    Image.fromarray(np.full((2, 2), 100 * 257, np.uint16)).save(tmp_path / "deep.png")
    Image.fromarray(np.full((2, 2), 0.5, np.float32)).save(tmp_path / "float.tif")
    loaded = client._load_images([str(tmp_path / "deep.png"), str(tmp_path / "float.tif")], 2)
    np.testing.assert_array_equal(loaded[0], np.full((2, 2, 3), 100))
    np.testing.assert_array_equal(loaded[1], np.full((2, 2, 3), 128))


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["--version", "-1", "translate", "x"],
            "argument --version: expected an int >= 1, received '-1'",
        ),
        (
            ["--timeout", "-1", "translate", "x"],
            "argument --timeout: expected a number of seconds > 0, received '-1'",
        ),
        (
            ["generate-music", "--num-steps", "-5"],
            "argument --num-steps: expected an int >= 0, received '-5'",
        ),
        (
            ["generate-music", "--top-p", "5"],
            r"argument --top-p: expected a number in \(0, 1\], received '5'",
        ),
        (
            ["generate-music", "--top-k", "-2"],
            r"argument --top-k: expected an int >= 0 \(0 = no filter\), received '-2'",
        ),
        (
            ["generate-music", "--temperature", "nan"],
            "argument --temperature: expected a number > 0, received 'nan'",
        ),
        (
            ["generate-music", "--primer", "1,abc"],
            "argument --primer: expected comma-separated integer event ids",
        ),
        (
            ["super-resolve", "a.png", "--output", "b.png", "--low-resolution", "0"],
            "argument --low-resolution: expected an int >= 1, received '0'",
        ),
        (
            ["translate-tokens", "x", "--sentencepiece-model", "/nonexistent/tokenizer.model"],
            "argument --sentencepiece-model: no such file: '/nonexistent/tokenizer.model'",
        ),
    ],
)
def test_bad_flags_are_usage_errors_before_any_request(args, message, capsys):
    # They were sent to the server, or ended in a traceback (a missing
    # SentencePiece model) or an exit status of 1 (--timeout -1, --primer 1,abc).
    with pytest.raises(SystemExit) as exit_info:
        client.main(["--rest", "http://localhost:1"] + args)
    assert exit_info.value.code == 2
    assert re.search(message, capsys.readouterr().err)
