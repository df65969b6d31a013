"""Find every node a target cannot run: main graph, subgraphs and model-local functions."""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import islice
from operator import attrgetter
from typing import Any

from onnx import FunctionProto, GraphProto, ModelProto, TypeProto

from rewriter.detect.attributes import attribute_findings
from rewriter.detect.ranks import rank_findings
from rewriter.detect.targets import (
    BY_NODE,
    BY_TYPES,
    REFUSED,
    RUNS,
    Confirmation,
    Finding,
    NodeQuery,
    Target,
    op_verdicts_apply,
    refused_node,
)
from rewriter.graph.typeinfer import (
    SPECIAL_OUTPUT_OPS,
    OutputTypeMemo,
    binding_conflict,
    declared_protos,
    declared_types,
)
from rewriter.graph.walk import (
    _DOMAIN_ALIASES,
    function_key,
    opset_map,
    subgraphs,
)


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
    confirmed: bool | None = None  # True: a real load (and run) agreed; None: not confirmed
    confirmation: str = ""  # how: "loaded and ran once on generated inputs", why not run...
    # per finding (path, op_type): the remedy rewrite would apply, or "none: WHY" (api.check)
    plan: dict = field(default_factory=dict)
    # what is worth knowing but no finding: onnx's shape inference failing on a node the
    # runtime runs (rewriter.detect.ranks.shape_warnings)
    warnings: list[str] = field(default_factory=list)

    @property
    def runs(self) -> bool:
        return not self.findings


@dataclass
class CheckReport:
    model_path: str
    results: list[TargetResult]
    size: dict[str, Any] | None = None  # nodes, initializer and file bytes (rewriter.report.size)

    @property
    def findings(self) -> list[Finding]:
        return [f for r in self.results for f in r.findings]

    @property
    def ok(self) -> bool:
        return all(r.runs for r in self.results)


def find_unsupported(model: ModelProto, target: Target, keep_nodes: bool = False,
                     ranks: bool | None = None) -> list[Finding]:
    """Static findings of one target over the whole model. With ``keep_nodes`` each finding
    also carries its node, input types and scope opsets (for the rewrite engine).
    ``ranks``: also flag nodes whose input ranks contradict their schema (``input-rank``,
    :mod:`rewriter.detect.ranks`); by default with ``keep_nodes`` (the rewrite engine's
    walks, which remedy them), not for the question whether a runtime can run a model
    (an oracle runs the original: OpenVINO multiplies a rank-3 ``Gemm`` batch by batch)."""
    walker = _Walker(model, target)
    walker.keep_nodes = keep_nodes
    walker.ranks = keep_nodes if ranks is None else ranks
    return walker.run()


def confirm_model(model: ModelProto, target: Target, base_dir=None,
                  types: Mapping[str, str] | None = None,
                  ) -> tuple[Confirmation, list[Finding]]:
    """Really load ``model`` in ``target``'s runtime (and run it once, where the target
    does): the confirmation, and a ``runtime-refused`` finding when the runtime refused it,
    pointed at the node its message names (with the node, its input types from ``types``
    and its scope's opsets, for the rewrite engine, when ``types`` is given)."""
    from rewriter.detect.targets import runtime_refusal

    confirmation = target.confirmation(model, base_dir)
    if confirmation.refusal is None:
        return confirmation, []
    traced = list(confirmation.findings)
    if any(f.op_type for f in traced):  # the target traced the refusal to a node at fault
        return confirmation, traced
    # (traced to the model as a whole, a panic: a prefix may still name the node)
    finding = traced[0] if traced else runtime_refusal(target.name, model,
                                                       confirmation.refusal)
    if not finding.op_type:  # the runtime names no node: ask it about prefixes
        from rewriter.detect.bisect import bisect_refusal

        found = bisect_refusal(model, target, base_dir)
        if found is not None:
            whole = ("" if found.refusal == confirmation.refusal else
                     f"; the whole model: {_one_line(confirmation.refusal, 160)}")
            detail = found.detail(target.name, whole)
            finding = finding_at(model, target.name, found.index, "runtime-refused", detail,
                                 types)
            return confirmation, [finding]
        if traced:
            return confirmation, traced
    if types is not None and finding.op_type:
        site = refused_node(model, confirmation.refusal)
        finding = _with_node(finding, site.node, tuple(site.node.input), types,
                             site.scope.opsets)
    return confirmation, [finding]


