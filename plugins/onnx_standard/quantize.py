"""``DequantizeLinear`` (versions 10-18, and from 19 where OpenVINO computes it otherwise)
and ``QuantizeLinear`` (16-bit from 21; 8-bit where OpenVINO computes it otherwise) in
Cast/Sub/Mul and Div/Round/Clip arithmetic, per tensor or per axis."""

from __future__ import annotations

import numpy as np
from onnx import FunctionProto, TensorProto, helper

from rewriter.plugin import Arg, Declined, FunctionBuilder, OpSample
from rewriter.plugin import present as _present

DEQUANTIZE_OPSETS = (10, 18)  # the reference evaluator has DequantizeLinear from 19
QDQ_16BIT_OPSETS = (21, None)  # int16/uint16 Q/DQ from 21 (OpenVINO computes them otherwise)
QUANTIZE_OPSETS = (11, None)  # Round from 11: 8-bit where OpenVINO needs it, 16-bit from 21
DEQUANTIZE_LATER_OPSETS = (19, None)
DEQUANTIZE_AXIS = 13  # per-axis scales from opset 13

T = TensorProto

_DEQUANTIZED = {"tensor(int8)", "tensor(uint8)", "tensor(int32)"}
_SIXTEEN_BITS = {"tensor(int16)": T.INT16, "tensor(uint16)": T.UINT16}


def _along_axis(b: FunctionBuilder, value: str, axis: int, x: str) -> str:
    """A 1-D (or scalar) scale or zero point reshaped to ``[-1, 1, ...]`` so that it
    broadcasts along ``axis`` of ``x``: as many 1s as axes behind ``axis`` (from ``x``'s
    rank at run time for a non-negative ``axis``). A scalar becomes ``[1, ...]``."""
    if axis < 0:
        trailing = b.ints([1] * (-axis - 1))
    else:  # 1s for the axes behind ``axis``: rank - axis - 1 of them (0 for a scalar)
        rank = b.op("Size", b.op("Shape", x))
        count = b.op("Max", b.op("Sub", rank, b.ints([axis + 1])), b.ints([0]))
        trailing = b.fill(count, 1, np.int64)
    return b.op("Reshape", value, b.op("Concat", b.ints([-1]), trailing, axis=0))


def _qdq_checked(ctx, quantize: bool) -> None:
    """Decline what the Cast/Sub/Mul forms below do not cover."""
    node = ctx.node
    if (len(node.input) > 3 or not (_present(node.input, 0) and _present(node.input, 1))
            or len(node.output) != 1
            or any(a.name not in (("axis", "saturate", "output_dtype") if quantize else ("axis",))
                   for a in node.attribute) or ctx.attribute("saturate", 1) != 1):
        raise Declined("needs x and scale (zero point optional), axis only (no block_size), one "
                       "output")
    types = list(ctx.input_types or []) + [None] * 3
    if types[1] != "tensor(float)" or (quantize and types[0] != "tensor(float)"):
        raise Declined("needs a float scale" + (" and float x" if quantize else ""))


