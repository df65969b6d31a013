"""A failure of onnx's shape inference that only a declared shape makes is no finding (issue
29, item 5). onnxruntime-genai's builder declares its rank-1 ``Constant`` shape tensors as
scalars (``value_info``); onnx's strict inference keeps the declaration and the ``Concat``
they feed "mixes ranks", so the tool refused the builder's Qwen3 fp16 CPU model for every
target, onnxruntime included, which runs it. The handmade model here has the same pattern
(``Concat`` of a declared-scalar rank-1 ``Constant``, feeding a ``Reshape``-21) and a
com.microsoft ``BiasGelu``, so that opset:17 and the reference evaluator need a rewrite.
Numbers against numpy written from the ops' documentation."""

from __future__ import annotations

import math

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from rewriter.api import check, rewrite
from rewriter.detect.ranks import rank_check, rank_problems, without_contradicted_declarations
from rewriter.verify.structure import verify

BIAS = np.array([0.1, -0.2], np.float32)
X = np.linspace(-2.0, 3.0, 6).astype(np.float32)


@pytest.fixture(scope="module")
def plugins():
    from rewriter.testing import oracle_plugins

    return oracle_plugins()


def _constant(name: str, values: list[int]) -> onnx.NodeProto:
    return helper.make_node("Constant", [], [name], name=f"const_{name}",
                            value=numpy_helper.from_array(np.array(values, np.int64)))


def _declared_scalar_constant() -> onnx.ModelProto:
    """x (6) -> Reshape(x, Concat([3], [2])) -> com.microsoft BiasGelu(., bias) -> y (3, 2);
    the Constant holding [2] is declared a scalar, as the genai builder declares its own."""
    nodes = [_constant("three", [3]), _constant("two", [2]),
             helper.make_node("Concat", ["three", "two"], ["shape"], name="cat", axis=0),
             helper.make_node("Reshape", ["x", "shape"], ["r"], name="reshape"),
             helper.make_node("BiasGelu", ["r", "bias"], ["y"], name="gelu",
                              domain="com.microsoft")]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 2])],
        [numpy_helper.from_array(BIAS, "bias")],
        value_info=[helper.make_tensor_value_info("two", TensorProto.INT64, [])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21),
                                                   helper.make_opsetid("com.microsoft", 1)],
                             ir_version=10)


