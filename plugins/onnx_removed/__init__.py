"""Remedies ``onnx-removed``: ops onnx removed from the standard, which old exports still
carry. onnx's early "experimental" ops were deprecated in opset 10 and their schemas dropped
(``docs/ManagingExperimentalOps.md`` in onnx names each one's standard replacement); models
written for Windows ML (onnxmltools, WinMLTools, opsets 7-9) use them, and onnxruntime keeps
CPU kernels for most at opsets 7-9 only. No other runtime (tract, OpenVINO, the reference
evaluator) and no opset ceiling (``opset:N`` finds "no schema") takes them; each is written
here in the standard ops of the model's opset (7-9).

======================  ===========================================================  ==========
module                  ops                                                          oracle
======================  ===========================================================  ==========
``activations``         ``Affine``, ``Scale``, ``ScaledTanh``, ``ParametricSoftplus``,  onnxruntime
                        ``ThresholdedRelu`` (before opset 10)
``image``               ``Crop``, ``ImageScaler``, ``MeanVarianceNormalization``       onnxruntime
                        (experimental form, before opset 9)
``tensors``             ``DynamicSlice`` (constant bounds), ``GivenTensorFill``,       onnxruntime /
                        ``ConstantFill``                                               numpy
======================  ===========================================================  ==========

Each module's docstring gives its ops' semantics and what it declines; ``_body`` holds what
they share (their opsets, a body in the input's float type, the attribute check). Left out:

* ``GRUUnit``: its text names the inputs but not the computation (which gates, their
  layout, how ``t`` and ``seq_lengths`` are read, both typed float); only Caffe2's kernel
  defines it, onnxruntime registers a schema without a kernel, and no exporter is known
  to write it.
* ``ATen``: any PyTorch operator by its ``operator`` attribute, no semantics of its own
  (the ``pytorch`` plugin decomposes the ``org.pytorch.aten`` ones it knows).
* ``Upsample`` (experimental, ``height_scale``/``width_scale``): it exists only in models
  importing ai.onnx below opset 7 (from 7 ``Upsample`` is the standard op with ``scales``),
  which no runtime here loads.
* ``FC``: removed before onnx 1.2; its text contradicts itself on ``W``'s layout (``(N x K)``
  in the formula, ``(K x N)`` in the input), no runtime has a kernel and no exporter is
  known to write it.
* ``Identity`` (experimental): the standard ``Identity`` took its place unchanged.

OpenVINO's ``DeformableConv2D`` (also "no schema" in the default domain) is decomposed by the
``mmdeploy`` plugin, which holds its kernel.
"""

from __future__ import annotations

from rewriter_plugins.onnx_removed import activations, image, tensors

from rewriter.plugin import hookimpl

MODULES = (activations, image, tensors)


@hookimpl
def register_decompositions(registry):
    for module in MODULES:
        module.register(registry)
