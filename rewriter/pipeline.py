"""rewrite: plan a remedy for every finding, apply remedies to a fixed point, verify.

Planning happens first: if any finding has no remedy, nothing is changed and one error lists
them all (unless ``partial``). Decompositions become FunctionProtos spliced in by onnx's
inliner (``rewriter.functions``); passes handle whole-model changes such as opset conversion.
"""

from __future__ import annotations

import contextlib
import gc
import os
import threading
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from onnx import FunctionProto, ModelProto, NodeProto

from rewriter.detect import find_unsupported
from rewriter.errors import EXIT_FINDINGS, RewriterError
from rewriter.functions import (
    REMEDY_DOMAIN,
    DecompositionContext,
    build_function,
    retarget,
    specialise,
    splice,
)
from rewriter.manager import Plugins
from rewriter.passes import PassContext, RewritePass, instantiate
from rewriter.registry import DecompositionEntry
from rewriter.targets import Finding, NodeQuery, Target
from rewriter.typeinfer import infer_node_outputs
from rewriter.walk import iter_scopes, normalize_domain, opset_map

MAX_ROUNDS = 8
PREFER = ("decompose", "kernel")  # --prefer: which remedy wins when both exist
CONTRIB_DOMAIN = "ai.onnx.contrib"
_LOWERING_DOMAIN = "rewriter.lowering"
MAX_DEPTH = 4


class UnfixableError(RewriterError):
    """Some findings have no remedy; nothing was changed."""

    exit_code = EXIT_FINDINGS

    def __init__(self, findings: list[Finding], why: dict[int, str]) -> None:
        self.findings = findings
        groups: dict[tuple, int] = {}
        for f in findings:
            key = (f.target, f.op_label, f.detail, why.get(id(f), ""))
            groups[key] = groups.get(key, 0) + 1
        # (target, op, what the target lacks, why no remedy applies, count) per distinct
        # failure, for callers that group them
        self.groups = [(t, op, detail, reason, n) for (t, op, detail, reason), n in groups.items()]
        parts = []
        for t, op, detail, reason, n in self.groups:
            text = f"{t}: {op} ×{n}: {detail}"
            if reason and reason != detail:
                text += f" — no remedy: {reason}"
            parts.append(text)
        super().__init__(
            f"{len(findings)} finding(s) have no remedy, nothing was changed: " + "; ".join(parts)
        )


@dataclass
class Candidate:
    """One remedy a plugin offers (or declines) for one finding."""

    kind: str
    plugin: str
    rule: str
    accepted: bool
    why: str = ""
    function: FunctionProto | None = None
    rewrite_pass: RewritePass | None = None
    relevant: bool = False  # a pass this kind of finding is about: its "why" is the one shown
    nested: list[tuple[str, str, str, str]] = field(default_factory=list)  # lowered inside
    kernel: Any = None  # a rewriter.targets.KernelRemedy (kind "kernel")


@dataclass
class ModelStats:
    nodes: int
    ops: Counter

    @classmethod
    def of(cls, model: ModelProto) -> ModelStats:
        ops: Counter = Counter()
        for scope in iter_scopes(model):
            for node in scope.nodes:
                ops[f"{normalize_domain(node.domain) or 'ai.onnx'}::{node.op_type}"] += 1
        return cls(sum(ops.values()), ops)


@dataclass
class RewriteReport:
    model: str
    targets: list[str]
    output: str | None = None
    dry_run: bool = False
    before: ModelStats | None = None
    after: ModelStats | None = None
    applied: Counter = field(default_factory=Counter)  # (kind, plugin, rule, op) -> nodes
    remaining: list[Finding] = field(default_factory=list)
    explain: list[dict] = field(default_factory=list)
    verification: dict[str, str] = field(default_factory=dict)
    rounds: int = 0
    kernels: dict[str, Any] = field(default_factory=dict)  # what the result needs to run
    comparison: Any = None  # rewriter.comparison.CompareReport when numerics were verified

    @property
    def ok(self) -> bool:
        return not self.remaining and all(v == "ok" or v.startswith("skipped")
                                          or v.startswith("pre-existing")
                                          for v in self.verification.values())

    def as_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "output": self.output,
            "targets": self.targets,
            "ok": self.ok,
            "dry_run": self.dry_run,
            "rounds": self.rounds,
            "applied": [
                {"kind": k, "plugin": p, "rule": r, "op": op, "nodes": n}
                for (k, p, r, op), n in sorted(self.applied.items())
            ],
            "before": {"nodes": self.before.nodes, "ops": dict(sorted(self.before.ops.items()))}
            if self.before else None,
            "after": {"nodes": self.after.nodes, "ops": dict(sorted(self.after.ops.items()))}
            if self.after else None,
            "remaining": [f.as_dict() for f in self.remaining],
            "verification": self.verification,
            "kernels": self.kernels,
            "compare": self.comparison.as_dict() if self.comparison is not None else None,
            "explain": self.explain,
        }


