"""Plugin ``onnx-lowering``: standard ops, or forms of them, that a runtime lacks
(OpenVINO 2026.4's ONNX frontend above all), written with other standard ops. Each is
checked against the ONNX reference evaluator's own implementation of the op (numpy written
from the spec, not a function body) on its samples; ``docs/remedies.md`` lists the forms.

The index, one module per op family (each module's docstring gives its ops' forms):

=================  ========================================================================
module             ops
=================  ========================================================================
reductions         CumProd; Reduce* with axes computed at run time and keepdims = 0
math_ops           Mod (fmod = 0 on floats), Det; TopK of uint64, Pow with a uint64
                   exponent (onnxruntime)
tensor_ops         Unsqueeze with run-time axes, Pad (wrap), TensorScatter
convolution        Conv with weights computed at run time, DeformConv, MaxUnpool, LpPool
dropout            Dropout with a training mode computed at run time
control_flow       Scan (as a Loop), OptionalHasElement, OptionalGetElement on plain tensors
signal_processing  STFT, DFT, MelWeightMatrix
linear_attention   LinearAttention (registered by the ``onnx-functions`` plugin)
resampling         Resize, GridSample
quantization       QuantizeLinear (blocked, float4e2m1), Cast and CastLike from float4e2m1
                   (onnxruntime)
text               TfIdfVectorizer on integers
contrib            onnxruntime-extensions' FastGelu, NegPos, MaskedFill (ai.onnx.contrib)
common             what they share: the ``Body`` builder, the body opset, input-type checks
=================  ========================================================================

A model that imports no ai.onnx opset gets bodies written at opset 17 (which they bring in).
"""

from __future__ import annotations

from rewriter.plugin import OpSample, hookimpl

from . import (
    contrib,
    control_flow,
    convolution,
    dropout,
    math_ops,
    quantization,
    reductions,
    resampling,
    signal_processing,
    tensor_ops,
    text,
)
from .contrib import (
    CONTRIB,
    CONTRIB_OPSETS,
    build_contrib_fast_gelu,
    build_masked_fill,
    build_neg_pos,
)
from .control_flow import (
    OPTIONAL_OPSETS,
    SCAN_OPSETS,
    build_optional_get_element,
    build_optional_has_element,
    build_scan,
)
from .convolution import (
    CONV_OPSETS,
    DEFORM_CONV_OPSETS,
    LP_POOL_OPSETS,
    MAXUNPOOL_OPSETS,
    build_conv_run_time_weights,
    build_deform_conv,
    build_lp_pool,
    build_max_unpool,
)
from .dropout import DROPOUT_OPSETS, build_dropout
from .linear_attention import build_linear_attention, linear_attention_samples
from .math_ops import (
    DET_OPSETS,
    MAX_DET_SIZE,
    MOD_OPSETS,
    build_det,
    build_float_mod,
    build_pow_uint64_exponent,
    build_topk_uint64,
)
from .quantization import (
    BLOCKED_QUANTIZE_OPSETS,
    FLOAT4_CAST_OPSETS,
    build_cast_from_float4,
    build_quantize_linear,
)
from .reductions import (
    CUMPROD_OPSETS,
    EXACT_REDUCE_AXES_OPS,
    REDUCE_AXES_OPS,
    build_cumprod,
    build_reduce_axes,
)
from .resampling import GRID_SAMPLE_OPSETS, RESIZE_OPSETS, build_grid_sample, build_resize
from .signal_processing import SIGNAL_OPSETS, build_dft, build_mel_weight_matrix, build_stft
from .tensor_ops import (
    PAD_WRAP_OPSETS,
    TENSOR_SCATTER_OPSETS,
    TILE_OPSETS,
    UNSQUEEZE_OPSETS,
    build_pad_wrap,
    build_tensor_scatter,
    build_tile,
    build_unsqueeze,
)
from .text import TFIDF_OPSETS, build_tfidf_vectorizer

# the names the package exported as a module, still importable from it (other plugins now
# import them from convolution and linear_attention)
__all__ = ["build_deform_conv", "build_linear_attention", "linear_attention_samples",
           "register_decompositions"]

MODULES = (reductions, math_ops, tensor_ops, convolution, dropout, control_flow,
           signal_processing, resampling, quantization, text, contrib)


def _samples() -> dict[str, list[OpSample]]:
    """Every registered op's samples, by op type (each module gives its own)."""
    out: dict[str, list[OpSample]] = {}
    for module in MODULES:
        out.update(module.samples())
    return out


