"""rewrite: plan a remedy for every finding, apply remedies to a fixed point, verify.

Planning happens first: if any finding has no remedy, nothing is changed and one error lists
them all (unless ``partial``). Decompositions become FunctionProtos spliced in by onnx's
inliner (``rewriter.functions``); passes handle whole-model changes such as opset conversion.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import os
import threading
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from onnx import FunctionProto, ModelProto, NodeProto

from rewriter.detect import Detection, detect, find_unsupported, recheck
from rewriter.errors import EXIT_FINDINGS, RewriterError
from rewriter.functions import (
    REMEDY_DOMAIN,
    DecompositionContext,
    Recording,
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
from rewriter.walk import iter_scopes, normalize_domain, op_counts, opset_map

MAX_ROUNDS = 8
PREFER = ("decompose", "kernel")  # --prefer: which remedy wins when both exist
CONTRIB_DOMAIN = "ai.onnx.contrib"
_LOWERING_DOMAIN = "rewriter.lowering"
MAX_DEPTH = 4
# Verification runs the full checker (strict, type-checking shape inference) on the whole
# rewritten model up to this many nodes; above, on each distinct rewritten region (every
# remedy function in a small wrapper model), plus the non-full checker on the whole model
# and the target re-check with type agreement on every node whose input types changed.
FULL_CHECK_MAX_NODES = 10_000


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
    # decompositions: the body's output types for the finding's input types, and whether
    # the plan's node-by-node check covers all of it (no subgraphs in the body)
    output_types: tuple[str | None, ...] = ()
    proven: bool = False


@dataclass
class _Plan:
    """The candidates for one node signature, and what the builders read beyond it
    (constants, declared types): reused for a node only when those reads match."""

    reads: tuple  # (kind, ("input", index) | ("name", name)) in the order first read
    fingerprints: tuple
    candidates: list[Candidate]
    cacheable: bool = True
    name: str | None = None  # of the remedy function, once spliced
    choice: Candidate | None = None  # the first accepted candidate
    recheck: dict = field(default_factory=dict)  # input types -> body output types | None


@dataclass
class ModelStats:
    nodes: int
    ops: Counter

    @classmethod
    def of(cls, model: ModelProto) -> ModelStats:
        return cls.from_counts(op_counts(model))

    @classmethod
    def from_counts(cls, counts: Counter) -> ModelStats:
        """From :func:`rewriter.walk.op_counts`."""
        ops: Counter = Counter()
        for (domain, op_type), n in counts.items():
            ops[f"{domain or 'ai.onnx'}::{op_type}"] += n
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
    # what "checker"/"shape_inference" covered: "whole model" or "rewritten regions: ..."
    verification_scope: str = ""
    # the target re-check: "whole model" or "N nodes whose input types changed"
    recheck_scope: str = ""
    # verified | mismatch | unverified | unchanged (rewriter.verdicts); "" for a dry run
    verdict: str = ""
    verdict_reason: str = ""
    verify: bool = True  # False: the caller turned the numeric comparison off
    written: bool = False

    def decide(self) -> None:
        """Set :attr:`verdict` from the structural checks and the comparison."""
        from rewriter.verdicts import MISMATCH, NOT_VERIFIED, UNCHANGED, UNVERIFIED, VERIFIED

        if self.dry_run:
            self.verdict, self.verdict_reason = "", "dry run: nothing was changed"
            return
        if self.remaining and not self.applied:
            self.verdict = ""
            self.verdict_reason = (f"{len(self.remaining)} finding(s) have no remedy; nothing "
                                   "was changed")
            return
        # a target refusing to load the result is a finding left (self.remaining), not this
        failed = [f"{name}: {v}" for name, v in self.verification.items()
                  if name != "compare" and not name.endswith(" load")
                  and not (v == "ok" or v.startswith(("skipped", "pre-existing")))]
        if failed:
            self.verdict = MISMATCH
            self.verdict_reason = f"the result fails validation: {failed[0]}"
        elif not self.applied and not self.remaining:
            self.verdict = UNCHANGED
            self.verdict_reason = (f"already runs on {', '.join(self.targets)}; nothing to do "
                                   "(the output is the input model)")
        elif not self.verify:
            self.verdict, self.verdict_reason = UNVERIFIED, NOT_VERIFIED
        elif self.comparison is None:
            self.verdict = UNVERIFIED
            self.verdict_reason = self.verification.get("compare", "not compared")
        else:
            self.verdict = self.comparison.verdict
            self.verdict_reason = self.comparison.summary()
        if self.verdict not in (VERIFIED, MISMATCH, UNVERIFIED, UNCHANGED):
            raise AssertionError(self.verdict)

    @property
    def exit_code(self) -> int:
        """0 verified or unchanged (or not verified on request), 1 mismatch or findings left,
        3 unverified (:mod:`rewriter.verdicts`)."""
        from rewriter.verdicts import EXIT_CODES, UNVERIFIED

        if not self.verdict:  # a dry run, or nothing could be changed
            return EXIT_FINDINGS if self.remaining else 0
        code = EXIT_CODES[self.verdict]
        if self.verdict == UNVERIFIED and not self.verify:
            code = 0
        return EXIT_FINDINGS if code == 0 and self.remaining else code

    @property
    def ok(self) -> bool:
        """The rewrite succeeded: exit code 0."""
        return self.exit_code == 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "output": self.output,
            "targets": self.targets,
            "verdict": self.verdict or None,
            "verdict_reason": self.verdict_reason,
            "exit_code": self.exit_code,
            "ok": self.ok,
            "written": self.written,
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
            "verification_scope": self.verification_scope,
            "recheck_scope": self.recheck_scope,
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
        self._plans: dict[tuple, list[_Plan]] = {}
        self._by_finding: dict[int, _Plan] = {}  # id(finding) -> its plan
        self._named = 0
        self._nested_names: dict[tuple, str] = {}

    def signature(self, node, opsets, input_types) -> tuple:
        """What a plan is cached by: the op, the opsets, the input types, which inputs and
        outputs are present, and the attributes."""
        return (
            normalize_domain(node.domain), node.op_type, node.overload,
            tuple(sorted(opsets.items())), tuple(input_types),
            tuple(map(bool, node.input)), tuple(map(bool, node.output)),
            tuple(a.SerializeToString() for a in node.attribute),
        )

    def candidates(self, finding: Finding, constants, declared=None) -> list[Candidate]:
        """Every remedy considered for ``finding``, the chosen one (if any) first accepted.
        ``declared``: the model's declared value types by name (for the builders)."""
        if finding.node is None:
            return self._pass_candidates(finding)
        if finding.reason == "invalid-node":
            # the export is wrong. For a vendor op (a schema the runtime has, onnx does not)
            # a decomposition that takes the node as it is may stand in for it (its builder
            # reads the inputs and declines what it cannot make sense of, e.g.
            # GroupQueryAttention without total_sequence_length); a standard op that breaks
            # the ONNX spec is the exporter's to fix
            if not _has_onnx_schema(finding):
                plan = self.plan(finding, constants, declared)
                if plan.choice is not None and plan.choice.kind == "decomposition":
                    return plan.candidates
            return [Candidate("decomposition", "-", "-", False,
                              f"the node itself is invalid ({finding.detail}); fix the export")]
        plan = self.plan(finding, constants, declared)
        if plan.choice is None:
            # passes are asked per finding: their answer may depend on more than the plan
            # signature holds (constant inputs, shapes); they cache what they can themselves
            return plan.candidates + self._pass_candidates(finding)
        return plan.candidates

    def plan(self, finding: Finding, constants, declared=None) -> _Plan:
        """The plan of a finding with a node: cached per signature and, among the variants
        of a signature, per the values its builders read."""
        plan = self._by_finding.get(id(finding))
        if plan is not None:
            return plan
        node = finding.node
        declared = declared if declared is not None else {}
        opsets = dict(finding.scope_opsets or {})
        key = self.signature(node, opsets, finding.input_types)
        variants = self._plans.setdefault(key, [])
        for variant in variants:
            if variant.cacheable and variant.fingerprints == _fingerprints(
                    variant.reads, node, constants, declared):
                plan = variant
                break
        else:
            log: list = []
            candidates = self._remedy_candidates(
                finding, opsets, Recording(constants, log, "constant"),
                Recording(declared, log, "declared"), 0,
            )
            inputs = list(node.input)
            reads = tuple(dict.fromkeys(
                (kind, ("input", inputs.index(name)) if name in inputs else ("name", name))
                for kind, name in log))
            plan = _Plan(reads, _fingerprints(reads, node, constants, declared), candidates,
                         cacheable=not any(ref == ("name", "*") for _, ref in reads),
                         choice=next((c for c in candidates if c.accepted), None))
            variants.append(plan)
        self._by_finding[id(finding)] = plan
        return plan

    def chosen(self, finding: Finding, constants, declared=None) -> Candidate | None:
        plan = self._by_finding.get(id(finding))
        if plan is not None and plan.choice is not None:
            return plan.choice
        for c in self.candidates(finding, constants, declared):
            if c.accepted:
                return c
        return None

    def body_outputs(self, finding: Finding, input_types: tuple) -> tuple | None:
        """The output types of the body spliced for ``finding`` when its inputs have
        ``input_types``, if every body node still runs on every target with them (None:
        the plan does not prove it)."""
        plan = self._by_finding.get(id(finding))
        choice = plan.choice if plan else None
        if choice is None or choice.kind != "decomposition" or not choice.proven:
            return None
        if tuple(input_types) == tuple(finding.input_types):
            return choice.output_types
        if input_types not in plan.recheck:
            import dataclasses

            moved = dataclasses.replace(finding, input_types=tuple(input_types))
            problem, nested, types = self._body_problem(
                choice.function, moved, dict(finding.scope_opsets or {}), {}, 0)
            plan.recheck[input_types] = (None if problem or nested else
                                         tuple(types.get(o) for o in choice.function.output))
        return plan.recheck[input_types]

    def _pass_candidates(self, finding: Finding) -> list[Candidate]:
        out = []
        for p in self.passes:
            offers, why = p.offers(finding, self.pass_ctx)
            out.append(Candidate("pass", p.plugin, p.name, offers, why, rewrite_pass=p,
                                 relevant=p.handles(finding, self.pass_ctx)))
        return out

    def _remedy_candidates(self, finding, opsets, constants, declared, depth
                           ) -> list[Candidate]:
        """Decompositions and kernels, in the order ``prefer`` says; the second kind is only
        tried when the first offers nothing (a kernel costs a registration and a probe)."""
        key = (normalize_domain(finding.node.domain), finding.node.op_type)
        has_kernel = key in self.registry.kernels or key in self.registry.natives
        kinds = [self._decomposition_candidates, self._kernel_candidates]
        if self.prefer == "kernel":
            kinds.reverse()
        first = kinds[0](finding, opsets, constants, depth, declared)
        if any(c.accepted for c in first):
            if self.prefer == "decompose" and has_kernel:
                first.append(Candidate("kernel", "-", "-", False,
                                       "not tried: a decomposition applies (--prefer decompose)"))
            elif self.prefer == "kernel" and key in self._by_op:
                first.append(Candidate("decomposition", "-", "-", False,
                                       "not tried: a kernel applies (--prefer kernel)"))
            return first
        return first + kinds[1](finding, opsets, constants, depth, declared)

    def _kernel_candidates(self, finding, opsets, constants=None, depth=0, declared=None
                           ) -> list[Candidate]:
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
                    use = KernelUse(op_name(domain, op_type, signature, entry.reference),
                                    domain, op_type, entry.reference, entry.plugin, signature,
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

    def _decomposition_candidates(self, finding, opsets, constants, depth, declared=None
                                  ) -> list[Candidate]:
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
                                       declared=declared if declared is not None else {},
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
            problem, nested, types = self._body_problem(fn, finding, opsets, constants, depth)
            if problem:
                out.append(Candidate("decomposition", entry.plugin, rule, False, problem))
                continue
            inner = []
            if nested:
                fn = self._lower_nested(fn, nested, opsets)
                for choice, inner_finding in nested.values():
                    inner.append((choice.kind, choice.plugin, choice.rule, inner_finding.op_label))
                    inner.extend(choice.nested)
            proven = not any(a.type in (a.GRAPH, a.GRAPHS) for n in fn.node for a in n.attribute)
            if nested and depth == 0:  # the lowered body's types, as it will be spliced
                problem, again, types = self._body_problem(fn, finding, opsets, {}, depth)
                proven = proven and not problem and not again
            out.append(Candidate(
                "decomposition", entry.plugin, rule, True, "", fn, nested=inner,
                output_types=tuple(types.get(o) for o in fn.output), proven=proven,
            ))
            break
        if not entries:
            out.append(Candidate("decomposition", "-", "-", False,
                                 "no installed plugin registers a decomposition for this op"))
        return out

    def _body_problem(self, fn: FunctionProto, finding: Finding, opsets, constants, depth):
        """(None, nested, types) if every node of the body runs on every target or has a
        remedy itself (``nested``: body index -> (candidate, finding) to lower inside the
        body; ``types``: the body's value types, from the finding's input types);
        (problem, {}, types) otherwise."""
        if depth >= MAX_DEPTH:
            return "decompositions nest too deeply", {}, {}
        body_opsets = dict(opsets)
        for entry in fn.opset_import:
            body_opsets.setdefault(normalize_domain(entry.domain), entry.version)
        types = {formal: t for formal, t in zip(fn.input, finding.input_types) if t}
        body_constants = _constant_outputs(fn.node)
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
                                  body_opsets.get(domain), types, body_opsets,
                                  constants=body_constants)
                problem = target.check_node(query)
                if problem is None:
                    continue
                inner_finding = Finding(
                    problem.target, problem.path, problem.domain, problem.op_type,
                    problem.version, problem.reason, problem.detail, inner.name, inner,
                    tuple(types.get(n) if n else None for n in inner.input), body_opsets,
                )
                # a body's values are not the model's: builders see no constants there
                sub = self._decomposition_candidates(inner_finding, body_opsets, {}, depth + 1)
                chosen = next((c for c in sub if c.accepted), None)
                if chosen is None and self._lowered_later(inner_finding):
                    continue  # spliced at the model's opset, lowered with the whole model
                if chosen is None:
                    return (f"its body uses {inner_finding.op_label}, which {target.name} "
                            f"cannot run ({problem.detail})"), {}, types
                nested[i] = (chosen, inner_finding)
        return None, nested, types

    def _lowered_later(self, finding: Finding) -> bool:
        """Whether a body node that is only too new for a target's opset ceiling is one a
        pass lowers: bodies are written once at the model's opset and spliced there, and
        the model, bodies included, is then brought under the ceiling as a whole (the
        model's own opset import is then above the ceiling too, so that pass runs)."""
        if finding.reason != "opset-too-new":
            return False
        return any(p.offers(finding, self.pass_ctx)[0] for p in self.passes)

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
        plan = self._by_finding.get(id(finding))
        if plan is None:  # a node inside a body (nested remedies): named per signature
            key = self.signature(finding.node, dict(finding.scope_opsets or {}),
                                 finding.input_types)
            if key not in self._nested_names:
                self._nested_names[key] = f"{finding.op_type}_{self._named}"
                self._named += 1
            return self._nested_names[key]
        if plan.name is None:
            plan.name = f"{finding.op_type}_{self._named}"
            self._named += 1
        return plan.name