@dataclass
class RewriteResult:
    model: Any  # the same kind as the input: path (written), ModelProto or onnx_ir.Model
    report: RewriteReport


class _Planner:
    """Chooses one remedy per finding, deterministically, and builds its function."""

    def __init__(self, targets: Sequence[Target], plugins: Plugins, passes, ctx,
                 prefer: str = "decompose") -> None:
        if prefer not in PREFER:
            raise RewriterError(f"--prefer must be one of {', '.join(PREFER)}, not {prefer!r}")
        self.prefer = prefer
        self.targets = targets
        self.registry = plugins.registry
        self.passes = passes
        self.pass_ctx = ctx
        self._by_op: dict[tuple[str, str], list[DecompositionEntry]] = {}
        def precedence(entry: DecompositionEntry):
            # third-party plugins before built-ins, then by name; hi None is open-ended
            info = self.registry.plugins.get(entry.plugin)
            return (bool(info and info.builtin), entry.plugin, entry.opsets[0],
                    entry.opsets[1] or 1 << 30)

        for entry in sorted(self.registry.decompositions, key=precedence):
            self._by_op.setdefault((entry.domain, entry.op_type), []).append(entry)
        self._plans: dict[tuple, list[Candidate]] = {}
        self._names: dict[tuple, str] = {}

    def signature(self, node, opsets, input_types) -> tuple:
        return (
            normalize_domain(node.domain), node.op_type, node.overload,
            tuple(sorted(opsets.items())), tuple(input_types),
            tuple(a.SerializeToString() for a in node.attribute),
        )

    def candidates(self, finding: Finding, constants, depth: int = 0) -> list[Candidate]:
        """Every remedy considered for ``finding``, the chosen one (if any) first accepted."""
        if finding.node is None:
            return self._pass_candidates(finding)
        if finding.reason == "invalid-node":  # the model is wrong; no remedy makes it right
            return [Candidate("decomposition", "-", "-", False,
                              f"the node itself is invalid ({finding.detail}); fix the export")]
        opsets = dict(finding.scope_opsets or {})
        key = self.signature(finding.node, opsets, finding.input_types)
        plan = self._plans.get(key)
        if plan is None:
            plan = self._remedy_candidates(finding, opsets, constants, depth)
            self._plans[key] = plan
        if not any(c.accepted for c in plan):
            # passes are asked per finding: their answer may depend on more than the plan
            # signature holds (constant inputs, shapes); they cache what they can themselves
            return plan + self._pass_candidates(finding)
        return plan

    def chosen(self, finding: Finding, constants) -> Candidate | None:
        for c in self.candidates(finding, constants):
            if c.accepted:
                return c
        return None

    def _pass_candidates(self, finding: Finding) -> list[Candidate]:
        out = []
        for p in self.passes:
            offers, why = p.offers(finding, self.pass_ctx)
            out.append(Candidate("pass", p.plugin, p.name, offers, why, rewrite_pass=p,
                                 relevant=p.handles(finding, self.pass_ctx)))
        return out

    def _remedy_candidates(self, finding, opsets, constants, depth) -> list[Candidate]:
        """Decompositions and kernels, in the order ``prefer`` says; the second kind is only
        tried when the first offers nothing (a kernel costs a registration and a probe)."""
        key = (normalize_domain(finding.node.domain), finding.node.op_type)
        has_kernel = key in self.registry.kernels or key in self.registry.natives
        kinds = [self._decomposition_candidates, self._kernel_candidates]
        if self.prefer == "kernel":
            kinds.reverse()
        first = kinds[0](finding, opsets, constants, depth)
        if any(c.accepted for c in first):
            if self.prefer == "decompose" and has_kernel:
                first.append(Candidate("kernel", "-", "-", False,
                                       "not tried: a decomposition applies (--prefer decompose)"))
            elif self.prefer == "kernel" and key in self._by_op:
                first.append(Candidate("decomposition", "-", "-", False,
                                       "not tried: a kernel applies (--prefer kernel)"))
            return first
        return first + kinds[1](finding, opsets, constants, depth)

    def _kernel_candidates(self, finding, opsets, constants=None, depth=0) -> list[Candidate]:
        """A native library op first (no Python needed at run time), then a Python kernel;
        each accepted only when every target says it can run the retargeted node."""
        from rewriter.errors import RewriterError
        from rewriter.functions import resolve_reference
        from rewriter.kernels import (
            KernelUse,
            NativeUse,
            attribute_problem,
            element_type,
            load_kernel,
            op_name,
            retarget_node,
        )
        from rewriter.targets import KernelRemedy

        node = finding.node
        domain, op_type = normalize_domain(node.domain), node.op_type
        label = f"{domain or 'ai.onnx'}::{op_type}"
        out: list[Candidate] = []

        def ask(remedy) -> str:
            # the retargeted node carries provenance, as the nodes of a decomposition do
            from rewriter.functions import PROVENANCE_OP, PROVENANCE_PLUGIN, PROVENANCE_RULE

            stamp = {PROVENANCE_PLUGIN: plugin, PROVENANCE_RULE: rule, PROVENANCE_OP: label}
            kept = [p for p in remedy.node.metadata_props if p.key not in stamp]
            del remedy.node.metadata_props[:]
            remedy.node.metadata_props.extend(kept)
            for key, value in stamp.items():
                entry = remedy.node.metadata_props.add()
                entry.key, entry.value = key, value
            return "; ".join(f"{t.name}: {p}" for t in self.targets
                             if (p := t.kernel_problem(remedy)))

        native = self.registry.natives.get((domain, op_type))
        if native is not None:
            t_domain, t_op = native.target
            plugin = native.plugin
            rule = f"native {native.library} {t_domain or 'ai.onnx'}::{t_op}"
            try:
                attrs = None
                if native.attributes:
                    attrs = resolve_reference(native.attributes)(node)
                    if attrs is None:
                        raise RewriterError("declined this node (attributes or types)")
                new = NodeProto()
                new.CopyFrom(node)
                new.domain, new.op_type = t_domain, t_op
                if attrs is not None:
                    from onnx import helper

                    del new.attribute[:]
                    new.attribute.extend(helper.make_attribute(k, v)
                                         for k, v in sorted(attrs.items()))
                use = NativeUse(t_domain, t_op, native.library, native.plugin, label,
                                self._distribution(native.plugin))
                remedy = KernelRemedy("native", new, use, None, tuple(finding.input_types),
                                      {**opsets, t_domain: opsets.get(t_domain, 1)})
                why = ask(remedy)
            except Exception as e:  # noqa: BLE001 - a plugin's mapping failing is its bug
                why, remedy = (str(e) if isinstance(e, RewriterError)
                               else f"mapping failed: {type(e).__name__}: {e}"), None
            out.append(Candidate("kernel", native.plugin, rule, not why, why, kernel=remedy))
            if not why:
                return out
        entry = self.registry.kernels.get((domain, op_type))
        if entry is not None:
            plugin = entry.plugin
            rule = f"python {entry.reference}"
            why, remedy = "", None
            try:
                k = load_kernel(entry, self.registry)
                types = [element_type(t) for t in finding.input_types]
                signature = k.match(types)
                if any(not n for n in node.input):
                    why = "the node leaves an optional input empty (kernels take no gaps)"
                elif signature is None:
                    shown = ", ".join(t or "?" for t in types)
                    why = (f"no signature takes ({shown}); the kernel has "
                           + "; ".join(f"({s.label})" for s in k.signatures))
                else:
                    why = attribute_problem(node, k) or ""
                if not why:
                    use = KernelUse(op_name(domain, op_type, signature), domain, op_type,
                                    entry.reference, entry.plugin, signature,
                                    self._distribution(entry.plugin))
                    new = NodeProto()
                    new.CopyFrom(node)
                    retarget_node(new, use, k)
                    remedy = KernelRemedy("python", new, use, k, tuple(finding.input_types),
                                          {**opsets, CONTRIB_DOMAIN: 1})
                    why = ask(remedy)
            except RewriterError as e:
                why = str(e)
            out.append(Candidate("kernel", entry.plugin, rule, not why, why, kernel=remedy))
        if not out:
            out.append(Candidate("kernel", "-", "-", False,
                                 "no installed plugin registers a kernel for this op"))
        return out

    def _distribution(self, plugin: str) -> str | None:
        info = self.registry.plugins.get(plugin)
        return info.distribution if info and info.distribution else None

    def _decomposition_candidates(self, finding, opsets, constants, depth) -> list[Candidate]:
        node = finding.node
        model_opset = opsets.get("", 1)
        entries = self._by_op.get((normalize_domain(node.domain), node.op_type), [])
        out: list[Candidate] = []
        for entry in entries:
            rule = entry.description or f"{entry.op_type}"
            if not entry.covers(model_opset):
                lo, hi = entry.opsets
                out.append(Candidate("decomposition", entry.plugin, rule, False,
                                     f"valid for ai.onnx opsets {lo}..{hi or ''}; the model "
                                     f"is at {model_opset}"))
                continue
            ctx = DecompositionContext(node, model_opset, opsets, list(finding.input_types),
                                       constants=constants)
            try:
                fn = build_function(entry.builder, ctx)
            except Exception as e:  # noqa: BLE001 - a plugin's builder failing is its bug
                out.append(Candidate("decomposition", entry.plugin, rule, False,
                                     f"builder failed: {type(e).__name__}: {e}"))
                continue
            if fn is None:
                out.append(Candidate("decomposition", entry.plugin, rule, False,
                                     "declined this node (attributes or types)"))
                continue
            problem, nested = self._body_problem(fn, finding, opsets, constants, depth)
            if problem:
                out.append(Candidate("decomposition", entry.plugin, rule, False, problem))
                continue
            inner = []
            if nested:
                fn = self._lower_nested(fn, nested, opsets)
                for choice, inner_finding in nested.values():
                    inner.append((choice.kind, choice.plugin, choice.rule, inner_finding.op_label))
                    inner.extend(choice.nested)
            out.append(Candidate("decomposition", entry.plugin, rule, True, "", fn, nested=inner))
            break
        if not entries:
            out.append(Candidate("decomposition", "-", "-", False,
                                 "no installed plugin registers a decomposition for this op"))
        return out

    def _body_problem(self, fn: FunctionProto, finding: Finding, opsets, constants, depth):
        """(None, nested) if every node of the body runs on every target or has a remedy
        itself (``nested``: body index -> (candidate, finding) to lower inside the body);
        (problem, {}) otherwise."""
        if depth >= MAX_DEPTH:
            return "decompositions nest too deeply", {}
        body_opsets = dict(opsets)
        for entry in fn.opset_import:
            body_opsets.setdefault(normalize_domain(entry.domain), entry.version)
        types = {formal: t for formal, t in zip(fn.input, finding.input_types) if t}
        nested: dict[int, tuple[Candidate, Finding]] = {}
        for i, inner in enumerate(fn.node):
            domain = normalize_domain(inner.domain)
            # output types first: some bind a type parameter only through them (Cast's T2
            # comes from its `to` attribute), and a body declares no value types
            schema = target_schema(self.targets, domain, inner.op_type, body_opsets.get(domain))
            for name, t in zip(inner.output, infer_node_outputs(inner, schema, types)):
                if name and t:
                    types.setdefault(name, t)
            for target in self.targets:
                if i in nested:
                    break
                query = NodeQuery(inner, f"{finding.path}/<body>/node {i}", domain,
                                  body_opsets.get(domain), types, body_opsets)
                problem = target.check_node(query)
                if problem is None:
                    continue
                inner_finding = Finding(
                    problem.target, problem.path, problem.domain, problem.op_type,
                    problem.version, problem.reason, problem.detail, inner.name, inner,
                    tuple(types.get(n) if n else None for n in inner.input), body_opsets,
                )
                sub = self._decomposition_candidates(
                    inner_finding, body_opsets, constants, depth + 1
                )
                chosen = next((c for c in sub if c.accepted), None)
                if chosen is None:
                    return (f"its body uses {inner_finding.op_label}, which {target.name} "
                            f"cannot run ({problem.detail})"), {}
                nested[i] = (chosen, inner_finding)
        return None, nested

    def _lower_nested(self, fn: FunctionProto, nested, opsets) -> FunctionProto:
        """Inline the chosen remedies of body nodes into ``fn`` itself, so a whole chain of
        decompositions is spliced into the model in one go."""
        from onnx import helper, inliner

        inner_functions = {}
        for i, (choice, inner_finding) in sorted(nested.items()):
            name = self.function_name(inner_finding)
            if name not in inner_functions:
                inner_functions[name] = specialise(
                    choice.function, name, dict(inner_finding.scope_opsets or {}),
                    choice.plugin, choice.rule, replaced_op(inner_finding),
                )
            retarget(fn.node[i], inner_functions[name])
        outer = FunctionProto()
        outer.CopyFrom(fn)
        outer.domain, outer.name = _LOWERING_DOMAIN, "outer"
        body_opsets = opset_map(outer.opset_import)
        body_opsets.setdefault("", opsets.get("", 1))
        body_opsets[REMEDY_DOMAIN] = 1
        del outer.opset_import[:]
        for domain, version in sorted(body_opsets.items()):
            outer.opset_import.add().CopyFrom(helper.make_opsetid(domain, version))
        call = helper.make_node(outer.name, list(outer.input), list(outer.output),
                                domain=_LOWERING_DOMAIN)
        untyped = helper.TypeProto()
        graph = helper.make_graph(
            [call], "lowering", [helper.make_value_info(n, untyped) for n in outer.input],
            [helper.make_value_info(n, untyped) for n in outer.output],
        )
        wrapper = helper.make_model(graph, opset_imports=[
            *outer.opset_import, helper.make_opsetid(_LOWERING_DOMAIN, 1)
        ])
        wrapper.functions.extend([outer, *inner_functions.values()])
        done = inliner.inline_selected_functions(
            wrapper, [(f.domain, f.name) for f in inner_functions.values()], False
        )
        (lowered,) = [f for f in done.functions if f.domain == _LOWERING_DOMAIN]
        lowered.domain, lowered.name = fn.domain, fn.name
        kept = [o for o in lowered.opset_import
                if normalize_domain(o.domain) not in (REMEDY_DOMAIN, _LOWERING_DOMAIN)]
        del lowered.opset_import[:]
        lowered.opset_import.extend(kept)
        return lowered

    def function_name(self, finding: Finding) -> str:
        key = self.signature(finding.node, dict(finding.scope_opsets or {}), finding.input_types)
        name = self._names.get(key)
        if name is None:
            name = self._names[key] = f"{finding.op_type}_{len(self._names)}"
        return name


