"""``TRTBatchedNMS(boxes, scores)``: per-class ``NonMaxSuppression``, then ``TopK`` over the
kept (class, box) scores of each image."""

from __future__ import annotations

import numpy as np
from onnx import FunctionProto, TensorProto

from rewriter.plugin import Declined

from .common import BODY_DOMAIN, Body, declared_int_type, is_float, node_attributes

_BATCHED_NMS_ATTRS = {"background_label_id", "num_classes", "topk", "keep_topk",
                      "score_threshold", "iou_threshold", "is_normalized", "clip_boxes",
                      "return_index"}


def build_batched_nms(ctx) -> FunctionProto | None:
    """TRTBatchedNMS -> per-class NonMaxSuppression, then TopK over the kept (class, box)
    scores of each image (semantics: ``rewriter_custom_ops.mm_batched_nms``)."""
    node = ctx.node
    attrs = node_attributes(node)
    if set(attrs) - _BATCHED_NMS_ATTRS or not is_float(ctx):
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
    score_dims = ctx.shape(node.input[1])
    box_dims = ctx.shape(node.input[0])
    if score_dims is not None and (len(score_dims) != 3
                                   or score_dims[2] not in (None, num_classes)):
        raise Declined("scores are not (batch, boxes, num_classes)")
    if box_dims is not None and (len(box_dims) != 4 or box_dims[3] not in (None, 4)):
        raise Declined("boxes are not (batch, boxes, classes or 1, 4)")
    int_types = [declared_int_type(ctx, name) for name in node.output[1:]]
    if None in int_types:
        raise Declined("the labels' (and index's) integer type is not declared")
    g = Body(ctx.opset)
    minus_inf = g.const(-np.inf, np.float32)
    n, c = g.dim_vector("scores", 1), g.dim_vector("scores", 2)
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
    b = g.dim_vector("scores", 0)
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
        shared = g.op("Equal", g.dim_vector("boxes", 2), g.const([1]))
        box_index = g.op("Where", shared, box, slots)  # slots: class * N + box
        g.op("Cast", g.op("Where", valid, box_index, g.const(-1)), outputs=["index"],
             to=int_types[1])
    return g.function(BODY_DOMAIN, "trt_batched_nms", ["boxes", "scores"], outputs[:n_out])
