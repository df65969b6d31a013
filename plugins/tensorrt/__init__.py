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

Modules, one op family each:

=============  ============================================================================
module         contents
=============  ============================================================================
``common``     domains, opset ranges, known attributes, the body builder, the form checks
``nms``        EfficientNMS_TRT, EfficientNMS_ONNX_TRT, BatchedNMS(Dynamic)_TRT
``attention``  fMHAPlugin, DisentangledAttention_TRT
``samples``    the oracle samples of the above
=============  ============================================================================
"""

from __future__ import annotations

from rewriter.plugin import hookimpl

from .attention import build_disentangled_attention, build_fmha
from .common import ATTENTION_OPSETS, BODY_DOMAIN, DOMAINS, NMS_OPSETS
from .nms import build_batched_nms, build_efficient_nms, build_efficient_nms_onnx
from .samples import ATTENTION_SAMPLES, NMS_SAMPLES

__all__ = ["ATTENTION_OPSETS", "BODY_DOMAIN", "DOMAINS", "NMS_OPSETS", "build_batched_nms",
           "build_disentangled_attention", "build_efficient_nms", "build_efficient_nms_onnx",
           "build_fmha"]

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


@hookimpl
def register_decompositions(registry):
    """Every op in each of its domains; the samples run in full in the first domain (the
    others share the builder: one sample checks the domain is matched)."""
    for op_type, builder, _, description in _NMS_OPS:
        for i, domain in enumerate(DOMAINS):
            samples = NMS_SAMPLES[op_type]
            registry.add(domain, op_type, builder, opsets=NMS_OPSETS, description=description,
                         dtypes=("float",), oracle="kernel",
                         samples=samples if i == 0 else samples[:1])
    for op_type, domains, builder, _, description, dtypes in _ATTENTION_OPS:
        for i, domain in enumerate(domains):
            samples = ATTENTION_SAMPLES[op_type]
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
