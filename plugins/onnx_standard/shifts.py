"""``BitShift`` with its out-of-range shifts made explicit (part of the ``onnx-standard``
plugin, which registers it).

The spec (opset 28, signed types included): a shift ``Y`` that is negative or not below the
width of ``T`` gives what the sign extension alone makes: ``-1`` for a right shift of a
negative signed ``X``, else ``0``. tract 0.23 and OpenVINO 2026.4 run such shifts as the
CPU's shift instruction does (the count taken modulo the width), a ``computes-differently``
finding; the body shifts only by in-range counts and selects the spec's fill elsewhere:
``Where(0 <= Y < width, BitShift(X, Where(valid, Y, 0)), fill)``. Checked against the
reference evaluator's own BitShift (numpy, written from the spec)."""

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
    shifted = b.op("BitShift", "x", safe, direction=direction)
    fill = const(0)
    if direction == "RIGHT" and elem in _SIGNED:
        fill = b.op("Where", b.op("Less", "x", const(0)), const(-1), fill)
    z = b.op("Where", valid, shifted, fill)
    return b.function("onnx_standard", "BitShift", ["x", "y"], [z])


def bitshift_samples() -> list[OpSample]:
    """Both directions, signed and unsigned, with negative and too-wide shifts."""
    samples = []
    for kind, width in (("int8", 8), ("int32", 32), ("uint8", 8), ("uint16", 16)):
        info = np.iinfo(kind)
        xs = [info.min, -1 if info.min < 0 else 1, 0, 5, info.max, 3]
        ys = [-1 if info.min < 0 else 0, width, width + 3, 1, 2, width - 1]
        for direction in ("LEFT", "RIGHT"):
            samples.append(OpSample(
                [Arg(f"{kind}[6]", values=xs), Arg(f"{kind}[6]", values=ys)],
                [kind], {"direction": direction}, opset=28, dtypes=[kind],
                name=f"{kind}-{direction.lower()}-out-of-range"))
    return samples
