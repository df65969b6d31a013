"""Convolutions (and the unpooling) in forms the runtimes lack:

* ``Conv`` (1- to 3-D, from opset 11) whose weights ``W`` are not a constant (OpenVINO's CPU
  plugin convolves with no weights of a dynamic shape): ``X`` padded, viewed as
  ``(N, group, C/group, ...)``; each kernel tap a strided ``Slice``; the taps concatenated
  and multiplied by ``W`` as ``(group, M/group, taps * C/group)``, plus ``B``. Not
  ``auto_pad`` SAME_*; sums in another order than a Conv kernel (oracle onnxruntime's Conv).
* ``DeformConv`` (2-D): every kernel tap sampled bilinearly at its offset position (zero
  outside), times the mask, then a grouped matrix product with the weights, plus ``B``.
* ``MaxUnpool(X, I[, output_shape])``: ``ScatterElements`` of ``X`` into zeros of the
  inferred shape (``(in - 1) * stride - pads + kernel`` per spatial axis) at the flat
  indices ``I``, padded with zeros (bottom/right) to ``output_shape`` when given.
* ``LpPool``: ``(sum over the window of |X|^p)^(1/p)`` as an ``AveragePool`` of ``|X|^p``
  counting the pads (zeros, which add nothing), times the window's size, to the power
  ``1/p`` (tract has no LpPool). ``auto_pad`` SAME_* as explicit pads (static spatial dims);
  not ``ceil_mode`` (a window past the pads averages otherwise); dilations from opset 19.
"""

from __future__ import annotations

import math

import numpy as np
from onnx import FunctionProto, TensorProto

from rewriter.plugin import Arg, Declined, OpSample, declining
from rewriter.plugin import present as _present

from .common import (
    DOMAIN,
    Body,
    attributes_known,
    body_opset,
    float_elem,
    formal_inputs,
    input_elem,
)

MAXUNPOOL_OPSETS = (13, None)
LP_POOL_OPSETS = (11, None)  # AveragePool's count_include_pad (7+) and ceil_mode (10+)
AVERAGE_POOL_DILATIONS = 19
DEFORM_CONV_OPSETS = (19, None)
CONV_OPSETS = (11, None)  # Pad's pads and Slice's steps as inputs
MAX_CONV_RANK = 3
MAX_CONV_TAPS = 125  # one Slice per kernel tap


# -- MaxUnpool ------------------------------------------------------------------------------


@declining
def build_max_unpool(ctx) -> FunctionProto | None:
    """``MaxUnpool`` as a scatter into zeros of the inferred shape (then padded)."""
    node = ctx.node
    kernel = ctx.attribute("kernel_shape")
    elem = input_elem(ctx, 0)
    if (not kernel or elem is None or len(node.output) != 1 or len(node.input) > 3
            or not all(_present(node.input, i) for i in range(2))
            or not attributes_known(node, ["kernel_shape", "pads", "strides"])):
        raise Declined("needs X and I, kernel_shape, a known element type, one output, only "
                       "kernel_shape, pads and strides")
    spatial = len(kernel)
    strides = list(ctx.attribute("strides", [1] * spatial))
    pads = list(ctx.attribute("pads", [0] * 2 * spatial))
    b = Body(body_opset(ctx))
    shape = b.op("Shape", "X")
    leading = b.slice(shape, [0], [2], [0])
    inner = b.slice(shape, [2], [2 + spatial], [0])
    inferred = b.op("Add", b.op("Mul", b.op("Sub", inner, b.ints([1] * spatial)),
                                b.ints(strides)),
                    b.ints([kernel[d] - pads[d] - pads[spatial + d] for d in range(spatial)]))
    inferred = b.op("Concat", leading, inferred, axis=0)
    total = b.reduce("ReduceProd", inferred, [0])
    zeros = b.fill(total, 0.0, elem)
    flat = b.op("ScatterElements", zeros, b.reshape(b.cast("I", TensorProto.INT64), [-1]),
                b.reshape("X", [-1]), axis=0)
    y = b.op("Reshape", flat, inferred)
    if _present(node.input, 2):
        extra = b.op("Sub", b.cast("output_shape", TensorProto.INT64), inferred)
        pads_vector = b.op("Concat", b.op("Mul", extra, b.ints([0] * (2 + spatial))), extra,
                           axis=0)
        y = b.op("Pad", y, pads_vector)
    return b.function(DOMAIN, "max_unpool", formal_inputs(node, ["X", "I", "output_shape"]), [y])


