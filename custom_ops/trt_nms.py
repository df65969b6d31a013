"""TensorRT NMS plugins in numpy, following the plugins' CUDA code step by step (the oracle
for the ``tensorrt`` plugin's decompositions; semantics in ``rewriter_plugins.tensorrt``).

* ``efficient_nms``: ``EfficientNMS_TRT`` (efficientNMSInference.cu): candidates
  ``score >= threshold`` (logit threshold with ``score_activation``), background dropped,
  sorted by score (equal scores: lower ``anchor * C + class`` first), the best 4096 greedily
  suppressed at IoU ``>=`` threshold within a class (any class if ``class_agnostic``), the
  first K kept written.
* ``efficient_nms_onnx``: ``EfficientNMS_ONNX_TRT``: the same with a per-class limit,
  rows ``(batch, class, box)`` in image then score order, padded with the last row.
* ``batched_nms``: ``BatchedNMS_TRT`` / ``BatchedNMSDynamic_TRT`` (sortScoresPerClass,
  allClassNMS, sortScoresPerImage, gatherNMSOutputs): per class ``score > threshold``, the
  ``topK`` best, suppression at IoU ``>`` threshold, the ``keepTopK`` best of all classes.
"""

from __future__ import annotations

import numpy as np

from rewriter.plugin import kernel as _kernel

_SELECTED = 4096


def _corner_boxes(boxes: np.ndarray, anchors: np.ndarray | None, coding: int) -> np.ndarray:
    boxes = boxes.astype(np.float32)
    if anchors is not None:
        anchors = anchors.astype(np.float32)
        if coding == 0:
            lo = np.minimum(boxes[..., :2], boxes[..., 2:]) + np.minimum(
                anchors[..., :2], anchors[..., 2:])
            hi = np.maximum(boxes[..., :2], boxes[..., 2:]) + np.maximum(
                anchors[..., :2], anchors[..., 2:])
            return np.concatenate([lo, hi], axis=-1)
        center = boxes[..., :2] * anchors[..., 2:] + anchors[..., :2]
        size = anchors[..., 2:] * np.exp(boxes[..., 2:])
        boxes = np.concatenate([center, size], axis=-1)
    if coding == 1:
        half = boxes[..., 2:] * np.float32(0.5)
        return np.concatenate([boxes[..., :2] - half, boxes[..., :2] + half], axis=-1)
    return boxes


def _efficient(boxes, scores, anchors, *, score_threshold, iou_threshold, k, background,
               activation, agnostic, coding, per_class_limit=-1):
    """Per image: the kept (score, class, anchor) triples in output order."""
    scores = scores.reshape(scores.shape[0], scores.shape[1], -1).astype(np.float32)
    batch, n, c = scores.shape
    boxes = boxes.reshape(batch, n, -1, 4)
    if anchors is not None:
        anchors = anchors[:, :, None, :]
    corners = np.broadcast_to(_corner_boxes(boxes, anchors, coding), (batch, n, c, 4))
    threshold = np.float32(score_threshold)
    if activation:
        threshold = (np.float32(-(1 << 15)) if score_threshold <= 0 else
                     np.float32(np.log(threshold / (np.float32(1) - threshold))))
    iou_threshold = np.float32(iou_threshold)
    results = []
    for b in range(batch):
        flat = scores[b].reshape(-1)
        classes = np.arange(flat.size) % c
        cand = np.nonzero((flat >= threshold) & (classes != background))[0]
        order = cand[np.argsort(-flat[cand], kind="stable")][:_SELECTED]
        anchors_of, classes_of = np.divmod(order, c)
        boxes_of = corners[b, anchors_of, classes_of]  # [M,4] in candidate order
        lo = np.minimum(boxes_of[:, :2], boxes_of[:, 2:])
        hi = np.maximum(boxes_of[:, :2], boxes_of[:, 2:])
        ext = hi - lo
        area = np.where((ext > 0).all(axis=1), ext[:, 0] * ext[:, 1], np.float32(0))
        kept = np.zeros(len(order), np.int64)
        n_kept, out = 0, []
        per_class = np.zeros(c, np.int64)
        for i, j in enumerate(order):
            if len(out) >= k:
                break
            cls = int(classes_of[i])
            if n_kept:
                idx = kept[:n_kept]
                overlap = np.minimum(hi[i], hi[idx]) - np.maximum(lo[i], lo[idx])
                inter = np.where((overlap > 0).all(axis=1), overlap[:, 0] * overlap[:, 1],
                                 np.float32(0))
                union = area[i] + area[idx] - inter
                with np.errstate(divide="ignore", invalid="ignore"):
                    iou = np.where((inter > 0) & (union > 0), inter / union, np.float32(0))
                same = True if agnostic else classes_of[idx] == cls
                if (same & (iou >= iou_threshold)).any():
                    continue
            kept[n_kept] = i
            n_kept += 1
            if per_class_limit >= 0:
                per_class[cls] += 1
                if per_class[cls] > per_class_limit:
                    continue
            out.append((flat[j], cls, int(anchors_of[i]), boxes_of[i]))
        results.append(out)
    return results


