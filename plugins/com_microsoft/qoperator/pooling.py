"""Pooling QOperator ops as ``DequantizeLinear`` -> the float op -> ``QuantizeLinear``:

* ``QLinearAveragePool`` (``AveragePool``'s attributes, ``channels_last``),
  ``QLinearGlobalAveragePool`` (``channels_last``: a mean over the spatial axes of NHWC).
"""

from __future__ import annotations

import numpy as np
from onnx import FunctionProto

from rewriter.plugin import Declined, OpSample, declining
from rewriter.plugin import present as _present

from ..common import unknown_attributes
from .common import (
    PAD_INPUTS,
    TYPES,
    UNARY,
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

_POOL_ATTRIBUTES = ("auto_pad", "ceil_mode", "count_include_pad", "kernel_shape", "pads",
                    "strides")


def _spatial_rank(ctx, index: int, kernel_shape) -> int:
    """The rank of an NHWC input: from ``kernel_shape``, else its declared shape."""
    if kernel_shape:
        return len(kernel_shape) + 2
    rank = ctx.rank(ctx.node.input[index])
    if rank is None:
        raise Declined("channels_last needs the input's rank (kernel_shape or its shape)")
    return rank


@declining
def build_qlinear_average_pool(ctx) -> FunctionProto:
    node = ctx.node
    needs_inputs(node, (0, 1, 3), 5, "X, x_scale and y_scale")
    if unknown_attributes(node, (*_POOL_ATTRIBUTES, "channels_last")):
        raise Declined("takes AveragePool's attributes (no dilations) and channels_last")
    elem = qtype(ctx, 0)
    attrs = {k: ctx.attribute(k) for k in _POOL_ATTRIBUTES}
    if attrs["ceil_mode"] and ctx.opset < 10:
        raise Declined("ceil_mode needs AveragePool-10")
    b = float_body(ctx)
    last = ctx.attribute("channels_last", 0)
    rank = _spatial_rank(ctx, 0, attrs["kernel_shape"]) if last else 0
    x = channels_first(b, "X", rank) if last else "X"  # integers: exact either side of DQ
    scale = b.scalar(ctx, 1, "X_scale")
    zp = b.scalar(ctx, 2, "X_zero_point") if _present(node.input, 2) else ""
    pads = attrs["pads"] or []
    if (attrs["count_include_pad"] and any(pads) and not attrs["ceil_mode"]
            and ctx.opset >= PAD_INPUTS):
        # padded with the zero point before dequantizing: OpenVINO 2026.4 moves the
        # dequantization after an AveragePool counting its pads, and pads the integers
        # with 0 instead of the zero point (measured: up to 62 units off)
        half = len(pads) // 2
        x = b.op("Pad", x, b.ints([0, 0, *pads[:half], 0, 0, *pads[half:]]),
                 zp or b.const(np.array(0), elem))
        attrs = {**attrs, "pads": None, "count_include_pad": None}
    x = b.dequantize(x, scale, zp, elem)
    y = b.op("AveragePool", x, **attrs)
    if last:
        y = channels_last(b, y, rank)
    return finish(b, node, UNARY, q_output(b, ctx, y, 3, UNARY, elem),
                   "qlinear_average_pool")


@declining
def build_qlinear_global_average_pool(ctx) -> FunctionProto:
    node = ctx.node
    needs_inputs(node, (0, 1, 3), 5, "X, x_scale and y_scale")
    if unknown_attributes(node, ("channels_last",)):
        raise Declined("takes only channels_last")
    elem = qtype(ctx, 0)
    b = float_body(ctx)
    x = dq_input(b, ctx, 0, UNARY, elem)
    if ctx.attribute("channels_last", 0):
        rank = _spatial_rank(ctx, 0, None)
        y = b.reduce_mean(x, list(range(1, rank - 1)), keepdims=1)
    else:
        y = b.op("GlobalAveragePool", x)
    return finish(b, node, UNARY, q_output(b, ctx, y, 3, UNARY, elem),
                   "qlinear_global_average_pool")


def pool_samples() -> list[OpSample]:
    cases = [("plain", {"kernel_shape": [3, 3]}),
             ("strided-padded", {"kernel_shape": [3, 3], "strides": [2, 2],
                                 "pads": [1, 1, 1, 1]}),
             ("count-include-pad", {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1],
                                    "count_include_pad": 1}),
             ("ceil", {"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1}),
             ("same-upper", {"kernel_shape": [2, 3], "auto_pad": "SAME_UPPER"}),
             ("1d", {"kernel_shape": [3], "strides": [2]})]
    samples = []
    for elem in TYPES:
        for case, attrs in cases:
            for last in (0, 1):
                spatial = "7" if case == "1d" else "7,7"
                shape = f"[2,{spatial},3]" if last else f"[2,3,{spatial}]"
                samples.append(OpSample(
                    [q_arg(elem, shape), scale_arg(0.0307), zp_arg(elem), scale_arg(0.0211),
                     zp_arg(elem, 4)], [elem], {**attrs, "channels_last": last},
                    opset=17, name=f"{elem}-{case}{'-nhwc' if last else ''}"))
    return samples


def global_pool_samples() -> list[OpSample]:
    return [OpSample([q_arg(elem, shape), scale_arg(0.0307), zp_arg(elem), scale_arg(0.0109),
                      zp_arg(elem, 4)], [elem], {"channels_last": last}, opset=opset,
                     name=f"{elem}-{'nhwc' if last else 'nchw'}-{shape}")
            for elem in TYPES for last, shape in ((0, "[2,3,5,5]"), (1, "[2,5,5,3]"),
                                                   (0, "[2,3,7]"), (1, "[2,4,6,3]"))
            for opset in ((10, 17) if shape == "[2,3,5,5]" else (17,))]
