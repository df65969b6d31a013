"""OpenVINO's ``ExperimentalDetectronDetectionOutput(rois, deltas, scores, im_info)``
(``org.openvinotoolkit``, the ONNX importer's op; ``ExperimentalDetectronDetectionOutput-6``
as OpenVINO's CPU plugin computes it), in float32.

``rois`` (R, 4) ``x0, y0, x1, y1``; ``deltas`` (R, 4 C); ``scores`` (R, C); ``C =
num_classes``, class 0 the background. For each roi with ``x1 > x0`` and ``y1 > y0`` and each
class ``c >= 1`` (pixel offset 1): ``w = x1 - x0 + 1``, centre ``x0 + w / 2`` (likewise
``y``); ``(dx, dy, dw, dh) = deltas[r, 4c:4c+4] / deltas_weights``; the refined box has
centre ``d * size + centre`` and size ``exp(min(d_log, max_delta_log_wh)) * size``, corners
``centre - size / 2`` and ``centre + size / 2 - 1``, each clamped below at 0 (not above:
``im_info`` is not used). Other rois keep a zero box and score 0.

Per class ``c >= 1``: candidates ``score > score_threshold``, visited by descending score
(equal scores: lower roi first); a candidate is kept unless its IoU with an already kept box
is ``> nms_threshold`` (``IoU = I / (A1 + A2 - I)``, widths ``x1 - x0 + 1``); the first
``post_nms_count`` kept. The detections, class by class in that order, are sorted by
descending score (equal scores: lower roi first) only when there are more than
``max_detections_per_image``, and cut to that many. Outputs (K = max_detections_per_image):
boxes (K, 4) float, classes (K,) int64 (OpenVINO's are int32; exporters declare int64) and
scores (K,) float; slots past the detections are 0. ``class_agnostic_box_regression`` is
accepted and has no effect, as in OpenVINO (``deltas`` must hold 4 values per class).
"""

from __future__ import annotations

import math

import numpy as np

from rewriter.plugin import kernel as _kernel

F32 = np.float32


def refine_boxes(rois: np.ndarray, deltas: np.ndarray, weights: list[float],
                 max_delta_log_wh: float) -> tuple[np.ndarray, np.ndarray]:
    """Refined boxes (C, R, 4) and their +1 areas (C, R); class 0 and rois of no extent
    stay 0."""
    count = rois.shape[0]
    classes = deltas.shape[1] // 4
    boxes = np.zeros((classes, count, 4), F32)
    areas = np.zeros((classes, count), F32)
    one, half = F32(1), F32(0.5)
    x0, y0, x1, y1 = (rois[:, i] for i in range(4))
    valid = ((x1 - x0) > 0) & ((y1 - y0) > 0)
    ww, hh = x1 - x0 + one, y1 - y0 + one
    ctr_x, ctr_y = x0 + half * ww, y0 + half * hh
    d = deltas.reshape(count, classes, 4)[:, 1:] / np.asarray(weights[:4], F32)
    limit = F32(max_delta_log_wh)
    pred_x = d[..., 0] * ww[:, None] + ctr_x[:, None]
    pred_y = d[..., 1] * hh[:, None] + ctr_y[:, None]
    pred_w = np.exp(np.minimum(d[..., 2], limit)) * ww[:, None]
    pred_h = np.exp(np.minimum(d[..., 3], limit)) * hh[:, None]
    corners = np.stack([pred_x - half * pred_w, pred_y - half * pred_h,
                        pred_x + half * pred_w - one, pred_y + half * pred_h - one], -1)
    corners = np.maximum(F32(0), corners.astype(F32))
    sizes = ((corners[..., 2] - corners[..., 0] + one)
             * (corners[..., 3] - corners[..., 1] + one)).astype(F32)
    boxes[1:] = np.where(valid[:, None, None], corners, F32(0)).transpose(1, 0, 2)
    areas[1:] = np.where(valid[:, None], sizes, F32(0)).T
    return boxes, areas


def overlap(boxes: np.ndarray, areas: np.ndarray, i: int, j: int) -> np.float32:
    """OpenVINO's ``JaccardOverlap`` (pixel offset 1) of boxes ``i`` and ``j``."""
    a, b = boxes[i], boxes[j]
    if b[0] > a[2] or b[2] < a[0] or b[1] > a[3] or b[3] < a[1]:
        return F32(0)
    width = F32(min(a[2], b[2]) - max(a[0], b[0]) + F32(1))
    height = F32(min(a[3], b[3]) - max(a[1], b[1]) + F32(1))
    if width <= 0 or height <= 0:
        return F32(0)
    inter = F32(width * height)
    return F32(inter / F32(F32(areas[i] + areas[j]) - inter))


