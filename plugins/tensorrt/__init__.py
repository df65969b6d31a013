"""Remedies ``tensorrt``: TensorRT plugin ops found in exported detectors and transformers,
decomposed into standard ONNX, each with a numpy kernel (``rewriter_custom_ops.trt_*``) that
implements the vendor's semantics, so ``compare`` can run the original model.

The ops are matched in the domains exporters put them in: ``""`` (onnx-graphsurgeon),
``TRT`` (``torch.onnx`` ``g.op("TRT::...")``) and ``trt.plugins`` (onnxruntime's TensorRT EP).

* ``EfficientNMS_TRT(boxes, scores[, anchors])`` -> ``num_detections [B,1] int32,
  detection_boxes [B,K,4], detection_scores [B,K], detection_classes [B,K] int32``
  (``K = max_output_boxes``; float32). ``boxes`` is ``[B,N,4]``, ``[B,N,1,4]`` or
  ``[B,N,C,4]``, ``scores`` ``[B,N,C]``. With ``anchors`` (``[1|B,N,4]``) boxes are decoded
  first: corners ``minmax(box) + minmax(anchor)``; center-size ``c = c_b * s_a + c_a``,
  ``s = s_a * exp(s_b)``. ``box_coding=1`` boxes ``(c0, c1, s0, s1)`` become corners
  ``c -/+ s/2``; outputs are always corners. A candidate is an (anchor, class) pair with
  ``score >= score_threshold`` (with ``score_activation``: ``raw >= logit(threshold)``) and
  class != ``background_class``; only the 4096 best candidates per image enter NMS. Greedy
  NMS in descending score order drops a candidate whose IoU with a kept one of the same class
  (any class with ``class_agnostic``) is ``>= iou_threshold``; the first K kept, in score
  order, are written (score passed through the sigmoid with ``score_activation``), the rest
  zero.
* ``EfficientNMS_ONNX_TRT(boxes [B,N,4], scores [B,N,C])`` -> ``selected_indices
  [B*K,3] int32`` rows ``(batch, class, box)``: the same NMS per class, at most
  ``K = max_output_boxes_per_class`` per class and per image, images in order and each in
  score order, the remaining rows repeating the last row (all -1 when nothing is selected);
  ``center_point_box`` is the box coding.
* ``BatchedNMS_TRT`` / ``BatchedNMSDynamic_TRT(boxes [B,N,1|C,4], scores [B,N,C])`` ->
  ``num_detections [B,1] int32, nmsed_boxes [B,K,4], nmsed_scores [B,K], nmsed_classes
  [B,K]`` (float; ``K = keepTopK``). Per class != ``backgroundLabelId``: scores
  ``> scoreThreshold``, the ``topK`` best, greedy NMS dropping IoU ``> iouThreshold`` (boxes
  of either diagonal order); then the K best of all classes, boxes clipped to [0, 1] with
  ``clipBoxes`` (default 1); empty slots have class -1, score 0, box 0. ``shareLocation=0``
  takes per-class boxes. Declined: ``isNormalized=0`` (pixel +1 IoU), ``keepTopK > topK``
  (the plugin leaves the outputs unwritten), float16.
* ``fMHAPlugin(q, k, v)`` (flash attention, ``[B,S,H,D]`` each, default domain):
  ``out[b,i,h] = softmax_j(scale * q[b,i,h] . k[b,j,h]) v[b,j,h]``, computed in float32 and
  cast back; ``causal=1`` masks ``j > i``. Declined: ``dropout_p != 0``,
  ``return_attn_probs != 0``.
* ``DisentangledAttention_TRT(c2c [N,S,S], c2p [N,S,L], p2c [N,S,L])`` (DeBERTa, version 2
  with log buckets): ``out[n,r,c] = (c2c[n,r,c] + c2p[n,r,I(r-c)] + p2c[n,c,I(r-c)]) *
  factor`` with ``I(d) = clamp(bucket(d) + span, 0, 2 span - 1)``, ``bucket(d) = d`` for
  ``|d| <= span/2`` else ``sign(d) (ceil((log|d| - log mid) t) + mid)``, ``mid = span / 2``,
  ``t = (mid - 1) / (log(L - 1) - log mid) * (1 - 1e-7)`` in float32.

Known deviations (rounding level): the plugin reorders reversed boxes with an arithmetic
swap (``y1 - y2`` and back), not bit-exact; IoU ties with the threshold and equal scores may
order differently from the GPU plugin (whose candidate order among equal scores is not
deterministic). NMS is float32 only: the plugins' float16 path sorts on truncated score bits.
"""

from __future__ import annotations

import math

import numpy as np
from onnx import FunctionProto, TensorProto, helper

from rewriter.plugin import Arg, Declined, FunctionBuilder, OpSample, hookimpl
from rewriter.plugin import present as _present

DOMAINS = ("", "TRT", "trt.plugins")
BODY_DOMAIN = "trt"  # the domain of the bodies' FunctionProtos
NMS_OPSETS = (11, None)  # NonMaxSuppression with scores/Range/ScatterND/GatherND/TopK(k input)
ATTENTION_OPSETS = (11, None)  # Range, GatherElements, Clip with inputs
MAX_SELECTED = 4096  # EfficientNMS: candidates per image that enter NMS (numSelectedBoxes)
BATCHED_MAX_TOPK = 4096  # BatchedNMS: topK limit (512 threads x 8 blocks)

