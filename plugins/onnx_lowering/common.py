"""What every module of the ``onnx-lowering`` plugin shares: its function domain, the
``Body`` builder its bodies are written with, the opset they are written at (the model's, or
17 when the model imports no ai.onnx opset: bodies bring it in) and the node and input-type
helpers its builders check a node with."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from onnx import TensorProto

from rewriter.plugin import FunctionBuilder

DOMAIN = "onnx-lowering"
NO_IMPORT_OPSET = 17

_FLOATS = {"tensor(float)": TensorProto.FLOAT, "tensor(double)": TensorProto.DOUBLE,
           "tensor(float16)": TensorProto.FLOAT16, "tensor(bfloat16)": TensorProto.BFLOAT16}


class Body(FunctionBuilder):
    """The function builder of this plugin's bodies: int64 by default, with scalar and
    shape helpers."""

    default_dtype = np.int64

    def scalar(self, x: str) -> str:
        """``x`` (one element) as an int64 scalar."""
        return self.op("Reshape", self.cast(x, TensorProto.INT64), self.ints([]))

    def vector(self, x: str) -> str:
        """A scalar as a 1-element vector."""
        return self.unsqueeze(x, [0])

    def shape_at(self, shape: str, index: str | int) -> str:
        """``shape[index]`` as an int64 scalar (``index`` a constant or a scalar)."""
        if isinstance(index, int):
            index = self.const(np.array(index, np.int64))
        return self.op("Gather", shape, index, axis=0)


def body_opset(ctx) -> int:
    """The ai.onnx opset a body is written for (the model's, or 17 when it imports none)."""
    if "" not in (ctx.opsets or {}) and "ai.onnx" not in (ctx.opsets or {}):
        return NO_IMPORT_OPSET
    return ctx.opset


def input_elem(ctx, index: int = 0) -> int | None:
    """The element type of input ``index``, if known (any tensor type)."""
    types = list(ctx.input_types or [])
    if index < len(types) and types[index] and types[index].startswith("tensor("):
        return getattr(TensorProto, types[index][7:-1].upper(), None)
    return None


def float_elem(ctx, index: int = 0) -> int | None:
    """The element type of input ``index`` if it is a float tensor (float, double, float16,
    bfloat16), else None."""
    types = list(ctx.input_types or [])
    return _FLOATS.get(types[index]) if index < len(types) else None


def attributes_known(node, attributes: Sequence[str]) -> bool:
    """Whether every attribute of ``node`` is one of ``attributes``."""
    return all(a.name in attributes for a in node.attribute)


def formal_inputs(node, formal: Sequence[str]) -> list[str]:
    """The formal input names of a body, as many as ``node`` has inputs."""
    return list(formal[:len(node.input)])
