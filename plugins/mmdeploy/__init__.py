"""Remedies ``mmdeploy``: OpenMMLab (mmdeploy / mmcv) custom ops and the OpenVINO-named
detection ops exported next to them.

Decompositions (domains ``mmdeploy`` and ``mmcv``, each attribute baked into the body):

* ``grid_sampler(input, grid)``, exactly ``torch.nn.functional.grid_sample``:
  ``interpolation_mode`` 0/1/2 = bilinear/nearest/bicubic, ``padding_mode`` 0/1/2 =
  zeros/border/reflection, ``align_corners`` 0/1. From ai.onnx 16: ``GridSample`` (modes
  ``linear``/``nearest``/``cubic`` from opset 20). Opsets 11-15 (bilinear and nearest): the
  grid is unnormalised (``x = (g + 1) / 2 * (W - 1)`` with ``align_corners``, else ``((g + 1)
  W - 1) / 2``), clamped to ``[0, W - 1]`` (border) or reflected about ``[0, W - 1]`` /
  ``[-0.5, W - 0.5]`` then clamped (reflection); nearest rounds half to even, bilinear mixes
  the four neighbours ``(floor, floor + 1)`` with weights ``(x1 - x)(y1 - y)`` etc.;
  neighbours outside the input are 0. They are gathered as rows of the ``(N*H*W, C)``
  transposed input.
* ``MMCVRoiAlign(input, rois)`` (rois rows ``[batch, x1, y1, x2, y2]``, ``mode="avg"``) ->
  ``RoiAlign(input, rois[:, 1:5], int64(rois[:, 0]))`` with ``output_height/width``,
  ``spatial_scale``, ``sampling_ratio``; ``aligned=1`` is
  ``coordinate_transformation_mode="half_pixel"`` (ai.onnx >= 16), ``aligned=0`` the
  ``output_half_pixel`` behaviour (ai.onnx >= 10). Both are Caffe2's RoIAlign, as mmcv's.
  ``mode="max"`` is declined (ONNX's max mode takes the max of the weighted corner values,
  mmcv the max of the interpolated samples): the kernel runs it.
* ``MMCVDeformConv2d(input, offset, weight)`` and ``MMCVModulatedDeformConv2d(input, offset,
  mask, weight[, bias])``: ``stride``/``padding``/``dilation`` (symmetric pads), ``groups``,
  ``deform_groups`` (also spelled ``group``, ``deformable_group(s)``); ``im2col_step`` only
  tunes memory. ``y = sum_k w_k * mask_k * x(p + p_k + offset_k)``, bilinear with zero
  padding (a point with ``-1 < y < H``, ``-1 < x < W`` mixes its in-image neighbours),
  offsets ``(dy, dx)`` per tap. From ai.onnx 19: ``DeformConv`` (onnxruntime 1.32 has a CPU
  kernel). Opsets 11-18: the sampled columns are gathered as rows of the ``(N*H*W*dg, C/dg)``
  transposed input, weighted, masked and multiplied with the ``(groups, O/groups, C/groups *
  K)`` weight (the kernel size must be known: the weight's declared shape or initializer).
  Nodes with ``groups > 1`` and ``deform_groups > 1`` together are declined (mmdeploy's
  onnxruntime kernel assigns offset groups per conv group, unlike mmcv's PyTorch op).
* ``TRTBatchedNMS(boxes (B, N, 1|C, 4), scores (B, N, C))`` -> ``dets (B, K, 5)`` ``[x1, y1,
  x2, y2, score]``, ``labels (B, K)``, with ``return_index`` also ``index (B, K)`` (``K =
  keep_topk``), ai.onnx >= 11: per class != ``background_label_id`` the candidates ``score >
  score_threshold``, their ``topk`` best (all when ``topk <= 0`` or ``> N``), greedy
  ``NonMaxSuppression`` at IoU ``> iou_threshold`` (reversed boxes enter as empty ones: the
  plugin gives them no area), then the ``keep_topk`` best (class, box) pairs per image by
  ``TopK`` (equal scores: lower class, then lower box), boxes clipped to [0, 1] with
  ``clip_boxes``; empty slots are 0 / -1 / -1; ``index`` is the box (``class * N + box`` for
  per-class boxes). ``labels``/``index`` take the integer type the model declares (int64
  when none, as torch's exporter writes; the plugin's are int32). ``is_normalized`` has no
  effect (mmdeploy's IoU has no pixel offset). Declined: ``keep_topk <= 0``, ``score_threshold
  < 0`` (the kernel follows the plugin's arrays there), ``num_classes`` differing from the
  scores' declared class count. Where the plugin leaves its outputs unwritten
  (``keep_topk > topk``) the extra slots are empty ones.

Kernels (numpy, ``rewriter_custom_ops.mm_*`` / ``ov_*``, float32):

* ``MMCVRoiAlign`` (both modes), ``MMCVRoIAlignRotated`` (rotated boxes ``[batch, cx, cy, w,
  h, theta]``), ``NMSMatch(boxes, scores, iou_thr, score_thr)`` (``[batch, class, keeper,
  suppressed]`` rows): mmdeploy's onnxruntime kernels.
* ``TRTBatchedNMS``: mmdeploy's TensorRT plugin transcribed step by step (the oracle of the
  decomposition; it always returns the three outputs, so onnxruntime runs it only for nodes
  with ``index``, the reference evaluator for all).
* OpenVINO's ``DeformableConv2D`` (default and ``org.openvinotoolkit`` domains): its
  ``DeformableConvolution-8`` semantics (samples outside ``[0, H) x [0, W)`` are 0, the last
  row/column extends to the border) with ``strides``, ``pads``, ``dilations``, ``group``,
  ``deformable_groups``; ``auto_pad`` other than ``NOTSET`` is declined. It is also
  decomposed (:mod:`rewriter_plugins.openvino_deformable`: onnx-lowering's ``DeformConv``
  body with OpenVINO's border rule, any opset from 7), checked against this kernel.
* OpenVINO's ``ExperimentalDetectronDetectionOutput`` (``org.openvinotoolkit``): box
  refinement, per-class NMS and the per-image cut exactly as OpenVINO's CPU plugin (see
  ``rewriter_custom_ops.ov_detectron_detection_output``).
"""