_FLOAT = "tensor(float)"
_ELEM = {"tensor(float)": TensorProto.FLOAT, "tensor(float16)": TensorProto.FLOAT16}

EFFICIENT_ATTRIBUTES = {"score_threshold", "iou_threshold", "max_output_boxes",
                        "background_class", "score_activation", "class_agnostic", "box_coding",
                        "plugin_version", "plugin_namespace"}
EFFICIENT_ONNX_ATTRIBUTES = {"score_threshold", "iou_threshold", "max_output_boxes_per_class",
                             "center_point_box", "plugin_version", "plugin_namespace"}
BATCHED_ATTRIBUTES = {"shareLocation", "backgroundLabelId", "numClasses", "topK", "keepTopK",
                      "scoreThreshold", "iouThreshold", "isNormalized", "clipBoxes",
                      "scoreBits", "caffeSemantics", "plugin_version", "plugin_namespace"}
FMHA_ATTRIBUTES = {"scale", "dropout_p", "causal", "return_attn_probs"}
DISENTANGLED_ATTRIBUTES = {"span", "factor", "plugin_version", "plugin_namespace"}


class _Body(FunctionBuilder):
    """A function body under construction (constants are int64 unless told otherwise), with
    the NMS bodies' shorthands."""

    default_dtype = np.int64

    def dim(self, shape: str, index: int) -> str:
        """Dimension ``index`` of a shape, as a scalar."""
        return self.take(shape, index)

    def vec(self, scalar: str) -> str:
        return self.reshape(scalar, [1])

    def column(self, matrix: str, index: int) -> str:
        return self.take(matrix, index, axis=1)

    def last(self, x: str, start: int, end: int) -> str:
        return self.slice(x, [start], [end], [-1])

    def minimum(self, a: str, b: str) -> str:
        """``Min`` of int64 values (Min takes integers from opset 12: ``Where`` below)."""
        if self.opset >= 12:
            return self.op("Min", a, b)
        return self.op("Where", self.op("Less", a, b), a, b)

    def maximum(self, a: str, b: str) -> str:
        """``Max`` of int64 values (Max takes integers from opset 12: ``Where`` below)."""
        if self.opset >= 12:
            return self.op("Max", a, b)
        return self.op("Where", self.op("Greater", a, b), a, b)

    def greater_equal(self, a: str, b: str) -> str:
        if self.opset >= 12:
            return self.op("GreaterOrEqual", a, b)
        return self.op("Or", self.op("Greater", a, b), self.op("Equal", a, b))


def _check_form(ctx, allowed: set[str], float_inputs: int) -> None:
    """Decline a node with an attribute the decomposition does not know, inputs that are
    not float, or a plugin_version other than 1."""
    _check_attributes(ctx.node, allowed)
    if not _float_inputs(ctx, float_inputs):
        raise Declined(f"the first {float_inputs} inputs must be float")
    if not _version_one(ctx):
        raise Declined("only plugin_version 1 is decomposed")


def _check_attributes(node, allowed: set[str]) -> None:
    unknown = sorted(a.name for a in node.attribute if a.name not in allowed)
    if unknown:
        raise Declined(f"unknown attribute(s) {', '.join(unknown)}")


def _check_same_float_type(types: list) -> None:
    if len(types) < 3 or types[0] not in _ELEM or len(set(types[:3])) != 1:
        raise Declined("the three inputs must have one float type ("
                       + ", ".join(sorted(_ELEM)) + ")")


def _check_nms_settings(k_name: str, k: int, coding_name: str, coding: int,
                        iou_threshold: float) -> None:
    if k <= 0:
        raise Declined(f"{k_name} must be positive (is {k})")
    if coding not in (0, 1):
        raise Declined(f"{coding_name} {coding} (0 or 1 only)")
    if iou_threshold <= 0:
        raise Declined(f"iou_threshold must be positive (is {iou_threshold})")


def _version_one(ctx) -> bool:
    version = ctx.attribute("plugin_version", b"1")
    return (version.decode() if isinstance(version, bytes) else str(version)) == "1"


def _float_inputs(ctx, count: int) -> bool:
    types = list(ctx.input_types or [])
    return len(types) >= count and all(t == _FLOAT for t in types[:count])


def _f32(value: float) -> float:
    return float(np.float32(value))


# -- NMS: shared pieces ----------------------------------------------------------------------


def _corners(g: _Body, boxes: str, anchors: str | None, coding: int) -> str:
    """Decode ``boxes`` against ``anchors`` (if given) and return corner boxes."""
    if anchors is not None:
        if coding == 0:
            b0, b1 = g.last(boxes, 0, 2), g.last(boxes, 2, 4)
            a0, a1 = g.last(anchors, 0, 2), g.last(anchors, 2, 4)
            lo = g.op("Add", g.op("Min", b0, b1), g.op("Min", a0, a1))
            hi = g.op("Add", g.op("Max", b0, b1), g.op("Max", a0, a1))
            return g.op("Concat", lo, hi, axis=-1)
        bc, bs = g.last(boxes, 0, 2), g.last(boxes, 2, 4)
        ac, asz = g.last(anchors, 0, 2), g.last(anchors, 2, 4)
        center = g.op("Add", g.op("Mul", bc, asz), ac)
        size = g.op("Mul", asz, g.op("Exp", bs))
        boxes = g.op("Concat", center, size, axis=-1)
    if coding == 1:
        center, size = g.last(boxes, 0, 2), g.last(boxes, 2, 4)
        half = g.op("Mul", size, g.const(0.5, np.float32))
        return g.op("Concat", g.op("Sub", center, half), g.op("Add", center, half), axis=-1)
    return boxes


