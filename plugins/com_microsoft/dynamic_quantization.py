"""com.microsoft quantized ops written by onnxruntime's ``quantize_dynamic`` (and fused by
its optimizer), in standard ONNX (registered by the ``com-microsoft`` plugin, whose
``register_decompositions`` hook calls this module's).

The integer products are ``MatMulInteger`` (exact int32 accumulation, as onnxruntime's
kernels do), scaled to float afterwards; tensors that enter a float op are dequantized
``(Cast(q) - Cast(zero_point)) * scale``, exact for 8-bit values.

* ``DynamicQuantizeMatMul(A, B, b_scale[, b_zero_point][, bias])``: ``A`` (float) is
  quantized to uint8 as onnxruntime's kernel does (``dynamic_quantize_matmul.cc``): ``min
  = min(min(A), 0)``, ``max = max(max(A), 0)``, ``scale = (max - min) / 255`` (1 when
  ``max == min``), ``zp = round_half_even(clamp(-min / scale, 0, 255))``, ``q =
  QuantizeLinear(A, scale, zp)``; ``Y = MatMulInteger(q, B, zp, b_zero_point) * (scale *
  b_scale) + bias``. ``b_scale``/``b_zero_point`` per tensor or per column (``[N]``).
* ``MatMulIntegerToFloat(A, B, a_scale, b_scale[, a_zero_point][, b_zero_point][,
  bias])``: ``Y = MatMulInteger(A, B, a_zero_point, b_zero_point) * (a_scale * b_scale) +
  bias``.
* ``QAttention(input, weight, bias, input_scale, weight_scale[, mask_index][,
  input_zero_point][, weight_zero_point][, past])``: ``QKV = MatMulInteger(input, weight,
  input_zero_point, weight_zero_point) * (input_scale * weight_scale) + bias`` (weight
  scale and zero point per tensor or per column), then ``Attention``'s body from ``QKV``
  (``mask_index``, ``past``/``present``, ``unidirectional``: see
  ``attention.multi_head``). ``qkv_hidden_sizes`` is declined (onnxruntime's quantizer
  never writes it).
* ``QEmbedLayerNormalization(input_ids, segment_ids, word_embedding, position_embedding,
  segment_embedding, gamma, beta[, mask], 5 scales, 5 zero points)``: the five tables
  dequantized, then ``EmbedLayerNormalization``'s body (positions ``0 .. S-1``); outputs
  ``output`` and ``mask_index`` (count of mask ones per row; zeros without a mask).

Oracle: onnxruntime's own CPU kernels (all four have one).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from onnx import FunctionProto, TensorProto

from rewriter.plugin import Arg, Declined, OpSample
from rewriter.plugin import present as _present

from .attention.core import AttentionBody
from .attention.embedding import embed_layer_norm_body
from .attention.multi_head import attention_from_qkv, attention_mask_declines
from .common import unknown_attributes

DOMAIN = "com.microsoft"
# Round/Clip with inputs (11) for the dynamic quantization; MatMulInteger from 10; the
# attention bodies from 11.
QUANT_OPSETS = (11, None)

_INT8 = ("tensor(int8)", "tensor(uint8)")


def _types(ctx) -> list[str | None]:
    return list(ctx.input_types or [])


def _type(ctx, index: int) -> str | None:
    types = _types(ctx)
    return types[index] if index < len(types) else None


def _is(ctx, index: int, allowed: Sequence[str]) -> bool:
    """Input ``index`` has one of the ``allowed`` types, or an unknown one (the op's schema
    allows only these, and a model onnxruntime runs has one of them)."""
    return _type(ctx, index) in (None, *allowed)


def _integer_product(b: AttentionBody, a: str, w: str, a_zp: str, w_zp: str,
                     scale: str) -> str:
    """``MatMulInteger(a, w, a_zp, w_zp)`` as float, times ``scale``."""
    inputs = [a, w, a_zp, w_zp]
    while not inputs[-1]:  # no trailing "": OpenVINO makes a node of unknown rank of it
        inputs.pop()
    acc = b.op("MatMulInteger", *inputs)
    return b.op("Mul", b.cast(acc, TensorProto.FLOAT), scale)


def _dequantize(b: AttentionBody, q: str, scale: str, zero_point: str | None) -> str:
    """``(Cast(q) - Cast(zero_point)) * scale`` in float."""
    value = b.cast(q, TensorProto.FLOAT)
    if zero_point:
        value = b.op("Sub", value, b.cast(zero_point, TensorProto.FLOAT))
    return b.op("Mul", value, scale)


def _zero_point(node, index: int, formal: str) -> str:
    return formal if _present(node.input, index) else ""


def dynamic_uint8(b, x: str, arithmetic: bool = False) -> tuple[str, str, str]:
    """``x`` (float) quantized to uint8 per tensor as onnxruntime's kernels do
    (``GetQuantizationParameter``): ``(q, scale, zero_point)``, see the module docstring.
    ``arithmetic``: ``q`` as ``Cast(Clip(Round(x / scale) + zero_point, 0, 255))`` (the same
    numbers as MLAS's ``MlasQuantizeLinear``, which rounds ``x / scale`` clamped to ``[-zp,
    255 - zp]``) instead of ``QuantizeLinear``, which OpenVINO folds with what follows into
    other arithmetic (measured on DynamicQuantizeLSTM's body: 1e-3 off)."""
    zero = b.literal(0.0)
    low = b.op("Min", b.op("ReduceMin", x, keepdims=0), zero)
    high = b.op("Max", b.op("ReduceMax", x, keepdims=0), zero)
    span = b.op("Sub", high, low)
    scale = b.op("Where", b.op("Equal", span, zero), b.literal(1.0),
                 b.op("Div", span, b.literal(255.0)))
    zp = b.cast(b.op("Round", b.clip(b.op("Neg", b.op("Div", low, scale)), 0.0, 255.0)),
                TensorProto.UINT8)
    if arithmetic:
        shifted = b.op("Add", b.op("Round", b.op("Div", x, scale)), b.cast(zp, TensorProto.FLOAT))
        return b.cast(b.clip(shifted, 0.0, 255.0), TensorProto.UINT8), scale, zp
    return b.op("QuantizeLinear", x, scale, zp), scale, zp


def build_dynamic_quantize_matmul(ctx) -> FunctionProto | None:
    """``com.microsoft::DynamicQuantizeMatMul`` (see the module docstring)."""
    node = ctx.node
    if (node.attribute or not all(_present(node.input, i) for i in range(3))
            or len(node.input) > 5 or len(node.output) != 1 or not node.output[0]
            or not _is(ctx, 0, ["tensor(float)"]) or not _is(ctx, 1, _INT8)):
        raise Declined("takes no attributes; A (float), B (int8 or uint8) and b_scale given, "
                       "b_zero_point and bias optional; one output")
    b = AttentionBody(ctx.opset, TensorProto.FLOAT)
    q, scale, zp = dynamic_uint8(b, "A")
    y = _integer_product(b, q, "B", zp, _zero_point(node, 3, "b_zero_point"),
                         b.op("Mul", scale, "b_scale"))
    if _present(node.input, 4):
        y = b.op("Add", y, "bias")
    names = ["A", "B", "b_scale", "b_zero_point", "bias"]
    b.op("Identity", y, outputs=["Y"])
    return b.function(DOMAIN, "dynamic_quantize_matmul", names[:len(node.input)], ["Y"])


def build_matmul_integer_to_float(ctx) -> FunctionProto | None:
    """``com.microsoft::MatMulIntegerToFloat`` (see the module docstring)."""
    node = ctx.node
    if (node.attribute or not all(_present(node.input, i) for i in range(4))
            or len(node.input) > 7 or len(node.output) != 1 or not node.output[0]
            or not _is(ctx, 0, _INT8) or not _is(ctx, 1, _INT8)
            or not _is(ctx, 2, ["tensor(float)"])):
        raise Declined("takes no attributes; A and B (int8 or uint8), a_scale (float) and "
                       "b_scale given, zero points and bias optional; one output")
    b = AttentionBody(ctx.opset, TensorProto.FLOAT)
    y = _integer_product(b, "A", "B", _zero_point(node, 4, "a_zero_point"),
                         _zero_point(node, 5, "b_zero_point"),
                         b.op("Mul", "a_scale", "b_scale"))
    if _present(node.input, 6):
        y = b.op("Add", y, "bias")
    names = ["A", "B", "a_scale", "b_scale", "a_zero_point", "b_zero_point", "bias"]
    b.op("Identity", y, outputs=["Y"])
    return b.function(DOMAIN, "matmul_integer_to_float", names[:len(node.input)], ["Y"])


_QATTENTION_ATTRIBUTES = {"num_heads", "unidirectional", "scale", "mask_filter_value",
                          "do_rotary", "past_present_share_buffer"}
_QATTENTION_INPUTS = ["input", "weight", "bias", "input_scale", "weight_scale", "mask_index",
                      "input_zero_point", "weight_zero_point", "past"]


def build_qattention(ctx) -> FunctionProto | None:
    """``com.microsoft::QAttention`` (see the module docstring)."""
    node = ctx.node
    if (unknown_attributes(node, _QATTENTION_ATTRIBUTES) or not ctx.attribute("num_heads")
            or ctx.attribute("do_rotary", 0) or ctx.attribute("past_present_share_buffer", 0)
            or not all(_present(node.input, i) for i in range(5)) or len(node.input) > 9
            or not _present(node.output, 0) or len(node.output) > 2
            or not _is(ctx, 0, ["tensor(uint8)"]) or not _is(ctx, 1, _INT8)
            or not _is(ctx, 2, ["tensor(float)"])):
        raise Declined("needs num_heads, no rotary or shared past buffer; input (uint8), weight "
                       "(int8 or uint8), bias (float) and both scales given; one or two "
                       "outputs")
    if attention_mask_declines(ctx, 5):
        raise Declined("mask_index has a form the body cannot read (rank not 1-4, or the "
                       "GPU-only 1-D (3B + 2) form)")
    b = AttentionBody(ctx.opset, TensorProto.FLOAT)
    qkv = _integer_product(b, "input", "weight", _zero_point(node, 6, "input_zero_point"),
                           _zero_point(node, 7, "weight_zero_point"),
                           b.op("Mul", "input_scale", "weight_scale"))
    qkv = b.op("Add", qkv, "bias")
    return attention_from_qkv(ctx, b, qkv, None, _QATTENTION_INPUTS[:len(node.input)],
                              "qattention", mask=5, past=8, attention_bias=None)


_QEMBED_INPUTS = ["input_ids", "segment_ids", "word_embedding", "position_embedding",
                  "segment_embedding", "gamma", "beta", "mask",
                  "word_embedding_scale", "position_embedding_scale", "segment_embedding_scale",
                  "gamma_scale", "beta_scale",
                  "word_embedding_zero_point", "position_embedding_zero_point",
                  "segment_embedding_zero_point", "gamma_zero_point", "beta_zero_point"]


def build_qembed_layer_norm(ctx) -> FunctionProto | None:
    """``com.microsoft::QEmbedLayerNormalization`` (see the module docstring)."""
    node = ctx.node
    segments = _present(node.input, 1)
    tables = [2, 3, 4, 5, 6]
    needed = [0, 2, 3, 5, 6, 8, 9, 11, 12, 13, 14, 16, 17]
    if (unknown_attributes(node, {"epsilon"}) or len(node.input) != 18
            or not all(_present(node.input, i) for i in needed)
            or any(_present(node.input, i) != segments for i in (4, 10, 15))
            or not _present(node.output, 0) or len(node.output) > 2
            or not all(_is(ctx, i, _INT8) for i in tables if _present(node.input, i))):
        raise Declined("takes 18 inputs (segment inputs all given or all left empty), only "
                       "epsilon, int8/uint8 tables; one or two outputs")
    b = AttentionBody(ctx.opset, TensorProto.FLOAT)
    dequantized = []
    for i in tables:
        if not _present(node.input, i):
            dequantized.append("")
            continue
        formal = _QEMBED_INPUTS[i]
        dequantized.append(_dequantize(b, formal, _QEMBED_INPUTS[i + 6],
                                       _QEMBED_INPUTS[i + 11]))
    return embed_layer_norm_body(ctx, b, dequantized, list(_QEMBED_INPUTS),
                                 position_ids=False)


# -- oracle samples --------------------------------------------------------------------------

def _matmul_sample(op_type: str, case: str, opset: int) -> OpSample:
    """``A`` (2, 3, 16) x ``B`` (16, 5), int8 or uint8 weights, per tensor or per column."""
    signed = "int8" in case
    w_type = "int8" if signed else "uint8"
    w_low, w_high = (-128, 128) if signed else (0, 256)
    columns = "per-column" in case
    q = "[5]" if columns else "[]"
    b = Arg(f"{w_type}[16,5]", low=w_low, high=w_high, constant=True)
    b_scale = Arg(f"float{q}", low=0.001, high=0.01, constant=True)
    b_zp = Arg(f"{w_type}{q}", low=w_low // 4, high=w_high // 4, constant=True)
    bias = Arg("float[5]", constant=True) if "bias" in case else None
    if op_type == "DynamicQuantizeMatMul":
        a = (Arg("float[2,3,16]", values=np.zeros((2, 3, 16), np.float32)) if case == "zeros"
             else Arg("float[2,3,16]", low=-3.0, high=5.0))
        inputs = [a, b, b_scale, b_zp if "no-zp" not in case else None, bias]
    else:
        a = Arg("uint8[2,3,16]", low=0, high=256)
        a_scale = Arg("float[]", values=np.float32(0.02), constant=True)
        a_zp = Arg("uint8[]", values=np.uint8(128), constant=True)
        inputs = [a, b, a_scale, b_scale, a_zp, b_zp if "no-zp" not in case else None, bias]
    while inputs[-1] is None:
        inputs.pop()
    return OpSample(inputs, ["float"], opset=opset, name=case, tolerance=(1e-5, 1e-5))


def _qattention_sample(case: str, opset: int) -> OpSample:
    """``input`` (2, 4, 8) uint8, ``weight`` (8, 24) with 2 heads (head size 4)."""
    batch, seq, hidden, past = 2, 4, 8, 3
    signed = "uint8-weight" not in case
    w_type, (w_low, w_high) = ("int8", (-128, 128)) if signed else ("uint8", (0, 256))
    q = "[24]" if "per-column" in case else "[]"
    inputs = [Arg(f"uint8[{batch},{seq},{hidden}]", low=0, high=256),
              Arg(f"{w_type}[{hidden},24]", low=w_low, high=w_high, constant=True),
              Arg("float[24]", constant=True),
              Arg("float[]", values=np.float32(0.02), constant=True),
              Arg(f"float{q}", low=0.002, high=0.01, constant=True),
              None,
              Arg("uint8[]", values=np.uint8(120), constant=True),
              Arg(f"{w_type}{q}", low=w_low // 8, high=w_high // 8, constant=True)]
    outputs, attrs = ["float"], {"num_heads": 2}
    total = seq + (past if "past" in case else 0)
    if "mask-1d" in case:
        inputs[5] = Arg(f"int32[{batch}]", values=[2, total])
    elif "mask-2d" in case:
        inputs[5] = Arg(f"int32[{batch},{total}]",
                        values=lambda rng, shape: (rng.random(shape) > 0.3).astype(np.int32))
    if "past" in case:
        inputs.append(f"float[2,{batch},2,{past},4]")
        outputs.append("float")
    if "causal" in case:
        attrs["unidirectional"] = 1
    if "no-zero-points" in case:
        inputs[6:8] = [None, None]
    while inputs[-1] is None:
        inputs.pop()
    return OpSample(inputs, outputs, attrs, opset=opset, name=case, tolerance=(1e-4, 1e-4))


def _qembed_sample(case: str, opset: int) -> OpSample:
    """BERT's embeddings quantized to uint8 per tensor (as ``quantize_dynamic`` writes)."""
    def table(shape):
        return Arg(f"uint8{shape}", low=0, high=256, constant=True)

    def scale():
        return Arg("float[]", values=np.float32(0.01), constant=True)

    def zp(value):
        return Arg("uint8[]", values=np.uint8(value), constant=True)

    segments = case != "no-segments"
    inputs = [Arg("int32[2,4]", low=0, high=10),
              Arg("int32[2,4]", low=0, high=2) if segments else None,
              table([10, 8]), table([16, 8]), table([2, 8]) if segments else None,
              table([8]), table([8]),
              Arg("int32[2,4]", values=[[1, 1, 0, 1], [1, 2, 1, 0]]) if case == "mask" else None,
              scale(), scale(), scale() if segments else None, scale(), scale(),
              zp(128), zp(120), zp(131) if segments else None, zp(100), zp(127)]
    return OpSample(inputs, ["T", "int32"], {"epsilon": 1e-5}, opset=opset, name=case,
                    dtypes=["float"])


_OPSETS = (11, 17)


def _oracles() -> dict[str, dict]:
    """Per op: onnxruntime's own CPU kernel and the samples (float, at opsets 11 and 17)."""
    matmul_cases = ["int8", "uint8", "int8-per-column", "uint8-per-column-bias", "int8-no-zp"]
    return {
        "DynamicQuantizeMatMul": dict(oracle="onnxruntime", samples=[
            *[_matmul_sample("DynamicQuantizeMatMul", c, o)
              for c in [*matmul_cases, "zeros"] for o in _OPSETS]]),
        "MatMulIntegerToFloat": dict(oracle="onnxruntime", samples=[
            *[_matmul_sample("MatMulIntegerToFloat", c, o)
              for c in matmul_cases for o in _OPSETS]]),
        "QAttention": dict(oracle="onnxruntime", samples=[
            _qattention_sample(c, o) for c in [
                "plain", "per-column", "uint8-weight", "mask-1d", "mask-2d", "causal",
                "past-causal-mask-2d", "no-zero-points"] for o in _OPSETS]),
        "QEmbedLayerNormalization": dict(oracle="onnxruntime", samples=[
            _qembed_sample(c, o) for c in ["plain", "mask", "no-segments"] for o in _OPSETS]),
    }


def register_decompositions(registry) -> None:
    """Called by ``rewriter_plugins.com_microsoft``'s hook."""
    oracles = _oracles()
    for op_type, builder in (("DynamicQuantizeMatMul", build_dynamic_quantize_matmul),
                             ("MatMulIntegerToFloat", build_matmul_integer_to_float),
                             ("QAttention", build_qattention),
                             ("QEmbedLayerNormalization", build_qembed_layer_norm)):
        registry.add(DOMAIN, op_type, builder, opsets=QUANT_OPSETS, dtypes=("float",),
                     description=f"com-microsoft:{op_type}", **oracles[op_type])
