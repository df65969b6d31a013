"""Decompositions of the float classification ops by comparisons, for a runtime that types
them but cannot evaluate them for some type (tract 0.23.9: ``IsNaN`` and ``IsInf`` of
double): registered by the ``tract`` plugin.

* ``IsNaN(x)``: ``Not(Equal(x, x))`` (NaN is the one value unequal to itself).
* ``IsInf(x)`` (``detect_positive``, ``detect_negative``): ``Equal(x, +inf)``,
  ``Equal(x, -inf)``, or ``Equal(Abs(x), +inf)`` for both; neither: ``Less(x, x)`` (false
  everywhere, NaN included).

Exact. Oracle: the ONNX reference evaluator's own ``IsNaN``/``IsInf`` (numpy's ``isnan`` /
``isinf``), on samples holding NaN, both infinities, zeros and finite values.
"""

from __future__ import annotations

import numpy as np
from onnx import FunctionProto, TensorProto

from rewriter.plugin import Arg, Declined, FunctionBuilder, OpSample, declining

DOMAIN = "float-classes"
ISNAN_OPSETS = (13, None)  # bfloat16 and the current type lists from 13; 20 adds float8
ISINF_OPSETS = (11, None)  # Equal of floats from opset 11
_FLOATS = {"tensor(float)": TensorProto.FLOAT, "tensor(double)": TensorProto.DOUBLE,
           "tensor(float16)": TensorProto.FLOAT16}
_SPECIAL = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1.5, -2.0, 3e4]


@declining
def build_by_comparison(ctx) -> FunctionProto | None:
    """``IsNaN`` / ``IsInf`` as comparisons of ``x``."""
    node = ctx.node
    types = list(ctx.input_types or [])
    elem = _FLOATS.get(types[0]) if types else None
    if len(node.input) != 1 or len(node.output) != 1 or elem is None:
        raise Declined("needs one input of a known float type (float, double, float16)")
    b = FunctionBuilder(ctx.opset)
    if node.op_type == "IsNaN":
        y = b.op("Not", b.op("Equal", "X", "X"))
    else:
        positive = ctx.attribute("detect_positive", 1)
        negative = ctx.attribute("detect_negative", 1)
        inf = b.const(np.array(np.inf), elem, hint="inf")
        if positive and negative:
            y = b.op("Equal", b.op("Abs", "X"), inf)
        elif positive:
            y = b.op("Equal", "X", inf)
        elif negative:
            y = b.op("Equal", "X", b.op("Neg", inf))
        else:
            y = b.op("Less", "X", "X")
    return b.function(DOMAIN, node.op_type.lower(), ["X"], [y])


def samples(op_type: str, opset: int) -> list[OpSample]:
    values = [_SPECIAL, _SPECIAL[::-1]]
    if op_type == "IsNaN":
        return [OpSample([Arg("T[2,8]", values=values)], opset=opset, outputs=["bool"],
                         dtypes=["float", "double", "float16"])]
    return [OpSample([Arg("T[2,8]", values=values)], opset=opset, attributes=attrs,
                     outputs=["bool"], name=name, dtypes=["float", "double"])
            for name, attrs in [("both", {}), ("positive", {"detect_negative": 0}),
                                ("negative", {"detect_positive": 0}),
                                ("neither", {"detect_positive": 0, "detect_negative": 0})]]


def register(registry) -> None:
    """The ``tract`` plugin's decompositions (``register_decompositions``)."""
    for op_type, opsets, dtypes in (("IsNaN", ISNAN_OPSETS, ("float", "double", "float16")),
                                    ("IsInf", ISINF_OPSETS, ("float", "double"))):
        registry.add("", op_type, build_by_comparison, opsets=opsets,
                     description=f"{op_type} by comparisons of x", dtypes=dtypes,
                     oracle="reference",
                     samples=samples(op_type, opsets[0]))
