"""``MMCVDeformConv2d`` and ``MMCVModulatedDeformConv2d``: ``DeformConv`` from ai.onnx 19,
a Gather of the sampled columns and a MatMul for opsets 11-18."""

from __future__ import annotations

import numpy as np
from onnx import FunctionProto, TensorProto, helper

from rewriter.plugin import Declined
from rewriter.plugin import present as _present

from .common import (
    BODY_DOMAIN,
    DEFORM_CONV_OPSETS,
    Body,
    is_float,
    make_function,
    node_attributes,
)

DEFORM_ALIASES = {
    "stride": "stride", "padding": "padding", "dilation": "dilation",
    "groups": "groups", "group": "groups",
    "deform_groups": "deform_groups", "deformable_groups": "deform_groups",
    "deformable_group": "deform_groups", "im2col_step": None,
}


def _deform_conv_attrs(node) -> dict | None:
    """DeformConv attributes from an mmcv node's, or None for forms it cannot express."""
    given: dict = {}
    for name, value in node_attributes(node).items():
        if name not in DEFORM_ALIASES:
            return None
        canonical = DEFORM_ALIASES[name]
        if canonical is not None:
            given[canonical] = value
    pairs = {}
    for name in ("stride", "padding", "dilation"):
        value = list(given.get(name, [0, 0] if name == "padding" else [1, 1]))
        if len(value) == 1:
            value = value * 2
        if len(value) != 2:
            return None
        pairs[name] = value
    groups, deform_groups = given.get("groups", 1), given.get("deform_groups", 1)
    if groups > 1 and deform_groups > 1:
        return None
    return dict(strides=pairs["stride"], pads=pairs["padding"] * 2,
                dilations=pairs["dilation"], group=groups, offset_group=deform_groups)


def build_deform_conv(ctx) -> FunctionProto | None:
    """MMCVDeformConv2d(input, offset, weight) -> DeformConv(input, weight, offset)."""
    node = ctx.node
    attrs = _deform_conv_attrs(node)
    if attrs is None or not is_float(ctx) or len(node.output) != 1:
        raise Declined("attributes DeformConv cannot express, inputs not float, or more than one "
                       "output")
    if len(node.input) != 3 or not all(node.input):
        raise Declined("needs input, offset and weight, none left empty")
    body = [helper.make_node("DeformConv", ["input", "weight", "offset"], ["output"],
                             **attrs)]
    return make_function("mmcv_deform_conv", ["input", "offset", "weight"], ["output"], body,
                     max(ctx.opset, DEFORM_CONV_OPSETS[0]))


def build_modulated_deform_conv(ctx) -> FunctionProto | None:
    """MMCVModulatedDeformConv2d(input, offset, mask, weight[, bias]) -> DeformConv(input,
    weight, offset, bias, mask)."""
    node = ctx.node
    attrs = _deform_conv_attrs(node)
    if attrs is None or not is_float(ctx) or len(node.output) != 1:
        raise Declined("attributes DeformConv cannot express, inputs not float, or more than one "
                       "output")
    if not all(_present(node.input, i) for i in range(4)) or len(node.input) > 5:
        raise Declined("needs input, offset, mask and weight given (and at most a bias)")
    with_bias = _present(node.input, 4)
    inputs = ["input", "offset", "mask", "weight", "bias"]
    conv_inputs = ["input", "weight", "offset", "bias" if with_bias else "", "mask"]
    body = [helper.make_node("DeformConv", conv_inputs, ["output"], **attrs)]
    return make_function("mmcv_modulated_deform_conv", inputs[:len(node.input)], ["output"], body,
                     max(ctx.opset, DEFORM_CONV_OPSETS[0]))


def _kernel_size(ctx, weight: str) -> tuple[int, int] | None:
    """(kh, kw) of a weight, from its declared shape or its constant value."""
    dims = ctx.shape(weight)
    if dims is not None and len(dims) == 4 and dims[2] and dims[3]:
        return dims[2], dims[3]
    value = ctx.constant(weight)
    if value is not None and value.ndim == 4:
        return int(value.shape[2]), int(value.shape[3])
    return None