_EFFICIENT_ATTRIBUTES = {
    "score_threshold": 0.5, "iou_threshold": 0.5, "max_output_boxes": 100,
    "background_class": -1, "score_activation": 0, "class_agnostic": 0, "box_coding": 0,
    "plugin_version": "1", "plugin_namespace": "",
}


@_kernel(signatures=["float, float -> int32, float, float, int32",
                     "float, float, float -> int32, float, float, int32"],
         attributes=_EFFICIENT_ATTRIBUTES)
def efficient_nms(boxes, scores, anchors=None, *, score_threshold, iou_threshold,
                  max_output_boxes, background_class, score_activation, class_agnostic,
                  box_coding, plugin_version, plugin_namespace):
    """EfficientNMS_TRT: num_detections, detection_boxes, detection_scores, classes."""
    k = int(max_output_boxes)
    results = _efficient(boxes, scores, anchors, score_threshold=score_threshold,
                         iou_threshold=iou_threshold, k=k, background=int(background_class),
                         activation=bool(score_activation), agnostic=bool(class_agnostic),
                         coding=int(box_coding))
    batch = len(results)
    count = np.zeros((batch, 1), np.int32)
    out_boxes = np.zeros((batch, k, 4), np.float32)
    out_scores = np.zeros((batch, k), np.float32)
    out_classes = np.zeros((batch, k), np.int32)
    for b, rows in enumerate(results):
        count[b, 0] = len(rows)
        for i, (score, cls, _, box) in enumerate(rows):
            out_scores[b, i] = 1 / (1 + np.exp(-score)) if score_activation else score
            out_classes[b, i] = cls
            out_boxes[b, i] = box
    return count, out_boxes, out_scores, out_classes


@_kernel(signatures=["float, float -> int32"],
         attributes={"score_threshold": 0.5, "iou_threshold": 0.5,
                     "max_output_boxes_per_class": int, "center_point_box": 0,
                     "plugin_version": "1", "plugin_namespace": ""})
def efficient_nms_onnx(boxes, scores, *, score_threshold, iou_threshold,
                       max_output_boxes_per_class, center_point_box, plugin_version,
                       plugin_namespace):
    """EfficientNMS_ONNX_TRT: selected_indices [B*K, 3] (batch, class, box)."""
    k = int(max_output_boxes_per_class)
    results = _efficient(boxes, scores, None, score_threshold=score_threshold,
                         iou_threshold=iou_threshold, k=k, background=-1, activation=False,
                         agnostic=False, coding=int(center_point_box), per_class_limit=k)
    rows = [(b, cls, anchor) for b, image in enumerate(results) for _, cls, anchor, _ in image]
    out = np.full((len(results) * k, 3), -1, np.int32)
    if rows:
        out[:len(rows)] = rows
        out[len(rows):] = rows[-1]
    return out


