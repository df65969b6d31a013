"""``QLinearSoftmax`` with onnxruntime's arithmetic:

* ``QLinearSoftmax(X, X_scale[, X_zp], y_scale[, y_zp])`` (``axis``, ``opset``): not
  ``DQ -> Softmax -> Q``: onnxruntime's kernel (``qlinear_softmax.cc``) ignores ``X_zp``,
  computes ``e = float(exp_double((x - max + shift) * X_scale))`` with ``shift =
  max(0, ln(FLT_MAX / D) - 5) / X_scale`` (``D`` the reduced size), sums ``e`` in float and
  gives ``nearbyint(e * floor(1 / y_scale) / sum) + y_zp``, saturated above (255, or 127
  for int8 as onnxruntime 1.32 does: found by the oracle check; older sources wrap); the body
  computes exactly that: from the kernel's own 256-entry table (``Gather`` by ``x - max +
  255``) where ``X_scale`` is a constant and the reduced size known, else in the graph
  (double). ``opset`` below 13 reduces over every axis from ``axis`` (Softmax-1).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from onnx import FunctionProto, TensorProto

from rewriter.plugin import Arg, Declined, OpSample, declining
from rewriter.plugin import present as _present

from ..common import unknown_attributes
from .common import (
    RANGES,
    ROUND,
    TYPES,
    UNARY,
    QBody,
    finish,
    needs_inputs,
    q_arg,
    qtype,
    scale_arg,
    zp_arg,
)

_FLT_MAX = float(np.finfo(np.float32).max)
_RESERVE = 5.0  # onnxruntime's reserve_bit for a float lookup table


def _softmax_shift(size: int, x_scale: np.float32) -> float:
    """The kernel's shift: ``max(0, log(FLT_MAX / D) - 5) / X_scale`` (the division and the
    log in float, the rest in double)."""
    bits = float(np.log(np.float32(_FLT_MAX) / np.float32(size)))
    return max(0.0, bits - _RESERVE) / float(x_scale)


def _exp_table(ctx, rank: int | None, axes: Sequence[int]) -> np.ndarray | None:
    """``float(exp((d + shift) * X_scale))`` for ``d = -255 .. 0`` in double, as onnxruntime
    builds its lookup table, where ``X_scale`` is a constant and the reduced size is known;
    exact on a runtime that computes double in float32 (OpenVINO). Else None."""
    x_scale = ctx.constant(ctx.node.input[1])
    shape = ctx.shape(ctx.node.input[0])
    if x_scale is None or x_scale.size != 1 or shape is None or rank is None:
        return None
    dims = [shape[a % rank] for a in axes]
    if any(not isinstance(d, int) or d <= 0 for d in dims):
        return None
    scale = np.float32(x_scale.reshape(()))
    shift = _softmax_shift(int(np.prod(dims)), scale)
    steps = np.arange(-255, 1, dtype=np.float64)
    return np.exp((steps + shift) * np.float64(scale)).astype(np.float32)


def _exp_body(b: QBody, ctx, shifted: str, rank: int | None, axes: Sequence[int]) -> str:
    """The table's values computed in the graph (``X_scale`` an input, or the reduced size
    known at run time only): ``shifted`` (double) to float ``exp((shifted + shift) *
    X_scale)``."""
    size = b.op("ReduceProd", b.op("Gather", b.op("Shape", "X"), b.ints(
        [a % rank for a in axes] if rank else axes)), keepdims=0)
    # log(FLT_MAX / D) in float (the kernel's log of a float), the rest in double
    bits = b.op("Log", b.op("Div", b.literal(_FLT_MAX), b.cast(size, TensorProto.FLOAT)))
    bits = b.op("Sub", b.cast(bits, TensorProto.DOUBLE),
                b.literal(_RESERVE, elem_type=TensorProto.DOUBLE))
    x_scale = b.cast(b.scalar(ctx, 1, "X_scale"), TensorProto.DOUBLE)
    shift = b.op("Div", b.op("Max", bits, b.literal(0.0, elem_type=TensorProto.DOUBLE)),
                 x_scale)
    e = b.op("Exp", b.op("Mul", b.op("Add", shifted, shift), x_scale))
    return b.cast(e, TensorProto.FLOAT)


@declining
def build_qlinear_softmax(ctx) -> FunctionProto:
    """onnxruntime's ``QLinearSoftmax`` arithmetic (see the module docstring)."""
    node = ctx.node
    needs_inputs(node, (0, 1, 3), 5, "X, X_scale and y_scale")
    opset = ctx.attribute("opset")
    if unknown_attributes(node, ("axis", "opset")) or opset is None:
        raise Declined("needs opset; takes axis")
    if ctx.opset < ROUND:
        raise Declined("the body needs Round (opset 11)")
    elem = qtype(ctx, 0)
    axis = ctx.attribute("axis", 1 if opset < 13 else -1)
    rank = ctx.rank(node.input[0])
    if rank is None and (opset < 13 or axis >= 0):
        raise Declined("the reduced axes need X's rank")
    axes = [axis] if opset >= 13 else list(range(axis % rank, rank))
    b = QBody(ctx.opset, TensorProto.FLOAT)
    # x - max in float (exact): OpenVINO 2026.4's CPU plugin gives a wrong int32 x -
    # ReduceMax(x) over a non-last axis (measured: off by up to 255)
    x = b.cast("X", TensorProto.FLOAT)
    shifted = b.op("Sub", x, b.reduce_max(x, axes))  # -255 .. 0
    table = _exp_table(ctx, rank, axes)
    if table is not None:  # the kernel's own table, built as it builds it
        index = b.cast(b.op("Add", shifted, b.literal(255.0)), TensorProto.INT32)
        e = b.op("Gather", b.const(table), index)
    else:
        e = _exp_body(b, ctx, b.cast(shifted, TensorProto.DOUBLE), rank, axes)
    total = b.reduce_sum(e, axes, keepdims=1)
    times = b.op("Floor", b.op("Div", b.literal(1.0), b.scalar(ctx, 3, "Y_scale")))
    y = b.op("Round", b.op("Div", b.op("Mul", e, times), total))
    y = b.cast(y, TensorProto.INT32)
    if _present(node.input, 4):
        y = b.op("Add", y, b.cast(b.scalar(ctx, 4, "Y_zero_point"), TensorProto.INT32))
    y = b.op("Min", y, b.const(np.array(RANGES[elem][1], np.int32)))  # saturated above
    return finish(b, node, UNARY, b.cast(y, elem), "qlinear_softmax")