def _select_top(g: _Body, dense: str, shape_bk: str, k: int):
    """The ``k`` best entries per image of ``dense [B, M]`` (-inf: none), padded so that
    ``k`` may exceed M: (values, indices, valid)."""
    pad = g.fill(shape_bk, -np.inf)
    padded = g.op("Concat", dense, pad, axis=1)
    values, indices = g.op("TopK", padded, g.const([k]), axis=1, outputs=2)
    valid = g.op("Greater", values, g.const(-np.inf, np.float32))
    return values, indices, valid


def _nms(g: _Body, boxes: str, scores: str, per_class_limit: int, iou: float) -> str:
    """ONNX NonMaxSuppression over candidates already filtered to finite scores."""
    return g.op("NonMaxSuppression", boxes, scores, g.const([per_class_limit]),
                g.const([iou], np.float32),
                g.const([np.finfo(np.float32).min], np.float32), center_point_box=0)


def _scatter_scores(g: _Body, flat: str, batch: str, cand: str, shape_bm: str) -> str:
    """Scores of the selected (batch, candidate) pairs in a dense ``[B, M]`` tensor."""
    index = g.op("Concat", g.unsqueeze(batch, [1]), g.unsqueeze(cand, [1]), axis=1)
    picked = g.op("GatherND", flat, index)
    return g.op("ScatterND", g.fill(shape_bm, -np.inf), index, picked)


def _keep_best(g: _Body, scores: str, k: str, axis: int) -> str:
    """``scores`` with all but the ``k`` largest along ``axis`` set to -inf."""
    _, indices = g.op("TopK", scores, k, axis=axis, outputs=2)
    ones = g.fill(g.op("Shape", indices), 1.0)
    marked = g.op("ScatterElements", g.fill(g.op("Shape", scores), 0.0), indices, ones,
                  axis=axis)
    return g.op("Where", g.op("Cast", marked, to=TensorProto.BOOL), scores,
                g.const(-np.inf, np.float32))


class _EfficientResult:
    """What the EfficientNMS body computes before the outputs are shaped."""

    def __init__(self, values, indices, valid, anchor, cls, batch_range, dims, table):
        self.values, self.indices, self.valid = values, indices, valid
        self.anchor, self.cls, self.batch_range = anchor, cls, batch_range
        self.dims, self.table = dims, table


def _efficient_core(g: _Body, *, boxes: str, scores: str, anchors: str | None, k: int,
                    score_threshold: float, iou_threshold: float, background: int,
                    activation: bool, agnostic: bool, coding: int) -> _EfficientResult:
    scores = g.op("Reshape", scores, g.const([0, 0, -1]))  # [B,N,C] (also from [B,N,C,1])
    shape = g.op("Shape", scores)
    b, n, c = (g.dim(shape, i) for i in range(3))
    bv, nv, cv = g.vec(b), g.vec(n), g.vec(c)
    boxes4 = g.op("Reshape", boxes, g.const([0, 0, -1, 4]))  # [B,N,1|C,4]
    if anchors is not None:
        anchors = g.unsqueeze(anchors, [2])
    corners = _corners(g, boxes4, anchors, coding)
    full = g.op("Expand", corners, g.op("Concat", bv, nv, cv, g.const([4]), axis=0))

    if activation:
        threshold = -(1 << 15) if score_threshold <= 0 else _f32(
            math.log(np.float32(score_threshold) / (1 - np.float32(score_threshold))))
    else:
        threshold = score_threshold
    keep = g.greater_equal(scores, g.const(threshold, np.float32))
    if background >= 0:
        classes = g.op("Range", g.const(0), c, g.const(1))
        keep = g.op("And", keep, g.op("Not", g.op("Equal", classes, g.const(background))))
    masked = g.op("Where", keep, scores, g.const(-np.inf, np.float32))
    nc = g.op("Mul", n, c)
    shape_bm = g.op("Concat", bv, g.vec(nc), axis=0)
    flat = g.op("Reshape", masked, shape_bm)  # candidate j = anchor * C + class
    flat = _keep_best(g, flat, g.vec(g.minimum(nc, g.const(MAX_SELECTED))), 1)

    # greedy NMS suppresses at IoU >= t; ONNX's at IoU > t': t' is the float below t
    iou = float(np.nextafter(np.float32(iou_threshold), np.float32(-np.inf)))
    if agnostic:
        nms_boxes = g.op("Reshape", full, g.op("Concat", bv, g.const([-1, 4]), axis=0))
        selected = _nms(g, nms_boxes, g.unsqueeze(flat, [1]), k, iou)
        batch, cand = g.column(selected, 0), g.column(selected, 2)
    else:
        nms_boxes = g.op("Reshape", g.op("Transpose", full, perm=[0, 2, 1, 3]),
                         g.op("Concat", g.const([-1]), nv, g.const([4]), axis=0))
        per_class = g.op("Reshape", g.op("Transpose", g.op("Reshape", flat, shape),
                                         perm=[0, 2, 1]),
                         g.op("Concat", g.const([-1, 1]), nv, axis=0))
        selected = _nms(g, nms_boxes, per_class, k, iou)
        bc = g.column(selected, 0)
        batch, cls = g.op("Div", bc, c), g.op("Mod", bc, c)
        cand = g.op("Add", g.op("Mul", g.column(selected, 2), c), cls)
    dense = _scatter_scores(g, flat, batch, cand, shape_bm)
    values, indices, valid = _select_top(g, dense, g.op("Concat", bv, g.const([k]), axis=0),
                                         k)
    index = g.op("Where", valid, indices, g.const(0))
    anchor, cls = g.op("Div", index, c), g.op("Mod", index, c)
    batch_range = g.unsqueeze(g.op("Range", g.const(0), b, g.const(1)), [1])
    table = g.op("Reshape", full, g.const([-1, 4]))  # row (b * N + anchor) * C + class
    return _EfficientResult(values, index, valid, anchor, cls, batch_range, (b, n, c, nc),
                            table)


