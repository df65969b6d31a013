"""Decompositions ``com-microsoft``: onnxruntime contrib ops (domain ``com.microsoft``, and
``SimplifiedLayerNormalization``, which onnxruntime registers in the ai.onnx domain) in
standard ONNX, for targets without onnxruntime's contrib kernels (or ops onnxruntime has no
CPU kernel for).

=========================  ==================================================================
module                     ops
=========================  ==================================================================
``common``                 shared helpers: the body builder, element types, fused activations
``activations``            ``FastGelu``, ``Gelu``, ``BiasGelu``, ``QuickGelu``,
                           ``GemmFastGelu``, ``BiasAdd``, ``BiasSoftmax``
``normalization``          ``SkipLayerNormalization``, ``SkipSimplifiedLayerNormalization``,
                           ``SimplifiedLayerNormalization``, ``LayerNormalization`` below 17
``matmul``                 ``FusedMatMul``, ``TransposeMatMul``, ``FusedGemm``
``conv``                   ``FusedConv``, ``NhwcConv``, ``NhwcFusedConv``
``trilu``                  ``Trilu``
``quantization``           ``MatMulNBits``, ``GatherBlockQuantized``, ``DequantizeLinear``,
                           ``QuantizeLinear``
``attention/``             the attention family, a module per op family (its ``__init__``
                           indexes them): ``Attention``, ``MultiHeadAttention``,
                           ``RotaryEmbedding``, ``GroupQueryAttention``,
                           ``DecoderMaskedMultiHeadAttention``, ``EmbedLayerNormalization``,
                           ``RemovePadding``, ``RestorePadding``
``dynamic_quantization``   ``DynamicQuantizeMatMul``, ``MatMulIntegerToFloat``,
                           ``QAttention``, ``QEmbedLayerNormalization``
``quantized_lstm``         ``DynamicQuantizeLSTM``
``qoperator/``             QOperator ops (``QLinearConv``, ``QLinearMatMul``, ``QGemm``,
                           ``QLinear*``) as DequantizeLinear -> float op -> QuantizeLinear,
                           a module per op family (its ``__init__`` indexes them)
=========================  ==================================================================

Each module's docstring gives its ops' semantics and what it declines. Every builder picks
the body the node needs (which optional inputs are present, which outputs are used, the
model's ai.onnx opset) and writes literals in the input's element type when that is known (a
``CastLike`` otherwise, opset >= 15). ``tests/test_com_microsoft.py`` checks each against
onnxruntime's contrib kernels, or numpy where onnxruntime has none.
"""

from __future__ import annotations

from rewriter.plugin import hookimpl

# what other code imports from the package (onnx-lowering, the benchmarks)
from .activations import ELEMENTWISE_OPSETS, build_fast_gelu
from .common import fold_literal_casts
from .normalization import SKIPLN_DEFAULT_EPSILON, SKIPLN_OPSETS, build_skip_layer_norm

__all__ = ["ELEMENTWISE_OPSETS", "SKIPLN_DEFAULT_EPSILON", "SKIPLN_OPSETS", "build_fast_gelu",
           "build_skip_layer_norm", "fold_literal_casts", "register_decompositions",
           "register_kernels"]


@hookimpl
def register_kernels(registry):
    from . import activations, attention, conv

    activations.register_kernels(registry)
    conv.register_kernels(registry)
    attention.register_kernels(registry)


@hookimpl
def register_decompositions(registry):
    from . import (
        activations,
        attention,
        conv,
        dynamic_quantization,
        matmul,
        normalization,
        qoperator,
        quantization,
        quantized_lstm,
        trilu,
    )

    for module in (activations, normalization, matmul, conv, trilu, quantization):
        module.register(registry)
    attention.register_decompositions(registry)
    dynamic_quantization.register_decompositions(registry)
    quantized_lstm.register_decompositions(registry)
    qoperator.register_decompositions(registry)
