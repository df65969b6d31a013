"""Reductions the runtimes lack in some form, written with other standard ops:

* ``CumProd(x, axis)`` (``exclusive``, ``reverse``): ``x`` viewed as ``(pre, n, post)``
  around the (run-time) axis; ``y[:, i] = prod_j x[:, j]`` over ``j <= i`` (``j < i``
  exclusive; ``j >= i`` / ``j > i`` reversed) as a ``ReduceProd`` of an ``(n, n)``
  triangular selection: exact, ``n^2`` memory.
* ``ReduceSum``, ``ReduceMean``, ``ReduceMax``, ``ReduceMin``, ``ReduceL1``, ``ReduceL2``,
  ``ReduceLogSum``, ``ReduceLogSumExp``, ``ReduceSumSquare`` with ``axes`` computed at run
  time and ``keepdims = 0`` (OpenVINO's CPU plugin compiles no dynamic rank): the
  ``keepdims = 1`` form written with other ops, then ``Reshape`` to the kept dimensions,
  a target shape of static length (exact for ``ReduceMax`` and ``ReduceMin``; the others
  sum in another order than the op's kernels).
"""

from __future__ import annotations

import numpy as np
from onnx import FunctionProto, TensorProto

from rewriter.plugin import Arg, Declined, OpSample, declining
from rewriter.plugin import present as _present

from .common import (
    DOMAIN,
    Body,
    attributes_known,
    body_opset,
    input_elem,
)

CUMPROD_OPSETS = (26, None)


# -- CumProd --------------------------------------------------------------------------------


@declining
def build_cumprod(ctx) -> FunctionProto | None:
    """``CumProd`` along a run-time axis, as a triangular ``ReduceProd``."""
    node = ctx.node
    if (len(node.input) != 2 or not all(_present(node.input, i) for i in range(2))
            or len(node.output) != 1 or not attributes_known(node, ["exclusive", "reverse"])):
        raise Declined("needs x and axis, one output, only exclusive and reverse")
    elem = input_elem(ctx, 0)
    if elem is None:
        raise Declined("the element type of x is unknown")
    exclusive, reverse = ctx.attribute("exclusive", 0), ctx.attribute("reverse", 0)
    b = Body(body_opset(ctx))
    shape = b.op("Shape", "x")
    rank = b.op("Size", shape)
    axis = b.scalar("axis")
    axis = b.op("Where", b.op("Less", axis, b.const(np.array(0, np.int64))),
                b.op("Add", axis, rank), axis)
    axis_1 = b.vector(axis)
    # (pre, n, post) around the axis; a leading 1 keeps the product of an empty prefix 1
    pre = b.reduce("ReduceProd", b.op("Concat", b.ints([1]), b.slice(shape, [0], axis_1, [0]),
                                      axis=0), [0])
    n = b.vector(b.shape_at(shape, axis))
    cube = b.reshape("x", b.op("Concat", pre, n, b.ints([-1]), axis=0))
    steps = b.op("Range", b.const(np.array(0, np.int64)), b.scalar(n),
                 b.const(np.array(1, np.int64)))
    rows, cols = b.unsqueeze(steps, [1]), b.unsqueeze(steps, [0])  # i, j
    compare = {(0, 0): "GreaterOrEqual", (1, 0): "Greater", (0, 1): "LessOrEqual",
               (1, 1): "Less"}[(exclusive, reverse)]  # keep j (vs i) where rows <op> cols
    keep = b.op(compare, rows, cols)
    keep = b.op("Reshape", keep, b.op("Concat", b.ints([1]), n, n, b.ints([1]), axis=0))
    one = b.const(np.array(1), elem, hint="one")
    selected = b.op("Where", keep, b.unsqueeze(cube, [1]), one)  # (pre, n, n, post)
    y = b.reduce("ReduceProd", selected, [2], keepdims=0)
    y = b.op("Reshape", y, shape)
    return b.function(DOMAIN, "cumprod", ["x", "axis"], [y])