def build_efficient_nms(ctx) -> FunctionProto | None:
    node = ctx.node
    n_in = len([x for x in node.input if x])
    if n_in not in (2, 3) or not all(_present(node.input, i) for i in range(n_in)):
        raise Declined("takes boxes, scores and an optional anchors, none left empty")
    _check_form(ctx, EFFICIENT_ATTRIBUTES, n_in)
    k = int(ctx.attribute("max_output_boxes", 100))
    coding = int(ctx.attribute("box_coding", 0))
    iou_threshold = float(ctx.attribute("iou_threshold", 0.5))
    _check_nms_settings("max_output_boxes", k, "box_coding", coding, iou_threshold)
    g = _Body(ctx.opset)
    inputs = ["boxes", "scores", "anchors"][:n_in]
    r = _efficient_core(
        g, boxes="boxes", scores="scores", anchors="anchors" if n_in == 3 else None, k=k,
        score_threshold=float(ctx.attribute("score_threshold", 0.5)),
        iou_threshold=iou_threshold, background=int(ctx.attribute("background_class", -1)),
        activation=bool(ctx.attribute("score_activation", 0)),
        agnostic=bool(ctx.attribute("class_agnostic", 0)), coding=coding)
    b, n, c, nc = r.dims
    count = g.reduce_sum(g.op("Cast", r.valid, to=TensorProto.INT32), [1])
    g.nodes.append(helper.make_node("Identity", [count], ["num_detections"]))
    rows = g.op("Add", g.op("Mul", r.batch_range, nc), r.indices)
    picked = g.op("Gather", r.table, rows, axis=0)
    valid3 = g.unsqueeze(r.valid, [2])
    g.nodes.append(helper.make_node("Where", [valid3, picked, g.const(0.0, np.float32)],
                                    ["detection_boxes"]))
    values = r.values
    if ctx.attribute("score_activation", 0):
        values = g.op("Sigmoid", values)
    g.nodes.append(helper.make_node("Where", [r.valid, values, g.const(0.0, np.float32)],
                                    ["detection_scores"]))
    g.nodes.append(helper.make_node("Cast", [g.op("Where", r.valid, r.cls, g.const(0))],
                                    ["detection_classes"], to=TensorProto.INT32))
    outputs = ["num_detections", "detection_boxes", "detection_scores", "detection_classes"]
    return g.function(BODY_DOMAIN, "efficient_nms", inputs, outputs)


def build_efficient_nms_onnx(ctx) -> FunctionProto | None:
    node = ctx.node
    if len(node.input) != 2 or not all(node.input) or len(node.output) != 1:
        raise Declined("takes boxes and scores and gives one output")
    _check_form(ctx, EFFICIENT_ONNX_ATTRIBUTES, 2)
    k = int(ctx.attribute("max_output_boxes_per_class", -1))
    coding = int(ctx.attribute("center_point_box", 0))
    iou_threshold = float(ctx.attribute("iou_threshold", 0.5))
    _check_nms_settings("max_output_boxes_per_class", k, "center_point_box", coding,
                        iou_threshold)
    g = _Body(ctx.opset)
    r = _efficient_core(g, boxes="boxes", scores="scores", anchors=None, k=k,
                        score_threshold=float(ctx.attribute("score_threshold", 0.5)),
                        iou_threshold=iou_threshold, background=-1, activation=False,
                        agnostic=False, coding=coding)
    b = r.dims[0]
    rows = g.op("Concat", g.unsqueeze(g.op("Expand", r.batch_range, g.op("Shape", r.anchor)),
                                      [2]),
                g.unsqueeze(r.cls, [2]), g.unsqueeze(r.anchor, [2]), axis=2)  # [B,K,3]
    # images in order, each image's detections in score order, then the padding
    total_rows = g.op("Mul", b, g.const(k))
    rows = g.op("Reshape", rows, g.const([-1, 3]))
    valid = g.op("Reshape", r.valid, g.const([-1]))
    position = g.op("Range", g.const(0), total_rows, g.const(1))
    key = g.op("Where", valid, position, g.op("Add", position, total_rows))
    _, order = g.op("TopK", key, g.vec(total_rows), axis=0, largest=0, outputs=2)
    ordered = g.op("Gather", rows, order, axis=0)
    count = g.reduce_sum(g.op("Cast", valid, to=TensorProto.INT64), [0], keepdims=0)
    slot = g.minimum(position, g.op("Sub", count, g.const(1)))
    padded = g.op("Gather", ordered, g.maximum(slot, g.const(0)), axis=0)
    any_selected = g.op("Greater", count, g.const(0))
    result = g.op("Where", any_selected, padded, g.const(-1))
    g.nodes.append(helper.make_node("Cast", [result], ["selected_indices"],
                                    to=TensorProto.INT32))
    return g.function(BODY_DOMAIN, "efficient_nms_onnx", ["boxes", "scores"],
                      ["selected_indices"])


