"""Activations and elementwise fusions of com.microsoft, in standard ONNX:

* ``FastGelu(X[, bias])``: ``x = X + bias``, ``y = x * (0.5 + 0.5 * tanh(x * (c + b*x*x)))``,
  ``c = sqrt(2/pi)``, ``b = 0.044715 * c``.
* ``Gelu(X)``: ``0.5 * x * (1 + erf(x / sqrt(2)))``; ``BiasGelu(A, B)``: ``Gelu(A + B)``.
* ``QuickGelu(X)`` (``alpha`` = 1.702): ``x * sigmoid(alpha * x)``.
* ``GemmFastGelu(X, W[, bias])``: ``FastGelu(MatMul(X, W) + bias)``.
* ``BiasAdd(X, bias, skip)``: ``X + bias + skip``.
* ``BiasSoftmax(data, bias)`` (``axis`` = 1, ``is_inner_broadcast``): Softmax-1 semantics
  (coerced to 2-D at ``axis``) of ``data + bias``; bias broadcast numpy-style (only
  ``is_inner_broadcast = 0``, where that is the op's rule).
"""

from __future__ import annotations

import math

import numpy as np
from onnx import FunctionProto

from rewriter.plugin import Arg, Declined, declining, kernel
from rewriter.plugin import present as _present

from .common import (
    DOMAIN,
    Body,
    add,
    body_opset,
    formal_inputs,
    input_elem_type,
    sample,
    single_output,
    unknown_attributes,
)

# The oldest ai.onnx opset each family of bodies is written for (the builders emit the
# opset-specific forms of ReduceMean, Unsqueeze, Clip, ... for the model's opset).
ELEMENTWISE_OPSETS = (9, None)  # literals need a known element type below opset 15

QUICKGELU_DEFAULT_ALPHA = 1.702
FAST_GELU_C = 0.7978845608028654  # sqrt(2 / pi)
FAST_GELU_B = 0.035677408136300125  # 0.044715 * sqrt(2 / pi)


def _fast_gelu(b: Body, x: str) -> str:
    inner = b.op("Mul", x, b.op("Add", b.literal(FAST_GELU_C, x),
                                b.op("Mul", b.literal(FAST_GELU_B, x), b.op("Mul", x, x))))
    half = b.literal(0.5, x)
    return b.op("Mul", x, b.op("Add", half, b.op("Mul", half, b.op("Tanh", inner))))


def _gelu(b: Body, x: str) -> str:
    erf = b.op("Erf", b.op("Mul", x, b.literal(1 / math.sqrt(2), x)))
    return b.op("Mul", b.op("Mul", b.literal(0.5, x), x), b.op("Add", b.literal(1.0, x), erf))


# -- elementwise builders -----------------------------------------------------------------


@declining
def build_fast_gelu(ctx) -> FunctionProto | None:
    node = ctx.node
    if not _present(node.input, 0) or not single_output(node) or node.attribute:
        raise Declined("takes X (and an optional bias), no attributes, one output")
    b = Body(body_opset(ctx), input_elem_type(ctx))
    x = b.op("Add", "X", "bias") if _present(node.input, 1) else "X"
    return b.function(DOMAIN, "fast_gelu", formal_inputs(node, ["X", "bias"]), [_fast_gelu(b, x)])


@declining
def build_gelu(ctx) -> FunctionProto | None:
    node = ctx.node
    if not _present(node.input, 0) or not single_output(node) or node.attribute:
        raise Declined("takes X, no attributes, one output")
    b = Body(body_opset(ctx), input_elem_type(ctx))
    return b.function(DOMAIN, "gelu", ["X"], [_gelu(b, "X")])


@declining
def build_bias_gelu(ctx) -> FunctionProto | None:
    node = ctx.node
    if not (_present(node.input, 0) and _present(node.input, 1)) or not single_output(node):
        raise Declined("takes X and bias, one output")
    b = Body(body_opset(ctx), input_elem_type(ctx))
    return b.function(DOMAIN, "bias_gelu", ["A", "B"], [_gelu(b, b.op("Add", "A", "B"))])


