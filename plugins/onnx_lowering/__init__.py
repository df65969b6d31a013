"""Plugin ``onnx-lowering`` (being split into one module per op family; for now everything is
in ``resampling``)."""

from __future__ import annotations

from .resampling import (build_deform_conv, build_linear_attention, linear_attention_samples,
                         register_decompositions)

__all__ = ["build_deform_conv", "build_linear_attention", "linear_attention_samples",
           "register_decompositions"]
