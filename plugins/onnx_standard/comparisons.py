"""``Greater`` and ``GreaterOrEqual`` as ``Less`` and ``LessOrEqual`` with their operands
swapped (part of the ``onnx-standard`` plugin, which registers them).

``a > b`` is ``b < a`` and ``a >= b`` is ``b <= a`` for every value, NaN included (every
comparison with a NaN is false). OpenVINO 2026.4's ``Greater`` and ``GreaterOrEqual`` are
true for a NaN on either side, its ``Less`` and ``LessOrEqual`` false (measured on
float16, float and double: the special-values input regime finds it). bfloat16 operands
are compared in float (exact), which onnxruntime 1.32 has no ``Greater`` kernel for.
Checked against onnxruntime's own kernels, NaN and infinities included (bfloat16: the
reference evaluator's)."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from rewriter.plugin import Arg, FunctionBuilder, OpSample

SWAPPED = {"Greater": "Less", "GreaterOrEqual": "LessOrEqual"}


def build_swapped_comparison(ctx):
    """``Less(b, a)`` for ``Greater(a, b)``, ``LessOrEqual(b, a)`` for ``GreaterOrEqual``."""
    b = FunctionBuilder(ctx.opset)
    a, other = "a", "b"
    if "tensor(bfloat16)" in (ctx.input_types or []):
        a, other = b.cast(a, TensorProto.FLOAT), b.cast(other, TensorProto.FLOAT)
    z = b.op(SWAPPED[ctx.node.op_type], other, a)
    return b.function("onnx_standard", ctx.node.op_type, ["a", "b"], [z])


def comparison_samples(op_type: str) -> list[OpSample]:
    """NaN, infinities, signed zeros and equal values on each side, broadcast too."""
    left = [np.nan, 1.0, np.nan, np.inf, -np.inf, 0.0, -0.0, 2.0, 3.0, np.inf, 1.0, -1.0]
    right = [1.0, np.nan, np.nan, np.inf, np.inf, -0.0, 0.0, 2.0, 1.0, 1e30, -np.inf, 5.0]
    return [
        OpSample([Arg("T[12]", values=left), Arg("T[12]", values=right)], ["bool"],
                 dtypes=["float", "double", "float16"], name="special-values"),
        OpSample([Arg("T[3, 4]"), Arg("T[4]")], ["bool"], dtypes=["float", "int64", "int32"],
                 name="broadcast"),
        OpSample([Arg("T[12]", values=left), Arg("T[12]", values=right)], ["bool"],
                 dtypes=["bfloat16"], oracle="reference", opset=13, name="special-values"),
    ]
