"""examples/served.py: the scripts that call an exported model find the
newest version as TF Serving does, and another example's export (or no
export) ends in a ValueError that says what to pass, not in a traceback
from the loaded graph (translate.py on a super resolver raised TypeError,
super_resolve.py on a translator RuntimeError)."""

import os
import sys

import pytest

tf = pytest.importorskip("tensorflow")
pytestmark = pytest.mark.requires_tensorflow

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "examples")))
import served  # noqa: E402


def _export(path, **signatures):
    module = tf.Module()
    for name, function in signatures.items():
        setattr(module, name, function)
    tf.saved_model.save(module, str(path), signatures=signatures)


@tf.function(input_signature=[tf.TensorSpec([None, 8, 8, 3], tf.uint8, name="image")])
def _upsample(image):
    return {"image": tf.repeat(tf.repeat(image, 4, axis=1), 4, axis=2)}


def test_the_newest_version_with_the_signature_is_loaded(tmp_path):
    _export(tmp_path / "export" / "2", serving_default=_upsample)
    _export(tmp_path / "export" / "10", serving_default=_upsample, sample_with_options=_upsample)
    os.makedirs(tmp_path / "export" / "notes")
    path, signature = served.load_signature(
        str(tmp_path / "export"), "sample_with_options", inputs=("image",), written_by="train.py"
    )
    assert path == str(tmp_path / "export" / "10")  # 10 > 2, numerically
    assert signature(image=tf.ones([1, 8, 8, 3], tf.uint8))["image"].shape == (1, 32, 32, 3)


def test_another_models_export_is_refused_with_what_to_pass(tmp_path):
    _export(tmp_path / "export" / "1", serving_default=_upsample)
    export = str(tmp_path / "export")
    with pytest.raises(
        ValueError,
        match=r"takes \['image'\], not \['text'\], so it is not the model "
        r"this script calls: pass the export folder that train.py wrote",
    ):
        served.load_signature(export, "serving_default", inputs=("text",), written_by="train.py")
    with pytest.raises(
        ValueError,
        match=r"has no 'sample_with_options' signature \(it has "
        r"\['serving_default'\]\)",
    ):
        served.load_signature(
            export, "sample_with_options", inputs=("image",), written_by="train.py"
        )
    with pytest.raises(
        ValueError, match=r"no SavedModel in .*empty \(nor a numbered version folder"
    ):
        served.load_signature(str(tmp_path / "empty"), "serving_default", (), written_by="train.py")
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "saved_model.pb").write_bytes(b"not a protocol buffer")
    with pytest.raises(ValueError, match=r"cannot load the SavedModel in .*broken \("):
        served.load_signature(
            str(tmp_path / "broken"), "serving_default", (), written_by="train.py"
        )
