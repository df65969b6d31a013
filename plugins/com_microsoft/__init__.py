"""Decompositions ``com-microsoft``: onnxruntime contrib ops (domain ``com.microsoft``, and
``SimplifiedLayerNormalization``, which onnxruntime registers in the ai.onnx domain) in
standard ONNX, for targets without onnxruntime's contrib kernels (or ops onnxruntime has no
CPU kernel for).

Activations and elementwise fusions:

* ``FastGelu(X[, bias])``: ``x = X + bias``, ``y = x * (0.5 + 0.5 * tanh(x * (c + b*x*x)))``,
  ``c = sqrt(2/pi)``, ``b = 0.044715 * c``.
* ``Gelu(X)``: ``0.5 * x * (1 + erf(x / sqrt(2)))``; ``BiasGelu(A, B)``: ``Gelu(A + B)``.
* ``QuickGelu(X)`` (``alpha`` = 1.702): ``x * sigmoid(alpha * x)``.
* ``GemmFastGelu(X, W[, bias])``: ``FastGelu(MatMul(X, W) + bias)``.
* ``BiasAdd(X, bias, skip)``: ``X + bias + skip``.
* ``BiasSoftmax(data, bias)`` (``axis`` = 1, ``is_inner_broadcast``): Softmax-1 semantics
  (coerced to 2-D at ``axis``) of ``data + bias``; bias broadcast numpy-style (only
  ``is_inner_broadcast = 0``, where that is the op's rule).

Normalizations (``s = input + skip (+ bias)``, statistics over the last axis, in float32
for float16/bfloat16 inputs as onnxruntime does):

* ``SkipLayerNormalization(input, skip, gamma[, beta[, bias]])`` (``epsilon`` = 1e-12):
  ``y = (s - mean) / sqrt(var + eps) * gamma + beta``; outputs ``y, mean, inv_std_var, s``.
  ``LayerNormalization`` at opset >= 17, the formula below that.
* ``SkipSimplifiedLayerNormalization(input, skip, gamma[, bias])`` (``epsilon`` = 1e-12):
  RMS norm ``y = s / sqrt(mean(s^2) + eps) * gamma``; outputs ``y, mean, inv_std_var, s``,
  ``mean`` all zeros (no centring: onnxruntime's kernel writes 0 there).
* ``LayerNormalization(X, Scale[, B])`` in the ai.onnx domain at opsets below 17
  (onnxruntime's own registration, versions 1-16, which no other runtime has; ``axis`` =
  -1, ``epsilon`` = 1e-5, ``stash_type`` = 1): ``Y = (X - mean) / sqrt(var + eps) * Scale
  + B`` over axes ``axis..``, statistics in float32 for float16/bfloat16; outputs ``Y,
  Mean, InvStdDev`` (float). A non-negative ``axis`` needs the input's rank (declared).
* ``SimplifiedLayerNormalization(X, scale)`` (ai.onnx and com.microsoft domains; ``axis`` =
  -1, ``epsilon`` = 1e-5, ``stash_type`` = 1): RMS norm over axes ``axis..``; outputs
  ``Y, inv_std_var``.

Matrix products and convolutions:

* ``FusedMatMul`` / ``TransposeMatMul(A, B)`` (``alpha``, ``transA``, ``transB``,
  ``transBatchA``, ``transBatchB``): ``alpha * MatMul(A', B')``; ``transBatch`` moves the
  first axis behind the other batch axes (``A'[b1.., b0, i, j] = A[b0, b1.., i, j]``),
  ``trans`` swaps the last two (both: ``A'[b1.., j, b0] ... = A[b0, b1.., j]``).
* ``FusedGemm(A, B[, C])``: ``act(Gemm(A, B, C))``, activation ``activation`` with
  parameters ``activation_alpha/beta/gamma`` (Relu, Tanh, Sigmoid, LeakyRelu, Elu, Selu,
  HardSigmoid, ThresholdedRelu, Softplus, Softsign, ScaledTanh, ParametricSoftplus).
* ``FusedConv(X, W[, B[, Z]])``: ``act(Conv(X, W, B) + Z)``, activation ``activation`` with
  ``activation_params`` (Relu, Tanh, Sigmoid, LeakyRelu [alpha], Clip [min, max],
  HardSigmoid [alpha, beta]).
* ``NhwcConv(X, W[, B])`` / ``NhwcFusedConv(X, W[, B[, Z]])``: the same on channels-last
  ``X`` (transposed to channels-first and back); the spatial rank comes from
  ``kernel_shape``, the constant weight's shape or declared types (declines otherwise).
  ``NhwcConv``'s weight is channels-last too, ``M x kH x kW x C/group``: that is what its
  producer writes (onnxruntime's ``transformers/fusion_nhwc_conv.py`` transposes the Conv
  weight by ``[0, 2, 3, 1]``) and what its CUDA kernel reads; it is transposed back to
  ``M x C/group x kH x kW`` here. ``NhwcFusedConv``'s weight keeps the Conv layout, as its
  schema says and onnxruntime's NHWC transformer (fp16 Conv -> NhwcFusedConv) leaves it.
* ``Trilu(X[, k])`` (``upper`` = 1): ai.onnx ``Trilu`` at opset >= 14, else a
  ``Range``-built mask.

Quantization:

* ``MatMulNBits(A, B, scales[, zero_points][, -][, bias])`` (``K``, ``N``, ``bits`` 2/4/8,
  ``block_size``): ``W[k, n] = (q[n, k] - zp[n, k // block]) * scales[n, k // block]``, ``q``
  unpacked from ``B`` (``N x blocks x blob``, low bits first), default ``zp = 2^(bits-1)``,
  packed (uint8) or unpacked (float) zero points; ``Y = A @ W + bias``. With ``g_idx``
  (GPTQ's act-order) column ``k`` takes the scale and zero point of block ``g_idx[k]``:
  4 bits without zero points or with float ones; declined with packed zero points (which
  onnxruntime 1.32 ignores then) and with 2 or 8 bits (which it refuses or misreads).
  ``accuracy_level`` 4 ("A can be quantized with the same block_size to int8"): ``A`` is
  quantized per row and block along K, ``round(a / s) * s`` with ``s = max|a| / 127``, as
  onnxruntime's CPU kernel computes it (not with float zero points, with g_idx, nor for 2
  bits in blocks of 16, where it does not).
* ``GatherBlockQuantized(data, indices, scales[, zero_points])`` (``bits``, ``block_size``,
  ``gather_axis``, ``quantize_axis``): ``Gather`` of ``(q - zp) * scale`` with each scale
  repeated over its block; int4/uint4 data, or uint8 data packed along the last axis (``bits``
  2/4/8, default ``zp = 2^(bits-1)``); indices out of range give zeros.
* ``DequantizeLinear`` / ``QuantizeLinear`` (``axis``): the ai.onnx ops of the opset that
  takes the types (13 for 8-bit with float scales, 19 for float16 scales, 21 for 16/4-bit).

Every builder picks the body the node needs (which optional inputs are present, which
outputs are used, the model's ai.onnx opset) and writes literals in the input's element type
when that is known (a ``CastLike`` otherwise, opset >= 15). ``tests/test_com_microsoft.py``
checks each against onnxruntime's contrib kernels, or numpy where onnxruntime has none.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from onnx import AttributeProto, FunctionProto, TensorProto, helper, numpy_helper

from rewriter.plugin import (
    Arg,
    Declined,
    FunctionBuilder,
    OpSample,
    declining,
    hookimpl,
    kernel,
    typed_tensor,
)
from rewriter.plugin import present as _present

DOMAIN = "com.microsoft"
# The oldest ai.onnx opset each family of bodies is written for (the builders emit the
# opset-specific forms of ReduceMean, Unsqueeze, Clip, ... for the model's opset).
ELEMENTWISE_OPSETS = (9, None)  # literals need a known element type below opset 15
SKIPLN_OPSETS = (9, None)  # LayerNormalization itself at >= 17
NORM_OPSETS = (9, None)
LAYER_NORM_BEFORE_17_OPSETS = (7, 16)  # ai.onnx LayerNormalization is standard from 17
NHWCCONV_OPSETS = (11, None)
CONV_OPSETS = (11, None)
MATMUL_OPSETS = (12, None)  # Einsum
GEMM_OPSETS = (11, None)
TRILU_OPSETS = (11, None)
MATMULNBITS_OPSETS = (13, None)
GATHER_BLOCK_OPSETS = (13, None)  # int4/uint4 data exist only at >= 21
QDQ_OPSETS = (13, None)
# Body opset for a model that imports no ai.onnx opset (its body brings the import along).
NO_IMPORT_OPSET = 17

QUICKGELU_DEFAULT_ALPHA = 1.702
SKIPLN_DEFAULT_EPSILON = 1e-12  # onnxruntime's kDefaultSkipLayerNormEpsilon
SIMPLIFIED_LN_DEFAULT_EPSILON = 1e-5
FAST_GELU_C = 0.7978845608028654  # sqrt(2 / pi)
FAST_GELU_B = 0.035677408136300125  # 0.044715 * sqrt(2 / pi)

_FLOAT_TYPES = {
    "tensor(float)": TensorProto.FLOAT,
    "tensor(float16)": TensorProto.FLOAT16,
    "tensor(double)": TensorProto.DOUBLE,
    "tensor(bfloat16)": TensorProto.BFLOAT16,
}
_LOW_PRECISION = (TensorProto.FLOAT16, TensorProto.BFLOAT16)


# -- helpers shared with com_microsoft_attention -----------------------------------------


def fold_literal_casts(fn: FunctionProto, elem_type: int | None) -> FunctionProto:
    """Replace ``CastLike(Constant(value=literal), x)`` by a ``Constant`` of ``elem_type``
    (the known element type of ``x``) and drop constants nothing reads any more. Constants
    whose value is a reference attribute (``value_float = @alpha``) are left alone."""
    if elem_type is None:
        return fn
    literals = {}
    for node in fn.node:
        if (node.op_type == "Constant" and node.domain in ("", "ai.onnx")
                and len(node.attribute) == 1):
            attr = node.attribute[0]
            if attr.name == "value" and not attr.ref_attr_name:
                literals[node.output[0]] = numpy_helper.to_array(attr.t)
    if not literals:
        return fn
    new_nodes = []
    for node in fn.node:
        if (node.op_type == "CastLike" and node.domain in ("", "ai.onnx")
                and node.input[0] in literals):
            tensor = typed_tensor(literals[node.input[0]], elem_type, node.output[0])
            new_nodes.append(helper.make_node("Constant", [], list(node.output), value=tensor))
        else:
            new_nodes.append(node)
    used = {name for node in new_nodes for name in node.input} | set(fn.output)
    kept = [n for n in new_nodes
            if not (n.op_type == "Constant" and n.output[0] in literals
                    and n.output[0] not in used)]
    out = FunctionProto()
    out.CopyFrom(fn)
    del out.node[:]
    out.node.extend(kept)
    return out


def _trim_outputs(fn: FunctionProto, used: list[bool]) -> FunctionProto:
    """Drop trailing function outputs the call site does not use, and stop computing
    optional node outputs nothing reads any more."""
    keep = max((i for i, u in enumerate(used) if u), default=0) + 1
    out = FunctionProto()
    out.CopyFrom(fn)
    del out.output[keep:]
    needed = set(out.output) | {name for n in out.node for name in n.input}
    for node in out.node:
        for i in range(1, len(node.output)):
            if node.output[i] not in needed:
                node.output[i] = ""
        while len(node.output) > 1 and not node.output[-1]:
            del node.output[-1]
    return out


# -- body builder -------------------------------------------------------------------------


class Body(FunctionBuilder):
    """Builds one FunctionProto node by node, in the forms of ai.onnx ``opset``."""

    def shape_part(self, x: str, start: int, end: int | None = None) -> str:
        """``Shape(x)[start:end]`` as an int64 vector."""
        shape = self.op("Shape", x)
        return self.slice(shape, [start], [end if end is not None else 2 ** 62], [0])


def _body_opset(ctx) -> int:
    """The ai.onnx opset a body is written for: the model's, or a default when the model
    imports none (the engine then keeps the body's own import)."""
    if "" not in (ctx.opsets or {}) and "ai.onnx" not in (ctx.opsets or {}):
        return NO_IMPORT_OPSET
    return ctx.opset


def _elem_type(ctx, index: int = 0) -> int | None:
    types = list(ctx.input_types or [])
    return _FLOAT_TYPES.get(types[index]) if len(types) > index and types[index] else None


def _shared_elem_type(ctx, *indices: int) -> int | None:
    """The float element type of the first input among ``indices`` whose type is known (the
    op binds them to one type parameter; an input fed by another contrib op may have a type
    the engine cannot infer)."""
    return next((t for t in (_elem_type(ctx, i) for i in indices) if t is not None), None)


def _any_elem_type(ctx, index: int) -> int | None:
    """The element type of input ``index`` (any tensor type), if known."""
    types = list(ctx.input_types or [])
    if len(types) > index and types[index] and types[index].startswith("tensor("):
        return getattr(TensorProto, types[index][7:-1].upper(), None)
    return None


def _single_output(node) -> bool:
    return len(node.output) == 1 and bool(node.output[0])


def _inputs(node, formal: Sequence[str]) -> list[str]:
    """The formal input names the node binds: up to its last present input."""
    return list(formal[:len(node.input)])


def _unknown_attributes(node, known: Sequence[str]) -> bool:
    return any(a.name not in known for a in node.attribute)


# -- activations --------------------------------------------------------------------------


def _fast_gelu(b: Body, x: str) -> str:
    inner = b.op("Mul", x, b.op("Add", b.literal(FAST_GELU_C, x),
                                b.op("Mul", b.literal(FAST_GELU_B, x), b.op("Mul", x, x))))
    half = b.literal(0.5, x)
    return b.op("Mul", x, b.op("Add", half, b.op("Mul", half, b.op("Tanh", inner))))


def _gelu(b: Body, x: str) -> str:
    erf = b.op("Erf", b.op("Mul", x, b.literal(1 / math.sqrt(2), x)))
    return b.op("Mul", b.op("Mul", b.literal(0.5, x), x), b.op("Add", b.literal(1.0, x), erf))


def _activation(b: Body, x: str, kind: str, alpha=None, beta=None, gamma=None) -> str:
    """``kind`` applied to ``x`` with standard ops; raises Declined for unknown kinds or
    missing parameters (onnxruntime requires them too)."""
    def need(*values):
        if any(v is None for v in values):
            raise Declined(f"{kind} needs its parameters")
    if kind in ("", None):
        return x
    if kind in ("Relu", "Tanh", "Sigmoid", "Softsign", "Softplus"):
        return b.op(kind, x)
    if kind in ("LeakyRelu", "Elu", "ThresholdedRelu"):
        need(alpha)
        if kind == "ThresholdedRelu" and b.opset < 10:
            raise Declined("ThresholdedRelu is an ai.onnx op from opset 10")
        return b.op(kind, x, alpha=float(alpha))
    if kind == "HardSigmoid":
        need(alpha, beta)
        return b.op(kind, x, alpha=float(alpha), beta=float(beta))
    if kind == "Selu":
        need(alpha, gamma)
        return b.op(kind, x, alpha=float(alpha), gamma=float(gamma))
    if kind == "Clip":
        return b.clip(x, alpha, beta)
    if kind == "ScaledTanh":  # alpha * tanh(beta * x)
        need(alpha, beta)
        return b.op("Mul", b.literal(alpha, x),
                    b.op("Tanh", b.op("Mul", b.literal(beta, x), x)))
    if kind == "ParametricSoftplus":  # alpha * ln(1 + exp(beta * x))
        need(alpha, beta)
        return b.op("Mul", b.literal(alpha, x),
                    b.op("Softplus", b.op("Mul", b.literal(beta, x), x)))
    raise Declined(f"activation {kind!r}")


def _conv_activation(b: Body, x: str, kind: str, params: Sequence[float]) -> str:
    """FusedConv's activations (onnxruntime's MLAS set): parameters by position."""
    counts = {"": 0, "Relu": 0, "Tanh": 0, "Sigmoid": 0, "LeakyRelu": 1, "Clip": 2,
              "HardSigmoid": 2}
    if kind not in counts or len(params) != counts[kind]:
        raise Declined(f"activation {kind!r} with {len(params)} parameter(s)")
    return _activation(b, x, kind, *params)


# -- elementwise builders -----------------------------------------------------------------


@declining
def build_fast_gelu(ctx) -> FunctionProto | None:
    node = ctx.node
    if not _present(node.input, 0) or not _single_output(node) or node.attribute:
        raise Declined("takes X (and an optional bias), no attributes, one output")
    b = Body(_body_opset(ctx), _elem_type(ctx))
    x = b.op("Add", "X", "bias") if _present(node.input, 1) else "X"
    return b.function(DOMAIN, "fast_gelu", _inputs(node, ["X", "bias"]), [_fast_gelu(b, x)])


@declining
def build_gelu(ctx) -> FunctionProto | None:
    node = ctx.node
    if not _present(node.input, 0) or not _single_output(node) or node.attribute:
        raise Declined("takes X, no attributes, one output")
    b = Body(_body_opset(ctx), _elem_type(ctx))
    return b.function(DOMAIN, "gelu", ["X"], [_gelu(b, "X")])


@declining
def build_bias_gelu(ctx) -> FunctionProto | None:
    node = ctx.node
    if not (_present(node.input, 0) and _present(node.input, 1)) or not _single_output(node):
        raise Declined("takes X and bias, one output")
    b = Body(_body_opset(ctx), _elem_type(ctx))
    return b.function(DOMAIN, "bias_gelu", ["A", "B"], [_gelu(b, b.op("Add", "A", "B"))])


@declining
def build_quick_gelu(ctx) -> FunctionProto | None:
    node = ctx.node
    if (not _present(node.input, 0) or not _single_output(node)
            or _unknown_attributes(node, ["alpha"])):
        raise Declined("takes X, only alpha, one output")
    b = Body(_body_opset(ctx), _elem_type(ctx))
    alpha = b.literal(ctx.attribute("alpha", QUICKGELU_DEFAULT_ALPHA), "X")
    y = b.op("Mul", "X", b.op("Sigmoid", b.op("Mul", alpha, "X")))
    return b.function(DOMAIN, "quick_gelu", ["X"], [y])


@declining
def build_gemm_fast_gelu(ctx) -> FunctionProto | None:
    node = ctx.node
    if (not (_present(node.input, 0) and _present(node.input, 1)) or not _single_output(node)
            or node.attribute):
        raise Declined("needs X and W given (bias optional), no attributes, one output")
    b = Body(_body_opset(ctx), _elem_type(ctx))
    x = b.op("MatMul", "X", "W")
    if _present(node.input, 2):
        x = b.op("Add", x, "bias")
    return b.function(DOMAIN, "gemm_fast_gelu", _inputs(node, ["X", "W", "bias"]),
                      [_fast_gelu(b, x)])


@declining
def build_bias_add(ctx) -> FunctionProto | None:
    node = ctx.node
    if not all(_present(node.input, i) for i in range(3)) or not _single_output(node):
        raise Declined("needs input, bias and skip, one output")
    b = Body(_body_opset(ctx))
    y = b.op("Add", b.op("Add", "X", "bias"), "skip")
    return b.function(DOMAIN, "bias_add", ["X", "bias", "skip"], [y])


def _softmax_flattened(b: Body, x: str, axis: int) -> str:
    """Softmax-1 semantics: ``x`` coerced to 2-D at ``axis``, softmax over the second."""
    if b.opset < 13:
        return b.op("Softmax", x, axis=axis)
    flat = b.op("Flatten", x, axis=axis)
    return b.op("Reshape", b.op("Softmax", flat, axis=1), b.op("Shape", x))


@declining
def build_bias_softmax(ctx) -> FunctionProto | None:
    node = ctx.node
    if (not (_present(node.input, 0) and _present(node.input, 1)) or not _single_output(node)
            or _unknown_attributes(node, ["axis", "is_inner_broadcast"])):
        raise Declined("takes data and bias, only axis and is_inner_broadcast, one output")
    if ctx.attribute("is_inner_broadcast") != 0:
        raise Declined("is_inner_broadcast=1 is not decomposed")
    b = Body(_body_opset(ctx))
    y = _softmax_flattened(b, b.op("Add", "data", "bias"), ctx.attribute("axis", 1))
    return b.function(DOMAIN, "bias_softmax", ["data", "bias"], [y])


# -- normalizations -----------------------------------------------------------------------


def _stash(b: Body, x: str, elem_type: int | None) -> str:
    """``x`` in float32 when it is float16/bfloat16 (statistics are computed in float)."""
    return b.cast(x, TensorProto.FLOAT) if elem_type in _LOW_PRECISION else x


def _rms_inverse(b: Body, s: str, axes: Sequence[int], epsilon: float) -> str:
    """``1 / sqrt(mean(s^2 over axes) + epsilon)``, keepdims."""
    mean_square = b.reduce("ReduceMean", b.op("Mul", s, s), axes)
    return b.op("Reciprocal", b.op("Sqrt", b.op("Add", mean_square, b.literal(epsilon, s))))


def _skip_sum(b: Body, node, bias_index: int) -> str:
    s = b.op("Add", "input", "skip")
    return b.op("Add", s, "bias") if _present(node.input, bias_index) else s


def _skip_norm_body(ctx, name: str, formal: Sequence[str], bias_index: int,
                    simplified: bool) -> FunctionProto | None:
    node = ctx.node
    if (not all(_present(node.input, i) for i in range(3)) or not _present(node.output, 0)
            or _unknown_attributes(node, ["epsilon"])):
        raise Declined("needs input, skip and gamma, the first output, only epsilon")
    elem = _shared_elem_type(ctx, 0, 1, 2)
    epsilon = ctx.attribute("epsilon", SKIPLN_DEFAULT_EPSILON)
    b = Body(_body_opset(ctx), elem)
    s = _skip_sum(b, node, bias_index)
    has_beta = not simplified and _present(node.input, 3)
    if not simplified and b.opset >= 17:
        extra = ["beta"] if has_beta else []  # an absent beta is not passed on as ""
        y, mean, inv_std_var = b.op("LayerNormalization", s, "gamma", *extra, outputs=3,
                                    axis=-1, epsilon=epsilon)
    else:
        if elem is None and b.opset < 15:
            raise Declined("element type unknown")
        s32 = _stash(b, s, elem)
        b.elem_type = TensorProto.FLOAT if elem in _LOW_PRECISION else elem  # for epsilon
        if simplified:
            centered, mean = s32, ""
        else:
            mean = b.reduce("ReduceMean", s32, [-1])
            centered = b.op("Sub", s32, mean)
        inv_std_var = _rms_inverse(b, centered, [-1], epsilon)
        normalized = b.op("Mul", centered, inv_std_var)
        b.elem_type = elem
        if elem in _LOW_PRECISION:
            normalized = b.cast(normalized, elem)
        y = b.op("Mul", normalized, "gamma")
        if has_beta:
            y = b.op("Add", y, "beta")
        if elem == TensorProto.DOUBLE:  # the statistics outputs are float (type U)
            mean = mean and b.cast(mean, TensorProto.FLOAT)
            inv_std_var = b.cast(inv_std_var, TensorProto.FLOAT)
        if simplified and _present(node.output, 1):
            # no centring: onnxruntime writes a mean of 0 (skip_layer_norm.cc)
            mean = b.fill(b.op("Shape", inv_std_var), 0.0, TensorProto.FLOAT)
    outputs = [y, mean or inv_std_var, inv_std_var, s]
    fn = b.function(DOMAIN, name, _inputs(node, formal), outputs)
    return _trim_outputs(fn, [_present(node.output, i) for i in range(4)])


@declining
def build_skip_layer_norm(ctx) -> FunctionProto | None:
    return _skip_norm_body(ctx, "skip_layer_norm",
                           ["input", "skip", "gamma", "beta", "bias"], 4, simplified=False)


@declining
def build_skip_simplified_layer_norm(ctx) -> FunctionProto | None:
    return _skip_norm_body(ctx, "skip_simplified_layer_norm",
                           ["input", "skip", "gamma", "bias"], 3, simplified=True)


@declining
def build_layer_norm_before_17(ctx) -> FunctionProto | None:
    """onnxruntime's ai.onnx ``LayerNormalization`` (versions 1-16), in ops of the model's
    opset."""
    node = ctx.node
    if (not (_present(node.input, 0) and _present(node.input, 1)) or not _present(node.output, 0)
            or _unknown_attributes(node, ["axis", "epsilon", "stash_type"])):
        raise Declined("needs X and Scale, the first output, only axis, epsilon and stash_type")
    axis = ctx.attribute("axis", -1)
    if axis >= 0:
        rank = _declared_rank(ctx, node.input[0])
        if rank is None or axis >= rank:
            raise Declined("a non-negative axis needs the input's rank, which is not declared")
        axis -= rank
    elem = _shared_elem_type(ctx, 0, 1)
    if elem is None:
        raise Declined("the element type of X and Scale is unknown")
    stash = ctx.attribute("stash_type", 1) == 1 and elem in _LOW_PRECISION
    b = Body(_body_opset(ctx), TensorProto.FLOAT if stash else elem)
    x = b.cast("X", TensorProto.FLOAT) if stash else "X"
    axes = list(range(axis, 0))
    mean = b.reduce("ReduceMean", x, axes)
    centered = b.op("Sub", x, mean)
    inv_std_dev = _rms_inverse(b, centered, axes, ctx.attribute("epsilon", 1e-5))
    normalized = b.op("Mul", centered, inv_std_dev)
    if stash:
        normalized = b.cast(normalized, elem)
    y = b.op("Mul", normalized, "Scale")
    if _present(node.input, 2):
        y = b.op("Add", y, "B")
    if elem != TensorProto.FLOAT and not stash:  # Mean and InvStdDev are float (type U)
        mean, inv_std_dev = b.cast(mean, TensorProto.FLOAT), b.cast(inv_std_dev,
                                                                    TensorProto.FLOAT)
    fn = b.function(DOMAIN, "layer_norm_before_17", _inputs(node, ["X", "Scale", "B"]),
                    [y, mean, inv_std_dev])
    return _trim_outputs(fn, [_present(node.output, i) for i in range(3)])


def _declared_rank(ctx, name: str) -> int | None:
    """The rank of ``name`` from a constant's or the model's declared shape, if known."""
    constant = ctx.constant(name)
    if constant is not None:
        return constant.ndim
    declared = (ctx.declared or {}).get(name)
    if declared is not None and declared.HasField("tensor_type") and declared.tensor_type.HasField(
            "shape"):
        return len(declared.tensor_type.shape.dim)
    return None


@declining
def build_simplified_layer_norm(ctx) -> FunctionProto | None:
    node = ctx.node
    if (not (_present(node.input, 0) and _present(node.input, 1)) or not _present(node.output, 0)
            or _unknown_attributes(node, ["axis", "epsilon", "stash_type"])):
        raise Declined("needs X and Scale, the first output, only axis, epsilon and stash_type")
    axis = ctx.attribute("axis", -1)
    if axis >= 0:
        raise Declined("a non-negative axis needs the input's rank, which is not known here")
    elem, scale_elem = _elem_type(ctx, 0), _elem_type(ctx, 1)
    stash = ctx.attribute("stash_type", 1) == 1 and elem in _LOW_PRECISION
    b = Body(_body_opset(ctx), TensorProto.FLOAT if stash else elem)
    x = b.cast("X", TensorProto.FLOAT) if stash else "X"
    inv_std_var = _rms_inverse(b, x, list(range(axis, 0)),
                               ctx.attribute("epsilon", SIMPLIFIED_LN_DEFAULT_EPSILON))
    normalized = b.op("Mul", x, inv_std_var)
    if scale_elem is not None and scale_elem != (TensorProto.FLOAT if stash else elem):
        normalized = b.cast(normalized, scale_elem)
    elif scale_elem is None:
        if b.opset < 15:
            raise Declined("scale type unknown")
        normalized = b.op("CastLike", normalized, "scale")
    y = b.op("Mul", normalized, "scale")
    fn = b.function(DOMAIN, "simplified_layer_norm", ["X", "scale"], [y, inv_std_var])
    return _trim_outputs(fn, [_present(node.output, i) for i in range(2)])


# -- matrix products ----------------------------------------------------------------------


def _transposed(b: Body, x: str, trans: int, trans_batch: int) -> str:
    """FusedMatMul's operand transpositions, rank-free through Einsum."""
    if trans_batch:
        return b.op("Einsum", x, equation="a...j->...ja" if trans else "a...j->...aj")
    if trans:
        return b.op("Einsum", x, equation="...ij->...ji")
    return x


@declining
def build_fused_matmul(ctx) -> FunctionProto | None:
    node = ctx.node
    known = ["alpha", "transA", "transB", "transBatchA", "transBatchB"]
    if (not (_present(node.input, 0) and _present(node.input, 1)) or not _single_output(node)
            or _unknown_attributes(node, known)):
        raise Declined("needs A and B, one output, known attributes")
    b = Body(_body_opset(ctx), _elem_type(ctx))
    a = _transposed(b, "A", ctx.attribute("transA", 0), ctx.attribute("transBatchA", 0))
    bb = _transposed(b, "B", ctx.attribute("transB", 0), ctx.attribute("transBatchB", 0))
    y = b.op("MatMul", a, bb)
    alpha = ctx.attribute("alpha", 1.0)
    if alpha != 1.0:
        y = b.op("Mul", y, b.literal(alpha, y))
    return b.function(DOMAIN, "fused_matmul", ["A", "B"], [y])


@declining
def build_fused_gemm(ctx) -> FunctionProto | None:
    node = ctx.node
    gemm_attributes = ["alpha", "beta", "transA", "transB"]
    activation_attributes = ["activation", "activation_alpha", "activation_beta",
                             "activation_gamma"]
    if (not (_present(node.input, 0) and _present(node.input, 1)) or not _single_output(node)
            or _unknown_attributes(node, gemm_attributes + activation_attributes)):
        raise Declined("needs A and B, one output, known attributes")
    b = Body(_body_opset(ctx), _elem_type(ctx))
    attrs = {a: ctx.attribute(a) for a in gemm_attributes}
    y = b.op("Gemm", *_inputs(node, ["A", "B", "C"]), **attrs)
    kind = ctx.attribute("activation", b"")
    kind = kind.decode() if isinstance(kind, bytes) else kind
    if not kind or kind == "Clip":
        raise Declined("onnxruntime rejects a FusedGemm without an activation, or with Clip")
    y = _activation(b, y, kind, ctx.attribute("activation_alpha"),
                    ctx.attribute("activation_beta"), ctx.attribute("activation_gamma"))
    return b.function(DOMAIN, "fused_gemm", _inputs(node, ["A", "B", "C"]), [y])


# -- convolutions -------------------------------------------------------------------------


_CONV_ATTRIBUTES = {
    "auto_pad": AttributeProto.STRING,
    "dilations": AttributeProto.INTS,
    "group": AttributeProto.INT,
    "kernel_shape": AttributeProto.INTS,
    "pads": AttributeProto.INTS,
    "strides": AttributeProto.INTS,
}
_FUSED_ATTRIBUTES = ("activation", "activation_params")


def _spatial_rank(ctx) -> int | None:
    kernel_shape = ctx.attribute("kernel_shape")
    if kernel_shape:
        return len(kernel_shape)
    weight = ctx.constant(ctx.node.input[1])
    if weight is not None and weight.ndim >= 3:
        return weight.ndim - 2
    for name in ctx.node.input[:2]:
        declared = (ctx.declared or {}).get(name)
        if declared is not None and declared.HasField("tensor_type"):
            tensor_type = declared.tensor_type
            if tensor_type.HasField("shape") and len(tensor_type.shape.dim) >= 3:
                return len(tensor_type.shape.dim) - 2
    return None


def _conv_body(ctx, name: str, channels_last: bool, fused: bool) -> FunctionProto | None:
    """Conv (+ Z) (+ activation), optionally on channels-last tensors."""
    node = ctx.node
    allowed = list(_CONV_ATTRIBUTES) + (list(_FUSED_ATTRIBUTES) if fused else [])
    if (not (_present(node.input, 0) and _present(node.input, 1)) or not _single_output(node)
            or _unknown_attributes(node, allowed)):
        raise Declined("needs X and W, one output, known attributes")
    if not fused and len(node.input) > 3:
        raise Declined("a plain Conv takes at most 3 inputs")
    has_z = fused and _present(node.input, 3)
    b = Body(_body_opset(ctx), _elem_type(ctx))
    x = "X"
    if channels_last:
        rank = _spatial_rank(ctx)
        if rank is None:
            raise Declined("channels-last needs the input's rank, which is not declared")
        x = b.op("Transpose", "X", perm=[0, rank + 1, *range(1, rank + 1)])
    weight = "W"
    if channels_last and not fused:  # NhwcConv: M x k... x C/group -> M x C/group x k...
        weight = b.op("Transpose", "W", perm=[0, rank + 1, *range(1, rank + 1)])
    weights = [weight, "B"] if _present(node.input, 2) else [weight]
    conv_attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute
                  if a.name in _CONV_ATTRIBUTES}
    y = b.op("Conv", x, *weights, **conv_attrs)
    if channels_last:
        y = b.op("Transpose", y, perm=[0, *range(2, rank + 2), 1])
    if has_z:
        y = b.op("Add", y, "Z")
    if fused:
        kind = ctx.attribute("activation", b"")
        kind = kind.decode() if isinstance(kind, bytes) else kind
        y = _conv_activation(b, y, kind, list(ctx.attribute("activation_params", [])))
    return b.function(DOMAIN, name, _inputs(node, ["X", "W", "B", "Z"]), [y])