def _fingerprints(reads: tuple, node: NodeProto, constants, declared) -> tuple:
    """What each read of a plan's builders sees for ``node`` (a digest of the value)."""
    if not reads:
        return ()
    out = []
    inputs = node.input
    for kind, (where, ref) in reads:
        if where == "input":
            name = inputs[ref] if ref < len(inputs) else None
        else:
            name = ref
        value = (constants if kind == "constant" else declared).get(name) if name else None
        if value is None:
            out.append(None)
        else:
            out.append(hashlib.blake2b(value.SerializeToString(), digest_size=16).digest())
    return tuple(out)


def _has_onnx_schema(finding: Finding) -> bool:
    from onnx import defs

    return defs.has(finding.op_type, normalize_domain(finding.domain))


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
        out.update(_constant_outputs(scope.nodes))
    return out


def _constant_outputs(nodes) -> dict:
    """``Constant(value=...)`` outputs by name (split sizes, axes, shapes); a value taken
    from a function's attribute (``value = @v``) is not known here."""
    out = {}
    for node in nodes:
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx") and node.output:
            for a in node.attribute:
                if a.name == "value" and not a.ref_attr_name:
                    out[node.output[0]] = a.t
    return out


def _detect(model: ModelProto, targets: Sequence[Target]) -> list[Finding]:
    findings = []
    for target in targets:
        findings.extend(find_unsupported(model, target, keep_nodes=True))
    return findings