def detection_output(rois: np.ndarray, deltas: np.ndarray, scores: np.ndarray, *,
                     score_threshold: float, nms_threshold: float, max_delta_log_wh: float,
                     num_classes: int, post_nms_count: int, max_detections_per_image: int,
                     deltas_weights: list[float]) -> tuple[np.ndarray, ...]:
    """(boxes, classes, scores) as the module docstring describes."""
    rois, deltas, scores = (np.asarray(a, F32) for a in (rois, deltas, scores))
    count = rois.shape[0]
    if scores.shape != (count, num_classes) or deltas.shape != (count, 4 * num_classes):
        raise ValueError(f"ExperimentalDetectronDetectionOutput: scores {scores.shape} and "
                         f"deltas {deltas.shape} do not fit {count} rois of "
                         f"{num_classes} classes")
    if len(deltas_weights) != 4 or max_detections_per_image <= 0:
        raise ValueError("ExperimentalDetectronDetectionOutput: deltas_weights needs 4 "
                         "values and max_detections_per_image must be positive")
    boxes, areas = refine_boxes(rois, deltas, deltas_weights, max_delta_log_wh)
    valid = ((rois[:, 2] - rois[:, 0]) > 0) & ((rois[:, 3] - rois[:, 1]) > 0)
    refined_scores = np.where(valid[None, :], scores.T, F32(0))
    refined_scores[0] = 0
    threshold, nms_limit = F32(score_threshold), F32(nms_threshold)
    detections: list[tuple[np.float32, int, int]] = []  # (score, class, roi)
    for c in range(1, num_classes):
        class_scores = refined_scores[c]
        candidates = np.nonzero(class_scores > threshold)[0]
        order = candidates[np.argsort(-class_scores[candidates], kind="stable")]
        kept: list[int] = []
        for i in order:
            if all(overlap(boxes[c], areas[c], int(i), k) <= nms_limit for k in kept):
                kept.append(int(i))
        if post_nms_count != -1:
            kept = kept[:post_nms_count]
        detections += [(class_scores[i], c, i) for i in kept]
    if len(detections) > max_detections_per_image:
        detections = sorted(detections, key=lambda d: (-d[0], d[2]))[:max_detections_per_image]
    out_boxes = np.zeros((max_detections_per_image, 4), F32)
    out_classes = np.zeros(max_detections_per_image, np.int64)
    out_scores = np.zeros(max_detections_per_image, F32)
    for slot, (score, c, i) in enumerate(detections):
        out_boxes[slot] = boxes[c, i]
        out_classes[slot] = c
        out_scores[slot] = score
    return out_boxes, out_classes, out_scores


@_kernel(signatures=["float, float, float, float -> float, int64, float"],
         attributes={"score_threshold": 0.05, "nms_threshold": 0.5,
                     "max_delta_log_wh": float(F32(math.log(1000.0 / 16.0))),
                     "num_classes": 81, "post_nms_count": 2000,
                     "max_detections_per_image": 100, "class_agnostic_box_regression": 0,
                     "deltas_weights": [10.0, 10.0, 5.0, 5.0]})
def kernel(rois: np.ndarray, deltas: np.ndarray, scores: np.ndarray, im_info: np.ndarray, *,
           score_threshold: float, nms_threshold: float, max_delta_log_wh: float,
           num_classes: int, post_nms_count: int, max_detections_per_image: int,
           class_agnostic_box_regression: int, deltas_weights: list[float]):
    """ExperimentalDetectronDetectionOutput -> boxes (K, 4), classes (K,), scores (K,)
    (``im_info`` and ``class_agnostic_box_regression`` unused, as in OpenVINO)."""
    return detection_output(rois, deltas, scores, score_threshold=score_threshold,
                            nms_threshold=nms_threshold, max_delta_log_wh=max_delta_log_wh,
                            num_classes=num_classes, post_nms_count=post_nms_count,
                            max_detections_per_image=max_detections_per_image,
                            deltas_weights=deltas_weights)
