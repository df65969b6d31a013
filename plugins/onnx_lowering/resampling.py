"""Resampling: resizing and sampling at computed positions.

* ``Resize`` (from 11; not ``antialias``, ``keep_aspect_ratio_policy`` stretch only): one
  axis at a time as the reference evaluator does it: source coordinates by
  ``coordinate_transformation_mode`` (all six), the 2 (linear, nearest by ``nearest_mode``)
  or 4 (cubic, ``cubic_coeff_a``, ``exclude_outside``) neighbours clamped to the edges,
  weighted and summed; ``tf_crop_and_resize`` gives ``extrapolation_value`` outside.
* ``GridSample`` (any spatial rank; linear, nearest; zeros, border, reflection padding):
  the 2^r corners (1 for nearest) gathered from the input flattened over its spatial axes.
"""

from __future__ import annotations

import numpy as np
from onnx import FunctionProto, TensorProto, helper

from rewriter.plugin import Arg, Declined, OpSample, declining
from rewriter.plugin import present as _present

from .common import (
    DOMAIN,
    Body,
    attributes_known,
    body_opset,
    float_elem,
    formal_inputs,
)

RESIZE_OPSETS = (11, None)  # roi, scales and sizes as inputs
GRID_SAMPLE_OPSETS = (16, None)


# -- Resize ---------------------------------------------------------------------------------

_RESIZE_ATTRIBUTES = ["mode", "coordinate_transformation_mode", "nearest_mode",
                      "cubic_coeff_a", "exclude_outside", "extrapolation_value", "axes",
                      "antialias", "keep_aspect_ratio_policy"]
_COORDINATE_MODES = {"half_pixel", "half_pixel_symmetric", "pytorch_half_pixel",
                     "align_corners", "asymmetric", "tf_crop_and_resize"}
