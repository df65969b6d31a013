"""Remedies ``tensorrt``: TensorRT plugin ops found in exported detectors and transformers."""
