"""org.pytorch._caffe2::GenerateProposals: caffe2's RPN proposal generation (upright boxes),
in numpy float32 as caffe2's Eigen code computes it.

Inputs ``scores (N, A, H, W)``, ``bbox_deltas (N, 4A, H, W)``, ``im_info (N, 3)`` (height,
width, scale), ``anchors (A, 4)`` (x1, y1, x2, y2); outputs ``rois (R, 5)`` (image index, x1,
y1, x2, y2) and ``rois_probs (R)``, image by image. For each image, with ``p = 1`` if
``legacy_plus_one`` else 0 and ``stride = 1 / spatial_scale``:

1. anchors at every cell, ordered (h, w, a): ``anchor[a] + (w, h, w, h) * stride``; deltas and
   scores reordered the same way;
2. the ``pre_nms_topN`` best scores (all when <= 0), highest first (ties: lower index first;
   caffe2's partial sort leaves their order unspecified);
3. box transform: ``wd = x2 - x1 + p``, ``cx = x1 + wd / 2``, ``dw, dh`` clipped above at
   ``log(1000 / 16)``; ``cx' = dx wd + cx``, ``w' = exp(dw) wd``; the box is
   ``(cx' - w'/2, cy' - h'/2, cx' + w'/2 - p, cy' + h'/2 - p)``;
4. clip x to ``[0, int(width) - p]`` and y to ``[0, int(height) - p]``;
5. keep boxes with both sides (``x2 - x1 + p``) >= ``min_size * scale`` and centre
   (``x1 + side / 2``) inside ``(width, height)``;
6. greedy NMS in score order: drop a box whose IoU (areas and intersections with ``+ p``)
   with a kept one exceeds ``nms_thresh``; stop at ``post_nms_topN`` boxes (when > 0).

Rotated boxes (``anchors`` of width 5) are not implemented (an error says so).
"""

from __future__ import annotations

import math

import numpy as np

from rewriter.plugin import kernel as _kernel

BBOX_XFORM_CLIP = np.float32(math.log(1000.0 / 16.0))


def all_anchors(anchors: np.ndarray, height: int, width: int, stride: float) -> np.ndarray:
    """Anchors shifted to every cell, as (H * W * A, 4) in (h, w, a) order."""
    shift_x = np.arange(width, dtype=np.float32) * np.float32(stride)
    shift_y = np.arange(height, dtype=np.float32) * np.float32(stride)
    sx, sy = np.meshgrid(shift_x, shift_y)  # (H, W)
    shifts = np.stack([sx, sy, sx, sy], axis=-1).reshape(-1, 1, 4)
    return (anchors.reshape(1, -1, 4).astype(np.float32) + shifts).reshape(-1, 4)


def bbox_transform(boxes: np.ndarray, deltas: np.ndarray, plus_one: int) -> np.ndarray:
    one = np.float32(plus_one)
    widths = boxes[:, 2] - boxes[:, 0] + one
    heights = boxes[:, 3] - boxes[:, 1] + one
    ctr_x = boxes[:, 0] + np.float32(0.5) * widths
    ctr_y = boxes[:, 1] + np.float32(0.5) * heights
    dw = np.minimum(deltas[:, 2], BBOX_XFORM_CLIP)
    dh = np.minimum(deltas[:, 3], BBOX_XFORM_CLIP)
    pred_ctr_x = deltas[:, 0] * widths + ctr_x
    pred_ctr_y = deltas[:, 1] * heights + ctr_y
    pred_w = np.exp(dw) * widths
    pred_h = np.exp(dh) * heights
    half = np.float32(0.5)
    return np.stack([pred_ctr_x - half * pred_w, pred_ctr_y - half * pred_h,
                     pred_ctr_x + half * pred_w - one, pred_ctr_y + half * pred_h - one],
                    axis=1).astype(np.float32)


def clip_boxes(boxes: np.ndarray, height: int, width: int, plus_one: int) -> np.ndarray:
    out = boxes.copy()
    out[:, 0::2] = np.maximum(np.minimum(boxes[:, 0::2], np.float32(width - plus_one)), 0)
    out[:, 1::2] = np.maximum(np.minimum(boxes[:, 1::2], np.float32(height - plus_one)), 0)
    return out


def filter_boxes(boxes: np.ndarray, min_size: float, im_info: np.ndarray,
                 plus_one: int) -> np.ndarray:
    min_size = float(min_size) * float(im_info[2])  # caffe2: a double
    ws = boxes[:, 2] - boxes[:, 0] + np.float32(plus_one)
    hs = boxes[:, 3] - boxes[:, 1] + np.float32(plus_one)
    x_ctr = boxes[:, 0] + ws / np.float32(2)
    y_ctr = boxes[:, 1] + hs / np.float32(2)
    keep = ((ws.astype(np.float64) >= min_size) & (hs.astype(np.float64) >= min_size)
            & (x_ctr < np.float32(im_info[1])) & (y_ctr < np.float32(im_info[0])))
    return np.nonzero(keep)[0]


