"""The exported translator loads on stock TF Serving: its TF Text ops, and their attributes,
are all registered by the tensorflow-text release those servers embed (issue 5).

The allowlist, tf_serving_tf_text_ops.txt, lists the ops of tensorflow-text 2.12.1 with their
attributes (see its header for where it comes from and why that release). Every op of the
exported graph, functions included, that core TensorFlow does not register must be in it.
"""

import glob
import json
import os
import subprocess
import sys

import pytest

tf = pytest.importorskip("tensorflow")  # a module of TensorFlow-only tests
from tensorflow.core.framework import graph_pb2, node_def_pb2, op_def_pb2
from tensorflow.core.protobuf import saved_model_pb2
from tensorflow.python.client import pywrap_tf_session as c_api

from tests.export import serving_models

pytestmark = pytest.mark.requires_tensorflow

ALLOWLIST = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tf_serving_tf_text_ops.txt")
SENTENCEPIECE_OPS = {"SentencepieceOp", "SentencepieceTokenizeOp", "SentencepieceDetokenizeOp"}
# Ops of the installed tensorflow-text that 2.12.1 lacks: the serving issue of tensorflow/serving
# PR #4057 names the first one.
NEWER_OPS = {
    "TFText>RoundRobinTrim",
    "TFText>RoundRobinGenerateMasks",
    "TFText>Utf8Binarize",
    "RougeL",
}

_LIST_CORE_OPS = """
import json, sys
sys.modules["tensorflow_text"] = None  # a process that cannot load TF Text
import tensorflow as tf
from tensorflow.core.framework import op_def_pb2
from tensorflow.python.client import pywrap_tf_session as c_api
ops = op_def_pb2.OpList()
ops.ParseFromString(c_api.TF_GetBuffer(c_api.TF_GetAllOpList()))
print(json.dumps(sorted(op.name for op in ops.op)))
"""


def read_allowlist(path=ALLOWLIST):
    """{op name: {attr name: allowed dtype names, or None when any value}}."""
    ops = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line or line.startswith("#"):
                continue
            name, attrs = line.split("\t")
            ops[name] = {}
            for attr in [] if attrs == "-" else attrs.split("; "):
                attr_name, spec = attr.split(": ", 1)
                kind = spec.split(" = ")[0]
                allowed = None
                if kind.startswith("{") and "'" not in kind:  # a type constraint
                    allowed = {t.strip() for t in kind.strip("{}").split(",")}
                ops[name][attr_name] = allowed
    return ops


def graph_nodes(saved_model_dir):
    """Every NodeDef of a SavedModel: its graph and every function of the graph's library.
    (Nodes that call a function of the library by name are left out: they need no op.)"""
    saved_model = saved_model_pb2.SavedModel()
    with open(os.path.join(saved_model_dir, "saved_model.pb"), "rb") as f:
        saved_model.ParseFromString(f.read())
    nodes = []
    for meta_graph in saved_model.meta_graphs:
        library = meta_graph.graph_def.library
        functions = {function.signature.name for function in library.function}
        nodes.extend(meta_graph.graph_def.node)
        for function in library.function:
            nodes.extend(function.node_def)
    return [node for node in nodes if node.op not in functions]


def _op_names(serialized_op_list):
    ops = op_def_pb2.OpList()
    ops.ParseFromString(serialized_op_list)
    return {op.name for op in ops.op}


def tf_text_ops():
    """The ops the installed tensorflow_text's op libraries register.

    Each library is opened as `tf.load_op_library` does (`TF_LoadLibrary`, which returns the
    already loaded library, and `TF_GetOpList`, the ops that library registered).
    """
    import tensorflow_text

    root = os.path.dirname(tensorflow_text.__file__)
    names = set()
    for path in sorted(glob.glob(os.path.join(root, "**", "*.so"), recursive=True)):
        handle = c_api.TF_LoadLibrary(path)
        try:
            names |= _op_names(c_api.TF_GetOpList(handle))
        finally:
            c_api.TF_DeleteLibraryHandle(handle)
    return names


def core_ops():
    """Ops registered in this process, less those of tensorflow_text: core TensorFlow's.
    (A slow test checks this equals the op list of a fresh process without tensorflow_text.)"""
    registered = _op_names(c_api.TF_GetBuffer(c_api.TF_GetAllOpList()))
    return registered - tf_text_ops()


