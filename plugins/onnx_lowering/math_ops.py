"""Arithmetic and linear algebra the runtimes lack in some form:

* ``Mod(A, B)`` with ``fmod = 0`` on floats (allowed from opset 28): the result takes the
  divisor's sign, as ``numpy.mod``: ``r = A - B * trunc(A / B)`` (``A`` itself for a finite
  ``A`` and an infinite ``B``), plus ``B`` where ``r`` is non-zero with the other sign;
  NaN for an infinite ``A`` or a zero ``B``.
* ``Det(X)``: Gaussian elimination with partial pivoting, unrolled for the static ``n`` of
  ``X``'s last two axes (declared or constant; ``n <= 16``); a singular matrix gives 0.
* ``TopK`` of uint64 (onnxruntime has no kernel): ``TopK`` of int64 keys in the same
  order (``BitwiseXor`` of the bits as int64 with the sign bit), values gathered from ``X``.
  ``Pow`` with a uint64 exponent: ``Pow(X, int64(Y))`` below 2^63 (exact), else
  ``Pow(X, double(Y))``, as numpy and the reference evaluator compute every exponent.
"""

from __future__ import annotations

import numpy as np
from onnx import FunctionProto, TensorProto

from rewriter.plugin import Arg, Declined, OpSample, declining

from .common import (
    DOMAIN,
    Body,
    attributes_known,
    body_opset,
    float_elem,
    input_elem,
)

MAX_DET_SIZE = 16
MOD_OPSETS = (28, None)  # fmod = 0 on floats is valid from Mod-28
DET_OPSETS = (13, None)  # Unsqueeze/Squeeze/Slice in their input forms


# -- Mod with fmod = 0 on floats ------------------------------------------------------------


@declining
def build_float_mod(ctx) -> FunctionProto | None:
    """``numpy.mod`` of floats: the result takes the divisor's sign."""
    node = ctx.node
    elem = float_elem(ctx, 0)
    if (elem is None or ctx.attribute("fmod", 0) != 0 or len(node.input) != 2
            or len(node.output) != 1 or not attributes_known(node, ["fmod"])):
        raise Declined("needs A and B of a known float type, fmod=0, one output")
    b = Body(body_opset(ctx))
    zero = b.const(np.array(0.0), elem, hint="zero")
    quotient = b.op("Div", "A", "B")
    truncated = b.op("Where", b.op("Less", quotient, zero), b.op("Ceil", quotient),
                     b.op("Floor", quotient))
    r = b.op("Sub", "A", b.op("Mul", "B", truncated))
    # a finite A over an infinite B: A itself (B * 0 would be NaN)
    finite_a = b.op("Not", b.op("Or", b.op("IsInf", "A"), b.op("IsNaN", "A")))
    r = b.op("Where", b.op("And", b.op("IsInf", "B"), finite_a), "A", r)
    # then the divisor's sign
    other_sign = b.op("Xor", b.op("Less", r, zero), b.op("Less", "B", zero))
    nonzero = b.op("Not", b.op("Equal", r, zero))
    r = b.op("Where", b.op("And", nonzero, other_sign), b.op("Add", r, "B"), r)
    signed_zero = b.op("Where", b.op("Less", "B", zero), b.op("Neg", zero), zero)
    r = b.op("Where", b.op("Equal", r, zero), signed_zero, r)
    return b.function(DOMAIN, "float_mod", ["A", "B"], [r])


# -- Det ------------------------------------------------------------------------------------


