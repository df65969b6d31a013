"""``BitShift`` with its out-of-range shifts made explicit (part of the ``onnx-standard``
plugin, which registers it).

The spec (opset 28, signed types included): a shift ``Y`` that is negative or not below the
width of ``T`` gives what the sign extension alone makes: ``-1`` for a right shift of a
negative signed ``X``, else ``0``. tract 0.23 and OpenVINO 2026.4 run such shifts as the
CPU's shift instruction does (the count taken modulo the width), a ``computes-differently``
finding; the body shifts only by in-range counts and selects the spec's fill elsewhere:
``Where(0 <= Y < width, BitShift(X, Where(valid, Y, 0)), fill)``.

From opset 18 (the bitwise ops) the in-range shifts of 8- and 16-bit types and of int32
are written without ``BitShift``: OpenVINO 2026.4 computes a shift in floating point
(uint8 ``95 >> 1`` gave 48, int32 values lose their low bits past 2^24, ``-1 >> 1`` gave 0,
int8 ``64 << 1`` saturated to 127), and its 8-bit products saturate, while its int32
products and bitwise ops are exact (measured on every value pair of each type). A left
shift is an int32 product by ``2^Y`` (wrapping), cut to the type's low bits; a right shift
of a negative signed ``X`` is ``~(~X >> Y)`` (``~X`` is not negative), and a right shift of
a non-negative value a quotient ``(v - (v & (2^Y - 1))) / 2^Y`` of 16-bit halves, exact
however a runtime divides. uint32 and 64-bit types keep ``BitShift`` (OpenVINO holds
them in int32). Checked against the reference evaluator's own BitShift (numpy, written from the
spec)."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper

from rewriter.plugin import Arg, Declined, FunctionBuilder, OpSample

T = TensorProto
_WIDTHS = {T.UINT8: 8, T.UINT16: 16, T.UINT32: 32, T.UINT64: 64,
           T.INT8: 8, T.INT16: 16, T.INT32: 32, T.INT64: 64}
_SIGNED = {T.INT8, T.INT16, T.INT32, T.INT64}


def build_bitshift(ctx):
    """The body above, for a node whose ``X`` element type is known."""
    types = list(ctx.input_types or [])
    name = types[0][7:-1] if types and types[0] and types[0].startswith("tensor(") else None
    elem = getattr(T, name.upper(), None) if name else None
    if elem not in _WIDTHS or len(ctx.node.input) != 2:
        raise Declined("needs X of a known integer type and Y")
    if ctx.opset < 12:
        raise Declined("needs GreaterOrEqual (opset 12)")
    direction = ctx.attribute("direction", b"")
    direction = direction.decode() if isinstance(direction, bytes) else direction
    if direction not in ("LEFT", "RIGHT"):
        raise Declined(f"direction {direction!r} is neither LEFT nor RIGHT")
    dtype = helper.tensor_dtype_to_np_dtype(elem)
    b = FunctionBuilder(ctx.opset)

    def const(value):
        return b.const(np.array(value, dtype), elem)

    valid = b.op("Less", "y", const(_WIDTHS[elem]))
    if elem in _SIGNED:
        valid = b.op("And", valid, b.op("GreaterOrEqual", "y", const(0)))
    safe = b.op("Where", valid, "y", const(0))
    if ctx.opset >= 18:
        shifted = _exact_shift(b, const, elem, "x", safe, direction)
    else:
        shifted = b.op("BitShift", "x", safe, direction=direction)
    fill = const(0)
    if direction == "RIGHT" and elem in _SIGNED:
        fill = b.op("Where", b.op("Less", "x", const(0)), const(-1), fill)
    z = b.op("Where", valid, shifted, fill)
    return b.function("onnx_standard", "BitShift", ["x", "y"], [z])


def _exact_shift(b, const, elem, x, y, direction: str) -> str:
    """``BitShift(x, y)`` for ``0 <= y < width`` of an 8-, 16- or 32-bit signed or 8- or
    16-bit unsigned ``x``, in int32 products, bitwise ops and exact quotients (see the
    module's docstring); other types keep the op."""
    width, signed = _WIDTHS[elem], elem in _SIGNED
    if width == 64 or (width == 32 and not signed):
        return b.op("BitShift", x, y, direction=direction)
    i32 = T.INT32

    def c32(value):
        return b.const(np.array(value, np.int32), i32)

    # 2^k for k < 32 as int32 (2^31 wraps to its bits: a product by it keeps the low bits)
    powers = b.const(np.array([1 << k for k in range(32)], np.uint32).view(np.int32), i32)
    y32 = b.op("Cast", y, to=i32) if elem != i32 else y
    if direction == "LEFT":
        x32 = b.op("Cast", x, to=i32) if elem != i32 else x
        product = b.op("Mul", x32, b.op("Gather", powers, y32))  # int32: wraps exactly
        if width == 32:
            return product
        low = b.op("BitwiseAnd", product, c32((1 << width) - 1))
        if signed:  # the low bits as a two's complement value of the type, then exact
            low = b.op("Where", b.op("GreaterOrEqual", low, c32(1 << (width - 1))),
                       b.op("Sub", low, c32(1 << width)), low)
        return b.op("Cast", low, to=elem)

    def halfword_right(v, k):
        """v >> k for 0 <= v < 2^16 and 0 <= k < 32: a quotient of an exact multiple,
        whatever the runtime divides in."""
        k = b.op("Min", k, c32(16))
        step = b.op("Gather", powers, k)
        kept = b.op("Sub", v, b.op("BitwiseAnd", v, b.op("Sub", step, c32(1))))
        return b.op("Div", kept, step)

    def ones_where(condition):
        """-1 (every bit set) where ``condition``, else 0, in int32 (or the type's)."""
        flag = b.op("Cast", condition, to=i32)
        ones = b.op("Mul", flag, c32(-1))
        return ones if elem == i32 else b.op("Cast", ones, to=elem)

    # a negative signed x: ~(~x >> y), ~x not negative; ~v as v ^ -1, and the selections
    # below bitwise (on OpenVINO a Where between int32 results of this body gave rounded
    # values, measured; the bitwise forms are exact)
    flip = ones_where(b.op("Less", x, const(0))) if signed else None
    v = b.op("BitwiseXor", x, flip) if signed else x
    v32 = b.op("Cast", v, to=i32) if elem != i32 else v
    if width < 32:
        shifted = halfword_right(v32, y32)
    else:  # 0 <= v < 2^31 in halves of 16 bits
        lo = b.op("BitwiseAnd", v32, c32(0xFFFF))
        hi = b.op("Div", b.op("BitwiseAnd", v32, c32(0x7FFF0000)), c32(1 << 16))
        small = b.op("Less", y32, c32(16))
        # y < 16: (hi >> y) << 16 | (hi's low y bits) << (16 - y) | lo >> y
        mask = b.op("Sub", b.op("Gather", powers, b.op("Min", y32, c32(16))), c32(1))
        carry = b.op("Mul", b.op("BitwiseAnd", hi, mask),
                     b.op("Gather", powers, b.op("Max", b.op("Sub", c32(16), y32), c32(0))))
        # (disjoint bits: an Or, which no runtime computes in floating point)
        below = b.op("BitwiseOr", b.op("BitwiseOr", b.op(
            "Mul", halfword_right(hi, y32), c32(1 << 16)), carry), halfword_right(lo, y32))
        # y >= 16: hi >> (y - 16)
        above = halfword_right(hi, b.op("Max", b.op("Sub", y32, c32(16)), c32(0)))
        pick = ones_where(small)
        shifted = b.op("BitwiseOr", b.op("BitwiseAnd", below, pick),
                       b.op("BitwiseAnd", above, b.op("BitwiseNot", pick)))
    shifted = b.op("Cast", shifted, to=elem) if elem != i32 else shifted
    return b.op("BitwiseXor", shifted, flip) if signed else shifted


def bitshift_samples() -> list[OpSample]:
    """Both directions, signed and unsigned, with negative and too-wide shifts."""
    samples = []
    for kind, width in (("int8", 8), ("int32", 32), ("uint8", 8), ("uint16", 16)):
        info = np.iinfo(kind)
        xs = [info.min, -1 if info.min < 0 else 1, 0, 5, info.max, 3]
        ys = [-1 if info.min < 0 else 0, width, width + 3, 1, 2, width - 1]
        # in-range shifts of negative values and overflowing left shifts
        xs += [-8 if info.min < 0 else 200, -1 if info.min < 0 else 7,
               info.max // 2 + 1, 1, info.min, info.max]
        ys += [1, 1, 1, width - 1, 1, 3]
        for direction in ("LEFT", "RIGHT"):
            samples.append(OpSample(
                [Arg(f"{kind}[12]", values=xs), Arg(f"{kind}[12]", values=ys)],
                [kind], {"direction": direction}, opset=28, dtypes=[kind],
                name=f"{kind}-{direction.lower()}-out-of-range"))
    return samples
