"""The rewrite engine on a ModelProto: detect, plan, apply to a fixed point, verify the
structure; the report it fills (``RewriteReport``). The library facade
(:func:`rewriter.api.rewrite`) adds the numeric comparison and the save."""

from __future__ import annotations

import gc
from collections import Counter
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from onnx import FunctionProto, ModelProto

from rewriter import progress
from rewriter.apply.inline import TakenNames
from rewriter.apply.simplify import simplify
from rewriter.apply.splice import (
    Region,
    apply_decompositions,
    apply_kernels,
    cleanup,
    splice_into_new,
)
from rewriter.detect.ranks import (
    clear_contradicted_declarations,
    cleared_sentence,
    without_contradicted_declarations,
)
from rewriter.detect.targets import Finding, Target
from rewriter.detect.walker import (
    Detection,
    SplicedPositions,
    detect,
    find_unsupported,
    recheck,
)
from rewriter.errors import EXIT_FINDINGS, RewriterError, UnfixableError
from rewriter.graph.opid import OpId
from rewriter.graph.walk import iter_scopes, normalize_domain, op_counts, subgraphs
from rewriter.manager import Plugins
from rewriter.plan.kinds import RemedyKind
from rewriter.plan.passes import PassContext, RewritePass, ask_offers, instantiate, run_pass
from rewriter.plan.planner import Candidate, LazyConstants, Planner, why_not
from rewriter.verify.structure import non_full_check, verify, verify_regions

MAX_ROUNDS = 8

# Verification runs the full checker (strict, type-checking shape inference) on the whole
# rewritten model up to this many nodes; above, on each distinct rewritten region (every
# remedy function in a small wrapper model), plus the non-full checker on the whole model
# and the target re-check with type agreement on every node whose input types changed.
FULL_CHECK_MAX_NODES = 10_000

@dataclass
class ModelStats:
    nodes: int
    ops: Counter
    # the domains the nodes use, in every graph and function ("" for ai.onnx)
    domains: frozenset[str] = frozenset()

    @classmethod
    def of(cls, model: ModelProto) -> ModelStats:
        return cls.from_counts(op_counts(model))

    @classmethod
    def from_counts(cls, counts: Counter) -> ModelStats:
        """From :func:`rewriter.walk.op_counts`."""
        ops: Counter = Counter()
        for (domain, op_type), n in counts.items():
            ops[str(OpId(domain, op_type))] += n
        return cls(sum(ops.values()), ops, frozenset(d for d, _ in counts))

@dataclass
class RewriteReport:
    model: str
    targets: list[str]
    output: str | None = None
    dry_run: bool = False
    before: ModelStats | None = None
    after: ModelStats | None = None
    applied: Counter = field(default_factory=Counter)  # (kind, plugin, rule, op) -> nodes
    # changes made to the model besides the remedies (a missing opset import added): one
    # sentence each; a repair is verified like any rewrite
    repairs: list[str] = field(default_factory=list)
    remaining: list[Finding] = field(default_factory=list)
    # graph outputs whose type the rewrite changed (--adapt-interface): one sentence each,
    # the record in the model's metadata (rewriter.io.interface)
    interface: list[str] = field(default_factory=list)
    explain: list[dict] = field(default_factory=list)
    verification: dict[str, str] = field(default_factory=dict)
    rounds: int = 0
    kernels: dict[str, Any] = field(default_factory=dict)  # what the result needs to run
    comparison: Any = None  # rewriter.comparison.CompareReport when numerics were verified
    # what "checker"/"shape_inference" covered: "whole model" or "rewritten regions: ..."
    verification_scope: str = ""
    # the target re-check: "whole model" or "N nodes whose input types changed"
    recheck_scope: str = ""
    # what the cleanup stage did to the result, or why it was left out (one sentence)
    cleanup: str = ""
    # verified | mismatch | unverified | unchanged (rewriter.verdicts); "" for a dry run
    verdict: str = ""
    verdict_reason: str = ""
    verify: bool = True  # False: the caller turned the numeric comparison off
    written: bool = False
    # {"input": ..., "output": ...}: nodes, initializer and file bytes (rewriter.report.size)
    size: dict[str, Any] = field(default_factory=dict)
    # one replaced node and the nodes that replaced it (rewriter.report.picture), or None
    picture: dict[str, Any] | None = None

    def decide(self) -> None:
        """Set :attr:`verdict` from the structural checks and the comparison."""
        from rewriter.verify.verdicts import MISMATCH, NOT_VERIFIED, UNCHANGED, UNVERIFIED, VERIFIED

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
        elif not self.applied and not self.remaining and not self.repairs:
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
        from rewriter.verify.verdicts import EXIT_CODES, UNVERIFIED

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
            "repairs": self.repairs,
            "interface": self.interface,
            "before": {"nodes": self.before.nodes, "ops": dict(sorted(self.before.ops.items()))}
            if self.before else None,
            "after": {"nodes": self.after.nodes, "ops": dict(sorted(self.after.ops.items()))}
            if self.after else None,
            "remaining": [f.as_dict() for f in self.remaining],
            "verification": self.verification,
            "verification_scope": self.verification_scope,
            "recheck_scope": self.recheck_scope,
            "cleanup": self.cleanup,
            "kernels": self.kernels,
            "compare": self.comparison.as_dict() if self.comparison is not None else None,
            "explain": self.explain,
            "size": {"input": self.size.get("input"), "output": self.size.get("output")},
            "picture": self.picture,
        }