from __future__ import annotations

import numpy as np
from onnx import FunctionProto, TensorProto, helper
from rewriter_plugins import openvino_deformable

from rewriter.plugin import Arg, Declined, FunctionBuilder, OpSample, hookimpl
from rewriter.plugin import present as _present

DOMAINS = ("mmdeploy", "mmcv")
BODY_DOMAIN = "mmdeploy"  # the domain of the bodies' FunctionProtos
OPENVINO = "org.openvinotoolkit"

GRID_SAMPLE_OPSETS = (16, None)
GRID_GATHER_OPSETS = (11, 15)  # Range, Round; GridSample arrives in 16
ROI_ALIGN_OPSETS = (10, None)
ROI_ALIGN_HALF_PIXEL_OPSET = 16
DEFORM_CONV_OPSETS = (19, None)
DEFORM_GATHER_OPSETS = (11, 18)  # Range; DeformConv arrives in 19
BATCHED_NMS_OPSETS = (11, None)  # ScatterND, GatherND, Range, TopK with a k input

_GRID_MODES_16 = {0: "bilinear", 1: "nearest", 2: "bicubic"}
_GRID_MODES_20 = {0: "linear", 1: "nearest", 2: "cubic"}
_GRID_PADDING = {0: "zeros", 1: "border", 2: "reflection"}


def _attributes(node) -> dict:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _is_float(ctx) -> bool:
    types = list(ctx.input_types or [])
    return not types or types[0] in (None, "tensor(float)")


def _function(name: str, inputs: list[str], outputs: list[str], nodes, opset: int
              ) -> FunctionProto:
    return helper.make_function(BODY_DOMAIN, name, inputs, outputs, nodes,
                                [helper.make_opsetid("", opset)])


def build_grid_sampler(ctx) -> FunctionProto | None:
    """grid_sampler -> GridSample with the integer codes spelled out."""
    node = ctx.node
    attrs = _attributes(node)
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
    return _function("grid_sampler", ["input", "grid"], ["output"], body,
                     max(ctx.opset, GRID_SAMPLE_OPSETS[0]))


_ROI_ALIGN_ATTRS = {"output_height", "output_width", "spatial_scale", "sampling_ratio",
                    "mode", "aligned"}