def replaced_op(finding: Finding) -> str:
    """``domain::op_type`` of a finding's node, as stamped on the nodes replacing it."""
    return f"{finding.domain or 'ai.onnx'}::{finding.op_type}"


def target_schema(targets, domain, op_type, opset):
    for t in targets:
        s = t.schemas.resolve(domain, op_type, opset) if opset else None
        if s is not None:
            return s
    return None


class _LazyConstants(Mapping):
    """:func:`_constants`, built on first use: plans are cached per node signature, so most
    rounds never need the index."""

    def __init__(self, model: ModelProto) -> None:
        self._model = model
        self._table: dict | None = None

    def _load(self) -> dict:
        if self._table is None:
            self._table = _constants(self._model)
        return self._table

    def __getitem__(self, name):
        return self._load()[name]

    def __iter__(self):
        return iter(self._load())

    def __len__(self) -> int:
        return len(self._load())


def _constants(model: ModelProto) -> dict:
    """Initializers and Constant(value=...) outputs by name, in every graph (not read from
    external data: those stay on disk)."""
    out = {}
    for scope in iter_scopes(model):
        if scope.graph is not None:
            for t in scope.graph.initializer:
                out[t.name] = t
        for node in scope.nodes:
            if node.op_type == "Constant" and node.domain in ("", "ai.onnx") and node.output:
                for a in node.attribute:
                    if a.name == "value":
                        out[node.output[0]] = a.t
    return out


