"""Static shapes on request (issue 30, item 1): ``--fix-dim NAME=V`` and ``--input-shape
INPUT=d0,d1,...`` are applied before detection; the result keeps them, the report names them
and the comparison runs at them."""

from __future__ import annotations

import onnx
import pytest

from rewriter.api import check, rewrite
from rewriter.cli import main
from rewriter.io.inputs import InputError
from rewriter.io.shapes import parse_input_shapes, static_shapes
from tests.conftest import model_from_text, write_model

MODEL = """
<ir_version: 8, opset_import: ["": 17, "com.microsoft": 1]>
g (float[batch, seq, 8] x, float[seq, 8] b) => (float[batch, seq, 8] y) {
    g = com.microsoft.Gelu (x)
    y = Add (g, b)
}
"""


def _dims(value) -> list:
    return [d.dim_param or d.dim_value for d in value.type.tensor_type.shape.dim]


def test_fix_dim_sets_a_symbolic_dimension_everywhere():
    fixed, said = static_shapes(model_from_text(MODEL), {"batch": 1})
    graph = fixed.graph
    assert _dims(graph.input[0]) == [1, "seq", 8] and _dims(graph.input[1]) == ["seq", 8]
    assert _dims(graph.output[0]) == [1, "seq", 8]
    assert said == ["symbolic dimension 'batch' fixed to 1 everywhere (--fix-dim)"]


def test_an_input_shape_fixes_its_symbolic_dimensions_everywhere():
    fixed, said = static_shapes(model_from_text(MODEL), None, {"x": [2, 5, 8]})
    assert _dims(fixed.graph.input[0]) == [2, 5, 8] and _dims(fixed.graph.input[1]) == [5, 8]
    assert _dims(fixed.graph.output[0]) == [2, 5, 8]
    assert "input 'x' given the static shape [2, 5, 8] (--input-shape)" in said


@pytest.mark.parametrize("fix, shapes, words", [
    ({"batchsize": 1}, None, "--fix-dim batchsize: the model declares no dimension"),
    (None, {"z": [1]}, "--input-shape z: the model has no such input"),
    (None, {"x": [1, 2]}, "2 dimensions given, the input has rank 3"),
    (None, {"x": [1, 2, 9]}, "dimension 2 is 8 in the model, 9 given"),
    ({"batch": 2}, {"x": [1, 2, 8]}, "is given 1 and 2"),
])
def test_bad_static_shapes_are_one_clear_error(fix, shapes, words):
    with pytest.raises(InputError, match=words):
        static_shapes(model_from_text(MODEL), fix, shapes)


def test_parse_input_shapes():
    assert parse_input_shapes(["images=1,3,224,224", "s="]) == {"images": [1, 3, 224, 224],
                                                               "s": []}
    with pytest.raises(InputError, match="expected INPUT=d0,d1"):
        parse_input_shapes(["1,3,224"])


def test_rewrite_keeps_the_static_shapes_names_them_and_verifies_at_them(tmp_path, plugins):
    source = write_model(tmp_path / "m.onnx", model_from_text(MODEL))
    out = tmp_path / "out.onnx"
    report = rewrite(str(source), "reference", output=out, plugins=plugins,
                     fix_dims={"batch": 2}, input_shapes={"b": [4, 8]}).report
    assert report.verdict == "verified", report.verdict_reason
    assert any("'seq' fixed to 4 everywhere (from --input-shape)" in r for r in report.repairs)
    assert report.comparison.inputs["shapes"]["x"] == "float32[2, 4, 8]"
    written = onnx.load(out)
    assert _dims(written.graph.input[0]) == [2, 4, 8]


def test_a_model_whose_only_change_is_its_shapes_is_verified_not_unchanged(tmp_path, plugins):
    model = model_from_text(MODEL.replace("com.microsoft.Gelu", "Relu"))
    source = write_model(tmp_path / "m.onnx", model)
    report = rewrite(str(source), "onnxruntime", output=tmp_path / "o.onnx", plugins=plugins,
                     fix_dims={"batch": 1, "seq": 2}).report
    assert report.verdict == "verified" and len(report.repairs) == 2


def test_check_and_its_hint_carry_the_static_shapes(tmp_path, capsys):
    source = write_model(tmp_path / "m.onnx", model_from_text(MODEL))
    code = main(["check", str(source), "-t", "reference", "--no-confirm", "--fix-dim",
                 "batch=1"])
    out = " ".join(capsys.readouterr().out.split())
    assert code == 1 and "--fix-dim batch=1`" in out
    report = check(str(source), "reference", plugins=None, confirm=False,
                   fix_dims={"batch": 1})
    assert [f.op_type for f in report.findings] == ["Gelu"]
