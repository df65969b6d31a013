"""Remedies ``mmdeploy``: OpenMMLab (mmdeploy / mmcv) custom ops and the OpenVINO-named
detection ops exported next to them.

Decompositions (domains ``mmdeploy`` and ``mmcv``, each attribute baked into the body):

* ``grid_sampler(input, grid)``, exactly ``torch.nn.functional.grid_sample``:
  ``interpolation_mode`` 0/1/2 = bilinear/nearest/bicubic, ``padding_mode`` 0/1/2 =
  zeros/border/reflection, ``align_corners`` 0/1. From ai.onnx 16: ``GridSample`` (modes
  ``linear``/``nearest``/``cubic`` from opset 20). Opsets 11-15 (bilinear and nearest): the
  grid is unnormalised (``x = (g + 1) / 2 * (W - 1)`` with ``align_corners``, else ``((g + 1)
  W - 1) / 2``), clamped to ``[0, W - 1]`` (border) or reflected about ``[0, W - 1]`` /
  ``[-0.5, W - 0.5]`` then clamped (reflection); nearest rounds half to even, bilinear mixes
  the four neighbours ``(floor, floor + 1)`` with weights ``(x1 - x)(y1 - y)`` etc.;
  neighbours outside the input are 0. They are gathered as rows of the ``(N*H*W, C)``
  transposed input.
* ``MMCVRoiAlign(input, rois)`` (rois rows ``[batch, x1, y1, x2, y2]``, ``mode="avg"``) ->
  ``RoiAlign(input, rois[:, 1:5], int64(rois[:, 0]))`` with ``output_height/width``,
  ``spatial_scale``, ``sampling_ratio``; ``aligned=1`` is
  ``coordinate_transformation_mode="half_pixel"`` (ai.onnx >= 16), ``aligned=0`` the
  ``output_half_pixel`` behaviour (ai.onnx >= 10). Both are Caffe2's RoIAlign, as mmcv's.
  ``mode="max"`` is declined (ONNX's max mode takes the max of the weighted corner values,
  mmcv the max of the interpolated samples): the kernel runs it.
* ``MMCVDeformConv2d(input, offset, weight)`` and ``MMCVModulatedDeformConv2d(input, offset,
  mask, weight[, bias])``: ``stride``/``padding``/``dilation`` (symmetric pads), ``groups``,
  ``deform_groups`` (also spelled ``group``, ``deformable_group(s)``); ``im2col_step`` only
  tunes memory. ``y = sum_k w_k * mask_k * x(p + p_k + offset_k)``, bilinear with zero
  padding (a point with ``-1 < y < H``, ``-1 < x < W`` mixes its in-image neighbours),
  offsets ``(dy, dx)`` per tap. From ai.onnx 19: ``DeformConv`` (onnxruntime 1.32 has a CPU
  kernel). Opsets 11-18: the sampled columns are gathered as rows of the ``(N*H*W*dg, C/dg)``
  transposed input, weighted, masked and multiplied with the ``(groups, O/groups, C/groups *
  K)`` weight (the kernel size must be known: the weight's declared shape or initializer).
  Nodes with ``groups > 1`` and ``deform_groups > 1`` together are declined (mmdeploy's
  onnxruntime kernel assigns offset groups per conv group, unlike mmcv's PyTorch op).
* ``TRTBatchedNMS(boxes (B, N, 1|C, 4), scores (B, N, C))`` -> ``dets (B, K, 5)`` ``[x1, y1,
  x2, y2, score]``, ``labels (B, K)``, with ``return_index`` also ``index (B, K)`` (``K =
  keep_topk``), ai.onnx >= 11: per class != ``background_label_id`` the candidates ``score >
  score_threshold``, their ``topk`` best (all when ``topk <= 0`` or ``> N``), greedy
  ``NonMaxSuppression`` at IoU ``> iou_threshold`` (reversed boxes enter as empty ones: the
  plugin gives them no area), then the ``keep_topk`` best (class, box) pairs per image by
  ``TopK`` (equal scores: lower class, then lower box), boxes clipped to [0, 1] with
  ``clip_boxes``; empty slots are 0 / -1 / -1; ``index`` is the box (``class * N + box`` for
  per-class boxes). ``labels``/``index`` take the integer type the model declares (int64
  when none, as torch's exporter writes; the plugin's are int32). ``is_normalized`` has no
  effect (mmdeploy's IoU has no pixel offset). Declined: ``keep_topk <= 0``, ``score_threshold
  < 0`` (the kernel follows the plugin's arrays there), ``num_classes`` differing from the
  scores' declared class count. Where the plugin leaves its outputs unwritten
  (``keep_topk > topk``) the extra slots are empty ones.

Kernels (numpy, ``rewriter_custom_ops.mm_*`` / ``ov_*``, float32):

* ``MMCVRoiAlign`` (both modes), ``MMCVRoIAlignRotated`` (rotated boxes ``[batch, cx, cy, w,
  h, theta]``), ``NMSMatch(boxes, scores, iou_thr, score_thr)`` (``[batch, class, keeper,
  suppressed]`` rows): mmdeploy's onnxruntime kernels.
* ``TRTBatchedNMS``: mmdeploy's TensorRT plugin transcribed step by step (the oracle of the
  decomposition; it always returns the three outputs, so onnxruntime runs it only for nodes
  with ``index``, the reference evaluator for all).
* OpenVINO's ``DeformableConv2D`` (default and ``org.openvinotoolkit`` domains): its
  ``DeformableConvolution-8`` semantics (samples outside ``[0, H) x [0, W)`` are 0, the last
  row/column extends to the border) with ``strides``, ``pads``, ``dilations``, ``group``,
  ``deformable_groups``; ``auto_pad`` other than ``NOTSET`` is declined. It is also
  decomposed (:mod:`rewriter_plugins.openvino_deformable`: onnx-lowering's ``DeformConv``
  body with OpenVINO's border rule, any opset from 7), checked against this kernel.
* OpenVINO's ``ExperimentalDetectronDetectionOutput`` (``org.openvinotoolkit``): box
  refinement, per-class NMS and the per-image cut exactly as OpenVINO's CPU plugin (see
  ``rewriter_custom_ops.ov_detectron_detection_output``).

Modules, one op family each:

=================  ========================================================================
module             contents
=================  ========================================================================
``common``         what the bodies share: domains, opset ranges, body builder, declared types
``grid_sampler``   grid_sampler: GridSample, and the Gather form before opset 16
``roi_align``      MMCVRoiAlign (avg): RoiAlign
``deform_conv``    MMCV(Modulated)DeformConv2d: DeformConv; Gather + MatMul before opset 19
``batched_nms``    TRTBatchedNMS: NonMaxSuppression + TopK
``samples``        the oracles and samples of the above
=================  ========================================================================

The kernels are ``rewriter_custom_ops.mm_*`` / ``ov_*``; OpenVINO's ``DeformableConv2D``
body is :mod:`rewriter_plugins.openvino_deformable`.
"""