@dataclass
class Region:
    """One remedy function as spliced: the function, a call to it (a copy of the first
    node retargeted to it) and that node's finding. Verification checks it alone."""

    function: FunctionProto
    call: NodeProto
    finding: Finding


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
    # retarget after every choice is made: plans are keyed by the node as it was. A plan is
    # shared by every node of its signature: the remedy's node gives the op, domain,
    # attributes and provenance, each node keeps its own name, inputs and outputs
    for node, remedy in changed.values():
        name, inputs, outputs = node.name, list(node.input), list(node.output)
        node.CopyFrom(remedy.node)
        node.name = name
        node.input[:] = inputs
        node.output[:] = outputs
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
    skip: set[int] | frozenset = frozenset(), regions: dict[str, Region] | None = None,
) -> tuple[ModelProto, bool]:
    """Retarget every node with an accepted decomposition, then inline them all at once.
    ``regions``: filled with one :class:`Region` per remedy function."""
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
        if regions is not None and name not in regions:
            call = NodeProto()
            call.CopyFrom(f.node)
            regions[name] = Region(functions[name], call, f)
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


def _uses_of(counts: Counter) -> tuple[set[str], set[tuple[str, str]]]:
    """:func:`_uses` from :func:`rewriter.walk.op_counts`."""
    return {d for d, _ in counts}, set(counts)


