"""``Reduce*`` given its ``axes`` as an attribute at an opset where ``axes`` is an input (18;
``ReduceSum`` 13): the same op with ``axes`` a constant input.

Such a node is invalid ONNX. onnxruntime's ``MatMulNBitsQuantizer`` writes it: it raises an
opset-17 model to opset 21 (for int4) and leaves the ``ReduceMean`` of every RMSNorm as it
was. onnxruntime refuses the model ("Unrecognized attribute: axes for operator
ReduceMean"); OpenVINO ignores the attribute and reduces over every axis. The remedy keeps
what the node was written for: the attribute's axes, now an input (``rewriter.detect.
attributes`` flags the node on every target: ``attribute-as-input``).

Oracle: numpy reductions written from the operators' documentation.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
from onnx import FunctionProto, TensorProto, defs

from rewriter.plugin import Arg, Declined, FunctionBuilder, OpSample

# op -> the first ai.onnx opset whose schema takes axes as an input. ReduceMax and ReduceMin
# are not here: this plugin registers their infinite-results body (``reductions``) over
# those opsets, and a plugin registers one decomposition per op and opset
AXES_INPUT_SINCE = {"ReduceSum": 13, **dict.fromkeys((
    "ReduceMean", "ReduceProd", "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp",
    "ReduceSumSquare"), 18)}
_ELEMENTS = {"tensor(float)": TensorProto.FLOAT, "tensor(double)": TensorProto.DOUBLE,
             "tensor(float16)": TensorProto.FLOAT16, "tensor(int32)": TensorProto.INT32,
             "tensor(int64)": TensorProto.INT64}


def build_axes_input(ctx) -> FunctionProto:
    """The node with its ``axes`` attribute moved to the ``axes`` input (a constant)."""
    node = ctx.node
    schema = defs.get_schema(node.op_type, ctx.opset, "")
    if "axes" in schema.attributes or ctx.attribute("axes") is None:
        raise Declined(f"{node.op_type} at opset {ctx.opset} has no axes attribute that "
                       "should be an input")
    if len(node.input) > 1 and node.input[1]:
        raise Declined("axes given both as an attribute and as an input")
    types = list(ctx.input_types or [])
    elem = _ELEMENTS.get(types[0]) if types else None
    if elem is None:
        raise Declined(f"the data's element type ({types[0] if types else None}) is not one "
                       "the body is written for")
    b = FunctionBuilder(ctx.opset, elem)
    axes = b.const(np.asarray(list(ctx.attribute("axes")), np.int64))
    kept = {a.name: ctx.attribute(a.name) for a in node.attribute if a.name != "axes"}
    y = b.op(node.op_type, "data", axes, **kept)
    return b.function("onnx-standard", f"{node.op_type.lower()}_axes_input", ["data"], [y])


def _log_sum_exp(x, axis, keep):
    """``log(sum(exp(x)))`` without overflow: ``m + log(sum(exp(x - m)))``, m the maximum."""
    m = x.max(axis, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    value = np.log(np.exp(x - m).sum(axis, keepdims=True)) + m
    return value if keep else value.squeeze(axis)


def numpy_reduction(op_type: str):
    """``f(data, axes=..., keepdims=1)``: the reduction by the operator's documentation."""

    def reduce(data, axes=(), keepdims=1, noop_with_empty_axes=0):
        axis = tuple(int(a) for a in axes) or None
        keep = bool(keepdims)
        x = data.astype(np.float64)
        value = {
            "ReduceSum": lambda: x.sum(axis, keepdims=keep),
            "ReduceMean": lambda: x.mean(axis, keepdims=keep),
            "ReduceProd": lambda: x.prod(axis, keepdims=keep),
            "ReduceL1": lambda: np.abs(x).sum(axis, keepdims=keep),
            "ReduceL2": lambda: np.sqrt((x * x).sum(axis, keepdims=keep)),
            "ReduceLogSum": lambda: np.log(x.sum(axis, keepdims=keep)),
            "ReduceLogSumExp": lambda: _log_sum_exp(x, axis, keep),
            "ReduceSumSquare": lambda: (x * x).sum(axis, keepdims=keep),
        }[op_type]()
        return value.astype(data.dtype)

    return reduce


# the numpy oracles, one per op (``module:NUMPY_REDUCTIONS.ReduceMean`` for the registry)
NUMPY_REDUCTIONS = SimpleNamespace(**{op: numpy_reduction(op) for op in AXES_INPUT_SINCE})


def numpy_reduction_reference(op_type: str) -> str:
    """The registry's ``module:attr`` reference to ``op_type``'s numpy oracle."""
    return f"{__name__}:NUMPY_REDUCTIONS.{op_type}"


def axes_input_samples(op_type: str) -> list[OpSample]:
    """The attribute form at the opset where axes is an input: the last axis kept (as
    RMSNorm's ReduceMean), and two axes dropped."""
    opset = max(AXES_INPUT_SINCE[op_type], 18)
    low = 0.1 if op_type in ("ReduceLogSum", "ReduceProd") else -2.0
    return [OpSample([Arg("T[2,3,8]", low=low, high=2.0)], attributes={"axes": [-1],
                                                                        "keepdims": 1},
                     opset=opset, name="last-kept"),
            OpSample([Arg("T[2,3,4]", low=low, high=2.0)], attributes={"axes": [0, 2],
                                                                        "keepdims": 0},
                     opset=opset, name="two-dropped")]
