"""TF Serving's predict API over REST (standard library) or gRPC (TensorFlow, imported on use).

Encodes the inputs of `client_signatures.make_inputs` as a REST JSON body or a gRPC
`PredictRequest`, sends it, and parses the answer back into NumPy arrays; `predict` picks
the transport.
"""

import base64
import json
import urllib.error
import urllib.request

import numpy as np
from client_signatures import DEFAULT_SIGNATURE, signature

DEFAULT_REST_URL = "http://localhost:8501"
DEFAULT_GRPC_TARGET = "localhost:8500"


class ServingError(RuntimeError):
    """TF Serving refused a request or could not be reached; the message says why."""


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