def cleanup(model: ModelProto, original: ModelProto | None = None, *,
            counts: Counter | None = None, original_counts: Counter | None = None) -> bool:
    """Drop opset imports and model-local functions nothing uses any more. With
    ``original``, only those the rewrite left unused go: what the original already imported
    or defined without using is not the rewrite's business. ``counts`` and
    ``original_counts``: the models' :func:`~rewriter.walk.op_counts`, when known.
    Returns whether a function was dropped."""
    used_domains, called = _uses_of(counts) if counts is not None else _uses(model)
    if original is not None:
        before_domains, before_called = (_uses_of(original_counts)
                                         if original_counts is not None else _uses(original))
        used_domains |= {normalize_domain(o.domain) for o in original.opset_import
                         if normalize_domain(o.domain) not in before_domains}
        for f in original.functions:
            for entry in f.opset_import:
                if normalize_domain(entry.domain) not in before_domains:
                    used_domains.add(normalize_domain(entry.domain))
            if (normalize_domain(f.domain), f.name) not in before_called:
                called.add((normalize_domain(f.domain), f.name))
    kept = [f for f in model.functions if (normalize_domain(f.domain), f.name) in called]
    dropped = len(kept) != len(model.functions)
    if dropped:
        del model.functions[:]
        model.functions.extend(kept)
    for container in [model, *model.functions]:
        imports = [o for o in container.opset_import
                   if normalize_domain(o.domain) in used_domains | {""}]
        if len(imports) != len(container.opset_import):
            del container.opset_import[:]
            container.opset_import.extend(imports)
    return dropped


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