@dataclass
class RewriteResult:
    model: Any  # the same kind as the input: path (written), ModelProto or onnx_ir.Model
    report: RewriteReport

def taken_names(detections: Sequence[Detection]) -> TakenNames | None:
    """The value names the model defined when detected (main graph's node outputs and
    typed values, the values every graph declares), which new names must avoid, read from
    the first detection's sets (not copied); None when unknown."""
    if not detections:
        return None
    d = detections[0]
    return TakenNames(d.produced, d.declared, d.main_types)


def _detect(model: ModelProto, targets: Sequence[Target]) -> list[Finding]:
    findings = []
    for target in targets:
        findings.extend(find_unsupported(model, target, keep_nodes=True))
    return findings

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
    adapt_interface: bool = False,
    base_dir=None,
    data_locations: Collection[str] | None = None,
    numbers: Callable[..., list[Finding]] | None = None,
    clean: bool = True,
) -> tuple[ModelProto, RewriteReport]:
    """The engine on a ModelProto (a copy is rewritten; ``model`` is left as it is).

    ``clean``: tidy the result's graph once the remedies are in (constant folding, dead
    nodes, common subexpressions: :mod:`rewriter.apply.simplify`), before its validation.

    ``numbers``: for a target whose confirmation ran the model and found nothing, the
    nodes its runtime computes differently from the oracle (``computes-differently``
    findings with their nodes: :func:`rewriter.comparison.numbers.numbers_for`), remedied
    like any other finding.

    ``prefer``: ``"decompose"`` (default: a decomposed model needs nothing at deployment) or
    ``"kernel"``, for ops that have both remedies. ``data_locations``: the external-data
    files the model names, when the caller knows them (from the load; the validation then
    does not read every tensor for them). ``adapt_interface``: passes may rewrite a graph
    output a target cannot return to a tensor it can (``PassContext.options``), recording
    the original interface in the model's metadata (:mod:`rewriter.io.interface`)."""
    # ``model`` is only read until round one changes it: the result is then built from it
    # (splice_into_new: no copy of its nodes), or a working copy is changed in place.
    # Declared shapes onnx's inference contradicts are cleared first (a repair, kept only
    # when something is remedied): remedies are planned on the shapes they declare
    original = model
    model, repairs = without_contradicted_declarations(model)
    work = model
    report = RewriteReport(model_name, [t.name for t in targets], dry_run=dry_run)
    counts_before = op_counts(model)
    report.before = ModelStats.from_counts(counts_before)
    config = MappingProxyType({"targets": tuple(t.name for t in targets), "prefer": prefer,
                               "partial": partial, "dry_run": dry_run,
                               "adapt_interface": adapt_interface,
                               "base_dir": base_dir})  # external-shape-data reads from it
    ctx = PassContext(targets, plugins.registry, config)
    passes = pipeline(plugins, targets, config)
    for p in passes:
        p.prepare(model, ctx)  # (read only)
    planner = Planner(targets, plugins, passes, ctx, prefer)
    constants = LazyConstants(model)

    def planned_types(finding: Finding, declared: Mapping) -> tuple | None:
        # the output types the finding's node will have (its proven decomposition's), so
        # that detection types what is downstream of ops no schema types; one plan per
        # node signature, kept for the plan stage
        choice = planner.proven_decomposition(finding, constants, declared)
        return choice.output_types if choice is not None else None

    with progress.stage("detect", f"{report.before.nodes} nodes"):
        detections = [detect(model, t, typing=planned_types, base_dir=base_dir)
                      for t in targets]
    if numbers is not None:
        for t, d in zip(targets, detections):
            if d.findings or d.confirmation is None or not t.compares_numbers:
                continue  # (what the confirmation leaves to compare on: numbers_inputs)
            with progress.stage("detect", f"{t.name}'s numbers"):
                found = numbers(model, t, d.main_types, d.confirmation)
            d.findings.extend(found)
            d.in_main.update(id(f) for f in found if f.node is not None)
    findings = [f for d in detections for f in d.findings]
    if repairs and not findings:  # the model runs as it is: it stays as it is
        model = work = original
        repairs = []
    report.repairs = repairs
    declared = detections[0].declared if detections else {}
    with progress.stage("plan", f"{len(findings)} findings"):
        planned = plan_findings(planner, findings, constants, declared, explain)
    unfixable, why = planned.unfixable, planned.why
    report.explain = planned.explain
    # A finding whose input types are unknown here (downstream of an op no schema types)
    # may be fixable once the remedies upstream are spliced: the rounds below decide, and
    # what is still left then fails the rewrite all the same (nothing is written)
    provisional = planned.typed_later if len(unfixable) < len(findings) else []

    def at_newer_opset(left: Sequence[Finding], known) -> tuple | None:
        """The whole rewrite again on the input raised to the opset the declined bodies of
        ``left`` need (None: they need none, or it cannot be)."""
        raised = _with_raised_opset(model, left, planner, known, declared, targets)
        if raised is None:
            return None
        newer, sentence = raised
        result, more = _rewrite_proto(
            newer, targets, plugins, partial=partial, explain=explain, model_name=model_name,
            prefer=prefer, adapt_interface=adapt_interface, base_dir=base_dir,
            data_locations=data_locations, numbers=numbers, clean=clean)
        more.before = report.before
        more.repairs = [*repairs, sentence, *more.repairs]
        return result, more

    if len(provisional) < len(unfixable) and not partial and not dry_run:
        again = at_newer_opset(unfixable, constants)
        if again is not None:
            return again
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
    # disagreeing types downstream of values typed from the plan (detection's, the re-check's)
    conflicts: list[str] = list(dict.fromkeys(c for d in detections for c in d.conflicts))
    main_types: dict[str, str] = {}  # after the rewrite, when the re-check knows them
    pass_ran = False
    taken = taken_names(detections)  # grown with each name the splice makes
    counts_after: Counter | None = None  # from the plan, when it proves them
    changed_rounds = 0
    by_template = False  # round one made the result from the input (splice_into_new)
    # onnx's checker on the input stands for the kept nodes of such a result (see
    # verify_regions); run before the splice, its copy of the model is not the peak
    input_verdict: list[str] = []
    big = report.before.nodes > FULL_CHECK_MAX_NODES  # (the result has as many or more)

    def check_input() -> None:
        input_verdict.append(non_full_check(model, base_dir, data_locations))

    for round_index in range(MAX_ROUNDS):
        report.rounds = round_index + 1
        if not findings:
            break
        spliced = findings
        for_passes = [f for f in findings if not _decomposed(f, planner)]
        with progress.stage("apply", f"{len(findings)} remedies"):
            visit = SplicedPositions()  # where the re-check looks in the spliced main graph
            new = None
            if work is model:
                new = splice_into_new(model, findings, planner, ctx, regions, taken, visit,
                                      check_input if big else None)
                if new is None:
                    work = _working_copy(model, detections, passes, ctx)
            if new is not None:
                work, changed, retargeted, new = new, True, set(), None
                by_template = True
                taken = None  # (not every new name was kept: read again if a round follows)
            else:
                retargeted = apply_kernels(work, findings, planner, ctx)
                work, changed = apply_decompositions(work, findings, planner, ctx,
                                                     retargeted, regions, taken, visit)
                changed = changed or bool(retargeted)
            ran = False
            for p in passes:
                if p.wants_findings:
                    ctx.findings = [f for f in for_passes if ask_offers(p, f, ctx)[0]]
                    offered = bool(ctx.findings)
                else:
                    offered = any(ask_offers(p, f, ctx)[0] for f in for_passes)
                if offered:
                    result = run_pass(p, work, ctx)
                    ctx.findings = ()
                    if result is not None:
                        work, changed, ran = result, True, True
                        taken = None  # names the pass made: read them again if needed
        pass_ran = pass_ran or ran
        if not changed:
            break
        changed_rounds += 1
        with progress.stage("re-check", "the rewritten nodes"):
            fast = None
            if round_index == 0 and not retargeted and not ran and not unfixable:
                fast = _recheck(work, targets, detections, findings, planner, visit)
            if fast is not None:
                counts_after = _counts_from_plan(counts_before, spliced, planner)
                findings, found_conflicts, checked, main_types = fast
                conflicts.extend(found_conflicts)
                report.recheck_scope = (f"{checked} node(s) outside the proven bodies whose "
                                        "input types changed or that hold subgraphs")
            else:
                findings = _detect(work, targets)
                report.recheck_scope = "whole model"
        # the next round's findings are about the rewritten model: the passes read it
        # (an If a decomposition brought, known to take one branch: static-if)
        for p in passes:
            p.prepare(work, ctx)
    if findings and not partial and any(f.node is not None for f in findings):
        # found only once the first rounds changed the model (a Cast tract types as a
        # shape, seen once the ZipMap it fed was adapted), declined for an older opset
        again = at_newer_opset(findings, LazyConstants(work))
        if again is not None:
            return again
    if provisional and findings and not partial:  # what waited on types is still left
        left = {id(f): why_not(f, planner.candidates(f, LazyConstants(work), declared))
                for f in findings if f.node is not None}
        raise UnfixableError(findings, left)
    if work is model:  # no finding: the result is a copy all the same
        work = ModelProto()
        work.CopyFrom(model)
    counts = counts_after if changed_rounds == 1 and counts_after is not None else \
        op_counts(work)
    if changed_rounds and not clean:
        report.cleanup = "turned off (--no-cleanup)"
    elif changed_rounds:
        with progress.stage("cleanup", f"{sum(counts.values()):,} nodes"):
            work, tidied = simplify(work)
        report.cleanup = str(tidied)
        if tidied.done:
            counts = op_counts(work)
    if cleanup(work, model, counts=counts, original_counts=counts_before):
        counts = op_counts(work)
    report.applied = ctx.applied
    report.remaining = findings
    report.after = ModelStats.from_counts(counts)
    report.kernels = _kernel_summary(work)
    # What detection and planning kept (every finding's node, the walks' type maps, the
    # planner's caches, the names taken) goes before onnx's checker parses its own copy of
    # the result: that is the peak of a big rewrite's memory
    if regions:  # what verify_regions reads: about the regions' calls, owned (not views
        # into the working copy's memory, which the checker's step frees), declared as the
        # result declares them (the splice cleared the shapes of the outputs it replaced)
        main_types = {name: main_types[name] for region in regions.values()
                      for name in region.call.input if name in main_types}
        wanted = {name for region in regions.values()
                  for name in [*region.call.input, *region.call.output] if name in declared}
        now = {v.name: v.type for v in work.graph.value_info if v.name in wanted}
        declared = {name: _owned(now.get(name, declared[name])) for name in wanted}
        for region in regions.values():
            object.__setattr__(region.finding, "node", None)  # the call's copy stands in
    detections = findings = spliced = for_passes = planner = planned = constants = None
    taken = visit = passes = p = None  # (passes keep the model they prepared on)
    with progress.stage("validate", f"{report.after.nodes} nodes"):
        if (report.after.nodes > FULL_CHECK_MAX_NODES and not pass_ran
                and (regions or conflicts)):
            checked: ModelProto | bytes = work
            kept_as_input = by_template and changed_rounds == 1
            if not kept_as_input and (base_dir is None or data_locations is not None):
                # onnx's checker parses its own copy of the result: the working copy goes
                # meanwhile (with the replaced nodes its arena still holds), the result is
                # parsed back from the checker's bytes after
                checked, ir_version, work = work.SerializeToString(), work.ir_version, None
            report.verification, report.verification_scope = verify_regions(
                checked, model, regions, declared, conflicts, base_dir, main_types,
                data_locations, ir_version=ir_version if work is None else None,
                spliced=kept_as_input,
                original_verdict=input_verdict[0] if input_verdict else None)
            if work is None:
                work = ModelProto.FromString(checked)
            checked = None
        else:
            report.verification = verify(work, original, base_dir, data_locations)
            if _new_failure(report.verification.get("shape_inference", "ok")):
                # a declaration of the input's that its rewritten nodes' inference now
                # contradicts (onnxruntime-genai's builder declares a KV cache's total
                # length as the new tokens' count; an input's dims fixed make it concrete)
                # is the input's mistake, cleared; the rewrite's own still fail
                cleared = clear_contradicted_declarations(work, _declared_names(original))
                if cleared:
                    report.repairs.append(cleared_sentence(cleared, " once rewritten "
                                                           "(declared in the input)"))
                    report.verification = verify(work, original, base_dir, data_locations)
            report.verification_scope = "whole model"
            if conflicts and report.verification.get("shape_inference") == "ok":
                report.verification["shape_inference"] = conflicts[0]
    for f in report.remaining:
        object.__setattr__(f, "node", None)  # do not keep the model alive through reports
    return work, report