@declining
def build_quick_gelu(ctx) -> FunctionProto | None:
    node = ctx.node
    if (not _present(node.input, 0) or not single_output(node)
            or unknown_attributes(node, ["alpha"])):
        raise Declined("takes X, only alpha, one output")
    b = Body(body_opset(ctx), input_elem_type(ctx))
    alpha = b.literal(ctx.attribute("alpha", QUICKGELU_DEFAULT_ALPHA), "X")
    y = b.op("Mul", "X", b.op("Sigmoid", b.op("Mul", alpha, "X")))
    return b.function(DOMAIN, "quick_gelu", ["X"], [y])


@declining
def build_gemm_fast_gelu(ctx) -> FunctionProto | None:
    node = ctx.node
    if (not (_present(node.input, 0) and _present(node.input, 1)) or not single_output(node)
            or node.attribute):
        raise Declined("needs X and W given (bias optional), no attributes, one output")
    b = Body(body_opset(ctx), input_elem_type(ctx))
    x = b.op("MatMul", "X", "W")
    if _present(node.input, 2):
        x = b.op("Add", x, "bias")
    return b.function(DOMAIN, "gemm_fast_gelu", formal_inputs(node, ["X", "W", "bias"]),
                      [_fast_gelu(b, x)])


@declining
def build_bias_add(ctx) -> FunctionProto | None:
    node = ctx.node
    if not all(_present(node.input, i) for i in range(3)) or not single_output(node):
        raise Declined("needs input, bias and skip, one output")
    b = Body(body_opset(ctx))
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
    if (not (_present(node.input, 0) and _present(node.input, 1)) or not single_output(node)
            or unknown_attributes(node, ["axis", "is_inner_broadcast"])):
        raise Declined("takes data and bias, only axis and is_inner_broadcast, one output")
    if ctx.attribute("is_inner_broadcast") != 0:
        raise Declined("is_inner_broadcast=1 is not decomposed")
    b = Body(body_opset(ctx))
    y = _softmax_flattened(b, b.op("Add", "data", "bias"), ctx.attribute("axis", 1))
    return b.function(DOMAIN, "bias_softmax", ["data", "bias"], [y])


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


def register_kernels(registry) -> None:
    """The numpy kernel of ``GemmFastGelu`` (the oracle of a rewrite)."""
    registry.add(DOMAIN, "GemmFastGelu", f"{__name__}:gemm_fast_gelu_kernel",
                 description="com-microsoft:GemmFastGelu (numpy oracle)")


_ORACLE = f"{__name__}:"


def _oracles() -> dict[str, dict]:
    """Per op: its oracle and the samples it is checked on (``tests/test_oracles.py``)."""
    ort, f32, f16 = "onnxruntime", ["float"], ["float16"]
    x, bias = "T[2,3,8]", "T[8]"

    def numpy(name):
        return _ORACLE + name

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
    }


def register(registry) -> None:
    """Registers this module's decompositions (called by the package's hook)."""
    checked = _oracles()
    add(registry, "FastGelu", build_fast_gelu, ELEMENTWISE_OPSETS, checked["FastGelu"])
    add(registry, "Gelu", build_gelu, ELEMENTWISE_OPSETS, checked["Gelu"])
    add(registry, "BiasGelu", build_bias_gelu, ELEMENTWISE_OPSETS, checked["BiasGelu"])
    add(registry, "QuickGelu", build_quick_gelu, ELEMENTWISE_OPSETS, checked["QuickGelu"])
    add(registry, "GemmFastGelu", build_gemm_fast_gelu, ELEMENTWISE_OPSETS,
        checked["GemmFastGelu"])
    add(registry, "BiasAdd", build_bias_add, ELEMENTWISE_OPSETS, checked["BiasAdd"],
        dtypes=("float",))
    add(registry, "BiasSoftmax", build_bias_softmax, ELEMENTWISE_OPSETS, checked["BiasSoftmax"],
        dtypes=("float",), note="is_inner_broadcast=0 only")
