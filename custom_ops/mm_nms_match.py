"""mmdeploy ``NMSMatch(boxes, scores, iou_threshold, score_threshold)``: which boxes NMS
suppresses, and by which box.

``boxes`` (B, N, 4) as ``x1, y1, x2, y2``, ``scores`` (B, K, N) (class-major), the two
thresholds 1-element tensors. For each batch ``b`` and class ``k``, boxes are visited in
descending score order (ties: lower index first); a box not yet suppressed suppresses every
later, unsuppressed box ``j`` with ``IoU >= iou_threshold``, where ``IoU = inter / (area_i +
area_j - inter + 1e-10)`` (areas ``(x2 - x1) (y2 - y1)``, no +1). When the box's score is
above ``score_threshold`` and it suppressed any, a row ``[b, k, i, j]`` is emitted per
suppressed ``j``. Output: int64 (M, 4), as mmdeploy's onnxruntime kernel.
"""

from __future__ import annotations

import numpy as np

from rewriter.plugin import kernel as _kernel

F32 = np.float32


def iou_row(box: np.ndarray, others: np.ndarray) -> np.ndarray:
    """mmdeploy's ``nms_match_iou`` of one box against many (float32, the epsilon added in
    double precision as the C++ does)."""
    inter_w = np.maximum(F32(0), np.minimum(box[2], others[:, 2]) - np.maximum(box[0],
                                                                               others[:, 0]))
    inter_h = np.maximum(F32(0), np.minimum(box[3], others[:, 3]) - np.maximum(box[1],
                                                                               others[:, 1]))
    area = (box[2] - box[0]) * (box[3] - box[1])
    areas = (others[:, 2] - others[:, 0]) * (others[:, 3] - others[:, 1])
    inter = (inter_w * inter_h).astype(F32)
    union = (area + areas - inter).astype(F32)
    with np.errstate(divide="ignore", invalid="ignore"):
        return (inter.astype(np.float64) / (union.astype(np.float64) + 1e-10)).astype(F32)


def nms_match(boxes: np.ndarray, scores: np.ndarray, iou_threshold: float,
              score_threshold: float) -> np.ndarray:
    """The ``[batch, class, keeper, suppressed]`` rows (see the module docstring)."""
    boxes = boxes.astype(F32, copy=False)
    scores = scores.astype(F32, copy=False)
    rows: list[tuple[int, int, int, int]] = []
    for b in range(boxes.shape[0]):
        for k in range(scores.shape[1]):
            class_scores = scores[b, k]
            order = np.argsort(-class_scores, kind="stable")
            alive = np.ones(len(order), bool)
            for rank, i in enumerate(order):
                if not alive[i]:
                    continue
                later = order[rank + 1:]
                later = later[alive[later]]
                if later.size == 0:
                    continue
                hit = later[iou_row(boxes[b, i], boxes[b, later]) >= F32(iou_threshold)]
                alive[hit] = False
                if class_scores[i] > F32(score_threshold):
                    rows.extend((b, k, int(i), int(j)) for j in hit)
    return np.array(rows, np.int64).reshape(-1, 4)


@_kernel(signatures=["float, float, float, float -> int64"])
def kernel(boxes: np.ndarray, scores: np.ndarray, iou_threshold: np.ndarray,
           score_threshold: np.ndarray) -> np.ndarray:
    """NMSMatch(boxes (B, N, 4), scores (B, K, N), iou_thr [1], score_thr [1]) -> (M, 4)."""
    return nms_match(boxes, scores, float(iou_threshold.reshape(-1)[0]),
                     float(score_threshold.reshape(-1)[0]))
