"""Rebuild the TF Text op allowlist from the tensorflow-text release that TF Serving embeds.

    pip download --no-deps -d wheels tensorflow-text==2.12.1 tensorflow-cpu==2.12.1
    python examples/serving/make_tf_text_allowlist.py \
        --tensorflow-wheel wheels/tensorflow_cpu-2.12.1-cp311-*.whl \
        --tensorflow-text-wheel wheels/tensorflow_text-2.12.1-cp311-*.whl \
        --output tests/export/tf_serving_tf_text_ops.txt

TF Serving links `@org_tensorflow_text//tensorflow_text:ops_lib` into its
model server (tensorflow_serving/model_servers/BUILD, SUPPORTED_TENSORFLOW_OPS)
at the version pinned in tensorflow_serving/workspace.bzl. A SavedModel whose
graph holds a TF Text op (or an attribute of one) that this version does not
register fails to load there ("Op type not registered", "NodeDef mentions
attr ... not in Op"). This script lists exactly what that release registers:
it loads each op library of the tensorflow-text wheel with the C API of the
TensorFlow release it was built for (`TF_LoadLibrary` + `TF_GetOpList`, via
ctypes, in a child process that never imports the Python `tensorflow`
package, so it can run beside a newer TensorFlow) and writes one line per op
with its attributes in `REGISTER_OP` syntax. The wheels are inputs: the
script downloads nothing.

`tests/export/test_tf_text_ops.py` checks every TF Text op of the exported
translator against the file.
"""

import argparse
import glob
import os
import subprocess
import sys
import tempfile
import zipfile

_CHILD = r"""
import ctypes, glob, os, sys
tf_dir, text_dir, out_dir = sys.argv[1:4]
ctypes.CDLL(os.path.join(tf_dir, "libtensorflow_framework.so.2"), mode=ctypes.RTLD_GLOBAL)
c_api = ctypes.CDLL(os.path.join(tf_dir, "libtensorflow_cc.so.2"), mode=ctypes.RTLD_GLOBAL)

class Buffer(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("length", ctypes.c_size_t), ("deallocator", ctypes.c_void_p)]

c_api.TF_NewStatus.restype = ctypes.c_void_p
c_api.TF_LoadLibrary.restype = ctypes.c_void_p
c_api.TF_LoadLibrary.argtypes = [ctypes.c_char_p, ctypes.c_void_p]
c_api.TF_GetOpList.restype = Buffer
c_api.TF_GetOpList.argtypes = [ctypes.c_void_p]
c_api.TF_GetCode.argtypes = [ctypes.c_void_p]
c_api.TF_Message.argtypes = [ctypes.c_void_p]
c_api.TF_Message.restype = ctypes.c_char_p
for path in sorted(glob.glob(os.path.join(text_dir, "tensorflow_text", "python", "ops", "*.so"))):
    status = c_api.TF_NewStatus()
    library = c_api.TF_LoadLibrary(path.encode(), status)
    if c_api.TF_GetCode(status) != 0:
        sys.exit(f"{path}: {c_api.TF_Message(status).decode()}")
    op_list = c_api.TF_GetOpList(library)
    with open(os.path.join(out_dir, os.path.basename(path) + ".oplist"), "wb") as f:
        f.write(ctypes.string_at(op_list.data, op_list.length))
"""


def _attr_value(value):
    """An AttrValue as REGISTER_OP writes defaults."""
    kind = value.WhichOneof("value")
    if kind == "s":
        return repr(value.s.decode("utf-8", "replace"))
    if kind == "b":
        return "true" if value.b else "false"
    if kind == "i":
        return str(value.i)
    if kind == "f":
        return repr(value.f)
    if kind == "type":
        from tensorflow.core.framework import types_pb2

        return types_pb2.DataType.Name(value.type)
    if kind == "list":
        items = [repr(s.decode()) for s in value.list.s] + [str(i) for i in value.list.i]
        return "[" + ", ".join(items) + "]"
    return "?"


def attr_spec(attr):
    """`name: type[ = default]` of an OpDef attr, type constraints included."""
    from tensorflow.core.framework import types_pb2

    kind = attr.type
    allowed = attr.allowed_values.list
    if kind == "type" and allowed.type:
        names = [types_pb2.DataType.Name(t)[3:].lower() for t in allowed.type]
        kind = "{" + ", ".join(names) + "}"
    elif kind == "string" and allowed.s:
        kind = "{" + ", ".join(repr(s.decode()) for s in allowed.s) + "}"
    spec = f"{attr.name}: {kind}"
    if attr.HasField("default_value"):
        spec += f" = {_attr_value(attr.default_value)}"
    return spec


