"""``org.pytorch._caffe2::GenerateProposals`` (upright boxes, float), from opset 9 (see the
package's docstring for the computation).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from onnx import FunctionProto, TensorProto, helper

from rewriter.plugin import Declined
from rewriter.plugin import present as _present

from .body import Body, body_opset
from .calls import attributes

_PROPOSAL_ATTRIBUTES = ("spatial_scale", "pre_nms_topN", "post_nms_topN", "nms_thresh",
                        "min_size", "angle_bound_on", "angle_bound_lo", "angle_bound_hi",
                        "clip_angle_thresh", "legacy_plus_one")
BBOX_XFORM_CLIP = np.float32(math.log(1000.0 / 16.0))
MIN_PROPOSALS_OPSET = 9  # NonZero, Where, ConstantOfShape, IsNaN


def _proposal_count(ctx, scores: str) -> int | None:
    """``A * H * W`` when the scores' shape says so."""
    shape = ctx.shape(scores)
    if shape is None or len(shape) != 4 or any(d is None for d in shape[1:]):
        return None
    return int(np.prod(shape[1:]))


def _greedy_nms(b: Body, boxes: Sequence[str], areas: str, alive: str, count_init: str,
                thresh: float, post_nms_topN: int, one: str | None) -> str:
    """caffe2's greedy NMS over ``(N, K)`` candidates sorted by score: a Loop over the
    K positions keeps candidate ``k`` of image ``n`` if it is still alive (passed the filter,
    not suppressed) and the image has fewer than ``post_nms_topN`` boxes, then kills every
    candidate whose IoU with it exceeds ``thresh`` (NaN IoU too, as caffe2's ``ovr <=
    thresh`` test). Returns the ``(N, K')`` kept mask (``K' <= K``: the loop stops once every
    image is full)."""
    x1, y1, x2, y2 = boxes
    body = Body(b.opset, TensorProto.FLOAT, prefix="nms_")
    it, cond_in, alive_in, count_in = "nms_iter", "nms_cond", "nms_alive", "nms_count"
    keep = body.op("Gather", alive_in, it, axis=1)
    if post_nms_topN > 0:
        keep = body.op("And", keep, body.op("Less", count_in, body.literal(post_nms_topN)))

    def at(values: str) -> str:
        return body.unsqueeze(body.op("Gather", values, it, axis=1), [1])

    def overlap(lo: str, hi: str) -> str:
        side = body.op("Sub", body.op("Min", hi, at(hi)), body.op("Max", lo, at(lo)))
        if one is not None:
            side = body.op("Add", side, body.literal(1.0))
        return body.op("Max", side, body.literal(0.0))

    inter = body.op("Mul", overlap(x1, x2), overlap(y1, y2))
    iou = body.op("Div", inter, body.op("Sub", body.op("Add", at(areas), areas), inter))
    drop = body.op("Or", body.op("Greater", iou, body.literal(thresh)),
                         body.op("IsNaN", iou))
    drop = body.op("And", drop, body.unsqueeze(keep, [1]))
    alive_out = body.op("And", alive_in, body.op("Not", drop))
    count_out = body.op("Add", count_in, body.cast(keep, TensorProto.FLOAT))
    if post_nms_topN > 0:
        fewest = body.op("ReduceMin", count_out, keepdims=0)
        cond_out = body.op("Less", fewest, body.literal(post_nms_topN))
    else:
        cond_out = body.op("Identity", cond_in)
    vi = helper.make_tensor_value_info
    graph = helper.make_graph(
        body.nodes, "greedy_nms",
        [vi(it, TensorProto.INT64, []), vi(cond_in, TensorProto.BOOL, []),
         vi(alive_in, TensorProto.BOOL, None), vi(count_in, TensorProto.FLOAT, None)],
        [vi(cond_out, TensorProto.BOOL, []), vi(alive_out, TensorProto.BOOL, None),
         vi(count_out, TensorProto.FLOAT, None), vi(keep, TensorProto.BOOL, None)])
    trips = b.reshape(b.op("Gather", b.op("Shape", x1), b.ints([1]), axis=0), [])
    start = b.const(np.array(True))
    _, _, kept = b.op("Loop", trips, start, alive, count_init, outputs=3, body=graph)
    return b.op("Transpose", kept, perm=[1, 0])


