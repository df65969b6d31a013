"""One replaced node and what replaced it, for the report's picture: a main-graph node of
the original that the rewritten model computes with other nodes, and those nodes with
their edges.

The provenance table names the replaced nodes, and the nodes made for one are named after
it. Without it: onnx's inliner and the splice keep the output names of the node they
replace, so the replacement is found by walking the rewritten graph back from those outputs
until values the original has (as :mod:`rewriter.comparison.localize` bounds its
regions)."""

from __future__ import annotations

from operator import attrgetter
from typing import Any

from onnx import ModelProto, NodeProto

from rewriter.apply.provenance import ProvenanceTable, read_table, stamp_of
from rewriter.graph.opid import OpId

MAX_NODES = 40  # nodes drawn; a bigger replacement is cut (``total`` says how many)
_WALK_LIMIT = 2000  # a replacement bigger than this is not walked to its end
WALK_MAX_NODES = 10_000  # without provenance, graphs up to this size are walked
_CANDIDATES = 16  # regions of the provenance table looked at


def _node(node: NodeProto) -> dict[str, Any]:
    return {"name": node.name, "op": str(OpId(node.domain, node.op_type)),
            "inputs": list(node.input), "outputs": list(node.output)}


def _same(a: NodeProto, b: NodeProto) -> bool:
    return (a.op_type == b.op_type and a.domain == b.domain and list(a.input) == list(b.input)
            and list(a.output) == list(b.output))


def _replacement(outputs: list[str], producer: dict[str, tuple[int, NodeProto]],
                 known: set[str]) -> list[tuple[int, NodeProto]] | None:
    """The rewritten nodes between the original values ``known`` and ``outputs``, in graph
    order; None past the walk limit."""
    found: dict[int, tuple[int, NodeProto]] = {}
    frontier = [o for o in outputs if o in producer]
    while frontier:
        index, node = producer[frontier.pop()]
        if index in found:
            continue
        found[index] = (index, node)
        if len(found) > _WALK_LIMIT:
            return None
        frontier.extend(i for i in node.input if i and i not in known and i in producer)
    return [found[i] for i in sorted(found)]


def _by_provenance(original: ModelProto, rewritten: ModelProto, bases: list[str],
                   table: ProvenanceTable
                   ) -> tuple[NodeProto, list[tuple[int, NodeProto]]] | None:
    """The replaced node of the first region in ``bases`` that several nodes replaced (else
    the first with any), with the main-graph nodes named after it (``BASE/<op>_<k>``,
    :mod:`rewriter.apply.provenance`): one pass over the names, none over the values."""
    wanted = set(bases)
    nodes = rewritten.graph.node
    made: dict[str, list[tuple[int, NodeProto]]] = {}
    for index, name in enumerate(map(attrgetter("name"), nodes)):  # names only: fast
        if "/" in name:
            base = name.rpartition("/")[0]
            if base in wanted and stamp_of(nodes[index], table) is not None:  # made for it
                made.setdefault(base, []).append((index, nodes[index]))
    graph = original.graph.node
    names = list(map(attrgetter("name"), graph))
    named = {n: i for i, n in enumerate(names) if n in made}
    for base in sorted(made, key=lambda b: (len(made[b]) < 2, bases.index(b))):
        if base in named:
            return graph[named[base]], made[base]
        for i, name in enumerate(names):  # an unnamed node's region is its first output
            if not name and graph[i].output and graph[i].output[0] == base:
                return graph[i], made[base]
    return None


def _by_walk(original: ModelProto, rewritten: ModelProto
             ) -> tuple[NodeProto, list[tuple[int, NodeProto]]] | None:
    """The first replaced main-graph node (preferring one several nodes replaced) and the
    rewritten nodes between its inputs and outputs, found from the values alone."""
    graph = original.graph
    known = {i.name for i in graph.input} | {t.name for t in graph.initializer}
    for node in graph.node:
        known.update(o for o in node.output if o)
    producer: dict[str, tuple[int, NodeProto]] = {}
    for index, node in enumerate(rewritten.graph.node):
        for o in node.output:
            if o:
                producer[o] = (index, node)
    first = None
    for node in graph.node:
        outputs = [o for o in node.output if o]
        if not outputs or outputs[0] not in producer or node.op_type == "Constant":
            continue
        if _same(node, producer[outputs[0]][1]):
            continue
        nodes = _replacement(outputs, producer, known)
        if not nodes:
            continue
        if first is None:
            first = (node, nodes)
        if len(nodes) > 1:
            return node, nodes
    return first


def replaced_region(original: ModelProto, rewritten: ModelProto) -> dict[str, Any] | None:
    """``{"name", "op", "inputs", "outputs", "plugin", "rule", "nodes", "total"}``: one
    replaced main-graph node (one several nodes replaced, where there is one) and the nodes
    that replaced it (at most :data:`MAX_NODES`; ``total`` counts them all); None when no
    main-graph node was replaced.

    The provenance table names the replaced nodes, and the nodes made for each are named
    after it: found in one pass over the names. Without it (kernels, nodes onnx's inliner
    named), the values are walked, on graphs of up to :data:`WALK_MAX_NODES` nodes."""
    table = read_table(rewritten)
    bases = [b for regions in table.regions.values() for b in regions][:_CANDIDATES]
    found = _by_provenance(original, rewritten, bases, table) if bases else None
    if found is None and len(rewritten.graph.node) <= WALK_MAX_NODES:
        found = _by_walk(original, rewritten)
    if found is None:
        return None
    node, nodes = found
    stamp = stamp_of(nodes[-1][1], table) or ("", "", "")
    return {**_node(node), "plugin": stamp[0] or None, "rule": stamp[1] or None,
            "nodes": [_node(n) for _, n in nodes[:MAX_NODES]], "total": len(nodes)}
