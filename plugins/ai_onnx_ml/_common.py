"""What the ai.onnx.ml modules share: the body builder, the opset a body is written at, the
node's inputs and attributes as a builder reads them, and the score transforms of
onnxruntime's ML kernels (``ml_common.h``: ``ComputeLogistic``, ``ComputeSoftmax``,
``ComputeSoftmaxZero``, ``ComputeProbit``), computed in float32 as the kernels compute them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from rewriter.plugin import Declined, FunctionBuilder

ML = "ai.onnx.ml"
DOMAIN = "ai-onnx-ml"  # the domain of the bodies (functions) this plugin writes
PLUGIN_OPSETS = (1, None)  # every ai.onnx opset of the model (none imported included)
NO_IMPORT_OPSET = 17  # a model that imports no ai.onnx opset gets bodies written at 17
MIN_OPSET = 11  # GatherElements, Range, Where, LessOrEqual's first forms

FLOAT, DOUBLE, INT64 = TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.INT64
STRING, INT32, BOOL = TensorProto.STRING, TensorProto.INT32, TensorProto.BOOL
NUMERIC = {FLOAT, DOUBLE, INT64, INT32}
POST_TRANSFORMS = ("NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO", "PROBIT")


class Body(FunctionBuilder):
    """The builder of every ai.onnx.ml body: int64 constants unless told otherwise."""

    default_dtype = np.int64

    def floats(self, values, elem: int, hint: str = "const") -> str:
        """A constant of ``values`` in element type ``elem``."""
        return self.const(np.asarray(values), elem, hint=hint)

    def scalar_like(self, value: float, elem: int) -> str:
        return self.const(np.array(value), elem, hint="k")

    def less_or_equal(self, a: str, b: str) -> str:
        """``a <= b`` (false for NaN): ``LessOrEqual`` from opset 12, else ``Less or Equal``."""
        if self.opset >= 12:
            return self.op("LessOrEqual", a, b)
        return self.op("Or", self.op("Less", a, b), self.op("Equal", a, b))

    def rows(self, x: str, rank: int | None, width: int | None = None) -> str:
        """``x`` as rows: a 1-D input is one row (``[1, n]``), as the ML kernels read it.
        ``rank`` None (unknown, 1 or 2): ``Reshape`` to ``[-1, width]``, which is that for
        either rank."""
        if rank is None:
            if width is None:
                raise Declined("X's rank and its count of features are not known")
            return self.reshape(x, [-1, width])
        return self.unsqueeze(x, [0]) if rank == 1 else x


def body_opset(ctx) -> int:
    """The ai.onnx opset a body is written at: the model's (at least :data:`MIN_OPSET`), or
    :data:`NO_IMPORT_OPSET` when it imports none."""
    opsets = ctx.opsets or {}
    if "" not in opsets and "ai.onnx" not in opsets:
        return NO_IMPORT_OPSET
    if ctx.opset < MIN_OPSET:
        raise Declined(f"the body needs ai.onnx opset {MIN_OPSET} or newer; the model imports "
                       f"{ctx.opset} (the rewrite raises it when every finding left needs only "
                       "that, and every target takes it)",
                       needs_opset=MIN_OPSET)
    return ctx.opset


def ml_opset(ctx) -> int:
    """The ai.onnx.ml opset the model imports (1 when unknown)."""
    opsets = ctx.opsets or {}
    return int(opsets.get(ML, 1))


def input_elem(ctx, index: int = 0) -> int | None:
    """The element type of input ``index``, if known."""
    types = list(ctx.input_types or [])
    if index < len(types) and types[index] and types[index].startswith("tensor("):
        return getattr(TensorProto, types[index][7:-1].upper(), None)
    return None


def declared_elem(ctx, name: str) -> int | None:
    """The element type the model declares for value ``name`` (a graph output, value_info),
    if any."""
    declared = (ctx.declared or {}).get(name) if name else None
    if declared is None or not declared.HasField("tensor_type"):
        return None
    return declared.tensor_type.elem_type or None


def input_rank(ctx, index: int = 0) -> int | None:
    node = ctx.node
    return ctx.rank(node.input[index]) if len(node.input) > index else None


def features_rank(ctx, op: str) -> int | None:
    """The rank of ``X`` for the ops that read rows of features: 1 or 2, None when not
    known (onnx infers no shape for the outputs of most ML ops: a body then takes either,
    as the kernels do), else declined."""
    rank = input_rank(ctx, 0)
    if rank not in (1, 2, None):
        raise Declined(f"{op} reads X of rank 1 or 2; its rank here is {rank}")
    return rank


def only_attributes(node, known: Sequence[str]) -> None:
    unknown = sorted(a.name for a in node.attribute if a.name not in known)
    if unknown:
        raise Declined(f"attributes this body does not implement: {', '.join(unknown)}")


def text(value: Any, default: str = "") -> str:
    if value is None:
        return default
    return value.decode() if isinstance(value, bytes) else str(value)


def texts(values: Any) -> list[str]:
    return [text(v) for v in (values or [])]


def attribute_array(ctx, name: str, dtype: Any = None) -> np.ndarray | None:
    """A list or tensor attribute as a numpy array (None when absent)."""
    value = ctx.attribute(name, None)
    if value is None:
        return None
    if isinstance(value, TensorProto):
        array = numpy_helper.to_array(value)
    else:
        array = np.asarray(list(value))
    return array.astype(dtype) if dtype is not None and array.dtype != object else array


def one_output(node, op: str) -> None:
    if len(node.output) != 1 or not node.output[0]:
        raise Declined(f"{op} has one output")


def string_tensor(values: Sequence[str]) -> np.ndarray:
    return np.array(list(values), dtype=object)


def make_string_const(b: Body, values: Sequence[str], hint: str = "labels") -> str:
    name = b.fresh(hint)
    tensor = helper.make_tensor(name, STRING, [len(values)], [v.encode() for v in values])
    return b.op("Constant", outputs=[name], value=tensor)


# -- score transforms, as onnxruntime's ml_common.h computes them (in float32) --------------

_F32 = np.float32


def logistic(b: Body, x: str) -> str:
    """``ComputeLogistic``: ``v = 1 / (1 + exp(-|x|))``, ``1 - v`` for a negative ``x``."""
    v = b.op("Sigmoid", b.op("Abs", x))
    negative = b.op("Less", x, b.scalar_like(0.0, FLOAT))
    return b.op("Where", negative, b.op("Sub", b.scalar_like(1.0, FLOAT), v), v)


def softmax(b: Body, x: str) -> str:
    """``ComputeSoftmax`` over the last axis of a 2-D ``x``: ``exp(x - max) / sum``."""
    return b.op("Softmax", x, axis=1)


def softmax_zero(b: Body, x: str) -> str:
    """``ComputeSoftmaxZero``: values within 1e-7 of 0 are kept as ``x * exp(-max)`` and left
    out of the sum (a class never scored stays 0; a NaN stays NaN and is left out of the max
    and the sum)."""
    lowest = b.scalar_like(-np.finfo(_F32).max, FLOAT)
    # the kernel's running max skips NaN (``v > v_max`` is false for it)
    counted = b.op("Where", b.op("IsNaN", x), lowest, x)
    vmax = b.op("Max", b.reduce_max(counted, [1], keepdims=1), lowest)
    small = b.scalar_like(1e-7, FLOAT)
    nonzero = b.op("Or", b.op("Greater", x, small), b.op("Less", x, b.op("Neg", small)))
    exp = b.op("Exp", b.op("Sub", x, vmax))
    kept = b.op("Mul", x, b.op("Exp", b.op("Neg", vmax)))
    zero = b.scalar_like(0.0, FLOAT)
    total = b.reduce_sum(b.op("Where", nonzero, exp, zero), [1], keepdims=1)
    return b.op("Div", b.op("Where", nonzero, exp, kept), total)


def probit(b: Body, x: str) -> str:
    """``ComputeProbit``: ``sqrt(2) * ErfInv(2 x - 1)`` with the kernel's approximation of
    the inverse error function (Winitzki, a = 0.147)."""
    y = b.op("Sub", b.op("Mul", x, b.scalar_like(2.0, FLOAT)), b.scalar_like(1.0, FLOAT))
    sign = b.op("Where", b.op("Less", y, b.scalar_like(0.0, FLOAT)),
                b.scalar_like(-1.0, FLOAT), b.scalar_like(1.0, FLOAT))
    one = b.scalar_like(1.0, FLOAT)
    log = b.op("Log", b.op("Mul", b.op("Sub", one, y), b.op("Add", one, y)))
    first = _F32(2) / (_F32(np.pi) * _F32(0.147))
    v = b.op("Add", b.scalar_like(float(first), FLOAT), b.op("Mul", b.scalar_like(0.5, FLOAT),
                                                             log))
    v2 = b.op("Mul", b.scalar_like(float(_F32(1) / _F32(0.147)), FLOAT), log)
    v3 = b.op("Sub", b.op("Sqrt", b.op("Sub", b.op("Mul", v, v), v2)), v)
    root = b.op("Mul", sign, b.op("Sqrt", v3))
    return b.op("Mul", root, b.scalar_like(float(_F32(np.sqrt(2))), FLOAT))


def post_transform(b: Body, scores: str, transform: str) -> str:
    """``scores`` (float32, ``[N, C]`` with ``C >= 2``) through one of
    :data:`POST_TRANSFORMS`, as ``write_scores`` applies them."""
    if transform == "NONE":
        return scores
    if transform == "LOGISTIC":
        return logistic(b, scores)
    if transform == "SOFTMAX":
        return softmax(b, scores)
    if transform == "SOFTMAX_ZERO":
        return softmax_zero(b, scores)
    if transform == "PROBIT":
        return probit(b, scores)
    raise Declined(f"unknown post_transform {transform!r}")