def _with_raised_opset(model: ModelProto, unfixable: Sequence[Finding], planner: Planner,
                       constants, declared, targets: Sequence[Target]
                       ) -> tuple[ModelProto, str] | None:
    """The model at the newer ai.onnx opset the declined bodies of every finding left need
    (each has a decomposition declining only for it: ``Declined(needs_opset=N)``), with the
    repair's sentence; None when one has not, a target's ceiling is below it, or onnx's
    version converter cannot convert the model."""
    from onnx import version_converter

    current = next((o.version for o in model.opset_import
                    if normalize_domain(o.domain) == ""), None)
    if current is None:
        return None
    needed = current
    for f in unfixable:
        wants = [c.needs_opset for c in planner.candidates(f, constants, declared)
                 if c.needs_opset is not None]
        if not wants:
            return None
        needed = max(needed, min(wants))
    if needed <= current or any(
            (t.max_opsets or {}).get("") is not None and t.max_opsets[""] < needed
            for t in targets):
        return None
    try:
        newer = version_converter.convert_version(model, needed)
    except Exception:  # noqa: BLE001 - onnx's converter refusing: the findings stay
        return None
    ops = ", ".join(sorted({f.op_label for f in unfixable}))
    return newer, (f"ai.onnx opset raised from {current} to {needed} by onnx's version "
                   f"converter (the bodies of {ops} need it)")


