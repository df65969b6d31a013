"""Decompositions for an axis the model's caller feeds at run time, where a runtime needs it
constant when it loads the model (tract types ``CumSum`` only with a constant axis, and
reshapes only to shapes it can compute then): registered by the ``tract`` plugin.

* ``CumSum(x, axis)`` / ``CumProd(x, axis)`` (``exclusive``, ``reverse``), ``x`` of a
  declared rank ``r``: for each axis ``k`` in ``0..r-1``, ``x`` unsqueezed at ``k`` and
  the elements ``j <= i`` (``j < i`` exclusive; ``j >= i`` / ``j > i`` reversed) of an
  ``(n, n)`` triangle kept (the rest 0 for a sum, 1 for a product), reduced over ``j``;
  the result chosen by ``Where(axis == k, ...)`` (a negative axis counted from the end).
  Every axis is a constant: no value of the axis is needed to type the model. ``r`` times
  the work, ``n^2`` memory per axis. Declined when the axis is a constant already.

Oracle: the ONNX reference evaluator's own ``CumSum`` and ``CumProd`` (numpy's ``cumsum`` /
``cumprod``, not these bodies), with the axis fed as an input.
"""

from __future__ import annotations

import numpy as np
from onnx import FunctionProto, TensorProto

from rewriter.plugin import Arg, Declined, FunctionBuilder, OpSample, declining
from rewriter.plugin import present as _present

DOMAIN = "static-axis"
MAX_RANK = 8  # one op per axis: a body of at most this many copies
CUMSUM_OPSETS = (11, None)  # the axis is an input from CumSum-11
CUMPROD_OPSETS = (26, None)


@declining
def build_axis_dispatch(ctx) -> FunctionProto | None:
    """The triangular form along each constant axis, chosen by the run-time axis."""
    node = ctx.node
    if (len(node.input) != 2 or not all(_present(node.input, i) for i in range(2))
            or len(node.output) != 1
            or any(a.name not in ("exclusive", "reverse") for a in node.attribute)):
        raise Declined("needs x and axis, one output, only exclusive and reverse")
    if ctx.constant(node.input[1]) is not None:
        raise Declined("the axis is a constant already")
    rank = _declared_rank(ctx, node.input[0])
    if not rank or rank > MAX_RANK:
        raise Declined(f"needs x of a declared rank from 1 to {MAX_RANK}")
    types = list(ctx.input_types or [])
    elem = getattr(TensorProto, types[0][7:-1].upper(), None) if types and types[0] and \
        types[0].startswith("tensor(") else None
    if elem is None:
        raise Declined("the element type of x is unknown")
    exclusive, reverse = ctx.attribute("exclusive", 0), ctx.attribute("reverse", 0)
    # keep x[j] for y[i] where rows (i) <op> cols (j)
    compare = {(0, 0): "GreaterOrEqual", (1, 0): "Greater", (0, 1): "LessOrEqual",
               (1, 1): "Less"}[(exclusive, reverse)]
    reduce, neutral = _FORMS[node.op_type]
    b = FunctionBuilder(ctx.opset)
    neutral = b.const(np.array(neutral), elem, hint="neutral")
    shape = b.op("Shape", "x")
    axis = b.op("Reshape", b.cast("axis", TensorProto.INT64), b.const(np.array([], np.int64)))
    axis = b.op("Where", b.op("Less", axis, b.const(np.array(0, np.int64))),
                b.op("Add", axis, b.const(np.array(rank, np.int64))), axis)
    y = None
    for k in reversed(range(rank)):
        n = b.op("Gather", shape, b.const(np.array(k, np.int64)), axis=0)
        steps = b.op("Range", b.const(np.array(0, np.int64)), n,
                     b.const(np.array(1, np.int64)))
        keep = b.op(compare, b.unsqueeze(steps, [1]), b.unsqueeze(steps, [0]))  # (i, j)
        others = [*range(k), *range(k + 2, rank + 1)]
        if others:
            keep = b.unsqueeze(keep, others)  # i at axis k, j at k + 1
        chosen = b.op("Where", keep, b.unsqueeze("x", [k]), neutral)
        along = b.reduce(reduce, chosen, [k + 1], keepdims=0)
        y = along if y is None else b.op(
            "Where", b.op("Equal", axis, b.const(np.array(k, np.int64))), along, y)
    return b.function(DOMAIN, f"{node.op_type.lower()}_axis_dispatch", ["x", "axis"], [y])


# op -> (the reduction over the kept elements, its neutral element)
_FORMS = {"CumSum": ("ReduceSum", 0), "CumProd": ("ReduceProd", 1)}


def _declared_rank(ctx, name: str) -> int | None:
    declared = (ctx.declared or {}).get(name)
    if declared is None or not declared.HasField("tensor_type"):
        return None
    tensor_type = declared.tensor_type
    return len(tensor_type.shape.dim) if tensor_type.HasField("shape") else None


def samples(op_type: str, opset: int) -> list[OpSample]:
    """The axis fed as an input (not a constant): every axis, negative ones, both flags."""
    return [
        OpSample([Arg("T[2,3,4]"), Arg(f"{t}[]", values=axis)], opset=opset,
                 attributes=attrs, name=f"axis{axis}", dtypes=["float", "int64"])
        for axis, t, attrs in [(0, "int64", {}), (1, "int32", {"exclusive": 1}),
                               (2, "int64", {"reverse": 1}),
                               (-1, "int64", {"exclusive": 1, "reverse": 1}),
                               (-3, "int32", {})]
    ] + [OpSample([Arg("T[5]"), Arg("int64[]", values=-1)], opset=opset, name="1d",
                  dtypes=["float", "double", "int32"])]


def register(registry) -> None:
    """The ``tract`` plugin's decompositions (``register_decompositions``)."""
    for op_type, opsets in (("CumSum", CUMSUM_OPSETS), ("CumProd", CUMPROD_OPSETS)):
        registry.add("", op_type, build_axis_dispatch, opsets=opsets,
                     description=f"{op_type} per constant axis, chosen by Where "
                     "(an axis fed at run time)",
                     dtypes=("float", "double", "int32", "int64"), oracle="reference",
                     samples=samples(op_type, opsets[0] if op_type == "CumProd" else 14))