# -- Reduce* with run-time axes, keepdims = 0 ---------------------------------------------

# Each keepdims = 1 form is written with other ops (the op never appears in its own body):
# ReduceSum as a sum per listed axis (CumSum, its last slice), ReduceMax and ReduceMin on each
# other, the rest on that sum. (The ops with a spec function body, ReduceL1 ... ReduceSumSquare,
# are expanded by onnx-functions first; this form is taken when that body's ReduceSum is
# refused, as OpenVINO refuses one over axes the caller feeds.)
REDUCE_AXES_OPS = ("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceL1",
                   "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare")
EXACT_REDUCE_AXES_OPS = ("ReduceMax", "ReduceMin")  # the others sum in another order


def _listed_axes(b: Body, rank: int) -> str:
    """A bool vector of ``rank``: whether each axis is listed in ``axes`` (negative ones
    counted from the end)."""
    axes = b.cast("axes", TensorProto.INT64)
    axes = b.op("Where", b.op("Less", axes, b.const(np.array(0, np.int64))),
                b.op("Add", axes, b.const(np.array(rank, np.int64))), axes)
    positions = b.const(np.arange(rank, dtype=np.int64).reshape(rank, 1))
    hits = b.cast(b.op("Equal", positions, b.reshape(axes, [1, -1])), TensorProto.INT64)
    return b.cast(b.reduce("ReduceMax", hits, [1], keepdims=0), TensorProto.BOOL)


def _sum_kept(b: Body, x: str, listed: str, rank: int) -> str:
    """The sum of ``x`` over the listed axes, keeping them as dimensions of 1: per axis, the
    last slice of its ``CumSum`` where listed, the values unchanged elsewhere (broadcast
    back), then every listed axis cut to its first slice."""
    last = b.const(np.iinfo(np.int64).max, np.int64)
    for axis in range(rank):
        running = b.op("CumSum", x, b.const(np.array(axis, np.int64)))
        total = b.op("Slice", running, b.ints([-1]), b.op("Reshape", last, b.ints([1])),
                     b.ints([axis]))
        x = b.op("Where", b.op("Gather", listed, b.const(np.array(axis, np.int64)), axis=0),
                 total, x)
    ends = b.op("Where", listed, b.const(np.ones(rank, np.int64)), b.op("Shape", x))
    return b.op("Slice", x, b.ints([0] * rank), ends, b.ints(list(range(rank))))


def _reduce_kept(b: Body, op_type: str, listed: str, rank: int) -> str:
    """``op_type`` of ``data`` over ``axes`` with ``keepdims = 1``, without ``op_type``."""
    def reduced(op: str, x: str) -> str:
        return _sum_kept(b, x, listed, rank) if op == "ReduceSum" else b.op(
            op, x, "axes", keepdims=1)

    if op_type == "ReduceSum":
        return reduced("ReduceSum", "data")
    if op_type in ("ReduceMax", "ReduceMin"):
        other = "ReduceMin" if op_type == "ReduceMax" else "ReduceMax"
        return b.op("Neg", reduced(other, b.op("Neg", "data")))
    if op_type == "ReduceMean":
        dims = b.op("Gather", b.op("Shape", "data"), b.cast("axes", TensorProto.INT64), axis=0)
        count = b.op("CastLike", b.reduce("ReduceProd", dims, [0], keepdims=0), "data")
        return b.op("Div", reduced("ReduceSum", "data"), count)
    if op_type == "ReduceL1":
        return reduced("ReduceSum", b.op("Abs", "data"))
    if op_type in ("ReduceL2", "ReduceSumSquare"):
        squares = reduced("ReduceSum", b.op("Mul", "data", "data"))
        return b.op("Sqrt", squares) if op_type == "ReduceL2" else squares
    if op_type == "ReduceLogSum":
        return b.op("Log", reduced("ReduceSum", "data"))
    # ReduceLogSumExp, as the reference evaluator computes it: the maximum taken out first
    top = reduced("ReduceMax", "data")
    return b.op("Add", b.op("Log", reduced("ReduceSum", b.op("Exp", b.op("Sub", "data", top)))),
                top)