def _new_failure(verdict: str) -> bool:
    """A verification verdict that fails the rewrite (not ok, skipped or pre-existing)."""
    return not (verdict == "ok" or verdict.startswith(("skipped", "pre-existing")))


def _declared_names(model: ModelProto) -> set[str]:
    """The names every graph of ``model`` declares a value_info or an output for."""
    return {v.name for scope in iter_scopes(model) if scope.graph is not None
            for v in [*scope.graph.value_info, *scope.graph.output]}


@dataclass
class Planned:
    """The plan stage over a list of findings (see :func:`plan_findings`)."""

    unfixable: list[Finding]  # no remedy accepted
    why: dict[int, str]  # id(finding) -> why none (for the unfixable)
    relevant_pass: set[int]  # ids of unfixable findings a pass is about (may take them typed)
    explain: list[dict]  # the --explain groups (empty unless asked)
    # unfixable findings with an untyped input that some plugin's remedy (a registered
    # decomposition or kernel, or a pass about them) might take once the input is typed
    typed_later: list[Finding] = field(default_factory=list)


def plan_findings(planner: Planner, findings: Sequence[Finding], constants,
                  declared: Mapping[str, Any], explain: bool = False) -> Planned:
    """Every finding's candidates from ``planner`` (which plans once per node signature):
    which have none accepted and why, and, with ``explain``, the ``--explain`` groups."""
    why: dict[int, str] = {}
    unfixable = []
    relevant_pass: set[int] = set()
    typed_later: list[Finding] = []
    explained: dict[tuple, dict] = {}
    # what is derived from a candidate list, once per list: the planner hands the findings
    # of one node signature and op the same list (the list is held, so its id stays its own)
    derived: dict[int, tuple[list[Candidate], tuple, bool, bool, bool, dict]] = {}
    for f in findings:
        candidates = planner.candidates(f, constants, declared)
        known = derived.get(id(candidates))
        if known is None:
            answered = tuple([(c.kind, c.plugin, c.rule, c.accepted, c.why, c.relevant)
                              for c in candidates])
            accepted = any(c.accepted for c in candidates)
            known = derived[id(candidates)] = (
                candidates, answered, accepted,
                # a pass is about it: it may take it once typed
                not accepted and any(c.kind == RemedyKind.PASS and c.relevant
                                     for c in candidates),
                not accepted and any(c.relevant if c.kind == RemedyKind.PASS
                                     else c.plugin != "-" for c in candidates),
                {})  # finding detail -> why_not
        _, answered, accepted, relevant, takeable, whys = known
        if explain:
            _explain(explained, f, answered)
        if not accepted:
            unfixable.append(f)
            reason = whys.get(f.detail)
            if reason is None:
                reason = whys[f.detail] = why_not(f, candidates)
            why[id(f)] = reason
            if relevant:
                relevant_pass.add(id(f))
            if takeable and waits_on_types(f):
                typed_later.append(f)
    return Planned(unfixable, why, relevant_pass, list(explained.values()), typed_later)