@declining
def build_nhwc_conv(ctx) -> FunctionProto | None:
    return _conv_body(ctx, "nhwc_conv", channels_last=True, fused=False)


@declining
def build_nhwc_fused_conv(ctx) -> FunctionProto | None:
    return _conv_body(ctx, "nhwc_fused_conv", channels_last=True, fused=True)


@declining
def build_fused_conv(ctx) -> FunctionProto | None:
    return _conv_body(ctx, "fused_conv", channels_last=False, fused=True)


# -- Trilu --------------------------------------------------------------------------------


@declining
def build_trilu(ctx) -> FunctionProto | None:
    node = ctx.node
    if (not _present(node.input, 0) or not _single_output(node)
            or _unknown_attributes(node, ["upper"])):
        raise Declined("takes input (and k), only upper, one output")
    upper = ctx.attribute("upper", 1)
    inputs = _inputs(node, ["X", "k"])
    b = Body(_body_opset(ctx))
    if b.opset >= 14:
        return b.function(DOMAIN, "trilu", inputs, [b.op("Trilu", *inputs, upper=upper)])
    elem = _any_elem_type(ctx, 0)
    if elem is None or elem == TensorProto.BFLOAT16:
        raise Declined("the element type is unknown or bfloat16")
    # column - row compared with k: upper keeps col - row >= k, lower keeps col - row <= k
    shape = b.op("Shape", "X")
    zero, one = b.const(np.array(0, np.int64)), b.const(np.array(1, np.int64))
    rows = b.op("Range", zero, b.op("Gather", shape, b.const(np.array(-2, np.int64))), one)
    cols = b.op("Range", zero, b.op("Gather", shape, b.const(np.array(-1, np.int64))), one)
    offset = b.op("Sub", b.unsqueeze(cols, [0]), b.unsqueeze(rows, [1]))
    k = "k" if _present(node.input, 1) else zero
    keep = (b.op("Not", b.op("Less", offset, k)) if upper
            else b.op("Not", b.op("Greater", offset, k)))
    y = b.op("Where", keep, "X", b.const(np.zeros((), helper.tensor_dtype_to_np_dtype(elem))))
    return b.function(DOMAIN, "trilu", inputs, [y])


