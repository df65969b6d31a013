"""Judge a dynamically quantized model segment by segment, anchored at its quantization points.

A node that quantizes activations on a grid computed at run time (``DynamicQuantizeLinear``,
onnxruntime's ``DynamicQuantizeMatMul``, ``MatMulNBits`` at accuracy level 4) turns a
one-ulp difference upstream into a whole 8-bit step: two correct runtimes whose float
arithmetic differs in the last bit (OpenVINO's reciprocal division, the reference
evaluator's summation order) then produce outputs further apart than any float tolerance.

When such a model's rewritten form mismatches on a target, it is run once more with the
activation each quantizing node reads (its *anchor*) cut out of the graph: the nodes that read
it read a new graph input instead, fed the oracle's value of it, and the value the target
computes there is kept as an output. Each segment between two anchors then computes from the
oracle's inputs, and everything it computes (the next anchor, the model's outputs) is compared
with the oracle at the usual tolerances: each segment's arithmetic, the rewritten quantization
included, is still checked, while a rounding step taken otherwise at one anchor does not flow
on. The report keeps the unanchored error next to the anchored verdict.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from onnx import ModelProto, helper

from rewriter.graph.walk import normalize_domain, rename_reads

ANCHOR_SUFFIX = "__anchored"

# (domain, op) -> position of the activation the op quantizes at run time
_ACTIVATION_INPUT = {("", "DynamicQuantizeLinear"): 0,
                     ("com.microsoft", "DynamicQuantizeMatMul"): 0,
                     ("com.microsoft", "MatMulNBits"): 0}


def quantizes_at_run_time(node) -> bool:
    """Whether ``node`` quantizes an activation on a grid computed from it at run time
    (``MatMulNBits`` does so at accuracy level 4 only)."""
    key = (normalize_domain(node.domain), node.op_type)
    if key == ("com.microsoft", "MatMulNBits"):
        return any(a.name == "accuracy_level" and a.i == 4 for a in node.attribute)
    return key in _ACTIVATION_INPUT


def quantized_activations(original: ModelProto, rewritten: ModelProto) -> list[str]:
    """The activations the original's main-graph nodes quantize at run time, in order, that
    the rewritten model computes too (a main-graph node of it produces the name)."""
    graph = original.graph
    fixed = {i.name for i in graph.input} | {t.name for t in graph.initializer}
    fixed |= {o for n in graph.node if n.op_type == "Constant" and
              normalize_domain(n.domain) == "" for o in n.output}
    produced = {o for n in rewritten.graph.node for o in n.output if o}
    names: list[str] = []
    for node in graph.node:
        if not quantizes_at_run_time(node):
            continue
        position = _ACTIVATION_INPUT[(normalize_domain(node.domain), node.op_type)]
        name = node.input[position] if len(node.input) > position else ""
        if name and name not in fixed and name in produced and name not in names:
            names.append(name)
    return names


def anchored(model: ModelProto, anchors: dict[str, np.ndarray]) -> ModelProto:
    """A copy of ``model`` cut at ``anchors`` (name -> an example value, for its type and
    rank): the nodes reading each name read the graph input ``name + ANCHOR_SUFFIX``
    instead, and the name, still computed, is an output."""
    from rewriter.comparison.localize import expose

    out = expose(model, list(anchors))
    typed = {o.name: o.type for o in out.graph.output}
    for name, value in anchors.items():
        anchor = name + ANCHOR_SUFFIX
        rename_reads(out.graph.node, {name: anchor})
        elem = helper.np_dtype_to_tensor_dtype(np.asarray(value).dtype)
        shape: list = [f"{anchor}_{k}" for k in range(np.asarray(value).ndim)]
        known = typed.get(name)
        if known is not None and known.tensor_type.HasField("shape") and \
                len(known.tensor_type.shape.dim) == len(shape):
            # as the model knows the value (static where it is: a runtime that types the
            # model ahead, tract with --fix-dim, wants no new symbol there)
            shape = [d.dim_value if d.HasField("dim_value") else
                     (d.dim_param or shape[k]) for k, d in enumerate(known.tensor_type.shape.dim)]
        out.graph.input.append(helper.make_tensor_value_info(anchor, elem, shape))
    return out


@dataclass
class Anchoring:
    """A mismatching target judged again segment by segment (see the module)."""

    points: list[str]  # the anchors, in the original's order
    status: str  # the anchored comparison's: equal | mismatch | error
    unanchored_max_abs: float | None  # the largest error of the plain run
    error: str = ""  # why the anchored runs could not be made
    outputs: list = field(default_factory=list)  # OutputComparison, anchors included

    def as_dict(self) -> dict[str, Any]:
        return {"points": len(self.points), "anchors": self.points[:20],
                "status": self.status, "unanchored_max_abs": self.unanchored_max_abs,
                "error": self.error or None, "outputs": [c.as_dict() for c in self.outputs]}