def registered_ops(tensorflow_wheel, tensorflow_text_wheel):
    """{library file: [OpDef]} of the tensorflow-text wheel's op libraries."""
    from tensorflow.core.framework import op_def_pb2

    with tempfile.TemporaryDirectory() as tmp:
        tf_dir, text_dir, out_dir = (os.path.join(tmp, d) for d in ("tf", "text", "out"))
        os.makedirs(out_dir)
        with zipfile.ZipFile(tensorflow_wheel) as wheel:
            for name in (
                "tensorflow/libtensorflow_framework.so.2",
                "tensorflow/libtensorflow_cc.so.2",
            ):
                wheel.extract(name, tf_dir)
        with zipfile.ZipFile(tensorflow_text_wheel) as wheel:
            wheel.extractall(text_dir)
        subprocess.run(
            [sys.executable, "-c", _CHILD, os.path.join(tf_dir, "tensorflow"), text_dir, out_dir],
            check=True,
            env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"),
        )
        libraries = {}
        for path in sorted(glob.glob(os.path.join(out_dir, "*.oplist"))):
            op_list = op_def_pb2.OpList()
            with open(path, "rb") as f:
                op_list.ParseFromString(f.read())
            libraries[os.path.basename(path)[: -len(".oplist")]] = list(op_list.op)
    return libraries


HEADER = """\
# TF Text ops (and their attributes) that stock TF Serving model servers can load.
#
# Source: the op registrations of tensorflow-text {version} (tensorflow/text, tag v{version}),
# read from the release wheel {text_wheel} (sha256 {text_sha})
# by loading each op library with the C API of {tf_wheel} (TF_LoadLibrary + TF_GetOpList);
# regenerate with examples/serving/make_tf_text_allowlist.py. The registrations come from
# tensorflow_text/core/ops/*.cc (REGISTER_OP) and the TFText> shim ops of tensorflow_text/core/kernels.
#
# Why this release: TF Serving links @org_tensorflow_text//tensorflow_text:ops_lib into its model
# server (tensorflow_serving/model_servers/BUILD, SUPPORTED_TENSORFLOW_OPS) at the version pinned in
# tensorflow_serving/workspace.bzl (http_archive "org_tensorflow_text"). Released images up to at least
# 2.18 embed text-2.12.1 (the pin `strip_prefix = "text-2.12.1"` in workspace.bzl; tensorflow/serving
# PR #4057, 2025-02: "The embedded TensorFlow Text version is 2.12.1 ... cannot load models trained
# using TensorFlow Text 2.16.1 or later", e.g. 'TFText>RoundRobinTrim'). tensorflow/serving master
# (commit 0185d7f41d1a09b89e4e4dd5d97a74471e5d9438) pins text-2.20.0. Ops and attributes only get added
# between releases, so what 2.12.1 registers loads on both: the conservative choice.
#
# Format: one op per line: `OpName<TAB>attr; attr; ...` with each attr as in REGISTER_OP
# (`name: type = default`); `-` when the op has no attributes. Used by tests/export/test_tf_text_ops.py.
"""


def render(libraries, version, tensorflow_wheel, tensorflow_text_wheel):
    import hashlib

    with open(tensorflow_text_wheel, "rb") as f:
        text_sha = hashlib.sha256(f.read()).hexdigest()
    lines = [
        HEADER.format(
            version=version,
            text_wheel=os.path.basename(tensorflow_text_wheel),
            text_sha=text_sha,
            tf_wheel=os.path.basename(tensorflow_wheel),
        )
    ]
    for library, ops in libraries.items():
        lines.append(f"# {library}")
        for op in ops:
            attrs = "; ".join(attr_spec(a) for a in op.attr) or "-"
            lines.append(f"{op.name}\t{attrs}")
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--tensorflow-wheel",
        required=True,
        help="tensorflow(-cpu) wheel of the release tensorflow-text was built for",
    )
    parser.add_argument("--tensorflow-text-wheel", required=True)
    parser.add_argument("--output", required=True)
    args = parser.parse_args(argv)
    version = os.path.basename(args.tensorflow_text_wheel).split("-")[1]
    libraries = registered_ops(args.tensorflow_wheel, args.tensorflow_text_wheel)
    with open(args.output, "w") as f:
        f.write(render(libraries, version, args.tensorflow_wheel, args.tensorflow_text_wheel))
    print(
        f"{sum(len(ops) for ops in libraries.values())} ops of tensorflow-text {version} -> {args.output}"
    )


if __name__ == "__main__":
    main()
