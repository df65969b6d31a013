"""Kernels ``custom-ops``: the Python kernels shipped in ``rewriter_custom_ops`` (one op per
module, imported only when a model needs one).

They run what has no decomposition: onnxruntime-extensions ops the installed library lacks
(FastGelu is CUDA-only there; the super-resolution pre/post-processing ops were removed),
ai.onnx::ImageDecoder (no onnxruntime kernel), and, as the reference evaluator's oracle and
the fallback where no native library is available, the ortx ops the ``ortx-native`` plugin
runs natively.
"""

from __future__ import annotations

from rewriter.plugin import hookimpl

CONTRIB = "ai.onnx.contrib"
EXT = "com.microsoft.extensions"

KERNELS = (
    (CONTRIB, "FastGelu", "fast_gelu"),
    (CONTRIB, "NegPos", "neg_pos"),
    (CONTRIB, "MaskedFill", "masked_fill"),
    (CONTRIB, "StringLower", "string_lower"),
    (CONTRIB, "StringSplit", "string_split"),
    (CONTRIB, "SuperResolutionPreProcess", "super_resolution_preprocess"),
    (CONTRIB, "SuperResolutionPostProcess", "super_resolution_postprocess"),
    ("", "ImageDecoder", "image_decoder"),
    (EXT, "DecodeImage", "decode_image"),
    (EXT, "EncodeImage", "encode_image"),
)


@hookimpl
def register_kernels(registry):
    for domain, op_type, module in KERNELS:
        registry.add(domain, op_type, f"rewriter_custom_ops.{module}:kernel",
                     description=f"rewriter_custom_ops.{module}")
