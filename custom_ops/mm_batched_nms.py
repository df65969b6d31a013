"""mmdeploy ``TRTBatchedNMS(boxes, scores)``: multi-class NMS, following mmdeploy's TensorRT
plugin step by step (``sortScoresPerClass``, ``allClassNMS``, ``sortScoresPerImage``,
``gatherNMSOutputs``).

``boxes`` (B, N, L, 4) as ``x1, y1, x2, y2`` with ``L = 1`` (shared by every class) or
``L = C``; ``scores`` (B, N, C). With ``T = topk`` if ``0 < topk <= N`` else ``N``:

1. per image and class ``c != background_label_id``, the candidates with
   ``score > score_threshold``, sorted by descending score (equal scores: lower box first),
   the first ``T`` of them;
2. greedy NMS over them: a kept box drops every later one whose IoU with it is
   ``> iou_threshold``, ``IoU = inter / (area1 + area2 - inter)`` with widths ``x2 - x1``
   (mmdeploy passes a zero pixel offset, so ``is_normalized`` changes nothing); a box with
   ``x2 < x1`` or ``y2 < y1`` has area 0 and overlaps nothing;
3. the kept (class, box) pairs of the image sorted by descending score (equal scores: lower
   class, then lower box first); the first ``keep_topk`` are written: ``dets`` (B, K, 5)
   ``[x1, y1, x2, y2, score]`` (coordinates clipped to [0, 1] with ``clip_boxes``),
   ``labels`` (B, K) the class, ``index`` (B, K) the box (``class * N + box`` when ``L = C``);
   empty slots are 0, -1 and -1.

With ``score_threshold < 0`` the plugin's arrays are followed literally: a class whose
best-sorted slot is a non-candidate (score 0 ranks above negative candidates) gets no
suppression, and negative kept scores rank below empty slots. Where the plugin leaves its
outputs unwritten (``keep_topk > T``) the slots past the detections are padded as empty
ones. Attribute defaults are the plugin's (its parameters
are zero-initialised; ``clip_boxes`` defaults to 1); ``num_classes`` and ``keep_topk`` are
required. Outputs: float32, int64, int64 (the plugin's are int32;
torch's exporter declares int64).
"""

from __future__ import annotations

import numpy as np

from rewriter.plugin import kernel as _kernel

F32 = np.float32


def overlaps(box: np.ndarray, others: np.ndarray) -> np.ndarray:
    """mmdeploy's ``jaccardOverlap`` (offset 0) of one box against many, float32."""
    inter_min = np.maximum(box[:2], others[:, :2])
    inter_max = np.minimum(box[2:], others[:, 2:])
    disjoint = ((others[:, 0] > box[2]) | (others[:, 2] < box[0]) | (others[:, 1] > box[3])
                | (others[:, 3] < box[1]))
    size = np.where(disjoint[:, None], F32(0), inter_max - inter_min).astype(F32)
    positive = (size[:, 0] > 0) & (size[:, 1] > 0)

    def area(b: np.ndarray) -> np.ndarray:
        b = np.atleast_2d(b)
        invalid = (b[:, 2] < b[:, 0]) | (b[:, 3] < b[:, 1])
        return np.where(invalid, F32(0), (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])).astype(F32)

    inter = (size[:, 0] * size[:, 1]).astype(F32)
    with np.errstate(divide="ignore", invalid="ignore"):
        iou = (inter / (area(box) + area(others) - inter)).astype(F32)
    return np.where(positive, iou, F32(0))


