"""The ``Converter``: one node written for one opset becomes nodes valid at the target
opsets, by the same op at an older version, an adapter step (``registry``, filled by the
op-family modules imported here), or the spec's function body, each result converted again;
with the type inference and constant folding it reads as it goes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
from onnx import (
    AttributeProto,
    FunctionProto,
    GraphProto,
    NodeProto,
    TensorProto,
    TypeProto,
    helper,
    numpy_helper,
)

from rewriter.plugin import normalize_domain

from . import arithmetic, axes, normalization, quantization, reductions, resampling, shapes
from .common import (
    MAX_CONSTANT_ELEMENTS,
    Decline,
    Env,
    attr,
    constant_value,
    first_line,
    has_graphs,
    schema_at,
    set_attrs,
    with_outputs,
)
from .registry import ADAPTERS, SEMANTIC_BOUNDARIES, adapter_versions, ints

#: the op-family modules whose adapters fill ``ADAPTERS`` (importing one registers its adapters)
ADAPTER_FAMILIES = (arithmetic, axes, normalization, quantization, reductions, resampling, shapes)


MAX_DEPTH = 40


def _dims(dims) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in dims) + "]"


class Converter:
    """Rewrites nodes written for one opset into nodes valid at the ``to`` opsets."""

    def __init__(self, to: Mapping[str, int]) -> None:
        self.to = dict(to)
        self.used_rules: list[str] = []

    # one node -> nodes valid at `to` (outputs keep their names) ------------------------

    def convert(self, node: NodeProto, opsets: Mapping[str, int], env: Env,
                depth: int = 0) -> list[NodeProto]:
        if depth > MAX_DEPTH:
            raise Decline("conversion nests too deeply")
        domain = normalize_domain(node.domain)
        version = opsets.get(domain)
        if domain not in self.to or version is None or version <= self.to[domain]:
            self._infer(node, opsets, env)
            return [self._convert_subgraphs(node, opsets, env, depth)]
        target = self.to[domain]
        s_from = schema_at(domain, node.op_type, version)
        if s_from is None:
            raise Decline(f"onnx has no schema for {node.op_type} at opset {version}")
        s_to = schema_at(domain, node.op_type, target)
        self._infer(node, opsets, env)
        if s_to is not None and s_to.since_version == s_from.since_version:
            return [self._convert_subgraphs(node, opsets, env, depth)]
        label = f"{node.op_type}({s_from.since_version})"
        reasons: list[str] = []
        bounds = SEMANTIC_BOUNDARIES.get((domain, node.op_type), ())
        crosses = any(s_to is None or s_to.since_version < b <= s_from.since_version
                      for b in bounds)
        if s_to is not None and not crosses:
            try:
                kept = self._same_op(node, domain, s_from, target, env)
            except Decline as e:
                reasons.append(str(e))
                cropped = self._cropped_pool(node, domain, s_from, target, env)
                if cropped is not None:
                    self.used_rules.append(f"{node.op_type}({s_to.since_version}), cropped")
                    return cropped
            else:
                self.used_rules.append("same op, older version")
                return [self._convert_subgraphs(kept, opsets, env, depth)]
        low = s_to.since_version if s_to is not None else 0
        steps = [v for v in adapter_versions(domain, node.op_type)
                 if low < v <= s_from.since_version]
        if steps:
            # the newest adapter in range lowers one step; from the node's own version down
            # to that one, the op must stay the same
            v = steps[-1]
            step_label = f"{node.op_type}({v})"
            try:
                start = node
                if v < s_from.since_version:
                    start = self._same_op(node, domain, s_from, v, env)
                env.emit_opset = v - 1
                lowered = ADAPTERS[(domain, node.op_type, v)](start, env)
                below = dict(opsets)
                below[domain] = v - 1
                out = []
                for n in lowered:
                    out.extend(self.convert(n, below, env, depth + 1))
                self.used_rules.append(f"adapter {step_label}")
                return out
            except Decline as e:
                reasons.append(f"adapter {step_label}: {e}")
        try:
            body_nodes, body_opsets = self._function_body(node, opsets, env, version)
        except Decline as e:
            reasons.append(str(e))
            body_nodes = None
        if body_nodes is not None:
            try:
                out = []
                for n in body_nodes:
                    out.extend(self.convert(n, body_opsets, env, depth + 1))
                self.used_rules.append(f"function body {label}")
                return out
            except Decline as e:
                reasons.append(f"its function body: {e}")
        if s_to is None and not reasons:
            reasons.append(f"{node.op_type} does not exist at {domain or 'ai.onnx'} opset "
                           f"{target} and has no function body or adapter")
        elif not reasons:
            reasons.append("no adapter or function body")
        raise Decline(f"{label}: " + "; ".join(reasons))

    def _convert_subgraphs(self, node: NodeProto, opsets, env: Env, depth: int) -> NodeProto:
        """Nodes inside a body's subgraphs (a body node's Loop, say) are converted too; a
        model's own subgraphs are not reached here (the pass sees their nodes directly)."""
        if not has_graphs(node) or depth == 0:
            return node
        out = NodeProto()
        out.CopyFrom(node)
        _seed_subgraph_types(out, env)
        for a in out.attribute:
            graphs = [a.g] if a.type == AttributeProto.GRAPH else (
                list(a.graphs) if a.type == AttributeProto.GRAPHS else [])
            for g in graphs:
                converted = []
                for inner in g.node:
                    converted.extend(self.convert(inner, opsets, env, depth + 1))
                del g.node[:]
                g.node.extend(converted)
        return out

    def _function_body(self, node: NodeProto, opsets, env: Env, version: int):
        from rewriter.plugin import BodyUnavailable, schema_function_body, type_proto, type_string

        domain = normalize_domain(node.domain)
        type_strings = [type_string(env.types[n]) if n in env.types else None
                        for n in node.input]
        declared = {n: env.types[n] for n in node.input if n in env.types}
        for n, t in zip(node.input, type_strings):
            if n and t and n not in declared:
                declared[n] = type_proto(t)
        try:
            body = schema_function_body(node, version, type_strings, declared)
        except BodyUnavailable:
            raise Decline(f"the function body of {node.op_type} needs input types that are "
                          "unknown") from None
        if body is None:
            return None, None
        body_opsets = dict(opsets)
        for entry in body.opset_import:
            d = normalize_domain(entry.domain)
            if d != domain:
                body_opsets.setdefault(d, entry.version)
        body_opsets[domain] = version
        schema = schema_at(domain, node.op_type, version)
        return _instantiate(body, node, env, schema), body_opsets

    # checks --------------------------------------------------------------------------

    def _same_op(self, node: NodeProto, domain: str, s_from, version: int, env: Env):
        """``node`` as a valid node of the op's version in force at ``version`` (attributes
        introduced later and set to their default are dropped), or Decline."""
        problem = self._invalid_at(node, domain, version, env)
        if problem is None:
            return node
        s_to = schema_at(domain, node.op_type, version)
        stripped = self._drop_default_attributes(node, s_from, s_to) if s_to else None
        if stripped is not None:
            second = self._invalid_at(stripped, domain, version, env)
            if second is None:
                return stripped
            problem = second
        since = s_to.since_version if s_to is not None else version
        raise Decline(f"{node.op_type}({since}) does not accept it: {problem}")

    def _invalid_at(self, node: NodeProto, domain: str, version: int, env: Env) -> str | None:
        """Why ``node`` is not a valid node at ``version`` of its domain (None: it is)."""
        from onnx import shape_inference

        schema = schema_at(domain, node.op_type, version)
        if schema is None:
            return f"no schema at opset {version}"
        if has_graphs(node):
            return _formal_problem(node, schema, domain, version, env)
        types = {n: env.types.get(n) or TypeProto() for n in node.input if n}
        imports = dict(self.to)
        imports[domain] = version
        imports = [helper.make_opsetid(d, v) for d, v in imports.items()]
        try:
            out = shape_inference.infer_node_outputs(schema, node, types, opset_imports=imports)
        except Exception as e:  # noqa: BLE001 - onnx raises several kinds
            return first_line(e)
        for name, t in out.items():
            known = env.types.get(name)
            if known is None or not t.WhichOneof("value"):
                continue
            if known.WhichOneof("value") != "tensor_type" or t.WhichOneof(
                    "value") != "tensor_type":
                continue
            before, after = known.tensor_type, t.tensor_type
            if before.elem_type and after.elem_type and before.elem_type != after.elem_type:
                return f"output {name!r} would change type"
            if before.HasField("shape") and after.HasField("shape"):
                a = [d.dim_value if d.HasField("dim_value") else None for d in before.shape.dim]
                b = [d.dim_value if d.HasField("dim_value") else None for d in after.shape.dim]
                if len(a) != len(b) or any(x is not None and y is not None and x != y
                                           for x, y in zip(a, b)):
                    return (f"it would compute another output shape ({_dims(b)} instead of "
                            f"{_dims(a)})")
        return None

    def _cropped_pool(self, node: NodeProto, domain: str, s_from, version: int, env: Env):
        """Pooling with ceil_mode=1: older versions also keep a last window that starts in
        the padding; the other windows are the same, so the extra one is sliced off (static
        shapes only)."""
        if domain != "" or node.op_type not in ("AveragePool", "MaxPool", "LpPool") or not attr(
                node, "ceil_mode", 0) or version < 10:
            return None
        s_to = schema_at(domain, node.op_type, version)
        candidate = self._drop_default_attributes(node, s_from, s_to) or node
        wanted = [env.shape(o) if o else None for o in node.output]
        if any(o and (w is None or None in w) for o, w in zip(node.output, wanted)):
            return None
        from onnx import shape_inference

        types = {n: env.types.get(n) or TypeProto() for n in candidate.input if n}
        try:
            got = shape_inference.infer_node_outputs(
                s_to, candidate, types, opset_imports=[helper.make_opsetid(domain, version)])
        except Exception:  # noqa: BLE001
            return None
        nodes, outputs = [], []
        for name, want in zip(node.output, wanted):
            if not name:
                outputs.append("")
                continue
            t = got.get(name)
            if t is None or not t.tensor_type.HasField("shape"):
                return None
            have = [d.dim_value if d.HasField("dim_value") else None
                    for d in t.tensor_type.shape.dim]
            if len(have) != len(want) or any(h is None or h < w for h, w in zip(have, want)):
                return None
            wide = env.fresh("uncropped")
            outputs.append(wide)
            starts, c_s = env.constant_node(np.zeros(len(want), dtype=np.int64), "starts")
            ends, c_e = env.constant_node(np.array(want, dtype=np.int64), "ends")
            nodes += [c_s, c_e, helper.make_node("Slice", [wide, starts, ends], [name])]
        return [with_outputs(candidate, outputs), *nodes]

    @staticmethod
    def _drop_default_attributes(node: NodeProto, s_from, s_to) -> NodeProto | None:
        """``node`` without the attributes ``s_to`` lacks, when each is set to the value the
        newer version treats as "not there" (its default, or all ones for ``dilations``)."""
        extra = [a for a in node.attribute if a.name not in s_to.attributes]
        if not extra:
            return None
        for a in extra:
            if a.ref_attr_name:
                return None
            value = helper.get_attribute_value(a)
            formal = s_from.attributes.get(a.name)
            default = formal.default_value if formal is not None else None
            if default is not None and default.type and helper.get_attribute_value(
                    default) == value:
                continue
            if a.name == "dilations" and all(v == 1 for v in value):
                continue
            return None
        return set_attrs(node, drop=[a.name for a in extra])

    # types and constants -----------------------------------------------------------------

    def _infer(self, node: NodeProto, opsets: Mapping[str, int], env: Env) -> None:
        """Record the output types (and constant values) of ``node`` read at ``opsets``."""
        from onnx import shape_inference

        domain = normalize_domain(node.domain)
        if node.op_type == "Constant" and domain == "" and node.output:
            value = constant_value(node)
            if value is not None and value.size <= MAX_CONSTANT_ELEMENTS:
                env.constants[node.output[0]] = value
        version = opsets.get(domain)
        if version is None:
            return
        schema = schema_at(domain, node.op_type, version)
        if schema is None:
            return
        if has_graphs(node):
            types = dict(env.types)
        else:
            types = {n: env.types.get(n) or TypeProto() for n in node.input if n}
        data = {}
        for n in node.input:
            value = env.const(n)
            if value is not None and value.size <= 64 and value.dtype != object:
                data[n] = numpy_helper.from_array(value, n)
        imports = [helper.make_opsetid(d, v) for d, v in opsets.items()]
        try:
            out = shape_inference.infer_node_outputs(schema, node, types, data,
                                                     opset_imports=imports)
        except Exception:  # noqa: BLE001 - types stay unknown
            out = {}
        for name, t in out.items():
            if name and t.WhichOneof("value"):
                env.types[name] = t
        self._fold(node, env, domain)

    @staticmethod
    def _fold(node: NodeProto, env: Env, domain: str) -> None:
        """Constant-fold a node whose inputs are all small constants (so that an axes input
        computed from constants in a function body can still become an attribute)."""
        if domain != "" or node.op_type == "Constant" or not node.input or has_graphs(node):
            return
        if node.op_type in ("Shape", "Size"):  # of a value whose shape is static
            dims = env.shape(node.input[0])
            if dims is None or any(d is None for d in dims) or not node.output:
                return
            if node.op_type == "Size":
                env.constants[node.output[0]] = np.array(int(np.prod(dims)), dtype=np.int64)
                return
            start, end = attr(node, "start", 0), attr(node, "end")
            env.constants[node.output[0]] = np.array(dims[start:end], dtype=np.int64)
            return
        if node.op_type not in _FOLDABLE:
            return
        values = [env.const(n) for n in node.input if n]
        if any(v is None for v in values):
            return
        try:
            results = _FOLDABLE[node.op_type](node, values)
        except Exception:  # noqa: BLE001 - not folded
            return
        for name, value in zip(node.output, results):
            if name and value is not None and np.asarray(value).size <= MAX_CONSTANT_ELEMENTS:
                env.constants[name] = np.asarray(value)


