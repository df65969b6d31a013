"""Built-in plugins of onnx-graph-rewriter (installed as ``rewriter_plugins``).

Each module is registered through the ``onnx_rewriter`` entry-point group, exactly as a
third-party plugin is, and uses only the public ``rewriter`` API (``rewriter.plugin``).
``onnx-rewriter ops --json`` names the module and function of every remedy.

Module index:

* targets: ``onnxruntime_target`` (with ``onnxruntime_reduced``, reduced builds' operator
  configs, and ``onnxruntime_feeds``, feeding its Python API), ``openvino_target``,
  ``tract_target``, ``reference_target`` (the ONNX reference evaluator), ``opset_target``
  (``opset:N``);
* passes: ``opset_conversion`` (lowering to ``opset:N``), ``ir_version``,
  ``external_shape_data``, ``static_if``, ``static_sequences``;
* standard ops: ``onnx_functions`` (spec function bodies), ``onnx_lowering`` (forms a runtime
  lacks), ``onnx_standard`` (element types and versions a runtime lacks), ``float_classes``
  (IsNaN/IsInf by comparisons), ``static_axis`` (run-time axes made constant),
  ``onnx_preview`` (preview domains), ``onnx_removed`` (ops removed from the standard);
* vendor ops: ``com_microsoft`` (onnxruntime contrib ops), ``pytorch`` (ATen fallbacks,
  caffe2), ``tensorrt`` (TensorRT plugins), ``mmdeploy`` (OpenMMLab ops),
  ``openvino_deformable`` (OpenVINO's DeformableConv2D), ``ai_onnx_ml`` (classical ML);
* kernels: ``custom_ops`` (the Python kernels of ``rewriter_custom_ops``), ``ortx_native``
  (onnxruntime-extensions' native kernels).
"""