def build_roi_align(ctx) -> FunctionProto | None:
    """MMCVRoiAlign (avg) -> RoiAlign on the split rois."""
    node = ctx.node
    attrs = _attributes(node)
    if set(attrs) - _ROI_ALIGN_ATTRS or not _is_float(ctx):
        raise Declined("unknown attribute(s), or inputs not float")
    if not (_present(node.input, 0) and _present(node.input, 1)) or len(node.output) != 1:
        raise Declined("needs input and rois given and one output")
    mode = attrs.get("mode", b"avg")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if mode != "avg":
        raise Declined("only mode 'avg' is decomposed")
    aligned = attrs.get("aligned", 1)
    roi_attrs = dict(output_height=attrs.get("output_height", 1),
                     output_width=attrs.get("output_width", 1),
                     spatial_scale=float(attrs.get("spatial_scale", 1.0)),
                     sampling_ratio=attrs.get("sampling_ratio", 0), mode="avg")
    if ctx.opset >= ROI_ALIGN_HALF_PIXEL_OPSET:
        roi_attrs["coordinate_transformation_mode"] = (
            "half_pixel" if aligned else "output_half_pixel")
    elif aligned:
        raise Declined("aligned=1 needs RoiAlign's half_pixel mode (opset 16)")
    body = [
        helper.make_node("Constant", [], ["zero"],
                         value=helper.make_tensor("zero", TensorProto.INT64, [], [0])),
        helper.make_node("Constant", [], ["box_columns"],
                         value=helper.make_tensor("box_columns", TensorProto.INT64, [4],
                                                  [1, 2, 3, 4])),
        helper.make_node("Gather", ["rois", "zero"], ["batch_float"], axis=1),
        helper.make_node("Cast", ["batch_float"], ["batch_indices"], to=TensorProto.INT64),
        helper.make_node("Gather", ["rois", "box_columns"], ["boxes"], axis=1),
        helper.make_node("RoiAlign", ["input", "boxes", "batch_indices"], ["output"],
                         **roi_attrs),
    ]
    return _function("mmcv_roi_align", ["input", "rois"], ["output"], body,
                     max(ctx.opset, ROI_ALIGN_OPSETS[0]))


_DEFORM_ALIASES = {
    "stride": "stride", "padding": "padding", "dilation": "dilation",
    "groups": "groups", "group": "groups",
    "deform_groups": "deform_groups", "deformable_groups": "deform_groups",
    "deformable_group": "deform_groups", "im2col_step": None,
}


def _deform_conv_attrs(node) -> dict | None:
    """DeformConv attributes from an mmcv node's, or None for forms it cannot express."""
    given: dict = {}
    for name, value in _attributes(node).items():
        if name not in _DEFORM_ALIASES:
            return None
        canonical = _DEFORM_ALIASES[name]
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
    if attrs is None or not _is_float(ctx) or len(node.output) != 1:
        raise Declined("attributes DeformConv cannot express, inputs not float, or more than one "
                       "output")
    if len(node.input) != 3 or not all(node.input):
        raise Declined("needs input, offset and weight, none left empty")
    body = [helper.make_node("DeformConv", ["input", "weight", "offset"], ["output"],
                             **attrs)]
    return _function("mmcv_deform_conv", ["input", "offset", "weight"], ["output"], body,
                     max(ctx.opset, DEFORM_CONV_OPSETS[0]))


def build_modulated_deform_conv(ctx) -> FunctionProto | None:
    """MMCVModulatedDeformConv2d(input, offset, mask, weight[, bias]) -> DeformConv(input,
    weight, offset, bias, mask)."""
    node = ctx.node
    attrs = _deform_conv_attrs(node)
    if attrs is None or not _is_float(ctx) or len(node.output) != 1:
        raise Declined("attributes DeformConv cannot express, inputs not float, or more than one "
                       "output")
    if not all(_present(node.input, i) for i in range(4)) or len(node.input) > 5:
        raise Declined("needs input, offset, mask and weight given (and at most a bias)")
    with_bias = _present(node.input, 4)
    inputs = ["input", "offset", "mask", "weight", "bias"]
    conv_inputs = ["input", "weight", "offset", "bias" if with_bias else "", "mask"]
    body = [helper.make_node("DeformConv", conv_inputs, ["output"], **attrs)]
    return _function("mmcv_modulated_deform_conv", inputs[:len(node.input)], ["output"], body,
                     max(ctx.opset, DEFORM_CONV_OPSETS[0]))


class _Body(FunctionBuilder):
    """A function body under construction (constants are int64 unless told otherwise)."""

    default_dtype = np.int64

    def dim(self, x: str, index: int) -> str:
        """Dimension ``index`` of ``x`` as a 1-element vector."""
        return self.op("Slice", self.op("Shape", x), self.const([index]),
                       self.const([index + 1]))


# -- grid_sampler before GridSample ------------------------------------------------------


