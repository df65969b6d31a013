"""What the removed ops' builders share: their opsets, a body in the input's float type, and
the attribute check (a removed op's schema is gone: an unknown attribute is declined)."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper

from rewriter.plugin import Declined, FunctionBuilder

DOMAIN = "onnx-removed"  # the domain of the bodies' FunctionProtos
# onnx deprecated the experimental ops in opset 10 (onnxruntime runs them at opsets 7-9 only,
# "not a registered function/op" from 10); below 7 Add/Mul broadcast by attribute, and
# onnxruntime loads no model older than 7
REMOVED_OPSETS = (7, 9)
FLOATS = {"tensor(float)": TensorProto.FLOAT, "tensor(double)": TensorProto.DOUBLE,
          "tensor(float16)": TensorProto.FLOAT16}
FLOAT_DTYPES = ("float", "double", "float16")
EXPAND = 8  # Expand-8; Tile-6 before it
CONSTANT_OF_SHAPE = 9


def attributes(ctx, known: set[str]) -> dict:
    """The node's attributes; unknown ones (or more than one output) decline."""
    attrs = {a.name: helper.get_attribute_value(a) for a in ctx.node.attribute}
    if set(attrs) - known:
        raise Declined(f"unknown attribute(s) {sorted(set(attrs) - known)}")
    if len(ctx.node.output) != 1:
        raise Declined("one output")
    return attrs


def float_body(ctx, index: int = 0) -> FunctionBuilder:
    """A builder at the model's opset whose literals take input ``index``'s float type."""
    types = list(ctx.input_types or [])
    elem = FLOATS.get(types[index]) if index < len(types) else None
    if elem is None:
        raise Declined("needs an input of a known float type (float, double, float16)")
    return FunctionBuilder(ctx.opset, elem_type=elem)


def declared_shape(ctx, name: str) -> list[int | None] | None:
    declared = (ctx.declared or {}).get(name)
    if declared is None or not declared.HasField("tensor_type") or not \
            declared.tensor_type.HasField("shape"):
        return None
    return [d.dim_value if d.HasField("dim_value") else None
            for d in declared.tensor_type.shape.dim]


def filled(b: FunctionBuilder, value: str, shape: str) -> str:
    """``value`` (a one-element constant) repeated to the int64 vector ``shape``, in the
    model's opset: ``ConstantOfShape`` needs a constant ``value`` tensor, so ``Expand`` from
    8, and before it a ``Tile`` of ``value`` reshaped to as many ones as ``shape`` has."""
    if b.opset >= EXPAND:
        return b.op("Expand", value, shape)
    ones = b.op("Add", b.op("Mul", shape, b.const(np.array(0, np.int64))),
                b.const(np.array(1, np.int64)))
    return b.op("Tile", b.op("Reshape", value, ones), shape)
