"""``Gemm`` as ``alpha * MatMul(A', B') + beta * C`` (a rank-3 ``A`` batch by batch)."""

from __future__ import annotations

import numpy as np
from onnx import FunctionProto, TensorProto, helper

from rewriter.plugin import Arg, Declined, FunctionBuilder, OpSample
from rewriter.plugin import present as _present

T = TensorProto


def build_gemm(ctx) -> FunctionProto:
    """``Gemm`` as ``alpha * MatMul(A', B') + beta * C`` (A', B' transposed as asked). The
    same numbers for the rank-2 inputs Gemm takes; an ``A`` of higher rank (onnxscript's
    fusions leave a rank-3 ``MultiHeadAttention`` output feeding a ``Gemm``, which OpenVINO
    runs as a batched product and onnxruntime refuses) is multiplied batch by batch."""
    node = ctx.node
    if len(node.output) != 1 or not (_present(node.input, 0) and _present(node.input, 1)):
        raise Declined("Gemm without both A and B")
    trans_a, trans_b = ctx.attribute("transA", 0), ctx.attribute("transB", 0)
    alpha, beta = ctx.attribute("alpha", 1.0), ctx.attribute("beta", 1.0)
    types = list(ctx.input_types or [])
    elem = getattr(T, types[0][7:-1].upper(), None) if types and types[0] else None
    if elem is None:
        raise Declined("Gemm: the element type of A is unknown")
    b = FunctionBuilder(ctx.opset, elem)
    a = b.op("Transpose", "A", perm=[1, 0]) if trans_a else "A"
    w = b.op("Transpose", "B", perm=[1, 0]) if trans_b else "B"
    y = b.op("MatMul", a, w)
    if alpha != 1.0:
        y = b.op("Mul", y, b.const(np.array(alpha, helper.tensor_dtype_to_np_dtype(elem))))
    names = ["A", "B"]
    if _present(node.input, 2):
        names.append("C")
    if _present(node.input, 2) and beta != 0.0:  # beta 0: C is not read (NaN * 0 stays out)
        c = "C" if beta == 1.0 else b.op(
            "Mul", "C", b.const(np.array(beta, helper.tensor_dtype_to_np_dtype(elem))))
        y = b.op("Add", y, c)
    return b.function("onnx-standard", "gemm", names, [y])


def gemm_samples() -> list[OpSample]:
    """Gemm's samples: plain, transposed with a bias, beta 0."""
    return [OpSample([Arg("T[3,4]"), Arg("T[4,5]")], opset=13, name="plain"),
            OpSample([Arg("T[4,3]"), Arg("T[5,4]"), Arg("T[5]")],
                     attributes={"transA": 1, "transB": 1, "alpha": 0.5, "beta": 2.0},
                     opset=13, name="transposed-bias"),
            OpSample([Arg("T[3,4]"), Arg("T[4,5]"), Arg("T[3,5]")],
                     attributes={"beta": 0.0}, opset=11, name="beta0")]
