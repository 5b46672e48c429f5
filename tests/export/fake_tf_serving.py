"""A stand-in for TF Serving's predict APIs, for testing clients without a server.

No TF Serving binary runs here, so the tests play its part: they decode REST
JSON and gRPC `PredictRequest`s the way TF Serving's predict API documents
(https://www.tensorflow.org/tfx/serving/api_rest: row format "instances" /
columnar format "inputs", `{"b64": ...}` for binary strings, the
"predictions" / "outputs" answers with the name left out for a single
output, `{"error": ...}` with an HTTP error code), run the decoded tensors
through the loaded SavedModel signature in this process, and encode the
answer. This code is independent of examples/serving/client.py, which it
checks.
"""

import base64
import http.server
import json
import re
import threading

import numpy as np
import tensorflow as tf


class RequestError(ValueError):
    """A request TF Serving would refuse (HTTP 400 / INVALID_ARGUMENT)."""


def _is_b64(value):
    return isinstance(value, dict) and set(value) == {"b64"}


def _tensor(name, value, dtype):
    """JSON value -> np.ndarray of the signature dtype, as TF Serving decodes it."""
    if dtype == tf.string:

        def leaf(item):
            if _is_b64(item):
                return base64.b64decode(item["b64"], validate=True)
            if isinstance(item, str):
                return item.encode("utf-8")
            if isinstance(item, list):
                return [leaf(i) for i in item]
            raise RequestError(f'{name}: expected a string or {{"b64": ...}}, got {item!r}')

        return np.array(leaf(value), dtype=object)
    array = np.asarray(value)
    if array.dtype.kind not in "biuf":
        raise RequestError(f"{name}: expected numbers for {dtype.name}, got {value!r}")
    if dtype.is_integer and array.dtype.kind == "f" and np.any(array != np.round(array)):
        raise RequestError(f"{name}: expected integers for {dtype.name}, got {value!r}")
    return array.astype(dtype.as_numpy_dtype)


def decode_rest_request(body, signatures):
    """Parses a REST predict body.

    Returns:
        `(signature_name, row_format, {name: np.ndarray})`.
    """
    try:
        body = json.loads(body)
    except ValueError as error:
        raise RequestError(f"JSON Parse error: {error}") from None
    signature_name = body.get("signature_name", "serving_default")
    if signature_name not in signatures:
        raise RequestError(f'Serving signature name: "{signature_name}" not found in signature def')
    specs = signatures[signature_name].structured_input_signature[1]
    names = sorted(specs)
    if ("instances" in body) == ("inputs" in body):
        raise RequestError(
            "Missing 'inputs' or 'instances' key"
            if "inputs" not in body
            else "Both 'inputs' and 'instances' keys given"
        )
    if "instances" in body:
        rows = body["instances"]
        if not isinstance(rows, list) or not rows:
            raise RequestError("'instances' must be a non-empty JSON list")
        if len(names) == 1 and not (isinstance(rows[0], dict) and not _is_b64(rows[0])):
            columns = {names[0]: rows}
        else:
            columns = {}
            for i, row in enumerate(rows):
                if not isinstance(row, dict) or sorted(row) != names:
                    raise RequestError(
                        f"Failed to process element: {i} of 'instances' list. Expected named inputs "
                        f"{names}, got {sorted(row) if isinstance(row, dict) else row!r}"
                    )
                for name in names:
                    columns.setdefault(name, []).append(row[name])
    else:
        value = body["inputs"]
        if isinstance(value, dict) and not _is_b64(value):
            if sorted(value) != names:
                raise RequestError(f"Expected named inputs {names}, got {sorted(value)}")
            columns = value
        elif len(names) == 1:
            columns = {names[0]: value}
        else:
            raise RequestError(f"'inputs' must be an object with inputs {names}")
    tensors = {name: _tensor(name, columns[name], specs[name].dtype) for name in names}
    return signature_name, "instances" in body, tensors


def run_signature(function, tensors):
    """Feeds the tensors to the signature (checking shapes as the session does)."""
    specs = function.structured_input_signature[1]
    feeds = {}
    for name, value in tensors.items():
        if not specs[name].shape.is_compatible_with(value.shape):
            raise RequestError(
                f"{name}: cannot feed value of shape {value.shape}, which has shape {specs[name].shape}"
            )
        feeds[name] = tf.constant(value, dtype=specs[name].dtype)
    try:
        outputs = function(**feeds)
    except tf.errors.OpError as error:
        raise RequestError(error.message) from None
    return {name: value.numpy() for name, value in outputs.items()}


def _json_value(name, array):
    if array.dtype == object:

        def leaf(item):
            if isinstance(item, np.ndarray):
                return [leaf(i) for i in item]
            if name.endswith("_bytes"):
                return {"b64": base64.b64encode(item).decode("ascii")}
            return item.decode("utf-8")  # TF Serving writes the raw bytes

        return leaf(array)
    return array.tolist()


