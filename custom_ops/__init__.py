"""Kernels shipped by onnx-graph-rewriter (installed as ``rewriter_custom_ops``), one op per
module, imported lazily when a model needs them."""
