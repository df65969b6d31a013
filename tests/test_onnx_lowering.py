"""The ``onnx-lowering`` plugin beyond its samples (each decomposition against the reference
evaluator's implementation of the op is in ``tests/test_oracles.py``): a Scan whose body
reads a value of the enclosing graph, declines, and the forms OpenVINO refuses coming back
runnable there."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from rewriter import testing as oracle_check
from rewriter.api import rewrite
from rewriter.errors import UnfixableError
from tests.conftest import make_model

F = TensorProto.FLOAT


@pytest.fixture(scope="module")
def lacking_plugins():
    return oracle_check.oracle_plugins()


def _scan_model():
    """A cumulative sum whose body scales each slice by ``w``, a value of the main graph
    (the body reads it from the enclosing scope), scanned in reverse."""
    body = helper.make_graph(
        [helper.make_node("Mul", ["x_t", "w"], ["scaled"]),
         helper.make_node("Add", ["s_in", "scaled"], ["s_out"]),
         helper.make_node("Identity", ["s_out"], ["y_t"])], "body",
        [helper.make_tensor_value_info("s_in", F, [3]),
         helper.make_tensor_value_info("x_t", F, [3])],
        [helper.make_tensor_value_info("s_out", F, [3]),
         helper.make_tensor_value_info("y_t", F, [3])])
    nodes = [helper.make_node("Constant", [], ["w"], value=helper.make_tensor(
                 "w", F, [3], [0.5, -1.0, 2.0])),
             helper.make_node("Scan", ["s0", "xs"], ["final", "ys"], body=body,
                              num_scan_inputs=1, scan_input_directions=[1])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("s0", F, [3]),
                                           helper.make_tensor_value_info("xs", F, [4, 3])],
                              [helper.make_tensor_value_info("final", F, [3]),
                               helper.make_tensor_value_info("ys", F, [4, 3])])
    # at an IR version the installed onnxruntime loads, so that it is the oracle (OpenVINO,
    # the chain's next, gives other numbers for this reversed Scan)
    return make_model(graph, [helper.make_opsetid("", 17)])


def test_scan_body_reading_the_enclosing_graph_becomes_a_verified_loop(lacking_plugins):
    model = _scan_model()
    result = rewrite(model, ["lacking:ai.onnx::Scan"], plugins=lacking_plugins,
                     confirm=False)
    assert result.report.verification["compare"] == "ok", result.report.verification
    ops = {n.op_type for n in result.model.graph.node}
    assert "Loop" in ops and "Scan" not in ops
    import onnxruntime as ort

    rng = np.random.default_rng(0)
    feeds = {"s0": rng.standard_normal(3).astype(np.float32),
             "xs": rng.standard_normal((4, 3)).astype(np.float32)}
    final, ys = ort.InferenceSession(result.model.SerializeToString()).run(None, feeds)
    scaled = feeds["xs"] * np.array([0.5, -1.0, 2.0], np.float32)
    running = feeds["s0"] + np.cumsum(scaled[::-1], axis=0)        # reversed scan
    np.testing.assert_allclose(ys, running, rtol=1e-6)
    np.testing.assert_allclose(final, running[-1], rtol=1e-6)
    # the Loop's condition is explicit: the reference evaluator runs no trip without one
    from onnx.reference import ReferenceEvaluator

    final, ys = ReferenceEvaluator(result.model).run(None, feeds)
    np.testing.assert_allclose(ys, running, rtol=1e-6)


@pytest.mark.parametrize("op_type,attributes,inputs", [
    ("Pad", {"mode": "reflect"}, [("x", [2, 3]), ("pads", [4])]),          # only wrap
    ("Resize", {"mode": "linear", "antialias": 1}, [("x", [1, 1, 4, 4]), ("", None),
                                                    ("scales", [4])]),
    ("Det", {}, [("x", [2, None, None])]),                                   # n unknown
], ids=["pad-reflect", "resize-antialias", "det-unknown-n"])
def test_forms_it_does_not_rewrite_are_declined(lacking_plugins, op_type, attributes, inputs):
    types = {"pads": TensorProto.INT64}
    node = helper.make_node(op_type, [n for n, _ in inputs], ["y"], **attributes)
    graph = helper.make_graph([node], "g", [
        helper.make_tensor_value_info(n, types.get(n, F), s) for n, s in inputs if n],
        [helper.make_tensor_value_info("y", F, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    with pytest.raises(UnfixableError, match=op_type):
        rewrite(model, [f"lacking:ai.onnx::{op_type}"], plugins=lacking_plugins,
                confirm=False, verify=False)