def _bias_gelu(x: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """com.microsoft BiasGelu: the exact Gelu of x + bias, 0.5 z (1 + erf(z / sqrt 2))."""
    z = (x + bias).astype(np.float64)
    return (0.5 * z * (1 + np.vectorize(math.erf)(z / math.sqrt(2)))).astype(np.float32)


def test_onnx_strict_inference_fails_where_onnxruntime_runs():
    """The premise, on both tools: onnx's strict inference refuses the Concat, onnxruntime
    runs the model and computes BiasGelu(reshape(x)) as documented."""
    import onnxruntime as ort

    model = _declared_scalar_constant()
    with pytest.raises(Exception, match="All inputs to Concat must have same rank"):
        onnx.shape_inference.infer_shapes(model, strict_mode=True)
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    (got,) = session.run(None, {"x": X})
    np.testing.assert_allclose(got, _bias_gelu(X.reshape(3, 2), BIAS), rtol=1e-5, atol=1e-6)


def test_a_rank_problem_only_a_declaration_makes_is_a_warning_not_a_finding():
    model = _declared_scalar_constant()
    checked = rank_check(model)
    assert rank_problems(model) == ()
    assert [(p.op_type, p.node_name) for p in checked.declared_only] == [("Concat", "cat")]
    assert ("Constant", "const_two") in checked.stale
    repaired, said = without_contradicted_declarations(model)
    assert repaired is not model and said and "'two'" in said[0]
    onnx.shape_inference.infer_shapes(repaired, strict_mode=True)  # passes now
    assert model.graph.value_info[0].type.tensor_type.HasField("shape")  # input untouched


def test_check_onnxruntime_runs_it_with_a_warning_naming_the_node(plugins):
    (result,) = check(_declared_scalar_constant(), ["onnxruntime"], plugins=plugins,
                      confirm=True).results
    assert result.runs and result.confirmed, result.findings
    (warning,) = result.warnings
    assert "Concat 'cat'" in warning
    assert "All inputs to Concat must have same rank" in warning


@pytest.mark.parametrize("target", ["opset:17", "reference"])
def test_check_other_targets_find_only_what_they_lack_and_plan_a_remedy(plugins, target):
    (result,) = check(_declared_scalar_constant(), [target], plugins=plugins,
                      confirm=False).results
    assert "input-rank" not in {f.reason for f in result.findings}
    assert "com.microsoft::BiasGelu(1)" in {f.op_label for f in result.findings}
    assert not [p for p in result.plan.values() if str(p).startswith("none")], result.plan
    assert result.warnings


@pytest.mark.parametrize("target", ["opset:17", "reference"])
def test_rewrite_for_other_targets_proceeds_and_verifies(plugins, target):
    result = rewrite(_declared_scalar_constant(), [target], plugins=plugins)
    report = result.report
    assert report.verdict == "verified", report.verdict_reason
    assert any("declared shape" in r for r in report.repairs), report.repairs
    assert report.verification["shape_inference"] == "ok"
    out = result.model
    assert "BiasGelu" not in {n.op_type for n in out.graph.node}
    onnx.shape_inference.infer_shapes(out, strict_mode=True)
    from onnx.reference import ReferenceEvaluator

    (got,) = ReferenceEvaluator(out).run(None, {"x": X})
    np.testing.assert_allclose(got, _bias_gelu(X.reshape(3, 2), BIAS), rtol=1e-5, atol=1e-6)


def test_rewrite_for_onnxruntime_leaves_the_model_as_it_is(plugins):
    result = rewrite(_declared_scalar_constant(), ["onnxruntime"], plugins=plugins)
    assert result.report.verdict == "unchanged", result.report.verdict_reason
    assert result.report.repairs == []
    assert result.report.verification["shape_inference"].startswith("pre-existing")


def test_verification_tells_a_pre_existing_inference_failure_from_a_new_one():
    original = _declared_scalar_constant()
    same = _declared_scalar_constant()
    assert verify(same, original)["shape_inference"].startswith("pre-existing")
    worse = _declared_scalar_constant()  # a second stale declaration, the rewrite's own
    worse.graph.value_info.append(helper.make_tensor_value_info("three", TensorProto.INT64,
                                                                [4, 4]))
    verdict = verify(worse, original)["shape_inference"]
    assert not verdict.startswith("pre-existing")
    assert "const_three" in verdict and "new" in verdict


def _gelu_then_declared_unsqueeze() -> onnx.ModelProto:
    """x (2, 3) -> com.microsoft BiasGelu -> Unsqueeze(0) -> Relu -> y (1, 2, 3); the
    Unsqueeze's output declared (1, 2, 5), wrong, as the genai builder declares its KV
    cache's total length as the new tokens' count. onnx's inference knows no com.microsoft
    op: the declaration contradicts nothing until the BiasGelu is decomposed."""
    nodes = [helper.make_node("BiasGelu", ["x", "bias3"], ["g"], name="gelu",
                              domain="com.microsoft"),
             helper.make_node("Unsqueeze", ["g", "axes"], ["u"], name="unsqueeze"),
             helper.make_node("Relu", ["u"], ["y"], name="relu")]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 3])],
        [numpy_helper.from_array(np.array([0.1, -0.2, 0.3], np.float32), "bias3"),
         numpy_helper.from_array(np.array([0], np.int64), "axes")],
        value_info=[helper.make_tensor_value_info("u", TensorProto.FLOAT, [1, 2, 5])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21),
                                                   helper.make_opsetid("com.microsoft", 1)],
                             ir_version=10)


def test_a_wrong_declaration_the_rewrite_reveals_is_cleared_and_said(plugins):
    model = _gelu_then_declared_unsqueeze()
    onnx.shape_inference.infer_shapes(model, strict_mode=True)  # nothing to see yet
    result = rewrite(model, ["reference"], plugins=plugins)
    report = result.report
    assert report.verdict == "verified", report.verdict_reason
    assert report.verification["shape_inference"] == "ok"
    assert any("once rewritten" in r and "'u'" in r for r in report.repairs), report.repairs
    onnx.shape_inference.infer_shapes(result.model, strict_mode=True)
    x = X.reshape(2, 3)
    from onnx.reference import ReferenceEvaluator

    (got,) = ReferenceEvaluator(result.model).run(None, {"x": x})
    want = np.maximum(_bias_gelu(x, np.array([0.1, -0.2, 0.3], np.float32)), 0)[None]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