def verify_regions(
    model: ModelProto, original: ModelProto, regions: Mapping[str, Region],
    declared: Mapping, conflicts: Sequence[str] = (), base_dir=None,
    types: Mapping[str, str] | None = None,
) -> tuple[dict[str, str], str]:
    """Verification of a big rewrite without a whole-model full check: the non-full checker
    on the whole model, and the full checker (strict, type-checking shape inference) on
    each rewritten region alone (:func:`region_problem`; ``types``: the main graph's value
    types after the rewrite, for calls whose input types planning did not know).
    ``conflicts`` (from the target re-check: types that changed or disagree) fail it too.
    Returns the verdicts and what they covered."""
    import onnx

    def first_line(e: Exception) -> str:
        return (str(e).strip().splitlines() or [type(e).__name__])[0]

    def basic(m: ModelProto) -> str:
        with _external_data_folder(m, base_dir):
            try:
                onnx.checker.check_model(m, full_check=False)
            except Exception as e:  # noqa: BLE001 - onnx raises several kinds
                return first_line(e)
        return "ok"

    checked = untyped = 0
    problems: list[str] = []
    for region in regions.values():
        problem = region_problem(region, declared, model.ir_version, types or {})
        if problem is _UNTYPED:
            untyped += 1
            continue
        checked += 1
        if problem:
            problems.append(f"remedy for {region.finding.op_label} "
                            f"({region.function.name}): {problem}")
    problems.extend(conflicts)
    results = {"checker": basic(model)}
    if results["checker"] != "ok" and basic(original) != "ok":
        results["checker"] = f"pre-existing: the original fails too: {results['checker']}"
    results["shape_inference"] = problems[0] if problems else "ok"
    scope = (f"rewritten regions: {checked} remedy function(s) checked alone"
             + (f", {untyped} not checkable alone (an input of unknown type, or "
                "ai.onnx opset < 11)" if untyped else "")
             + "; whole model: non-full checker")
    return results, scope


