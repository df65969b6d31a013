"""Widened ops: a node of a narrow type a runtime lacks a kernel for (bfloat16, 16-bit
integers, a uint32 exponent) computed in a wider type and cast back."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from onnx import FunctionProto, TensorProto, helper

from rewriter.plugin import Arg, Declined, FunctionBuilder, OpSample

T = TensorProto

WIDENED_OPSET = 21  # the samples' opset
_WIDER = {"tensor(bfloat16)": T.FLOAT, "tensor(int16)": T.INT32, "tensor(uint16)": T.INT32,
          "tensor(uint32)": T.INT64}
# op -> (which inputs may be narrow and widened, the input whose type the outputs take: None
# for bool outputs, exact in bfloat16, the narrow types it is offered for)
_BF16 = ("tensor(bfloat16)",)
WIDENED_OPS: dict[str, tuple[tuple[int, ...] | None, int | None, bool, tuple[str, ...]]] = {
    **{op: (None, 0, True, _BF16) for op in (
        "Add", "Sub", "Mul", "Div", "Sqrt", "Neg", "Abs", "Expand", "ReduceMax",
        "ReduceMin", "Transpose", "Reshape", "Concat", "Gather")},
    **{op: (None, 0, True, (*_BF16, "tensor(int16)", "tensor(uint16)"))
       for op in ("Max", "Min")},
    **{op: (None, 0, False, _BF16) for op in (
        "MatMul", "Exp", "Log", "Tanh", "Sigmoid", "Erf", "ReduceSum", "ReduceMean")},
    **{op: (None, None, True, _BF16) for op in ("Equal", "Less")},  # Greater: comparisons
    "Where": ((1, 2), 1, True, _BF16),
    "OneHot": ((2,), 2, True, _BF16),
    "Pow": ((1,), 0, True, ("tensor(uint32)",)),
}


def build_widened(ctx) -> FunctionProto:
    """The node computed in a wider type: inputs of a narrow type it lacks a kernel for
    (bfloat16, 16-bit integers, a uint32 exponent) cast up, the narrow outputs cast back."""
    op = ctx.node.op_type
    widened, like, _exact, narrow = WIDENED_OPS[op]
    types = list(ctx.input_types or [])
    inputs = list(ctx.node.input)
    if any(not name for name in inputs):
        raise Declined(f"{op} with an optional input left out in the middle")
    positions = widened if widened is not None else range(len(inputs))
    targets = {i: types[i] for i in positions if i < len(types) and types[i] in narrow}
    if not targets:
        shown = ", ".join(t or "unknown" for t in types) or "unknown"
        raise Declined(f"{op}: no input of a type it widens ({', '.join(narrow)}); input "
                       f"types {shown}")
    if like is not None and like not in targets and op != "Pow":
        raise Declined(f"{op}: the output's type is not the widened input's")
    b = FunctionBuilder(ctx.opset)
    names = [f"x{i}" for i in range(len(inputs))]
    args = [b.cast(n, _WIDER[targets[i]]) if i in targets else n for i, n in enumerate(names)]
    attrs = {a.name: helper.get_attribute_value(a) for a in ctx.node.attribute}
    outputs = b.op(op, *args, outputs=len(ctx.node.output), **attrs)
    outputs = [outputs] if isinstance(outputs, str) else outputs
    back = getattr(T, targets[like][7:-1].upper()) if like in targets else None
    if back is not None and op != "Pow":
        outputs = [b.cast(o, back) for o in outputs]
    return b.function("onnx-standard", f"widened_{op.lower()}", names, outputs)


def widened_samples(op: str) -> list[OpSample]:
    """One sample per op (inputs of the registration's dtype ``T``)."""
    x = Arg("T[2,3,4]")
    custom = {
        "Expand": OpSample([Arg("T[3,1]"), Arg("int64[2]", values=np.array([3, 4]),
                                                constant=True)]),
        "ReduceMax": OpSample([x, Arg("int64[1]", values=np.array([1]), constant=True)],
                              opset=18),
        "ReduceMin": OpSample([x, Arg("int64[1]", values=np.array([-1]), constant=True)],
                              opset=18),
        "ReduceSum": OpSample([x, Arg("int64[1]", values=np.array([1]), constant=True)]),
        "ReduceMean": OpSample([x, Arg("int64[1]", values=np.array([1]), constant=True)],
                               opset=18),
        "Transpose": OpSample([x], attributes={"perm": [2, 0, 1]}),
        "Reshape": OpSample([x, Arg("int64[2]", values=np.array([6, 4]), constant=True)]),
        "Concat": OpSample([x, x], attributes={"axis": 1}),
        "Gather": OpSample([x, Arg("int64[2]", values=np.array([1, 0]), constant=True)],
                           attributes={"axis": 1}),
        "MatMul": OpSample([x, Arg("T[4,5]")]),
        "Sqrt": OpSample([Arg("T[2,3,4]", low=0.0, high=4.0)]),
        "Log": OpSample([Arg("T[2,3,4]", low=0.1, high=4.0)]),
        "Div": OpSample([x, Arg("T[2,3,4]", low=0.5, high=2.0)]),
        "Where": OpSample([Arg("bool[2,3,4]"), x, Arg("T[4]")]),
        "OneHot": OpSample([Arg("int64[2,3]", low=0, high=5),
                            Arg("int64[]", values=np.array(5), constant=True),
                            Arg("T[2]")], attributes={"axis": -1}),
        "Pow": OpSample([Arg("float[2,3]", low=0.5, high=2.0), Arg("T[2,3]", low=0, high=4)],
                        outputs=["float"]),
    }
    _w, like, _e, _n = WIDENED_OPS[op]
    if op in custom:
        sample = custom[op]
    elif op in ("Add", "Sub", "Mul", "Max", "Min"):
        sample = OpSample([x, Arg("T[4]")])
    else:
        sample = OpSample([x] if like is not None else [x, Arg("T[4]")],
                          outputs=["T"] if like is not None else ["bool"])
    # at an opset where every op takes bfloat16 (the registration starts at 1)
    return [sample if sample.opset is not None else replace(sample, opset=WIDENED_OPSET)]


def dtype_name(narrow: str) -> str:
    """The dtype name of a narrow ``tensor(...)`` type."""
    return {"tensor(bfloat16)": "bfloat16", "tensor(int16)": "int16",
            "tensor(uint16)": "uint16", "tensor(uint32)": "uint32"}[narrow]