def build_batched_nms(ctx) -> FunctionProto | None:
    node = ctx.node
    if len(node.input) != 2 or not all(node.input):
        raise Declined("takes boxes and scores, none left empty")
    _check_form(ctx, BATCHED_ATTRIBUTES, 2)
    num_classes = ctx.attribute("numClasses")
    top_k = ctx.attribute("topK")
    keep_top_k = ctx.attribute("keepTopK")
    if num_classes is None or top_k is None or keep_top_k is None:
        raise Declined("numClasses, topK and keepTopK must be given")
    top_k, keep_top_k = int(top_k), int(keep_top_k)
    if not 0 < keep_top_k <= top_k <= BATCHED_MAX_TOPK:
        raise Declined(f"needs 0 < keepTopK <= topK <= {BATCHED_MAX_TOPK} (keepTopK "
                       f"{keep_top_k}, topK {top_k})")
    if not int(ctx.attribute("isNormalized", 1)):
        raise Declined("isNormalized=0 (pixel boxes, IoU with +1) is not decomposed")
    share = bool(ctx.attribute("shareLocation", 1))
    background = int(ctx.attribute("backgroundLabelId", -1))
    g = _Body(ctx.opset)
    scores = g.op("Reshape", "scores", g.const([0, 0, -1]))
    shape = g.op("Shape", scores)
    b, n, c = (g.dim(shape, i) for i in range(3))
    bv, nv = g.vec(b), g.vec(n)
    keep = g.op("Greater", scores, g.const(float(ctx.attribute("scoreThreshold", 0.0)),
                                           np.float32))
    if background >= 0:
        classes = g.op("Range", g.const(0), c, g.const(1))
        keep = g.op("And", keep, g.op("Not", g.op("Equal", classes, g.const(background))))
    masked = g.op("Transpose", g.op("Where", keep, scores, g.const(-np.inf, np.float32)),
                  perm=[0, 2, 1])  # [B,C,N]
    masked = _keep_best(g, masked, g.vec(g.minimum(n, g.const(top_k))), 2)
    limit = min(top_k, keep_top_k)
    iou = float(ctx.attribute("iouThreshold", 0.5))
    boxes4 = g.op("Reshape", "boxes", g.op("Concat", bv, nv, g.const([-1, 4]), axis=0))
    if share:
        nms_boxes = g.op("Reshape", boxes4, g.op("Concat", bv, nv, g.const([4]), axis=0))
        selected = _nms(g, nms_boxes, masked, limit, iou)
        batch, cls = g.column(selected, 0), g.column(selected, 1)
    else:
        nms_boxes = g.op("Reshape", g.op("Transpose", boxes4, perm=[0, 2, 1, 3]),
                         g.op("Concat", g.const([-1]), nv, g.const([4]), axis=0))
        per_class = g.op("Reshape", masked, g.op("Concat", g.const([-1, 1]), nv, axis=0))
        selected = _nms(g, nms_boxes, per_class, limit, iou)
        bc = g.column(selected, 0)
        batch, cls = g.op("Div", bc, c), g.op("Mod", bc, c)
    cn = g.op("Mul", c, n)
    cand = g.op("Add", g.op("Mul", cls, n), g.column(selected, 2))  # j = class * N + anchor
    shape_bm = g.op("Concat", bv, g.vec(cn), axis=0)
    flat = g.op("Reshape", masked, shape_bm)
    dense = _scatter_scores(g, flat, batch, cand, shape_bm)
    values, indices, valid = _select_top(
        g, dense, g.op("Concat", bv, g.const([keep_top_k]), axis=0), keep_top_k)
    index = g.op("Where", valid, indices, g.const(0))
    out_cls, anchor = g.op("Div", index, n), g.op("Mod", index, n)
    batch_range = g.unsqueeze(g.op("Range", g.const(0), b, g.const(1)), [1])
    rows = g.op("Add", g.op("Mul", batch_range, n), anchor)
    if not share:
        rows = g.op("Add", g.op("Mul", rows, c), out_cls)
    picked = g.op("Gather", g.op("Reshape", boxes4, g.const([-1, 4])), rows, axis=0)
    if int(ctx.attribute("clipBoxes", 1)):
        picked = g.op("Max", g.op("Min", picked, g.const(1.0, np.float32)),
                      g.const(0.0, np.float32))
    count = g.reduce_sum(g.op("Cast", valid, to=TensorProto.INT32), [1])
    g.nodes.append(helper.make_node("Identity", [count], ["num_detections"]))
    g.nodes.append(helper.make_node("Where", [g.unsqueeze(valid, [2]), picked,
                                              g.const(0.0, np.float32)], ["nmsed_boxes"]))
    g.nodes.append(helper.make_node("Where", [valid, values, g.const(0.0, np.float32)],
                                    ["nmsed_scores"]))
    g.nodes.append(helper.make_node(
        "Where", [valid, g.op("Cast", out_cls, to=TensorProto.FLOAT),
                  g.const(-1.0, np.float32)], ["nmsed_classes"]))
    outputs = ["num_detections", "nmsed_boxes", "nmsed_scores", "nmsed_classes"]
    return g.function(BODY_DOMAIN, "batched_nms", ["boxes", "scores"], outputs)


