"""Value types, propagated through a graph from declared types and operator schemas.

Types are ONNX type strings (``tensor(float)``, ``seq(tensor(int64))``), the same spelling
schemas and onnxruntime's kernel registry use. This is a single forward pass over the
protobuf; a value whose type cannot be derived is simply absent (callers treat it as
unknown, never as a mismatch).
"""

from __future__ import annotations

from collections.abc import Mapping

from onnx import AttributeProto, GraphProto, NodeProto, TensorProto, TypeProto

from rewriter.schemas import OpSchema, SchemaIndex


def dtype_name(elem_type: int) -> str | None:
    """``TensorProto.FLOAT`` -> ``"float"``."""
    if not elem_type:
        return None
    try:
        return TensorProto.DataType.Name(elem_type).lower()
    except ValueError:
        return None


def tensor_type(elem_type: int) -> str | None:
    name = dtype_name(elem_type)
    return f"tensor({name})" if name else None


def type_string(tp: TypeProto) -> str | None:
    """A TypeProto as a type string, or None when it is not fully specified."""
    kind = tp.WhichOneof("value")
    if kind == "tensor_type":
        return tensor_type(tp.tensor_type.elem_type)
    if kind == "sparse_tensor_type":
        name = dtype_name(tp.sparse_tensor_type.elem_type)
        return f"sparse_tensor({name})" if name else None
    if kind == "sequence_type":
        inner = type_string(tp.sequence_type.elem_type)
        return f"seq({inner})" if inner else None
    if kind == "optional_type":
        inner = type_string(tp.optional_type.elem_type)
        return f"optional({inner})" if inner else None
    if kind == "map_type":
        key = dtype_name(tp.map_type.key_type)
        val = type_string(tp.map_type.value_type)
        return f"map({key},{val})" if key and val else None
    return None


def declared_types(graph: GraphProto) -> dict[str, str]:
    """Types the graph states: inputs, outputs, value_info and initializers."""
    types: dict[str, str] = {}
    for vi in (*graph.input, *graph.output, *graph.value_info):
        t = type_string(vi.type)
        if t:
            types[vi.name] = t
    for init in graph.initializer:
        t = tensor_type(init.data_type)
        if t:
            types[init.name] = t
    for sp in graph.sparse_initializer:
        t = dtype_name(sp.values.data_type)
        if t:
            types[sp.values.name] = f"sparse_tensor({t})"
    return types


def declared_protos(graph: GraphProto) -> dict[str, TypeProto]:
    """Full declared TypeProtos (with shapes) of inputs, outputs and value_info."""
    return {vi.name: vi.type for vi in (*graph.input, *graph.output, *graph.value_info)}


def _attr(node: NodeProto, name: str) -> AttributeProto | None:
    for a in node.attribute:
        if a.name == name:
            return a
    return None


_CONSTANT_VALUE_TYPES = {
    "value_float": "tensor(float)",
    "value_floats": "tensor(float)",
    "value_int": "tensor(int64)",
    "value_ints": "tensor(int64)",
    "value_string": "tensor(string)",
    "value_strings": "tensor(string)",
}


