"""Products of QOperator ops as ``DequantizeLinear`` -> the float op -> ``QuantizeLinear``:

* ``QLinearConv`` (ai.onnx and com.microsoft, whose ``channels_last`` 1 takes NHWC ``x``)
  ``(x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp[, B])``: ``Conv(DQ(x), DQ(w, axis 0),
  DQ(B, x_scale * w_scale, axis 0))``, ``w`` per tensor or per output channel.
* ``QLinearMatMul`` (ai.onnx) ``(a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp)``:
  ``MatMul(DQ(a), DQ(b))``, ``b`` per tensor or per column (last axis).
* ``QGemm(A, a_scale, a_zp, B, b_scale, b_zp[, C][, y_scale, y_zp])`` (``alpha``,
  ``transA``, ``transB``): ``Gemm(DQ(A, alpha * a_scale), DQ(B), C * alpha * a_scale * b_scale)``
  (onnxruntime adds the int32 ``C`` to the accumulator before scaling by ``alpha * a_scale *
  b_scale``; alpha rides on A's scale so that C stays on the product's grid),
  quantized with ``y_scale``/``y_zp``, or float without them; ``B`` per column.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from onnx import FunctionProto, TensorProto

from rewriter.plugin import Arg, Declined, OpSample, declining
from rewriter.plugin import present as _present

from ..common import unknown_attributes
from .common import (
    DOMAIN,
    LIMITS,
    QDQ_AXIS,
    QBody,
    channels_first,
    channels_last,
    dq_input,
    finish,
    float_body,
    needs_inputs,
    q_arg,
    q_output,
    qtype,
    scale_arg,
    zp_arg,
)

_CONV = ["x", "x_scale", "x_zero_point", "w", "w_scale", "w_zero_point", "y_scale",
         "y_zero_point", "B"]
_CONV_ATTRIBUTES = ("auto_pad", "dilations", "group", "kernel_shape", "pads", "strides")


def _per_channel(b: QBody, ctx, index: int, formal: str, channels_axis: int,
                 rank: int | None) -> tuple[str, int | None]:
    """A weight's scale or zero point: per tensor (a scalar, axis None) or a vector along
    ``channels_axis``."""
    shape = ctx.shape(ctx.node.input[index])
    if shape is not None and (shape == [] or shape == [1]):
        return b.scalar(ctx, index, formal), None
    if shape is None or len(shape) != 1:
        raise Declined(f"{formal} must be a scalar or a vector (its shape is not known)")
    return formal, channels_axis if channels_axis >= 0 or rank is None else channels_axis % rank


def _dq_weight(b: QBody, ctx, index: int, formal: Sequence[str], elem: int, axis: int,
               rank: int | None) -> tuple[str, str, int | None]:
    """The weight at ``index`` dequantized (per tensor or per ``axis``), and its scale."""
    scale, scale_axis = _per_channel(b, ctx, index + 1, formal[index + 1], axis, rank)
    zp = ""
    if _present(ctx.node.input, index + 2):
        zp, zp_axis = _per_channel(b, ctx, index + 2, formal[index + 2], axis, rank)
        if zp_axis is not None and scale_axis is None:
            raise Declined(f"{formal[index + 2]} per channel beside a per-tensor scale")
        if zp_axis != scale_axis:  # a scalar zero point beside per-channel scales
            zp = b.op("Expand", zp, b.op("Shape", scale))
    return b.dequantize(formal[index], scale, zp, elem, scale_axis, rank), scale, scale_axis


@declining
def build_qlinear_conv(ctx) -> FunctionProto:
    node = ctx.node
    needs_inputs(node, range(8), 9, "x, w, their scales and zero points, y_scale and y_zero_point")
    contrib = node.domain == DOMAIN
    if unknown_attributes(node, (*_CONV_ATTRIBUTES, *(("channels_last",) if contrib else ()))):
        raise Declined("takes Conv's attributes (and channels_last)")
    x_elem, w_elem = qtype(ctx, 0, 7), qtype(ctx, 3, 5)
    kernel_shape = ctx.attribute("kernel_shape")
    w_rank = ctx.rank(node.input[3]) or (len(kernel_shape) + 2 if kernel_shape else None)
    b = float_body(ctx)
    x = dq_input(b, ctx, 0, _CONV, x_elem)
    last = contrib and ctx.attribute("channels_last", 0)
    if last:
        if w_rank is None:
            raise Declined("channels_last needs the weight's rank")
        x = channels_first(b, x, w_rank)
    w, w_scale, axis = _dq_weight(b, ctx, 3, _CONV, w_elem, 0, w_rank)
    if axis is not None and ctx.opset < QDQ_AXIS:
        # a float weight between DequantizeLinear and QuantizeLinear: onnxruntime's basic
        # optimizer (1.32) quantizes it again per tensor, and its bias with Round below 11
        raise Declined("per-channel weights below opset 13 (no DequantizeLinear per axis)")
    inputs = [x, w]
    if _present(node.input, 8):  # int32, scale x_scale * w_scale, zero point 0
        bias_scale = b.op("Mul", b.scalar(ctx, 1, "x_scale"), w_scale)
        inputs.append(b.dequantize("B", bias_scale, "", TensorProto.INT32,
                                   0 if axis is not None else None, 1))
    y = b.op("Conv", *inputs, **{k: ctx.attribute(k) for k in _CONV_ATTRIBUTES})
    if last:
        y = channels_last(b, y, w_rank)
    return finish(b, node, _CONV, q_output(b, ctx, y, 6, _CONV, x_elem), "qlinear_conv")


_MATMUL = ["a", "a_scale", "a_zero_point", "b", "b_scale", "b_zero_point", "y_scale",
           "y_zero_point"]


@declining
def build_qlinear_matmul(ctx) -> FunctionProto:
    node = ctx.node
    needs_inputs(node, range(8), 8, "every input")
    if node.attribute:
        raise Declined("takes no attributes")
    a_elem, b_elem = qtype(ctx, 0, 2), qtype(ctx, 3, 5)
    y_elem = qtype(ctx, 7)
    body = float_body(ctx)
    a = dq_input(body, ctx, 0, _MATMUL, a_elem)  # onnxruntime: a per tensor only
    rank = ctx.rank(node.input[3])
    weight, _, _ = _dq_weight(body, ctx, 3, _MATMUL, b_elem, -1, rank)
    y = body.op("MatMul", a, weight)
    return finish(body, node, _MATMUL, q_output(body, ctx, y, 6, _MATMUL, y_elem),
                   "qlinear_matmul")


_QGEMM = ["A", "a_scale", "a_zero_point", "B", "b_scale", "b_zero_point", "C", "y_scale",
          "y_zero_point"]


@declining
def build_qgemm(ctx) -> FunctionProto:
    node = ctx.node
    needs_inputs(node, range(6), 9, "A, B, their scales and zero points")
    quantized = _present(node.input, 7)
    if quantized != _present(node.input, 8):
        raise Declined("y_scale and y_zero_point go together (float output without both)")
    if unknown_attributes(node, ("alpha", "transA", "transB")):
        raise Declined("takes only alpha, transA and transB")
    a_elem, b_elem = qtype(ctx, 0, 2), qtype(ctx, 3, 5)
    alpha, trans_b = float(ctx.attribute("alpha", 1.0)), ctx.attribute("transB", 0)
    body = float_body(ctx)
    # alpha folded into A's scale: the bias C (int32) is then on the grid of the product's
    # scale (alpha * a_scale * b_scale), as QDQ bias is (onnxruntime's optimizer quantizes
    # a float Gemm bias to that grid: C * alpha off it would be rounded)
    a_scale = body.scalar(ctx, 1, "a_scale")
    if alpha != 1.0:
        a_scale = body.op("Mul", body.literal(alpha), a_scale)
    a_zp = body.scalar(ctx, 2, "a_zero_point") if _present(node.input, 2) else ""
    a = body.dequantize("A", a_scale, a_zp, a_elem)
    # per column: axis 1 of B (K, N), axis 0 of B transposed (N, K)
    weight, b_scale, _ = _dq_weight(body, ctx, 3, _QGEMM, b_elem, 0 if trans_b else 1, 2)
    inputs = [a, weight]
    if _present(node.input, 6):  # int32, scale alpha * a_scale * b_scale, zero point 0
        inputs.append(body.op("Mul", body.cast("C", TensorProto.FLOAT),
                              body.op("Mul", a_scale, b_scale)))
    y = body.op("Gemm", *inputs, alpha=1.0, beta=1.0, transA=ctx.attribute("transA", 0),
                transB=trans_b)
    if quantized:
        y = q_output(body, ctx, y, 7, _QGEMM, qtype(ctx, 8))
    return finish(body, node, _QGEMM, y, "qgemm")


def _weight_quantization(elem: str, count: int, per_channel: bool) -> tuple[Arg, Arg]:
    """A weight's scale and zero point: per tensor, or per channel (``count``; onnxruntime
    takes one zero point repeated: its kernels read a per-channel weight zero point as one)."""
    if not per_channel:
        return Arg("float[]", values=np.float32(0.0123), constant=True), zp_arg(elem, 1)
    return (Arg(f"float[{count}]", low=0.004, high=0.02, constant=True),
            Arg(f"{elem}[{count}]", values=np.full(count, 1), constant=True))


def conv_samples() -> list[OpSample]:
    cases = [("plain", {}, "[1,4,7,7]", "[6,4,3,3]"),
             ("strided-padded", {"strides": [2, 2], "pads": [1, 0, 1, 2]}, "[2,4,7,7]",
              "[6,4,3,3]"),
             ("dilated", {"dilations": [2, 2], "pads": [2, 1, 2, 1]}, "[1,4,7,7]",
              "[6,4,3,3]"),
             ("same-upper", {"auto_pad": "SAME_UPPER", "strides": [2, 2]}, "[1,4,7,7]",
              "[6,4,3,3]"),
             ("grouped", {"group": 2, "pads": [1, 1, 1, 1]}, "[1,4,6,6]", "[6,2,3,3]"),
             ("depthwise", {"group": 4}, "[1,4,6,6]", "[4,1,3,3]"),
             ("1d", {"strides": [2]}, "[2,4,9]", "[6,4,3]")]
    samples = []
    for x_elem, w_elem in (("uint8", "uint8"), ("uint8", "int8"), ("int8", "int8")):
        for per_channel in (False, True):
            for bias in (False, True):
                for case, attrs, x_shape, w_shape in cases:
                    out = int(w_shape.strip("[]").split(",")[0])
                    w_scale, w_zp = _weight_quantization(w_elem, out, per_channel)
                    inputs = [q_arg(x_elem, x_shape), scale_arg(0.0217), zp_arg(x_elem),
                              Arg(f"{w_elem}{w_shape}", low=LIMITS[w_elem][0],
                                  high=LIMITS[w_elem][1], constant=True),
                              w_scale, w_zp, scale_arg(0.0787), zp_arg(x_elem, 5)]
                    if bias:
                        inputs.append(Arg(f"int32[{out}]", low=-3000, high=3000,
                                          constant=True))
                    kind = "per-channel" if per_channel else "per-tensor"
                    for opset in (10, 13) if case == "plain" and not per_channel else (13,):
                        samples.append(OpSample(
                            inputs, [x_elem], attrs, opset=opset,
                            name=f"{x_elem}-{w_elem}-{kind}{'-bias' if bias else ''}-{case}"))
    return samples


def nhwc_conv_samples() -> list[OpSample]:
    """com.microsoft's ``QLinearConv`` with ``channels_last`` 1 (onnxruntime's NHWC
    transformer writes it): ``x`` NHWC, ``w`` OIHW."""
    samples = []
    for x_elem, w_elem in (("uint8", "uint8"), ("uint8", "int8"), ("int8", "int8")):
        for per_channel in (False, True):
            w_scale, w_zp = _weight_quantization(w_elem, 6, per_channel)
            for attrs in ({}, {"strides": [2, 2], "pads": [1, 1, 1, 1], "group": 2}):
                w_shape = "[6,2,3,3]" if attrs else "[6,4,3,3]"
                samples.append(OpSample(
                    [q_arg(x_elem, "[1,7,7,4]"), scale_arg(0.0217), zp_arg(x_elem),
                     Arg(f"{w_elem}{w_shape}", low=LIMITS[w_elem][0],
                         high=LIMITS[w_elem][1], constant=True),
                     w_scale, w_zp, scale_arg(0.0787), zp_arg(x_elem, 5),
                     Arg("int32[6]", low=-3000, high=3000, constant=True)],
                    [x_elem], {"channels_last": 1, **attrs}, opset=13,
                    name=f"{x_elem}-{w_elem}-{'per-channel' if per_channel else 'per-tensor'}"
                         f"{'-grouped' if attrs else ''}"))
    return samples


def matmul_samples() -> list[OpSample]:
    samples = []
    for a_elem, b_elem in (("uint8", "uint8"), ("uint8", "int8"), ("int8", "int8")):
        for per_column in (False, True):
            b_scale, b_zp = _weight_quantization(b_elem, 5, per_column)
            for a_shape in ("[3,16]", "[2,3,16]"):
                kind = "per-column" if per_column else "per-tensor"
                for opset in (10, 13):
                    samples.append(OpSample(
                        [q_arg(a_elem, a_shape), scale_arg(0.0217), zp_arg(a_elem),
                         Arg(f"{b_elem}[16,5]", low=LIMITS[b_elem][0],
                             high=LIMITS[b_elem][1], constant=True),
                         b_scale, b_zp, scale_arg(0.0413), zp_arg(a_elem, 5)],
                        [a_elem], opset=opset,
                        name=f"{a_elem}-{b_elem}-{kind}-{len(a_shape.split(','))}d"))
    return samples


def qgemm_samples() -> list[OpSample]:
    samples = []
    for a_elem, b_elem in (("uint8", "uint8"), ("uint8", "int8"), ("int8", "int8")):
        for per_column in (False, True):
            for trans_a, trans_b in ((0, 0), (1, 1)):
                for bias, quantized, alpha in ((False, True, 1.0), (True, True, 0.5),
                                               (True, False, 1.0), (False, False, 2.0)):
                    b_scale, b_zp = _weight_quantization(b_elem, 5, per_column)
                    a_shape, b_shape = ("[16,3]" if trans_a else "[3,16]",
                                        "[5,16]" if trans_b else "[16,5]")
                    inputs = [q_arg(a_elem, a_shape), scale_arg(0.0217), zp_arg(a_elem),
                              Arg(f"{b_elem}{b_shape}", low=LIMITS[b_elem][0],
                                  high=LIMITS[b_elem][1], constant=True),
                              b_scale, b_zp,
                              Arg("int32[5]", low=-3000, high=3000, constant=True)
                              if bias else None]
                    if quantized:
                        inputs += [scale_arg(0.0413), zp_arg(a_elem, 5)]
                    while inputs[-1] is None:
                        inputs.pop()
                    attrs = {"alpha": alpha, "transA": trans_a, "transB": trans_b}
                    samples.append(OpSample(
                        inputs, [a_elem if quantized else "float"], attrs, opset=13,
                        tolerance=(1e-5, 1e-5),
                        name=f"{a_elem}-{b_elem}-{'per-column' if per_column else 'per-tensor'}"
                             f"-t{trans_a}{trans_b}{'-bias' if bias else ''}"
                             f"-{'quantized' if quantized else 'float'}-alpha{alpha:g}"))
    return samples
