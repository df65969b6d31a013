"""``grid_sampler(input, grid)`` (torch.nn.functional.grid_sample): ``GridSample`` from
ai.onnx 16, a Gather of the neighbours for opsets 11-15."""

from __future__ import annotations

import numpy as np
from onnx import FunctionProto, TensorProto, helper

from rewriter.plugin import Declined
from rewriter.plugin import present as _present

from .common import BODY_DOMAIN, GRID_SAMPLE_OPSETS, Body, is_float, make_function, node_attributes

_GRID_MODES_16 = {0: "bilinear", 1: "nearest", 2: "bicubic"}
_GRID_MODES_20 = {0: "linear", 1: "nearest", 2: "cubic"}
_GRID_PADDING = {0: "zeros", 1: "border", 2: "reflection"}


def build_grid_sampler(ctx) -> FunctionProto | None:
    """grid_sampler -> GridSample with the integer codes spelled out."""
    node = ctx.node
    attrs = node_attributes(node)
    if set(attrs) - {"interpolation_mode", "padding_mode", "align_corners"}:
        raise Declined("unknown attribute(s): only interpolation_mode, padding_mode, align_corners")
    if not (_present(node.input, 0) and _present(node.input, 1)) or len(node.output) != 1:
        raise Declined("needs input and grid given and one output")
    modes = _GRID_MODES_20 if ctx.opset >= 20 else _GRID_MODES_16
    mode = modes.get(attrs.get("interpolation_mode", 0))
    padding = _GRID_PADDING.get(attrs.get("padding_mode", 0))
    align = attrs.get("align_corners", 0)
    if mode is None or padding is None or align not in (0, 1):
        raise Declined("interpolation_mode, padding_mode or align_corners has a value GridSample "
                       "lacks")
    body = [helper.make_node("GridSample", ["input", "grid"], ["output"], mode=mode,
                             padding_mode=padding, align_corners=align)]
    return make_function("grid_sampler", ["input", "grid"], ["output"], body,
                     max(ctx.opset, GRID_SAMPLE_OPSETS[0]))


def _grid_source(g: Body, coord: str, size: str, align: int, padding: int) -> str:
    """Pixel coordinate of a normalised grid coordinate, as torch's
    ``grid_sampler_compute_source_index`` (``size`` a float scalar; ``padding`` 0/1/2 =
    zeros/border/reflection)."""
    one, half = g.const(1.0, np.float32), g.const(0.5, np.float32)
    shifted = g.op("Add", coord, one)
    last = g.op("Sub", size, one)
    if align:
        pixel = g.op("Mul", g.op("Mul", shifted, half), last)
    else:
        pixel = g.op("Mul", g.op("Sub", g.op("Mul", shifted, size), one), half)
    if padding == 0:
        # beyond [-1, size] every neighbour is padding: clamp so integer casts stay small
        return g.op("Max", g.op("Min", pixel, g.op("Add", size, one)),
                    g.const(-2.0, np.float32))
    zero = g.const(0.0, np.float32)
    if padding == 2:  # reflect about the borders (pixel edges unless align_corners)
        low, span = (zero, last) if align else (g.const(-0.5, np.float32), size)
        distance = g.op("Abs", g.op("Sub", pixel, low))
        extra = g.op("Mod", distance, span, fmod=1)
        flips = g.op("Floor", g.op("Div", distance, span))
        even = g.op("Equal", g.op("Mod", flips, g.const(2.0, np.float32), fmod=1), zero)
        reflected = g.op("Where", even, g.op("Add", extra, low),
                         g.op("Add", g.op("Sub", span, extra), low))
        pixel = g.op("Where", g.op("Equal", span, zero), zero, reflected)
    return g.op("Max", g.op("Min", pixel, last), zero)