def _detect(model: ModelProto, targets: Sequence[Target]) -> list[Finding]:
    findings = []
    for target in targets:
        findings.extend(find_unsupported(model, target, keep_nodes=True))
    return findings


def apply_kernels(
    model: ModelProto, findings: list[Finding], planner: _Planner, ctx: PassContext
) -> set[int]:
    """Retarget, in place, every node whose chosen remedy is a kernel; record what the model
    needs in its metadata. Returns the ids of the nodes changed."""
    from rewriter.kernels import Needs, write_needs

    constants = _LazyConstants(model)
    needs = Needs()
    changed: dict[int, Any] = {}
    for f in findings:
        if f.node is None or id(f.node) in changed:
            continue
        choice = planner.chosen(f, constants)
        if choice is None or choice.kind != "kernel":
            continue
        remedy = choice.kernel
        changed[id(f.node)] = (f.node, remedy)
        ctx.record("kernel", choice.plugin, choice.rule, f.op_label)
        if remedy.kind == "python":
            needs.python[remedy.use.op_name] = remedy.use
        else:
            needs.native[remedy.use.key] = remedy.use
    # retarget after every choice is made: plans are keyed by the node as it was
    for node, remedy in changed.values():
        node.CopyFrom(remedy.node)
    if not changed:
        return set()
    domains = {node.domain for node, _ in changed.values()}
    for container in [model, *[fn for fn in model.functions
                               if any(id(n) in changed for n in fn.node)]]:
        have = opset_map(container.opset_import)
        for domain in sorted(domains):
            if normalize_domain(domain) not in have:
                entry = container.opset_import.add()
                entry.domain, entry.version = domain, 1
    write_needs(model, needs)
    return set(changed)


