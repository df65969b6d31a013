"""Kernels shipped by onnx-graph-rewriter (installed as ``rewriter_custom_ops``), one op per
module, imported lazily when a model needs them.

Module index:

* onnxruntime-extensions (``ai.onnx.contrib``, ``com.microsoft.extensions``) ops:
  ``fast_gelu``, ``masked_fill``, ``neg_pos``, ``string_lower``, ``string_split``,
  ``super_resolution_preprocess``, ``super_resolution_postprocess``, ``decode_image``,
  ``encode_image``;
* ai.onnx ops onnxruntime has no kernel for: ``image_decoder``;
* PyTorch exports: ``aten_fallback`` (``ATen`` fallbacks), ``caffe2_generate_proposals``;
* mmdeploy / mmcv: ``mm_batched_nms``, ``mm_deform_conv``, ``mm_nms_match``,
  ``mm_roi_align``, ``mm_roi_align_rotated``;
* TensorRT plugins (oracles of the ``tensorrt`` plugin): ``trt_attention``, ``trt_nms``;
* OpenVINO ops: ``ov_deformable_conv_2d``, ``ov_detectron_detection_output``;
* an example kernel for a proprietary op: ``fused_swish``;
* shared by the image kernels: ``_images`` (codecs), ``_color`` (OpenCV-compatible colour
  conversion and bicubic resize).
"""