def softmax_samples() -> list[OpSample]:
    samples = []
    for elem in TYPES:
        for opset_attribute, axis, shape, y_zp in (
                (13, -1, "[2,3,16]", None), (13, 1, "[2,3,16]", None), (12, 1, "[2,3,4]", None),
                (12, 2, "[2,3,8]", None), (13, -1, "[2,300]", None), (13, -1, "[2,3,16]", 5)):
            shifted = y_zp is not None
            y_zp = y_zp if shifted else -128 if elem == "int8" else 0
            for x_scale in (0.05, 0.3):
                samples.append(OpSample(
                    [q_arg(elem, shape), scale_arg(x_scale), zp_arg(elem),
                     scale_arg(1.0 / 256), zp_arg(elem, y_zp)], [elem],
                    {"axis": axis, "opset": opset_attribute}, opset=17,
                    name=f"{elem}-softmax{opset_attribute}-axis{axis}-{shape}-x{x_scale:g}"
                         f"{f'-y-zp{y_zp}' if shifted else ''}"))
        # X_scale a graph input: the exponentials computed in the graph, not tabulated
        samples.append(OpSample(
            [q_arg(elem, "[2,3,16]"), Arg("float[]", values=np.float32(0.11)), zp_arg(elem),
             scale_arg(1.0 / 256), zp_arg(elem, -128 if elem == "int8" else 0)], [elem],
            {"axis": 1, "opset": 13}, opset=17, name=f"{elem}-x-scale-input"))
    return samples