def batched_nms(boxes: np.ndarray, scores: np.ndarray, *, num_classes: int,
                background_label_id: int, topk: int, keep_topk: int, score_threshold: float,
                iou_threshold: float, clip_boxes: int) -> tuple[np.ndarray, ...]:
    """(dets, labels, index) as the module docstring describes."""
    boxes = np.asarray(boxes, F32)
    scores = np.asarray(scores, F32)
    batch, n, classes = scores.shape
    if boxes.ndim != 4 or boxes.shape[:2] != (batch, n) or boxes.shape[2] not in (1, classes):
        raise ValueError(f"TRTBatchedNMS: boxes {boxes.shape} do not fit scores {scores.shape}")
    if num_classes != classes:
        raise ValueError(f"TRTBatchedNMS: num_classes={num_classes} but scores have "
                         f"{classes} classes")
    shared = boxes.shape[2] == 1
    top = topk if 0 < topk <= n else n
    if keep_topk < 0:
        raise ValueError(f"TRTBatchedNMS: keep_topk={keep_topk} gives no output shape")
    threshold, iou_limit = F32(score_threshold), F32(iou_threshold)
    dets = np.zeros((batch, keep_topk, 5), F32)
    labels = np.full((batch, keep_topk), -1, np.int64)
    index = np.full((batch, keep_topk), -1, np.int64)
    anchors = np.arange(n)
    for b in range(batch):
        image_scores, image_items = [], []  # per class, the T slots after NMS
        for c in range(classes):
            # sortScoresPerClass: non-candidates become (0, -1), stable descending sort
            valid = (scores[b, :, c] > threshold) & (c != background_label_id)
            ranked = np.where(valid, scores[b, :, c], F32(0)).astype(F32)
            items = np.where(valid, c * n + anchors, -1)
            order = np.argsort(-ranked, kind="stable")[:top]
            ranked, items = ranked[order], items[order]
            # allClassNMS: each kept item, from the first (when that is a candidate) on,
            # drops the later kept items it overlaps
            kept = items >= 0
            class_boxes = boxes[b, np.maximum(items, 0) % n, 0 if shared else c]
            ref = 0
            while ref < top and items[ref] != -1:
                later = np.nonzero(kept[ref + 1:])[0] + ref + 1
                if later.size:
                    hit = overlaps(class_boxes[ref], class_boxes[later]) > iou_limit
                    kept[later[hit]] = False
                ref += 1
                while ref < top and not kept[ref]:
                    ref += 1
            image_scores.append(np.where(kept, ranked, F32(0)))
            image_items.append(np.where(kept, items, -1))
        # sortScoresPerImage, then gatherNMSOutputs
        ranked, items = np.concatenate(image_scores), np.concatenate(image_items)
        order = np.argsort(-ranked, kind="stable")[:keep_topk]
        for slot, item in enumerate(items[order]):
            if item < 0:
                continue
            c, j = divmod(int(item), n)
            box = boxes[b, j, 0 if shared else c]
            dets[b, slot, :4] = np.clip(box, F32(0), F32(1)) if clip_boxes else box
            dets[b, slot, 4] = ranked[order[slot]]
            labels[b, slot] = c
            index[b, slot] = j if shared else item
    return dets, labels, index


@_kernel(signatures=["float, float -> float, int64, int64"],
         attributes={"num_classes": int, "background_label_id": 0, "topk": 0,
                     "keep_topk": int, "score_threshold": 0.0, "iou_threshold": 0.0,
                     "is_normalized": 0, "clip_boxes": 1, "return_index": 0})
def kernel(boxes: np.ndarray, scores: np.ndarray, *, num_classes: int,
           background_label_id: int, topk: int, keep_topk: int, score_threshold: float,
           iou_threshold: float, is_normalized: int, clip_boxes: int,
           return_index: int) -> tuple[np.ndarray, ...]:
    """TRTBatchedNMS(boxes (B, N, 1|C, 4), scores (B, N, C)) -> dets (B, K, 5), labels
    (B, K), index (B, K) (``is_normalized`` has no effect: see the module docstring)."""
    return batched_nms(boxes, scores, num_classes=num_classes,
                       background_label_id=background_label_id, topk=topk,
                       keep_topk=keep_topk, score_threshold=score_threshold,
                       iou_threshold=iou_threshold, clip_boxes=clip_boxes)