def encode_rest_response(outputs, row_format):
    """The JSON text TF Serving answers with."""
    names = sorted(outputs)
    values = {name: _json_value(name, outputs[name]) for name in names}
    if row_format:
        if len(names) == 1:
            return json.dumps({"predictions": values[names[0]]})
        size = len(values[names[0]])
        return json.dumps({"predictions": [{n: values[n][i] for n in names} for i in range(size)]})
    if len(names) == 1:
        return json.dumps({"outputs": values[names[0]]})
    return json.dumps({"outputs": values})


def rest_predict(body, signatures):
    """Body text in, answer text out (raises `RequestError` where TF Serving answers 400)."""
    signature_name, row_format, tensors = decode_rest_request(body, signatures)
    return encode_rest_response(run_signature(signatures[signature_name], tensors), row_format)


class Models:
    """Served models: name -> {version: `signatures` mapping of a loaded SavedModel}."""

    def __init__(self, versions):
        self.versions = versions

    def get(self, name, version=None):
        if name not in self.versions:
            raise LookupError(f"Servable not found for request: Latest({name})")
        served = self.versions[name]
        if version is None:
            version = max(served)
        if version not in served:
            raise LookupError(f"Servable not found for request: Specific({name}, {version})")
        return version, served[version]


_PREDICT_PATH = re.compile(r"^/v1/models/([^/:]+)(?:/versions/(\d+))?:predict$")


class RestServer:
    """TF Serving's REST predict endpoint on 127.0.0.1 (a thread); use as a context manager."""

    def __init__(self, models):
        models_ = models

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _answer(self, code, text):
                data = text.encode("utf-8")
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"])).decode("utf-8")
                match = _PREDICT_PATH.match(self.path)
                if not match:
                    return self._answer(
                        404, json.dumps({"error": f"Malformed request: POST {self.path}"})
                    )
                try:
                    _, signatures = models_.get(match[1], int(match[2]) if match[2] else None)
                    self._answer(200, rest_predict(body, signatures))
                except LookupError as error:
                    self._answer(404, json.dumps({"error": str(error)}))
                except RequestError as error:
                    self._answer(400, json.dumps({"error": str(error)}))

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self):
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


def grpc_predict(models, request):
    """A `PredictResponse` for a `PredictRequest`, as TF Serving's Predict does.

    Raises:
        LookupError: unknown model/version (NOT_FOUND).
        RequestError: bad signature or inputs (INVALID_ARGUMENT).
    """
    from tensorflow_serving.apis import predict_pb2

    spec = request.model_spec
    version, signatures = models.get(
        spec.name, spec.version.value if spec.HasField("version") else None
    )
    signature_name = spec.signature_name or "serving_default"
    if signature_name not in signatures:
        raise RequestError(f'Serving signature name: "{signature_name}" not found in signature def')
    function = signatures[signature_name]
    expected = sorted(function.structured_input_signature[1])
    if sorted(request.inputs) != expected:
        raise RequestError(
            f"input keys {sorted(request.inputs)} do not match the signature's {expected}"
        )
    specs = function.structured_input_signature[1]
    tensors = {}
    for name, proto in request.inputs.items():
        if tf.as_dtype(proto.dtype) != specs[name].dtype:
            raise RequestError(
                f"Expects arg[{name}] to be {specs[name].dtype.name} but {tf.as_dtype(proto.dtype).name} "
                "is provided"
            )
        tensors[name] = tf.make_ndarray(proto)
    outputs = run_signature(function, tensors)
    response = predict_pb2.PredictResponse()
    response.model_spec.name = spec.name
    response.model_spec.version.value = version
    response.model_spec.signature_name = signature_name
    for name, value in outputs.items():
        response.outputs[name].CopyFrom(tf.make_tensor_proto(value))
    return response


class GrpcServer:
    """TF Serving's gRPC PredictionService (Predict only) on 127.0.0.1; a context manager."""

    def __init__(self, models):
        from concurrent import futures

        import grpc
        from tensorflow_serving.apis import prediction_service_pb2_grpc as service

        class Servicer(service.PredictionServiceServicer):
            def Predict(self, request, context):
                try:
                    return grpc_predict(models, request)
                except LookupError as error:
                    context.abort(grpc.StatusCode.NOT_FOUND, str(error))
                except RequestError as error:
                    context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(error))

        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        service.add_PredictionServiceServicer_to_server(Servicer(), self.server)
        self.target = f"127.0.0.1:{self.server.add_insecure_port('127.0.0.1:0')}"

    def __enter__(self):
        self.server.start()
        return self

    def __exit__(self, *exc):
        self.server.stop(None)
