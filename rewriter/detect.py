"""Find every node a target cannot run: main graph, subgraphs and model-local functions."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import islice

from onnx import FunctionProto, GraphProto, ModelProto

from rewriter.targets import Finding, NodeQuery, Target
from rewriter.typeinfer import (
    OutputTypeMemo,
    declared_protos,
    declared_types,
)
from rewriter.walk import _DOMAIN_ALIASES, function_key, opset_map, subgraphs


@dataclass
class FindingGroup:
    """Identical findings (same target, op, reason and detail) at several places."""

    target: str
    op_label: str
    reason: str
    detail: str
    paths: list[str] = field(default_factory=list)
    remedies: list[str] = field(default_factory=list)
    domain: str = ""
    op_type: str = ""
    version: int | None = None

    @property
    def count(self) -> int:
        return len(self.paths)


@dataclass
class TargetResult:
    target: str
    description: str
    findings: list[Finding]
    confirmed: bool | None = None  # True: a real load agreed; None: not confirmed

    @property
    def runs(self) -> bool:
        return not self.findings


@dataclass
class CheckReport:
    model_path: str
    results: list[TargetResult]

    @property
    def findings(self) -> list[Finding]:
        return [f for r in self.results for f in r.findings]

    @property
    def ok(self) -> bool:
        return all(r.runs for r in self.results)


def find_unsupported(model: ModelProto, target: Target, keep_nodes: bool = False) -> list[Finding]:
    """Static findings of one target over the whole model. With ``keep_nodes`` each finding
    also carries its node, input types and scope opsets (for the rewrite engine)."""
    walker = _Walker(model, target)
    walker.keep_nodes = keep_nodes
    return walker.run()


def _with_node(finding: Finding, node, inputs, types, opsets) -> Finding:
    import dataclasses

    return dataclasses.replace(
        finding, node=node, input_types=tuple(types.get(n) if n else None for n in inputs),
        scope_opsets=dict(opsets),
    )


class _Walker:
    keep_nodes = False

    def __init__(self, model: ModelProto, target: Target) -> None:
        self.model = model
        self.target = target
        self.schemas = target.schemas
        self.functions = {function_key(f.domain, f.name, f.overload): f for f in model.functions}
        self.function_types: dict[tuple, dict[str, str]] = {}
        self.checked_functions: set[tuple] = set()
        self.findings: list[Finding] = []
        self.declared: dict = {}  # value name -> declared TypeProto (with shape), all graphs
        self.output_types = OutputTypeMemo()

    def run(self) -> list[Finding]:
        self.findings.extend(self.target.check_model(self.model))
        opsets = opset_map(self.model.opset_import)
        self._graph(self.model.graph, "graph", opsets, {})
        for key, f in self.functions.items():
            if key not in self.checked_functions:
                self._function(key, f, [], opsets)
        return self.findings

    def _graph(self, graph: GraphProto, path: str, opsets, outer: dict[str, str]) -> None:
        """Walk ``graph`` seeing the ``outer`` types (those of the enclosing graphs); whatever
        the graph adds or overrides is undone afterwards, so ``outer`` is left as it was.
        (Updating ``outer`` in place instead of copying it keeps a model with many subgraphs
        linear in its size.)"""
        types = outer
        before = len(types)
        overridden = {}
        for name, t in declared_types(graph).items():
            if name in types:
                overridden.setdefault(name, types[name])
            types[name] = t
        self.declared.update(declared_protos(graph))
        try:
            self._nodes(graph.node, path, opsets, types)
        finally:
            if not before:
                types.clear()
            else:  # names added since `before` are the last ones in insertion order
                for name in list(islice(reversed(types), len(types) - before)):
                    del types[name]
                types.update(overridden)

    def _function(self, key, f: FunctionProto, input_types: Sequence[str | None], model_opsets):
        self.checked_functions.add(key)
        opsets = dict(model_opsets)
        opsets.update(opset_map(f.opset_import))
        types = {name: t for name, t in zip(f.input, input_types) if t}
        label = f"function {f.domain}:{f.name}" + (f"#{f.overload}" if f.overload else "")
        self._nodes(f.node, label, opsets, types)
        self.function_types[key] = types

    def _nodes(self, nodes: Iterable, path: str, opsets, types: dict[str, str]) -> None:
        # The hot loop of `check`: every protobuf field read here costs a wrapper object, so
        # each is read once per node and shared with the target through the NodeQuery.
        check_node, schemas, functions = self.target.check_node, self.schemas, self.functions
        findings, declared, infer = self.findings, self.declared, self.output_types.infer
        resolve, max_version = schemas.resolve, schemas.max_version
        aliases = _DOMAIN_ALIASES
        for i, node in enumerate(nodes):
            raw_domain = node.domain
            domain = aliases.get(raw_domain, raw_domain)
            opset = opsets.get(domain)
            op_type = node.op_type
            key = (domain, op_type, node.overload) if functions else None
            if key is not None and key in functions:
                in_types = [types.get(n) if n else None for n in node.input]
                if key not in self.checked_functions:
                    self._function(key, functions[key], in_types, opsets)
                body_types = self.function_types.get(key, {})
                f = functions[key]
                for name, inner in zip(node.output, f.output):
                    if name and inner in body_types and name not in types:
                        types[name] = body_types[inner]
                continue
            inputs, outputs = tuple(node.input), tuple(node.output)
            node_path = f"{path}/node {i} ({node.name or op_type})"  # walk.node_label
            finding = check_node(NodeQuery(node, node_path, domain, opset, types, opsets,
                                           declared, inputs, outputs))
            if finding is not None:
                if self.keep_nodes:
                    finding = _with_node(finding, node, inputs, types, opsets)
                findings.append(finding)
            if node.attribute:
                for attr_label, sub in subgraphs(node):
                    self._graph(sub, f"{node_path}/{attr_label}", opsets, types)
            for o in outputs:
                if o and o not in types:
                    break
            else:
                continue  # every output's type is known already
            version = opset or max_version.get(domain)  # a forgotten import
            schema = resolve(domain, op_type, version) if version else None
            for name, t in zip(outputs, infer(node, schema, inputs, outputs, types, op_type,
                                              raw_domain)):
                if name and t and name not in types:
                    types[name] = t


def group_findings(findings: Iterable[Finding], registry=None) -> list[FindingGroup]:
    """Group identical findings, keeping first-seen order."""
    groups: dict[tuple, FindingGroup] = {}
    for f in findings:
        key = (f.target, f.domain, f.op_type, f.version, f.reason, f.detail)
        g = groups.get(key)
        if g is None:
            remedies = registry.remedies_for(f.domain, f.op_type, f.version) if registry else []
            g = groups[key] = FindingGroup(
                f.target, f.op_label, f.reason, f.detail, [], remedies, f.domain, f.op_type,
                f.version,
            )
        g.paths.append(f.path)
    return list(groups.values())