def _grid_source(g: _Body, coord: str, size: str, align: int, padding: int) -> str:
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
    attrs = _attributes(node)
    if set(attrs) - {"interpolation_mode", "padding_mode", "align_corners"}:
        raise Declined("unknown attribute(s): only interpolation_mode, padding_mode, align_corners")
    if not (_present(node.input, 0) and _present(node.input, 1)) or len(node.output) != 1:
        raise Declined("needs input and grid given and one output")
    if not _is_float(ctx):
        raise Declined("inputs must be float")
    mode, padding = attrs.get("interpolation_mode", 0), attrs.get("padding_mode", 0)
    align = attrs.get("align_corners", 0)
    if mode not in (0, 1) or padding not in (0, 1, 2) or align not in (0, 1):
        raise Declined("interpolation_mode, padding_mode or align_corners out of range (bilinear "
                       "or nearest; zeros, border or reflection)")
    g = _Body(ctx.opset)
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


def _kernel_size(ctx, weight: str) -> tuple[int, int] | None:
    """(kh, kw) of a weight, from its declared shape or its constant value."""
    dims = _declared_dims(ctx, weight)
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
    g = _Body(ctx.opset)
    zero, one = g.const(0.0, np.float32), g.const(1.0, np.float32)
    n, c = g.dim("input", 0), g.dim("input", 1)
    h, w = g.dim("input", 2), g.dim("input", 3)
    height, width = (g.op("Cast", d, to=TensorProto.FLOAT) for d in (h, w))
    out_h, out_w = g.dim("offset", 2), g.dim("offset", 3)
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
                                            g.dim(weights, 1), axis=0))
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
    if attrs is None or not _is_float(ctx) or len(node.output) != 1:
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
    if attrs is None or not _is_float(ctx) or len(node.output) != 1:
        raise Declined("attributes DeformConv cannot express, inputs not float, or more than one "
                       "output")
    if not all(_present(node.input, i) for i in range(4)) or len(node.input) > 5:
        raise Declined("needs input, offset, mask and weight given (and at most a bias)")
    inputs = ["input", "offset", "mask", "weight", "bias"][:len(node.input)]
    return _deform_conv_gather(ctx, attrs, inputs, "mmcv_modulated_deform_conv_gather")


# -- TRTBatchedNMS -----------------------------------------------------------------------

_BATCHED_NMS_ATTRS = {"background_label_id", "num_classes", "topk", "keep_topk",
                      "score_threshold", "iou_threshold", "is_normalized", "clip_boxes",
                      "return_index"}
_INT_TYPES = {TensorProto.INT32, TensorProto.INT64}


def _declared_dims(ctx, name: str) -> list[int | None] | None:
    declared = ctx.declared.get(name) if ctx.declared else None
    if declared is None or not declared.tensor_type.HasField("shape"):
        return None
    return [d.dim_value if d.HasField("dim_value") else None
            for d in declared.tensor_type.shape.dim]


def _declared_int_type(ctx, name: str) -> int | None:
    """The integer element type the model declares for ``name`` (int64 when it says none,
    as torch's exporter writes; None: a type the plugin cannot produce)."""
    declared = ctx.declared.get(name) if ctx.declared else None
    elem = declared.tensor_type.elem_type if declared is not None else 0
    if not elem:
        return TensorProto.INT64
    return elem if elem in _INT_TYPES else None


