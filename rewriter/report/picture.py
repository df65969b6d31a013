"""One replaced node and what replaced it, for the report's picture: the first main-graph
node of the original (in its order) that the rewritten model computes with other nodes,
and those nodes with their edges.

onnx's inliner and the splice keep the output names of the node they replace, so the
replacement is found by walking the rewritten graph back from those outputs until values
the original has (as :mod:`rewriter.comparison.localize` bounds its regions)."""

from __future__ import annotations

from typing import Any

from onnx import ModelProto, NodeProto

from rewriter.apply.provenance import read_table, stamp_of
from rewriter.graph.opid import OpId

MAX_NODES = 40  # nodes drawn; a bigger replacement is cut (``total`` says how many)
_WALK_LIMIT = 2000  # a replacement bigger than this is not walked to its end


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


def replaced_region(original: ModelProto, rewritten: ModelProto) -> dict[str, Any] | None:
    """``{"node", "op", "inputs", "outputs", "plugin", "rule", "nodes", "total"}``: the
    first replaced main-graph node (preferring one replaced by several nodes) and the nodes
    that replaced it (at most :data:`MAX_NODES`; ``total`` counts them all); None when no
    main-graph node was replaced."""
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
            first = (node, nodes)
            break
    if first is None:
        return None
    node, nodes = first
    stamp = stamp_of(nodes[-1][1], read_table(rewritten)) or ("", "", "")
    return {**_node(node), "plugin": stamp[0] or None, "rule": stamp[1] or None,
            "nodes": [_node(n) for _, n in nodes[:MAX_NODES]], "total": len(nodes)}
