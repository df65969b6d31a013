"""Walk a ModelProto: every graph, subgraph, function, node and tensor, with a readable path.

Paths look like ``graph/node 12 (If_3)/then_branch/node 2 (Foo)`` or
``function com.acme:Block/node 0 (MatMul)``. Everything here scans the protobuf directly:
it never converts the model to another IR and never reads external data.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from operator import attrgetter

from onnx import AttributeProto, FunctionProto, GraphProto, ModelProto, NodeProto, TensorProto

from rewriter.graph.opid import DOMAIN_ALIASES as _DOMAIN_ALIASES
from rewriter.graph.opid import normalize_domain

STANDARD_DOMAIN = ""


def opset_map(opset_imports) -> dict[str, int]:
    """Opset imports as ``{domain: version}`` with the standard domain spelled ``""``."""
    return {normalize_domain(o.domain): o.version for o in opset_imports}


def node_label(index: int, node: NodeProto) -> str:
    return f"node {index} ({node.name or node.op_type})"


_MAIN_NODE = re.compile(r"^graph/node (\d+)\b")


def main_node_index(path: str | None) -> int | None:
    """The index of the main-graph node a path starts at (``graph/node 12 (If_3)/...`` ->
    12), or None for a path elsewhere (a function body, the model)."""
    match = _MAIN_NODE.match(path or "")
    return int(match.group(1)) if match else None


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
    # indices of the nodes that have attributes (all others hold no subgraph or tensor)
    attributed: list[int] | None = None
    node_count: int = -1  # len(nodes) when `attributed` was read
    holder: int | None = None  # a subgraph's: the position of its node in the parent's nodes

    def __post_init__(self) -> None:
        if self.attributed is not None and self.node_count < 0:
            self.node_count = len(self.nodes)

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


def main_node_site(model: ModelProto, index: int) -> NodeSite:
    """The main-graph node at ``index``, where it lives (its path, domain, opset)."""
    return NodeSite(model.graph.node[index], index, next(iter(iter_scopes(model))))


def function_key(domain: str, name: str, overload: str = "") -> tuple[str, str, str]:
    return (normalize_domain(domain), name, overload)


def model_functions(model: ModelProto) -> dict[tuple[str, str, str], FunctionProto]:
    return {function_key(f.domain, f.name, f.overload): f for f in model.functions}


_GRAPH = AttributeProto.GRAPH
_GRAPHS = AttributeProto.GRAPHS


def subgraphs(node: NodeProto) -> Iterator[tuple[str, GraphProto]]:
    """The node's graph attributes, as (attribute label, graph)."""
    for attr in node.attribute:
        kind = attr.type
        if kind == _GRAPH:
            yield attr.name, attr.g
        elif kind == _GRAPHS:
            for i, g in enumerate(attr.graphs):
                yield f"{attr.name}[{i}]", g


def rename_reads(nodes: Iterable[NodeProto], renames: Mapping[str, str]) -> None:
    """The inputs of ``nodes`` that ``renames`` names, renamed in place, and so every read
    of such an outer value inside their subgraphs where no value of the subgraph hides it."""
    for node in nodes:
        node.input[:] = [renames.get(i, i) for i in node.input]
        for _, graph in subgraphs(node):
            local = {v.name for v in graph.input} | {t.name for t in graph.initializer} | {
                o for n in graph.node for o in n.output}
            visible = {k: v for k, v in renames.items() if k not in local}
            if visible:
                rename_reads(graph.node, visible)


def outer_references(node: NodeProto) -> list[str]:
    """Names the node's subgraphs (If/Loop/Scan bodies, at any depth) read from the
    enclosing graphs, in the order first read."""
    found: dict[str, None] = {}

    def graph(g: GraphProto, defined: set[str]) -> None:
        defined = defined | {v.name for v in (*g.input, *g.initializer)}
        defined |= {v.name for v in g.sparse_initializer}
        for n in g.node:
            found.update((x, None) for x in n.input if x and x not in defined)
            for _, sub in subgraphs(n):
                graph(sub, defined)
            defined |= set(n.output)
        found.update((v.name, None) for v in g.output if v.name not in defined)

    for _, sub in subgraphs(node):
        graph(sub, set())
    return list(found)


def iter_scopes(model: ModelProto) -> Iterator[Scope]:
    """The main graph, every nested subgraph (depth first, in order), then every function.

    A scope's subgraphs are found among the nodes that had attributes when the scope was
    yielded (re-read if nodes were added or removed meanwhile)."""
    opsets = opset_map(model.opset_import)
    yield from _graph_scopes(model.graph, "graph", opsets, None, 0)
    for f in model.functions:
        fopsets = opset_map(f.opset_import) or opsets
        label = f"function {f.domain}:{f.name}" + (f"#{f.overload}" if f.overload else "")
        yield from _function_scopes(f, label, fopsets)


def _attributed(nodes) -> list[int]:
    # One read of each node's attributes, shared by the subgraph search and tensor walks
    return [i for i, node in enumerate(nodes) if node.attribute]


def _attributed_after_yield(scope: Scope) -> list[int]:
    """The scope's attributed nodes, read again if the consumer added or removed nodes while
    it had the scope (nodes replaced in place are seen as they were when it was yielded)."""
    if scope.attributed is None or len(scope.nodes) != scope.node_count:
        scope.attributed = _attributed(scope.nodes)
        scope.node_count = len(scope.nodes)
    return scope.attributed


