"""Find where a rewritten model starts to compute something else than the original.

onnx's inliner keeps the output names of the node it replaces, so every rewritten region of
the main graph is bounded by names the original has: the outputs of the original node
(which the nodes that replaced it now compute) and the original values they read. Exposing
those names as extra graph outputs of both models and running both gives the values at every
region's boundary; the first region (in the original's topological order) whose outputs
diverge while its inputs agree is where the divergence starts, and the provenance stamped on
its nodes (``rewriter.plugin``, ``rewriter.rule``, ``rewriter.op``) names the rule.

A rewrite inside an If/Loop/Scan body or a model-local function is seen at the main-graph
node that holds it (the If, the Loop, the function call).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from onnx import FunctionProto, ModelProto, NodeProto, TypeProto, helper

from rewriter.apply.provenance import ProvenanceTable, read_table, stamp_of
from rewriter.graph.opid import OpId
from rewriter.graph.walk import normalize_domain, subgraphs


@dataclass(frozen=True)
class Stamp:
    plugin: str
    rule: str
    op: str = ""

    def as_dict(self) -> dict[str, str]:
        return {"plugin": self.plugin, "rule": self.rule, "op": self.op}


@dataclass
class Region:
    """One original main-graph node and what replaced it in the rewritten model."""

    index: int  # the original node's position in the original main graph
    node_name: str
    op: str  # "domain::op_type" of the original node
    outputs: list[str]
    inputs: list[str]  # original values the region reads (graph inputs and constants left out)
    stamps: list[Stamp] = field(default_factory=list)  # most nodes first
    inside: str = ""  # "subgraph" or "function" when the rewrite is nested in the node

    @property
    def stamp(self) -> Stamp | None:
        """The rule that replaced the node: the stamp naming the node's op (a nested rule's
        nodes name the op they replaced), else the most common one."""
        for s in self.stamps:
            if s.op and s.op == self.op:
                return s
        return self.stamps[0] if self.stamps else None

    @property
    def label(self) -> str:
        name = f"node {self.node_name!r}" if self.node_name else f"node {self.index}"
        where = f", rewritten inside its {self.inside}" if self.inside else ""
        return f"{name} ({self.op}{where})"

    def as_dict(self) -> dict[str, Any]:
        s = self.stamp
        return {
            "index": self.index, "node": self.node_name, "op": self.op,
            "outputs": self.outputs, "inputs": self.inputs, "inside": self.inside or None,
            "plugin": s.plugin if s else None, "rule": s.rule if s else None,
            "stamps": [x.as_dict() for x in self.stamps],
        }


def _op_label(node: NodeProto) -> str:
    return str(OpId(node.domain, node.op_type))


def _stamp_of(node: NodeProto, table: ProvenanceTable | None = None) -> Stamp | None:
    """The node's provenance: from the model's ``table`` (its name or short key), or its
    long stamp (:mod:`rewriter.apply.provenance`)."""
    found = stamp_of(node, table)
    return Stamp(*found) if found else None


def _stamps_inside(node: NodeProto, functions: Mapping, seen: set,
                   table: ProvenanceTable | None = None) -> list[Stamp]:
    """Stamps of the nodes in ``node``'s subgraphs and, for a call of a model-local
    function, in that function (recursively)."""
    out = []
    for _, g in subgraphs(node):
        for inner in g.node:
            s = _stamp_of(inner, table)
            if s:
                out.append(s)
            out.extend(_stamps_inside(inner, functions, seen, table))
    key = (normalize_domain(node.domain), node.op_type)
    fn = functions.get(key)
    if fn is not None and key not in seen:
        seen.add(key)
        for inner in fn.node:
            s = _stamp_of(inner, table)
            if s:
                out.append(s)
            out.extend(_stamps_inside(inner, functions, seen, table))
    return out


def _implicit_inputs(node: NodeProto) -> set[str]:
    """Outer-scope names a node's subgraphs read."""
    names: set[str] = set()
    for _, g in subgraphs(node):
        defined = {i.name for i in g.input} | {t.name for t in g.initializer}
        for inner in g.node:
            defined.update(o for o in inner.output if o)
        for inner in g.node:
            names.update(i for i in inner.input if i and i not in defined)
            names.update(n for n in _implicit_inputs(inner) if n not in defined)
    return names


def _functions(model: ModelProto) -> dict[tuple[str, str], FunctionProto]:
    return {(normalize_domain(f.domain), f.name): f for f in model.functions}


