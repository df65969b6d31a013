"""A node whose input rank contradicts its schema is a finding (``input-rank``) on every
target, and the remedy plugins offer for it applies: onnx-standard's ``Gemm`` as ``MatMul``
for the rank-3 ``A`` onnxscript's fusions leave behind a ``MultiHeadAttention`` (whose output
keeps a stale rank-2 declared shape). Numbers against numpy written from the ops' docs."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from rewriter.api import check, rewrite
from rewriter.detect.ranks import rank_problems

B, S, D, N, HEADS = 2, 3, 4, 5, 2
RNG = np.random.default_rng(0)
W = RNG.standard_normal((D, N)).astype(np.float32)


@pytest.fixture(scope="module")
def plugins():
    from rewriter.testing import oracle_plugins

    return oracle_plugins()


def _gemm_on_rank3(declared_rank: int) -> onnx.ModelProto:
    """x (B, S, D) -> Gemm(x, W) -> y (B, S, N); ``x``'s shape as declared."""
    shape = [B, S, D] if declared_rank == 3 else [B * S, D]
    graph = helper.make_graph(
        [helper.make_node("Gemm", ["x", "w"], ["y"], name="proj")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [*shape[:-1], N])],
        [numpy_helper.from_array(W, "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)], ir_version=10)


def _attention_then_gemm() -> onnx.ModelProto:
    """com.microsoft MultiHeadAttention (B, S, D) feeding a Gemm, the attention's output
    declared (B*S, D) as onnxscript's fusion leaves it."""
    nodes = [
        helper.make_node("MultiHeadAttention", ["q", "k", "v"], ["att"], name="mha",
                         domain="com.microsoft", num_heads=HEADS),
        helper.make_node("Gemm", ["att", "w"], ["y"], name="proj"),
    ]
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [B, S, D]) for n in "qkv"]
    graph = helper.make_graph(
        nodes, "g", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, [B, S, N])],
        [numpy_helper.from_array(W, "w")],
        value_info=[helper.make_tensor_value_info("att", TensorProto.FLOAT, [B * S, D])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20),
                                                   helper.make_opsetid("com.microsoft", 1)],
                             ir_version=10)


def _attention(q, k, v):
    """MultiHeadAttention (no mask, no bias): per head softmax(Q K^T / sqrt(d)) V."""
    dh = D // HEADS

    def heads(t):
        return t.reshape(B, S, HEADS, dh).transpose(0, 2, 1, 3)

    scores = heads(q) @ heads(k).transpose(0, 1, 3, 2) / np.sqrt(dh)
    scores = np.exp(scores - scores.max(-1, keepdims=True))
    probs = scores / scores.sum(-1, keepdims=True)
    return (probs @ heads(v)).transpose(0, 2, 1, 3).reshape(B, S, D)


def _run_reference(model: onnx.ModelProto, feeds: dict) -> np.ndarray:
    from onnx.reference import ReferenceEvaluator

    return ReferenceEvaluator(model).run(None, feeds)[0]


def test_rank_problems_are_onnx_inference_errors_about_ranks():
    (problem,) = rank_problems(_gemm_on_rank3(3))
    assert (problem.op_type, problem.node_name) == ("Gemm", "proj")
    assert "expected to have rank 2 but has rank 3" in problem.message
    assert rank_problems(_gemm_on_rank3(2)) == ()  # declared rank 2: nothing contradicts
    stale_output = _gemm_on_rank3(2)
    stale_output.graph.output[0].type.tensor_type.shape.dim.add().dim_value = 1
    assert rank_problems(stale_output) == ()  # a wrong output declaration is not the node's


@pytest.mark.parametrize("target", ["onnxruntime", "reference", "opset:17", "openvino"])
def test_a_rank_contradiction_is_a_finding_on_every_target(plugins, target):
    if target == "openvino":
        pytest.importorskip("openvino")
    report = check(_gemm_on_rank3(3), [target], plugins=plugins, confirm=False)
    rank = [f for f in report.findings if f.reason == "input-rank"]
    assert [(f.op_type, f.node_name, f.path) for f in rank] == [
        ("Gemm", "proj", "graph/node 0 (proj)")]
    assert "rank 2 but has rank 3" in rank[0].detail


@pytest.mark.parametrize("target", ["reference", "opset:13"])
def test_gemm_on_a_rank3_input_is_rewritten_as_matmul(plugins, target):
    x = RNG.standard_normal((B, S, D)).astype(np.float32)
    result = rewrite(_gemm_on_rank3(3), [target], plugins=plugins, confirm=False,
                     verify=False)
    out = result.model
    assert "Gemm" not in {n.op_type for n in out.graph.node}
    onnx.checker.check_model(out, full_check=True)  # strict inference passes now
    np.testing.assert_allclose(_run_reference(out, {"x": x}), x @ W, rtol=1e-5, atol=1e-6)


def test_stale_declared_rank_behind_a_decomposed_attention(plugins):
    """The contradiction shows only once the attention is decomposed and its stale declared
    shape forgotten: the re-check finds it and the next round replaces the Gemm."""
    model = _attention_then_gemm()
    assert rank_problems(model) == ()  # hidden by the stale declaration
    result = rewrite(model, ["reference"], plugins=plugins, confirm=False, verify=False)
    out = result.model
    ops = {n.op_type for n in out.graph.node}
    assert "Gemm" not in ops and "MultiHeadAttention" not in ops
    onnx.checker.check_model(out, full_check=True)
    q, k, v = (RNG.standard_normal((B, S, D)).astype(np.float32) for _ in range(3))
    got = _run_reference(out, {"q": q, "k": k, "v": v})
    np.testing.assert_allclose(got, _attention(q, k, v) @ W, rtol=1e-4, atol=1e-5)


def test_whether_a_runtime_runs_the_original_leaves_ranks_out(plugins):
    """The oracle's question (can this runtime run the original?) is the runtime's to
    answer by running it; the rewrite engine's walks flag the contradiction."""
    from rewriter.detect.targets import resolve_targets
    from rewriter.detect.walker import find_unsupported

    (target,) = resolve_targets(plugins, ["reference"])
    model = _gemm_on_rank3(3)
    assert find_unsupported(model, target) == []
    assert [f.reason for f in find_unsupported(model, target, keep_nodes=True)] == [
        "input-rank"]


def test_rewrite_verifies_against_the_runtime_that_runs_the_original(plugins):
    """OpenVINO multiplies the rank-3 Gemm batch by batch: it is the oracle, and the
    rewritten model (MatMul) is verified on the reference evaluator."""
    pytest.importorskip("openvino")
    result = rewrite(_gemm_on_rank3(3), ["reference"], plugins=plugins, confirm=False)
    assert result.report.verdict == "verified", result.report.verdict_reason
    assert result.report.comparison.oracle == "openvino"