# -- LpPool --------------------------------------------------------------------------------


@declining
def build_lp_pool(ctx) -> FunctionProto | None:
    """``LpPool`` as ``(AveragePool(|X|^p, count_include_pad=1) * window) ^ (1/p)``."""
    node = ctx.node
    kernel = ctx.attribute("kernel_shape")
    elem = float_elem(ctx, 0)
    if (not kernel or elem is None or len(node.output) != 1 or not attributes_known(
            node, ["kernel_shape", "strides", "pads", "dilations", "p", "auto_pad",
                   "ceil_mode"])):
        raise Declined("needs kernel_shape, a float X, one output, only the attributes of "
                       "LpPool-18")
    auto_pad = ctx.attribute("auto_pad", b"NOTSET")
    auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else str(auto_pad)
    if ctx.attribute("ceil_mode", 0):
        raise Declined("ceil_mode: a window past the pads averages otherwise")
    spatial = len(kernel)
    dilations = list(ctx.attribute("dilations", [1] * spatial))
    strides = list(ctx.attribute("strides", [1] * spatial))
    pads = list(ctx.attribute("pads", [0] * 2 * spatial))
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):  # explicit pads, from static dims
        shape = ctx.shape(node.input[0])
        inner = shape[2:] if shape is not None and len(shape) == spatial + 2 else None
        if inner is None or any(not isinstance(d, int) for d in inner):
            raise Declined("auto_pad SAME_* needs static spatial dims (a window past the "
                           "pads averages otherwise)")
        pads = _same_pads(inner, kernel, strides, dilations, auto_pad == "SAME_UPPER")
        auto_pad = "NOTSET"
    elif auto_pad not in ("NOTSET", "VALID"):
        raise Declined(f"auto_pad {auto_pad}")
    opset = body_opset(ctx)
    if any(d != 1 for d in dilations) and opset < AVERAGE_POOL_DILATIONS:
        raise Declined("dilations: AveragePool takes them from opset 19",
                       needs_opset=AVERAGE_POOL_DILATIONS)
    p = int(ctx.attribute("p", 2))
    if p < 1:
        raise Declined(f"p = {p}")
    attributes = dict(kernel_shape=list(kernel), count_include_pad=1, strides=strides)
    if auto_pad == "VALID":
        attributes["auto_pad"] = "VALID"
    else:
        attributes["pads"] = pads
    if any(d != 1 for d in dilations):
        attributes["dilations"] = dilations
    b = Body(opset, elem)
    magnitude = b.op("Abs", "X")
    powered = magnitude if p == 1 else b.op("Pow", magnitude, b.literal(float(p)))
    summed = b.op("Mul", b.op("AveragePool", powered, **attributes),
                  b.literal(float(math.prod(kernel))))
    y = summed if p == 1 else b.op("Pow", summed, b.literal(1.0 / p))
    return b.function(DOMAIN, "lp_pool", ["X"], [y])