def build_batched_nms(ctx) -> FunctionProto | None:
    """TRTBatchedNMS -> per-class NonMaxSuppression, then TopK over the kept (class, box)
    scores of each image (semantics: ``rewriter_custom_ops.mm_batched_nms``)."""
    node = ctx.node
    attrs = _attributes(node)
    if set(attrs) - _BATCHED_NMS_ATTRS or not _is_float(ctx):
        raise Declined("unknown attribute(s), or inputs not float")
    if len(node.input) != 2 or not all(node.input):
        raise Declined("needs boxes and scores, none left empty")
    return_index = int(attrs.get("return_index", 0))
    outputs = ["dets", "labels", "index"]
    n_out = len(node.output)
    if return_index not in (0, 1) or not 1 <= n_out <= 2 + return_index:
        raise Declined("return_index must be 0 or 1, with 1 to 2 + return_index outputs")
    if "num_classes" not in attrs or "keep_topk" not in attrs:
        raise Declined("num_classes and keep_topk must be given")
    num_classes, keep_topk = int(attrs["num_classes"]), int(attrs["keep_topk"])
    topk = int(attrs.get("topk", 0))
    score_threshold = float(attrs.get("score_threshold", 0.0))
    if keep_topk <= 0 or score_threshold < 0:
        raise Declined("keep_topk must be positive and score_threshold not negative")
    score_dims = _declared_dims(ctx, node.input[1])
    box_dims = _declared_dims(ctx, node.input[0])
    if score_dims is not None and (len(score_dims) != 3
                                   or score_dims[2] not in (None, num_classes)):
        raise Declined("scores are not (batch, boxes, num_classes)")
    if box_dims is not None and (len(box_dims) != 4 or box_dims[3] not in (None, 4)):
        raise Declined("boxes are not (batch, boxes, classes or 1, 4)")
    int_types = [_declared_int_type(ctx, name) for name in node.output[1:]]
    if None in int_types:
        raise Declined("the labels' (and index's) integer type is not declared")
    g = _Body(ctx.opset)
    minus_inf = g.const(-np.inf, np.float32)
    n, c = g.dim("scores", 1), g.dim("scores", 2)
    n_scalar = g.op("Squeeze", n, axes=[0]) if ctx.opset < 13 else g.op("Squeeze", n)
    c_scalar = g.op("Squeeze", c, axes=[0]) if ctx.opset < 13 else g.op("Squeeze", c)
    classes = g.op("Range", g.const(0), c_scalar, g.const(1))
    # candidates: [B, C, N], -inf where not one
    keep = g.op("Greater", "scores", g.const(score_threshold, np.float32))
    background = int(attrs.get("background_label_id", 0))
    if background >= 0:
        keep = g.op("And", keep, g.op("Not", g.op("Equal", classes, g.const(background))))
    masked = g.op("Transpose", g.op("Where", keep, "scores", minus_inf), perm=[0, 2, 1])
    if topk > 0:  # the topk best per class (all N when topk > N)
        limit = g.const([topk])
        k = g.op("Where", g.op("Less", n, limit), n, limit)  # Min(int64) needs opset 12
        _, best = g.op("TopK", masked, k, axis=2, outputs=2)
        chosen = g.op("ScatterElements", g.fill(g.op("Shape", masked), 0.0), best,
                      g.fill(g.op("Shape", best), 1.0), axis=2)
        masked = g.op("Where", g.op("Cast", chosen, to=TensorProto.BOOL), masked, minus_inf)
    # per-class boxes [B, N, C, 4]; for NMS a reversed box becomes an empty one (overlaps
    # nothing, as the plugin's zero area)
    boxes = g.op("Expand", "boxes", g.op("Concat", g.const([1, 1]), c, g.const([1]), axis=0))
    x1y1, x2y2 = g.slice(boxes, [0], [2], [3]), g.slice(boxes, [2], [4], [3])
    reversed_box = g.op("Greater", g.reduce_sum(g.op("Cast", g.op("Less", x2y2, x1y1),
                                                       to=TensorProto.FLOAT), [3]),
                        g.const(0.0, np.float32))
    nms_boxes = g.op("Where", reversed_box, g.op("Concat", x1y1, x1y1, axis=3), boxes)
    nms_boxes = g.op("Reshape", g.op("Transpose", nms_boxes, perm=[0, 2, 1, 3]),
                     g.op("Concat", g.const([-1]), n, g.const([4]), axis=0))  # [B*C, N, 4]
    nms_scores = g.op("Reshape", masked, g.op("Concat", g.const([-1, 1]), n, axis=0))
    selected = g.op("NonMaxSuppression", nms_boxes, nms_scores, g.const([keep_topk]),
                    g.const([float(attrs.get("iou_threshold", 0.0))], np.float32),
                    g.const([np.finfo(np.float32).min], np.float32))
    image_class = g.op("Gather", selected, g.const(0), axis=1)
    batch, cls = g.op("Div", image_class, c_scalar), g.op("Mod", image_class, c_scalar)
    candidate = g.op("Add", g.op("Mul", cls, n_scalar),
                     g.op("Gather", selected, g.const(2), axis=1))  # class * N + box
    # the kept scores, dense [B, C*N]; then the keep_topk best (padded: K may exceed C*N)
    flat = g.op("Reshape", masked, g.const([0, -1]))
    position = g.op("Concat", g.unsqueeze(batch, [1]), g.unsqueeze(candidate, [1]), axis=1)
    dense = g.op("ScatterND", g.fill(g.op("Shape", flat), -np.inf), position,
                 g.op("GatherND", flat, position))
    b = g.dim("scores", 0)
    padding = g.fill(g.op("Concat", b, g.const([keep_topk]), axis=0), -np.inf)
    values, slots = g.op("TopK", g.op("Concat", dense, padding, axis=1), g.const([keep_topk]),
                         axis=1, outputs=2)
    valid = g.op("Greater", values, minus_inf)
    slots = g.op("Where", valid, slots, g.const(0))
    out_cls, box = g.op("Div", slots, n_scalar), g.op("Mod", slots, n_scalar)
    b_scalar = g.op("Squeeze", b, axes=[0]) if ctx.opset < 13 else g.op("Squeeze", b)
    image = g.unsqueeze(g.op("Range", g.const(0), b_scalar, g.const(1)), [1])
    rows = g.op("Add", g.op("Mul", g.op("Add", g.op("Mul", image, n_scalar), box), c_scalar),
                out_cls)
    picked = g.op("Gather", g.op("Reshape", boxes, g.const([-1, 4])), rows, axis=0)
    if int(attrs.get("clip_boxes", 1)):
        picked = g.op("Max", g.op("Min", picked, g.const(1.0, np.float32)),
                      g.const(0.0, np.float32))
    zero = g.const(0.0, np.float32)
    dets_box = g.op("Where", g.unsqueeze(valid, [2]), picked, zero)
    dets_score = g.unsqueeze(g.op("Where", valid, values, zero), [2])
    g.op("Concat", dets_box, dets_score, outputs=["dets"], axis=2)
    if n_out > 1:
        labels = g.op("Where", valid, out_cls, g.const(-1))
        g.op("Cast", labels, outputs=["labels"], to=int_types[0])
    if n_out > 2:
        shared = g.op("Equal", g.dim("boxes", 2), g.const([1]))
        box_index = g.op("Where", shared, box, slots)  # slots: class * N + box
        g.op("Cast", g.op("Where", valid, box_index, g.const(-1)), outputs=["index"],
             to=int_types[1])
    return g.function(BODY_DOMAIN, "trt_batched_nms", ["boxes", "scores"], outputs[:n_out])


