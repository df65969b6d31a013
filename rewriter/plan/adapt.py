"""A decomposition body written at one ai.onnx opset, adapted to another with onnx's version
converter, so a registration for older opsets can stand in when the model is newer.

The planner uses it when every registration covering the model's opset declines (typically:
its body uses an op a target's opset ceiling lacks, such as ``GridSample`` below 16) and a
registration for older opsets exists: that body is built at the highest opset both it and
every target's ceiling allow, raised here to the model's opset (the inliner splices bodies
at the model's opset only), and the opset-conversion pass lowers the model, bodies
included, under the ceiling afterwards.
"""

from __future__ import annotations

from onnx import FunctionProto, TypeProto, helper

from rewriter.graph.walk import normalize_domain
from rewriter.plan.bodies import Declined


def adapted_body(fn: FunctionProto, written_at: int, opset: int) -> FunctionProto:
    """``fn`` (its ai.onnx nodes at opset ``written_at``) with its nodes converted to ai.onnx
    ``opset``; raises :class:`Declined` with onnx's reason when the converter cannot."""
    if written_at == opset:
        return fn
    from onnx import version_converter

    if any(a.ref_attr_name for n in fn.node for a in n.attribute):
        raise Declined(f"its body (written at opset {written_at}) refers to function "
                       "attributes, which the version converter cannot follow")
    imports = {normalize_domain(o.domain): o.version for o in fn.opset_import}
    imports[""] = written_at
    untyped = TypeProto()
    graph = helper.make_graph(
        list(fn.node), "body", [helper.make_value_info(n, untyped) for n in fn.input],
        [helper.make_value_info(n, untyped) for n in fn.output])
    model = helper.make_model(graph, opset_imports=[
        helper.make_opsetid(d, v) for d, v in sorted(imports.items())])
    try:
        converted = version_converter.convert_version(model, opset)
    except Exception as e:  # noqa: BLE001 - onnx's converter refusing is the answer
        line = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
        raise Declined(f"its body (written at opset {written_at}) could not be converted "
                       f"to opset {opset}: {line}") from e
    out = FunctionProto()
    out.CopyFrom(fn)
    del out.node[:]
    out.node.extend(converted.graph.node)
    imports[""] = opset
    del out.opset_import[:]
    out.opset_import.extend(helper.make_opsetid(d, v) for d, v in sorted(imports.items()))
    return out