def nms(boxes: np.ndarray, order: np.ndarray, thresh: float, top_n: int,
        plus_one: int) -> list[int]:
    """Greedy NMS over ``order`` (indices, best first); at most ``top_n`` when >= 0."""
    one = np.float32(plus_one)
    x1, y1, x2, y2 = (boxes[:, i] for i in range(4))
    areas = (x2 - x1 + one) * (y2 - y1 + one)
    keep: list[int] = []
    order = np.asarray(order)
    while order.size > 0:
        if 0 <= top_n <= len(keep):
            break
        i, rest = order[0], order[1:]
        keep.append(int(i))
        w = np.maximum(np.minimum(x2[rest], x2[i]) - np.maximum(x1[rest], x1[i]) + one, 0)
        h = np.maximum(np.minimum(y2[rest], y2[i]) - np.maximum(y1[rest], y1[i]) + one, 0)
        inter = w * h
        with np.errstate(divide="ignore", invalid="ignore"):
            overlap = inter / (areas[i] + areas[rest] - inter)
        order = rest[overlap <= np.float32(thresh)]
    return keep


def proposals_for_image(scores, deltas, im_info, anchors_all, *, pre_nms_topN, post_nms_topN,
                        nms_thresh, min_size, plus_one):
    """One image's boxes (R, 4) and probabilities (R,)."""
    scores = scores.transpose(1, 2, 0).reshape(-1)  # (A, H, W) -> (H, W, A)
    deltas = deltas.reshape(-1, 4, *deltas.shape[1:]).transpose(2, 3, 0, 1).reshape(-1, 4)
    order = np.argsort(-scores, kind="stable")
    if 0 < pre_nms_topN < scores.size:
        order = order[:pre_nms_topN]
    proposals = bbox_transform(anchors_all[order], deltas[order], plus_one)
    proposals = clip_boxes(proposals, int(im_info[0]), int(im_info[1]), plus_one)
    keep = filter_boxes(proposals, min_size, im_info, plus_one)
    top_n = post_nms_topN if 0 < post_nms_topN < keep.size else -1
    keep = nms(proposals, keep, nms_thresh, top_n, plus_one)
    return proposals[keep], scores[order][keep]


def generate_proposals(scores, bbox_deltas, im_info, anchors, *, spatial_scale=0.0625,
                       pre_nms_topN=6000, post_nms_topN=300, nms_thresh=0.7, min_size=16.0,
                       legacy_plus_one=1):
    """caffe2's GenerateProposals on upright boxes; returns (rois, rois_probs)."""
    if anchors.ndim != 2 or anchors.shape[1] != 4:
        raise NotImplementedError("GenerateProposals: only upright boxes (anchors (A, 4)) "
                                  "are implemented")
    n, a, height, width = scores.shape
    if bbox_deltas.shape != (n, 4 * a, height, width) or im_info.shape != (n, 3):
        raise ValueError(f"GenerateProposals: inconsistent shapes {scores.shape}, "
                         f"{bbox_deltas.shape}, {im_info.shape}, {anchors.shape}")
    anchors_all = all_anchors(anchors, height, width, 1.0 / spatial_scale)
    rois, probs = [], []
    for i in range(n):
        boxes, p = proposals_for_image(
            scores[i].astype(np.float32), bbox_deltas[i].astype(np.float32),
            im_info[i].astype(np.float32), anchors_all, pre_nms_topN=pre_nms_topN,
            post_nms_topN=post_nms_topN, nms_thresh=nms_thresh, min_size=min_size,
            plus_one=int(bool(legacy_plus_one)))
        rois.append(np.concatenate([np.full((len(boxes), 1), i, np.float32), boxes], axis=1))
        probs.append(p)
    return (np.concatenate(rois).reshape(-1, 5).astype(np.float32),
            np.concatenate(probs).reshape(-1).astype(np.float32))


@_kernel(signatures=["float, float, float, float -> float, float"], attributes={
    "spatial_scale": 0.0625, "pre_nms_topN": 6000, "post_nms_topN": 300, "nms_thresh": 0.7,
    "min_size": 16.0, "angle_bound_on": 1, "angle_bound_lo": -90, "angle_bound_hi": 90,
    "clip_angle_thresh": 1.0, "legacy_plus_one": 1})
def kernel(scores, bbox_deltas, im_info, anchors, *, spatial_scale, pre_nms_topN,
           post_nms_topN, nms_thresh, min_size, legacy_plus_one, **_rotated_only):
    """caffe2 GenerateProposals (upright boxes; the angle attributes only affect rotated
    ones)."""
    return generate_proposals(scores, bbox_deltas, im_info, anchors,
                              spatial_scale=spatial_scale, pre_nms_topN=pre_nms_topN,
                              post_nms_topN=post_nms_topN, nms_thresh=nms_thresh,
                              min_size=min_size, legacy_plus_one=legacy_plus_one)