def plan_for_check(model: ModelProto, target: Target, plugins: Plugins,
                   findings: Sequence[Finding], declared: Mapping[str, Any],
                   prefer: str = "decompose", base_dir=None,
                   adapt_interface: bool = False) -> Planned:
    """The plan ``rewrite --dry-run --explain`` makes for ``target`` alone, from findings
    already detected with their nodes (``detect``): no copy of the model, no second walk."""
    config = MappingProxyType({"targets": (target.name,), "prefer": prefer,
                               "partial": False, "dry_run": True,
                               "adapt_interface": adapt_interface, "base_dir": base_dir})
    ctx = PassContext([target], plugins.registry, config)
    passes = pipeline(plugins, [target], config)
    for p in passes:
        p.prepare(model, ctx)  # passes must not change the model here
    planner = Planner([target], plugins, passes, ctx, prefer)
    return plan_findings(planner, findings, LazyConstants(model), declared, explain=True)


def waits_on_types(finding: Finding) -> bool:
    """Whether one of the finding's node inputs has a type the walk could not infer (it is
    downstream of an op no schema types): a remedy may take it once those upstream are
    spliced."""
    node = finding.node
    return node is not None and any(t is None for n, t in zip(node.input, finding.input_types)
                                    if n)


def pipeline(plugins: Plugins, targets: Sequence[Target], config: Mapping[str, Any]
             ) -> list[RewritePass]:
    """The passes of one rewrite: every registered pass in phase order, then as each
    plugin's ``modify_pipeline`` hook leaves the list (called plugin by plugin, by name;
    a hook that fails or leaves something else than passes is named in the error)."""
    passes = instantiate(plugins.registry)
    caller = plugins.manager.hook.modify_pipeline
    for impl in sorted(caller.get_hookimpls(), key=lambda i: i.plugin_name):
        given = {"passes": passes, "targets": list(targets), "config": config}
        try:
            impl.function(**{name: given[name] for name in impl.argnames})
        except RewriterError:
            raise
        except Exception as e:  # noqa: BLE001 - the plugin's bug
            text = (str(e).strip().splitlines() or [""])[0]
            raise plugins.registry.plugin_error(
                impl.plugin_name, f"modify_pipeline failed: {type(e).__name__}: {text}") from e
        wrong = [p for p in passes if not isinstance(p, RewritePass)]
        if not isinstance(passes, list) or wrong:
            raise plugins.registry.plugin_error(
                impl.plugin_name, f"modify_pipeline left {wrong[0]!r} in the pass list, not a "
                "rewriter.plugin.RewritePass")
    return passes


