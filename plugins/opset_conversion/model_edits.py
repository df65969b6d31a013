"""The edits the pass makes to a model: a converted node wrapped as a remedy function
(``Conversion``) and the node pointed at it, imports lowered, and the constants only converted
nodes read dropped.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from onnx import AttributeProto, FunctionProto, ModelProto, NodeProto, helper

from rewriter.plugin import REMEDY_DOMAIN, iter_scopes, normalize_domain, retarget


@dataclass
class Conversion:
    """How one node is converted: kept as it is (``function`` None) or a remedy function."""

    how: str
    function: FunctionProto | None = None  # formals: see as_function


def copy_model(model: ModelProto) -> ModelProto:
    out = ModelProto()
    out.CopyFrom(model)
    return out


def referenced(model: ModelProto) -> set[str]:
    """Every value name some node reads or some graph returns, anywhere in the model."""
    names: set[str] = set()
    for scope in iter_scopes(model):
        for node in scope.nodes:
            names.update(node.input)
        if scope.graph is not None:
            names.update(v.name for v in scope.graph.output)
        else:
            names.update(scope.function.output)
    return names


def drop_dead_constants(model: ModelProto, unused: set[str]) -> None:
    """Remove the Constant nodes and initializers only converted nodes read (an axes input
    that became an attribute); what was unused before the conversion stays."""
    if not unused:
        return
    edits = []  # found first, applied after the walk (which indexes the nodes it visits)
    for scope in iter_scopes(model):
        nodes = scope.nodes
        dead = [i for i, n in enumerate(nodes) if n.op_type == "Constant" and n.domain in (
            "", "ai.onnx") and n.output and all(o in unused for o in n.output)]
        g = scope.graph
        kept = None
        if g is not None:
            inputs = {v.name for v in g.input}
            kept = [t for t in g.initializer if t.name not in unused or t.name in inputs]
            if len(kept) == len(g.initializer):
                kept = None
        if dead or kept is not None:
            edits.append((nodes, dead, g, kept))
    for nodes, dead, g, kept in edits:
        for i in reversed(dead):
            del nodes[i]
        if kept is not None:
            del g.initializer[:]
            g.initializer.extend(kept)


def lowers_imports(model: ModelProto, to: Mapping[str, int]) -> bool:
    for container in (model, *model.functions):
        for entry in container.opset_import:
            d = normalize_domain(entry.domain)
            if d in to and entry.version > to[d]:
                return True
    return False


def lower_imports(model: ModelProto, to: Mapping[str, int]) -> None:
    for container in (model, *model.functions):
        for entry in container.opset_import:
            d = normalize_domain(entry.domain)
            if d in to and entry.version > to[d]:
                entry.version = to[d]


def as_function(node: NodeProto, nodes: list[NodeProto], to, how: str) -> Conversion:
    """Wrap the converted nodes as a function of the node's (distinct, present) inputs."""
    inputs: list[str] = []
    for n in node.input:
        if n and n not in inputs:
            inputs.append(n)
    outputs = [n for n in node.output if n]
    rename = {a: f"x{i}" for i, a in enumerate(inputs)}
    rename.update({a: f"y{i}" for i, a in enumerate(outputs)})
    body = []
    for n in nodes:
        new = NodeProto()
        new.CopyFrom(n)
        _rename_refs(new, rename)
        body.append(new)
    used = {normalize_domain(n.domain) for n in body}
    imports = [helper.make_opsetid(d, v) for d, v in sorted(to.items()) if d in used or d == ""]
    for d in sorted(used - set(to)):
        if d:
            imports.append(helper.make_opsetid(d, 1))
    fn = helper.make_function(REMEDY_DOMAIN, node.op_type, [rename[a] for a in inputs],
                              [rename[a] for a in outputs], body, imports)
    return Conversion(how, fn)


def _rename_refs(node: NodeProto, rename: Mapping[str, str]) -> None:
    for field in (node.input, node.output):
        names = [rename.get(n, n) for n in field]
        del field[:]
        field.extend(names)
    for a in node.attribute:
        graphs = [a.g] if a.type == AttributeProto.GRAPH else (
            list(a.graphs) if a.type == AttributeProto.GRAPHS else [])
        for g in graphs:
            for inner in g.node:
                _rename_refs(inner, rename)
            for v in g.output:
                v.name = rename.get(v.name, v.name)


def call_function(node: NodeProto, fn: FunctionProto) -> None:
    """Point ``node`` at ``fn``: its distinct present inputs and present outputs, in order,
    bind the function's formals (as :func:`as_function` made them)."""
    inputs = list(dict.fromkeys(n for n in node.input if n))
    outputs = [n for n in node.output if n]
    retarget(node, fn)
    del node.input[:]
    node.input.extend(inputs)
    del node.output[:]
    node.output.extend(outputs)
