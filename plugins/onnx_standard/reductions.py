"""``ReduceMax`` and ``ReduceMin`` with their infinite results made explicit (part of the
``onnx-standard`` plugin, which registers them).

The spec: the largest (smallest) element of each slice, so a slice holding ``+inf``
(``-inf``) reduces to it, and one of nothing but ``-inf`` (``+inf``) too. OpenVINO 2026.4's
CPU plugin starts its maximum from float's lowest finite value: a float slice of only
``-inf`` reduces to ``-3.4028235e+38``, so an attention row masked out entirely (the
``Equal(ReduceMax(scores), -inf)`` test of ``Attention``-23's function body) is not found,
and its double reductions give ``+/-3.4028235e+38`` for any infinity (measured). The body
keeps the reduction for finite results and selects the infinities where the spec has them,
from two reductions of 0/1 flags (``IsInf``) with the node's own axes and attributes::

    ReduceMax: Where(any(x == +inf), +inf, Where(all(x == -inf), -inf, ReduceMax(x)))
    ReduceMin: Where(any(x == -inf), -inf, Where(all(x == +inf), +inf, ReduceMin(x)))

``any`` and ``all`` are ``ReduceMax`` of the flags (or of their complement) in float,
whose values are 0 and 1 only. An empty slice (no element: ``all`` holds) gives the spec's
``-inf`` (``+inf``) for float types. Integer and bool reductions have no infinities and are
declined. float16 and bfloat16 below opset 20 (whose ``IsInf`` takes float and double only)
are flagged in float (exact). Checked against onnxruntime's own kernels."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper

from rewriter.plugin import Arg, Declined, FunctionBuilder, OpSample

T = TensorProto
INFINITE_REDUCTIONS = ("ReduceMax", "ReduceMin")
REDUCTION_OPSETS = (10, None)  # IsInf
_FLOATS = {"tensor(float)": T.FLOAT, "tensor(double)": T.DOUBLE,
           "tensor(float16)": T.FLOAT16, "tensor(bfloat16)": T.BFLOAT16}
_ISINF_NARROW = 20  # IsInf takes float16 and bfloat16 from here


def build_infinite_reduction(ctx):
    """The body above for ``ReduceMax``/``ReduceMin`` of a float type."""
    types = list(ctx.input_types or [])
    elem = _FLOATS.get(types[0]) if types else None
    if elem is None:
        raise Declined("only float reductions have infinite results (this one is "
                       f"{types[0] if types else 'of unknown type'})")
    b = FunctionBuilder(ctx.opset)
    op = ctx.node.op_type
    attrs = {a.name: helper.get_attribute_value(a) for a in ctx.node.attribute}
    with_axes = len(ctx.node.input) > 1 and bool(ctx.node.input[1])
    inputs = ["data", "axes"] if with_axes else ["data"]

    def reduce(values: str, op_type: str = op) -> str:
        return b.op(op_type, values, *inputs[1:], **attrs)

    flagged = "data"
    if elem in (T.FLOAT16, T.BFLOAT16) and ctx.opset < _ISINF_NARROW:
        flagged = b.cast("data", T.FLOAT)

    def any_of(flags: str) -> str:
        return reduce(b.cast(flags, T.FLOAT), "ReduceMax")

    # ReduceMax: +inf anywhere wins, and a slice of -inf alone is -inf (ReduceMin mirrored)
    wins, alone = (dict(detect_negative=0), dict(detect_positive=0)) if op == "ReduceMax" \
        else (dict(detect_positive=0), dict(detect_negative=0))
    sign = 1.0 if op == "ReduceMax" else -1.0
    winner = any_of(b.op("IsInf", flagged, **wins))
    others = any_of(b.op("Not", b.op("IsInf", flagged, **alone)))
    half = b.const(np.array(0.5, np.float32))
    y = b.op("Where", b.op("Less", others, half), b.const(np.array(-sign * np.inf), elem),
             reduce("data"))
    y = b.op("Where", b.op("Less", half, winner), b.const(np.array(sign * np.inf), elem), y)
    return b.function("onnx_standard", op, inputs, [y])


def infinite_reduction_samples(op_type: str) -> list[OpSample]:
    """Rows of one infinity only, of both, an infinity among finite values, finite values
    and lowest finite values, reduced along each axis, all axes, kept or not, at the
    opsets with ``axes`` as an attribute and as an input."""
    inf = np.inf
    rows = [[-inf, -inf, -inf, -inf], [inf, inf, inf, inf], [-inf, inf, -inf, 1.0],
            [2.0, -inf, 3.0, -1.0], [1.0, inf, -5.0, 0.0], [-3e38, -3e38, -inf, -inf],
            [3e38, inf, 3e38, 1.0], [0.5, -0.25, 4.0, -8.0]]
    data = np.array(rows, np.float64)
    samples = []
    for opset, axes_input in ((13, False), (18, True)):
        for axes, keepdims in (([1], 1), ([1], 0), ([0], 1), (None, 0)):
            args = [Arg("T[8, 4]", values=data)]
            attrs: dict = {"keepdims": keepdims}
            if axes is not None and axes_input:
                args.append(Arg("int64[1]", values=np.array(axes, np.int64)))
            elif axes is not None:
                attrs["axes"] = axes
            samples.append(OpSample(args, ["T"], attrs, opset=opset, tolerance=(0.0, 0.0),
                                    dtypes=["float", "double"],
                                    name=f"infinities-axes{axes}-keep{keepdims}-opset{opset}"))
    half = np.where(np.isfinite(data), np.clip(data, -6e4, 6e4), data)
    samples.append(OpSample([Arg("T[8, 4]", values=half)], ["T"],
                            {"axes": [1], "keepdims": 1}, opset=13, tolerance=(0.0, 0.0),
                            dtypes=["float16"], name="infinities-float16-opset13"))
    return samples