def _explain(groups: dict[tuple, dict], finding: Finding, answered: tuple) -> None:
    """Add ``finding`` to the ``--explain`` groups: findings of one op whose remedies
    answered alike (``answered``: each candidate's kind, plugin, rule, accepted, why and
    whether it is a pass the finding is about) are
    one entry (``count``, ``paths``), with every candidate's answer (as dicts, made once
    per group)."""
    key = (finding.target, finding.domain, finding.op_type, finding.version, finding.reason,
           finding.detail, answered)
    group = groups.get(key)
    if group is None:
        groups[key] = {"finding": finding.as_dict(), "count": 1, "paths": [finding.path],
                       "candidates": [{"kind": k, "plugin": p, "rule": r, "accepted": a,
                                       "why": w, "relevant": rel}
                                      for k, p, r, a, w, rel in answered]}
    else:
        group["count"] += 1
        group["paths"].append(finding.path)


def _recheck(work: ModelProto, targets, detections: list[Detection], findings, planner,
             visit: SplicedPositions | None = None):
    """The target re-check of round one from the plan (:func:`rewriter.detect.recheck`):
    (findings, conflicts, nodes checked), or None when the plan does not prove enough
    (a body with subgraphs, model-local functions, ...)."""
    replaced: dict[str, tuple] = {}
    for d in detections:
        for f in d.findings:
            if f.node is None or id(f) not in d.in_main:
                continue  # a node in a subgraph: re-checked with its whole subgraph
            if planner.proven_decomposition(f, None) is None:
                return None
            for index, name in enumerate(f.node.output):
                if name:  # (the node, not a copy of its input names: 20 MiB at 300k)
                    replaced.setdefault(name, (f, index, f.node))
    found, conflicts, checked, types = [], [], 0, {}
    for target, before in zip(targets, detections, strict=True):
        result = recheck(work, target, before, replaced, planner.body_outputs, visit)
        if result is None:
            return None
        found.extend(result.findings)
        conflicts.extend(c for c in result.conflicts if c not in conflicts)
        checked = max(checked, result.checked)
        types = types or result.types
    return found, conflicts, checked, types