_UNTYPED = "untyped"


def region_problem(region: Region, declared: Mapping, ir_version: int,
                   types: Mapping[str, str] | None = None) -> str | None:
    """The full checker on one remedy function spliced into a wrapper model alone: its
    inputs typed as at the call (declared type and shape where the model states them, else
    the element type at unknown rank), its outputs held to their declared types. The
    first line of the checker's error, None if it passes, or ``_UNTYPED`` when an input's
    type is unknown (the region cannot be checked alone)."""
    import onnx
    from onnx import TensorProto, helper, inliner

    from rewriter.typeinfer import type_string

    f, call, fn = region.finding, region.call, region.function
    opsets = {normalize_domain(k): v for k, v in (f.scope_opsets or {}).items()}
    if opsets.get("", 1) < 11:  # the wrapper's Reshape/SequenceConstruct
        return _UNTYPED
    nodes, inputs, outputs = [], [], []
    for name, t in zip(call.input, f.input_types):
        if not name or any(v.name == name for v in inputs):
            continue
        t = t or (types or {}).get(name)
        proto = declared.get(name)
        if proto is not None and proto.tensor_type.HasField("shape"):
            inputs.append(helper.make_value_info(name, proto))
            continue
        elem = _elem_type(t or (type_string(proto) if proto is not None else None))
        if elem is None:
            return _UNTYPED
        inputs += [helper.make_tensor_value_info(f"{name}.data", elem, ["n"]),
                   helper.make_tensor_value_info(f"{name}.shape", TensorProto.INT64, ["r"])]
        nodes.append(helper.make_node("Reshape", [f"{name}.data", f"{name}.shape"], [name]))
    nodes.append(call)
    for name in call.output:
        proto = declared.get(name) if name else None
        if proto is None:
            continue
        if proto.tensor_type.HasField("shape"):
            outputs.append(helper.make_value_info(name, proto))
            continue
        elem = _elem_type(type_string(proto))
        if elem is not None:  # same element type as the declaration, at any shape
            inputs.append(helper.make_tensor_value_info(f"{name}.declared", elem, ["n"]))
            nodes.append(helper.make_node("SequenceConstruct", [name, f"{name}.declared"],
                                          [f"{name}.same"]))
    wrapper = helper.make_model(
        helper.make_graph(nodes, "region", inputs, outputs),
        opset_imports=[helper.make_opsetid(d, v) for d, v in sorted(opsets.items())]
        + [helper.make_opsetid(fn.domain, 1)],
        ir_version=max(ir_version, 8),
    )
    wrapper.functions.append(fn)
    try:
        spliced = inliner.inline_selected_functions(wrapper, [(fn.domain, fn.name)], False)
        del spliced.functions[:]
        onnx.checker.check_model(spliced, full_check=True)
    except Exception as e:  # noqa: BLE001 - onnx raises several kinds
        return (str(e).strip().splitlines() or [type(e).__name__])[0]
    return None