def _special_output_types(node: NodeProto, in_types: list[str | None]) -> list[str | None] | None:
    """Output types set by attributes or by another input, for ops schemas cannot express."""
    op = node.op_type
    if node.domain not in ("", "ai.onnx"):
        return None
    if op == "Cast":
        a = _attr(node, "to")
        return [tensor_type(a.i) if a else None]
    if op == "CastLike":
        return [in_types[1] if len(in_types) > 1 else None]
    if op == "Constant":
        for a in node.attribute:
            if a.name == "value":
                return [tensor_type(a.t.data_type)]
            if a.name == "sparse_value":
                return [f"sparse_tensor({dtype_name(a.sparse_tensor.values.data_type)})"]
            if a.name in _CONSTANT_VALUE_TYPES:
                return [_CONSTANT_VALUE_TYPES[a.name]]
        return [None]
    if op == "ConstantOfShape":
        a = _attr(node, "value")
        return [tensor_type(a.t.data_type) if a else "tensor(float)"]
    if op in ("RandomNormal", "RandomUniform"):
        a = _attr(node, "dtype")
        return [tensor_type(a.i) if a else "tensor(float)"]
    if op in ("RandomNormalLike", "RandomUniformLike", "EyeLike", "Bernoulli"):
        a = _attr(node, "dtype")
        return [tensor_type(a.i) if a else (in_types[0] if in_types else None)]
    if op == "Multinomial":
        a = _attr(node, "dtype")
        return [tensor_type(a.i) if a else "tensor(int32)"]
    if op == "QuantizeLinear":
        a = _attr(node, "output_dtype")
        if a and a.i:
            return [tensor_type(a.i)]
        return [in_types[2] if len(in_types) > 2 and in_types[2] else "tensor(uint8)"]
    if op == "DequantizeLinear":
        a = _attr(node, "output_dtype")
        if a and a.i:
            return [tensor_type(a.i)]
        return [in_types[1] if len(in_types) > 1 else None]
    if op == "SequenceEmpty":
        a = _attr(node, "dtype")
        return [f"seq({tensor_type(a.i) if a else 'tensor(float)'})"]
    if op == "If":
        branch = _attr(node, "then_branch")
        return [type_string(o.type) for o in branch.g.output] if branch else None
    if op == "Loop":
        body = _attr(node, "body")
        if body:
            outs = [type_string(o.type) for o in body.g.output[1:]]
            return outs
        return None
    if op == "Scan":
        body = _attr(node, "body")
        return [type_string(o.type) for o in body.g.output] if body else None
    return None


def bind_type_params(
    node: NodeProto, schema: OpSchema, types: Mapping[str, str]
) -> dict[str, str]:
    """Type parameter -> actual type, from the node's inputs and any known outputs."""
    binding: dict[str, str] = {}
    for formals, names in ((schema.inputs, node.input), (schema.outputs, node.output)):
        for i, name in enumerate(names):
            if not name:
                continue
            formal = schema.formal_for(formals, i)
            if formal is None or formal.type_str not in schema.constraints:
                continue
            if formal.option == "variadic" and not formal.homogeneous:
                continue
            actual = types.get(name)
            if actual:
                binding.setdefault(formal.type_str, actual)
    return binding


def infer_node_outputs(
    node: NodeProto, schema: OpSchema | None, types: Mapping[str, str]
) -> list[str | None]:
    """Best-effort output types of one node."""
    in_types = [types.get(n) if n else None for n in node.input]
    special = _special_output_types(node, in_types)
    if special is not None:
        return special
    if schema is None:
        return [None] * len(node.output)
    binding = bind_type_params(node, schema, types)
    out: list[str | None] = []
    for i, _ in enumerate(node.output):
        formal = schema.formal_for(schema.outputs, i)
        if formal is None:
            out.append(None)
            continue
        ts = formal.type_str
        if ts in binding:
            out.append(binding[ts])
        elif ts not in schema.constraints:
            out.append(ts or None)
        elif len(schema.constraints[ts]) == 1:
            out.append(next(iter(schema.constraints[ts])))
        else:
            out.append(None)
    return out


def propagate(
    nodes, types: dict[str, str], schemas: SchemaIndex, opsets: Mapping[str, int]
) -> dict[str, str]:
    """Fill ``types`` in place with inferred output types of ``nodes`` (in order)."""
    for node in nodes:
        if all(o in types or not o for o in node.output):
            continue
        version = opsets.get(node.domain if node.domain != "ai.onnx" else "")
        schema = schemas.resolve(node.domain, node.op_type, version) if version else None
        for name, t in zip(node.output, infer_node_outputs(node, schema, types)):
            if name and t and name not in types:
                types[name] = t
    return types