# -- oracles and samples --------------------------------------------------------------------


def grid_sample_reference(x, grid, interpolation_mode=0, padding_mode=0, align_corners=0):
    """``grid_sampler``: torch's own ``torch.nn.functional.grid_sample`` (the producer)."""
    import torch

    y = torch.nn.functional.grid_sample(
        torch.from_numpy(np.ascontiguousarray(x)), torch.from_numpy(np.ascontiguousarray(grid)),
        mode=["bilinear", "nearest", "bicubic"][interpolation_mode],
        padding_mode=["zeros", "border", "reflection"][padding_mode],
        align_corners=bool(align_corners))
    return y.numpy()


def deform_conv_reference(x, offset, *tensors, **attributes):
    """``MMCVDeformConv2d(input, offset, weight)`` / ``MMCVModulatedDeformConv2d(input,
    offset, mask, weight[, bias])``: the numpy deformable convolution
    (``rewriter_custom_ops.mm_deform_conv``, checked against onnxruntime's DeformConv)."""
    from rewriter_custom_ops.mm_deform_conv import deform_conv2d

    mask, weight, bias = (None, tensors[0], None) if len(tensors) == 1 else (
        tensors[0], tensors[1], tensors[2] if len(tensors) > 2 else None)
    given = {_DEFORM_ALIASES[k]: v for k, v in attributes.items() if _DEFORM_ALIASES.get(k)}
    pairs = {}
    for name, default in (("stride", 1), ("padding", 0), ("dilation", 1)):
        value = list(given.get(name, [default]))
        pairs[name] = value * 2 if len(value) == 1 else value
    return deform_conv2d(x, offset, weight, mask, bias, strides=pairs["stride"],
                         pads=pairs["padding"] * 2, dilations=pairs["dilation"],
                         groups=given.get("groups", 1),
                         offset_groups=given.get("deform_groups", 1))


def _grid(extreme: bool):
    """Grid points on, beyond and far beyond the borders (onnxruntime 1.32's GridSample
    misplaces (1e6, -1e7) with border padding, so that one only below opset 16)."""
    def draw(rng, shape):
        grid = rng.uniform(-1.3, 1.3, shape)
        grid[0, 0, :4] = [[-1, -1], [1, 1], [0, 0], [50, -80]]
        if extreme:
            grid[0, 0, 4] = [1e6, -1e7]
        return grid
    return draw


def _rois(rng, shape):
    count = shape[0]
    x1, y1 = rng.uniform(-4, 20, count), rng.uniform(-4, 20, count)
    return np.stack([rng.integers(0, 2, count), x1, y1, x1 + rng.uniform(0, 12, count),
                     y1 + rng.uniform(0, 12, count)], 1)


def _offsets(rng, shape):
    """Offsets near half-pixel positions, a little off them."""
    return np.round(rng.uniform(-3, 3, shape) * 2) / 2 + rng.uniform(-0.3, 0.3, shape)