# -- attention -------------------------------------------------------------------------------


def build_fmha(ctx) -> FunctionProto | None:
    node = ctx.node
    types = list(ctx.input_types or [])
    if len(node.input) != 3 or not all(node.input) or len(node.output) != 1:
        raise Declined("takes q, k and v and gives one output")
    _check_attributes(node, FMHA_ATTRIBUTES)
    _check_same_float_type(types)
    if float(ctx.attribute("dropout_p", 0.0)) != 0.0:
        raise Declined("dropout_p != 0 (random) is not decomposed")
    if int(ctx.attribute("return_attn_probs", 0)) != 0:
        raise Declined("return_attn_probs=1 is not decomposed")
    elem = _ELEM[types[0]]
    g = _Body(ctx.opset)
    q = g.op("Transpose", g.op("Cast", "q", to=TensorProto.FLOAT), perm=[0, 2, 1, 3])
    k = g.op("Transpose", g.op("Cast", "k", to=TensorProto.FLOAT), perm=[0, 2, 3, 1])
    v = g.op("Transpose", g.op("Cast", "v", to=TensorProto.FLOAT), perm=[0, 2, 1, 3])
    logits = g.op("Mul", g.op("MatMul", q, k),
                  g.const(_f32(ctx.attribute("scale", 1.0)), np.float32))
    if int(ctx.attribute("causal", 0)):
        rows = g.op("Range", g.const(0), g.dim(g.op("Shape", "q"), 1), g.const(1))
        cols = g.op("Range", g.const(0), g.dim(g.op("Shape", "k"), 1), g.const(1))
        future = g.op("Greater", g.unsqueeze(cols, [0]), g.unsqueeze(rows, [1]))
        logits = g.op("Where", future, g.const(-np.inf, np.float32), logits)
    probs = g.op("Softmax", logits, axis=-1)  # the last axis at every opset
    out = g.op("Transpose", g.op("MatMul", probs, v), perm=[0, 2, 1, 3])
    g.nodes.append(helper.make_node("Cast", [out], ["output"], to=elem))
    return g.function(BODY_DOMAIN, "fmha", ["q", "k", "v"], ["output"])


def build_disentangled_attention(ctx) -> FunctionProto | None:
    node = ctx.node
    types = list(ctx.input_types or [])
    span = ctx.attribute("span")
    factor = ctx.attribute("factor")
    if len(node.input) != 3 or not all(node.input) or len(node.output) != 1:
        raise Declined("takes three inputs and gives one output")
    _check_attributes(node, DISENTANGLED_ATTRIBUTES)
    if span is None or factor is None:
        raise Declined("span and factor must be given")
    if int(span) < 2:
        raise Declined(f"span {int(span)} < 2")
    _check_same_float_type(types)
    if not _version_one(ctx):
        raise Declined("only plugin_version 1 is decomposed")
    span = int(span)
    mid = span // 2
    elem = _ELEM[types[0]]
    dtype = np.float32 if elem == TensorProto.FLOAT else np.float16
    g = _Body(ctx.opset)
    c2c_shape = g.op("Shape", "c2c")
    seq = g.dim(c2c_shape, 1)
    pos = g.op("Range", g.const(0), seq, g.const(1))
    delta = g.op("Cast", g.op("Sub", g.unsqueeze(pos, [1]), g.unsqueeze(pos, [0])),
                 to=TensorProto.FLOAT)  # row - column
    magnitude = g.op("Abs", delta)
    # t = (mid - 1) / (log(L - 1) - log(mid)) * (1 - 1e-7), all in float32 as the kernel
    log_mid = _f32(np.log(np.float32(mid)))
    length = g.op("Cast", g.op("Sub", g.dim(g.op("Shape", "c2p"), 2), g.const(1)),
                  to=TensorProto.FLOAT)
    t = g.op("Mul", g.op("Div", g.const(float(mid - 1), np.float32),
                         g.op("Sub", g.op("Log", length), g.const(log_mid, np.float32))),
             g.const(1 - np.float32(1e-7), np.float32))
    log_bucket = g.op("Add", g.op("Ceil", g.op("Mul", g.op("Sub", g.op("Log", magnitude),
                                                           g.const(log_mid, np.float32)), t)),
                      g.const(float(mid), np.float32))
    bucket = g.op("Where", g.op("Greater", magnitude, g.const(float(mid), np.float32)),
                  g.op("Mul", g.op("Sign", delta), log_bucket), delta)
    index = g.op("Cast", g.op("Clip", g.op("Add", bucket, g.const(float(span), np.float32)),
                              g.const(0.0, np.float32), g.const(2.0 * span - 1, np.float32)),
                 to=TensorProto.INT64)  # [S,S]: I(row - column)
    c2p = g.op("GatherElements", "c2p", g.op("Expand", index, c2c_shape), axis=2)
    p2c = g.op("Transpose", g.op("GatherElements", "p2c", g.op(
        "Expand", g.op("Transpose", index, perm=[1, 0]), c2c_shape), axis=2), perm=[0, 2, 1])
    if elem == TensorProto.FLOAT:
        total = g.op("Add", g.op("Add", "c2c", c2p), p2c)
    else:  # the fp16 kernel adds c2c + (c2p + p2c)
        total = g.op("Add", "c2c", g.op("Add", c2p, p2c))
    g.op("Mul", total, g.const(float(factor), dtype), outputs=["output"])
    return g.function(BODY_DOMAIN, "disentangled_attention", ["c2c", "c2p", "p2c"],
                      ["output"])


