"""A node giving as an attribute what its operator takes as an input (``ReduceMean``'s
``axes`` at opset 21, as ``MatMulNBitsQuantizer`` leaves an opset-17 model's RMSNorm when it
raises the opset): found on every target (``attribute-as-input``), remedied by the op in its
valid form, and the comparison's oracle runs the original as it was written."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from rewriter.api import check, rewrite
from rewriter.detect.attributes import attribute_findings, with_attributes_as_inputs


def _rms_norm(opset: int = 21) -> onnx.ModelProto:
    """``x / sqrt(mean(x^2, axes=[-1]) + eps)``, the mean's axes an attribute."""
    nodes = [helper.make_node("Mul", ["x", "x"], ["sq"], name="square"),
             helper.make_node("ReduceMean", ["sq"], ["mean"], name="mean", axes=[-1],
                              keepdims=1),
             helper.make_node("Add", ["mean", "eps"], ["var"], name="add"),
             helper.make_node("Sqrt", ["var"], ["rms"], name="sqrt"),
             helper.make_node("Div", ["x", "rms"], ["y"], name="div")]
    graph = helper.make_graph(
        nodes, "rms", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 3, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", 3, 8])],
        [helper.make_tensor("eps", TensorProto.FLOAT, [], [1e-6])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _expected(x: np.ndarray) -> np.ndarray:
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-6)


def test_the_node_is_found_and_a_valid_one_is_not():
    (finding,) = attribute_findings(_rms_norm(), "any")
    assert (finding.op_type, finding.reason, finding.node_name) == (
        "ReduceMean", "attribute-as-input", "mean")
    assert "axes" in finding.detail
    assert attribute_findings(_rms_norm(opset=17), "any") == []  # an attribute there


def test_the_oracle_reads_the_attribute_as_the_input():
    repaired, changed = with_attributes_as_inputs(_rms_norm())
    assert changed == 1
    onnx.checker.check_model(repaired, full_check=True)
    from onnx.reference import ReferenceEvaluator

    x = np.random.default_rng(0).standard_normal((2, 3, 8)).astype(np.float32)
    np.testing.assert_allclose(ReferenceEvaluator(repaired).run(None, {"x": x})[0],
                               _expected(x), rtol=1e-5)
    model = _rms_norm(opset=17)
    assert with_attributes_as_inputs(model) == (model, 0)


@pytest.mark.parametrize("target", ["onnxruntime", "reference", "opset:17"])
def test_every_target_gets_the_valid_form_verified(plugins, target):
    model = _rms_norm()
    found = check(model, [target], plugins=plugins)
    reasons = {f.reason for f in found.findings if f.node_name == "mean"}
    # (under an opset ceiling the node is first too new: one finding per node)
    assert reasons == ({"opset-too-new"} if target.startswith("opset") else
                       {"attribute-as-input"}), found.findings
    x = np.random.default_rng(1).standard_normal((2, 3, 8)).astype(np.float32)
    result = rewrite(model, [target], plugins=plugins, compare_options={"inputs": {"x": x}})
    assert result.report.verdict == "verified", result.report.verdict_reason
    assert "attributes their operator takes as inputs" in result.report.verdict_reason
    onnx.checker.check_model(result.model, full_check=True)  # valid ONNX now
    import onnxruntime as ort

    got = ort.InferenceSession(result.model.SerializeToString(),
                               providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, _expected(x), rtol=1e-5)


def test_openvino_gets_the_valid_form_and_computes_the_written_model(plugins):
    pytest.importorskip("openvino")
    from rewriter_plugins import openvino_target

    model = _rms_norm()
    x = np.random.default_rng(2).standard_normal((2, 3, 8)).astype(np.float32)
    # OpenVINO runs the invalid node, ignoring the attribute (a mean over every axis)
    ignored = openvino_target.compile_model(model.SerializeToString())({"x": x})
    assert not np.allclose(list(ignored.values())[0], _expected(x), rtol=1e-3)
    result = rewrite(model, ["openvino"], plugins=plugins, compare_options={"inputs": {"x": x}})
    assert result.report.verdict == "verified", result.report.verdict_reason
    got = openvino_target.compile_model(result.model.SerializeToString())({"x": x})
    np.testing.assert_allclose(list(got.values())[0], _expected(x), rtol=1e-5)