def _one_line(text: str, limit: int) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[:limit - 1] + "…"


def finding_at(model: ModelProto, target: str, index: int, reason: str, detail: str,
               types: Mapping[str, str] | None = None) -> Finding:
    """A finding on the main-graph node at ``index`` (with the node, its input types from
    ``types`` and its scope's opsets, for the rewrite engine, when ``types`` is given)."""
    from rewriter.graph.walk import main_node_site

    site = main_node_site(model, index)
    finding = Finding(target, site.path, site.domain, site.node.op_type,
                      site.opset_version, reason, detail, site.node.name)
    if types is None:
        return finding
    return _with_node(finding, site.node, tuple(site.node.input), types, site.scope.opsets)


def confirms_here(model: ModelProto, target: Target, base_dir=None) -> bool:
    """Whether the target confirms ``model`` by default (its own size rule), given what
    is at hand: a model with external data only with the folder that holds it."""
    from pathlib import Path

    from rewriter.detect.targets import model_size
    from rewriter.graph.walk import iter_tensors
    from rewriter.io.model import LoadedModel

    if base_dir is None and any(t.data_location == t.EXTERNAL for _, t in iter_tensors(model)):
        return False
    size = model_size(model, base_dir)
    return target.wants_confirm(LoadedModel(model, Path("<model>"), size))


@dataclass
class Detection:
    """One target's walk over a model, with what the rewrite engine reuses afterwards."""

    findings: list[Finding]
    declared: dict[str, TypeProto]  # declared value types (with shapes), every graph
    main_types: dict[str, str]  # value types of the main graph at the end of the walk
    produced: set[str]  # names the main graph's nodes produce
    owners: set[str]  # outputs of main-graph nodes that hold subgraphs
    in_main: set[int]  # ids of the findings whose node is in the main graph
    walker: _Walker = field(repr=False)
    # the runtime's answer when the walk found nothing and the model was confirmed
    confirmation: Confirmation | None = None
    base_dir: Any = None  # where the model's external data lies (for confirmations)
    # False: every op of the model runs by the op inventory alone (see :func:`detect`): no
    # walk, so no types (``declared`` and ``main_types`` are empty)
    walked: bool = True
    # arguments bound to one type parameter that disagree, on nodes reading a value typed
    # from the plan (``typing``): the rewrite would break them
    conflicts: list[str] = field(default_factory=list)


def detect(model: ModelProto, target: Target, *, confirm: bool | None = None,
           base_dir=None, record: bool = True,
           main_io: Sequence[tuple] | None = None, inventory: bool = True,
           main_holders: frozenset[int] | None = None,
           typing: Callable[[Finding, Mapping], Sequence[str | None] | None] | None = None,
           ) -> Detection:
    """:func:`find_unsupported` with ``keep_nodes``, keeping what :func:`recheck` needs.

    When the walk finds nothing, the model is confirmed (:func:`confirm_model`: loaded, and
    run once where the target does) if ``confirm`` says so, or by default when the target
    confirms models of that size (:func:`confirms_here`); a refusal is a finding on the node
    the runtime names, which the engine remedies like any other. ``record=False`` leaves
    out what only :func:`recheck` needs (main-graph names produced, owners of subgraphs).
    ``main_io``: each main-graph node's (inputs, outputs), as the load read them
    (:attr:`rewriter.io.model.LoadedModel.main_io`); ``main_holders``: with it, the
    positions of the main-graph nodes holding subgraphs (no node's attributes are read).

    With ``record=False`` and ``confirm=False`` (``check``), the model's op inventory comes
    first (:func:`runs_by_inventory`): when the target's ``check_op`` says every op runs,
    there is no walk (``Detection.walked`` is False, no types are kept).

    ``typing`` (the rewrite engine's plan): given a finding and the declared types, the
    output types its node will have once its remedy is spliced, or None; they type the
    outputs no schema types, so that the nodes downstream are judged with their types in
    this walk, and each node reading such a value has its arguments' agreement on a type
    parameter checked (``Detection.conflicts``), as the re-check after the splice did."""
    if inventory and not record and confirm is False:
        model_findings = runs_by_inventory(model, target)
        if model_findings is not None:
            walker = _Walker(model, target)
            walker.findings = model_findings
            return Detection(model_findings, {}, {}, set(), set(), set(), walker,
                             walked=False)
    walker = _Walker(model, target)
    walker.keep_nodes = True
    walker.record = record
    walker.main_io = main_io
    walker.main_holders = main_holders
    walker.typing = typing
    findings = walker.run()
    walker.from_plan, walker.planned_by = set(), {}  # (the walk's own: not kept)
    confirmation = None
    if not findings and (confirm if confirm is not None
                         else confirms_here(model, target, base_dir)):
        confirmation, findings = confirm_model(model, target, base_dir, walker.main_types)
        walker.findings = findings
        for f in findings:
            site = refused_node(model, f.detail) if f.node is not None else None
            if site is not None and site.scope.graph is model.graph:
                walker.in_main.add(id(f))
    return Detection(findings, walker.declared, walker.main_types, walker.produced,
                     walker.owners, walker.in_main, walker, confirmation, base_dir,
                     conflicts=walker.conflicts)


