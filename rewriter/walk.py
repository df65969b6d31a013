"""Walk a ModelProto: every graph, subgraph, function, node and tensor, with a readable path.

Paths look like ``graph/node 12 (If_3)/then_branch/node 2 (Foo)`` or
``function com.acme:Block/node 0 (MatMul)``. Everything here scans the protobuf directly:
it never converts the model to another IR and never reads external data.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from onnx import AttributeProto, FunctionProto, GraphProto, ModelProto, NodeProto, TensorProto

STANDARD_DOMAIN = ""
_DOMAIN_ALIASES = {"ai.onnx": ""}


def normalize_domain(domain: str) -> str:
    """``ai.onnx`` and ``""`` name the same domain; return the canonical spelling."""
    return _DOMAIN_ALIASES.get(domain, domain)


def opset_map(opset_imports) -> dict[str, int]:
    """Opset imports as ``{domain: version}`` with the standard domain spelled ``""``."""
    return {normalize_domain(o.domain): o.version for o in opset_imports}


def node_label(index: int, node: NodeProto) -> str:
    return f"node {index} ({node.name or node.op_type})"


@dataclass
class Scope:
    """A graph or function body, with the opset imports that apply inside it."""

    path: str
    opsets: Mapping[str, int]
    graph: GraphProto | None = None
    function: FunctionProto | None = None
    parent: Scope | None = None
    depth: int = 0
    outer_names: frozenset[str] = field(default_factory=frozenset)

    @property
    def nodes(self):
        return self.graph.node if self.graph is not None else self.function.node


@dataclass
class NodeSite:
    """One node and where it lives."""

    node: NodeProto
    index: int
    scope: Scope

    @property
    def path(self) -> str:
        return f"{self.scope.path}/{node_label(self.index, self.node)}"

    @property
    def domain(self) -> str:
        return normalize_domain(self.node.domain)

    @property
    def opset_version(self) -> int | None:
        """The version of the node's domain imported where the node lives (None: not imported)."""
        return self.scope.opsets.get(self.domain)


def function_key(domain: str, name: str, overload: str = "") -> tuple[str, str, str]:
    return (normalize_domain(domain), name, overload)


def model_functions(model: ModelProto) -> dict[tuple[str, str, str], FunctionProto]:
    return {function_key(f.domain, f.name, f.overload): f for f in model.functions}


def subgraphs(node: NodeProto) -> Iterator[tuple[str, GraphProto]]:
    """The node's graph attributes, as (attribute label, graph)."""
    for attr in node.attribute:
        if attr.type == AttributeProto.GRAPH:
            yield attr.name, attr.g
        elif attr.type == AttributeProto.GRAPHS:
            for i, g in enumerate(attr.graphs):
                yield f"{attr.name}[{i}]", g


def iter_scopes(model: ModelProto) -> Iterator[Scope]:
    """The main graph, every nested subgraph (depth first, in order), then every function."""
    opsets = opset_map(model.opset_import)
    yield from _graph_scopes(model.graph, "graph", opsets, None, 0)
    for f in model.functions:
        fopsets = opset_map(f.opset_import) or opsets
        label = f"function {f.domain}:{f.name}" + (f"#{f.overload}" if f.overload else "")
        yield from _function_scopes(f, label, fopsets)


def _function_scopes(f: FunctionProto, label: str, opsets) -> Iterator[Scope]:
    scope = Scope(path=label, opsets=opsets, function=f)
    yield scope
    for i, node in enumerate(f.node):
        for attr_label, g in subgraphs(node):
            yield from _graph_scopes(
                g, f"{label}/{node_label(i, node)}/{attr_label}", opsets, scope, 1
            )


def _graph_scopes(g: GraphProto, path: str, opsets, parent, depth) -> Iterator[Scope]:
    scope = Scope(path=path, opsets=opsets, graph=g, parent=parent, depth=depth)
    yield scope
    for i, node in enumerate(g.node):
        for attr_label, sub in subgraphs(node):
            yield from _graph_scopes(
                sub, f"{path}/{node_label(i, node)}/{attr_label}", opsets, scope, depth + 1
            )


def iter_nodes(model: ModelProto) -> Iterator[NodeSite]:
    """Every node in the model, subgraphs and functions included."""
    for scope in iter_scopes(model):
        for i, node in enumerate(scope.nodes):
            yield NodeSite(node, i, scope)


def iter_tensors(model: ModelProto) -> Iterator[tuple[str, TensorProto]]:
    """Every TensorProto that may carry data: initializers (dense and sparse), attribute
    tensors, in every graph, subgraph and function. Yields (location, tensor)."""
    for scope in iter_scopes(model):
        g = scope.graph
        if g is not None:
            for t in g.initializer:
                yield f"{scope.path}/initializer {t.name!r}", t
            for st in g.sparse_initializer:
                yield f"{scope.path}/sparse_initializer {st.values.name!r} values", st.values
                yield f"{scope.path}/sparse_initializer {st.values.name!r} indices", st.indices
        for i, node in enumerate(scope.nodes):
            for attr in node.attribute:
                where = f"{scope.path}/{node_label(i, node)}/attribute {attr.name!r}"
                if attr.type == AttributeProto.TENSOR:
                    yield where, attr.t
                elif attr.type == AttributeProto.TENSORS:
                    for k, t in enumerate(attr.tensors):
                        yield f"{where}[{k}]", t
                elif attr.type == AttributeProto.SPARSE_TENSOR:
                    yield f"{where} values", attr.sparse_tensor.values
                    yield f"{where} indices", attr.sparse_tensor.indices
                elif attr.type == AttributeProto.SPARSE_TENSORS:
                    for k, st in enumerate(attr.sparse_tensors):
                        yield f"{where}[{k}] values", st.values
                        yield f"{where}[{k}] indices", st.indices
