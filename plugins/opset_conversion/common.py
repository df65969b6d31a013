"""Value facts and node helpers shared by the opset conversion's modules: what is known
about values while one node is converted (``Env``), the one way to decline (``Decline``), and
small edits of a ``NodeProto``.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from onnx import AttributeProto, NodeProto, TensorProto, TypeProto, defs, helper, numpy_helper

#: domains this pass converts (other domains are left alone)
CONVERTIBLE = ("", "ai.onnx.ml")
#: constants larger than this are never read to become attributes
MAX_CONSTANT_ELEMENTS = 256


class Decline(Exception):
    """This node cannot be converted; the message says why."""


class Env:
    """Types, shapes and constant values known while converting one node (and the nodes it
    expands to), and fresh names for new values."""

    def __init__(self, types: dict[str, TypeProto], constants: dict[str, np.ndarray],
                 prefix: str = "_oc") -> None:
        self.types = types
        self.constants = constants
        self._prefix = prefix
        self._count = 0
        self.to: dict[str, int] = {}  # the opsets the conversion ends at
        self.emit_opset = 0  # the ai.onnx opset an adapter's nodes must be valid at

    def fresh(self, hint: str = "v") -> str:
        self._count += 1
        return f"{self._prefix}{self._count}_{hint}"

    def const(self, name: str) -> np.ndarray | None:
        if not name:
            return None
        return self.constants.get(name)

    def type(self, name: str) -> TypeProto | None:
        t = self.types.get(name)
        return t if t is not None and t.WhichOneof("value") else None

    def elem_type(self, name: str) -> int | None:
        t = self.type(name)
        if t is None or t.WhichOneof("value") != "tensor_type":
            return None
        return t.tensor_type.elem_type or None

    def shape(self, name: str) -> list[int | None] | None:
        """Dimensions (None where unknown), or None when the rank is unknown."""
        value = self.const(name)
        if value is not None:
            return list(value.shape)
        t = self.type(name)
        if t is None or t.WhichOneof("value") != "tensor_type":
            return None
        if not t.tensor_type.HasField("shape"):
            return None
        return [d.dim_value if d.HasField("dim_value") else None for d in t.tensor_type.shape.dim]

    def rank(self, name: str) -> int | None:
        shape = self.shape(name)
        return None if shape is None else len(shape)

    def constant_node(self, value, hint: str = "c", dtype=None) -> tuple[str, NodeProto]:
        array = np.asarray(value, dtype=dtype)
        name = self.fresh(hint)
        node = helper.make_node("Constant", [], [name], value=numpy_helper.from_array(array))
        self.constants[name] = array
        self.types[name] = helper.make_tensor_type_proto(
            helper.np_dtype_to_tensor_dtype(array.dtype), list(array.shape))
        return name, node


def attr(node: NodeProto, name: str, default=None):
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def set_attrs(node: NodeProto, drop=(), **values) -> NodeProto:
    """A copy of ``node`` without the attributes in ``drop``, with ``values`` set."""
    out = NodeProto()
    out.CopyFrom(node)
    names = set(drop) | set(values)
    kept = [a for a in out.attribute if a.name not in names]
    del out.attribute[:]
    out.attribute.extend(kept)
    for k, v in values.items():
        if v is not None:
            out.attribute.append(helper.make_attribute(k, v))
    return out


def with_inputs(node: NodeProto, inputs) -> NodeProto:
    out = NodeProto()
    out.CopyFrom(node)
    inputs = list(inputs)
    while inputs and not inputs[-1]:
        inputs.pop()
    del out.input[:]
    out.input.extend(inputs)
    return out


def with_outputs(node: NodeProto, outputs) -> NodeProto:
    out = NodeProto()
    out.CopyFrom(node)
    del out.output[:]
    out.output.extend(outputs)
    return out


def input_at(node: NodeProto, i: int) -> str:
    return node.input[i] if i < len(node.input) else ""


def has_graphs(node: NodeProto) -> bool:
    return any(a.type in (AttributeProto.GRAPH, AttributeProto.GRAPHS) for a in node.attribute)


@lru_cache(maxsize=4096)
def schema_at(domain: str, op_type: str, version: int):
    try:
        return defs.get_schema(op_type, version, domain)
    except defs.SchemaError:
        return None


def constant_value(node: NodeProto) -> np.ndarray | None:
    for a in node.attribute:
        if a.ref_attr_name:
            return None
        if a.name == "value":
            if a.t.data_location == TensorProto.EXTERNAL:
                return None
            return numpy_helper.to_array(a.t)
        if a.name == "value_float":
            return np.array(a.f, dtype=np.float32)
        if a.name == "value_floats":
            return np.array(list(a.floats), dtype=np.float32)
        if a.name == "value_int":
            return np.array(a.i, dtype=np.int64)
        if a.name == "value_ints":
            return np.array(list(a.ints), dtype=np.int64)
    return None


def first_line(e: BaseException) -> str:
    text = str(e).strip()
    lines = [line for line in text.splitlines() if line.strip()]
    line = lines[0] if lines else type(e).__name__
    return line.removeprefix("[ShapeInferenceError] ").strip()