def _function_scopes(f: FunctionProto, label: str, opsets) -> Iterator[Scope]:
    nodes = f.node
    scope = Scope(path=label, opsets=opsets, function=f, attributed=_attributed(nodes))
    yield scope
    for i in _attributed_after_yield(scope):
        node = nodes[i]
        for attr_label, g in subgraphs(node):
            yield from _graph_scopes(
                g, f"{label}/{node_label(i, node)}/{attr_label}", opsets, scope, 1
            )


def _graph_scopes(g: GraphProto, path: str, opsets, parent, depth,
                  holder: int | None = None) -> Iterator[Scope]:
    nodes = g.node
    scope = Scope(path=path, opsets=opsets, graph=g, parent=parent, depth=depth,
                  attributed=_attributed(nodes), holder=holder)
    yield scope
    for i in _attributed_after_yield(scope):
        node = nodes[i]
        for attr_label, sub in subgraphs(node):
            yield from _graph_scopes(
                sub, f"{path}/{node_label(i, node)}/{attr_label}", opsets, scope, depth + 1, i
            )


def iter_nodes(model: ModelProto) -> Iterator[NodeSite]:
    """Every node in the model, subgraphs and functions included."""
    for scope in iter_scopes(model):
        for i, node in enumerate(scope.nodes):
            yield NodeSite(node, i, scope)


_DOMAIN_OP = attrgetter("domain", "op_type")


def op_counts(model: ModelProto) -> Counter:
    """``(domain, op_type)`` -> number of nodes, over every graph, subgraph and function
    (``ai.onnx`` spelled ``""``). One C-level pass over each scope's nodes."""
    counts: Counter = Counter()
    for scope in iter_scopes(model):
        counts.update(map(_DOMAIN_OP, scope.nodes))
    for key in [k for k in counts if k[0] in _DOMAIN_ALIASES]:
        counts[(_DOMAIN_ALIASES[key[0]], key[1])] += counts.pop(key)
    return counts


def iter_tensors(model: ModelProto) -> Iterator[tuple[str, TensorProto]]:
    """Every TensorProto that may carry data: initializers (dense and sparse), attribute
    tensors, in every graph, subgraph and function. Yields (location, tensor)."""
    for site, tensor in iter_tensor_sites(model):
        yield tensor_location(site), tensor


# Where a tensor sits, as iter_tensor_sites yields it; turned into text only when shown.
TensorSite = tuple  # (scope path, kind, tensor-or-name-or-(node, attribute), index, suffix)

_INIT, _SPARSE_INIT, _ATTR = 0, 1, 2


def tensor_location(site: TensorSite) -> str:
    """The readable location of a tensor site, as :func:`iter_tensors` spells it."""
    path, kind, a, b, suffix = site
    if kind == _INIT:
        return f"{path}/initializer {a.name!r}"
    if kind == _SPARSE_INIT:
        return f"{path}/sparse_initializer {a!r} {suffix}"
    return f"{path}/{node_label(b, a[0])}/attribute {a[1]!r}{suffix}"


_TENSOR = AttributeProto.TENSOR
_TENSORS = AttributeProto.TENSORS
_SPARSE_TENSOR = AttributeProto.SPARSE_TENSOR
_SPARSE_TENSORS = AttributeProto.SPARSE_TENSORS
_TENSOR_KINDS = frozenset({_TENSOR, _TENSORS, _SPARSE_TENSOR, _SPARSE_TENSORS})


def iter_tensor_sites(
    model: ModelProto, scopes: Iterable[Scope] | None = None
) -> Iterator[tuple[TensorSite, TensorProto]]:
    """:func:`iter_tensors`, same order, with the location left unformatted (see
    :func:`tensor_location`): a big model has many tensors and few are ever shown.
    ``scopes``: the model's :func:`iter_scopes`, when the caller has them already."""
    for scope in iter_scopes(model) if scopes is None else scopes:
        g = scope.graph
        path = scope.path
        if g is not None:
            for t in g.initializer:
                yield (path, _INIT, t, None, ""), t
            for st in g.sparse_initializer:
                name = st.values.name
                yield (path, _SPARSE_INIT, name, None, "values"), st.values
                yield (path, _SPARSE_INIT, name, None, "indices"), st.indices
        nodes = scope.nodes
        attributed = scope.attributed
        if attributed is None:
            attributed = [i for i, node in enumerate(nodes) if node.attribute]
        for i in attributed:
            node = nodes[i]
            for attr in node.attribute:
                kind = attr.type
                if kind not in _TENSOR_KINDS:
                    continue
                where = (node, attr.name)
                if kind == _TENSOR:
                    yield (path, _ATTR, where, i, ""), attr.t
                elif kind == _TENSORS:
                    for k, t in enumerate(attr.tensors):
                        yield (path, _ATTR, where, i, f"[{k}]"), t
                elif kind == _SPARSE_TENSOR:
                    yield (path, _ATTR, where, i, " values"), attr.sparse_tensor.values
                    yield (path, _ATTR, where, i, " indices"), attr.sparse_tensor.indices
                else:
                    for k, st in enumerate(attr.sparse_tensors):
                        yield (path, _ATTR, where, i, f"[{k}] values"), st.values
                        yield (path, _ATTR, where, i, f"[{k}] indices"), st.indices