def apply_decompositions(
    model: ModelProto, findings: list[Finding], planner: _Planner, ctx: PassContext,
    skip: set[int] | frozenset = frozenset(),
) -> tuple[ModelProto, bool]:
    """Retarget every node with an accepted decomposition, then inline them all at once."""
    constants = _LazyConstants(model)
    functions: dict[str, FunctionProto] = {}
    seen: set[int] = set(skip)  # nodes already given a kernel
    for f in findings:
        if f.node is None or id(f.node) in seen:
            continue
        seen.add(id(f.node))
        choice = planner.chosen(f, constants)
        if choice is None or choice.kind != "decomposition":
            continue
        name = planner.function_name(f)
        if name not in functions:
            functions[name] = specialise(
                choice.function, name, dict(f.scope_opsets or {}), choice.plugin, choice.rule,
                replaced_op(f),
            )
        ctx.record("decomposition", choice.plugin, choice.rule, f.op_label)
        for kind, plugin, rule, op_label in choice.nested:
            ctx.record(kind, plugin, rule, op_label)
        retarget(f.node, functions[name])
    if not functions:
        return model, False
    for local in model.functions:  # calls may sit inside model-local functions
        if not any(normalize_domain(o.domain) == REMEDY_DOMAIN for o in local.opset_import):
            entry = local.opset_import.add()
            entry.domain, entry.version = REMEDY_DOMAIN, 1
    _import_domains(model, functions.values())
    return splice(model, list(functions.values())), True


