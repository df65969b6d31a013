"""``rewriter.plugin.RuntimeTarget``: a minimal target over a real runtime (the ONNX reference
evaluator, asked by loading models) works through ``rewriter.check`` — the whole model first,
one-node probes where it refuses, the refusal pointed at its node, a confirmation in a child
process that loads the model by path and runs it once."""

from __future__ import annotations

import sys

from onnx import TensorProto, helper

from rewriter import check
from rewriter.plugin import RuntimeTarget, hookimpl, probe_models, type_proto

CHILD = """
import pickle, sys
from onnx.reference import ReferenceEvaluator
from rewriter.plugin import child_says, run_sets
job = pickle.load(sys.stdin.buffer)
try:
    session = ReferenceEvaluator(job["path"])
except Exception as e:
    child_says("load", str(e).strip().splitlines()[0])
    sys.exit(0)
child_says("loaded")
if job["feeds"] is not None:
    error, values = run_sets(lambda feeds: session.run(None, feeds), job["feeds"])
    child_says("run", error, values=values) if error else child_says("ran")
"""


def _ask(data: bytes):
    """The reference evaluator's verdict on a model: None when it loads, else why not."""
    from onnx import ModelProto
    from onnx.reference import ReferenceEvaluator

    try:
        ReferenceEvaluator(ModelProto.FromString(data))
    except Exception as e:  # noqa: BLE001 - the runtime's refusal is the answer
        return ("no-kernel", f"the reference evaluator refuses it: {str(e).splitlines()[0]}")
    return None


class TinyReference(RuntimeTarget):
    """The ONNX reference evaluator, asked by loading models."""

    runtime = "the reference evaluator"
    compares_numbers = False

    def __init__(self, options=None):
        super().__init__("tiny-reference", "the reference evaluator, by loading", options)

    def ask_whole_model(self, data):
        return _ask(data)

    def check_node(self, query):
        if self.model_runs and not self.in_body(query):
            return None
        inputs = probe_models.probe_inputs(query, self.constants,
                                           lambda name: type_proto(query.types.get(name)))
        versions = {**query.opsets, query.domain: query.opset or 1}
        key = (query.domain, query.node.op_type, query.opset, inputs.key)
        verdict = self.cached_verdict(key, lambda: _ask(probe_models.one_node_model(
            query.node, inputs.parts, query.outputs, versions).SerializeToString()))
        verdict = verdict or self.blamed_verdict(query)
        return None if verdict is None else self.finding(query, *verdict)

    def confirm_job(self, model, base_dir, data, path, feeds):
        return [CHILD], {"path": path, "feeds": feeds}


@hookimpl
def register_targets(registry):
    registry.add("tiny-reference", lambda argument, options: TinyReference(options))


def _model(second: str, domain: str = ""):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    z = helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 3])
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="relu"),
             helper.make_node(second, ["y"], ["z"], name="second", domain=domain)]
    opsets = [helper.make_opsetid("", 18)] + ([helper.make_opsetid(domain, 1)] if domain else [])
    return helper.make_model(helper.make_graph(nodes, "g", [x], [z]), opset_imports=opsets,
                             ir_version=9)


def test_a_minimal_runtime_target_works_through_check():
    plugins = [sys.modules[__name__]]
    ok = check(_model("Sigmoid"), "tiny-reference", plugins=plugins, confirm=True)
    (result,) = ok.results
    assert result.findings == [] and result.confirmed
    assert result.confirmation == "loaded and ran once on generated inputs"

    refused = check(_model("Frobnicate", "com.acme"), "tiny-reference", plugins=plugins,
                    confirm=True)
    (finding,) = refused.results[0].findings  # the node the probe refuses, not Relu
    assert (finding.node_name, finding.op_type, finding.reason) == (
        "second", "Frobnicate", "no-kernel")
    assert "the reference evaluator refuses it" in finding.detail
    key = ("com.acme", "Frobnicate", 1)
    assert any(k[:3] == key for k in TinyReference.verdicts)  # cached per process and class
    assert TinyReference.verdicts is not RuntimeTarget.verdicts
