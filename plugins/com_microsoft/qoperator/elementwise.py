"""Elementwise QOperator ops as ``DequantizeLinear`` -> the float op -> ``QuantizeLinear``:

* ``QLinearAdd``, ``QLinearMul`` ``(A, A_scale[, A_zp], B, B_scale[, B_zp], C_scale[,
  C_zp])``, ``QLinearSigmoid``, ``QLinearLeakyRelu`` (``alpha`` 0.01), ``QLinearWhere``:
  the float op; zero points default to 0.
* ``QLinearConcat(Y_scale, Y_zp, (X, X_scale, X_zp)...)`` (``axis``).
"""

from __future__ import annotations

from collections.abc import Sequence

from onnx import FunctionProto

from rewriter.plugin import Arg, Declined, OpSample, declining
from rewriter.plugin import present as _present

from ..common import unknown_attributes
from .common import (
    TYPES,
    UNARY,
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

_BINARY = ["A", "A_scale", "A_zero_point", "B", "B_scale", "B_zero_point", "C_scale",
           "C_zero_point"]


def _binary(op_type: str):
    @declining
    def build(ctx) -> FunctionProto:
        node = ctx.node
        needs_inputs(node, (0, 1, 3, 4, 6), 8, "A, B and their scales, C_scale")
        if node.attribute:
            raise Declined("takes no attributes")
        elem = qtype(ctx, 0, 3)
        b = float_body(ctx)
        y = b.op(op_type, dq_input(b, ctx, 0, _BINARY, elem),
                 dq_input(b, ctx, 3, _BINARY, elem))
        return finish(b, node, _BINARY, q_output(b, ctx, y, 6, _BINARY, elem),
                       f"qlinear_{op_type.lower()}")

    build.__name__ = f"build_qlinear_{op_type.lower()}"
    return build


build_qlinear_add = _binary("Add")
build_qlinear_mul = _binary("Mul")


def _unary(op_type: str, attributes: Sequence[str] = ()):
    @declining
    def build(ctx) -> FunctionProto:
        node = ctx.node
        needs_inputs(node, (0, 1, 3), 5, "X, X_scale and Y_scale")
        if unknown_attributes(node, attributes):
            raise Declined(f"takes only {', '.join(attributes) or 'no attributes'}")
        elem = qtype(ctx, 0)
        b = float_body(ctx)
        x = dq_input(b, ctx, 0, UNARY, elem)
        y = (b.op(op_type, x, alpha=float(ctx.attribute("alpha", 0.01)))
             if op_type == "LeakyRelu" else b.op(op_type, x))
        return finish(b, node, UNARY, q_output(b, ctx, y, 3, UNARY, elem),
                       f"qlinear_{op_type.lower()}")

    build.__name__ = f"build_qlinear_{op_type.lower()}"
    return build


build_qlinear_sigmoid = _unary("Sigmoid")
build_qlinear_leaky_relu = _unary("LeakyRelu", ["alpha"])

_WHERE = ["condition", "X", "x_scale", "x_zero_point", "Y", "y_scale", "y_zero_point",
          "z_scale", "z_zero_point"]


@declining
def build_qlinear_where(ctx) -> FunctionProto:
    node = ctx.node
    needs_inputs(node, range(9), 9, "every input")
    if node.attribute:
        raise Declined("takes no attributes")
    elem = qtype(ctx, 1, 4)
    b = float_body(ctx)
    y = b.op("Where", "condition", dq_input(b, ctx, 1, _WHERE, elem),
             dq_input(b, ctx, 4, _WHERE, elem))
    return finish(b, node, _WHERE, q_output(b, ctx, y, 7, _WHERE, elem), "qlinear_where",
                   output="Z")


@declining
def build_qlinear_concat(ctx) -> FunctionProto:
    node = ctx.node
    count = len(node.input) - 2
    if (count < 3 or count % 3 or not all(_present(node.input, i) for i in range(len(
            node.input))) or len(node.output) != 1 or unknown_attributes(node, ("axis",))
            or ctx.attribute("axis") is None):
        raise Declined("needs Y_scale, Y_zero_point and (X, X_scale, X_zero_point) triples, "
                       "axis; one output")
    formal = ["Y_scale", "Y_zero_point"]
    for k in range(count // 3):
        formal += [f"X{k}", f"X{k}_scale", f"X{k}_zero_point"]
    elem = qtype(ctx, 1, *range(2, len(node.input), 3))
    b = float_body(ctx)
    parts = [dq_input(b, ctx, i, formal, elem) for i in range(2, len(formal), 3)]
    y = b.op("Concat", *parts, axis=ctx.attribute("axis"))
    y = b.quantize(y, b.scalar(ctx, 0, "Y_scale"), b.scalar(ctx, 1, "Y_zero_point"), elem)
    return finish(b, node, formal, y, "qlinear_concat")


def binary_samples() -> list[OpSample]:
    """Zero points given (onnxruntime 1.32's type inference refuses the op without them)."""
    samples = []
    for elem in TYPES:
        for case, a_shape, b_shape in (("same-shape", "[2,3,4]", "[2,3,4]"),
                                       ("broadcast", "[2,3,4]", "[4]"),
                                       ("scalar", "[2,3,4]", "[]"),
                                       ("broadcast-both", "[2,1,4]", "[1,3,1]")):
            inputs = [q_arg(elem, a_shape), scale_arg(0.0313), zp_arg(elem), q_arg(elem, b_shape),
                      scale_arg(0.0471), zp_arg(elem, 7), scale_arg(0.0593),
                      zp_arg(elem, -1 if elem == "int8" else 100)]
            for opset in (10, 17) if case == "same-shape" else (17,):
                samples.append(OpSample(inputs, [elem], opset=opset, name=f"{elem}-{case}"))
    return samples


def unary_samples(attributes: Sequence[dict] = ({},)) -> list[OpSample]:
    """Zero points given (onnxruntime 1.32's lookup-table kernels abort without them)."""
    samples = []
    for elem in TYPES:
        for attrs in attributes:
            label = "-".join(f"{k}{v:g}" for k, v in attrs.items())
            samples.append(OpSample(
                [q_arg(elem, "[2,3,16]"), scale_arg(0.0513), zp_arg(elem), scale_arg(0.00437),
                 zp_arg(elem, 10)], [elem], attrs, opset=17,
                name=f"{elem}{'-' + label if label else ''}"))
    return samples


def where_samples() -> list[OpSample]:
    return [OpSample([Arg("bool[2,3,4]"), q_arg(elem, "[2,3,4]"), scale_arg(0.0307),
                      zp_arg(elem), q_arg(elem, shape), scale_arg(0.0519), zp_arg(elem, 7),
                      scale_arg(0.0411), zp_arg(elem, 2)], [elem], opset=17,
                     name=f"{elem}-{'broadcast' if shape != '[2,3,4]' else 'same-shape'}")
            for elem in TYPES for shape in ("[2,3,4]", "[4]")]


def concat_samples() -> list[OpSample]:
    samples = []
    for elem in TYPES:
        for axis, count in ((1, 2), (-1, 3), (0, 1)):
            inputs = [scale_arg(0.05), zp_arg(elem, 6)]
            for k in range(count):
                inputs += [q_arg(elem, "[2,3,4]"), scale_arg(0.05 if k == 0 else 0.03 + 0.02 * k),
                           zp_arg(elem, 6 if k == 0 else k)]
            samples.append(OpSample(inputs, [elem], {"axis": axis}, opset=17,
                                    name=f"{elem}-axis{axis}-{count}-inputs"))
    return samples