# -- quantization -------------------------------------------------------------------------


def _unpack_bits(b: Body, packed: str, bits: int) -> str:
    """uint8 ``packed[..., n]`` -> int32 ``[..., n * 8 / bits]``, low bits first."""
    if bits == 8:
        return b.cast(packed, TensorProto.INT32)
    wide = b.cast(packed, TensorProto.INT32)
    parts = []
    for j in range(8 // bits):
        shifted = b.op("Div", wide, b.const(np.array(2 ** (bits * j), np.int32)))
        parts.append(b.unsqueeze(b.op("Mod", shifted, b.const(np.array(2 ** bits,
                                                                        np.int32))), [-1]))
    stacked = b.op("Concat", *parts, axis=-1)
    merged_shape = b.op("Concat", b.shape_part(packed, 0, -1), b.ints([-1]), axis=0)
    return b.op("Reshape", stacked, merged_shape)


@declining
def build_matmul_nbits(ctx) -> FunctionProto | None:
    node = ctx.node
    known = ["K", "N", "bits", "block_size", "accuracy_level", "weight_prepacked"]
    if (not all(_present(node.input, i) for i in range(3)) or not _single_output(node)
            or _unknown_attributes(node, known) or ctx.attribute("weight_prepacked", 0)):
        raise Declined("needs A, B and scales, one output, known attributes, no prepacked weight")
    k, n = ctx.attribute("K"), ctx.attribute("N")
    bits, block = ctx.attribute("bits", 4), ctx.attribute("block_size")
    if bits not in (2, 4, 8) or not k or not n or not block:
        raise Declined("needs bits 2, 4 or 8, and K, N and block_size")
    elem = _shared_elem_type(ctx, 0, 2)
    if elem is None:
        raise Declined("the element type of A and scales is unknown")
    if _present(node.input, 4) and (bits != 4 or _any_elem_type(ctx, 3) == TensorProto.UINT8):
        # onnxruntime 1.32 refuses g_idx with 8 bits, computes something else with 2, and
        # ignores packed zero points with it (matmul_nbits_impl.cc reads them into a
        # variable it never uses): no single meaning to reproduce
        raise Declined("g_idx with bits other than 4, or with packed zero points, has no single "
                       "meaning in onnxruntime")
    blocks = -(-k // block)
    b = Body(_body_opset(ctx), elem)
    q = b.op("Reshape", _unpack_bits(b, "B", bits), b.ints([n, blocks, block]))
    q = b.cast(q, elem)
    if _present(node.input, 3):
        zp_type = _any_elem_type(ctx, 3)
        if zp_type == TensorProto.UINT8:  # packed like B: N x ceil(blocks * bits / 8)
            packed = b.op("Reshape", "zero_points", b.ints([n, -1]))
            zp = b.cast(b.slice(_unpack_bits(b, packed, bits), [0], [blocks], [1]), elem)
        elif zp_type == elem:
            zp = "zero_points"
        else:
            raise Declined("zero_points must be uint8 (packed) or the element type of A")
        zp = b.op("Reshape", zp, b.ints([n, blocks, 1]))
    else:
        zp = b.const(np.array(2 ** (bits - 1)), elem)
    if _present(node.input, 4):  # g_idx: column k takes the scale of block g_idx[k]
        q = b.slice(b.op("Reshape", q, b.ints([n, blocks * block])), [0], [k], [1])
        groups = b.cast("g_idx", TensorProto.INT64)
        scales = b.op("Gather", b.op("Reshape", "scales", b.ints([n, blocks])), groups, axis=1)
        if _present(node.input, 3):  # else the default, a scalar
            zp = b.op("Gather", b.op("Reshape", zp, b.ints([n, blocks])), groups, axis=1)
        weight = b.op("Mul", b.op("Sub", q, zp), scales)
    else:
        scales = b.op("Reshape", "scales", b.ints([n, blocks, 1]))
        weight = b.op("Mul", b.op("Sub", q, zp), scales)
        weight = b.op("Reshape", weight, b.ints([n, blocks * block]))
        if blocks * block != k:
            weight = b.slice(weight, [0], [k], [1])
    a = "A"
    if (ctx.attribute("accuracy_level", 0) == 4 and (bits, block) != (2, 16)
            and not (_present(node.input, 3) and _any_elem_type(ctx, 3) == elem)
            and not _present(node.input, 4)):
        # (onnxruntime 1.32 computes 2-bit blocks of 16, float zero points and g_idx in full
        # precision whatever the accuracy level; measured against its CPU kernel,
        # tests/test_matmul_nbits_oracle.py)
        a = _int8_blocks(b, a, k, block, elem)
    y = b.op("MatMul", a, b.op("Transpose", weight, perm=[1, 0]))
    if _present(node.input, 5):
        y = b.op("Add", y, "bias")
    inputs = _inputs(node, ["A", "B", "scales", "zero_points", "g_idx", "bias"])
    return b.function(DOMAIN, "matmul_nbits", inputs, [y])


def _int8_blocks(b: Body, a: str, k: int, block: int, elem: int) -> str:
    """``a`` (..., K) as onnxruntime's ``accuracy_level`` 4 computes with it: quantized to
    int8 per row and block of ``block`` along K (symmetric, ``scale = max|a| / 127`` in
    float32, rounded half to even), and dequantized again."""
    blocks = -(-k // block)
    x = b.cast(a, TensorProto.FLOAT) if elem != TensorProto.FLOAT else a
    lead = b.shape_part(x, 0, -1)
    if blocks * block != k:  # zeros up to whole blocks
        pad = b.fill(b.op("Concat", lead, b.ints([blocks * block - k]), axis=0), 0.0,
                     TensorProto.FLOAT)
        x = b.op("Concat", x, pad, axis=-1)
    x = b.op("Reshape", x, b.op("Concat", lead, b.ints([blocks, block]), axis=0))
    float_zero = b.const(np.array(0.0), TensorProto.FLOAT)
    # the block's max |a| by TopK, whose form is the same at every opset from 11 (a
    # ReduceMax of the model's opset may be one a lower target must not get)
    largest, _ = b.op("TopK", b.op("Abs", x), b.ints([1]), outputs=2, axis=-1)
    scale = b.op("Div", largest, b.const(np.array(127.0), TensorProto.FLOAT))
    scale = b.op("Where", b.op("Equal", scale, float_zero),
                 b.const(np.array(1.0), TensorProto.FLOAT), scale)
    x = b.op("Mul", b.op("Round", b.op("Div", x, scale)), scale)
    x = b.op("Reshape", x, b.op("Concat", lead, b.ints([blocks * block]), axis=0))
    if blocks * block != k:
        x = b.slice(x, [0], [k], [-1])
    return b.cast(x, elem) if elem != TensorProto.FLOAT else x


def _repeat_blocks(b: Body, scales: str, axis: int, block: int, like: str) -> str:
    """Each entry of ``scales`` along ``axis`` repeated ``block`` times, cut to the size of
    ``like`` along that axis (``axis`` >= 0, or -1)."""
    last = axis == -1
    prefix = b.shape_part(scales, 0, -1 if last else axis)
    count = b.shape_part(scales, axis, None if last else axis + 1)
    suffix = [] if last else [b.shape_part(scales, axis + 1)]
    expanded = b.op("Expand", b.unsqueeze(scales, [-1 if last else axis + 1]),
                    b.op("Concat", prefix, count, b.ints([block]), *suffix, axis=0))
    merged = b.op("Reshape", expanded, b.op("Concat", prefix, b.ints([-1]), *suffix, axis=0))
    size = b.shape_part(like, axis, None if last else axis + 1)
    return b.slice(merged, [0], size, [axis])


@declining
def build_gather_block_quantized(ctx) -> FunctionProto | None:
    node = ctx.node
    known = ["bits", "block_size", "gather_axis", "quantize_axis"]
    if (not all(_present(node.input, i) for i in range(3)) or not _single_output(node)
            or _unknown_attributes(node, known)):
        raise Declined("needs data, indices and scales, one output, known attributes")
    data_type, out_type = _any_elem_type(ctx, 0), _elem_type(ctx, 2)
    bits, block = ctx.attribute("bits", 4), ctx.attribute("block_size", 128)
    gather_axis, quantize_axis = ctx.attribute("gather_axis", 0), ctx.attribute(
        "quantize_axis", 1)
    data = ctx.constant(node.input[0])
    rank = data.ndim if data is not None else None
    if out_type is None or not block:
        raise Declined("the output type or block_size is unknown")
    if rank is None:
        if gather_axis < 0 or quantize_axis < 0:
            raise Declined("negative axes need the data's rank, which is not known (data is not a "
                           "constant)")
    else:
        gather_axis, quantize_axis = gather_axis % rank, quantize_axis % rank
    if gather_axis == quantize_axis:
        raise Declined("gather_axis and quantize_axis must differ")
    b = Body(_body_opset(ctx), out_type)
    if data_type in (TensorProto.INT4, TensorProto.UINT4):
        q = b.cast("data", TensorProto.INT32)
        zp = b.cast("zero_points", TensorProto.INT32) if _present(node.input, 3) else None
        default_zp = 0
    elif data_type == TensorProto.UINT8 and bits in (2, 4, 8):
        if gather_axis != 0 or (rank is None and bits != 8):
            raise Declined("packed uint8 data needs gather_axis 0 (and a constant data below 8 "
                           "bits)")
        q = _unpack_bits(b, "data", bits)
        zp = _unpack_bits(b, "zero_points", bits) if _present(node.input, 3) else None
        default_zp = 2 ** (bits - 1)
    else:
        raise Declined("data must be int4, uint4, or uint8 with bits 2, 4 or 8")
    if zp is not None and data_type == TensorProto.UINT8 and bits != 8:
        # packed zero points carry padding up to a whole byte along the last axis
        zp = b.slice(zp, [0], b.shape_part("scales", -1), [-1])
    # out-of-range indices give zeros: gather index 0 for them, and mask the result
    size = b.shape_part("data", gather_axis, gather_axis + 1)
    indices = b.cast("indices", TensorProto.INT64)
    valid = b.op("And", b.op("Less", indices, size),
                 b.op("Not", b.op("Less", indices, b.op("Neg", size))))
    indices = b.op("Where", valid, indices, b.const(np.array(0, np.int64)))
    # gather first (the table stays quantized), then dequantize the rows taken
    rows = b.op("Gather", q, indices, axis=gather_axis)
    scales = b.op("Gather", "scales", indices, axis=gather_axis)
    if zp is not None:
        zp = b.op("Gather", zp, indices, axis=gather_axis)
    # where the quantized axis lands in the output: before the gathered axis it keeps its
    # index; behind it, count from the back
    if quantize_axis < gather_axis:
        out_axis = quantize_axis
    elif rank is not None and quantize_axis == rank - 1:
        out_axis = -1
    else:
        raise Declined("quantize_axis after gather_axis must be the last axis of a constant data")
    scales = _repeat_blocks(b, scales, out_axis, block, rows)
    values = b.cast(rows, out_type)
    if zp is not None:
        values = b.op("Sub", values, b.cast(_repeat_blocks(b, zp, out_axis, block, rows),
                                            out_type))
    elif default_zp:
        values = b.op("Sub", values, b.const(np.array(default_zp), out_type))
    y = b.op("Mul", values, scales)
    # the mask (shape of indices) gets a 1 for each data axis behind the gathered one
    trailing = b.op("Sub", b.op("Size", b.op("Shape", "data")),
                    b.ints([gather_axis + 1]))
    ones = b.fill(trailing, 1, TensorProto.INT64)
    mask = b.op("Reshape", valid, b.op("Concat", b.op("Shape", "indices"), ones, axis=0))
    y = b.op("Where", mask, y, b.const(np.array(0), out_type))
    inputs = _inputs(node, ["data", "indices", "scales", "zero_points"])
    return b.function(DOMAIN, "gather_block_quantized", inputs, [y])


_QDQ_8BIT = (TensorProto.INT8, TensorProto.UINT8)


def _qdq_opset(quantized: int | None, scale: int | None, dequantize: bool) -> int | None:
    """The first ai.onnx opset whose (De)QuantizeLinear takes these element types."""
    if quantized is None or scale is None:
        return None
    if quantized in _QDQ_8BIT or (dequantize and quantized == TensorProto.INT32):
        low = 13
    elif quantized in (TensorProto.INT16, TensorProto.UINT16, TensorProto.INT4,
                       TensorProto.UINT4):
        low = 21
    else:
        return None
    if scale == TensorProto.FLOAT16:
        return max(low, 19)
    return low if scale == TensorProto.FLOAT else None


def _qdq_builder(op_type: str):
    dequantize = op_type == "DequantizeLinear"

    @declining
    def build(ctx) -> FunctionProto | None:
        node = ctx.node
        if (not (_present(node.input, 0) and _present(node.input, 1))
                or not _single_output(node) or _unknown_attributes(node, ["axis"])):
            raise Declined("needs x and scale, one output, only axis")
        if dequantize:
            quantized = _any_elem_type(ctx, 0)
        elif _present(node.input, 2):
            quantized = _any_elem_type(ctx, 2)
        else:
            quantized = TensorProto.UINT8  # no zero point: uint8, as the standard op
        needed = _qdq_opset(quantized, _elem_type(ctx, 1), dequantize)
        b = Body(_body_opset(ctx))
        if (needed is not None and b.opset < needed and b.opset >= 13
                and quantized in (TensorProto.INT16, TensorProto.UINT16)):
            # 16-bit before opset 21 (onnxruntime's quantizer writes com.microsoft Q/DQ for
            # that): the standard op's arithmetic, as onnx-standard writes it from 21
            from rewriter_plugins import onnx_standard

            standard = (onnx_standard.build_dequantize_linear if dequantize
                        else onnx_standard.build_quantize_linear)
            return standard(ctx)
        if needed is None or b.opset < needed:
            raise Declined("these element types need a later ai.onnx opset than the model's (or "
                           "none has them)")
        inputs = _inputs(node, ["x", "scale", "zero_point"])
        axis = ctx.attribute("axis")
        scale = ctx.constant(node.input[1])
        operands = list(inputs)
        if axis is None and scale is not None and scale.shape == (1,):
            # a one-element scale (and zero point) is per tensor for onnxruntime's kernel
            # (onnxruntime's quantizer writes one for an int32 bias): the standard op's scalar
            scalar = b.ints([])
            operands[1:] = [b.op("Reshape", name, scalar) for name in inputs[1:]]
        elif axis is None and (scale is None or scale.ndim != 0):
            raise Declined("per-tensor needs a scalar scale; unknown: not sure it is one")
        y = b.op(op_type, *operands, axis=axis)
        return b.function(DOMAIN, op_type.lower(), inputs, [y])

    build.__name__ = f"build_{op_type.lower()}"
    return build


build_dequantize_linear = _qdq_builder("DequantizeLinear")
build_quantize_linear = _qdq_builder("QuantizeLinear")


# -- kernels: oracles for ops onnxruntime has no CPU kernel for ----------------------------
# (so that ``compare`` can run an original model on the reference evaluator; the planner
# prefers the decompositions above)


def _fast_gelu_np(x: np.ndarray) -> np.ndarray:
    return x * (0.5 + 0.5 * np.tanh(x * (FAST_GELU_C + FAST_GELU_B * x * x)))


# -- numpy oracles, from the contrib ops' documentation (where onnxruntime's CPU kernel lacks
# a type or the op) -------------------------------------------------------------------------


def _erf_gelu(y: np.ndarray) -> np.ndarray:
    return 0.5 * y * (1 + np.vectorize(math.erf)(y / math.sqrt(2)))


def gelu_reference(x):
    """``Gelu``: ``0.5 x (1 + erf(x / sqrt 2))`` in float64."""
    return _erf_gelu(x.astype(np.float64)).astype(x.dtype)


def bias_gelu_reference(a, b):
    """``BiasGelu``: ``Gelu(A + B)`` in float64."""
    return _erf_gelu(a.astype(np.float64) + b).astype(a.dtype)


def bias_add_reference(x, bias, skip):
    """``BiasAdd``: ``X + bias + skip``."""
    return (x + bias) + skip


def bias_softmax_reference(data, bias, axis=1, is_inner_broadcast=0):
    """``BiasSoftmax``: Softmax-1 of ``data + bias`` (coerced to 2-D at ``axis``), float64."""
    z = (data + bias).astype(np.float64)
    flat = z.reshape(int(np.prod(z.shape[:axis])), -1)
    e = np.exp(flat - flat.max(axis=1, keepdims=True))
    return (e / e.sum(axis=1, keepdims=True)).reshape(z.shape).astype(data.dtype)


def fast_gelu_reference(x, bias=None):
    """``FastGelu``: ``0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))`` of ``x + bias``, in
    float64."""
    y = x.astype(np.float64) + (0 if bias is None else bias)
    return (0.5 * y * (1 + np.tanh(math.sqrt(2 / math.pi) * (y + 0.044715 * y ** 3)))
            ).astype(x.dtype)


@kernel(signatures=["float, float -> float", "float, float, float -> float",
                    "float16, float16 -> float16", "float16, float16, float16 -> float16"])
def gemm_fast_gelu_kernel(x, w, bias=None):
    """``FastGelu(X @ W + bias)``, in float64."""
    y = x.astype(np.float64) @ w.astype(np.float64)
    if bias is not None:
        y = y + bias
    return _fast_gelu_np(y).astype(x.dtype)


_CONV_KERNEL_ATTRIBUTES = {"auto_pad": "NOTSET", "group": 1,
                           "dilations": (list[int], []), "kernel_shape": (list[int], []),
                           "pads": (list[int], []), "strides": (list[int], [])}


@kernel(signatures=["float, float -> float", "float, float, float -> float"],
        attributes=_CONV_KERNEL_ATTRIBUTES)
def nhwc_conv_kernel(x, w, bias=None, **attributes):
    """``Conv`` of onnx's reference evaluator on ``X`` and the weight (``M x k... x C/group``,
    as onnxruntime's NhwcConv fusion writes it) transposed to channels-first."""
    from onnx.reference import ReferenceEvaluator

    attrs = {name: value for name, value in attributes.items() if value != []}  # []: unset
    rank = x.ndim - 2
    names = ["X", "W", "B"] if bias is not None else ["X", "W"]
    graph = helper.make_graph(
        [helper.make_node("Conv", names, ["Y"], **attrs)], "conv",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in names],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    to_channels_first = [0, rank + 1, *range(1, rank + 1)]
    feeds = {"X": np.transpose(x, to_channels_first), "W": np.transpose(w, to_channels_first)}
    if bias is not None:
        feeds["B"] = bias
    (y,) = ReferenceEvaluator(model).run(None, feeds)
    return np.ascontiguousarray(np.transpose(y, [0, *range(2, rank + 2), 1]))


def _onnxruntime_node(op_type: str, domain: str, arrays, outputs: int = 1, **attributes):
    """Run one node on onnxruntime's own CPU kernel (absent inputs as None)."""
    import onnxruntime as ort

    names = [f"i{i}" if a is not None else "" for i, a in enumerate(arrays)]
    while names and not names[-1]:
        names.pop()
    present = [(n, np.asarray(a)) for n, a in zip(names, arrays) if n]
    node = helper.make_node(op_type, names, [f"o{i}" for i in range(outputs)], domain=domain,
                            **attributes)
    graph = helper.make_graph([node], "oracle", [
        helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
        for n, a in present], [helper.make_value_info(f"o{i}", helper.TypeProto())
                               for i in range(outputs)])
    imports = [helper.make_opsetid("", 17)] + ([helper.make_opsetid(domain, 1)] if domain else [])
    model = helper.make_model(graph, opset_imports=imports)
    model.ir_version = 8
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, dict(present))


def simplified_layer_norm_reference(x, scale, **attributes):
    """``com.microsoft::SimplifiedLayerNormalization``: onnxruntime's own kernel, which it
    registers in the ai.onnx domain (``Y``, ``inv_std_var``)."""
    return tuple(_onnxruntime_node("SimplifiedLayerNormalization", "", [x, scale], 2,
                                   **attributes))


def nhwc_fused_conv_reference(x, w, bias=None, z=None, **attributes):
    """``NhwcFusedConv``: onnxruntime's own ``FusedConv`` kernel on ``X`` (and ``Z``)
    transposed to channels-first, its result transposed back."""
    rank = x.ndim - 2
    first, last = [0, rank + 1, *range(1, rank + 1)], [0, *range(2, rank + 2), 1]
    z = None if z is None else np.transpose(z, first)
    (y,) = _onnxruntime_node("FusedConv", DOMAIN, [np.transpose(x, first), w, bias, z],
                             **attributes)
    return np.ascontiguousarray(np.transpose(y, last))


@hookimpl
def register_kernels(registry):
    for op_type, attr in (("GemmFastGelu", "gemm_fast_gelu_kernel"),
                          ("NhwcConv", "nhwc_conv_kernel")):
        registry.add(DOMAIN, op_type, f"rewriter_plugins.com_microsoft:{attr}",
                     description=f"com-microsoft:{op_type} (numpy oracle)")

    from rewriter_plugins.com_microsoft import attention

    attention.register_kernels(registry)


# -- registration -------------------------------------------------------------------------

_F32_F16 = ("float", "float16")
_ORACLE = "rewriter_plugins.com_microsoft:"

# min_onnxruntime of the samples older onnxruntime kernels compute otherwise (found on
# 1.21.0, 1.23.2, 1.30.0 and 1.32.0; releases between them were not available to check)
_SKIP_LN_STATISTICS = (
    "1.30", "onnxruntime's CPU SkipLayerNormalization kernels of 1.21.0 and 1.23.2 give no "
    "mean / inv_std_var outputs (None); 1.30.0 and 1.32.0 compute them")
_LAYER_NORM_DOUBLE = (
    "1.30", "onnxruntime 1.21.0 and 1.23.2 compute a double LayerNormalization with float "
    "intermediates: up to 3.5e-7 from the float64 result (1.32.0: 3e-13)")
_NBITS = {  # onnxruntime's CPU MatMulNBits: "Only 4b quantization is supported" (1.21.0),
    # "Only 4b and 8b" (1.23.2); 1.30.0 takes 2 bits
    2: ("1.30", "onnxruntime 1.23.2's CPU MatMulNBits takes 4 and 8 bits only (1.30.0: 2)"),
    8: ("1.23", "onnxruntime 1.21.0's CPU MatMulNBits takes 4 bits only (1.23.2: 8)"),
}
_GATHER_OUT_OF_RANGE = (
    "1.32", "onnxruntime 1.21.0, 1.23.2 and 1.30.0 refuse an out-of-range index of "
    "GatherBlockQuantized ('indices element out of data bounds', an error by the op's "
    "documentation); 1.32.0 gives zeros for it, as the decomposition does")
_GATHER_BITS = ("1.23", "onnxruntime 1.21.0's GatherBlockQuantized has no bits attribute "
                "(uint8 data)")
_GATHER_UINT8_4BIT = (
    "1.30", "onnxruntime 1.23.2 dequantizes 4-bit data packed in uint8 with packed zero points "
    "otherwise than 1.30.0 and 1.32.0, which agree with the decomposition (192 of 240 values "
    "differ); 1.21.0 has no bits attribute")
_QUANTIZE_FLOAT16 = (
    "1.30", "onnxruntime's QuantizeLinear-19 of float16 (the decomposition's kernel) truncates "
    "x / scale toward zero instead of rounding it before microsoft/onnxruntime#32452: 6 of "
    "24 values one step off on 1.21.0 and 1.23.2 (its com.microsoft kernel rounds)")

# 4 input channels, 6 output channels: a weight read in the wrong layout cannot fit
_NHWC_CONV_SAMPLES = [
    OpSample(["T[2,6,5,4]", Arg("T[6,3,3,4]", constant=True), "T[6]"],
             attributes=dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1]), name="pads"),
    OpSample(["T[2,7,6,4]", "T[6,3,3,2]"], name="strides-dilations-group",
             attributes=dict(kernel_shape=[3, 3], strides=[2, 1], dilations=[1, 2], group=2)),
    OpSample(["T[2,6,6,4]", Arg("T[6,3,3,4]", constant=True), "T[6]"], name="auto-pad",
             attributes=dict(auto_pad="SAME_UPPER", strides=[2, 2])),
    OpSample(["T[2,9,4]", Arg("T[6,3,4]", constant=True), "T[6]"], name="1d"),
]