def build_dequantize_linear(ctx) -> FunctionProto | None:
    """``DequantizeLinear`` as ``(Cast(x) - Cast(zero_point)) * scale``: versions 10-18
    (8-bit and int32 ``x``), and from 19 (no blocks; 16-bit ``x`` from 21) where OpenVINO
    computes it otherwise (see ``openvino_target``): per tensor or per axis."""
    node = ctx.node
    _qdq_checked(ctx, quantize=False)
    x_type = (ctx.input_types or [None])[0]
    if ctx.opset >= 19 and x_type not in _SIXTEEN_BITS and ctx.ceiling is not None:
        raise Declined("8-bit x from opset 19 under an opset ceiling: the opset-conversion pass "
                       "keeps it a DequantizeLinear")
    if x_type not in _DEQUANTIZED and x_type not in _SIXTEEN_BITS:
        raise Declined("x must be int8, uint8, int32, or int16/uint16 (opset 21)")
    b = FunctionBuilder(ctx.opset, TensorProto.FLOAT)
    has_zp = _present(node.input, 2)
    scale, zero_point = "x_scale", "x_zero_point" if has_zp else ""
    constant_scale = ctx.constant(node.input[1])
    if ctx.opset >= DEQUANTIZE_AXIS and (constant_scale is None or constant_scale.ndim):
        axis = ctx.attribute("axis", 1)
        scale = _along_axis(b, scale, axis, "x")
        zero_point = _along_axis(b, zero_point, axis, "x") if has_zp else ""
    # the difference in int32, then float (both exact), not Cast(float) -> Sub -> Mul: the
    # form OpenVINO's low-precision transformations take for a dequantization (and fold into
    # arithmetic of their own; measured: a quantized ResNet's QLinearAdd body, 3 units off)
    x = b.cast("x", TensorProto.INT32)
    if zero_point:
        x = b.op("Sub", x, b.cast(zero_point, TensorProto.INT32))
    x = b.cast(x, TensorProto.FLOAT)
    y = b.op("Mul", x, scale)
    inputs = ["x", "x_scale", "x_zero_point"][:len(node.input)]
    return b.function("onnx-standard", "dequantize_linear", inputs, [y])


_QUANTIZED = {"tensor(int8)": T.INT8, "tensor(uint8)": T.UINT8, **_SIXTEEN_BITS}


def build_quantize_linear(ctx) -> FunctionProto | None:
    """``QuantizeLinear`` to int16/uint16 (version 21) or int8/uint8 (where OpenVINO
    computes it otherwise: a decomposition body's, see ``openvino_target``), per tensor or
    per axis, no blocks, as ``Cast(Clip(Round(x / scale) + zero_point))`` in float
    (``Round`` rounds half to even, as onnxruntime's kernel; the integers are floats
    exactly)."""
    node = ctx.node
    _qdq_checked(ctx, quantize=True)
    types = list(ctx.input_types or []) + [None] * 3
    out_type = (_QUANTIZED.get(types[2]) if _present(node.input, 2)
                else ctx.attribute("output_dtype", 0) or T.UINT8)
    if out_type not in (T.INT16, T.UINT16, T.INT8, T.UINT8):
        raise Declined("only 8-bit and 16-bit integer outputs (the runtimes' own kernels take "
                       "the rest)")
    if out_type in (T.INT8, T.UINT8) and ctx.ceiling is not None:
        raise Declined("8-bit under an opset ceiling: the opset-conversion pass keeps it a "
                       "QuantizeLinear")
    b = FunctionBuilder(ctx.opset, TensorProto.FLOAT)
    has_zp = _present(node.input, 2)
    scale, zero_point = "y_scale", "y_zero_point" if has_zp else ""
    constant_scale = ctx.constant(node.input[1])
    if constant_scale is None or constant_scale.ndim:
        axis = ctx.attribute("axis", 1)
        scale = _along_axis(b, scale, axis, "x")
        zero_point = _along_axis(b, zero_point, axis, "x") if has_zp else ""
    q = b.op("Round", b.op("Div", "x", scale))
    if zero_point:
        q = b.op("Add", q, b.cast(zero_point, TensorProto.FLOAT))
    info = np.iinfo(helper.tensor_dtype_to_np_dtype(out_type))
    q = b.op("Max", b.op("Min", q, b.const(np.array(info.max, np.float32))),
             b.const(np.array(info.min, np.float32)))
    y = b.cast(q, out_type)
    inputs = ["x", "y_scale", "y_zero_point"][:len(node.input)]
    return b.function("onnx-standard", "quantize_linear", inputs, [y])


def dequantize_samples() -> list[OpSample]:
    """DequantizeLinear-10 to 18: per tensor and per axis, 8-bit and int32 x."""
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


