"""Client for the keras_attn models served by TF Serving, over REST or gRPC.

    python examples/serving/client.py translate "Ein Hund rennt im Schnee."
    python examples/serving/client.py --grpc localhost:8500 translate "Ein Hund rennt im Schnee."
    python examples/serving/client.py translate-tokens --sentencepiece-model tokenizer.model "Ein Hund."
    python examples/serving/client.py super-resolve photo.png --output big.png --temperature 0.9 --seed 1
    python examples/serving/client.py generate-music --primer 1 --num-steps 64 --top-p 0.95 --seed 7
    python examples/serving/client.py --grpc localhost:8500 stream-music --primer 1 --num-steps 64

As a library (from this folder, or with it on `sys.path`):

    import client
    client.translate(["Ein Hund rennt."], rest_url="http://localhost:8501")
    inputs = client.music_generator_inputs([[1]], num_steps=32, seed=3)
    body = client.rest_request_body(inputs)          # the JSON TF Serving's REST API takes
    request = client.grpc_request("music_generator", inputs)   # a PredictRequest

The three models and their signatures (exactly as the keras_attn exporters
write them, checked by tests/export/test_serving_client.py) are in
`SIGNATURES`. The REST part needs only the standard library and NumPy; the
gRPC part imports `tensorflow` and `tensorflow-serving-api` when first used.
See README.md in this folder for the server side.
"""

import argparse
import base64
import dataclasses
import json
import os
import sys
import urllib.error
import urllib.request

import numpy as np

DEFAULT_REST_URL = "http://localhost:8501"
DEFAULT_GRPC_TARGET = "localhost:8500"
DEFAULT_SIGNATURE = "serving_default"
# Ids shared by the exported models (keras_attn.preprocessing.subword_tokenizer / music).
TEXT_PAD_ID, TEXT_UNKNOWN_ID, TEXT_START_ID, TEXT_END_ID = 0, 1, 2, 3
MUSIC_PAD_ID, MUSIC_START_ID = 0, 1


@dataclasses.dataclass(frozen=True)
class Spec:
    """A signature tensor as a client sees it: dtype name and shape (None = any size)."""

    dtype: str  # a NumPy dtype name, or "string" (TF's DT_STRING: bytes)
    shape: tuple


@dataclasses.dataclass(frozen=True)
class Signature:
    inputs: dict
    outputs: dict


_TOKENS = Signature(
    inputs={"encoder_tokens": Spec("int32", (None, None))},
    outputs={"tokens": Spec("int32", (None, None))},
)
_SAMPLE_MUSIC = Signature(
    inputs={
        "primer": Spec("int32", (None, None)),
        "num_steps": Spec("int32", ()),
        "temperature": Spec("float32", ()),
        "top_k": Spec("int32", ()),
        "top_p": Spec("float32", ()),
        "seed": Spec("int32", ()),
    },
    outputs={"events": Spec("int32", (None, None))},
)
# The streaming signatures: the request, then the loop's state (README.md, "Streaming").
_STREAM_STATE = {
    "events": Spec("int32", (None, 1)),
    "cache": Spec("float32", (None, None, None)),  # (B, position, C): C fixed by the model
    "finished": Spec("bool", (None,)),
}
_STREAM_OUTPUTS = Signature(
    inputs=_SAMPLE_MUSIC.inputs,
    outputs={**_STREAM_STATE, "position": Spec("int32", ()), "done": Spec("bool", ())},
)
_STEP_MUSIC = Signature(
    inputs={**_SAMPLE_MUSIC.inputs, **_STREAM_STATE}, outputs=_STREAM_OUTPUTS.outputs
)
_IMAGE = Spec("uint8", (None, None, None, 3))