def _import_domains(model: ModelProto, functions) -> None:
    """Add opset imports that the new nodes need and the model lacks."""
    have = opset_map(model.opset_import)
    for fn in functions:
        for entry in fn.opset_import:
            domain = normalize_domain(entry.domain)
            if domain not in have:
                new = model.opset_import.add()
                new.domain, new.version = entry.domain, entry.version
                have[domain] = entry.version


def _uses(model: ModelProto) -> tuple[set[str], set[tuple[str, str]]]:
    """The domains the model's nodes use, and the (domain, op_type) they call."""
    used_domains: set[str] = set()
    called: set[tuple[str, str]] = set()
    for scope in iter_scopes(model):
        for node in scope.nodes:
            used_domains.add(normalize_domain(node.domain))
            called.add((normalize_domain(node.domain), node.op_type))
    return used_domains, called


def cleanup(model: ModelProto, original: ModelProto | None = None) -> None:
    """Drop opset imports and model-local functions nothing uses any more. With
    ``original``, only those the rewrite left unused go: what the original already imported
    or defined without using is not the rewrite's business."""
    used_domains, called = _uses(model)
    if original is not None:
        before_domains, before_called = _uses(original)
        used_domains |= {normalize_domain(o.domain) for o in original.opset_import
                         if normalize_domain(o.domain) not in before_domains}
        for f in original.functions:
            for entry in f.opset_import:
                if normalize_domain(entry.domain) not in before_domains:
                    used_domains.add(normalize_domain(entry.domain))
            if (normalize_domain(f.domain), f.name) not in before_called:
                called.add((normalize_domain(f.domain), f.name))
    kept = [f for f in model.functions if (normalize_domain(f.domain), f.name) in called]
    if len(kept) != len(model.functions):
        del model.functions[:]
        model.functions.extend(kept)
    for container in [model, *model.functions]:
        imports = [o for o in container.opset_import
                   if normalize_domain(o.domain) in used_domains | {""}]
        if len(imports) != len(container.opset_import):
            del container.opset_import[:]
            container.opset_import.extend(imports)