def _same_pads(inner, kernel, strides, dilations, upper: bool) -> list[int]:
    """The explicit pads of ``auto_pad`` SAME_UPPER (the odd one at the end) or SAME_LOWER
    (at the start): the output has ``ceil(in / stride)`` elements per axis."""
    begins, ends = [], []
    for size, k, s, d in zip(inner, kernel, strides, dilations):
        total = max((-(-size // s) - 1) * s + (k - 1) * d + 1 - size, 0)
        small, big = total // 2, total - total // 2
        begins.append(small if upper else big)
        ends.append(big if upper else small)
    return begins + ends


# -- DeformConv -----------------------------------------------------------------------------


@declining
def build_deform_conv(ctx, sampling: str = "zeros") -> FunctionProto | None:
    """2-D ``DeformConv``: each kernel tap sampled bilinearly (zero outside) at its shifted
    position, times the mask, then a grouped matrix product with the weights, as the
    reference evaluator computes it.

    For other plugins' ops of the same shape: ``sampling="openvino"`` reads the image as
    OpenVINO's ``DeformableConvolution-8`` does (a point outside ``[0, H) x [0, W)`` is 0,
    its far neighbours clamped to the last row/column). The body is written at any opset
    from 7: below 12 without ``GreaterOrEqual``, below 11 (no ``Range``,
    ``GatherElements``) for a declared batch size and output size, the columns gathered as
    rows of the transposed input, below 9 without ``Where`` (a NaN offset there gives an
    invalid index instead of a zero weight)."""
    node = ctx.node
    elem = float_elem(ctx, 0)
    weight_shape = ctx.shape(node.input[1]) if len(node.input) > 1 else None
    kernel = ctx.attribute("kernel_shape") or (weight_shape[2:] if weight_shape else None)
    if (elem is None or not kernel or len(kernel) != 2 or None in kernel
            or len(node.input) > 5 or not all(_present(node.input, i) for i in range(3))
            or len(node.output) != 1 or ctx.rank(node.input[0]) not in (None, 4)
            or not attributes_known(node, ["dilations", "group", "kernel_shape", "offset_group",
                                           "pads", "strides"])):
        raise Declined("needs a known float type, a 2-D kernel known, X, W and offset given "
                       "(rank-4 X), one output, known attributes")
    kh, kw = kernel
    sh, sw = ctx.attribute("strides", [1, 1])
    dh, dw = ctx.attribute("dilations", [1, 1])
    pads = ctx.attribute("pads", [0, 0, 0, 0])
    group, offset_group = ctx.attribute("group", 1), ctx.attribute("offset_group", 1)
    b = Body(body_opset(ctx))
    static = None  # below opset 11: the batch size and output size, declared
    if b.opset < 11:
        x_dims, off_dims = ctx.shape(node.input[0]), ctx.shape(node.input[2])
        if not x_dims or not off_dims or None in (x_dims[0], *off_dims[2:4]):
            raise Declined("below opset 11 the batch size and the offsets' spatial size must "
                           "be declared (Range and GatherElements arrive in 11)")
        static = (x_dims[0], off_dims[2], off_dims[3])

    def real(value):
        return b.const(np.array(value), elem)

    def at_least(x: str, low: str) -> str:
        if b.opset >= 12:
            return b.op("GreaterOrEqual", x, low)
        return b.op("Not", b.op("Less", x, low))

    x_shape, off_shape = b.op("Shape", "X"), b.op("Shape", "offset")
    n_1, height, width = (b.slice(x_shape, [i], [i + 1], [0]) for i in (0, 2, 3))
    out_hw = b.slice(off_shape, [2], [4], [0])
    offset = b.op("Reshape", "offset", b.op("Concat", n_1, b.ints([offset_group, kh, kw, 2]),
                                            out_hw, axis=0))
    positions = []
    for axis, (stride, dilation, pad, k) in enumerate([(sh, dh, pads[0], kh),
                                                       (sw, dw, pads[1], kw)]):
        if static is None:
            out_len = b.op("Gather", out_hw, b.const(np.array(axis, np.int64)), axis=0)
            steps = b.cast(b.op("Range", b.const(np.array(0, np.int64)), out_len,
                                b.const(np.array(1, np.int64))), elem)
        else:
            steps = b.const(np.arange(static[1 + axis]), elem)
        base = b.op("Add", b.op("Mul", steps, real(float(stride))), real(float(-pad)))
        tap = b.const(np.arange(k, dtype=np.float64) * dilation, elem)         # (kh|kw)
        base_shape = [1, 1, 1, 1, -1, 1] if axis == 0 else [1, 1, 1, 1, 1, -1]
        tap_shape = [1, 1, -1, 1, 1, 1] if axis == 0 else [1, 1, 1, -1, 1, 1]
        grid = b.op("Add", b.reshape(base, base_shape), b.reshape(tap, tap_shape))
        shift = b.op("Gather", offset, b.const(np.array(axis, np.int64)), axis=4)
        positions.append(b.op("Add", grid, shift))           # (N, G, kh, kw, oH, oW)
    h, w = positions
    h0, w0 = b.op("Floor", h), b.op("Floor", w)
    fh, fw = b.op("Sub", h, h0), b.op("Sub", w, w0)
    height_f, width_f = b.cast(b.scalar(height), elem), b.cast(b.scalar(width), elem)
    inside = None  # openvino: the point itself must lie in the image
    if sampling == "openvino":
        inside = b.op("And", b.op("And", at_least(h, real(0.0)), b.op("Less", h, height_f)),
                      b.op("And", at_least(w, real(0.0)), b.op("Less", w, width_f)))
    channels = b.op("Div", b.slice(x_shape, [1], [2], [0]), b.ints([offset_group]))
    flat_x = b.op("Reshape", "X", b.op("Concat", n_1, b.ints([offset_group]), channels,
                                       b.ints([-1]), axis=0))           # (N, G, C/G, H*W)
    if static is not None:  # rows (n, g, pixel) of C/G values, and each (n, g)'s first row
        rows = b.op("Reshape", b.op("Transpose", flat_x, perm=[0, 1, 3, 2]),
                    b.op("Concat", b.ints([-1]), channels, axis=0))
        first_row = b.op("Mul", b.const(np.arange(static[0] * offset_group).reshape(
            static[0], offset_group, 1)), b.op("Mul", height, width)) \
            if static[0] * offset_group > 1 else None                     # (N, G, 1)
    total = None
    for dy, wy in ((0, b.op("Sub", real(1.0), fh)), (1, fh)):
        for dx, wx in ((0, b.op("Sub", real(1.0), fw)), (1, fw)):
            yy = b.op("Add", h0, real(float(dy))) if dy else h0
            xx = b.op("Add", w0, real(float(dx))) if dx else w0
            if inside is not None:  # the far neighbour of the last row/column is itself
                valid = inside
                if dy:
                    yy = b.op("Sub", yy, b.cast(at_least(yy, height_f), elem))
                if dx:
                    xx = b.op("Sub", xx, b.cast(at_least(xx, width_f), elem))
            else:
                valid = b.op("And", b.op("And", at_least(yy, real(0.0)),
                                         b.op("Less", yy, height_f)),
                             b.op("And", at_least(xx, real(0.0)),
                                  b.op("Less", xx, width_f)))
            weight = b.op("Mul", b.op("Mul", wy, wx), b.cast(valid, elem))
            if b.opset >= 9:
                yy = b.op("Where", valid, yy, real(0.0))
                xx = b.op("Where", valid, xx, real(0.0))
            else:
                yy, xx = (b.op("Mul", v, b.cast(valid, elem)) for v in (yy, xx))
            index = b.cast(b.op("Add", b.op("Mul", yy, width_f), xx), TensorProto.INT64)
            if static is None:
                index = b.op("Reshape", index, b.op("Concat", n_1, b.ints(
                    [offset_group, 1, -1]), axis=0))                  # (N, G, 1, K*P)
                index = b.op("Expand", index, b.op("Concat", n_1, b.ints([offset_group]),
                                                   channels, b.ints([1]), axis=0))
                sampled = b.op("GatherElements", flat_x, index, axis=3)  # (N, G, C/G, K*P)
            else:
                index = b.reshape(index, [static[0], offset_group, -1])  # (N, G, K*P)
                if first_row is not None:  # (one (n, g): its first row is 0)
                    index = b.op("Add", index, first_row)
                sampled = b.op("Transpose", b.op("Gather", rows, index, axis=0),
                               perm=[0, 1, 3, 2])                      # (N, G, C/G, K*P)
            weight = b.op("Reshape", weight, b.op("Concat", n_1, b.ints([offset_group, 1, -1]),
                                                  axis=0))
            term = b.op("Mul", sampled, weight)
            total = term if total is None else b.op("Add", total, term)
    if _present(node.input, 4):
        mask = b.op("Reshape", "mask", b.op("Concat", n_1, b.ints([offset_group, 1, -1]),
                                            axis=0))
        total = b.op("Mul", total, mask)
    # (N, C, K, P) -> (N, group, C/group * K, P)
    points = b.op("ReduceProd", out_hw, keepdims=1)                       # oH * oW
    columns = b.op("Reshape", total, b.op("Concat", n_1, b.ints([group, -1]), points,
                                          axis=0))
    out_per_group = b.op("Div", b.slice(b.op("Shape", "W"), [0], [1], [0]), b.ints([group]))
    weights = b.op("Reshape", "W", b.op("Concat", b.ints([group]), out_per_group,
                                        b.ints([-1]), axis=0))        # (group, oC/g, C/g K)
    y = b.op("MatMul", weights, columns)                      # (N, group, oC/group, P)
    y = b.op("Reshape", y, b.op("Concat", n_1, b.ints([-1]), out_hw, axis=0))
    if _present(node.input, 3):
        y = b.op("Add", y, b.reshape("B", [1, -1, 1, 1]))
    return b.function(DOMAIN, "deform_conv", formal_inputs(node, ["X", "W", "offset", "B", "mask"]),
                      [y])


# -- Conv with weights computed at run time -------------------------------------------------


@declining
def build_conv_run_time_weights(ctx) -> FunctionProto | None:
    """``Conv`` whose weights are not a constant, as one matrix product per group of the
    kernel taps' strided slices (OpenVINO's CPU plugin convolves with no weights of a
    dynamic shape)."""
    node = ctx.node
    elem = float_elem(ctx, 0)
    weight_shape = ctx.shape(node.input[1]) if len(node.input) > 1 else None
    kernel = ctx.attribute("kernel_shape") or (weight_shape[2:] if weight_shape else None)
    if (elem is None or not kernel or None in kernel or len(node.input) not in (2, 3)
            or not all(_present(node.input, i) for i in range(len(node.input)))
            or len(node.output) != 1 or ctx.attribute("auto_pad", "NOTSET") not in (
                "NOTSET", "VALID", b"NOTSET", b"VALID")
            or not attributes_known(node, ["auto_pad", "dilations", "group", "kernel_shape",
                                           "pads", "strides"])):
        raise Declined("needs X of a known float type, W, an optional B, the kernel's shape "
                       "known, auto_pad NOTSET or VALID, one output")
    if ctx.constant(node.input[1]) is not None:
        raise Declined("the weights are a constant")
    if len(kernel) > MAX_CONV_RANK or math.prod(kernel) > MAX_CONV_TAPS:
        raise Declined(f"at most {MAX_CONV_RANK} spatial axes and {MAX_CONV_TAPS} kernel taps")
    rank = len(kernel)
    strides = ctx.attribute("strides") or [1] * rank
    dilations = ctx.attribute("dilations") or [1] * rank
    pads = ctx.attribute("pads") or [0] * (2 * rank)
    group = ctx.attribute("group", 1)
    b = Body(body_opset(ctx))
    x = "X"
    if any(pads):
        x = b.op("Pad", x, b.ints([0, 0, *pads[:rank], 0, 0, *pads[rank:]]))
    shape = b.op("Shape", x)
    n_1 = b.slice(shape, [0], [1], [0])
    grouped = b.op("Reshape", x, b.op("Concat", n_1, b.ints([group, -1]),
                                      b.slice(shape, [2], [2 + rank], [0]), axis=0))
    big = np.iinfo(np.int64).max
    taps = []
    for tap in np.ndindex(*kernel):  # row-major, as W's kernel axes flatten
        starts = [t * d for t, d in zip(tap, dilations)]
        ends = [-(k - 1 - t) * d or big for t, k, d in zip(tap, kernel, dilations)]
        taps.append(b.slice(grouped, starts, ends, list(range(3, 3 + rank)), strides))
    stacked = b.op("Concat", *taps, axis=2) if len(taps) > 1 else taps[0]  # (N, G, K Cg, O..)
    out_shape = b.op("Shape", stacked)
    columns = b.op("Reshape", stacked, b.op("Concat", b.slice(out_shape, [0], [3], [0]),
                                            b.ints([-1]), axis=0))        # (N, G, K Cg, L)
    w_shape = b.op("Shape", "W")
    weights = b.op("Reshape", "W", b.op("Concat", b.ints([group, -1]),
                                        b.slice(w_shape, [1], [2], [0]),
                                        b.ints([len(taps)]), axis=0))    # (G, Mg, Cg, K)
    weights = b.op("Reshape", b.op("Transpose", weights, perm=[0, 1, 3, 2]),
                   b.ints([0, 0, -1]))                                    # (G, Mg, K Cg)
    y = b.op("MatMul", weights, columns)                                  # (N, G, Mg, L)
    y = b.op("Reshape", y, b.op("Concat", n_1, b.ints([-1]),
                                b.slice(out_shape, [3], [3 + rank], [0]), axis=0))
    if len(node.input) == 3:
        y = b.op("Add", y, b.reshape("B", [-1] + [1] * rank))
    return b.function(DOMAIN, "conv_run_time_weights", formal_inputs(node, ["X", "W", "B"]), [y])


def samples() -> dict[str, list[OpSample]]:
    """The samples of this module's ops, by op type."""
    return {
        "LpPool": [
            OpSample(["T[1,3,7]"], attributes=dict(kernel_shape=[2]), opset=22,
                     name="1d-default", dtypes=["float", "double"]),
            OpSample(["T[2,2,5,6]"], attributes=dict(kernel_shape=[3, 2], strides=[2, 1],
                                                     pads=[1, 0, 1, 1], p=3), opset=18,
                     name="2d-pads-p3", tolerance=(1e-5, 1e-5), dtypes=["float"]),
            OpSample(["T[1,2,6,6]"], attributes=dict(kernel_shape=[2, 2], p=1,
                                                     auto_pad="VALID"), opset=11,
                     name="valid-p1", dtypes=["float"]),
            OpSample(["T[1,1,7,7]"], attributes=dict(kernel_shape=[2, 2], dilations=[2, 2]),
                     opset=22, name="dilations", tolerance=(1e-5, 1e-5), dtypes=["float"]),
            *[OpSample(["T[1,2,6,5]"], attributes=dict(kernel_shape=[3, 2], strides=[2, 2],
                                                       auto_pad=mode), opset=18,
                       name=mode.lower(), tolerance=(1e-5, 1e-5), dtypes=["float"])
              for mode in ("SAME_UPPER", "SAME_LOWER")]],
        "MaxUnpool": [
            OpSample(["T[1,1,2,2]", Arg("int64[1,1,2,2]", values=[[[[5, 7], [13, 15]]]])],
                     attributes=dict(kernel_shape=[2, 2], strides=[2, 2]), opset=opset,
                     name="plain", dtypes=["float"]) for opset in (13, 22)] + [
            OpSample(["T[1,1,2,2]", Arg("int64[1,1,2,2]", values=[[[[5, 7], [13, 15]]]]),
                      Arg("int64[4]", values=[1, 1, 5, 5])],
                     attributes=dict(kernel_shape=[2, 2], strides=[2, 2]), opset=22,
                     name="output-shape", dtypes=["float", "int32"]),
            OpSample(["T[2,3,3]", Arg("int64[2,3,3]", values=lambda rng, shape: (
                rng.permutation(30)[:18].reshape(shape)))],
                     attributes=dict(kernel_shape=[2], strides=[2], pads=[0, 1]), opset=22,
                     name="1d-pads", dtypes=["float"])],
        "DeformConv": [
            OpSample(["T[1,4,5,6]", "T[6,2,3,2]", Arg("T[1,24,2,5]", low=-1.5, high=1.5),
                      "T[6]", Arg("T[1,12,2,5]", low=0.0, high=1.0)],
                     attributes=dict(kernel_shape=[3, 2], group=2, offset_group=2,
                                     strides=[2, 1], pads=[1, 0, 0, 0], dilations=[1, 1]),
                     opset=22, name="groups-mask-bias", tolerance=(1e-5, 1e-5)),
            OpSample(["T[2,1,4,4]", "T[2,1,2,2]", Arg("T[2,8,4,5]", low=-2.0, high=2.0)],
                     attributes=dict(pads=[1, 1, 1, 1], dilations=[2, 1]), opset=19,
                     name="pads-dilations", tolerance=(1e-5, 1e-5))],
        "Conv": [
            OpSample(["T[2,4,7,6]", "T[6,2,3,2]", "T[6]"], attributes=dict(
                kernel_shape=[3, 2], group=2, strides=[2, 1], pads=[1, 0, 2, 1],
                dilations=[1, 2]), opset=22, name="2d-groups-bias", tolerance=(1e-5, 1e-5),
                dtypes=["float"]),
            OpSample(["T[1,3,9]", "T[4,3,3]"], attributes=dict(auto_pad="VALID"), opset=11,
                     name="1d-valid", tolerance=(1e-5, 1e-5), dtypes=["float"]),
            OpSample(["T[1,2,4,5,5]", "T[3,2,2,2,3]", "T[3]"], attributes=dict(
                pads=[0, 1, 1, 1, 0, 1], strides=[1, 2, 2]), opset=18, name="3d",
                     tolerance=(1e-5, 1e-5), dtypes=["float"])],
    }