# Model kind -> signature name -> Signature. The kinds are the default model
# names of README.md's models.config.
SIGNATURES = {
    # export_translator(...): strings in, strings out (needs TF Text ops on the server).
    "translator": {
        "serving_default": Signature(
            inputs={"text": Spec("string", (None,))},
            outputs={"translation": Spec("string", (None,))},
        ),
        "translate_tokens": _TOKENS,
    },
    # export_translator(..., include_text_signature=False): token ids only, no TF Text op.
    "translator_tokens": {"serving_default": _TOKENS},
    # export_super_resolver(...): the low-resolution size (h, w) is fixed at export.
    "super_resolver": {
        "serving_default": Signature(inputs={"image": _IMAGE}, outputs={"image": _IMAGE}),
        "sample_with_options": Signature(
            inputs={
                "image": _IMAGE,
                "temperature": Spec("float32", ()),
                "seed": Spec("int64", ()),
                "top_k": Spec("int32", ()),
                "top_p": Spec("float32", ()),
            },
            outputs={"image": _IMAGE},
        ),
    },
    # export_music_generator(...)
    "music_generator": {
        "serving_default": _SAMPLE_MUSIC,
        "generate": _SAMPLE_MUSIC,
        "prefill": _STREAM_OUTPUTS,
        "step": _STEP_MUSIC,
    },
}


class ServingError(RuntimeError):
    """TF Serving refused a request or could not be reached; the message says why."""


def signature(model, signature_name=DEFAULT_SIGNATURE):
    """The `Signature` of `SIGNATURES[model][signature_name]`.

    Raises:
        ValueError: for an unknown model kind or signature name.
    """
    if model not in SIGNATURES:
        raise ValueError(f"Unknown model {model!r}. Expected one of {sorted(SIGNATURES)}.")
    if signature_name not in SIGNATURES[model]:
        raise ValueError(
            f"Model {model!r} has no signature {signature_name!r}. Expected one of "
            f"{sorted(SIGNATURES[model])}."
        )
    return SIGNATURES[model][signature_name]


# ---------------------------------------------------------------- inputs


def _as_array(name, value, spec):
    if spec.dtype == "string":
        items = np.asarray(value, dtype=object)
        flat = [v.encode("utf-8") if isinstance(v, str) else bytes(v) for v in items.reshape(-1)]
        array = np.array(flat + [None], dtype=object)[:-1].reshape(items.shape)
    else:
        array = np.asarray(value)
        if array.dtype == object or array.dtype.kind not in "biuf":
            raise ValueError(
                f"`{name}` must be numeric ({spec.dtype}). Received dtype {array.dtype}."
            )
        if np.dtype(spec.dtype).kind in "iu" and array.dtype.kind == "f":
            if not np.all(np.isfinite(array)) or not np.all(array == np.round(array)):
                raise ValueError(f"`{name}` must hold integers ({spec.dtype}). Received {value!r}.")
        if np.dtype(spec.dtype).kind in "iu" and array.size:
            info = np.iinfo(spec.dtype)
            if array.min() < info.min or array.max() > info.max:
                raise ValueError(
                    f"`{name}` is out of the {spec.dtype} range [{info.min}, {info.max}]. "
                    f"Received min {array.min()}, max {array.max()}."
                )
        array = array.astype(spec.dtype)
    if array.ndim != len(spec.shape) or any(
        want is not None and got != want for got, want in zip(array.shape, spec.shape)
    ):
        expected = "(" + ", ".join("?" if d is None else str(d) for d in spec.shape) + ")"
        raise ValueError(
            f"`{name}` must have shape {expected} ({spec.dtype}). Received shape {array.shape}."
        )
    return array


def make_inputs(model, signature_name=DEFAULT_SIGNATURE, **values):
    """NumPy inputs for a signature: exactly its names, cast to its dtypes.

    Args:
        model: a key of `SIGNATURES`.
        signature_name: a signature of that model.
        **values: one array-like per input name (strings as `str` or `bytes`).

    Returns:
        dict name -> `np.ndarray` (strings: object arrays of `bytes`).

    Raises:
        ValueError: on missing or unexpected names, non-numeric or
            out-of-range values, or a shape of the wrong rank or size.
    """
    spec = signature(model, signature_name)
    missing = sorted(set(spec.inputs) - set(values))
    unexpected = sorted(set(values) - set(spec.inputs))
    if missing or unexpected:
        raise ValueError(
            f"Signature {signature_name!r} of {model!r} takes inputs {sorted(spec.inputs)}. "
            f"Missing: {missing}; unexpected: {unexpected}."
        )
    return {name: _as_array(name, values[name], spec.inputs[name]) for name in spec.inputs}