def runs_by_inventory(model: ModelProto, target: Target) -> list[Finding] | None:
    """The target's model-level findings when every distinct (domain, op, imported version)
    of the model runs by ``target.check_op`` (:data:`RUNS`; the op counts are read C-level,
    no node is typed) and onnx's inference shows no rank contradiction; None when a walk is
    needed: an op refused or depending on more, model-local functions, a target whose
    ``check_op`` does not speak for its ``check_node``, a rank problem."""
    from rewriter.detect.ranks import rank_problems
    from rewriter.graph.walk import op_counts

    if model.functions or not op_verdicts_apply(target):
        return None
    opsets = opset_map(model.opset_import)
    ops = [(domain, op_type, opsets.get(domain)) for domain, op_type in op_counts(model)]
    if any(target.check_op(*op) != RUNS for op in ops):
        return None  # (asked before check_model, which the walk calls)
    findings = target.check_model(model)
    if any(target.check_op(*op) != RUNS for op in ops):
        return None  # check_model registered the model's own kernels, and that changed it
    if rank_problems(model):
        return None  # rank findings carry their input types: the walk gives them
    return findings


@dataclass
class Recheck:
    """What :func:`recheck` found: the findings of the nodes it checked, and type conflicts
    (a value whose type the rewrite changed, operands that no longer agree)."""

    findings: list[Finding]
    conflicts: list[str]
    checked: int  # nodes checked again (outside the bodies the plan had proven)
    types: dict[str, str]  # the main graph's value types after the rewrite


# A replaced node's output -> (token, output index, the replaced node, whose input names are
# read); the engine's ``body_outputs(token, input types)`` returns the output types of the
# body it spliced in for those input types, or None when the plan does not prove the body
# for them.
Replaced = Mapping[str, tuple[Any, int, Any]]


@dataclass
class SplicedPositions:
    """Where a re-check looks in a spliced main graph: positions in the new node list, in
    order, as the splice filled them (the other body nodes are proven by the plan)."""

    # (arrays of machine integers: a list of int objects is ~40 bytes a position, 12 MiB
    # at 300k nodes)
    kept: array = field(default_factory=lambda: array("q"))  # nodes kept as they were
    made: array = field(default_factory=lambda: array("q"))  # ones making a call's outputs
    # kept nodes with attributes or without outputs: among them the subgraph holders and
    # the sinks, the only kept nodes checked again when no value changed type
    holders: array = field(default_factory=lambda: array("q"))

    def clear(self) -> None:
        """Forget every position (the nodes were renumbered)."""
        del self.kept[:], self.made[:], self.holders[:]

    def __bool__(self) -> bool:
        return bool(self.kept or self.made)

    def merged(self) -> list[int]:
        """The kept and made positions together, in order."""
        return sorted(self.kept + self.made)


