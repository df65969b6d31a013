"""Remedies ``onnx-preview``: ``ai.onnx.preview`` and ``ai.onnx.preview.training`` ops."""