def translator_inputs(sentences):
    """`serving_default` inputs of the translator: (B,) UTF-8 strings."""
    if isinstance(sentences, (str, bytes)):
        sentences = [sentences]
    return make_inputs("translator", text=list(sentences))


def super_resolver_inputs(images, temperature=None, seed=None, top_k=None, top_p=None):
    """Inputs of the super resolver, and the signature that takes them.

    Args:
        images: (B, h, w, 3) uint8 low-resolution RGB images (h, w as exported).
        temperature: optional float > 0; any of the options picks
            `sample_with_options` (defaults: temperature 1.0, seed 0, top_k 0,
            top_p 1.0).
        seed: optional int; the same seed and images give the same output.
        top_k: optional int >= 0: sample among the k most likely intensities
            (0 = all).
        top_p: optional float in (0, 1]: nucleus sampling (1 = no filter).

    Returns:
        `(signature_name, inputs)`.
    """
    if temperature is None and seed is None and top_k is None and top_p is None:
        return DEFAULT_SIGNATURE, make_inputs("super_resolver", image=images)
    temperature = 1.0 if temperature is None else temperature
    if not temperature > 0:
        raise ValueError(f"`temperature` must be > 0. Received: temperature={temperature!r}.")
    top_k = 0 if top_k is None else top_k
    if not top_k >= 0:
        raise ValueError(f"`top_k` must be >= 0 (0 = all intensities). Received: top_k={top_k!r}.")
    top_p = 1.0 if top_p is None else top_p
    if not 0.0 < top_p <= 1.0:
        raise ValueError(f"`top_p` must be in (0, 1] (1 = no filter). Received: top_p={top_p!r}.")
    inputs = make_inputs(
        "super_resolver",
        "sample_with_options",
        image=images,
        temperature=temperature,
        seed=0 if seed is None else seed,
        top_k=top_k,
        top_p=top_p,
    )
    return "sample_with_options", inputs


def music_generator_inputs(primer, num_steps, temperature=1.0, top_k=0, top_p=1.0, seed=0):
    """`serving_default` inputs of the music generator.

    Args:
        primer: event-id rows, each starting with the start token 1; rows of
            different lengths are right-padded with 0 here.
        num_steps: events to generate after each row's primer.
        temperature: float > 0 (1 = the model's distribution).
        top_k: keep the k most likely events per step (0 = off).
        top_p: nucleus mass in (0, 1] (1 = off).
        seed: int; same seed, same events.

    Returns:
        dict of inputs (`primer` (B, T) int32, the rest scalars).
    """
    rows = [list(row) for row in primer]
    if not rows or not all(rows):
        raise ValueError(
            "`primer` needs at least one row of at least one event (e.g. [[1]], the start "
            f"token). Received: {primer!r}."
        )
    width = max(len(row) for row in rows)
    padded = [row + [MUSIC_PAD_ID] * (width - len(row)) for row in rows]
    return make_inputs(
        "music_generator",
        primer=padded,
        num_steps=num_steps,
        temperature=temperature,
        top_k=top_k,
        top_p=top_p,
        seed=seed,
    )


# ---------------------------------------------------------------- REST


def _json_leaf(value, binary):
    if isinstance(value, bytes):
        if not binary:
            try:
                return value.decode("utf-8")
            except UnicodeDecodeError:
                pass
        return {"b64": base64.b64encode(value).decode("ascii")}
    return value.item() if isinstance(value, np.generic) else value