# -- registration ----------------------------------------------------------------------------

_NMS_OPS = (
    ("EfficientNMS_TRT", build_efficient_nms, "trt_nms:efficient_nms",
     "tensorrt:EfficientNMS_TRT (NonMaxSuppression + TopK; ties may order differently)"),
    ("EfficientNMS_ONNX_TRT", build_efficient_nms_onnx, "trt_nms:efficient_nms_onnx",
     "tensorrt:EfficientNMS_ONNX_TRT (NonMaxSuppression + TopK)"),
    ("BatchedNMS_TRT", build_batched_nms, "trt_nms:batched_nms",
     "tensorrt:BatchedNMS_TRT (NonMaxSuppression + TopK; isNormalized=1 only)"),
    ("BatchedNMSDynamic_TRT", build_batched_nms, "trt_nms:batched_nms",
     "tensorrt:BatchedNMSDynamic_TRT (NonMaxSuppression + TopK; isNormalized=1 only)"),
)
_ATTENTION_OPS = (
    ("fMHAPlugin", ("", "trt.plugins"), build_fmha, "trt_attention:fmha",
     "tensorrt:fMHAPlugin (MatMul/Softmax attention in float32)", ("float16", "float")),
    ("DisentangledAttention_TRT", ("trt.plugins", "", "TRT"), build_disentangled_attention,
     "trt_attention:disentangled_attention",
     "tensorrt:DisentangledAttention_TRT (GatherElements on log-bucket indices)", ("float",)),
)


# -- oracle samples (the kernels above, written from the plugins' CUDA code, are the oracle) --


def _random_corners(rng, shape) -> np.ndarray:
    """Corner boxes in [0, 1] with much overlap, a fifth given with reversed corners."""
    center = rng.uniform(0.2, 0.8, (*shape[:-1], 2))
    size = rng.uniform(0.05, 0.4, (*shape[:-1], 2))
    boxes = np.concatenate([center - size / 2, center + size / 2], -1)
    flip = rng.random(shape[:-1]) < 0.2
    boxes[flip] = boxes[flip][:, [2, 3, 0, 1]]
    return boxes


def _random_center_size(rng, shape) -> np.ndarray:
    corners = _random_corners(rng, shape)
    lo, hi = np.minimum(corners[..., :2], corners[..., 2:]), np.maximum(
        corners[..., :2], corners[..., 2:])
    return np.concatenate([(lo + hi) / 2, hi - lo], -1)


def _random_deltas(rng, shape) -> np.ndarray:
    return rng.standard_normal(shape) * 0.1


def _random_spread_corners(rng, shape) -> np.ndarray:
    """Corners reaching a little outside [0, 1] (clipBoxes has something to clip)."""
    return _random_corners(rng, shape) * 1.3 - 0.15


_EFFICIENT = dict(score_threshold=0.3, iou_threshold=0.45, max_output_boxes=25,
                  background_class=-1, score_activation=0, box_coding=0, class_agnostic=0,
                  plugin_version="1")