def _nms_boxes(rng, shape):
    xy = rng.uniform(0, 1, (*shape[:-1], 2))
    out = np.concatenate([xy, xy + rng.uniform(0.05, 0.6, (*shape[:-1], 2))], -1)
    out[0, 0] = out[0, 0][..., [2, 3, 0, 1]]  # a reversed box overlaps nothing
    return out


def _nms_scores(rng, shape):
    scores = rng.uniform(0, 1, shape)
    scores[-1, :3] = 0.5  # equal scores: lower class, then lower box first
    return scores


def _grid_samples(gather: bool) -> list[OpSample]:
    """Every interpolation/padding code (bicubic from opset 16), align_corners alternating,
    at the two opsets of the registration's range."""
    opsets = (11, 13) if gather else (16, 20)
    return [OpSample(["T[2,3,5,7]", Arg("T[2,4,6,2]", values=_grid(gather))],
                     attributes=dict(interpolation_mode=m, padding_mode=p, align_corners=a),
                     opset=opset, tolerance=(1e-4, 1e-5), name=f"mode{m}-pad{p}-align{a}")
            for opset, first_align in zip(opsets, (0, 1)) for m in range(2 if gather else 3)
            for p in range(3) for a in [(first_align + m + p) % 2]]


def _deform_sample(modulated: bool, with_bias: bool, groups: int, dg: int,
                   opset: int) -> OpSample:
    n, c, h, w, o, kh, kw = 2, 4, 7, 6, 6, 3, 2
    stride, pad, dilation = (2, 1), (1, 1), (1, 2)
    oh = (h + 2 * pad[0] - (dilation[0] * (kh - 1) + 1)) // stride[0] + 1
    ow = (w + 2 * pad[1] - (dilation[1] * (kw - 1) + 1)) // stride[1] + 1
    inputs = [f"T[{n},{c},{h},{w}]", Arg(f"T[{n},{dg * 2 * kh * kw},{oh},{ow}]",
                                         values=_offsets)]
    if modulated:
        inputs.append(Arg(f"T[{n},{dg * kh * kw},{oh},{ow}]", low=0, high=1))
    inputs.append(f"T[{o},{c // groups},{kh},{kw}]")
    if with_bias:
        inputs.append(f"T[{o}]")
    attributes = dict(stride=list(stride), padding=list(pad), dilation=list(dilation),
                      groups=groups, deform_groups=dg)
    if not modulated:
        attributes["im2col_step"] = 32  # tunes memory only
    return OpSample(inputs, attributes=attributes, opset=opset, tolerance=(1e-4, 1e-4),
                    name=f"groups{groups}-dg{dg}" + ("-bias" if with_bias else ""))


_BATCHED_NMS_CASES = [  # (per-class boxes, attributes, outputs)
    (False, dict(background_label_id=-1, topk=6, keep_topk=9, score_threshold=0.2,
                 iou_threshold=0.3, is_normalized=0, clip_boxes=0, return_index=1), 3),
    (True, dict(background_label_id=1, topk=20, keep_topk=7, score_threshold=0.1,
                iou_threshold=0.4, clip_boxes=1, return_index=1), 3),
    (False, dict(keep_topk=40, score_threshold=0.3, iou_threshold=0.0), 2),  # 40 > C * N
]