def _to_json(array, binary=False):
    if array.dtype == np.float32:
        # The shortest decimal that reads back as the same float32: 0.9, not 0.8999999761581421.
        return np.vectorize(lambda v: float(str(np.float32(v))), otypes=[float])(array).tolist()
    if array.dtype != object:
        return array.tolist()

    def nested(value):
        if isinstance(value, np.ndarray):
            return [nested(row) for row in value] if value.ndim else nested(value.item())
        return _json_leaf(value, binary)

    return nested(array)


def rest_request_body(
    inputs, signature_name=DEFAULT_SIGNATURE, request_format="auto", binary=False
):
    """The JSON body of a TF Serving REST predict request.

    Two formats (TF Serving's REST API): the row format `{"instances":
    [row, ...]}` lists one entry per batch element (an object of named
    inputs, or the bare value when the signature has one input), and needs
    every input batched with the same first dimension; the columnar format
    `{"inputs": {name: tensor}}` sends whole tensors and is the only one that
    can carry scalars (the music generator's `num_steps`, the super
    resolver's `temperature`). Strings go as JSON strings when they are
    valid UTF-8, else (or with `binary=True`) as `{"b64": base64}`, which
    TF Serving decodes to the raw bytes.

    Args:
        inputs: dict name -> `np.ndarray` (from `make_inputs` or a helper).
        signature_name: the signature to run.
        request_format: "instances", "inputs", or "auto" (rows when possible).
        binary: send every string base64-encoded.

    Returns:
        A JSON-serialisable dict.

    Raises:
        ValueError: for the row format with a scalar input or inputs of
            different batch sizes, or an unknown `request_format`.
    """
    if request_format not in ("auto", "instances", "inputs"):
        raise ValueError(
            f"`request_format` must be 'auto', 'instances' or 'inputs'. Received: {request_format!r}."
        )
    batch_sizes = {np.shape(v)[0] if np.ndim(v) else None for v in inputs.values()}
    rows_possible = None not in batch_sizes and len(batch_sizes) == 1
    if request_format == "instances" and not rows_possible:
        raise ValueError(
            "The row format ('instances') needs every input batched with one batch size; "
            f"received shapes {{{', '.join(f'{k}: {np.shape(v)}' for k, v in inputs.items())}}}. "
            "Scalars such as num_steps or temperature must go in the columnar 'inputs' format."
        )
    body = {"signature_name": signature_name}
    if request_format == "instances" or (request_format == "auto" and rows_possible):
        names = list(inputs)
        columns = {name: _to_json(np.asarray(inputs[name]), binary) for name in names}
        if len(names) == 1:
            body["instances"] = columns[names[0]]
        else:
            size = len(columns[names[0]])
            body["instances"] = [{name: columns[name][i] for name in names} for i in range(size)]
    else:
        body["inputs"] = {name: _to_json(np.asarray(v), binary) for name, v in inputs.items()}
    return body


def _from_json(value, spec):
    def leaf(item):
        if isinstance(item, dict) and set(item) == {"b64"}:
            return base64.b64decode(item["b64"])
        if isinstance(item, str):
            return item.encode("utf-8")
        if isinstance(item, list):
            return [leaf(i) for i in item]
        return item

    if spec.dtype == "string":
        return np.array(leaf(value), dtype=object)  # bytes are scalars to NumPy
    return np.asarray(value, dtype=spec.dtype)