def _oracles() -> dict[str, dict]:
    """Per op: its oracle and the samples it is checked on (``tests/test_oracles.py``).
    onnxruntime's own contrib kernels where its CPU provider has them (float16 where they
    take it), numpy written from the op's documentation otherwise."""
    ort, f32, f16 = "onnxruntime", ["float"], ["float16"]
    x, bias = "T[2,3,8]", "T[8]"

    def sample(*inputs, **kw):
        return OpSample(list(inputs), **kw)

    def numpy(name):
        return _ORACLE + name

    def skip_ln(names, outputs, epsilon=1e-5, **kw):
        shapes = {"input": "T[2,3,16]", "skip": "T[2,3,16]", "gamma": "T[16]",
                  "beta": "T[16]", "bias": "T[16]"}
        if any(outputs[1:3]):  # mean / inv_std_var
            kw["min_onnxruntime"] = _SKIP_LN_STATISTICS
        return sample(*[shapes[n] if n else None for n in names], outputs=outputs,
                      attributes={} if epsilon is None else {"epsilon": epsilon}, **kw)

    def nbits(bits, k, zero_points, with_bias, opset, g_idx=False, accuracy=0):
        n, block = 5, 16
        blocks = -(-k // block)
        inputs = [f"T[2,3,{k}]", Arg(f"uint8[{n},{blocks},{block * bits // 8}]", low=0,
                                     high=256, constant=True),
                  Arg(f"T[{n},{blocks}]", low=0.01, high=0.11, constant=True)]
        if zero_points == "packed":
            inputs.append(Arg(f"uint8[{n},{-(-blocks * bits // 8)}]", low=0, high=256,
                              constant=True))
        elif zero_points == "float":
            inputs.append(Arg(f"T[{n},{blocks}]", low=0, high=2 ** bits, constant=True))
        if g_idx:  # act-order (GPTQ): the block of each input column, in any order
            inputs += [None] * (4 - len(inputs)) + [Arg(f"int32[{k}]", low=0, high=blocks,
                                                        constant=True)]
        if with_bias:
            inputs += [None] * (5 - len(inputs)) + [Arg(f"T[{n}]", constant=True)]
        attributes = dict(K=k, N=n, bits=bits, block_size=block)
        if accuracy:
            attributes["accuracy_level"] = accuracy
        # (float16 samples keep float16's own tolerance, 1e-2)
        tolerance = (1e-4, 1e-4) if accuracy else (2e-2, 2e-2)
        return sample(*inputs, opset=opset, attributes=attributes, tolerance=tolerance,
                      name=f"{bits}bit-{zero_points}" + ("-g_idx" if g_idx else "")
                      + (f"-accuracy{accuracy}" if accuracy else ""),
                      min_onnxruntime=_NBITS.get(bits))

    def gather_block(data, zero_points, axes, opset, out_of_range=False):
        gather_axis, quantize_axis = axes
        rows, cols, block = 6, 40, 16
        blocks = -(-cols // block)
        shape = [rows, cols] if quantize_axis == 1 else [cols, rows]
        scales = [rows, blocks] if quantize_axis == 1 else [blocks, rows]
        attributes = dict(gather_axis=gather_axis, quantize_axis=quantize_axis,
                          block_size=block)
        if data.startswith("uint8"):
            bits = int(data.split("-")[1])
            attributes["bits"] = bits
            packed = [rows, cols * bits // 8]
            zp = Arg(f"uint8[{rows},{-(-blocks * bits // 8)}]", low=0, high=256,
                     constant=True)
            data_arg = Arg(f"uint8{packed}", low=0, high=256, constant=True)
        else:
            low = -8 if data == "int4" else 0
            zp = Arg(f"{data}{scales}", low=low, high=low + 16, constant=True)
            data_arg = Arg(f"{data}{shape}", low=low, high=low + 16, constant=True)
        # index 7 of 6 rows: the op's documentation calls it an error; onnxruntime 1.32 (and
        # the decomposition) give zeros for it, older releases refuse it
        last = 7 if out_of_range else 4
        inputs = [data_arg, Arg("int64[2,3]", values=[[0, 5, -2], [3, last, 1]]),
                  Arg(f"T{scales}", low=0.01, high=0.11, constant=True)]
        name = f"{data}-axes{gather_axis}{quantize_axis}" + ("-out-of-range" * out_of_range)
        needs = (_GATHER_OUT_OF_RANGE if out_of_range else _GATHER_UINT8_4BIT
                 if data == "uint8-4" else _GATHER_BITS if data.startswith("uint8") else None)
        return sample(*inputs, *([zp] if zero_points else []), opset=opset,
                      attributes=attributes, name=name, min_onnxruntime=needs)

    def qdq(op_type, x_type, axis, opset, dtype):
        info = np.iinfo(x_type)
        channels = "[3]" if axis is not None else "[]"
        if x_type == "int32":
            zp = Arg(f"int32{channels}", values=np.zeros(3 if axis is not None else ()),
                     constant=True)
        else:
            zp = Arg(f"{x_type}{channels}", low=info.min, high=info.max + 1, constant=True)
        scale = Arg(f"T{channels}", low=0.05, high=0.25, constant=True)
        attributes = {} if axis is None else {"axis": axis}
        if op_type == "DequantizeLinear":
            x = Arg(f"{x_type}[2,3,4]", low=max(info.min, -1000), high=min(info.max, 1000))
            outputs = ["T"]
        else:
            x, outputs = Arg("T[2,3,4]", low=-30, high=30), [x_type]
        return sample(x, scale, zp, outputs=outputs, opset=opset, dtypes=[dtype],
                      attributes=attributes, tolerance=(1e-6, 0),
                      name=f"{x_type}-axis{axis}", min_onnxruntime=_QUANTIZE_FLOAT16 if (
                          op_type, dtype, axis) == ("QuantizeLinear", "float16", 1) else None)

    conv = dict(strides=[2, 2], pads=[1, 0, 1, 0], group=2, kernel_shape=[3, 3])
    conv_inputs = {"X": "T[2,4,7,6]", "W": "T[6,2,3,3]", "B": "T[6]", "Z": "T[2,6,4,2]"}
    gemm_activations = [
        ("Relu", {}), ("Tanh", {}), ("Sigmoid", {}), ("Softplus", {}), ("Softsign", {}),
        ("LeakyRelu", {"activation_alpha": 0.2}), ("Elu", {"activation_alpha": 0.7}),
        ("ThresholdedRelu", {"activation_alpha": 0.3}),
        ("HardSigmoid", {"activation_alpha": 0.3, "activation_beta": 0.4}),
        ("Selu", {"activation_alpha": 1.5, "activation_gamma": 1.1}),
        ("ScaledTanh", {"activation_alpha": 1.5, "activation_beta": 0.5}),
        ("ParametricSoftplus", {"activation_alpha": 1.5, "activation_beta": 0.5})]
    return {
        "FastGelu": dict(oracle=ort, samples=[
            sample(x, dtypes=f32), sample(x, bias, dtypes=f32, opset=12, name="bias"),
            sample(x, bias, dtypes=f16, oracle=numpy("fast_gelu_reference")),
            sample(x, bias, dtypes=f16, opset=12, oracle=numpy("fast_gelu_reference"))]),
        "Gelu": dict(oracle=ort, samples=[
            sample(x, dtypes=f32), sample(x, dtypes=f32, opset=12),
            *[sample(x, dtypes=f16, oracle=numpy("gelu_reference"), opset=opset)
              for opset in (None, 12)]]),
        "BiasGelu": dict(oracle=ort, samples=[
            sample(x, bias, dtypes=f32),
            sample(x, bias, dtypes=f16, oracle=numpy("bias_gelu_reference"))]),
        "QuickGelu": dict(oracle=ort, samples=[
            sample(x, dtypes=f32), sample(x, dtypes=f32, attributes={"alpha": 0.5},
                                          name="alpha"),
            sample(x, opset=12, attributes={"alpha": 1.0}, name="alpha")]),
        "GemmFastGelu": dict(oracle="kernel", samples=[
            sample("T[2,3,5]", Arg("T[5,8]", low=-1, high=1)),
            sample("T[2,3,5]", Arg("T[5,8]", low=-1, high=1), bias, name="bias"),
            sample("T[2,3,5]", Arg("T[5,8]", low=-1, high=1, constant=True),
                   Arg(bias, constant=True), opset=12, dtypes=f32, name="bias")]),
        "BiasAdd": dict(oracle=numpy("bias_add_reference"), samples=[
            sample("T[2,9,4]", "T[4]", "T[2,9,4]")]),
        "BiasSoftmax": dict(oracle=numpy("bias_softmax_reference"), samples=[
            sample("T[2,4,5,6]", b, attributes=dict(axis=axis, is_inner_broadcast=0),
                   name=f"axis{axis}")
            for axis, b in ((1, "T[4,5,6]"), (3, "T[1,1,5,6]"), (2, "T[5,6]"))]),
        "SkipLayerNormalization": dict(oracle=ort, samples=[
            skip_ln(["input", "skip", "gamma"], ["T"], None, dtypes=f32, name="plain"),
            skip_ln(["input", "skip", "gamma", "beta"], ["T"], name="beta"),
            skip_ln(["input", "skip", "gamma", None, "bias"], ["T", "float", "float", "T"],
                    dtypes=f32, name="bias-4-outputs"),
            *[skip_ln(["input", "skip", "gamma", "beta", "bias"], ["T", "float", "float", "T"]
                      if opset != 12 else ["T", None, None, "T"], dtypes=f32 if opset != 12
                      else None, opset=opset, name="all")
              for opset in (12, 13, 17)]]),
        "SkipSimplifiedLayerNormalization": dict(oracle=ort, samples=[
            skip_ln(["input", "skip", "gamma"], ["T"], None, opset=13, name="plain"),
            skip_ln(["input", "skip", "gamma", "bias"], ["T"], opset=13, name="bias"),
            skip_ln(["input", "skip", "gamma", "bias"], ["T", None, "float", "T"], opset=13,
                    dtypes=f32, name="bias-3-outputs"),
            *[skip_ln(["input", "skip", "gamma", *bias], ["T", "float", "float", "T"],
                      opset=opset, name="4-outputs" + ("-bias" if bias else ""))
              for bias, opset in (([], 13), (["bias"], 17))]]),
        "LayerNormalization": dict(oracle=ort, samples=[
            *[sample("T[2,5,8]", "T[8]", "T[8]", outputs=["T", "float", "float"], opset=12,
                     attributes=dict(epsilon=1e-5), dtypes=types, min_onnxruntime=needs)
              for types, needs in ((("float", "float16"), None),
                                   (("double",), _LAYER_NORM_DOUBLE))],
            sample("T[2,5,8]", "T[5,8]", outputs=["T"], opset=16, name="axis-2",
                   attributes=dict(axis=-2, epsilon=1e-3)),
            sample("T[2,5,8]", "T[8]", "T[8]", outputs=["T", None, "float"], opset=9,
                   attributes=dict(axis=2), dtypes=f32, name="axis2"),
            sample("T[3,8]", "T[8]", outputs=["T"], opset=13, dtypes=f32, name="default")]),
        "SimplifiedLayerNormalization": dict(samples=[
            sample("T[2,5,8]", "T[8]", outputs=["T", "float"], dtypes=f32, opset=13,
                   attributes=dict(axis=-1, epsilon=1e-5)),
            sample("T[2,5,8]", "T[5,8]", outputs=["T", "float"], dtypes=f32, opset=18,
                   attributes=dict(axis=-2, epsilon=1e-5), name="axis-2"),
            sample("T[2,5,8]", "T[8]", dtypes=f16, opset=17,
                   attributes=dict(axis=-1, epsilon=1e-5))]),
        "FusedMatMul": dict(oracle=ort, samples=[
            sample(Arg(f"T{a}", low=-1, high=1), Arg(f"T{b}", low=-1, high=1),
                   attributes=attrs, name=name)
            for attrs, a, b, name in [
                ({}, [3, 4], [4, 5], "plain"),
                ({"transA": 1, "alpha": 0.5}, [2, 4, 3], [2, 4, 5], "transA-alpha"),
                ({"transB": 1}, [2, 3, 4], [5, 4], "transB"),
                ({"transBatchA": 1}, [3, 2, 4], [2, 4, 5], "batchA"),
                ({"transBatchA": 1, "transA": 1, "transBatchB": 1, "transB": 1,
                  "alpha": 2.0}, [4, 2, 3], [5, 2, 4], "all"),
                ({"transBatchB": 1}, [2, 6, 3, 4], [4, 2, 6, 5], "batchB-4d")]]),
        "TransposeMatMul": dict(oracle=ort, samples=[
            sample("T[2,4,3]", "T[5,4]", attributes=dict(transA=1, transB=1, alpha=0.25))]),
        "FusedGemm": dict(oracle=ort, samples=[
            sample("T[4,3]", "T[5,4]", "T[5]", opset=11, name=kind, attributes=dict(
                activation=kind, transA=1, transB=1, alpha=0.5, beta=2.0, **params))
            for kind, params in gemm_activations]),
        "FusedConv": dict(oracle=ort, samples=[
            sample(*[conv_inputs[c] if c != "-" else None for c in inputs], opset=11,
                   name=kind or "none", attributes={
                       **conv, **({"activation": kind} if kind else {}),
                       **({"activation_params": params} if params else {})})
            for kind, params, inputs in [
                ("Relu", [], "XWB"), ("Tanh", [], "XW"), ("Sigmoid", [], "XWBZ"),
                ("LeakyRelu", [0.2], "XWB"), ("Clip", [-0.5, 0.7], "XW-Z"),
                ("HardSigmoid", [0.3, 0.4], "XW"), ("", [], "XWBZ")]]),
        "Trilu": dict(oracle=ort, samples=[
            sample("T[2,4,5]", *([Arg("int64[]", values=k)] if k is not None else []),
                   opset=opset, attributes={"upper": upper}, name=f"upper{upper}-k{k}")
            for opset, upper, k in [(11, 1, None), (11, 0, 2), (17, 1, -1), (17, 0, None)]]),
        "MatMulNBits": dict(oracle=ort, samples=[
            nbits(4, 64, None, False, 21), nbits(4, 48, "packed", True, 13),
            nbits(4, 32, "float", False, 21), nbits(8, 40, "packed", True, 21),
            nbits(2, 64, "packed", False, 17), nbits(4, 64, "float", True, 21, g_idx=True),
            nbits(4, 48, None, False, 17, g_idx=True),
            *[nbits(bits, k, zp, False, 21, accuracy=4) for bits, k, zp in [
                (4, 64, None), (4, 40, "packed"), (8, 48, "packed"), (2, 32, None),
                (4, 32, "float")]],
            sample("T[2,3,64]", Arg("uint8[5,2,8]", low=0, high=256, constant=True),
                   Arg("T[5,2]", low=0.01, high=0.11, constant=True), opset=21,
                   attributes=dict(K=64, N=5, bits=2, block_size=32, accuracy_level=4),
                   tolerance=(1e-4, 1e-4), name="2bit-block32-accuracy4",
                   min_onnxruntime=_NBITS[2])]),
        "GatherBlockQuantized": dict(oracle=ort, samples=[
            gather_block("int4", False, (0, 1), 21), gather_block("uint4", True, (0, 1), 21),
            gather_block("int4", True, (1, 0), 21), gather_block("uint8-4", True, (0, 1), 13),
            gather_block("uint8-8", False, (0, 1), 17),
            gather_block("int4", True, (0, 1), 21, out_of_range=True)]),
        "DequantizeLinear": dict(oracle=ort, samples=[
            qdq("DequantizeLinear", x_type, axis, opset, dtype)
            for x_type, dtype, axis, opset in [
                ("int8", "float", None, 13), ("uint8", "float", 1, 13),
                ("int32", "float", -2, 13), ("int8", "float16", 1, 19),
                ("int16", "float", None, 21), ("uint16", "float", None, 17),
                ("int16", "float", 1, 13)]] + [
            sample(Arg("int32[8]", low=-5000, high=5000), Arg("T[1]", values=[0.03],
                                                             constant=True),
                   Arg("int32[]", values=0, constant=True), outputs=["T"], dtypes=f32,
                   opset=17, name="int32-one-element-scale")]),
        "QuantizeLinear": dict(oracle=ort, samples=[
            qdq("QuantizeLinear", x_type, axis, opset, dtype)
            for x_type, dtype, axis, opset in [
                ("uint8", "float", None, 13), ("int8", "float", 1, 13),
                ("int8", "float16", 1, 19), ("uint16", "float", 1, 21),
                ("uint16", "float", None, 17), ("int16", "float", -2, 13)]] + [
            sample(Arg("T[12]", low=-3, high=300), Arg("T[]", values=0.7, constant=True),
                   outputs=["uint8"], dtypes=f32, opset=13, name="no-zero-point")]),
        "NhwcConv": dict(oracle="kernel", samples=_NHWC_CONV_SAMPLES),
        "NhwcFusedConv": dict(oracle=numpy("nhwc_fused_conv_reference"), samples=[
            sample("T[2,7,6,4]", Arg("T[6,4,3,3]", constant=True), "T[6]", *z,
                   attributes=dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1],
                                   activation="LeakyRelu", activation_params=[0.1]),
                   name="z" if z else "")
            for z in ([], ["T[2,7,6,6]"])]),
    }


@hookimpl
def register_decompositions(registry):
    oracles = _oracles()

    def add(op_type, builder, opsets, dtypes=_F32_F16, exact=True, note="", domain=DOMAIN):
        checked = dict(oracles[op_type])
        if op_type == "SimplifiedLayerNormalization":  # onnxruntime's kernel is ai.onnx's
            checked["oracle"] = ("onnxruntime" if domain == ""
                                 else _ORACLE + "simplified_layer_norm_reference")
        registry.add(domain, op_type, builder, opsets=opsets, dtypes=dtypes, exact=exact,
                     description=f"com-microsoft:{op_type}" + (f" ({note})" if note else ""),
                     **checked)

    add("FastGelu", build_fast_gelu, ELEMENTWISE_OPSETS)
    add("Gelu", build_gelu, ELEMENTWISE_OPSETS)
    add("BiasGelu", build_bias_gelu, ELEMENTWISE_OPSETS)
    add("QuickGelu", build_quick_gelu, ELEMENTWISE_OPSETS)
    add("GemmFastGelu", build_gemm_fast_gelu, ELEMENTWISE_OPSETS)
    add("BiasAdd", build_bias_add, ELEMENTWISE_OPSETS, dtypes=("float",))
    add("BiasSoftmax", build_bias_softmax, ELEMENTWISE_OPSETS, dtypes=("float",),
        note="is_inner_broadcast=0 only")
    add("SkipLayerNormalization", build_skip_layer_norm, SKIPLN_OPSETS)
    add("SkipSimplifiedLayerNormalization", build_skip_simplified_layer_norm, NORM_OPSETS)
    add("SimplifiedLayerNormalization", build_simplified_layer_norm, NORM_OPSETS,
        domain="", note="negative axis only")
    add("LayerNormalization", build_layer_norm_before_17, LAYER_NORM_BEFORE_17_OPSETS,
        dtypes=("float", "float16", "double"), domain="",
        note="onnxruntime's ai.onnx op below opset 17")
    add("SimplifiedLayerNormalization", build_simplified_layer_norm, NORM_OPSETS,
        note="negative axis only")
    add("FusedMatMul", build_fused_matmul, MATMUL_OPSETS)
    add("TransposeMatMul", build_fused_matmul, MATMUL_OPSETS, dtypes=("float",))
    add("FusedGemm", build_fused_gemm, GEMM_OPSETS, dtypes=("float",))
    add("FusedConv", build_fused_conv, CONV_OPSETS)
    add("NhwcConv", build_nhwc_conv, NHWCCONV_OPSETS, dtypes=("float",))
    add("NhwcFusedConv", build_nhwc_fused_conv, NHWCCONV_OPSETS, dtypes=("float",))
    add("Trilu", build_trilu, TRILU_OPSETS)
    add("MatMulNBits", build_matmul_nbits, MATMULNBITS_OPSETS,
        note="bits 2/4/8; accuracy_level 4 quantizes A per block as onnxruntime does")
    add("GatherBlockQuantized", build_gather_block_quantized, GATHER_BLOCK_OPSETS,
        note="int4/uint4 or packed uint8 data")
    add("DequantizeLinear", build_dequantize_linear, QDQ_OPSETS)
    add("QuantizeLinear", build_quantize_linear, QDQ_OPSETS)

    from rewriter_plugins.com_microsoft import attention, dynamic_quantization, qoperator

    attention.register_decompositions(registry)
    dynamic_quantization.register_decompositions(registry)
    qoperator.register_decompositions(registry)