def _caffe_iou(a: np.ndarray, kept: np.ndarray, normalized: bool, caffe: bool) -> np.ndarray:
    """allClassNMS's jaccardOverlap of box ``a`` with each of ``kept`` ([M,4])."""
    a_lo, a_hi = np.minimum(a[:2], a[2:]), np.maximum(a[:2], a[2:])
    k_lo, k_hi = np.minimum(kept[:, :2], kept[:, 2:]), np.maximum(kept[:, :2], kept[:, 2:])
    disjoint = ((k_lo > a_hi) | (k_hi < a_lo)).any(axis=1)
    lo = np.where(disjoint[:, None], np.float32(0), np.maximum(a_lo, k_lo))
    hi = np.where(disjoint[:, None], np.float32(0), np.minimum(a_hi, k_hi))
    ext = hi - lo
    if not normalized and caffe:
        ext = ext + np.float32(1)
    inter = ext[:, 0] * ext[:, 1]
    plus = np.float32(0 if normalized else 1)
    a_size = (a_hi[0] - a_lo[0] + plus) * (a_hi[1] - a_lo[1] + plus)
    k_size = (k_hi[:, 0] - k_lo[:, 0] + plus) * (k_hi[:, 1] - k_lo[:, 1] + plus)
    with np.errstate(divide="ignore", invalid="ignore"):
        iou = inter / (a_size + k_size - inter)
    return np.where((ext > 0).all(axis=1), iou, np.float32(0))


@_kernel(signatures=["float, float -> int32, float, float, float"],
         attributes={"shareLocation": 1, "backgroundLabelId": -1, "numClasses": int,
                     "topK": int, "keepTopK": int, "scoreThreshold": 0.0,
                     "iouThreshold": 0.5, "isNormalized": 1, "clipBoxes": 1, "scoreBits": 16,
                     "caffeSemantics": 1, "plugin_version": "1", "plugin_namespace": ""})
def batched_nms(boxes, scores, *, shareLocation, backgroundLabelId, numClasses, topK,
                keepTopK, scoreThreshold, iouThreshold, isNormalized, clipBoxes, scoreBits,
                caffeSemantics, plugin_version, plugin_namespace):
    """BatchedNMS_TRT / BatchedNMSDynamic_TRT: num_detections, boxes, scores, classes."""
    scores = scores.reshape(scores.shape[0], scores.shape[1], -1).astype(np.float32)
    batch, n, c = scores.shape
    boxes = boxes.reshape(batch, n, -1, 4).astype(np.float32)
    keep_top_k, top_k = int(keepTopK), int(topK)
    count = np.zeros((batch, 1), np.int32)
    out_boxes = np.zeros((batch, keep_top_k, 4), np.float32)
    out_scores = np.zeros((batch, keep_top_k), np.float32)
    out_classes = np.full((batch, keep_top_k), -1, np.float32)
    if keep_top_k > top_k:  # the plugin writes nothing
        return count, out_boxes, out_scores, out_classes
    threshold, iou_threshold = np.float32(scoreThreshold), np.float32(iouThreshold)
    for b in range(batch):
        kept_all = []
        for cls in range(c):
            if cls == backgroundLabelId:
                continue
            column = scores[b, :, cls]
            cand = np.nonzero(column > threshold)[0]
            order = cand[np.argsort(-column[cand], kind="stable")][:top_k]
            kept: list[np.ndarray] = []
            for position, anchor in enumerate(order):
                box = boxes[b, anchor, 0 if shareLocation else cls]
                if kept and (_caffe_iou(box, np.asarray(kept), bool(isNormalized),
                                        bool(caffeSemantics)) > iou_threshold).any():
                    continue
                kept.append(box)
                kept_all.append((-column[anchor], cls * top_k + position, cls, box))
        kept_all.sort(key=lambda t: (t[0], t[1]))
        chosen = kept_all[:keep_top_k]
        count[b, 0] = len(chosen)
        for i, (neg_score, _, cls, box) in enumerate(chosen):
            out_scores[b, i] = -neg_score
            out_classes[b, i] = cls
            out_boxes[b, i] = np.clip(box, 0, 1) if clipBoxes else box
    return count, out_boxes, out_scores, out_classes