def recheck(
    model: ModelProto, target: Target, before: Detection, replaced: Replaced,
    body_outputs: Callable[[Any, tuple], Sequence[str | None] | None],
    visit: SplicedPositions | None = None,
) -> Recheck | None:
    """The target re-check of a rewritten model, done only where the rewrite can have
    changed a verdict; None when that cannot be proven (the caller then walks it all).

    ``model`` is ``before``'s model with main-graph nodes replaced by decomposition bodies
    the planner checked node by node against ``target`` (for the replaced node's input
    types). A node outside the bodies keeps its earlier verdict unless a value it reads
    changed type: the output of a replaced node whose body gives a type the first walk did
    not know (or another), and so on downstream. Those nodes, nodes holding subgraphs
    (their bodies read outer values implicitly) and every subgraph are checked again, with
    the same walker as :func:`find_unsupported`; a body whose inputs changed type is asked
    of ``body_outputs``. Not for models with local functions (the caller walks those).
    When the runtime refused ``before``'s model (a confirmation), the rewritten model is
    confirmed again if nothing else is found. ``visit``: the positions of the main graph's
    nodes to look at, as the splice gave them (the nodes it kept and the body nodes making
    a call's outputs; the other body nodes are proven): no pass over every node of the
    result; when no body output changes type, only the holders among the kept nodes.
    """
    walker = _Walker(model, target)
    walker.keep_nodes = True
    first = before.walker  # same target and schemas: its memos hold
    walker.output_types = first.output_types
    if first.signatures is not None:
        walker.signatures, walker.op_modes, walker.op_verdicts = (
            first.signatures, first.op_modes, first.op_verdicts)
    result = walker.recheck(before, replaced, body_outputs, visit)
    refused = before.confirmation is not None and before.confirmation.refusal is not None
    if result is not None and refused and not result.findings:
        # the runtime refused the model before: ask it again about the rewritten one (it
        # may name the next node it refuses)
        _, result.findings = confirm_model(model, target, before.base_dir, result.types)
    return result


_ASK = object()  # a signature whose nodes are asked one by one (BY_NODE)
_CHANGED = object()  # the re-check's quick path met a changed type
_EACH = (_ASK, None)  # a node asked and typed on its own (no signatures)


@dataclass(frozen=True)
class _Verdict:
    """A target's finding on one node, for every node of its op or signature."""

    finding: Finding

    def at(self, path: str, node, in_sig: tuple, opsets, keep_nodes: bool) -> Finding:
        """The finding on ``node`` at ``path`` (``in_sig``: its input types, "" for an
        empty input), with its node, input types and opsets when ``keep_nodes``."""
        f = self.finding
        if keep_nodes:
            return Finding(f.target, path, f.domain, f.op_type, f.version, f.reason,
                           f.detail, node.name, node, tuple([t or None for t in in_sig]),
                           opsets)  # (shared by the scope's findings)
        return Finding(f.target, path, f.domain, f.op_type, f.version, f.reason, f.detail,
                       node.name)


_INPUTS, _OUTPUTS = attrgetter("input"), attrgetter("output")


def _with_node(finding: Finding, node, inputs, types, opsets) -> Finding:
    """``finding`` with its node, input types and scope opsets (dataclasses.replace, the
    fields spelled out: a rewrite makes one per finding, and replace is ten times slower)."""
    get = types.get
    return Finding(
        finding.target, finding.path, finding.domain, finding.op_type, finding.version,
        finding.reason, finding.detail, finding.node_name, node,
        tuple([get(n) if n else None for n in inputs]), opsets,
    )