def parse_rest_response(body, model, signature_name=DEFAULT_SIGNATURE):
    """Outputs of a TF Serving REST predict response, as NumPy arrays.

    Handles both answers: `{"predictions": [...]}` to a row-format request
    (a list of rows; each row an object of named outputs, or the bare value
    when the signature has one output) and `{"outputs": ...}` to a columnar
    one (an object of named outputs, or the bare value when there is one).
    Strings come back as `bytes` (`{"b64": ...}` values decoded).

    Args:
        body: the response, parsed JSON (dict) or text.
        model: a key of `SIGNATURES`.
        signature_name: the signature that was run.

    Returns:
        dict output name -> `np.ndarray`.

    Raises:
        ServingError: when the body is TF Serving's `{"error": ...}`.
        ValueError: when it is neither of the two formats.
    """
    if isinstance(body, (str, bytes)):
        body = json.loads(body)
    outputs = signature(model, signature_name).outputs
    if "error" in body:
        raise ServingError(f"TF Serving: {body['error']}")
    names = list(outputs)
    if "predictions" in body:
        rows = body["predictions"]
        if len(names) == 1:
            columns = {names[0]: rows}
        else:
            columns = {name: [row[name] for row in rows] for name in names}
    elif "outputs" in body:
        value = body["outputs"]
        if (
            isinstance(value, dict)
            and set(value) == set(names)
            and not (len(names) == 1 and set(value) == {"b64"})
        ):
            columns = value
        elif len(names) == 1:
            columns = {names[0]: value}
        else:
            raise ValueError(
                f"Expected outputs {names} in the response. Received keys {sorted(value)}."
            )
    else:
        raise ValueError(
            "A TF Serving predict response holds 'predictions' or 'outputs'. Received keys "
            f"{sorted(body)}."
        )
    return {name: _from_json(columns[name], outputs[name]) for name in names}


def rest_endpoint(base_url, model_name, version=None, label=None, verb="predict"):
    """`<base>/v1/models/<name>[/versions/<v> | /labels/<label>]:<verb>`."""
    path = f"{base_url.rstrip('/')}/v1/models/{model_name}"
    if version is not None and label is not None:
        raise ValueError("Give a model `version` or a version `label`, not both.")
    if version is not None:
        path += f"/versions/{int(version)}"
    elif label is not None:
        path += f"/labels/{label}"
    return f"{path}:{verb}"