@declining
def build_reduce_axes(ctx) -> FunctionProto | None:
    """A reduction over run-time ``axes`` with ``keepdims = 0``, whose output rank depends on
    ``axes``' values (OpenVINO's CPU plugin compiles no dynamic rank): the reduction with
    ``keepdims = 1`` (:func:`_reduce_kept`), then ``Reshape`` to the kept dimensions, picked
    with ``TopK`` so the target shape has a static length."""
    node = ctx.node
    if (len(node.input) != 2 or not _present(node.input, 1) or len(node.output) != 1
            or not attributes_known(node, ["keepdims", "noop_with_empty_axes"])):
        raise Declined("needs data and run-time axes, one output")
    if ctx.attribute("keepdims", 1) != 0:
        raise Declined("keepdims = 1 keeps the rank already")
    if ctx.constant(node.input[1]) is not None:
        raise Declined("constant axes: the op as it is")
    rank, axes_shape = ctx.rank(node.input[0]), ctx.shape(node.input[1])
    if rank is None or axes_shape is None or len(axes_shape) != 1 or not axes_shape[0]:
        raise Declined("needs data of a declared rank and axes of a declared non-zero length")
    count = axes_shape[0]
    if count > rank:
        raise Declined(f"{count} axes for rank {rank}")
    b = Body(body_opset(ctx))
    listed = _listed_axes(b, rank)
    kept = _reduce_kept(b, node.op_type, listed, rank)
    if count == rank:
        target = b.ints([])
    else:
        # kept axes score rank - i, listed ones 0: the rank - count largest, in order
        score = b.op("Mul", b.cast(b.op("Not", listed), TensorProto.INT64),
                     b.const(np.arange(rank, 0, -1, dtype=np.int64)))
        _, order = b.op("TopK", score, b.ints([rank - count]), outputs=2, largest=1,
                        sorted=1)
        target = b.op("Gather", b.op("Shape", kept), order, axis=0)
    y = b.op("Reshape", kept, target)
    return b.function(DOMAIN, f"{node.op_type}_axes", ["data", "axes"], [y])


def _spread(rng, shape):
    """Values around 1 (products stay moderate), some negative."""
    return (rng.uniform(0.5, 1.5, shape) * rng.choice([-1, 1], shape)).astype(np.float64)


def samples() -> dict[str, list[OpSample]]:
    """The samples of this module's ops, by op type."""
    return {
        "CumProd": [
            OpSample([Arg("T[5]", values=_spread), Arg("int64[]", values=0)], opset=26,
                     attributes=attrs, name=name, dtypes=["float", "double", "int32"])
            for name, attrs in [("plain", {}), ("exclusive", {"exclusive": 1}),
                                ("reverse", {"reverse": 1}),
                                ("reverse-exclusive", {"exclusive": 1, "reverse": 1})]] + [
            OpSample([Arg("T[2,3,4]", values=_spread), Arg(f"{t}[]", values=axis)], opset=26,
                     attributes=attrs, name=f"3d-axis{axis}", dtypes=["float", "int64"])
            for axis, t, attrs in [(1, "int32", {}), (-1, "int64", {"exclusive": 1}),
                                   (0, "int64", {"reverse": 1})]],
        **{op: [OpSample([Arg("T[3,4,5]", low=0.5, high=2.0),
                          Arg(f"int64[{len(axes)}]", values=axes)],
                         attributes={"keepdims": 0}, opset=opset, name=name,
                         dtypes=["float"], tolerance=(1e-5, 1e-5))
                for axes, opset, name in [([0, -1], opset_of, "two"), ([1], opset_of, "one"),
                                          ([2, 0, 1], 18, "all")]]
           for op in REDUCE_AXES_OPS
           for opset_of in [13 if op == "ReduceSum" else 18]},
    }