_CWD_LOCK = threading.Lock()


@contextlib.contextmanager
def _external_data_folder(model: ModelProto, base_dir):
    """onnx's checker resolves external-data locations of an in-memory model against the
    current directory: run it from the model's folder (reading no weights; it only checks
    that the files are there)."""
    from rewriter.io import uses_external_data
    from rewriter.walk import iter_tensors

    if base_dir is None or not any(uses_external_data(t) for _, t in iter_tensors(model)):
        yield
        return
    with _CWD_LOCK:
        previous = os.getcwd()
        os.chdir(base_dir)
        try:
            yield
        finally:
            os.chdir(previous)


def verify(model: ModelProto, original: ModelProto, base_dir=None) -> dict[str, str]:
    """The full checker and strict, type-checking shape inference; a failure the original
    shares is noted as pre-existing rather than blamed on the rewrite.

    ``check_model(full_check=True)`` runs both in one call (its shape inference is strict and
    checks types), so that is all the happy path costs. ``base_dir``: the folder external
    data is relative to.
    """
    import onnx

    def first_line(e: Exception) -> str:
        return (str(e).strip().splitlines() or [type(e).__name__])[0]

    def run(m: ModelProto) -> dict[str, str]:
        with _external_data_folder(m, base_dir):
            return check(m)

    def check(m: ModelProto) -> dict[str, str]:
        try:
            onnx.checker.check_model(m, full_check=True)
            return {"checker": "ok", "shape_inference": "ok"}
        except Exception as full:  # noqa: BLE001 - onnx raises several kinds
            try:
                onnx.checker.check_model(m, full_check=False)
            except Exception as basic:  # noqa: BLE001
                return {"checker": first_line(basic), "shape_inference": "skipped: the "
                        "checker failed"}
            return {"checker": "ok", "shape_inference": first_line(full)}

    results = run(model)
    if any(v != "ok" for v in results.values()):
        before = run(original)
        for name, verdict in results.items():
            if verdict != "ok" and not verdict.startswith("skipped") and before[name] != "ok":
                results[name] = f"pre-existing: the original fails too: {verdict}"
    return results