def rest_predict(
    base_url,
    model_name,
    model,
    inputs,
    signature_name=DEFAULT_SIGNATURE,
    version=None,
    label=None,
    request_format="auto",
    timeout=120.0,
):
    """POSTs a predict request to TF Serving's REST API and parses the answer.

    Args:
        base_url: e.g. "http://localhost:8501".
        model_name: the served name (MODEL_NAME, or a name in models.config).
        model: the model kind, a key of `SIGNATURES`.
        inputs: dict name -> array (see `make_inputs`).
        signature_name: signature to run.
        version: optional version number; default the newest served one.
        label: optional version label of models.config (e.g. "stable").
        request_format: see `rest_request_body`.
        timeout: seconds.

    Returns:
        dict output name -> `np.ndarray`.

    Raises:
        ServingError: with TF Serving's error message (HTTP 4xx/5xx) or the
            connection failure.
    """
    body = json.dumps(rest_request_body(inputs, signature_name, request_format)).encode("utf-8")
    request = urllib.request.Request(
        rest_endpoint(base_url, model_name, version, label),
        data=body,
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            answer = response.read()
    except urllib.error.HTTPError as error:
        text = error.read().decode("utf-8", "replace")
        try:
            text = json.loads(text).get("error", text)
        except ValueError:
            pass
        raise ServingError(
            f"TF Serving returned HTTP {error.code} for {request.full_url}: {text}"
        ) from None
    except urllib.error.URLError as error:
        raise ServingError(f"Cannot reach TF Serving at {base_url}: {error.reason}") from None
    return parse_rest_response(answer, model, signature_name)


# ---------------------------------------------------------------- gRPC


def _grpc_modules():
    try:
        import tensorflow as tf
        from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc
    except ImportError as error:
        raise ImportError(
            "The gRPC client needs `tensorflow` and `tensorflow-serving-api` "
            f"(pip install 'tensorflow-serving-api>=2.21,<2.22'): {error}"
        ) from None
    return tf, predict_pb2, prediction_service_pb2_grpc


def grpc_request(model_name, inputs, signature_name=DEFAULT_SIGNATURE, version=None, label=None):
    """A `tensorflow.serving.PredictRequest` for TF Serving's gRPC API.

    Args:
        model_name: the served name.
        inputs: dict name -> array (see `make_inputs`); each becomes a
            `TensorProto` (`tf.make_tensor_proto`) of the array's dtype
            (object arrays of bytes: DT_STRING).
        signature_name: `model_spec.signature_name`.
        version: optional `model_spec.version`.
        label: optional `model_spec.version_label`.

    Returns:
        `predict_pb2.PredictRequest`.
    """
    tf, predict_pb2, _ = _grpc_modules()
    if version is not None and label is not None:
        raise ValueError("Give a model `version` or a version `label`, not both.")
    request = predict_pb2.PredictRequest()
    request.model_spec.name = model_name
    request.model_spec.signature_name = signature_name
    if version is not None:
        request.model_spec.version.value = int(version)
    elif label is not None:
        request.model_spec.version_label = label
    for name, value in inputs.items():
        value = np.asarray(value)
        dtype = tf.string if value.dtype == object else tf.as_dtype(value.dtype)
        request.inputs[name].CopyFrom(tf.make_tensor_proto(value, dtype=dtype, shape=value.shape))
    return request


def parse_grpc_response(response, model, signature_name=DEFAULT_SIGNATURE):
    """dict output name -> `np.ndarray` of a `PredictResponse` (strings as bytes)."""
    tf, _, _ = _grpc_modules()
    outputs = signature(model, signature_name).outputs
    missing = sorted(set(outputs) - set(response.outputs))
    if missing:
        raise ValueError(
            f"The response lacks outputs {missing}. Received {sorted(response.outputs)}."
        )
    return {name: tf.make_ndarray(response.outputs[name]) for name in outputs}


def grpc_predict(
    target,
    model_name,
    model,
    inputs,
    signature_name=DEFAULT_SIGNATURE,
    version=None,
    label=None,
    timeout=120.0,
    max_message_bytes=64 << 20,
):
    """Sends a `PredictRequest` over gRPC (`PredictionService/Predict`) and parses the answer.

    Args:
        target: "host:port" of the gRPC API (TF Serving's --port, 8500).
        model_name, model, inputs, signature_name, version, label: as `rest_predict`.
        timeout: seconds.
        max_message_bytes: receive limit (gRPC's default is 4 MiB).

    Returns:
        dict output name -> `np.ndarray`.

    Raises:
        ServingError: with the gRPC status and TF Serving's message.
    """
    import grpc

    _, _, service = _grpc_modules()
    request = grpc_request(model_name, inputs, signature_name, version, label)
    options = [("grpc.max_receive_message_length", max_message_bytes)]
    with grpc.insecure_channel(target, options=options) as channel:
        try:
            response = service.PredictionServiceStub(channel).Predict(request, timeout=timeout)
        except grpc.RpcError as error:
            raise ServingError(
                f"TF Serving gRPC {error.code().name} at {target}: {error.details()}"
            ) from None
    return parse_grpc_response(response, model, signature_name)


def predict(
    model,
    inputs,
    signature_name=DEFAULT_SIGNATURE,
    model_name=None,
    rest_url=None,
    grpc_target=None,
    version=None,
    label=None,
    timeout=120.0,
):
    """Runs a prediction over gRPC when `grpc_target` is given, else over REST.

    `model_name` defaults to the model kind (the names of README.md's
    models.config); `rest_url` to http://localhost:8501.
    """
    model_name = model_name or model
    if grpc_target:
        return grpc_predict(
            grpc_target, model_name, model, inputs, signature_name, version, label, timeout
        )
    return rest_predict(
        rest_url or DEFAULT_REST_URL,
        model_name,
        model,
        inputs,
        signature_name,
        version,
        label,
        timeout=timeout,
    )


# ---------------------------------------------------------------- per model


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
    texts = codec.decode(outputs["tokens"])
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