_EFFICIENT_OUT = ["int32", "T", "T", "int32"]  # num_detections, boxes, scores, classes
_SCORES = Arg("T[2,60,3]", low=0.0, high=1.0)
_EFFICIENT_SAMPLES = [
    OpSample([Arg("T[2,60,4]", values=_random_corners), _SCORES], _EFFICIENT_OUT, _EFFICIENT,
             name="default"),
    OpSample([Arg("T[2,60,4]", values=_random_corners), _SCORES], _EFFICIENT_OUT,
             {**_EFFICIENT, "class_agnostic": 1}, name="agnostic"),
    OpSample([Arg("T[2,60,4]", values=_random_center_size), _SCORES], _EFFICIENT_OUT,
             {**_EFFICIENT, "background_class": 1, "box_coding": 1},
             name="background-centersize"),
    OpSample([Arg("T[2,60,4]", values=_random_corners), Arg("T[2,60,3]", low=-3.0, high=3.0)],
             _EFFICIENT_OUT, {**_EFFICIENT, "score_activation": 1, "score_threshold": 0.45},
             name="sigmoid"),
    OpSample([Arg("T[2,60,4]", values=_random_deltas), _SCORES,
              Arg("T[1,60,4]", values=_random_corners)],
             _EFFICIENT_OUT, _EFFICIENT, name="anchors-corner"),
    OpSample([Arg("T[2,60,4]", values=_random_deltas), _SCORES,
              Arg("T[1,60,4]", values=lambda rng, shape: np.abs(_random_corners(rng, shape)))],
             _EFFICIENT_OUT, {**_EFFICIENT, "box_coding": 1, "class_agnostic": 1},
             name="anchors-centersize-agnostic"),
    OpSample([Arg("T[2,60,3,4]", values=_random_corners), _SCORES], _EFFICIENT_OUT, _EFFICIENT,
             name="per-class-boxes"),
    OpSample([Arg("T[2,60,3,4]", values=_random_corners), _SCORES], _EFFICIENT_OUT,
             {**_EFFICIENT, "class_agnostic": 1, "max_output_boxes": 200},
             name="per-class-agnostic-pad"),
]
_EFFICIENT_ONNX = dict(score_threshold=0.2, iou_threshold=0.5, max_output_boxes_per_class=6)
_EFFICIENT_ONNX_SAMPLES = [
    OpSample([Arg("T[2,50,4]", values=_random_corners), Arg("T[2,50,4]", low=0.0, high=1.0)],
             ["int32"], _EFFICIENT_ONNX, name="default"),
    OpSample([Arg("T[2,50,4]", values=_random_corners), Arg("T[2,50,4]", low=0.0, high=0.1)],
             ["int32"], _EFFICIENT_ONNX, name="none-selected"),
]
# BatchedNMS: num_detections int32; boxes, scores and classes of the input type (TensorRT's
# batchedNMSPlugin getOutputDataType: index 0 kINT32, else inputTypes[0])
_BATCHED = dict(shareLocation=1, backgroundLabelId=-1, numClasses=4, topK=30, keepTopK=20,
                scoreThreshold=0.25, iouThreshold=0.5, isNormalized=1, clipBoxes=1)
_BATCHED_OUT = ["int32", "T", "T", "T"]
_BATCHED_SCORES = Arg("T[2,50,4]", low=0.0, high=1.0)
_BATCHED_SAMPLES = [
    OpSample([Arg("T[2,50,1,4]", values=_random_spread_corners), _BATCHED_SCORES], _BATCHED_OUT,
             _BATCHED, name="shared"),
    OpSample([Arg("T[2,50,1,4]", values=_random_spread_corners), _BATCHED_SCORES], _BATCHED_OUT,
             {**_BATCHED, "backgroundLabelId": 0, "clipBoxes": 0}, name="background-noclip"),
    OpSample([Arg("T[2,50,4,4]", values=_random_spread_corners), _BATCHED_SCORES], _BATCHED_OUT,
             {**_BATCHED, "shareLocation": 0, "topK": 10, "keepTopK": 10},
             name="per-class-topk"),
    OpSample([Arg("T[2,50,1,4]", values=_random_spread_corners), _BATCHED_SCORES], _BATCHED_OUT,
             {**_BATCHED, "keepTopK": 60, "topK": 60, "scoreThreshold": 0.8}, name="padding"),
]
_NMS_SAMPLES = {"EfficientNMS_TRT": _EFFICIENT_SAMPLES,
                "EfficientNMS_ONNX_TRT": _EFFICIENT_ONNX_SAMPLES,
                "BatchedNMS_TRT": _BATCHED_SAMPLES[:2],
                "BatchedNMSDynamic_TRT": _BATCHED_SAMPLES[2:]}
_ATTENTION_SAMPLES = {
    "fMHAPlugin": [OpSample(["T[2,7,3,8]"] * 3, attributes=dict(scale=0.35, causal=causal),
                            opset=18, tolerance=(2e-3, 2e-3), name=f"causal{causal}")
                   for causal in (0, 1)],
    "DisentangledAttention_TRT": [OpSample(
        ["T[3,40,40]", "T[3,40,16]", "T[3,40,16]"], attributes=dict(span=8, factor=0.2),
        opset=12, tolerance=(1e-6, 1e-6))],
}


@hookimpl
def register_decompositions(registry):
    """Every op in each of its domains; the samples run in full in the first domain (the
    others share the builder: one sample checks the domain is matched)."""
    for op_type, builder, _, description in _NMS_OPS:
        for i, domain in enumerate(DOMAINS):
            samples = _NMS_SAMPLES[op_type]
            registry.add(domain, op_type, builder, opsets=NMS_OPSETS, description=description,
                         dtypes=("float",), oracle="kernel",
                         samples=samples if i == 0 else samples[:1])
    for op_type, domains, builder, _, description, dtypes in _ATTENTION_OPS:
        for i, domain in enumerate(domains):
            samples = _ATTENTION_SAMPLES[op_type]
            registry.add(domain, op_type, builder, opsets=ATTENTION_OPSETS,
                         description=description, dtypes=dtypes, oracle="kernel",
                         samples=samples if i == 0 else samples[:1])


@hookimpl
def register_kernels(registry):
    for op_type, _, reference, _ in _NMS_OPS:
        for domain in DOMAINS:
            registry.add(domain, op_type, f"rewriter_custom_ops.{reference}",
                         description=f"rewriter_custom_ops.{reference} (vendor semantics)")
    for op_type, domains, _, reference, _, _ in _ATTENTION_OPS:
        for domain in domains:
            registry.add(domain, op_type, f"rewriter_custom_ops.{reference}",
                         description=f"rewriter_custom_ops.{reference} (vendor semantics)")