def _deform_conv_gather(ctx, attrs: dict, inputs: list[str], name: str
                        ) -> FunctionProto | None:
    """``y = W * im2col`` with the columns sampled bilinearly (torchvision's rule: a point
    with ``-1 < y < H`` and ``-1 < x < W`` mixes its in-image neighbours, others are 0)
    from the input as rows of ``(N*H*W*deform_groups, C/deform_groups)``."""
    size = _kernel_size(ctx, ctx.node.input[inputs.index("weight")])
    if size is None:
        raise Declined("the weight's kernel size is unknown (neither declared nor a constant)")
    kh, kw = size
    taps = kh * kw
    (sh, sw), (ph, pw), (dh, dw) = attrs["strides"], attrs["pads"][:2], attrs["dilations"]
    groups, deform_groups = attrs["group"], attrs["offset_group"]
    g = Body(ctx.opset)
    zero, one = g.const(0.0, np.float32), g.const(1.0, np.float32)
    n, c = g.dim_vector("input", 0), g.dim_vector("input", 1)
    h, w = g.dim_vector("input", 2), g.dim_vector("input", 3)
    height, width = (g.op("Cast", d, to=TensorProto.FLOAT) for d in (h, w))
    out_h, out_w = g.dim_vector("offset", 2), g.dim_vector("offset", 3)
    # sample positions (N, dg, K, Ho, Wo): output position * stride - pad + tap * dilation
    # + offset, the offsets (dy, dx) per tap
    offsets = g.op("Reshape", "offset", g.op("Concat", g.const([0, deform_groups, taps, 2]),
                                             out_h, out_w, axis=0))

    def positions(axis: int, length: str, stride: int, pad: int, tap_steps) -> str:
        count = g.op("Squeeze", length, axes=[0]) if ctx.opset < 13 else g.op(
            "Squeeze", length)
        steps = g.op("Cast", g.op("Range", g.const(0), count, g.const(1)),
                     to=TensorProto.FLOAT)
        start = g.op("Sub", g.op("Mul", steps, g.const(float(stride), np.float32)),
                     g.const(float(pad), np.float32))
        start = g.op("Reshape", start, g.const([1, -1, 1] if axis == 0 else [1, 1, -1]))
        taps_at = g.const(np.asarray(tap_steps, np.float32).reshape(taps, 1, 1), np.float32)
        return g.op("Add", g.op("Add", start, taps_at),
                    g.op("Gather", offsets, g.const(axis), axis=3))

    rows_of_taps = [i * dh for i in range(kh) for _ in range(kw)]
    cols_of_taps = [j * dw for _ in range(kh) for j in range(kw)]
    y = positions(0, out_h, sh, ph, rows_of_taps)
    x = positions(1, out_w, sw, pw, cols_of_taps)
    valid = g.op("And", g.op("And", g.op("Greater", y, g.const(-1.0, np.float32)),
                             g.op("Less", y, height)),
                 g.op("And", g.op("Greater", x, g.const(-1.0, np.float32)),
                      g.op("Less", x, width)))
    y = g.op("Where", valid, y, zero)
    x = g.op("Where", valid, x, zero)
    y0, x0 = g.op("Floor", y), g.op("Floor", x)
    ly, lx = g.op("Sub", y, y0), g.op("Sub", x, x0)
    hy, hx = g.op("Sub", one, ly), g.op("Sub", one, lx)
    y1, x1 = g.op("Add", y0, one), g.op("Add", x0, one)
    rows = g.op("Reshape", g.op("Transpose", "input", perm=[0, 2, 3, 1]),
                g.op("Concat", g.const([-1]), g.op("Div", c, g.const([deform_groups])),
                     axis=0))  # row ((n * H + y) * W + x) * dg + group
    image = g.op("Reshape", g.op("Range", g.const(0), g.op("Squeeze", n, axes=[0])
                                 if ctx.opset < 13 else g.op("Squeeze", n), g.const(1)),
                 g.const([-1, 1, 1, 1, 1]))
    group = g.const(np.arange(deform_groups).reshape(1, -1, 1, 1, 1))
    h_scalar, w_scalar = (g.op("Reshape", d, g.const([])) for d in (h, w))
    sampled = None
    for yf, xf, wy, wx in ((y0, x0, hy, hx), (y0, x1, hy, lx), (y1, x0, ly, hx),
                           (y1, x1, ly, lx)):
        inside = g.op("And", valid, g.op("And", g.op(
            "And", g.op("Not", g.op("Less", yf, zero)), g.op("Less", yf, height)), g.op(
            "And", g.op("Not", g.op("Less", xf, zero)), g.op("Less", xf, width))))
        yc = g.op("Max", g.op("Min", yf, g.op("Sub", height, one)), zero)
        xc = g.op("Max", g.op("Min", xf, g.op("Sub", width, one)), zero)
        yi, xi = (g.op("Cast", v, to=TensorProto.INT64) for v in (yc, xc))
        pixel = g.op("Add", g.op("Mul", g.op("Add", g.op("Mul", image, h_scalar), yi),
                                 w_scalar), xi)
        index = g.op("Add", g.op("Mul", pixel, g.const(deform_groups)), group)
        weight = g.op("Where", inside, g.op("Mul", wy, wx), zero)
        value = g.op("Where", g.unsqueeze(inside, [5]),
                     g.op("Gather", rows, index, axis=0), zero)
        term = g.op("Mul", value, g.unsqueeze(weight, [5]))
        sampled = term if sampled is None else g.op("Add", sampled, term)
    if "mask" in inputs:  # (N, dg, K, Ho, Wo, C/dg)
        mask = g.op("Reshape", "mask", g.op("Concat", g.const([0, deform_groups, taps]),
                                            out_h, out_w, axis=0))
        sampled = g.op("Mul", sampled, g.unsqueeze(mask, [5]))
    # columns (N, groups, C/groups * K, Ho*Wo), row c * K + tap
    columns = g.op("Reshape", g.op("Transpose", sampled, perm=[0, 1, 5, 2, 3, 4]),
                   g.op("Concat", n, g.const([groups, -1]), g.op("Mul", out_h, out_w),
                        axis=0))
    weights = g.op("Reshape", "weight", g.const([0, -1]))  # (O, C/groups * K)
    weights = g.op("Reshape", weights, g.op("Concat", g.const([groups, -1]),
                                            g.dim_vector(weights, 1), axis=0))
    out = g.op("MatMul", weights, columns)  # (N, groups, O/groups, Ho*Wo)
    out_shape = g.op("Concat", n, g.const([-1]), out_h, out_w, axis=0)
    if "bias" in inputs:
        out = g.op("Reshape", out, out_shape)
        g.op("Add", out, g.op("Reshape", "bias", g.const([-1, 1, 1])), outputs=["output"])
    else:
        g.op("Reshape", out, out_shape, outputs=["output"])
    return g.function(BODY_DOMAIN, name, inputs, ["output"])