def _oracles(first_domain: bool) -> dict[tuple[str, tuple], dict]:
    """Per (op, opsets): oracle and samples; the second domain shares the builders, so one
    sample each there checks the domain is matched."""
    def few(samples):
        return samples if first_domain else samples[:1]

    def deform(modulated, opset):
        variants = [(False, 1, 2), (False, 2, 1)] + ([(True, 1, 2), (True, 2, 1)]
                                                     if modulated else [])
        return few([_deform_sample(modulated, bias, g, dg, opset) for bias, g, dg in variants])

    roi = dict(output_height=2, output_width=3, spatial_scale=0.75, sampling_ratio=0,
               mode="avg")
    own = "rewriter_plugins.mmdeploy:"
    return {
        ("grid_sampler", GRID_SAMPLE_OPSETS): dict(
            oracle=own + "grid_sample_reference", samples=few(_grid_samples(False))),
        ("grid_sampler", GRID_GATHER_OPSETS): dict(
            oracle=own + "grid_sample_reference", samples=few(_grid_samples(True))),
        ("MMCVRoiAlign", ROI_ALIGN_OPSETS): dict(oracle="kernel", samples=few([
            OpSample(["T[2,3,12,10]", Arg("T[9,5]", values=_rois)],
                     attributes={**roi, "aligned": aligned}, opset=opset,
                     name=f"aligned{aligned}")
            for opset, aligned in ((16, 0), (16, 1), (11, 0), (20, 1))])),
        ("MMCVDeformConv2d", DEFORM_CONV_OPSETS): dict(
            oracle=own + "deform_conv_reference", samples=deform(False, 19)),
        ("MMCVDeformConv2d", DEFORM_GATHER_OPSETS): dict(
            oracle=own + "deform_conv_reference", samples=deform(False, 13)),
        ("MMCVModulatedDeformConv2d", DEFORM_CONV_OPSETS): dict(
            oracle=own + "deform_conv_reference", samples=deform(True, 19)),
        ("MMCVModulatedDeformConv2d", DEFORM_GATHER_OPSETS): dict(
            oracle=own + "deform_conv_reference", samples=deform(True, 13)),
        # labels/index: int64, what torch's exporter declares (the TensorRT plugin's own
        # are int32; the decomposition follows the model's declaration)
        ("TRTBatchedNMS", BATCHED_NMS_OPSETS): dict(oracle="kernel", samples=[
            OpSample([Arg(f"T[2,10,{3 if per_class else 1},4]", values=_nms_boxes),
                      Arg("T[2,10,3]", values=_nms_scores)], ["T", "int64", "int64"][:n_out],
                     {"num_classes": 3, **attrs}, opset=opset, name=f"case{i}")
            for opset in (11, 13) for i, (per_class, attrs, n_out)
            in enumerate(_BATCHED_NMS_CASES)]),
    }


@hookimpl
def register_decompositions(registry):
    for i, domain in enumerate(DOMAINS):
        checked = _oracles(first_domain=i == 0)

        def add(op_type, builder, opsets, description, domain=domain, checked=checked):
            registry.add(domain, op_type, builder, opsets=opsets, dtypes=("float",),
                         description=description, **checked[(op_type, opsets)])

        add("grid_sampler", build_grid_sampler, GRID_SAMPLE_OPSETS,
            "mmdeploy:grid_sampler -> GridSample")
        add("grid_sampler", build_grid_sampler_gather, GRID_GATHER_OPSETS,
            "mmdeploy:grid_sampler (bilinear/nearest) -> Gather (before GridSample)")
        add("MMCVRoiAlign", build_roi_align, ROI_ALIGN_OPSETS,
            "mmdeploy:MMCVRoiAlign (avg; aligned needs opset 16) -> RoiAlign")
        add("MMCVDeformConv2d", build_deform_conv, DEFORM_CONV_OPSETS,
            "mmdeploy:MMCVDeformConv2d -> DeformConv")
        add("MMCVModulatedDeformConv2d", build_modulated_deform_conv, DEFORM_CONV_OPSETS,
            "mmdeploy:MMCVModulatedDeformConv2d -> DeformConv")
        add("MMCVDeformConv2d", build_deform_conv_gather, DEFORM_GATHER_OPSETS,
            "mmdeploy:MMCVDeformConv2d -> Gather + MatMul (before DeformConv)")
        add("MMCVModulatedDeformConv2d", build_modulated_deform_conv_gather,
            DEFORM_GATHER_OPSETS,
            "mmdeploy:MMCVModulatedDeformConv2d -> Gather + MatMul (before DeformConv)")
    openvino_deformable.register(registry)  # DeformableConv2D, checked against the kernel
    registry.add("mmdeploy", "TRTBatchedNMS", build_batched_nms, opsets=BATCHED_NMS_OPSETS,
                 dtypes=("float",),
                 description="mmdeploy:TRTBatchedNMS -> NonMaxSuppression + TopK",
                 **_oracles(True)[("TRTBatchedNMS", BATCHED_NMS_OPSETS)])


KERNELS = (
    *((domain, "MMCVRoiAlign", "mm_roi_align") for domain in DOMAINS),
    *((domain, "MMCVRoIAlignRotated", "mm_roi_align_rotated") for domain in DOMAINS),
    ("mmdeploy", "NMSMatch", "mm_nms_match"),
    ("mmdeploy", "TRTBatchedNMS", "mm_batched_nms"),
    ("", "DeformableConv2D", "ov_deformable_conv_2d"),
    (OPENVINO, "DeformableConv2D", "ov_deformable_conv_2d"),
    (OPENVINO, "ExperimentalDetectronDetectionOutput", "ov_detectron_detection_output"),
)


@hookimpl
def register_kernels(registry):
    for domain, op_type, module in KERNELS:
        registry.add(domain, op_type, f"rewriter_custom_ops.{module}:kernel",
                     description=f"rewriter_custom_ops.{module}")