def find_regions(original: ModelProto, rewritten: ModelProto) -> list[Region]:
    """Every main-graph node of ``original`` that ``rewritten`` computes differently, in the
    original's order, with the rules that produced the replacement."""
    graph = original.graph
    original_values = {i.name for i in graph.input} | {t.name for t in graph.initializer}
    original_producer: dict[str, NodeProto] = {}
    for node in graph.node:
        for o in node.output:
            if o:
                original_values.add(o)
                original_producer[o] = node
    constant_free = {i.name for i in graph.input} | {t.name for t in graph.initializer}

    producer: dict[str, NodeProto] = {}
    for node in rewritten.graph.node:
        for o in node.output:
            if o:
                producer[o] = node
    before_functions = {k: f.SerializeToString(deterministic=True)
                        for k, f in _functions(original).items()}
    after_functions = _functions(rewritten)
    changed_functions = {k: f for k, f in after_functions.items()
                         if before_functions.get(k) != f.SerializeToString(deterministic=True)}

    table = read_table(rewritten)
    regions = []
    for index, node in enumerate(graph.node):
        if node.op_type == "Constant" and normalize_domain(node.domain) == "":
            continue
        outputs = [o for o in node.output if o]
        if not outputs or outputs[0] not in producer:
            continue
        replacement = producer[outputs[0]]
        same_node = replacement.SerializeToString(deterministic=True) == \
            node.SerializeToString(deterministic=True)
        calls_changed = (normalize_domain(replacement.domain), replacement.op_type) in \
            changed_functions
        if same_node and not calls_changed:
            continue
        inside = ""
        if same_node or (_op_label(replacement) == _op_label(node) and
                         any(True for _ in subgraphs(replacement))):
            inside = "function" if calls_changed else "subgraph"
        stamps: list[Stamp] = []
        inputs: list[str] = []
        seen_nodes: set[int] = set()
        frontier = [o for o in outputs if o in producer]
        while frontier:
            name = frontier.pop()
            p = producer.get(name)
            if p is None or id(p) in seen_nodes:
                continue
            seen_nodes.add(id(p))
            s = _stamp_of(p, table)
            if s:
                stamps.append(s)
            stamps.extend(_stamps_inside(p, changed_functions, set(), table))
            for i in [*p.input, *sorted(_implicit_inputs(p))]:
                if not i:
                    continue
                if i in original_values:
                    source = original_producer.get(i)
                    is_constant = source is not None and source.op_type == "Constant" and \
                        normalize_domain(source.domain) == ""
                    if i not in constant_free and not is_constant and i not in inputs:
                        inputs.append(i)
                elif i in producer:
                    frontier.append(i)
        counts = Counter(stamps)
        ordered = sorted(counts, key=lambda s: (-counts[s], s.plugin, s.rule))
        regions.append(Region(index, node.name, _op_label(node), outputs, inputs, ordered,
                              inside))
    return regions


def node_regions(model: ModelProto) -> list[Region]:
    """Every main-graph node of ``model`` (Constant nodes left out) as a region of its own,
    in order: for finding the first node a runtime computes differently from the oracle,
    the model being run as it is on both (a node holding subgraphs stands for them)."""
    graph = model.graph
    fixed = {i.name for i in graph.input} | {t.name for t in graph.initializer}
    constants = {o for n in graph.node if n.op_type == "Constant"
                 and normalize_domain(n.domain) == "" for o in n.output}
    regions = []
    for index, node in enumerate(graph.node):
        if node.op_type == "Constant" and normalize_domain(node.domain) == "":
            continue
        outputs = [o for o in node.output if o]
        if not outputs:
            continue
        inputs = [i for i in dict.fromkeys([*node.input, *sorted(_implicit_inputs(node))])
                  if i and i not in fixed and i not in constants]
        regions.append(Region(index, node.name, _op_label(node), outputs, inputs))
    return regions


def expose(model: ModelProto, names: list[str]) -> ModelProto:
    """A copy of ``model`` with ``names`` added as graph outputs (typed where the model or
    onnx's shape inference knows the type)."""
    out = ModelProto()
    out.CopyFrom(model)
    present = {o.name for o in out.graph.output}
    wanted = [n for n in names if n not in present]
    if not wanted:
        return out
    types: dict[str, TypeProto] = {v.name: v.type for v in out.graph.value_info}
    if any(n not in types for n in wanted):
        try:
            from onnx import shape_inference

            inferred = shape_inference.infer_shapes(out, strict_mode=False)
            types.update({v.name: v.type for v in inferred.graph.value_info})
        except Exception:  # noqa: BLE001 - untyped outputs work as well
            pass
    for name in wanted:
        out.graph.output.append(helper.make_value_info(name, types.get(name, TypeProto())))
    return out


