"""Matrix products of com.microsoft, in standard ONNX:

* ``FusedMatMul`` / ``TransposeMatMul(A, B)`` (``alpha``, ``transA``, ``transB``,
  ``transBatchA``, ``transBatchB``): ``alpha * MatMul(A', B')``; ``transBatch`` moves the
  first axis behind the other batch axes (``A'[b1.., b0, i, j] = A[b0, b1.., i, j]``),
  ``trans`` swaps the last two (both: ``A'[b1.., j, b0] ... = A[b0, b1.., j]``).
* ``FusedGemm(A, B[, C])``: ``act(Gemm(A, B, C))``, activation ``activation`` with
  parameters ``activation_alpha/beta/gamma`` (Relu, Tanh, Sigmoid, LeakyRelu, Elu, Selu,
  HardSigmoid, ThresholdedRelu, Softplus, Softsign, ScaledTanh, ParametricSoftplus).
"""

from __future__ import annotations

from onnx import FunctionProto

from rewriter.plugin import Arg, Declined, declining
from rewriter.plugin import present as _present

from .common import (
    DOMAIN,
    Body,
    activation,
    add,
    body_opset,
    formal_inputs,
    input_elem_type,
    sample,
    single_output,
    unknown_attributes,
)

MATMUL_OPSETS = (12, None)  # Einsum
GEMM_OPSETS = (11, None)


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
    if (not (_present(node.input, 0) and _present(node.input, 1)) or not single_output(node)
            or unknown_attributes(node, known)):
        raise Declined("needs A and B, one output, known attributes")
    b = Body(body_opset(ctx), input_elem_type(ctx))
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
    if (not (_present(node.input, 0) and _present(node.input, 1)) or not single_output(node)
            or unknown_attributes(node, gemm_attributes + activation_attributes)):
        raise Declined("needs A and B, one output, known attributes")
    b = Body(body_opset(ctx), input_elem_type(ctx))
    attrs = {a: ctx.attribute(a) for a in gemm_attributes}
    y = b.op("Gemm", *formal_inputs(node, ["A", "B", "C"]), **attrs)
    kind = ctx.attribute("activation", b"")
    kind = kind.decode() if isinstance(kind, bytes) else kind
    if not kind or kind == "Clip":
        raise Declined("onnxruntime rejects a FusedGemm without an activation, or with Clip")
    y = activation(b, y, kind, ctx.attribute("activation_alpha"),
                    ctx.attribute("activation_beta"), ctx.attribute("activation_gamma"))
    return b.function(DOMAIN, "fused_gemm", formal_inputs(node, ["A", "B", "C"]), [y])


def _oracles() -> dict[str, dict]:
    """Per op: onnxruntime's own kernel and the samples (``tests/test_oracles.py``)."""
    ort = "onnxruntime"
    gemm_activations = [
        ("Relu", {}), ("Tanh", {}), ("Sigmoid", {}), ("Softplus", {}), ("Softsign", {}),
        ("LeakyRelu", {"activation_alpha": 0.2}), ("Elu", {"activation_alpha": 0.7}),
        ("ThresholdedRelu", {"activation_alpha": 0.3}),
        ("HardSigmoid", {"activation_alpha": 0.3, "activation_beta": 0.4}),
        ("Selu", {"activation_alpha": 1.5, "activation_gamma": 1.1}),
        ("ScaledTanh", {"activation_alpha": 1.5, "activation_beta": 0.5}),
        ("ParametricSoftplus", {"activation_alpha": 1.5, "activation_beta": 0.5})]
    return {
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
    }


def register(registry) -> None:
    """Registers this module's decompositions (called by the package's hook)."""
    checked = _oracles()
    add(registry, "FusedMatMul", build_fused_matmul, MATMUL_OPSETS, checked["FusedMatMul"])
    add(registry, "TransposeMatMul", build_fused_matmul, MATMUL_OPSETS,
        checked["TransposeMatMul"], dtypes=("float",))
    add(registry, "FusedGemm", build_fused_gemm, GEMM_OPSETS, checked["FusedGemm"],
        dtypes=("float",))