from __future__ import annotations

from rewriter_plugins import openvino_deformable

from rewriter.plugin import hookimpl

from .batched_nms import build_batched_nms
from .common import (
    BATCHED_NMS_OPSETS,
    BODY_DOMAIN,
    DEFORM_CONV_OPSETS,
    DEFORM_GATHER_OPSETS,
    DOMAINS,
    GRID_GATHER_OPSETS,
    GRID_SAMPLE_OPSETS,
    OPENVINO,
    ROI_ALIGN_HALF_PIXEL_OPSET,
    ROI_ALIGN_OPSETS,
)
from .deform_conv import (
    build_deform_conv,
    build_deform_conv_gather,
    build_modulated_deform_conv,
    build_modulated_deform_conv_gather,
)
from .grid_sampler import build_grid_sampler, build_grid_sampler_gather
from .roi_align import build_roi_align
from .samples import deform_conv_reference, grid_sample_reference, oracles

__all__ = ["BATCHED_NMS_OPSETS", "BODY_DOMAIN", "DEFORM_CONV_OPSETS", "DEFORM_GATHER_OPSETS",
           "DOMAINS", "GRID_GATHER_OPSETS", "GRID_SAMPLE_OPSETS", "KERNELS", "OPENVINO",
           "ROI_ALIGN_HALF_PIXEL_OPSET", "ROI_ALIGN_OPSETS", "build_batched_nms",
           "build_deform_conv", "build_deform_conv_gather", "build_grid_sampler",
           "build_grid_sampler_gather", "build_modulated_deform_conv",
           "build_modulated_deform_conv_gather", "build_roi_align", "deform_conv_reference",
           "grid_sample_reference"]