@dataclass
class RegionCheck:
    """The boundary values of one region, original against rewritten."""

    region: Region
    outputs: list  # OutputComparison per output
    inputs: list  # OutputComparison per input

    @property
    def diverges(self) -> bool:
        return any(not c.ok for c in self.outputs)

    @property
    def inputs_agree(self) -> bool:
        return all(c.ok for c in self.inputs)

    def as_dict(self) -> dict[str, Any]:
        return {"region": self.region.as_dict(), "diverges": self.diverges,
                "inputs_agree": self.inputs_agree,
                "outputs": [c.as_dict() for c in self.outputs],
                "inputs": [c.as_dict() for c in self.inputs]}


@dataclass
class Localization:
    """Where the divergence starts.

    ``status``: ``found`` (a region whose inputs agree and outputs diverge), ``upstream``
    (the first diverging region already reads diverging values: the divergence starts in
    nodes no rule rewrote), ``outside`` (every region's boundary agrees), ``no-regions``
    (nothing carries provenance) or ``unavailable`` (the models could not be run with the
    extra outputs, or there is no original to run).
    """

    status: str
    message: str
    region: Region | None = None
    checks: list[RegionCheck] = field(default_factory=list)
    input_set: int = 0

    def as_dict(self) -> dict[str, Any]:
        s = self.region.stamp if self.region else None
        return {
            "status": self.status, "message": self.message, "input_set": self.input_set,
            "region": self.region.as_dict() if self.region else None,
            "plugin": s.plugin if s else None, "rule": s.rule if s else None,
            "checks": [c.as_dict() for c in self.checks],
        }


def boundary_names(regions: list[Region]) -> list[str]:
    names: list[str] = []
    for r in regions:
        for n in [*r.inputs, *r.outputs]:
            if n not in names:
                names.append(n)
    return names


def judge(
    regions: list[Region],
    expected: Mapping[str, Any],
    actual: Mapping[str, Any],
    compare_value: Callable[[str, Any, Any], Any],
    input_set: int = 0,
    by_node: bool = False,
) -> Localization:
    """Walk the regions in order and name the first whose outputs diverge (``by_node``:
    the regions are the model's own nodes, :func:`node_regions`, and the messages say so).

    ``compare_value(name, expected, actual)`` returns an object with ``ok`` and
    ``as_dict()`` (an :class:`rewriter.comparison.compare.OutputComparison`).
    """
    checks = []
    first = None
    for region in regions:
        outs = [compare_value(n, expected[n], actual[n]) for n in region.outputs
                if n in expected and n in actual]
        ins = [compare_value(n, expected[n], actual[n]) for n in region.inputs
               if n in expected and n in actual]
        check = RegionCheck(region, outs, ins)
        checks.append(check)
        if first is None and check.diverges:
            first = check
    if first is None and by_node:
        return Localization(
            "outside", "every node's outputs agree: the outputs diverge inside a node "
            "holding subgraphs, or in what the runtime made of several nodes together",
            None, checks, input_set)
    if first is None:
        return Localization(
            "outside", "every rewritten region's boundary values agree: the outputs diverge "
            "in nodes no rule rewrote (the runtimes disagree there)", None, checks, input_set)
    worst = max((c for c in first.outputs if not c.ok),
                key=lambda c: -1.0 if c.max_abs is None else c.max_abs)
    error = (f"max abs error {worst.max_abs:.3g}" if worst.max_abs is not None
             else worst.detail or "values differ")
    region = first.region
    if by_node:
        if not first.inputs_agree:  # (a graph input or constant is never compared)
            bad = [c.name for c in first.inputs if not c.ok]
            return Localization(
                "upstream", f"the first diverging node, {region.label}, already reads "
                f"diverging values ({', '.join(map(repr, bad))})", region, checks, input_set)
        return Localization(
            "found", f"first diverging node: {region.label}: {error} at {worst.name!r}; its "
            "inputs agree", region, checks, input_set)
    if not first.inputs_agree:
        bad = [c.name for c in first.inputs if not c.ok]
        return Localization(
            "upstream", f"the first diverging region, {region.label}, already reads diverging "
            f"values ({', '.join(map(repr, bad))}): the divergence starts before it, in "
            "nodes no rule rewrote", region, checks, input_set)
    s = region.stamp
    by = (f"rule {s.rule!r} of plugin {s.plugin!r}" if s
          else "a change without provenance (no rewriter.rule stamp)")
    return Localization(
        "found", f"first diverging region: {region.label}, rewritten by {by}: {error} at "
        f"{worst.name!r}; its inputs agree", region, checks, input_set)
