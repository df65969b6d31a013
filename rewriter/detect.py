"""Find every node a target cannot run: main graph, subgraphs and model-local functions."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from onnx import FunctionProto, GraphProto, ModelProto

from rewriter.targets import Finding, NodeQuery, Target
from rewriter.typeinfer import declared_protos, declared_types, infer_node_outputs
from rewriter.walk import function_key, node_label, normalize_domain, opset_map, subgraphs


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


def find_unsupported(model: ModelProto, target: Target) -> list[Finding]:
    """Static findings of one target over the whole model."""
    return _Walker(model, target).run()


class _Walker:
    def __init__(self, model: ModelProto, target: Target) -> None:
        self.model = model
        self.target = target
        self.schemas = target.schemas
        self.functions = {function_key(f.domain, f.name, f.overload): f for f in model.functions}
        self.function_types: dict[tuple, dict[str, str]] = {}
        self.checked_functions: set[tuple] = set()
        self.findings: list[Finding] = []
        self.declared: dict = {}  # value name -> declared TypeProto (with shape), all graphs

    def run(self) -> list[Finding]:
        self.findings.extend(self.target.check_model(self.model))
        opsets = opset_map(self.model.opset_import)
        self._graph(self.model.graph, "graph", opsets, {})
        for key, f in self.functions.items():
            if key not in self.checked_functions:
                self._function(key, f, [], opsets)
        return self.findings

    def _graph(self, graph: GraphProto, path: str, opsets, outer: dict[str, str]) -> None:
        types = dict(outer)
        types.update(declared_types(graph))
        self.declared.update(declared_protos(graph))
        self._nodes(graph.node, path, opsets, types)

    def _function(self, key, f: FunctionProto, input_types: Sequence[str | None], model_opsets):
        self.checked_functions.add(key)
        opsets = dict(model_opsets)
        opsets.update(opset_map(f.opset_import))
        types = {name: t for name, t in zip(f.input, input_types) if t}
        label = f"function {f.domain}:{f.name}" + (f"#{f.overload}" if f.overload else "")
        self._nodes(f.node, label, opsets, types)
        self.function_types[key] = types

    def _nodes(self, nodes: Iterable, path: str, opsets, types: dict[str, str]) -> None:
        target, schemas, functions = self.target, self.schemas, self.functions
        for i, node in enumerate(nodes):
            domain = normalize_domain(node.domain)
            opset = opsets.get(domain)
            node_path = None
            key = (domain, node.op_type, node.overload) if functions else None
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
            node_path = f"{path}/{node_label(i, node)}"
            query = NodeQuery(node, node_path, domain, opset, types, opsets, self.declared)
            finding = target.check_node(query)
            if finding is not None:
                self.findings.append(finding)
            if node.attribute:
                for attr_label, sub in subgraphs(node):
                    self._graph(sub, f"{node_path}/{attr_label}", opsets, types)
            if not all(o in types for o in node.output if o):
                version = opset or schemas.max_version.get(domain)  # a forgotten import
                schema = schemas.resolve(domain, node.op_type, version) if version else None
                for name, t in zip(node.output, infer_node_outputs(node, schema, types)):
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