_NEAREST_MODES = {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"}


def _text(value, default: str) -> str:
    if value is None:
        return default
    return value.decode() if isinstance(value, bytes) else value


def _resize_rank(ctx) -> int | None:
    node = ctx.node
    rank = ctx.rank(node.input[0])
    if rank is not None:
        return rank
    for i in (3, 2):
        if _present(node.input, i):
            shape = ctx.shape(node.input[i])
            if shape and shape[0]:
                return shape[0]
    return None


@declining
def build_resize(ctx) -> FunctionProto | None:
    """``Resize`` one axis at a time, as the reference evaluator computes it: source
    coordinates by ``coordinate_transformation_mode``, the 2 (linear, nearest) or 4 (cubic)
    neighbours clamped to the edges, weighted and summed; ``tf_crop_and_resize`` puts
    ``extrapolation_value`` outside the input."""
    node = ctx.node
    mode = _text(ctx.attribute("mode"), "nearest")
    coordinates = _text(ctx.attribute("coordinate_transformation_mode"), "half_pixel")
    nearest = _text(ctx.attribute("nearest_mode"), "round_prefer_floor")
    elem = float_elem(ctx, 0)
    if (elem is None or mode not in ("nearest", "linear", "cubic")
            or coordinates not in _COORDINATE_MODES or nearest not in _NEAREST_MODES
            or ctx.attribute("antialias", 0)
            or _text(ctx.attribute("keep_aspect_ratio_policy"), "stretch") != "stretch"
            or not attributes_known(node, _RESIZE_ATTRIBUTES) or len(node.output) != 1
            or len(node.input) > 4 or not _present(node.input, 0)
            or not (_present(node.input, 2) or _present(node.input, 3))):
        raise Declined("needs X of a known float type, scales or sizes, one output, no antialias, "
                       "keep_aspect_ratio_policy stretch, known modes and attributes")
    by_sizes = _present(node.input, 3)
    if coordinates == "tf_crop_and_resize" and not _present(node.input, 1):
        raise Declined("tf_crop_and_resize needs roi")
    rank = _resize_rank(ctx)
    axes = ctx.attribute("axes")
    if axes is None:
        if rank is None:
            raise Declined("the input's rank is not known")
        axes = list(range(rank))
    elif rank is None:
        rank = ctx.rank(node.input[0])
        if rank is None:
            raise Declined("the input's rank is not known")
    axes = [a % rank for a in axes]
    b = Body(body_opset(ctx))
    work = TensorProto.DOUBLE if elem == TensorProto.DOUBLE else TensorProto.FLOAT

    def real(value):
        return b.const(np.array(value), helper.tensor_dtype_to_np_dtype(work))

    zero_i, one_i = b.const(np.array(0, np.int64)), b.const(np.array(1, np.int64))
    y = b.cast("X", work)
    shape = b.op("Shape", "X")
    count = len(axes)
    a_coef = ctx.attribute("cubic_coeff_a", -0.75)
    for k, axis in enumerate(axes):
        size = b.shape_at(shape, axis)
        in_w = b.cast(size, work)
        if by_sizes:
            out_int = b.shape_at(b.cast("sizes", TensorProto.INT64), k)
            scale = b.op("Div", b.cast(out_int, work), in_w)
        else:
            scale = b.cast(b.shape_at("scales", k), work)
            out_int = b.cast(b.op("Floor", b.op("Mul", b.cast(in_w, TensorProto.DOUBLE),
                                                b.cast(scale, TensorProto.DOUBLE))),
                             TensorProto.INT64)
        out_w = b.op("Mul", scale, in_w)
        steps = b.cast(b.op("Range", zero_i, out_int, one_i), work)
        half = real(0.5)
        single = b.op("Equal", out_w, real(1.0))
        extrapolated = None
        if coordinates == "align_corners":
            x = b.op("Where", single, real(0.0), b.op("Div", b.op(
                "Mul", steps, b.op("Sub", in_w, real(1.0))), b.op("Sub", out_w, real(1.0))))
        elif coordinates == "asymmetric":
            x = b.op("Div", steps, scale)
        elif coordinates == "tf_crop_and_resize":
            roi = b.cast("roi", work)
            start, end = b.shape_at(roi, k), b.shape_at(roi, k + count)
            extent = b.op("Mul", b.op("Sub", end, start), b.op("Sub", in_w, real(1.0)))
            x = b.op("Where", single, b.op("Div", extent, real(2.0)), b.op(
                "Div", b.op("Mul", steps, extent), b.op("Sub", out_w, real(1.0))))
            x = b.op("Add", x, b.op("Mul", start, b.op("Sub", in_w, real(1.0))))
            extrapolated = b.op("Or", b.op("Less", x, real(0.0)),
                                b.op("Greater", x, b.op("Sub", in_w, real(1.0))))
        else:
            x = b.op("Sub", b.op("Div", b.op("Add", steps, half), scale), half)
            if coordinates == "pytorch_half_pixel":
                x = b.op("Where", single, real(-0.5), x)
            elif coordinates == "half_pixel_symmetric":
                adjustment = b.op("Div", b.cast(out_int, work), out_w)
                offset = b.op("Mul", b.op("Div", in_w, real(2.0)),
                              b.op("Sub", real(1.0), adjustment))
                x = b.op("Add", offset, x)
        floor = b.op("Floor", x)
        ratio = b.op("Where", b.op("Equal", x, floor), real(1.0), b.op("Sub", x, floor))
        if mode == "cubic":
            taps = 4
            r1 = b.op("Add", ratio, real(1.0))
            t = b.op("Sub", real(1.0), ratio)
            t1 = b.op("Add", t, real(1.0))

            def far(v):  # ((A v - 5A) v + 8A) v - 4A
                return b.op("Sub", b.op("Mul", b.op("Add", b.op("Mul", b.op(
                    "Sub", b.op("Mul", real(a_coef), v), real(5 * a_coef)), v),
                    real(8 * a_coef)), v), real(4 * a_coef))

            def near(v):  # ((A + 2) v - (A + 3)) v v + 1
                return b.op("Add", b.op("Mul", b.op("Mul", b.op("Sub", b.op(
                    "Mul", real(a_coef + 2), v), real(a_coef + 3)), v), v), real(1.0))

            coefficients = [far(r1), near(ratio), near(t), far(t1)]
        else:
            taps = 2
            if mode == "linear":
                coefficients = [b.op("Sub", real(1.0), ratio), ratio]
            else:
                # the nearer neighbour (the first of the two unless x is a whole index)
                if nearest == "round_prefer_floor":
                    first = b.op("LessOrEqual", ratio, half)
                elif nearest == "round_prefer_ceil":
                    first = b.op("Less", ratio, half)
                elif nearest == "floor":
                    first = b.op("Less", ratio, real(1.0))
                else:  # ceil
                    first = b.op("Greater", ratio, real(1.0))
                first = b.op("And", first, b.op("Not", b.op("Equal", ratio, real(1.0))))
                first = b.cast(first, work)
                coefficients = [first, b.op("Sub", real(1.0), first)]
        coefficients = b.op("Concat", *[b.reshape(c, [-1, 1]) for c in coefficients], axis=1)
        # the taps nearest x, the lower one preferred: from floor(x) - taps/2 at a whole x,
        # else from floor(x) - taps/2 + 1 (decided on x itself, as the ratio is)
        start = b.op("Add", floor, b.op("Where", b.op("Equal", x, floor),
                                        real(float(-(taps // 2))),
                                        real(float(-(taps // 2) + 1))))
        index = b.op("Add", b.reshape(b.cast(start, TensorProto.INT64), [-1, 1]),
                     b.reshape(b.ints(list(range(taps))), [1, -1]))       # (out, taps)
        if ctx.attribute("exclude_outside", 0):
            inside = b.op("And", b.op("GreaterOrEqual", index, zero_i),
                          b.op("Less", index, size))
            coefficients = b.op("Where", inside, coefficients, real(0.0))
            total = b.reduce_sum(coefficients, [1])
            total = b.op("Where", b.op("Equal", total, real(0.0)), real(1.0), total)
            coefficients = b.op("Div", coefficients, total)
        last = b.op("Sub", size, one_i)  # (no Min/Max: int64 takes them from opset 12 only)
        index = b.op("Where", b.op("Greater", index, last), last, index)
        index = b.op("Where", b.op("Less", index, zero_i), zero_i, index)
        gathered = b.op("Gather", y, index, axis=axis)               # (..., out, taps, ...)
        trailing = [1] * (rank - axis - 1)
        weights = b.reshape(coefficients, [0, 0, *trailing])
        y = b.reduce_sum(b.op("Mul", gathered, weights), [axis + 1], keepdims=0)
        if extrapolated is not None:
            value = real(float(ctx.attribute("extrapolation_value", 0.0)))
            y = b.op("Where", b.reshape(extrapolated, [-1, *trailing]), value, y)
    y = b.cast(y, elem)
    return b.function(DOMAIN, "resize", formal_inputs(node, ["X", "roi", "scales", "sizes"]), [y])


# -- GridSample -----------------------------------------------------------------------------


@declining
def build_grid_sample(ctx) -> FunctionProto | None:
    """``GridSample`` of any spatial rank (linear, nearest; zeros, border, reflection
    padding) as the reference evaluator computes it: per output point the 2^r corners (1
    for nearest) gathered from ``X`` flattened over its spatial axes, weighted and summed."""
    node = ctx.node
    mode = _text(ctx.attribute("mode"), "linear")
    mode = {"bilinear": "linear"}.get(mode, mode)  # GridSample-16's names
    padding = _text(ctx.attribute("padding_mode"), "zeros")
    elem, grid_elem = float_elem(ctx, 0), float_elem(ctx, 1)
    rank = ctx.rank(node.input[0]) if node.input else None
    if (mode not in ("linear", "nearest") or padding not in ("zeros", "border", "reflection")
            or elem is None or grid_elem is None or rank is None or rank < 3
            or len(node.input) != 2 or len(node.output) != 1
            or not attributes_known(node, ["mode", "padding_mode", "align_corners"])):
        raise Declined("needs linear or nearest, zeros, border or reflection padding, X and grid "
                       "of known float types, X of a known rank >= 3, one output, known "
                       "attributes")
    spatial = rank - 2
    align = bool(ctx.attribute("align_corners", 0))
    b = Body(body_opset(ctx))
    f32 = TensorProto.FLOAT

    def real(value):
        return b.const(np.array(value), np.float32)

    shape = b.op("Shape", "X")
    grid = b.cast("grid", f32)
    out_shape = b.op("Concat", b.slice(shape, [0], [2], [0]),
                     b.slice(b.op("Shape", "grid"), [1], [-1], [0]), axis=0)
    grid = b.op("Reshape", grid, b.op("Concat", b.slice(shape, [0], [1], [0]),
                                      b.ints([-1, spatial]), axis=0))      # (N, Q, r)
    lengths, coordinates = [], []
    for d in range(spatial):
        length = b.cast(b.shape_at(shape, 2 + d), f32)
        g = b.op("Gather", grid, b.const(np.array(spatial - 1 - d, np.int64)), axis=2)
        if align:
            x = b.op("Mul", b.op("Div", b.op("Add", g, real(1.0)), real(2.0)),
                     b.op("Sub", length, real(1.0)))
            low, high = real(0.0), b.op("Sub", length, real(1.0))
        else:
            x = b.op("Div", b.op("Sub", b.op("Mul", b.op("Add", g, real(1.0)), length),
                                 real(1.0)), real(2.0))
            low, high = real(-0.5), b.op("Sub", length, real(0.5))
        if mode == "nearest":
            x = b.op("Round", x)
        outside = b.op("Or", b.op("Less", x, low), b.op("Greater", x, high))
        if padding == "border":
            x = b.op("Where", outside, b.op("Max", b.op("Min", x, b.op(
                "Sub", length, real(1.0))), real(0.0)), x)
        elif padding == "reflection":
            x = b.op("Where", outside, _reflect(b, x, low, high), x)
        lengths.append(length)
        coordinates.append((x, low, high))
    strides = []
    stride = b.const(np.array(1, np.int64))
    for d in reversed(range(spatial)):
        strides.insert(0, stride)
        stride = b.op("Mul", stride, b.shape_at(shape, 2 + d))
    flat = b.op("Reshape", "X", b.op("Concat", b.slice(shape, [0], [2], [0]), b.ints([-1]),
                                     axis=0))                                # (N, C, P)
    corners = [[]]
    for d, (x, low, high) in enumerate(coordinates):
        if mode == "nearest":
            options = [(x, None)]
        else:
            x0 = b.op("Floor", x)
            frac = b.op("Sub", x, x0)
            options = [(x0, b.op("Sub", real(1.0), frac)),
                       (b.op("Add", x0, real(1.0)), frac)]
        corners = [c + [(index, weight, d, low, high)] for c in corners
                   for index, weight in options]
    total = None
    for corner in corners:
        flat_index, weight = None, None
        for index, w, d, low, high in corner:
            length = lengths[d]
            if padding == "reflection":
                index = b.op("Floor", b.op("Where", b.op("Less", index, real(0.0)), b.op(
                    "Ceil", _reflect(b, index, low, high)), _reflect(b, index, low, high)))
            if padding == "zeros":
                valid = b.op("And", b.op("GreaterOrEqual", index, real(0.0)),
                             b.op("Less", index, length))
                w = b.cast(valid, f32) if w is None else b.op("Mul", w, b.cast(valid, f32))
            index = b.op("Max", b.op("Min", index, b.op("Sub", length, real(1.0))), real(0.0))
            term = b.op("Mul", b.cast(index, TensorProto.INT64), strides[d])
            flat_index = term if flat_index is None else b.op("Add", flat_index, term)
            weight = w if weight is None else (weight if w is None else b.op("Mul", weight, w))
        gather_index = b.op("Expand", b.unsqueeze(flat_index, [1]), b.op(
            "Concat", b.slice(shape, [0], [2], [0]), b.slice(b.op("Shape", flat_index), [1],
                                                             [2], [0]), axis=0))
        value = b.op("GatherElements", flat, gather_index, axis=2)          # (N, C, Q)
        if weight is not None:
            value = b.op("Mul", value, b.cast(b.unsqueeze(weight, [1]), elem))
        total = value if total is None else b.op("Add", total, value)
    y = b.op("Reshape", total, out_shape)
    return b.function(DOMAIN, "grid_sample", ["X", "grid"], [y])


def _reflect(b: Body, x: str, low: str, high: str) -> str:
    """``x`` reflected by the near border until it lies in ``[low, high]``."""
    span = b.op("Sub", high, low)
    below = b.op("Less", x, low)
    distance = b.op("Where", below, b.op("Sub", low, x), b.op("Sub", x, high))
    folds = b.op("Floor", b.op("Div", distance, span))
    rest = b.op("Sub", distance, b.op("Mul", folds, span))
    even = b.op("Equal", b.op("Sub", folds, b.op("Mul", b.op("Floor", b.op(
        "Div", folds, b.const(np.array(2.0), np.float32))), b.const(np.array(2.0), np.float32))),
        b.const(np.array(0.0), np.float32))
    near = b.op("Where", below, b.op("Add", low, rest), b.op("Sub", high, rest))
    far = b.op("Where", below, b.op("Sub", high, rest), b.op("Add", low, rest))
    return b.op("Where", even, near, far)


def _resize_samples() -> list[OpSample]:
    samples = []
    cases = [  # (coordinate mode, mode, scales or sizes, axes, extra attributes, opset)
        ("half_pixel_symmetric", "linear", ("scales", [1, 1, 0.6, 0.8]), None, {}, 19),
        ("half_pixel_symmetric", "linear", ("scales", [1, 1, 2.0, 2.5]), None, {}, 19),
        ("tf_crop_and_resize", "linear", ("sizes", [3, 3]), [2, 3],
         {"extrapolation_value": 10.0}, 19),
        ("tf_crop_and_resize", "nearest", ("sizes", [1, 1, 3, 3]), None, {}, 13),
        ("half_pixel", "cubic", ("scales", [1, 1, 0.8, 1.6]), None,
         {"exclude_outside": 1, "cubic_coeff_a": -0.5}, 13),
        ("align_corners", "linear", ("sizes", [1, 1, 1, 7]), None, {}, 13),
        ("asymmetric", "nearest", ("scales", [1, 1, 2.0, 0.5]), None,
         {"nearest_mode": "ceil"}, 13),
        ("pytorch_half_pixel", "nearest", ("sizes", [1, 1, 7, 3]), None,
         {"nearest_mode": "round_prefer_ceil"}, 13),
        ("half_pixel", "nearest", ("scales", [1, 1, 0.75, 1.5]), None,
         {"nearest_mode": "floor"}, 11),
    ]
    for coordinates, mode, (kind, values), axes, extra, opset in cases:
        count = len(axes) if axes else 4
        roi = None
        if coordinates == "tf_crop_and_resize":
            roi = Arg(f"float[{2 * count}]",
                      values=([0.4, -0.2] if axes else [0, 0, 0.4, -0.2])
                      + ([0.9, 1.1] if axes else [1, 1, 0.9, 1.1]))
        elif opset < 13:
            roi = Arg("float[0]", values=np.zeros(0, np.float32), constant=True)
        scales = Arg(f"float[{count}]", values=values) if kind == "scales" else (
            Arg("float[0]", values=np.zeros(0, np.float32), constant=True) if opset < 13
            else None)
        sizes = Arg(f"int64[{count}]", values=values) if kind == "sizes" else None
        inputs = ["T[1,1,4,5]", roi, scales, sizes]
        while inputs[-1] is None:
            inputs.pop()
        attributes = {"mode": mode, "coordinate_transformation_mode": coordinates, **extra}
        if axes:
            attributes["axes"] = axes
        samples.append(OpSample(inputs, attributes=attributes, opset=opset,
                                name=f"{coordinates}-{mode}-{kind}",
                                tolerance=(1e-5, 1e-5)))
    return samples


def samples() -> dict[str, list[OpSample]]:
    """The samples of this module's ops, by op type."""
    return {
        "Resize": _resize_samples(),
        "GridSample": [
            OpSample(["T[1,2,3,4,5]", Arg("T[1,2,3,4,3]", low=-1.3, high=1.3)],
                     attributes=dict(mode=mode, padding_mode=padding, align_corners=align),
                     opset=22, name=f"3d-{mode}-{padding}-align{align}",
                     tolerance=(1e-5, 1e-5))
            for mode, padding, align in [("linear", "zeros", 0), ("linear", "border", 1),
                                         ("nearest", "zeros", 1), ("nearest", "border", 0),
                                         ("linear", "reflection", 0),
                                         ("nearest", "reflection", 1)]] + [
            OpSample(["T[2,3,4,5]", Arg("T[2,3,2,2]", low=-1.2, high=1.2)],
                     attributes=dict(mode="bilinear", padding_mode="zeros"), opset=16,
                     name="2d-16", dtypes=["float"], tolerance=(1e-5, 1e-5),
                     oracle="onnxruntime")],  # (the reference evaluator lacks "bilinear")
    }