def rewrite_proto(model: ModelProto, *args, **kwargs) -> tuple[ModelProto, RewriteReport]:
    """The engine on a ModelProto; see :func:`_rewrite_proto` for the arguments.

    The cyclic garbage collector is paused meanwhile: a big graph is hundreds of thousands of
    protobuf wrappers and the collector's passes over them cost ~10% and free nothing.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        return _rewrite_proto(model, *args, **kwargs)
    finally:
        if enabled:
            gc.enable()


def _rewrite_proto(
    model: ModelProto,
    targets: Sequence[Target],
    plugins: Plugins,
    *,
    partial: bool = False,
    explain: bool = False,
    dry_run: bool = False,
    model_name: str = "<model>",
    prefer: str = "decompose",
    base_dir=None,
) -> tuple[ModelProto, RewriteReport]:
    """The engine on a ModelProto (a copy is rewritten; ``model`` is left as it is).

    ``prefer``: ``"decompose"`` (default: a decomposed model needs nothing at deployment) or
    ``"kernel"``, for ops that have both remedies."""
    work = ModelProto()
    work.CopyFrom(model)
    report = RewriteReport(model_name, [t.name for t in targets], dry_run=dry_run)
    report.before = ModelStats.of(work)
    ctx = PassContext(targets, plugins.registry)
    passes = instantiate(plugins.registry)
    for p in passes:
        p.prepare(work, ctx)
    planner = _Planner(targets, plugins, passes, ctx, prefer)

    findings = _detect(work, targets)
    constants = _LazyConstants(work)
    why: dict[int, str] = {}
    unfixable = []
    for f in findings:
        candidates = planner.candidates(f, constants)
        if explain:
            report.explain.append({
                "finding": f.as_dict(),
                "candidates": [
                    {"kind": c.kind, "plugin": c.plugin, "rule": c.rule,
                     "accepted": c.accepted, "why": c.why}
                    for c in candidates
                ],
            })
        if not any(c.accepted for c in candidates):
            unfixable.append(f)
            # a plugin's own reason beats the placeholder of a kind nobody registered
            declined = ([c.why for c in candidates
                         if c.why and c.plugin != "-" and c.kind != "pass"]
                        or [c.why for c in candidates if c.why])
            own = [c.why for c in candidates if c.why and c.relevant]
            why[id(f)] = (own or declined or [f.detail])[0]
    if unfixable and not partial:
        if explain or dry_run:
            report.remaining = unfixable
            report.after = report.before
            return model, report
        raise UnfixableError(unfixable, why)
    if dry_run:
        report.remaining = unfixable
        for f in findings:
            choice = next((c for c in planner.candidates(f, constants) if c.accepted), None)
            if choice is not None:
                report.applied[(choice.kind, choice.plugin, choice.rule, f.op_label)] += 1
        report.after = report.before
        return model, report

    # Nested remedies are lowered inside their functions at planning time, so one round
    # normally suffices; the detection after it is also the target re-check of verification.
    for round_index in range(MAX_ROUNDS):
        report.rounds = round_index + 1
        if not findings:
            break
        for_passes = [f for f in findings if not _decomposed(f, planner)]
        retargeted = apply_kernels(work, findings, planner, ctx)
        work, changed = apply_decompositions(work, findings, planner, ctx, retargeted)
        changed = changed or bool(retargeted)
        for p in passes:
            if any(p.offers(f, ctx)[0] for f in for_passes):
                result = p.run(work, ctx)
                if result is not None:
                    work, changed = result, True
        if not changed:
            break
        findings = _detect(work, targets)
    cleanup(work, model)
    report.applied = ctx.applied
    report.remaining = findings
    report.after = ModelStats.of(work)
    report.kernels = _kernel_summary(work)
    report.verification = verify(work, model, base_dir)
    for f in report.remaining:
        object.__setattr__(f, "node", None)  # do not keep the model alive through reports
    return work, report


def _decomposed(f: Finding, planner: _Planner) -> bool:
    if f.node is None:
        return False
    plan = planner._plans.get(
        planner.signature(f.node, dict(f.scope_opsets or {}), f.input_types), []
    )
    return any(c.accepted and c.kind in ("decomposition", "kernel") for c in plan)


def _kernel_summary(model: ModelProto) -> dict[str, Any]:
    """What the rewritten model needs at run time (from its metadata), for the report."""
    import json

    from rewriter.kernels import read_needs

    needs = read_needs(model)
    if not needs:
        return {}
    return json.loads(needs.to_json())
