"""A runtime that refuses a whole model without naming a node is asked about prefixes of the
model, so the finding names the first node whose prefix it refuses (issue 30, item 3)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from rewriter.detect.bisect import bisect_refusal, prefix_model
from rewriter.detect.targets import resolve_targets
from rewriter.detect.walker import confirm_model


def _model() -> onnx.ModelProto:
    """Relu, Cast, then com.microsoft::Attention with a 4-D mask and a past state (tract
    0.23 panics loading it: "index out of bounds", naming no node), then Neg."""
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Relu", ["x"], ["h"]),
             helper.make_node("Cast", ["mask"], ["mask32"], to=TensorProto.INT32),
             helper.make_node("Attention", ["h", "w", "b", "mask32", "past"], ["y", "present"],
                              domain="com.microsoft", num_heads=2, unidirectional=0),
             helper.make_node("Neg", ["y"], ["z"])]
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8]),
         helper.make_tensor_value_info("mask", TensorProto.INT64, [1, 1, 64, 64]),
         helper.make_tensor_value_info("past", TensorProto.FLOAT, [2, 1, 2, 2, 4])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 3, 8]),
         helper.make_tensor_value_info("present", TensorProto.FLOAT, [2, 1, 2, 5, 4])],
        [numpy_helper.from_array(rng.standard_normal((8, 24)).astype(np.float32), "w"),
         numpy_helper.from_array(rng.standard_normal(24).astype(np.float32), "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13),
                                                    helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8
    return model


def test_a_prefix_exposes_what_the_rest_reads_and_keeps_what_it_reads():
    model = _model()
    prefix = prefix_model(model, 2)
    assert [n.op_type for n in prefix.graph.node] == ["Relu", "Cast"]
    assert [o.name for o in prefix.graph.output] == ["h", "mask32"]
    assert [i.name for i in prefix.graph.input] == ["x", "mask"]
    assert not prefix.graph.initializer  # w and b are read by later nodes only
    onnx.checker.check_model(prefix, full_check=True)
    whole = prefix_model(model, 4)
    assert [o.name for o in whole.graph.output] == ["present", "z"]


def test_tract_refusing_the_whole_model_blames_the_first_node_it_refuses(plugins):
    pytest.importorskip("tract")
    (tract,) = resolve_targets(plugins, ["tract"])
    model = _model()
    confirmation = tract.confirmation(model, None)
    if confirmation.refusal is None:
        pytest.skip("this tract loads com.microsoft::Attention with a 4-D mask")
    found = bisect_refusal(model, tract)
    assert found is not None and found.index == 2 and found.steps >= 2
    _, (finding,) = confirm_model(model, tract)
    assert finding.op_type == "Attention" and finding.reason == "runtime-refused"
    assert "the first node whose prefix of the model tract refuses" in finding.detail


def test_tract_detection_blames_the_node_of_a_panic_on_the_whole_model(plugins):
    """The static check asks tract about the whole model first; a panic there that names no
    node (bert's second Attention panics only in the whole model, its probe alone loads) is
    bisected as the confirmation's is: the node found is blamed, so its finding is a node's
    a remedy can take, not the model's."""
    pytest.importorskip("tract")
    (tract,) = resolve_targets(plugins, ["tract"])
    model = _model()
    verdict = tract.ask_whole_model(model.SerializeToString())
    if verdict is None:
        pytest.skip("this tract loads com.microsoft::Attention with a 4-D mask")
    tract.check_model(model)  # (the target's per-model state; its own blame ran there)
    tract.blamed, tract.model_refusal = {}, None
    assert tract.blame(model, verdict) == []
    assert tract.model_refusal is None
    ((path, (reason, detail)),) = tract.blamed.items()
    assert path.startswith("graph/node 2") and reason == verdict[0]
    assert "the first node whose prefix of the model tract refuses" in detail