def build_generate_proposals(ctx) -> FunctionProto | None:
    """caffe2 GenerateProposals on upright boxes, from standard ops (opset >= 9)."""
    node = ctx.node
    attrs = attributes(node, ())
    unknown = sorted(name for name in attrs if name not in _PROPOSAL_ATTRIBUTES)
    if unknown:
        raise Declined(f"unknown attribute(s) {', '.join(unknown)}")
    if len(node.input) != 4 or not all(node.input) or not any(node.output):
        raise Declined("needs scores, bbox_deltas, im_info and anchors, and an output used")
    if list(ctx.input_types or [])[:4] != ["tensor(float)"] * 4:
        raise Declined("the four inputs must be float")
    opset = body_opset(ctx)
    anchor_shape = ctx.shape(node.input[3])
    if opset < MIN_PROPOSALS_OPSET or anchor_shape is None or len(anchor_shape) != 2 \
            or anchor_shape[1] != 4:
        raise Declined(f"needs ai.onnx opset {MIN_PROPOSALS_OPSET} and anchors declared (A, 4) "
                       "(rotated anchors (A, 5), or a width the body cannot know)")
    spatial_scale = float(attrs.get("spatial_scale", 0.0625))
    pre_nms_topN = int(attrs.get("pre_nms_topN", 6000))
    post_nms_topN = int(attrs.get("post_nms_topN", 300))
    nms_thresh = float(attrs.get("nms_thresh", 0.7))
    min_size = float(attrs.get("min_size", 16.0))
    plus_one = bool(attrs.get("legacy_plus_one", 1))
    if spatial_scale <= 0:
        raise Declined("spatial_scale must be positive")
    count = _proposal_count(ctx, node.input[0])
    if count is None and opset < 10:
        raise Declined("before opset 10 TopK's k is an attribute: the candidate count must be "
                       "declared")

    b = Body(opset, TensorProto.FLOAT)
    scores, deltas, im_info, anchors = "in0", "in1", "in2", "in3"
    one = b.literal(1.0) if plus_one else None
    half = b.literal(0.5)

    def plus(x: str) -> str:  # ``x + 1`` in legacy_plus_one mode
        return b.op("Add", x, one) if one is not None else x

    def minus(x: str) -> str:
        return b.op("Sub", x, one) if one is not None else x

    # per image, scores and deltas in (h, w, a) order: (N, HWA) and (N * HWA, 4)
    shape = b.op("Shape", scores)
    flat_scores = b.reshape(b.op("Transpose", scores, perm=[0, 2, 3, 1]), [0, -1])
    split = b.op("Concat", b.op("Gather", shape, b.ints([0, 1]), axis=0), b.ints([4]),
                           b.op("Gather", shape, b.ints([2, 3]), axis=0), axis=0)
    flat_deltas = b.reshape(b.op("Transpose", b.reshape(deltas, split), perm=[0, 3, 4, 1, 2]),
                            [-1, 4])
    # anchors at every cell, (HWA,) per coordinate: anchor[a] + (w, h, w, h) * stride
    stride = b.literal(np.float32(1.0 / spatial_scale))
    height, width = (b.op("Gather", shape, b.ints([k]), axis=0) for k in (2, 3))
    grid = b.op("Concat", height, width, b.ints([1]), axis=0)
    shift_x = b.reshape(b.op("Mul", b.cast(b.iota(width), TensorProto.FLOAT), stride),
                        [1, -1, 1])
    shift_y = b.reshape(b.op("Mul", b.cast(b.iota(height), TensorProto.FLOAT), stride),
                        [-1, 1, 1])
    shift_x, shift_y = (b.op("Expand", s, grid) for s in (shift_x, shift_y))
    cells = []
    for column, shift in enumerate((shift_x, shift_y, shift_x, shift_y)):
        corner = b.reshape(b.take(anchors, column, 1), [1, 1, -1])
        cells.append(b.reshape(b.op("Add", corner, shift), [-1]))

    # the pre_nms_topN best scores of each image, highest first
    k = count if pre_nms_topN <= 0 or (count is not None and pre_nms_topN >= count) else \
        pre_nms_topN if count is not None else None
    if opset < 10:
        top, order = b.op("TopK", flat_scores, outputs=2, k=k, axis=1)
    else:
        if k is not None:
            k_input = b.ints([k])
        else:
            available = b.op("Gather", b.op("Shape", flat_scores), b.ints([1]), axis=0)
            if pre_nms_topN <= 0:
                k_input = available
            else:
                wanted = b.ints([pre_nms_topN])
                k_input = b.op("Where", b.op("Less", available, wanted), available, wanted)
        top, order = b.op("TopK", flat_scores, k_input, outputs=2, axis=1)
    ax1, ay1, ax2, ay2 = (b.op("Gather", c, order, axis=0) for c in cells)  # (N, K)
    per_image = b.op("Gather", b.op("Shape", flat_scores), b.ints([1]), axis=0)
    images = b.op("Gather", shape, b.ints([0]), axis=0)
    offsets = b.op("Mul", b.reshape(b.iota(images), [-1, 1]), per_image)
    picked = b.op("Gather", flat_deltas, b.op("Add", order, offsets), axis=0)  # (N, K, 4)
    dx, dy, dw, dh = (b.take(picked, c, 2) for c in range(4))

    # box transform (caffe2's bbox_transform_upright, float32)
    clip = b.literal(BBOX_XFORM_CLIP)
    new = []
    for lo, hi, delta, log_size in ((ax1, ax2, dx, dw), (ay1, ay2, dy, dh)):
        size = plus(b.op("Sub", hi, lo))
        centre = b.op("Add", lo, b.op("Mul", half, size))
        pred_centre = b.op("Add", b.op("Mul", delta, size), centre)
        pred_half = b.op("Mul", half, b.op("Mul", b.op("Exp", b.op("Min", log_size, clip)),
                                                   size))
        new.append((b.op("Sub", pred_centre, pred_half),
                    minus(b.op("Add", pred_centre, pred_half))))
    # clip to the image: x to [0, int(width) - p], y to [0, int(height) - p]
    limits = [b.reshape(b.take(im_info, c, 1), [-1, 1]) for c in range(3)]  # (N, 1) each
    zero = b.literal(0.0)
    boxes = {}
    for (lo, hi), limit, names in zip(new, (limits[1], limits[0]), (("x1", "x2"), ("y1", "y2"))):
        bound = minus(b.cast(b.cast(limit, TensorProto.INT64), TensorProto.FLOAT))
        for value, name in zip((lo, hi), names):
            boxes[name] = b.op("Max", b.op("Min", value, bound), zero)
    # keep sides >= min_size * im_scale (in double, as caffe2) and centres inside the image
    threshold = b.op("Mul", b.cast(limits[2], TensorProto.DOUBLE),
                            b.const(np.array(min_size, np.float64)))
    sides, alive = [], None
    for lo, hi, limit in (("x1", "x2", limits[1]), ("y1", "y2", limits[0])):
        side = plus(b.op("Sub", boxes[hi], boxes[lo]))
        sides.append(side)
        big = b.op("Not", b.op("Less", b.cast(side, TensorProto.DOUBLE), threshold))
        centre = b.op("Add", boxes[lo], b.op("Div", side, b.literal(2.0)))
        inside = b.op("And", big, b.op("Less", centre, limit))
        alive = inside if alive is None else b.op("And", alive, inside)
    areas = b.op("Mul", *sides)
    no_boxes = b.fill(images, 0, np.float32)
    kept = _greedy_nms(b, [boxes[c] for c in ("x1", "y1", "x2", "y2")], areas, alive, no_boxes,
                       nms_thresh, post_nms_topN, one)

    # the kept candidates, image by image, in score order
    where = b.op("NonZero", kept)  # (2, R)
    image, position = b.take(where, 0, 0), b.take(where, 1, 0)
    candidates = b.op("Gather", b.op("Shape", top), b.ints([1]), axis=0)
    flat_index = b.op("Add", b.op("Mul", image, candidates), position)
    stacked = b.op("Concat", *[b.unsqueeze(boxes[c], [2]) for c in ("x1", "y1", "x2", "y2")],
                   axis=2)
    kept_boxes = b.op("Gather", b.reshape(stacked, [-1, 4]), flat_index, axis=0)
    rois = b.op("Concat", b.unsqueeze(b.cast(image, TensorProto.FLOAT), [1]), kept_boxes,
                axis=1)
    probs = b.op("Gather", b.reshape(top, [-1]), flat_index, axis=0)
    # (not com_microsoft.common.trim_outputs: an unnamed Loop output crashes onnxruntime 1.32)
    outputs = [rois, probs] if _present(node.output, 1) else [rois]
    return b.positional_function("caffe2_generate_proposals", 4, outputs)