@hookimpl
def register_decompositions(registry):
    for i, domain in enumerate(DOMAINS):
        checked = oracles(first_domain=i == 0)

        def add(op_type, builder, opsets, description, domain=domain, checked=checked):
            registry.add(domain, op_type, builder, opsets=opsets, dtypes=("float",),
                         description=description, **checked[(op_type, opsets)])

        add("grid_sampler", build_grid_sampler, GRID_SAMPLE_OPSETS,
            "mmdeploy:grid_sampler -> GridSample")
        add("grid_sampler", build_grid_sampler_gather, GRID_GATHER_OPSETS,
            "mmdeploy:grid_sampler (bilinear/nearest) -> Gather (before GridSample)")
        add("MMCVRoiAlign", build_roi_align, ROI_ALIGN_OPSETS,
            "mmdeploy:MMCVRoiAlign (avg; aligned needs opset 16) -> RoiAlign")
        add("MMCVDeformConv2d", build_deform_conv, DEFORM_CONV_OPSETS,
            "mmdeploy:MMCVDeformConv2d -> DeformConv")
        add("MMCVModulatedDeformConv2d", build_modulated_deform_conv, DEFORM_CONV_OPSETS,
            "mmdeploy:MMCVModulatedDeformConv2d -> DeformConv")
        add("MMCVDeformConv2d", build_deform_conv_gather, DEFORM_GATHER_OPSETS,
            "mmdeploy:MMCVDeformConv2d -> Gather + MatMul (before DeformConv)")
        add("MMCVModulatedDeformConv2d", build_modulated_deform_conv_gather,
            DEFORM_GATHER_OPSETS,
            "mmdeploy:MMCVModulatedDeformConv2d -> Gather + MatMul (before DeformConv)")
    openvino_deformable.register(registry)  # DeformableConv2D, checked against the kernel
    registry.add("mmdeploy", "TRTBatchedNMS", build_batched_nms, opsets=BATCHED_NMS_OPSETS,
                 dtypes=("float",),
                 description="mmdeploy:TRTBatchedNMS -> NonMaxSuppression + TopK",
                 **oracles(True)[("TRTBatchedNMS", BATCHED_NMS_OPSETS)])


KERNELS = (
    *((domain, "MMCVRoiAlign", "mm_roi_align") for domain in DOMAINS),
    *((domain, "MMCVRoIAlignRotated", "mm_roi_align_rotated") for domain in DOMAINS),
    ("mmdeploy", "NMSMatch", "mm_nms_match"),
    ("mmdeploy", "TRTBatchedNMS", "mm_batched_nms"),
    ("", "DeformableConv2D", "ov_deformable_conv_2d"),
    (OPENVINO, "DeformableConv2D", "ov_deformable_conv_2d"),
    (OPENVINO, "ExperimentalDetectronDetectionOutput", "ov_detectron_detection_output"),
)


@hookimpl
def register_kernels(registry):
    for domain, op_type, module in KERNELS:
        registry.add(domain, op_type, f"rewriter_custom_ops.{module}:kernel",
                     description=f"rewriter_custom_ops.{module}")