@declining
def build_det(ctx) -> FunctionProto | None:
    """``Det`` by Gaussian elimination with partial pivoting, unrolled for a static n."""
    node = ctx.node
    elem = float_elem(ctx, 0)
    shape = ctx.shape(node.input[0]) if node.input else None
    if (elem is None or len(node.input) != 1 or len(node.output) != 1 or node.attribute
            or shape is None or len(shape) < 2):
        raise Declined("needs one input of a known float type with a declared shape of rank 2 or "
                       "more, no attributes, one output")
    n = shape[-1] if shape[-1] == shape[-2] else None
    if not n or n > MAX_DET_SIZE:
        raise Declined(f"the matrices must be declared square, at most {MAX_DET_SIZE} wide")
    b = Body(body_opset(ctx))
    zero = b.const(np.array(0.0), elem, hint="zero")
    a = "X"
    batch = b.slice(b.op("Shape", a), [0], [-2], [0])
    sign = b.fill(b.op("Concat", batch, b.ints([1, 1]), axis=0), 1.0, elem)  # (..., 1, 1)
    rows = b.op("Range", b.const(np.array(0, np.int64)), b.const(np.array(n, np.int64)),
                b.const(np.array(1, np.int64)))
    for k in range(n - 1):
        column = b.slice(a, [k, k], [n, k + 1], [-2, -1])                # (..., n-k, 1)
        pivot_row = b.op("Add", b.op("ArgMax", b.op("Abs", column), axis=-2, keepdims=1),
                         b.const(np.array(k, np.int64)))                 # (..., 1, 1)
        k_const = b.const(np.array(k, np.int64))
        row_index = b.op("Reshape", rows, b.ints([n, 1]))
        swapped = b.op("Where", b.op("Equal", row_index, k_const), pivot_row,
                       b.op("Where", b.op("Equal", row_index, pivot_row), k_const, row_index))
        a = b.op("GatherElements", a, b.op("Expand", swapped, b.op("Shape", a)), axis=-2)
        sign = b.op("Where", b.op("Equal", pivot_row, k_const), sign, b.op("Neg", sign))
        pivot = b.slice(a, [k, k], [k + 1, k + 1], [-2, -1])             # (..., 1, 1)
        below = b.slice(a, [k + 1, k], [n, k + 1], [-2, -1])             # (..., n-k-1, 1)
        factors = b.op("Where", b.op("Equal", pivot, zero), zero, b.op("Div", below, pivot))
        top = b.slice(a, [0], [k + 1], [-2])
        pivot_row_values = b.slice(a, [k], [k + 1], [-2])
        rest = b.op("Sub", b.slice(a, [k + 1], [n], [-2]),
                    b.op("Mul", factors, pivot_row_values))
        a = b.op("Concat", top, rest, axis=-2)
    det = sign
    for k in range(n):
        det = b.op("Mul", det, b.slice(a, [k, k], [k + 1, k + 1], [-2, -1]))
    det = b.squeeze(det, [-2, -1])
    return b.function(DOMAIN, "det", ["X"], [det])


# -- uint64: TopK, a Pow exponent (onnxruntime) ---------------------------------------------

_SIGN_BIT = np.int64(np.iinfo(np.int64).min)
_TWO_TO_63 = np.uint64(2**63)


@declining
def build_topk_uint64(ctx) -> FunctionProto | None:
    """``TopK`` of uint64 values: ``TopK`` of int64 keys in the same order (the bits read as
    int64 with the sign bit flipped), the values gathered from ``X`` at its indices."""
    node = ctx.node
    if (input_elem(ctx, 0) != TensorProto.UINT64 or len(node.input) != 2 or len(node.output) != 2
            or not all(node.output) or not attributes_known(node, ["axis", "largest", "sorted"])):
        raise Declined("needs uint64 X and K, both outputs, only axis / largest / sorted")
    b = Body(body_opset(ctx))
    keys = b.op("BitwiseXor", b.cast("X", TensorProto.INT64), b.const(_SIGN_BIT))
    attributes = {a.name: a.i for a in node.attribute}
    _, indices = b.op("TopK", keys, "K", outputs=2, **attributes)
    values = b.op("GatherElements", "X", indices, axis=attributes.get("axis", -1))
    return b.function(DOMAIN, "topk_uint64", ["X", "K"], [values, indices])