def build_grid_sampler_gather(ctx) -> FunctionProto | None:
    """grid_sampler (bilinear or nearest; zeros, border or reflection padding) for opsets
    before GridSample: the neighbours are gathered from the input as rows of ``(N*H*W, C)``."""
    node = ctx.node
    attrs = node_attributes(node)
    if set(attrs) - {"interpolation_mode", "padding_mode", "align_corners"}:
        raise Declined("unknown attribute(s): only interpolation_mode, padding_mode, align_corners")
    if not (_present(node.input, 0) and _present(node.input, 1)) or len(node.output) != 1:
        raise Declined("needs input and grid given and one output")
    if not is_float(ctx):
        raise Declined("inputs must be float")
    mode, padding = attrs.get("interpolation_mode", 0), attrs.get("padding_mode", 0)
    align = attrs.get("align_corners", 0)
    if mode not in (0, 1) or padding not in (0, 1, 2) or align not in (0, 1):
        raise Declined("interpolation_mode, padding_mode or align_corners out of range (bilinear "
                       "or nearest; zeros, border or reflection)")
    g = Body(ctx.opset)
    shape = g.op("Shape", "input")
    n, c, h, w = (g.op("Gather", shape, g.const(i)) for i in range(4))
    height, width = (g.op("Cast", d, to=TensorProto.FLOAT) for d in (h, w))
    x = _grid_source(g, g.op("Gather", "grid", g.const(0), axis=3), width, align, padding)
    y = _grid_source(g, g.op("Gather", "grid", g.const(1), axis=3), height, align, padding)
    rows = g.op("Reshape", g.op("Transpose", "input", perm=[0, 2, 3, 1]),
                g.op("Concat", g.const([-1]), g.unsqueeze(c, [0]), axis=0))  # (N*H*W, C)
    first_row = g.op("Mul", g.op("Reshape", g.op("Range", g.const(0), n, g.const(1)),
                                 g.const([-1, 1, 1])), g.op("Mul", h, w))
    zero = g.const(0.0, np.float32)

    def neighbour(xf: str, yf: str) -> str:
        """Input values at integral float coordinates (N, Ho, Wo) -> (N, Ho, Wo, C), 0
        outside the input (clamped in float: Min/Max take no int64 before opset 12)."""
        inside = g.op("And", g.op("And", g.op("Not", g.op("Less", xf, zero)),
                                  g.op("Less", xf, width)),
                      g.op("And", g.op("Not", g.op("Less", yf, zero)),
                           g.op("Less", yf, height)))
        one = g.const(1.0, np.float32)
        xc = g.op("Max", g.op("Min", xf, g.op("Sub", width, one)), zero)
        yc = g.op("Max", g.op("Min", yf, g.op("Sub", height, one)), zero)
        xi, yi = (g.op("Cast", v, to=TensorProto.INT64) for v in (xc, yc))
        index = g.op("Add", first_row, g.op("Add", g.op("Mul", yi, w), xi))
        return g.op("Where", g.unsqueeze(inside, [3]), g.op("Gather", rows, index, axis=0),
                    zero)

    if mode == 1:
        sampled = neighbour(g.op("Round", x), g.op("Round", y))
    else:
        one = g.const(1.0, np.float32)
        x0, y0 = g.op("Floor", x), g.op("Floor", y)
        x1, y1 = g.op("Add", x0, one), g.op("Add", y0, one)
        wx0, wx1 = g.op("Sub", x1, x), g.op("Sub", x, x0)
        wy0, wy1 = g.op("Sub", y1, y), g.op("Sub", y, y0)
        sampled = None
        for xi, yi, wx, wy in ((x0, y0, wx0, wy0), (x1, y0, wx1, wy0), (x0, y1, wx0, wy1),
                               (x1, y1, wx1, wy1)):
            term = g.op("Mul", neighbour(xi, yi), g.unsqueeze(g.op("Mul", wx, wy), [3]))
            sampled = term if sampled is None else g.op("Add", sampled, term)
    g.op("Transpose", sampled, outputs=["output"], perm=[0, 3, 1, 2])
    return g.function(BODY_DOMAIN, "grid_sampler_gather", ["input", "grid"], ["output"])


# -- deformable convolution before DeformConv ---------------------------------------------