def _elem_type(type_str: str | None) -> int | None:
    from onnx import TensorProto

    if not type_str or not type_str.startswith("tensor(") or not type_str.endswith(")"):
        return None
    try:
        return TensorProto.DataType.Value(type_str[7:-1].upper())
    except ValueError:
        return None


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
    counts_before = op_counts(work)
    report.before = ModelStats.from_counts(counts_before)
    ctx = PassContext(targets, plugins.registry)
    passes = instantiate(plugins.registry)
    for p in passes:
        p.prepare(work, ctx)
    planner = _Planner(targets, plugins, passes, ctx, prefer)

    detections = [detect(work, t) for t in targets]
    findings = [f for d in detections for f in d.findings]
    declared = detections[0].declared if detections else {}
    constants = _LazyConstants(work)
    why: dict[int, str] = {}
    unfixable = []
    relevant_pass: set[int] = set()
    for f in findings:
        candidates = planner.candidates(f, constants, declared)
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
            why[id(f)] = _why_not(f, candidates)
            if any(c.kind == "pass" and c.relevant for c in candidates):
                relevant_pass.add(id(f))  # a pass is about it: it may take it once typed
    # A finding whose input types are unknown here (downstream of an op no schema types)
    # may be fixable once the remedies upstream are spliced: the rounds below decide, and
    # what is still left then fails the rewrite all the same (nothing is written)
    provisional = [f for f in unfixable if f.node is not None and id(f) in relevant_pass
                   and len(unfixable) < len(findings)
                   and any(t is None for n, t in zip(f.node.input, f.input_types) if n)]
    if len(provisional) < len(unfixable) and not partial:
        if explain or dry_run:
            report.remaining = unfixable
            report.after = report.before
            return model, report
        raise UnfixableError([f for f in unfixable if f not in provisional], why)
    if dry_run:
        report.remaining = unfixable
        for f in findings:
            choice = next((c for c in planner.candidates(f, constants, declared)
                           if c.accepted), None)
            if choice is not None:
                report.applied[(choice.kind, choice.plugin, choice.rule, f.op_label)] += 1
        report.after = report.before
        return model, report

    # Nested remedies are lowered inside their functions at planning time, so one round
    # normally suffices. The target re-check after it is done where the rewrite can have
    # changed a verdict when the plan proves the rest (see _recheck), else on everything.
    regions: dict[str, Region] = {}
    conflicts: list[str] = []
    main_types: dict[str, str] = {}  # after the rewrite, when the re-check knows them
    pass_ran = False
    for round_index in range(MAX_ROUNDS):
        report.rounds = round_index + 1
        if not findings:
            break
        for_passes = [f for f in findings if not _decomposed(f, planner)]
        retargeted = apply_kernels(work, findings, planner, ctx)
        work, changed = apply_decompositions(work, findings, planner, ctx, retargeted, regions)
        changed = changed or bool(retargeted)
        ran = False
        for p in passes:
            if any(p.offers(f, ctx)[0] for f in for_passes):
                result = p.run(work, ctx)
                if result is not None:
                    work, changed, ran = result, True, True
        pass_ran = pass_ran or ran
        if not changed:
            break
        fast = None
        if round_index == 0 and not retargeted and not ran and not unfixable:
            fast = _recheck(work, targets, detections, findings, planner)
        if fast is not None:
            findings, found_conflicts, checked, main_types = fast
            conflicts.extend(found_conflicts)
            report.recheck_scope = (f"{checked} node(s) outside the proven bodies whose "
                                    "input types changed or that hold subgraphs")
        else:
            findings = _detect(work, targets)
            report.recheck_scope = "whole model"
    if provisional and findings and not partial:  # what waited on types is still left
        left = {id(f): _why_not(f, planner.candidates(f, _LazyConstants(work), declared))
                for f in findings if f.node is not None}
        raise UnfixableError(findings, left)
    counts = op_counts(work)
    if cleanup(work, model, counts=counts, original_counts=counts_before):
        counts = op_counts(work)
    report.applied = ctx.applied
    report.remaining = findings
    report.after = ModelStats.from_counts(counts)
    report.kernels = _kernel_summary(work)
    if (report.after.nodes > FULL_CHECK_MAX_NODES and not pass_ran
            and (regions or conflicts)):
        report.verification, report.verification_scope = verify_regions(
            work, model, regions, declared, conflicts, base_dir, main_types)
    else:
        report.verification = verify(work, model, base_dir)
        report.verification_scope = "whole model"
        if conflicts and report.verification.get("shape_inference") == "ok":
            report.verification["shape_inference"] = conflicts[0]
    for f in report.remaining:
        object.__setattr__(f, "node", None)  # do not keep the model alive through reports
    return work, report


