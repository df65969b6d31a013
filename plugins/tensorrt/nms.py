"""``EfficientNMS_TRT``, ``EfficientNMS_ONNX_TRT``, ``BatchedNMS_TRT`` /
``BatchedNMSDynamic_TRT``: ``NonMaxSuppression`` per class, then ``TopK`` over the kept
candidates of each image (semantics: ``rewriter_custom_ops.trt_nms``)."""

from __future__ import annotations

import math

import numpy as np
from onnx import FunctionProto, TensorProto, helper

from rewriter.plugin import Declined
from rewriter.plugin import present as _present

from .common import (
    BATCHED_ATTRIBUTES,
    BATCHED_MAX_TOPK,
    BODY_DOMAIN,
    EFFICIENT_ATTRIBUTES,
    EFFICIENT_ONNX_ATTRIBUTES,
    MAX_SELECTED,
    Body,
    as_float32,
    check_form,
    check_nms_settings,
)

# -- NMS: shared pieces ----------------------------------------------------------------------


def _corners(g: Body, boxes: str, anchors: str | None, coding: int) -> str:
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


def _select_top(g: Body, dense: str, shape_bk: str, k: int):
    """The ``k`` best entries per image of ``dense [B, M]`` (-inf: none), padded so that
    ``k`` may exceed M: (values, indices, valid)."""
    pad = g.fill(shape_bk, -np.inf)
    padded = g.op("Concat", dense, pad, axis=1)
    values, indices = g.op("TopK", padded, g.const([k]), axis=1, outputs=2)
    valid = g.op("Greater", values, g.const(-np.inf, np.float32))
    return values, indices, valid


def _nms(g: Body, boxes: str, scores: str, per_class_limit: int, iou: float) -> str:
    """ONNX NonMaxSuppression over candidates already filtered to finite scores."""
    return g.op("NonMaxSuppression", boxes, scores, g.const([per_class_limit]),
                g.const([iou], np.float32),
                g.const([np.finfo(np.float32).min], np.float32), center_point_box=0)


def _scatter_scores(g: Body, flat: str, batch: str, cand: str, shape_bm: str) -> str:
    """Scores of the selected (batch, candidate) pairs in a dense ``[B, M]`` tensor."""
    index = g.op("Concat", g.unsqueeze(batch, [1]), g.unsqueeze(cand, [1]), axis=1)
    picked = g.op("GatherND", flat, index)
    return g.op("ScatterND", g.fill(shape_bm, -np.inf), index, picked)


def _keep_best(g: Body, scores: str, k: str, axis: int) -> str:
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


def _efficient_core(g: Body, *, boxes: str, scores: str, anchors: str | None, k: int,
                    score_threshold: float, iou_threshold: float, background: int,
                    activation: bool, agnostic: bool, coding: int) -> _EfficientResult:
    scores = g.op("Reshape", scores, g.const([0, 0, -1]))  # [B,N,C] (also from [B,N,C,1])
    shape = g.op("Shape", scores)
    b, n, c = (g.take(shape, i) for i in range(3))
    bv, nv, cv = g.vec(b), g.vec(n), g.vec(c)
    boxes4 = g.op("Reshape", boxes, g.const([0, 0, -1, 4]))  # [B,N,1|C,4]
    if anchors is not None:
        anchors = g.unsqueeze(anchors, [2])
    corners = _corners(g, boxes4, anchors, coding)
    full = g.op("Expand", corners, g.op("Concat", bv, nv, cv, g.const([4]), axis=0))

    if activation:
        threshold = -(1 << 15) if score_threshold <= 0 else as_float32(
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
    check_form(ctx, EFFICIENT_ATTRIBUTES, n_in)
    k = int(ctx.attribute("max_output_boxes", 100))
    coding = int(ctx.attribute("box_coding", 0))
    iou_threshold = float(ctx.attribute("iou_threshold", 0.5))
    check_nms_settings("max_output_boxes", k, "box_coding", coding, iou_threshold)
    g = Body(ctx.opset)
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
    check_form(ctx, EFFICIENT_ONNX_ATTRIBUTES, 2)
    k = int(ctx.attribute("max_output_boxes_per_class", -1))
    coding = int(ctx.attribute("center_point_box", 0))
    iou_threshold = float(ctx.attribute("iou_threshold", 0.5))
    check_nms_settings("max_output_boxes_per_class", k, "center_point_box", coding,
                       iou_threshold)
    g = Body(ctx.opset)
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
    check_form(ctx, BATCHED_ATTRIBUTES, 2)
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
    g = Body(ctx.opset)
    scores = g.op("Reshape", "scores", g.const([0, 0, -1]))
    shape = g.op("Shape", scores)
    b, n, c = (g.take(shape, i) for i in range(3))
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
