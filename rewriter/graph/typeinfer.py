"""Value types, propagated through a graph from declared types and operator schemas.

Types are ONNX type strings (``tensor(float)``, ``seq(tensor(int64))``), the same spelling
schemas and onnxruntime's kernel registry use. This is a single forward pass over the
protobuf; a value whose type cannot be derived is simply absent (callers treat it as
unknown, never as a mismatch).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from operator import attrgetter

from onnx import AttributeProto, GraphProto, NodeProto, TensorProto, TypeProto

from rewriter.graph.schemas import OpSchema, SchemaIndex

_DTYPE_NAMES: dict[int, str | None] = {}
_TENSOR_TYPES: dict[int, str | None] = {}
_MAX_MEMO = 4096  # element types are a few dozen; a corrupt model may invent more


def dtype_name(elem_type: int) -> str | None:
    """``TensorProto.FLOAT`` -> ``"float"``."""
    try:
        return _DTYPE_NAMES[elem_type]
    except KeyError:
        pass
    if not elem_type:
        return None
    try:
        name = TensorProto.DataType.Name(elem_type).lower()
    except ValueError:
        name = None
    if len(_DTYPE_NAMES) < _MAX_MEMO:
        _DTYPE_NAMES[elem_type] = name
    return name


def tensor_type(elem_type: int) -> str | None:
    try:
        return _TENSOR_TYPES[elem_type]
    except KeyError:
        pass
    name = dtype_name(elem_type)
    result = f"tensor({name})" if name else None
    if len(_TENSOR_TYPES) < _MAX_MEMO:
        _TENSOR_TYPES[elem_type] = result
    return result


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


_NAME = attrgetter("name")
_DATA_TYPE = attrgetter("data_type")


def declared_types(graph: GraphProto) -> dict[str, str]:
    """Types the graph states: inputs, outputs, value_info and initializers."""
    types: dict[str, str] = {}
    for vi in (*graph.input, *graph.output, *graph.value_info):
        t = type_string(vi.type)
        if t:
            types[vi.name] = t
    inits = graph.initializer
    for name, data_type in zip(map(_NAME, inits), map(_DATA_TYPE, inits)):
        t = _TENSOR_TYPES.get(data_type) or tensor_type(data_type)
        if t:
            types[name] = t
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


# Standard ops whose output types come from attributes or another input, not (only) from the
# schema. _special_output_types handles exactly these: an op added there must be listed here,
# since inference results of every other op are memoized by input types (OutputTypeMemo).
SPECIAL_OUTPUT_OPS = frozenset({
    "Cast", "CastLike", "Constant", "ConstantOfShape", "RandomNormal", "RandomUniform",
    "RandomNormalLike", "RandomUniformLike", "EyeLike", "Bernoulli", "Multinomial",
    "QuantizeLinear", "DequantizeLinear", "SequenceEmpty", "If", "Loop", "Scan",
})
_STANDARD_DOMAINS = ("", "ai.onnx")


def _special_output_types(node: NodeProto, in_types: list[str | None]) -> list[str | None] | None:
    """Output types set by attributes or by another input, for ops schemas cannot express."""
    op = node.op_type
    if op not in SPECIAL_OUTPUT_OPS or node.domain not in _STANDARD_DOMAINS:
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


# (id(schema), number of inputs, number of outputs) -> (schema, input plan, output plan);
# a plan lists (argument index, type parameter) for the arguments that bind a parameter.
_PLANS: dict[tuple[int, int, int], tuple] = {}
_MAX_PLANS = 100_000


def _binding_plan(schema: OpSchema, n_in: int, n_out: int) -> tuple:
    key = (id(schema), n_in, n_out)
    entry = _PLANS.get(key)
    if entry is not None and entry[0] is schema:
        return entry
    constraints = schema.constraints
    plans = []
    for formals, count in ((schema.inputs, n_in), (schema.outputs, n_out)):
        plan = []
        for i in range(count):
            formal = schema.formal_for(formals, i)
            if formal is None or formal.type_str not in constraints:
                continue
            if formal.option == "variadic" and not formal.homogeneous:
                continue
            plan.append((i, formal.type_str))
        plans.append(tuple(plan))
    if len(_PLANS) >= _MAX_PLANS:
        _PLANS.clear()
    entry = _PLANS[key] = (schema, plans[0], plans[1])
    return entry


def bind_type_params(
    node: NodeProto,
    schema: OpSchema,
    types: Mapping[str, str],
    inputs: Sequence[str] | None = None,
    outputs: Sequence[str] | None = None,
) -> dict[str, str]:
    """Type parameter -> actual type, from the node's inputs and any known outputs.

    ``inputs``/``outputs`` are the node's names when the caller has read them already.
    """
    inputs = node.input if inputs is None else inputs
    outputs = node.output if outputs is None else outputs
    _, in_plan, out_plan = _binding_plan(schema, len(inputs), len(outputs))
    binding: dict[str, str] = {}
    get = types.get
    for names, plan in ((inputs, in_plan), (outputs, out_plan)):
        for i, param in plan:
            name = names[i]
            if name and param not in binding:
                actual = get(name)
                if actual:
                    binding[param] = actual
    return binding


def binding_conflict(
    schema: OpSchema, inputs: Sequence[str], outputs: Sequence[str], types: Mapping[str, str]
) -> str | None:
    """Two arguments bound to one type parameter with different known types, as a sentence
    (None: they agree, or are unknown)."""
    _, in_plan, out_plan = _binding_plan(schema, len(inputs), len(outputs))
    seen: dict[str, tuple[str, str]] = {}
    for names, plan in ((inputs, in_plan), (outputs, out_plan)):
        for i, param in plan:
            name = names[i]
            actual = types.get(name) if name else None
            if not actual:
                continue
            first = seen.setdefault(param, (actual, name))
            if first[0] != actual:
                return (f"{param} is {first[0]} for {first[1]!r} but {actual} for {name!r}")
    return None


def _outputs_from_binding(schema: OpSchema, binding: Mapping[str, str], n_out: int) -> list:
    out: list[str | None] = []
    constraints = schema.constraints
    for i in range(n_out):
        formal = schema.formal_for(schema.outputs, i)
        if formal is None:
            out.append(None)
            continue
        ts = formal.type_str
        if ts in binding:
            out.append(binding[ts])
        elif ts not in constraints:
            out.append(ts or None)
        elif len(constraints[ts]) == 1:
            out.append(next(iter(constraints[ts])))
        else:
            out.append(None)
    return out


def infer_node_outputs(
    node: NodeProto, schema: OpSchema | None, types: Mapping[str, str]
) -> list[str | None]:
    """Best-effort output types of one node."""
    inputs, outputs = node.input, node.output
    in_types = [types.get(n) if n else None for n in inputs]
    special = _special_output_types(node, in_types)
    if special is not None:
        return special
    if schema is None:
        return [None] * len(outputs)
    return _outputs_from_binding(schema, bind_type_params(node, schema, types), len(outputs))


class OutputTypeMemo:
    """:func:`infer_node_outputs` for a walk over many nodes: the answer for an op that is not
    special depends only on its schema and the types of its inputs and outputs, so it is
    computed once per distinct combination. Use one memo per walk (keys hold schema ids)."""

    def __init__(self) -> None:
        self._memo: dict[tuple, tuple] = {}

    def infer(
        self,
        node: NodeProto,
        schema: OpSchema | None,
        inputs: tuple[str, ...],
        outputs: tuple[str, ...],
        types: Mapping[str, str],
        op_type: str,
        domain: str,
    ) -> Sequence[str | None]:
        """``inputs``, ``outputs``, ``op_type`` and ``domain`` (as written) are the node's."""
        if schema is None or (op_type in SPECIAL_OUTPUT_OPS and domain in _STANDARD_DOMAINS):
            return infer_node_outputs(node, schema, types)
        get = types.get
        in_types = tuple([get(n) if n else None for n in inputs])
        out_types = tuple([get(n) if n else None for n in outputs])
        key = (id(schema), in_types, out_types)
        hit = self._memo.get(key)
        if hit is not None and hit[0] is schema:
            return hit[1]
        _, in_plan, out_plan = _binding_plan(schema, len(inputs), len(outputs))
        binding: dict[str, str] = {}
        for plan, known in ((in_plan, in_types), (out_plan, out_types)):
            for i, param in plan:
                actual = known[i]
                if actual and param not in binding:
                    binding[param] = actual
        result = tuple(_outputs_from_binding(schema, binding, len(outputs)))
        self._memo[key] = (schema, result)
        return result


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