@declining
def build_pow_uint64_exponent(ctx) -> FunctionProto | None:
    """``Pow(X, Y)`` with a uint64 ``Y``: ``Pow(X, int64(Y))`` below 2^63 (exact), else
    ``Pow(X, double(Y))`` (as numpy and the reference evaluator compute every exponent)."""
    node = ctx.node
    if (input_elem(ctx, 1) != TensorProto.UINT64 or float_elem(ctx, 0) is None
            or len(node.input) != 2 or len(node.output) != 1 or node.attribute):
        raise Declined("needs X of a known float type and a uint64 Y, one output")
    b = Body(body_opset(ctx))
    exact = b.op("Pow", "X", b.cast("Y", TensorProto.INT64))
    rounded = b.op("Pow", "X", b.cast("Y", TensorProto.DOUBLE))
    y = b.op("Where", b.op("Less", "Y", b.const(_TWO_TO_63, np.uint64)), exact, rounded)
    return b.function(DOMAIN, "pow_uint64_exponent", ["X", "Y"], [y])


# uint64 values on both sides of 2^63, ties included
_UINT64_VALUES = np.array([0, 2**64 - 1, 2**63, 2**63 - 1, 1, 7, 2**63 + 5, 7, 2**40, 3,
                           2**64 - 2, 2**63 - 1, 9, 0, 2**62], np.uint64)


def samples() -> dict[str, list[OpSample]]:
    """The samples of this module's ops, by op type."""
    mod_values = dict(values=[-4.3, 7.2, 5.0, 4.3, -7.2, 8.0, 0.0, -0.0, -3.0, 3.0, -1.0, 1.0,
                              np.inf, 1.0, np.nan])
    mod_divisors = dict(values=[2.1, -3.4, 8.0, -2.1, 3.4, 5.0, -2.0, 2.0, np.inf, np.inf,
                                -np.inf, -np.inf, 2.0, 0.0, 2.0])
    return {
        "Mod": [OpSample([Arg("T[15]", **mod_values), Arg("T[15]", **mod_divisors)],
                         attributes={"fmod": 0}, opset=28, dtypes=["float", "double"]),
                OpSample(["T[3,4]", Arg("T[4]", low=0.5, high=3.0)], attributes={"fmod": 0},
                         opset=28, name="broadcast", dtypes=["float16", "float"])],
        "Det": [OpSample([f"T[{shape}]"], opset=opset, name=name, dtypes=["float", "double"])
                for shape, opset, name in [("2,2", 22, "2x2"), ("3,3,3", 22, "batched-3x3"),
                                           ("2,2,4,4", 13, "4x4"), ("1,1", 22, "1x1")]] + [
            OpSample([Arg("T[2,3,3]", values=[[[1, 2, 3], [2, 4, 6], [0, 1, 1]],
                                               [[0, 2, 1], [1, 0, 0], [3, 1, 2]]])],
                     opset=22, name="singular-and-zero-pivot", dtypes=["float"])],
        "TopK": [
            OpSample([Arg("T[3,5]", values=_UINT64_VALUES[:15].reshape(3, 5)),
                      Arg("int64[1]", values=[3])], ["T", "int64"], attributes=attrs,
                     opset=24, name=name, dtypes=["uint64"])
            for attrs, name in [({"axis": 1}, "largest"), ({"axis": 0, "largest": 0}, "smallest"),
                                ({"axis": -1, "sorted": 1}, "sorted")]],
        "Pow": [OpSample([Arg("float[2,4]", values=[[0.5, 1.0, -1.0, 1.5], [2.0, -1.0, 0.9, 1.0]]),
                          Arg("T[2,4]", values=[[3, 2**63 + 1, 2**64 - 1, 0],
                                                [5, 2**63, 2**64 - 2, 7]])],
                         ["float"], opset=15, dtypes=["uint64"])],
    }