def non_core_problems(nodes, core, allowlist):
    """What a stock TF Serving could not load: non-core ops missing from the allowlist, and
    attributes (or attribute types) of allowed ops that release does not know.

    Returns:
        `(non_core_ops, problems)`: the set of op names not registered by core TensorFlow, and
        a sorted list of problem descriptions (empty when all is well).
    """
    non_core, problems = set(), set()
    for node in nodes:
        if node.op in core:
            continue
        non_core.add(node.op)
        if node.op not in allowlist:
            problems.add(f"op {node.op} is not registered by the embedded tensorflow-text")
            continue
        for attr, value in node.attr.items():
            if attr.startswith("_"):  # internal attributes (_output_shapes, _class) are not checked
                continue
            if attr not in allowlist[node.op]:
                problems.add(
                    f"op {node.op} has attr {attr!r} unknown to the embedded tensorflow-text"
                )
                continue
            allowed = allowlist[node.op][attr]
            if allowed is not None and value.WhichOneof("value") == "type":
                dtype = tf.as_dtype(value.type).name
                if dtype not in allowed:
                    problems.add(f"op {node.op} attr {attr}={dtype} is outside {sorted(allowed)}")
    return non_core, sorted(problems)


@pytest.fixture(scope="module")
def checked():
    return serving_models.translator(), core_ops(), read_allowlist()


def test_allowlist_is_the_2_12_1_release_and_lacks_newer_ops():
    allowlist = read_allowlist()
    assert len(allowlist) == 34
    assert allowlist["SentencepieceOp"] == {
        "model": None,
        "container": None,
        "shared_name": None,
        "use_node_name_sharing": None,
    }
    assert allowlist["SentencepieceTokenizeOp"] == {
        "out_type": {"int32", "string"},
        "Tsplits": {"int32", "int64"},
        "return_nbest": None,
    }
    # The installed tensorflow-text (2.21) registers the same ops plus four newer ones, and
    # keeps every attribute 2.12.1 had.
    assert tf_text_ops() == set(allowlist) | NEWER_OPS
    from tensorflow.python.framework import op_def_registry

    for name, attrs in allowlist.items():
        assert set(attrs) <= {a.name for a in op_def_registry.get(name).attr}, name


def test_translator_uses_only_allowed_tf_text_ops_and_attrs(checked):
    exported, core, allowlist = checked
    assert {"MatMul", "StatefulPartitionedCall", "While"} <= core
    assert not (SENTENCEPIECE_OPS | NEWER_OPS) & core
    non_core, problems = non_core_problems(graph_nodes(exported.text_path), core, allowlist)
    assert problems == []
    # The graph does tokenize (so the check above had something to check) ...
    assert SENTENCEPIECE_OPS <= non_core
    # ... and its model resource sets `shared_name`, an attribute 2.12.1 knows.
    attrs = {
        k for n in graph_nodes(exported.text_path) if n.op == "SentencepieceOp" for k in n.attr
    }
    assert "shared_name" in attrs and "shared_name" in allowlist["SentencepieceOp"]


def test_token_model_has_no_tf_text_op(checked):
    exported, core, allowlist = checked
    non_core, problems = non_core_problems(graph_nodes(exported.tokens_path), core, allowlist)
    assert non_core == set() and problems == []


def test_check_catches_newer_ops_and_attributes(checked, tmp_path):
    _, core, allowlist = checked
    import tensorflow_text as tf_text

    # A real SavedModel with an op added after 2.12.1 (BERT-style segment trimming).
    class Trimmer(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec((None, None), tf.int32)])
        def trim(self, ids):
            ragged = tf.RaggedTensor.from_tensor(ids, padding=0)
            return tf_text.RoundRobinTrimmer(max_seq_length=4).trim([ragged, ragged])[0].to_tensor()

    tf.saved_model.save(Trimmer(), str(tmp_path / "trimmer"))
    non_core, problems = non_core_problems(graph_nodes(str(tmp_path / "trimmer")), core, allowlist)
    assert "TFText>RoundRobinTrim" in non_core
    assert "op TFText>RoundRobinTrim is not registered by the embedded tensorflow-text" in problems

    # Attributes: one a later release added (tensorflow/text master registers `num_threads` on
    # SentencepieceTokenizeOp) and a type outside the op's constraint.
    graph = graph_pb2.GraphDef()
    node = graph.node.add(name="tokenize", op="SentencepieceTokenizeOp")
    node.attr["num_threads"].i = 4
    node.attr["out_type"].type = tf.int64.as_datatype_enum
    node.attr["_output_shapes"].list.shape.add()
    _, problems = non_core_problems(
        list(graph.node) + [node_def_pb2.NodeDef(op="MatMul")], core, allowlist
    )
    assert problems == [
        "op SentencepieceTokenizeOp attr out_type=int64 is outside ['int32', 'string']",
        "op SentencepieceTokenizeOp has attr 'num_threads' unknown to the embedded tensorflow-text",
    ]


@pytest.mark.slow
def test_core_ops_equal_a_fresh_process_without_tf_text():
    result = subprocess.run(
        [sys.executable, "-c", _LIST_CORE_OPS],
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    fresh = set(json.loads(result.stdout.strip().splitlines()[-1]))
    assert len(fresh) > 1000 and not SENTENCEPIECE_OPS & fresh
    assert core_ops() == fresh