def qdq_16bit_samples(op_type: str) -> list[OpSample]:
    """16-bit samples at opset 21: per tensor, per axis (0, 1, -1), with and without a zero
    point, the scale constant or fed; QuantizeLinear also on exact ties (half to even) and
    past the type's range (saturation)."""
    samples = []
    for x_type, axis, per_axis, zp in [
            ("uint16", None, False, True), ("int16", None, False, False),
            ("uint16", 1, True, True), ("int16", 0, True, True), ("int16", -1, True, True),
            ("uint16", 1, None, True), ("uint16", -1, True, False)]:
        info = np.iinfo(x_type)
        channels = [2, 3, 4][axis] if per_axis else None
        spec = f"[{channels}]" if per_axis else "[]"
        zero_point = Arg(f"{x_type}{spec}", low=info.min, high=info.max + 1, constant=True)
        scale_low, scale_high = (0.01, 0.2) if op_type == "DequantizeLinear" else (1e-4, 1e-3)
        scale = Arg(f"float{spec}", low=scale_low, high=scale_high, constant=per_axis is False)
        if op_type == "DequantizeLinear":
            x, outputs = Arg(f"{x_type}[2,3,4]", low=info.min, high=info.max + 1), ["float"]
        else:
            x, outputs = Arg("float[2,3,4]", low=-40, high=40), [x_type]
        inputs = [x, scale, zero_point if zp else None]
        while inputs[-1] is None:
            inputs.pop()
        attributes = {} if axis is None else {"axis": axis}
        if not zp and op_type == "QuantizeLinear":
            attributes["output_dtype"] = getattr(T, x_type.upper())
        samples.append(OpSample(inputs, outputs, attributes, opset=21, tolerance=(1e-6, 0),
                                name=f"{x_type}-axis{axis}" + ("-per-axis" if per_axis else "")
                                + ("" if zp else "-no-zero-point")))
    if op_type == "DequantizeLinear":  # 8-bit from 19 (where OpenVINO needs it)
        samples += [OpSample([Arg("uint8[2,3,4]", low=0, high=256),
                              Arg("float[3]", low=0.01, high=0.2, constant=True),
                              Arg("uint8[3]", low=0, high=256, constant=True)], ["float"],
                             {"axis": 1}, opset=21, tolerance=(1e-6, 0), name="uint8-axis1"),
                    OpSample([Arg("int8[2,3,4]", low=-128, high=128),
                              Arg("float[]", values=0.05, constant=True)], ["float"],
                             opset=19, tolerance=(1e-6, 0), name="int8-per-tensor")]
    if op_type == "QuantizeLinear":
        ties = np.array([0.25, 0.75, -0.25, -0.75, 1.25, 2.5, -1.25, 7.75], np.float32)
        for x_type, zp in (("uint16", 1000), ("int16", -3)):
            samples.append(OpSample(
                [Arg("float[8]", values=ties), Arg("float[]", values=0.5, constant=True),
                 Arg(f"{x_type}[]", values=zp, constant=True)], [x_type], opset=21,
                name=f"{x_type}-ties"))
        # 8-bit (where OpenVINO needs it): per tensor, per axis, ties, saturation
        samples += [
            OpSample([Arg("float[2,3,4]", low=-3, high=3), Arg("float[]", values=0.02,
                                                                constant=True),
                      Arg("uint8[]", values=128, constant=True)], ["uint8"], opset=13,
                     tolerance=(0, 0), name="uint8-per-tensor"),
            OpSample([Arg("float[2,3,4]", low=-3, high=3), Arg("float[3]", low=0.01, high=0.03,
                                                                constant=True),
                      Arg("int8[3]", low=-5, high=5, constant=True)], ["int8"], {"axis": 1},
                     opset=17, tolerance=(0, 0), name="int8-axis1-per-axis"),
            OpSample([Arg("float[8]", values=ties), Arg("float[]", values=0.5, constant=True),
                      Arg("int8[]", values=-3, constant=True)], ["int8"], opset=13,
                     tolerance=(0, 0), name="int8-ties"),
            OpSample([Arg("float[2,3,4]", low=-3, high=3), Arg("float[]", values=0.01,
                                                                constant=True)],
                     ["uint8"], opset=13, tolerance=(0, 0),
                     name="uint8-no-zero-point-saturating")]
    return samples