def build_deform_conv_gather(ctx) -> FunctionProto | None:
    """MMCVDeformConv2d(input, offset, weight) before DeformConv."""
    node = ctx.node
    attrs = _deform_conv_attrs(node)
    if attrs is None or not is_float(ctx) or len(node.output) != 1:
        raise Declined("attributes DeformConv cannot express, inputs not float, or more than one "
                       "output")
    if len(node.input) != 3 or not all(node.input):
        raise Declined("needs input, offset and weight, none left empty")
    return _deform_conv_gather(ctx, attrs, ["input", "offset", "weight"],
                               "mmcv_deform_conv_gather")


def build_modulated_deform_conv_gather(ctx) -> FunctionProto | None:
    """MMCVModulatedDeformConv2d(input, offset, mask, weight[, bias]) before DeformConv."""
    node = ctx.node
    attrs = _deform_conv_attrs(node)
    if attrs is None or not is_float(ctx) or len(node.output) != 1:
        raise Declined("attributes DeformConv cannot express, inputs not float, or more than one "
                       "output")
    if not all(_present(node.input, i) for i in range(4)) or len(node.input) > 5:
        raise Declined("needs input, offset, mask and weight given (and at most a bias)")
    inputs = ["input", "offset", "mask", "weight", "bias"][:len(node.input)]
    return _deform_conv_gather(ctx, attrs, inputs, "mmcv_modulated_deform_conv_gather")