class _Walker:
    keep_nodes = False
    ranks = True  # flag input-rank contradictions too (rewriter.detect.ranks)
    record = False  # keep the main graph's types, produced names and subgraph owners

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
        # (domain, op, imported version, input types, output types) -> (verdict, output
        # types) (see _signature); None: every node asked and typed on its own, as before
        # the signatures (kept to test that both find the same)
        self.signatures: dict[tuple, tuple] | None = {}
        self.by_op = op_verdicts_apply(target)  # whether target.check_op may be used
        self.main_io: Sequence[tuple] | None = None  # LoadedModel.main_io, when given
        self.main_holders: frozenset[int] | None = None  # and LoadedModel.main_holders
        self.op_modes: dict[tuple, str] = {}  # (domain, op, version) -> target.check_op
        self.op_verdicts: dict[tuple, _Verdict | None] = {}  # the REFUSED ops' verdicts
        self.main_types: dict[str, str] = {}
        self.produced: set[str] = set()
        self.owners: set[str] = set()
        self.in_main: set[int] = set()
        # signature -> whether its arguments agree on their type parameters (re-check)
        self.agreement: dict[tuple, bool] = {}
        # the output types of a finding's node from its remedy (see detect); the values
        # typed so and those computed from them, and disagreements on nodes reading them
        self.typing: Callable[[Finding, Mapping], Sequence[str | None] | None] | None = None
        self.from_plan: set[str] = set()
        self.planned_by: dict[str, str] = {}  # value typed from the plan -> its op's label
        self.conflicts: list[str] = []

    def run(self) -> list[Finding]:
        self.findings.extend(self.target.check_model(self.model))
        opsets = opset_map(self.model.opset_import)
        self._graph(self.model.graph, "graph", opsets, self.main_types, main=True)
        for key, f in self.functions.items():
            if key not in self.checked_functions:
                self._function(key, f, [], opsets)
        self.findings.extend(self.target.check_done(self.model, self.findings))
        self._add_rank_findings()
        return self.findings

    def _add_rank_findings(self) -> None:
        """Nodes whose input ranks contradict their schema (invalid on every target), unless
        the target flagged them already (:mod:`rewriter.detect.ranks`)."""
        if not self.ranks:
            return
        self.findings.extend(rank_findings(
            self.model, self.target.name, {f.path for f in self.findings}, self.main_types,
            self.keep_nodes, self.in_main if self.record else None))
        # and nodes giving as an attribute what their schema takes as an input
        self.findings.extend(attribute_findings(
            self.model, self.target.name, {f.path for f in self.findings}, self.main_types,
            self.keep_nodes, self.in_main if self.record else None))

    def _graph(self, graph: GraphProto, path: str, opsets, outer: dict[str, str],
               main: bool = False) -> None:
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
        if main:  # the main graph's types stay for the caller (see Detection)
            self._nodes(graph.node, path, opsets, types, self.record, self.main_io,
                        self.main_holders)
            return
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

    def _nodes(self, nodes: Iterable, path: str, opsets, types: dict[str, str],
               record: bool = False, io: Sequence[tuple] | None = None,
               holders: frozenset[int] | None = None) -> None:
        # The hot loop of `check`: every protobuf field read here costs a wrapper object, so
        # each is read once per node. Nodes are grouped by signature (op, imported version,
        # input and output types, empty inputs): the target is asked once per op or once
        # per signature where its check_op allows (else per node, through a NodeQuery), and
        # output types are inferred once per signature (per node for SPECIAL_OUTPUT_OPS).
        check_node, schemas, functions = self.target.check_node, self.schemas, self.functions
        findings, declared, infer = self.findings, self.declared, self.output_types.infer
        resolve, max_version = schemas.resolve, schemas.max_version
        aliases, keep_nodes, memo = _DOMAIN_ALIASES, self.keep_nodes, self.signatures
        produce = self.produced.update if record else None
        typing, from_plan, agreement = self.typing, self.from_plan, self.agreement
        finding = None
        get = types.get
        if io is None or len(io) != len(nodes):  # each node's input and output names
            io = zip(map(tuple, map(_INPUTS, nodes)), map(tuple, map(_OUTPUTS, nodes)))
            holders = None  # (read with them, or not at all)
        for i, (node, (inputs, outputs)) in enumerate(zip(nodes, io)):
            raw_domain = node.domain
            domain = aliases.get(raw_domain, raw_domain)
            opset = opsets.get(domain)
            op_type = node.op_type
            if functions and (domain, op_type, node.overload) in functions:
                self._call(node, (domain, op_type, node.overload), types, opsets, produce)
                continue
            if produce is not None:
                produce(outputs)
            in_sig = tuple([get(n) if n else "" for n in inputs])  # "": an empty input
            out_sig = tuple([get(n) if n else None for n in outputs])
            key = (domain, op_type, opset, in_sig, out_sig)
            entry = memo.get(key) if memo is not None else _EACH
            if entry is None:
                entry = self._signature(key, node, raw_domain, inputs, outputs, types,
                                        opsets, f"{path}/node {i} ({node.name or op_type})")
            verdict, inferred = entry
            if verdict is not None:
                node_path = f"{path}/node {i} ({node.name or op_type})"  # walk.node_label
                if verdict is _ASK:
                    finding = check_node(NodeQuery(node, node_path, domain, opset, types,
                                                   opsets, declared, inputs, outputs))
                    if finding is not None and keep_nodes:
                        finding = _with_node(finding, node, inputs, types, opsets)
                else:
                    finding = verdict.at(node_path, node, in_sig, opsets, keep_nodes)
                if finding is not None:
                    if from_plan and not from_plan.isdisjoint(inputs):
                        finding = self._typed_by_remedy(finding, inputs, types)
                    if record:
                        self.in_main.add(id(finding))
                    findings.append(finding)
            if i in holders if holders is not None else node.attribute:
                for attr_label, sub in subgraphs(node):
                    if produce is not None:
                        self.owners.update(outputs)
                    node_path = f"{path}/node {i} ({node.name or op_type})"
                    self._graph(sub, f"{node_path}/{attr_label}", opsets, types)
            if inferred is None:  # inferred per node (SPECIAL_OUTPUT_OPS, or no memo)
                if None not in out_sig:
                    inferred = ()  # every output's type is known already
                else:
                    version = opset or max_version.get(domain)  # a forgotten import
                    schema = resolve(domain, op_type, version) if version else None
                    inferred = infer(node, schema, inputs, outputs, types, op_type,
                                     raw_domain)
            for name, t in zip(outputs, inferred):
                if name and t and name not in types:
                    types[name] = t
            if typing is not None:
                if from_plan and not from_plan.isdisjoint(inputs):
                    from_plan.update(outputs)  # computed from such values: such values
                    if entry[1] is None or not agreement.get(key):
                        problem = self._disagreement(key, entry[1] is not None, inputs,
                                                     outputs, types)
                        if problem:
                            self.conflicts.append(
                                f"{path}/node {i} ({node.name or op_type}): {problem}")
                if verdict is not None and finding is not None and None in out_sig:
                    planned = typing(finding, declared)
                    for name, t in zip(outputs, planned or ()):
                        if name and t and name not in types:
                            types[name] = t
                            from_plan.add(name)
                            self.planned_by[name] = finding.op_label

    def _typed_by_remedy(self, finding: Finding, inputs, types) -> Finding:
        """``finding`` on a node reading a value typed from the plan, saying so: the node
        is as the model has it, the type is what the remedy upstream will make."""
        import dataclasses

        name = next(n for n in inputs if n in self.from_plan)
        origin = self.planned_by.get(name)
        why = (f"its input {name!r} is {types.get(name)} once {origin} is replaced by its "
               "remedy" if origin else f"its input {name!r} is typed from the remedies "
               "planned upstream")
        return dataclasses.replace(finding, detail=f"{finding.detail}; {why}")

    def _disagreement(self, key, per_key: bool, inputs, outputs, types, schema=None
                      ) -> str | None:
        """How the node's arguments bound to one type parameter disagree (``key``: its
        signature), or None; asked once per signature when ``per_key`` (its output types
        follow from the key). For a node reading a value typed from the plan (see
        :func:`detect`) and for each node the re-check looks at."""
        if per_key and self.agreement.get(key):
            return None
        if schema is None:
            domain, op_type, opset = key[:3]
            version = opset or self.schemas.max_version.get(domain)
            schema = self.schemas.resolve(domain, op_type, version) if version else None
        problem = binding_conflict(schema, inputs, outputs, types) if schema else None
        if per_key:
            self.agreement[key] = problem is None
        return problem

    def _call(self, node, key, types: dict[str, str], opsets, produce) -> None:
        """A call of a model-local function: its body walked once (for the first call's
        input types), its outputs typed from the body's."""
        if produce is not None:
            produce(node.output)
        f = self.functions[key]
        if key not in self.checked_functions:
            in_types = [types.get(n) if n else None for n in node.input]
            self._function(key, f, in_types, opsets)
        body_types = self.function_types.get(key, {})
        for name, inner in zip(node.output, f.output):
            if name and inner in body_types and name not in types:
                types[name] = body_types[inner]

    def _signature(self, key, node, raw_domain, inputs, outputs, types, opsets, node_path):
        """(verdict, output types) of a signature not seen yet in this walk: the verdict
        None (runs), a :class:`_Verdict` shared by every node of the signature, or _ASK
        (ask the target per node); the output types None where they are inferred per node.
        Remembered for the signature."""
        domain, op_type, opset, in_sig, out_sig = key
        target = self.target
        mode = self.op_modes.get(key[:3])
        if mode is None:
            mode = self.op_modes[key[:3]] = (
                target.check_op(domain, op_type, opset) if self.by_op else BY_NODE)
        if mode == RUNS:
            verdict = None
        elif mode == REFUSED or mode == BY_TYPES:
            verdict = self.op_verdicts.get(key[:3], ...) if mode == REFUSED else ...
            if verdict is ...:
                asked = target.check_node(NodeQuery(
                    node, node_path, domain, opset, types, opsets, self.declared, inputs,
                    outputs))
                verdict = None if asked is None else _Verdict(asked)
                if mode == REFUSED:
                    self.op_verdicts[key[:3]] = verdict
        else:
            verdict = _ASK
        inferred = None
        if not (op_type in SPECIAL_OUTPUT_OPS and domain == ""):
            version = opset or self.schemas.max_version.get(domain)  # a forgotten import
            schema = self.schemas.resolve(domain, op_type, version) if version else None
            inferred = tuple(self.output_types.infer(node, schema, inputs, outputs, types,
                                                     op_type, raw_domain))
        entry = self.signatures[key] = (verdict, inferred)
        return entry

    # -- the re-check of a rewritten model (see :func:`recheck`) ----------------------------

    def recheck(self, before: Detection, replaced: Replaced, body_outputs,
                visit: SplicedPositions | None = None) -> Recheck | None:
        model = self.model
        if model.functions or before.walker.functions:
            return None  # calls read their bodies' types: walk those models whole
        self.findings.extend(self.target.check_model(model))
        opsets = opset_map(model.opset_import)
        graph = model.graph
        first = before.main_types
        stated = declared_types(graph)
        changed = {name for name, t in stated.items() if first.get(name) != t}
        conflicts: list[str] = []
        self.declared.update(declared_protos(graph))
        owners = before.owners
        if visit and not changed:
            found = len(self.findings)
            quick = self._recheck_unchanged(before, replaced, body_outputs, visit, opsets,
                                            stated)
            if quick is not _CHANGED:
                return quick
            del self.findings[found:]  # a type changed after all: the pass below
        types = dict(first)
        types.update((name, stated[name]) for name in changed)
        old_kept = before.produced.difference(replaced)
        special = owners.union(replaced)
        seen: set[str] = set()
        checked = 0
        # One pass; per node only C-level set operations unless the node needs a verdict.
        nodes = graph.node
        for i, node in (((i, nodes[i]) for i in visit.merged()) if visit
                        else enumerate(nodes)):
            outputs = node.output
            if special.isdisjoint(outputs):
                if old_kept.issuperset(outputs):  # a node the rewrite did not touch...
                    if not outputs or (changed and not changed.isdisjoint(node.input)):
                        checked += 1  # ...reading a value whose type changed
                        self._check_again(node, i, opsets, types, stated, changed, conflicts)
                continue  # (else a node inside a spliced body: proven by the plan)
            if not owners.isdisjoint(outputs):  # its subgraphs read outer values unseen
                checked += 1
                self._check_again(node, i, opsets, types, stated, changed, conflicts)
                continue
            for o in outputs:  # a spliced body's last node: proven by the plan...
                entry = replaced.get(o)
                if entry is None:
                    continue
                seen.add(o)
                token, index, call = entry
                in_types = tuple([types.get(n) if n else None for n in call.input])
                body = body_outputs(token, in_types)  # ...for these input types
                if body is None:
                    return None
                new, old = body[index] if index < len(body) else None, types.get(o)
                if not new or new == old:
                    continue
                if old:
                    conflicts.append(f"the remedy for {o!r} changes its type from {old} to "
                                     f"{new}")
                if o not in stated:
                    types[o] = new
                    changed.add(o)
        if len(seen) != len(replaced):
            return None  # an output no body node produces (passed through): walk it all
        self.main_types = types
        self._add_rank_findings()  # a stale declared shape forgotten may show one
        return Recheck(self.findings, conflicts, checked, types)

    def _recheck_unchanged(self, before: Detection, replaced: Replaced, body_outputs,
                           visit: SplicedPositions, opsets, stated):
        """:meth:`recheck` when no declared type changed, as long as no body output changes
        type either: then no kept node reads a changed value, and only the holders of
        subgraphs and the sinks among them are checked again. ``_CHANGED`` when some type
        changes (the caller's pass over every kept node then follows), else as recheck.
        The first walk's types are taken over, not copied (undone when a type changed)."""
        nodes = self.model.graph.node
        get = before.main_types.get
        seen = 0
        for i in visit.made:
            for o in nodes[i].output:
                entry = replaced.get(o)
                if entry is None:
                    continue
                seen += 1
                token, index, call = entry
                body = body_outputs(token, tuple([get(n) if n else None for n in call.input]))
                if body is None:
                    return None
                new = body[index] if index < len(body) else None
                if new and new != get(o):
                    return _CHANGED
        if seen != len(replaced):
            return None  # an output no body node produces (passed through): walk it all
        owners, changed, conflicts, checked = before.owners, set(), [], 0
        types = before.main_types
        undo: list[tuple[str, str | None]] = []  # (a node's checks write its outputs' types)
        for i in visit.holders:
            node = nodes[i]
            outputs = node.output
            if not outputs or not owners.isdisjoint(outputs):
                checked += 1
                undo.extend((name, types.get(name)) for name in outputs)
                self._check_again(node, i, opsets, types, stated, changed, conflicts)
        if changed:
            for name, old in reversed(undo):  # the first walk's types, for the caller's pass
                if old is None:
                    types.pop(name, None)
                else:
                    types[name] = old
            return _CHANGED
        self.main_types = types
        self._add_rank_findings()
        return Recheck(self.findings, conflicts, checked, types)

    def _check_again(self, node, i, opsets, types, stated, changed, conflicts) -> None:
        """One node of the re-check: the target's verdict, its subgraphs, its output types
        (an inferred type that differs from the earlier one is a change downstream) and
        whether its arguments agree on their type parameters; verdict, output types and
        agreement once per signature, as in :meth:`_nodes` (the first walk's memo)."""
        raw_domain = node.domain
        domain = _DOMAIN_ALIASES.get(raw_domain, raw_domain)
        opset = opsets.get(domain)
        op_type = node.op_type
        inputs, outputs = tuple(node.input), tuple(node.output)
        get = types.get
        in_sig = tuple([get(n) if n else "" for n in inputs])
        out_sig = tuple([get(n) if n else None for n in outputs])
        key = (domain, op_type, opset, in_sig, out_sig)
        memo = self.signatures
        entry = memo.get(key) if memo is not None else _EACH
        node_path = f"graph/node {i} ({node.name or op_type})"
        if entry is None:
            entry = self._signature(key, node, raw_domain, inputs, outputs, types, opsets,
                                    node_path)
        verdict, inferred = entry
        if verdict is _ASK:
            finding = self.target.check_node(NodeQuery(
                node, node_path, domain, opset, types, opsets, self.declared, inputs, outputs))
            if finding is not None:
                self.findings.append(_with_node(finding, node, inputs, types, opsets))
        elif verdict is not None:
            self.findings.append(verdict.at(node_path, node, in_sig, opsets, True))
        if node.attribute:
            for attr_label, sub in subgraphs(node):
                self._graph(sub, f"{node_path}/{attr_label}", opsets, types)
        by_key = inferred is not None  # typed per signature: agreement is per signature too
        schema = None
        if not by_key:
            version = opset or self.schemas.max_version.get(domain)
            schema = self.schemas.resolve(domain, op_type, version) if version else None
            inferred = self.output_types.infer(node, schema, inputs, outputs, types, op_type,
                                               raw_domain)
        for name, t in zip(outputs, inferred):
            if name and t and name not in stated and types.get(name) != t:
                types[name] = t
                changed.add(name)
        # the types it reads are the key's (outputs: declared, else inferred from the key)
        problem = self._disagreement(key, by_key, inputs, outputs, types, schema)
        if problem:
            conflicts.append(f"{node_path}: {problem}")


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
