"""Decompositions ``onnx-standard``: standard ops a runtime lacks for some element types or
versions, written with other standard ops where the result is the same bit for bit.

* ``BitCast(x, to)`` from ``bool`` to ``uint8`` or ``int8``: a ``bool`` element is stored as
  one byte holding 0 or 1, so reinterpreting it is ``Cast`` (onnxruntime 1.32 has BitCast-26
  but not for ``bool``). Other pairs are declined: reinterpreting bits of other types is no
  arithmetic ``Cast``.
* ``DequantizeLinear(x, x_scale[, x_zero_point])`` at opsets 10-18 (the reference evaluator
  of onnx 1.23 implements it from version 19 only): ``y = (Cast(x) - Cast(x_zero_point)) *
  x_scale`` in float, exact for the 8-bit and int32 inputs of these versions (int32 has no
  zero point other than 0); from 13 a 1-D scale (and zero point) applies along ``axis``
  (default 1), reshaped to ``[C, 1, ...]`` so that it broadcasts there (the count of 1s from
  the input's rank at run time, for a non-negative ``axis``).
"""

from __future__ import annotations

import numpy as np
from onnx import FunctionProto, TensorProto, helper

from rewriter import hookimpl
from rewriter.bodies import FunctionBuilder
from rewriter.bodies import present as _present
from rewriter.registry import Arg, OpSample

BITCAST_OPSETS = (26, None)  # BitCast is new in opset 26
DEQUANTIZE_OPSETS = (10, 18)  # the reference evaluator has DequantizeLinear from 19
DEQUANTIZE_AXIS = 13  # per-axis scales from opset 13
_BOOL_BITCASTS = {TensorProto.UINT8, TensorProto.INT8}


def build_bitcast(ctx) -> FunctionProto | None:
    """``Cast`` for a bitcast of ``bool`` to a one-byte integer type."""
    to = ctx.attribute("to")
    if list(ctx.input_types or [])[:1] != ["tensor(bool)"] or to not in _BOOL_BITCASTS:
        return None
    if len(ctx.node.attribute) != 1 or len(ctx.node.output) != 1:
        return None
    return helper.make_function(
        "onnx-standard", "bitcast_bool", ["x"], ["y"],
        [helper.make_node("Cast", ["x"], ["y"], to=to)],
        [helper.make_opsetid("", ctx.opset)])


def build_dequantize_linear(ctx) -> FunctionProto | None:
    """``DequantizeLinear``-10/13 as ``(Cast(x) - Cast(zero_point)) * scale``."""
    node = ctx.node
    if (len(node.input) > 3 or not (_present(node.input, 0) and _present(node.input, 1))
            or len(node.output) != 1 or any(a.name != "axis" for a in node.attribute)):
        return None
    types = list(ctx.input_types or [])
    if types[:1] not in (["tensor(int8)"], ["tensor(uint8)"], ["tensor(int32)"]):
        return None
    b = FunctionBuilder(ctx.opset, TensorProto.FLOAT)
    has_zp = _present(node.input, 2)
    scale, zero_point = "x_scale", "x_zero_point" if has_zp else ""
    constant_scale = ctx.constant(node.input[1])
    if ctx.opset >= DEQUANTIZE_AXIS and (constant_scale is None or constant_scale.ndim):
        axis = ctx.attribute("axis", 1)
        if axis < 0:
            trailing = b.ints([1] * (-axis - 1))
        else:  # 1s for the axes behind ``axis``: rank - axis - 1 of them (0 for a scalar)
            rank = b.op("Size", b.op("Shape", "x"))
            count = b.op("Max", b.op("Sub", rank, b.ints([axis + 1])), b.ints([0]))
            trailing = b.fill(count, 1, np.int64)
        shape = b.op("Concat", b.ints([-1]), trailing, axis=0)
        scale = b.op("Reshape", scale, shape)
        zero_point = b.op("Reshape", zero_point, shape) if has_zp else ""
    x = b.cast("x", TensorProto.FLOAT)
    if zero_point:
        x = b.op("Sub", x, b.cast(zero_point, TensorProto.FLOAT))
    y = b.op("Mul", x, scale)
    inputs = ["x", "x_scale", "x_zero_point"][:len(node.input)]
    return b.function("onnx-standard", "dequantize_linear", inputs, [y])


def _dequantize_samples() -> list[OpSample]:
    samples = []
    for opset, x_type, axis, per_axis, zp in [
            (10, "uint8", None, False, True), (10, "int8", None, False, False),
            (10, "int32", None, False, True), (13, "uint8", None, False, True),
            (13, "int8", 1, True, True), (13, "uint8", 0, True, True),
            (13, "int8", -1, True, False), (17, "int32", -2, True, True),
            (13, "uint8", None, True, True), (17, "int8", 2, True, True),
            (18, "uint8", 1, None, True)]:  # None: a scalar scale the builder cannot read
        low, high = {"uint8": (0, 256), "int8": (-128, 128), "int32": (-5000, 5000)}[x_type]
        shape = [2, 3, 4]
        channels = shape[axis if axis is not None else 1] if per_axis else None
        spec = f"[{channels}]" if per_axis else "[]"
        zero_point = (Arg(f"int32{spec}", values=np.zeros(channels or (), np.int32),
                          constant=True) if x_type == "int32" else
                      Arg(f"{x_type}{spec}", low=low, high=high, constant=True))
        inputs = [Arg(f"{x_type}[2,3,4]", low=low, high=high),
                  Arg(f"float{spec}", low=0.01, high=0.2, constant=per_axis is False),
                  zero_point if zp else None]
        while inputs[-1] is None:
            inputs.pop()
        samples.append(OpSample(inputs, ["float"], {} if axis is None else {"axis": axis},
                                opset=opset, name=f"{x_type}-axis{axis}"
                                + ("-per-axis" if per_axis else "")))
    return samples


@hookimpl
def register_decompositions(registry):
    registry.add("", "DequantizeLinear", build_dequantize_linear, opsets=DEQUANTIZE_OPSETS,
                 dtypes=("float",),
                 description="onnx-standard:DequantizeLinear (versions 10 and 13, in Cast/Sub/"
                             "Mul)",
                 oracle="onnxruntime", samples=_dequantize_samples())
    registry.add("", "BitCast", build_bitcast, opsets=BITCAST_OPSETS, dtypes=("bool",),
                 description="onnx-standard:BitCast (bool to uint8/int8 as Cast)",
                 oracle="reference",  # the reference evaluator's own BitCast (numpy view)
                 samples=[OpSample(["T[2,3]"], [name], {"to": to}, name=name)
                          for name, to in (("uint8", TensorProto.UINT8),
                                           ("int8", TensorProto.INT8))])