def _working_copy(model: ModelProto, detections: Sequence[Detection], passes, ctx
                  ) -> ModelProto:
    """A copy of ``model`` to change in place: the findings detected on ``model`` are
    pointed at the copy's nodes, and the passes prepared on it."""
    work = ModelProto()
    work.CopyFrom(model)
    pairs = {id(a): b for a, b in _node_pairs(model, work)}
    for d in detections:
        for f in d.findings:
            if f.node is not None:
                object.__setattr__(f, "node", pairs[id(f.node)])
    for p in passes:
        p.prepare(work, ctx)
    return work


def _node_pairs(a: ModelProto, b: ModelProto):
    """Each node of ``a`` (every graph, subgraph and function) with its copy in ``b``."""
    graphs = [(a.graph, b.graph), *zip(a.functions, b.functions, strict=True)]
    while graphs:
        ga, gb = graphs.pop()
        for na, nb in zip(ga.node, gb.node, strict=True):
            yield na, nb
            if na.attribute:
                graphs.extend(zip((g for _, g in subgraphs(na)), (g for _, g in subgraphs(nb)),
                                  strict=True))


def _counts_from_plan(before: Counter, spliced: Sequence[Finding], planner: Planner
                      ) -> Counter | None:
    """The op counts (:func:`op_counts`) after one round that replaced every finding's node
    by a proven, simple decomposition body: the counts before, each replaced node taken out
    and its body's nodes put in, without a walk over the result; None when the plan does
    not say (a kernel, a body with subgraphs or calls)."""
    from rewriter.apply.inline import simple_body
    from rewriter.plan.functions import REMEDY_DOMAIN

    counts = Counter(before)
    calls: Counter = Counter()  # (function's id, replaced op) -> how many calls
    functions: dict[int, FunctionProto] = {}
    seen: set[int] = set()
    for f in spliced:
        if f.node is None:
            return None
        if id(f.node) in seen:
            continue
        seen.add(id(f.node))
        choice = planner.proven_decomposition(f, None)
        if choice is None:
            return None
        functions[id(choice.function)] = choice.function
        calls[id(choice.function), f.domain, f.op_type] += 1
    for (function_id, domain, op_type), n in calls.items():
        function = functions[function_id]
        if not simple_body(function, REMEDY_DOMAIN):
            return None
        counts[(domain, op_type)] -= n
        for node in function.node:
            counts[(normalize_domain(node.domain), node.op_type)] += n
    if any(n < 0 for n in counts.values()):
        return None  # not the nodes counted before: count the result
    return +counts


def _decomposed(f: Finding, planner: Planner) -> bool:
    if f.node is None:
        return False
    plan = planner._by_finding.get(id(f))
    return (plan is not None and plan.choice is not None
            and plan.choice.kind in (RemedyKind.DECOMPOSITION, RemedyKind.KERNEL))

def _owned(message):
    """A copy of a protobuf ``message`` that does not keep its parent's memory alive."""
    copy = type(message)()
    copy.CopyFrom(message)
    return copy


def _kernel_summary(model: ModelProto) -> dict[str, Any]:
    """What the rewritten model needs at run time (from its metadata), for the report."""
    import json

    from rewriter.plan.kernels import read_needs

    needs = read_needs(model)
    if not needs:
        return {}
    return json.loads(needs.to_json())