@hookimpl
def register_decompositions(registry):
    samples = _samples()
    entries = [
        ("", "CumProd", build_cumprod, CUMPROD_OPSETS, ("float", "double", "int32", "int64"),
         "triangular ReduceProd: n^2 memory"),
        ("", "Mod", build_float_mod, MOD_OPSETS, ("float", "double", "float16"),
         "fmod=0 on floats"),
        ("", "Det", build_det, DET_OPSETS, ("float", "double"),
         f"static n <= {MAX_DET_SIZE}"),
        ("", "Unsqueeze", build_unsqueeze, UNSQUEEZE_OPSETS, ("float", "int32", "bool"),
         "axes as computed"),
        ("", "Pad", build_pad_wrap, PAD_WRAP_OPSETS, ("float", "int32"), "wrap mode"),
        ("", "MaxUnpool", build_max_unpool, MAXUNPOOL_OPSETS, ("float", "int32"), ""),
        ("", "LpPool", build_lp_pool, LP_POOL_OPSETS, ("float", "double"),
         "not ceil_mode; auto_pad SAME on static dims"),
        ("", "Dropout", build_dropout, DROPOUT_OPSETS, ("float", "double"),
         "training mode at run time"),
        ("", "OptionalHasElement", build_optional_has_element, OPTIONAL_OPSETS, ("float",),
         "no input, or a plain tensor"),
        ("", "OptionalGetElement", build_optional_get_element, OPTIONAL_OPSETS,
         ("float", "int64"), "a plain tensor"),
        ("", "STFT", build_stft, SIGNAL_OPSETS, ("float", "double"), ""),
        ("", "DFT", build_dft, SIGNAL_OPSETS, ("float", "double"),
         "matrix products; a known rank"),
        ("", "MelWeightMatrix", build_mel_weight_matrix, SIGNAL_OPSETS, (), "in double"),
        ("", "Scan", build_scan, SCAN_OPSETS, ("float",), "as a Loop"),
        ("", "QuantizeLinear", build_quantize_linear, BLOCKED_QUANTIZE_OPSETS,
         ("float", "float16"), "block_size; float4e2m1 output"),
        ("", "DeformConv", build_deform_conv, DEFORM_CONV_OPSETS, ("float", "double"), "2-D"),
        ("", "Cast", build_cast_from_float4, FLOAT4_CAST_OPSETS, (),
         "from float4e2m1, by com.microsoft::GatherBlockQuantized: onnxruntime"),
        ("", "CastLike", build_cast_from_float4, FLOAT4_CAST_OPSETS, (),
         "from float4e2m1, by com.microsoft::GatherBlockQuantized: onnxruntime"),
        ("", "TopK", build_topk_uint64, (11, None), ("uint64",),
         "uint64 as int64 keys: onnxruntime"),
        ("", "Pow", build_pow_uint64_exponent, (15, None), ("uint64",),
         "a uint64 exponent: onnxruntime"),
        ("", "Conv", build_conv_run_time_weights, CONV_OPSETS, ("float",),
         "weights computed at run time; not auto_pad SAME"),
        ("", "GridSample", build_grid_sample, GRID_SAMPLE_OPSETS, ("float", "float16"),
         "linear and nearest"),
        ("", "Resize", build_resize, RESIZE_OPSETS, ("float", "double", "float16"),
         "no antialias, stretch only"),
        ("", "Tile", build_tile, TILE_OPSETS, ("float", "int32", "bool"),
         "Expand between Reshapes; a known rank"),
        ("", "TensorScatter", build_tensor_scatter, TENSOR_SCATTER_OPSETS,
         ("float", "float16", "int32"), "linear, circular"),
        ("", "TfIdfVectorizer", build_tfidf_vectorizer, TFIDF_OPSETS, ("int32", "int64"),
         "integer pool"),
    ]
    contrib = [(CONTRIB, "FastGelu", build_contrib_fast_gelu, CONTRIB_OPSETS,
                ("float", "double"), "onnxruntime-extensions; the com.microsoft body"),
               (CONTRIB, "NegPos", build_neg_pos, CONTRIB_OPSETS, ("float",),
                "onnxruntime-extensions"),
               (CONTRIB, "MaskedFill", build_masked_fill, (9, None), ("string",),
                "onnxruntime-extensions; Compress")]
    for domain, op_type, builder, opsets, dtypes, note in contrib:
        registry.add(domain, op_type, builder, opsets=opsets, dtypes=dtypes,
                     description=f"onnx-lowering:{op_type} ({note})", oracle="kernel",
                     samples=samples[op_type])
    entries += [("", op, build_reduce_axes, (13 if op == "ReduceSum" else 18, None),
                 ("float", "double", "float16"), "run-time axes, keepdims=0")
                for op in REDUCE_AXES_OPS]
    for domain, op_type, builder, opsets, dtypes, note in entries:
        # sums in another order than the op's kernels: ReduceSum, ReduceMean
        exact = (builder is not build_reduce_axes or op_type in EXACT_REDUCE_AXES_OPS) and \
            builder is not build_conv_run_time_weights
        oracle = "onnxruntime" if builder is build_conv_run_time_weights else "reference"
        registry.add(domain, op_type, builder, opsets=opsets, dtypes=dtypes, exact=exact,
                     description=f"onnx-lowering:{op_type}" + (f" ({note})" if note else ""),
                     oracle=oracle, samples=samples[op_type])