def _why_not(finding: Finding, candidates: list[Candidate]) -> str:
    """Why no remedy applies to ``finding``: the reason of a pass the finding is about, else
    a plugin's own reason (it beats the placeholder of a kind nobody registered)."""
    declined = ([c.why for c in candidates if c.why and c.plugin != "-" and c.kind != "pass"]
                or [c.why for c in candidates if c.why])
    own = [c.why for c in candidates if c.why and c.relevant]
    return (own or declined or [finding.detail])[0]


def _recheck(work: ModelProto, targets, detections: list[Detection], findings, planner):
    """The target re-check of round one from the plan (:func:`rewriter.detect.recheck`):
    (findings, conflicts, nodes checked), or None when the plan does not prove enough
    (a body with subgraphs, model-local functions, ...)."""
    replaced: dict[str, tuple] = {}
    for d in detections:
        for f in d.findings:
            if f.node is None or id(f) not in d.in_main:
                continue  # a node in a subgraph: re-checked with its whole subgraph
            choice = planner.chosen(f, None)
            if choice is None or choice.kind != "decomposition" or not choice.proven:
                return None
            inputs = tuple(f.node.input)
            for index, name in enumerate(f.node.output):
                if name:
                    replaced.setdefault(name, (f, index, inputs))
    found, conflicts, checked, types = [], [], 0, {}
    for target, before in zip(targets, detections, strict=True):
        result = recheck(work, target, before, replaced, planner.body_outputs)
        if result is None:
            return None
        found.extend(result.findings)
        conflicts.extend(c for c in result.conflicts if c not in conflicts)
        checked = max(checked, result.checked)
        types = types or result.types
    return found, conflicts, checked, types


def _decomposed(f: Finding, planner: _Planner) -> bool:
    if f.node is None:
        return False
    plan = planner._by_finding.get(id(f))
    return (plan is not None and plan.choice is not None
            and plan.choice.kind in ("decomposition", "kernel"))


def _kernel_summary(model: ModelProto) -> dict[str, Any]:
    """What the rewritten model needs at run time (from its metadata), for the report."""
    import json

    from rewriter.kernels import read_needs

    needs = read_needs(model)
    if not needs:
        return {}
    return json.loads(needs.to_json())