def _fold_cast(node, values):
    to = helper.tensor_dtype_to_np_dtype(attr(node, "to"))
    return [values[0].astype(to)]


def _fold_slice(node, values):
    data, starts, ends = values[0], ints(values[1]), ints(values[2])
    axes = ints(values[3]) if len(values) > 3 else list(range(len(starts)))
    steps = ints(values[4]) if len(values) > 4 else [1] * len(starts)
    index = [slice(None)] * data.ndim
    for a, s, e, st in zip(axes, starts, ends, steps):
        index[a] = slice(s, e, st)
    return [data[tuple(index)]]


def _fold_div(node, values):
    a, b = values
    if np.issubdtype(a.dtype, np.integer):
        return [(np.sign(a) * np.sign(b) * (np.abs(a) // np.abs(b))).astype(a.dtype)]
    return [a / b]


_FOLDABLE: dict[str, Callable] = {
    "Slice": _fold_slice,
    "Div": _fold_div,
    "Gather": lambda node, v: [np.take(v[0], v[1], axis=attr(node, "axis", 0))],
    "Identity": lambda node, v: [v[0]],
    "Cast": _fold_cast,
    "Neg": lambda node, v: [-v[0]],
    "Concat": lambda node, v: [np.concatenate(v, axis=attr(node, "axis"))],
    "Add": lambda node, v: [v[0] + v[1]],
    "Sub": lambda node, v: [v[0] - v[1]],
    "Mul": lambda node, v: [v[0] * v[1]],
    "Unsqueeze": lambda node, v: [np.expand_dims(
        v[0], tuple(ints(v[1]) if len(v) > 1 else attr(node, "axes")))]
    if np.issubdtype(v[0].dtype, np.integer) else [None],
    "Squeeze": lambda node, v: [np.squeeze(
        v[0], tuple(ints(v[1])) if len(v) > 1 else None)],
}


def _seed_subgraph_types(node: NodeProto, env: Env) -> None:
    """Types of a Loop/Scan/SequenceMap body's inputs (a function body often leaves them
    unstated), from the node's inputs."""
    body = next((a.g for a in node.attribute if a.name == "body"
                 and a.type == AttributeProto.GRAPH), None)
    if body is None:
        return
    actual = [env.type(n) if n else None for n in node.input]
    formal = list(body.input)
    pairs: list[tuple] = []
    if node.op_type == "Loop":
        pairs = [(formal[0], helper.make_tensor_type_proto(TensorProto.INT64, [])),
                 (formal[1], helper.make_tensor_type_proto(TensorProto.BOOL, []))]
        pairs += list(zip(formal[2:], actual[2:]))
    elif node.op_type == "Scan":
        n_scan = attr(node, "num_scan_inputs", 0)
        n_state = len(node.input) - n_scan
        pairs = list(zip(formal[:n_state], actual[:n_state]))
        for f, t in zip(formal[n_state:], actual[n_state:]):
            if t is not None and t.WhichOneof("value") == "tensor_type":
                pairs.append((f, helper.make_tensor_type_proto(t.tensor_type.elem_type, None)))
    elif node.op_type == "SequenceMap":
        for f, t in zip(formal, actual):
            if t is not None and t.WhichOneof("value") == "sequence_type":
                t = t.sequence_type.elem_type
            pairs.append((f, t))
    for f, t in pairs:
        if t is not None and f.name not in env.types and t.WhichOneof("value"):
            env.types[f.name] = t


def _formal_problem(node: NodeProto, schema, domain: str, version: int, env: Env) -> str | None:
    """For nodes with subgraphs (If, Loop, Scan): attributes, arity and the types of inputs
    and of the subgraphs' inputs and outputs against the older schema."""
    from rewriter.plugin import onnx_schemas, type_string

    for a in node.attribute:
        if a.name not in schema.attributes:
            return f"unknown attribute {a.name!r}"
    formal = onnx_schemas().resolve(domain, node.op_type, version)
    if formal is None:
        return "no schema"
    if formal.inputs and formal.inputs[-1].option != "variadic" and len(
            node.input) > len(formal.inputs):
        return "too many inputs"
    allowed: set[str] = set()
    for f in (*formal.inputs, *formal.outputs):
        allowed |= set(formal.constraints.get(f.type_str, {f.type_str}))
    seen = [type_string(env.types[n]) for n in node.input if n in env.types]
    for a in node.attribute:
        graphs = [a.g] if a.type == AttributeProto.GRAPH else list(a.graphs)
        for g in graphs:
            seen += [type_string(v.type) for v in (*g.input, *g.output)]
    for t in seen:
        if t and t not in allowed:
            return f"type {t} is not accepted"
    return None


def _instantiate(body: FunctionProto, node: NodeProto, env: Env, schema) -> list[NodeProto]:
    """The body's nodes with formals bound to the node's actual values, fresh names for its
    own values and attribute references resolved."""
    mapping: dict[str, str] = {}
    for formal, actual in zip(body.input, list(node.input) + [""] * len(body.input)):
        mapping[formal] = actual
    for k, formal in enumerate(body.output):
        actual = node.output[k] if k < len(node.output) else ""
        mapping[formal] = actual or env.fresh(formal)
    attrs = {a.name: a for a in node.attribute}
    defaults = {a.name: a for a in body.attribute_proto}
    if schema is not None:
        for name, formal in schema.attributes.items():
            d = formal.default_value
            if name not in defaults and d is not None and d.type:
                defaults[name] = d
    out = []
    for n in body.node:
        new = NodeProto()
        new.CopyFrom(n)
        _bind(new, mapping, env, attrs, defaults)
        out.append(new)
    return out


def _bind(node: NodeProto, mapping: dict[str, str], env: Env, attrs, defaults) -> None:
    inputs = [mapping.get(n, n) if n else "" for n in node.input]
    del node.input[:]
    node.input.extend(inputs)
    outputs = []
    for n in node.output:
        if not n:
            outputs.append("")
            continue
        if n not in mapping:
            mapping[n] = env.fresh(n)
        outputs.append(mapping[n])
    del node.output[:]
    node.output.extend(outputs)
    resolved = []
    for a in node.attribute:
        if a.ref_attr_name:
            source = attrs.get(a.ref_attr_name) or defaults.get(a.ref_attr_name)
            if source is None:
                continue
            new = AttributeProto()
            new.CopyFrom(source)
            new.name = a.name
            resolved.append(new)
            continue
        if a.type == AttributeProto.GRAPH:
            _bind_graph(a.g, mapping, env, attrs, defaults)
        elif a.type == AttributeProto.GRAPHS:
            for g in a.graphs:
                _bind_graph(g, mapping, env, attrs, defaults)
        resolved.append(a)
    del node.attribute[:]
    node.attribute.extend(resolved)


def _bind_graph(g: GraphProto, outer: dict[str, str], env: Env, attrs, defaults) -> None:
    mapping = dict(outer)
    for v in (*g.input, *g.initializer):
        mapping[v.name] = env.fresh(v.name)
        v.name = mapping[v.name]
    for n in g.node:
        _bind(n, mapping, env, attrs, defaults)
    for v in (*g.output, *g.value_info):
        v.name = mapping.get(v.name, v.name)
