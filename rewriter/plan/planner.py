"""Plan: for every finding, the remedies plugins offer (decompositions, kernels, passes),
one chosen deterministically, its function built and its body checked against every target.

Planning happens before anything changes: a finding no remedy takes fails the rewrite with
one error listing them all (unless ``partial``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from onnx import FunctionProto, ModelProto, NodeProto, TensorProto

from rewriter.detect.targets import Finding, NodeQuery, Target
from rewriter.errors import PluginError, RewriterError
from rewriter.graph.opid import OpId
from rewriter.graph.typeinfer import infer_node_outputs
from rewriter.graph.walk import iter_scopes, normalize_domain, opset_map
from rewriter.manager import Plugins
from rewriter.plan.adapt import adapted_body
from rewriter.plan.bodies import Declined
from rewriter.plan.functions import (
    REMEDY_DOMAIN,
    DecompositionContext,
    Recording,
    build_function,
    retarget,
    specialise,
)
from rewriter.plan.kinds import RemedyKind
from rewriter.plan.passes import RewritePass, answers_per_op, ask_offers
from rewriter.registry import DecompositionEntry

PREFER = ("decompose", "kernel")  # --prefer: which remedy wins when both exist

CONTRIB_DOMAIN = "ai.onnx.contrib"

_LOWERING_DOMAIN = "rewriter.lowering"

# domains whose nodes the opset-conversion pass lowers itself: no older-opset bodies for them
_STANDARD = ("", "ai.onnx.ml")
SPEC_BODIES = "onnx-functions"  # the built-in plugin lowering an op to the spec's body

MAX_DEPTH = 4

# a body's metadata_props key whose value the rule's name in reports gains ("rule: note"):
# a builder that picks among strategies says which, and why, per node
RULE_NOTE = "rule_note"

@dataclass
class Candidate:
    """One remedy a plugin offers (or declines) for one finding."""

    kind: RemedyKind
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
    needs_opset: int | None = None  # declined: its body needs this newer ai.onnx opset

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
    # (target, reason, domain, op, version) -> the candidates with every pass's answer,
    # where every pass answers alike for the op (RewritePass.offers_for_op)
    with_passes: dict = field(default_factory=dict)

# Findings a body keeping the op (``keeps_op``) remedies: the runtime computes the op
# differently (the body is a safe form of it), or the node gives as an attribute what the op
# takes as an input (the body is the op in its valid form)
KEEPS_OP_REASONS = frozenset({"computes-differently", "attribute-as-input"})


class Planner:
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
        self._caller_fed: dict[int, frozenset[str]] = {}  # id(finding) -> its caller_fed inputs
        self._last_scope: tuple | None = None  # (scope opsets, their sorted items)
        self._last_fed: tuple | None = None  # (constants, the inputs the caller feeds)

    def signature(self, node, opsets, input_types) -> tuple:
        """What a plan is cached by: the op, the opsets, the input types, which inputs and
        outputs are present, and the attributes."""
        return _signature(node, tuple(sorted(opsets.items())), input_types)

    def _scope_key(self, scope_opsets: Mapping[str, int]) -> tuple:
        """``tuple(sorted(scope_opsets.items()))``, made again only when the opsets differ
        from the last finding's (findings come scope by scope; a scope's findings share
        one mapping)."""
        last = self._last_scope
        if last is None or (last[0] is not scope_opsets and last[0] != scope_opsets):
            last = self._last_scope = (scope_opsets, tuple(sorted(scope_opsets.items())))
        return last[1]

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
                if plan.choice is not None and plan.choice.kind == RemedyKind.DECOMPOSITION:
                    return plan.candidates
            # a pass about this kind of node speaks for it (the runtime's loader may refuse
            # a node for its interface, e.g. DictVectorizer's map input on tract)
            claimed = [c for c in self._pass_candidates(finding) if c.relevant]
            if claimed:
                return claimed
            return [Candidate(RemedyKind.DECOMPOSITION, "-", "-", False,
                              f"the node itself is invalid ({finding.detail}); fix the export")]
        plan = self.plan(finding, constants, declared)
        if plan.choice is None:
            # passes are asked per finding, as their answer may depend on more than the plan
            # signature holds (constant inputs, shapes, the path), unless every pass says it
            # answers alike for the op (offers_for_op): then once per plan and op, and the
            # findings share one list (plan_findings derives its answers once per list)
            op = (finding.target, finding.reason, finding.domain, finding.op_type,
                  finding.version)
            shared = plan.with_passes.get(op)
            if shared is not None:
                return shared
            combined = plan.candidates + self._pass_candidates(finding)
            if all(answers_per_op(p, finding, self.pass_ctx) for p in self.passes):
                plan.with_passes[op] = combined
            return combined
        return plan.candidates

    def plan(self, finding: Finding, constants, declared=None) -> _Plan:
        """The plan of a finding with a node: cached per signature and, among the variants
        of a signature, per the values its builders read."""
        plan = self._by_finding.get(id(finding))
        if plan is not None:
            return plan
        node = finding.node
        declared = declared if declared is not None else {}
        # which inputs the model's caller feeds (graph inputs): a body needing their values
        # to load may suit a constant or a computed value, not them (caller_fed)
        last = self._last_fed
        if last is None or last[0] is not constants:  # a property: read once per model
            last = self._last_fed = (constants, getattr(constants, "fed", frozenset()))
        fed = last[1]
        inputs = node.input
        key = (_signature(node, self._scope_key(finding.scope_opsets or _NO_OPSETS),
                          finding.input_types),
               tuple([n in fed for n in inputs]) if fed else ())
        variants = self._plans.get(key)
        if variants is None:
            variants = self._plans[key] = []
        for variant in variants:
            if variant.cacheable and (not variant.reads or variant.fingerprints == _fingerprints(
                    variant.reads, node, constants, declared)):
                plan = variant
                break
        else:
            opsets = dict(finding.scope_opsets or {})
            self._caller_fed[id(finding)] = frozenset(n for n in inputs if n in fed)
            log: list = []
            candidates = self._remedy_candidates(
                finding, opsets, Recording(constants, log, "constant"),
                Recording(declared, log, "declared"), 0,
            )
            inputs = list(inputs)
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

    def proven_decomposition(self, finding: Finding, constants, declared=None
                             ) -> Candidate | None:
        """The chosen remedy of ``finding`` when it is a decomposition whose every body node
        was checked against every target (proven), else None."""
        choice = self.chosen(finding, constants, declared)
        if choice is None or choice.kind != RemedyKind.DECOMPOSITION or not choice.proven:
            return None
        return choice

    def body_outputs(self, finding: Finding, input_types: tuple) -> tuple | None:
        """The output types of the body spliced for ``finding`` when its inputs have
        ``input_types``, if every body node still runs on every target with them (None:
        the plan does not prove it)."""
        plan = self._by_finding.get(id(finding))
        choice = plan.choice if plan else None
        if choice is None or choice.kind != RemedyKind.DECOMPOSITION or not choice.proven:
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
            offers, why = ask_offers(p, finding, self.pass_ctx)
            out.append(Candidate(RemedyKind.PASS, p.plugin, p.name, offers, why, rewrite_pass=p,
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
                first.append(Candidate(RemedyKind.KERNEL, "-", "-", False,
                                       "not tried: a decomposition applies (--prefer decompose)"))
            elif self.prefer == "kernel" and key in self._by_op:
                first.append(Candidate(RemedyKind.DECOMPOSITION, "-", "-", False,
                                       "not tried: a kernel applies (--prefer kernel)"))
            return first
        return first + kinds[1](finding, opsets, constants, depth, declared)

    def _kernel_candidates(self, finding, opsets, constants=None, depth=0, declared=None
                           ) -> list[Candidate]:
        """A native library op first (no Python needed at run time), then a Python kernel;
        each accepted only when every target says it can run the retargeted node."""
        from rewriter.detect.targets import KernelRemedy
        from rewriter.errors import RewriterError
        from rewriter.plan.functions import resolve_reference
        from rewriter.plan.kernels import (
            KernelUse,
            NativeUse,
            attribute_problem,
            element_type,
            load_kernel,
            op_name,
            retarget_node,
        )

        node = finding.node
        domain, op_type = normalize_domain(node.domain), node.op_type
        label = str(OpId(domain, op_type))
        out: list[Candidate] = []

        def ask(remedy) -> str:
            # the retargeted node carries provenance, as the nodes of a decomposition do
            from rewriter.plan.functions import PROVENANCE_OP, PROVENANCE_PLUGIN, PROVENANCE_RULE

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
            rule = f"native {native.library} {OpId(t_domain, t_op)}"
            try:
                attrs = None
                if native.attributes:
                    attrs = resolve_reference(native.attributes)(node)
                    if attrs is None:
                        raise Declined("its attribute mapping returned None (no reason given)")
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
            except (Declined, RewriterError) as e:
                why, remedy = str(e), None
            except Exception as e:  # noqa: BLE001 - a plugin's mapping failing is its bug
                raise self.registry.plugin_error(
                    native.plugin, f"native kernel {label}: its attribute mapping "
                    f"{native.attributes} raised {_one_line(e)} on node "
                    f"{node.name or finding.path!r}") from e
            out.append(Candidate(RemedyKind.KERNEL, native.plugin, rule, not why, why,
                                 kernel=remedy))
            if not why:
                return out
        entry = self.registry.kernels.get((domain, op_type))
        if entry is not None:
            plugin = entry.plugin
            rule = f"python {entry.reference}"
            why, remedy = "", None
            try:
                k = load_kernel(entry, self.registry)
                types = [element_type(t) for t in
                         finding.input_types[:len(present_inputs(node))]]
                signature = k.match(types)
                if any(not n for n in present_inputs(node)):
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
            out.append(Candidate(RemedyKind.KERNEL, entry.plugin, rule, not why, why,
                                 kernel=remedy))
        if not out:
            out.append(Candidate(RemedyKind.KERNEL, "-", "-", False,
                                 "no installed plugin registers a kernel for this op"))
        return out

    def _distribution(self, plugin: str) -> str | None:
        info = self.registry.plugins.get(plugin)
        return info.distribution if info and info.distribution else None

    def _decomposition_candidates(self, finding, opsets, constants, depth, declared=None
                                  ) -> list[Candidate]:
        """The registrations covering the model's opset, in precedence order, until one is
        accepted; when none is, for a vendor op, those for older opsets
        (:meth:`_older_opset`), built there and adapted to the model's opset
        (:mod:`rewriter.plan.adapt`). (A standard op is lowered by the opset-conversion
        pass, exactly, rather than by an older body.)"""
        node = finding.node
        model_opset = opsets.get("", 1)
        entries = self._by_op.get((normalize_domain(node.domain), node.op_type), [])
        if finding.reason == "computes-differently":
            # a body written for a runtime that computes the op differently (it keeps the
            # op in a safe form) first, the spec's own body last: it is the op's
            # definition, which the runtime tends to compute as it computes the op
            # (CastLike's is the same Cast, GreaterOrEqual's a Greater)
            entries = sorted(entries, key=lambda entry: (not entry.keeps_op,
                                                         entry.plugin == SPEC_BODIES))
        out: list[Candidate] = []
        older: list[tuple[DecompositionEntry, int, int]] = []  # (entry, opset, index in out)
        for entry in entries:
            if entry.keeps_op is True and finding.reason not in KEEPS_OP_REASONS:
                out.append(Candidate(RemedyKind.DECOMPOSITION, entry.plugin,
                                     entry.description or entry.op_type, False,
                                     "its body keeps the op (a safe form for a runtime that "
                                     "computes it differently); the target refuses the op "
                                     f"itself ({finding.reason})"))
                continue
            if not entry.covers(model_opset):
                lo, hi = entry.opsets
                out.append(Candidate(RemedyKind.DECOMPOSITION, entry.plugin,
                                     entry.description or entry.op_type, False,
                                     f"valid for ai.onnx opsets {lo}..{hi or ''}; the model "
                                     f"is at {model_opset}"))
                written_at = (self._older_opset(entry, model_opset)
                              if normalize_domain(node.domain) not in _STANDARD
                              else _first_opset(entry, node, model_opset))
                if written_at is not None:
                    older.append((entry, written_at, len(out) - 1))
                continue
            out.append(self._decomposition(entry, finding, model_opset, model_opset, opsets,
                                           constants, depth, declared))
            if out[-1].accepted:
                return out
        for entry, written_at, index in older:
            candidate = self._decomposition(entry, finding, written_at, model_opset, opsets,
                                            constants, depth, declared)
            if not candidate.accepted:
                candidate.why = f"{out[index].why}; written at {written_at}: {candidate.why}"
            out[index] = candidate
            if candidate.accepted:
                return out
        if not entries:
            out.append(Candidate(RemedyKind.DECOMPOSITION, "-", "-", False,
                                 "no installed plugin registers a decomposition for this op"))
        return out

    def _older_opset(self, entry: DecompositionEntry, model_opset: int) -> int | None:
        """For a registration whose opsets all lie below the model's, when a target's ai.onnx
        ceiling is below the model's opset too (the model is lowered anyway): the opset to
        build its body at, the highest it covers that no target's ceiling is below (None:
        there is none, no such target, or the registration is for newer opsets)."""
        lo, hi = entry.opsets
        if hi is None or hi >= model_opset:
            return None
        ceilings = [t.max_opsets[""] for t in self.targets
                    if t.max_opsets and t.max_opsets.get("") is not None]
        if not ceilings or min(ceilings) >= model_opset:
            return None  # the model stays at its opset: its own registrations decide
        written_at = min([hi, *ceilings])
        return written_at if written_at >= lo else None

    def _decomposition(self, entry: DecompositionEntry, finding: Finding, written_at: int,
                       model_opset: int, opsets, constants, depth, declared) -> Candidate:
        """One registration's candidate for ``finding``: its body built at ai.onnx
        ``written_at`` (adapted to ``model_opset`` when older), checked against every
        target."""
        node = finding.node
        rule = entry.description or f"{entry.op_type}"
        build_opsets = opsets if written_at == model_opset else {**opsets, "": written_at}
        ctx = DecompositionContext(node, written_at, build_opsets, list(finding.input_types),
                                   declared=declared if declared is not None else {},
                                   constants=constants, ceiling=self._ceiling(written_at))
        try:
            fn = build_function(entry.builder, ctx)
        except Declined as e:
            return Candidate(RemedyKind.DECOMPOSITION, entry.plugin, rule, False, str(e),
                             needs_opset=e.needs_opset)
        except Exception as e:  # noqa: BLE001 - anything but Declined is the plugin's bug
            raise self._plugin_bug(entry, finding, f"its builder raised {_one_line(e)} "
                                   "(a builder declines a node with Declined('why'))") from e
        if fn is None:
            return Candidate(RemedyKind.DECOMPOSITION, entry.plugin, rule, False,
                             "declined (its builder returned None, no reason given)")
        defect = body_defect(fn, node, self._output_arity(finding))
        if defect:
            raise self._plugin_bug(entry, finding, defect)
        note = next((p.value for p in fn.metadata_props if p.key == RULE_NOTE), "")
        if note:  # the builder's word on this node (which strategy, and why)
            rule = f"{rule}: {note}"
        if written_at != model_opset:
            rule = f"{rule} (written at opset {written_at}, converted to {model_opset})"
            try:
                fn = adapted_body(fn, written_at, model_opset)
            except Declined as e:
                return Candidate(RemedyKind.DECOMPOSITION, entry.plugin, rule, False, str(e))
        problem = arity_problem(fn, node)
        if problem:
            return Candidate(RemedyKind.DECOMPOSITION, entry.plugin, rule, False, problem)
        problem, nested, types = self._body_problem(fn, finding, opsets, constants, depth)
        if problem:
            return Candidate(RemedyKind.DECOMPOSITION, entry.plugin, rule, False, problem)
        inner = []
        if nested:
            try:
                fn = self._lower_nested(fn, nested, opsets)
            except Exception as e:  # noqa: BLE001 - onnx's inliner refusing is the answer
                return Candidate(RemedyKind.DECOMPOSITION, entry.plugin, rule, False,
                                 "the remedies of its body's nodes could not be inlined into "
                                 f"it: {_one_line(e)}")
            for choice, inner_finding in nested.values():
                inner.append((choice.kind, choice.plugin, choice.rule, inner_finding.op_label))
                inner.extend(choice.nested)
        proven = not any(a.type in (a.GRAPH, a.GRAPHS) for n in fn.node for a in n.attribute)
        if nested and depth == 0:  # the lowered body's types, as it will be spliced
            problem, again, types = self._body_problem(fn, finding, opsets, {}, depth)
            # a node of the lowered body that is only too new for a target's opset ceiling
            # is lowered with the whole model (as in the body before lowering, where such a
            # node without a remedy of its own is let through): it leaves the types proven
            body_constants = _constant_outputs(fn.node) if again else {}
            proven = proven and not problem and all(
                self._lowered_later(f, _as_spliced(f.node, fn, node), body_constants)
                for _, f in again.values())
        return Candidate(
            RemedyKind.DECOMPOSITION, entry.plugin, rule, True, "", fn, nested=inner,
            output_types=tuple(types.get(o) for o in fn.output), proven=proven,
        )

    def _ceiling(self, opset: int) -> int | None:
        """The lowest ai.onnx ceiling of the targets, when below ``opset``, else None."""
        ceilings = [t.max_opsets[""] for t in self.targets
                    if t.max_opsets and t.max_opsets.get("") is not None]
        low = min(ceilings, default=None)
        return low if low is not None and low < opset else None

    def _plugin_bug(self, entry: DecompositionEntry, finding: Finding, what: str
                    ) -> PluginError:
        """The error for a decomposition that is wrong (not declining): it names the plugin
        and its distribution, the op, the node and what is wrong."""
        op = OpId(finding.domain, finding.op_type)
        node = f"node {finding.node_name!r}" if finding.node_name else finding.path
        return self.registry.plugin_error(
            entry.plugin, f"decomposition of {op} ({entry.description or 'no description'}) "
            f"on {node}: {what}")

    def _output_arity(self, finding: Finding) -> int | None:
        """How many outputs the op has at most, where its schema says, else where a Python
        kernel registered for it says (None: unknown, or variadic): a body must not give
        more."""
        from rewriter.errors import RewriterError
        from rewriter.plan.kernels import load_kernel

        domain = normalize_domain(finding.domain)
        opsets = dict(finding.scope_opsets or {})
        schema = target_schema(self.targets, domain, finding.op_type,
                               opsets.get(domain) or finding.version)
        if schema is not None:
            if not schema.outputs or schema.outputs[-1].option == "variadic":
                return None
            return len(schema.outputs)
        entry = self.registry.kernels.get((domain, finding.op_type))
        if entry is None:
            return None
        try:
            counts = {len(s.outputs) for s in load_kernel(entry, self.registry).signatures}
        except RewriterError:
            return None  # the kernel's own problem is reported where it is a candidate
        return max(counts) if counts else None

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
        from rewriter.graph.walk import outer_references

        caller_fed = self._caller_fed.get(id(finding), frozenset())
        fed = {formal for formal, actual in zip(fn.input, finding.node.input)
               if actual and actual in caller_fed}
        # what a target is asked about a body node: its constants, and the body's inputs the
        # call site binds to constants of the model (a QLinear* body's scales: a target may
        # tell a static quantization from a dynamic one)
        asked_constants = {**{formal: constants[actual]
                              for formal, actual in zip(fn.input, finding.node.input)
                              if actual and actual in (constants or {})}, **body_constants}
        for i, inner in enumerate(fn.node):
            inner = _with_attributes(inner, finding.node, fn)
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
                                  constants=asked_constants,
                                  caller_fed=frozenset(n for n in inner.input if n in fed))
                problem = target.check_node(query) or _newer_than_scope(target, query)
                if problem is None:
                    continue
                inner_finding = Finding(
                    problem.target, problem.path, problem.domain, problem.op_type,
                    problem.version, problem.reason, problem.detail, inner.name, inner,
                    tuple(types.get(n) if n else None for n in inner.input), body_opsets,
                )
                self._caller_fed[id(inner_finding)] = query.caller_fed
                # a body's values are not the model's: builders see no constants there
                sub = self._decomposition_candidates(inner_finding, body_opsets, {}, depth + 1)
                chosen = next((c for c in sub if c.accepted), None)
                if chosen is None and self._lowered_later(
                        inner_finding, _as_spliced(inner, fn, finding.node), body_constants):
                    continue  # spliced at the model's opset, lowered with the whole model
                if chosen is None:
                    return (f"its body uses {inner_finding.op_label}, which {target.name} "
                            f"cannot run ({problem.detail})"), {}, types
                nested[i] = (chosen, inner_finding)
            reads = [*inner.input, *(outer_references(inner) if inner.attribute else ())]
            if (domain, inner.op_type) not in _SHAPE_ONLY and fed.intersection(reads):
                fed.update(o for o in inner.output if o)
        return None, nested, types

    def _lowered_later(self, finding: Finding, spliced: NodeProto | None = None,
                       body_constants: Mapping[str, TensorProto] | None = None) -> bool:
        """Whether a body node that is only too new for a target's opset ceiling is one a
        pass lowers: bodies are written once at the model's opset and spliced there, and
        the model, bodies included, is then brought under the ceiling as a whole (the
        model's own opset import is then above the ceiling too, so that pass runs).
        ``spliced``: the node as it reads the model's values once spliced (the pass then
        sees their declared shapes, e.g. the rank GridSample-20's lowering needs);
        ``body_constants``: the body's ``Constant`` outputs (e.g. ReduceMax-18's axes, which
        its lowering turns into an attribute), handed to the pass by their spliced names."""
        if finding.reason != "opset-too-new":
            return False
        if spliced is not None:
            import dataclasses

            known = {spliced_name: body_constants[name]
                     for name, spliced_name in zip(finding.node.input, spliced.input)
                     if name and body_constants and name in body_constants}
            finding = dataclasses.replace(finding, node=spliced,
                                          known_constants=known or None)
        return any(ask_offers(p, finding, self.pass_ctx)[0]
                   for p in self.passes)

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
        # the body is used at the model's ai.onnx opset (specialise imports it there), as
        # the inner remedies were specialised: the inliner insists the two agree
        body_opsets[""] = opsets.get("", body_opsets.get("", 1))
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

_NO_OPSETS: Mapping[str, int] = {}


def _signature(node: NodeProto, opsets: tuple, input_types) -> tuple:
    """:meth:`Planner.signature` with the opsets as sorted items (attributes serialized
    only where the node has some)."""
    attributes = node.attribute
    return (
        normalize_domain(node.domain), node.op_type, node.overload, opsets,
        tuple(input_types), tuple(map(bool, node.input)), tuple(map(bool, node.output)),
        tuple([a.SerializeToString() for a in attributes]) if attributes else (),
    )


def _as_spliced(inner: NodeProto, fn: FunctionProto, node: NodeProto) -> NodeProto:
    """A copy of body node ``inner`` reading and writing the names it will have once ``fn``
    replaces ``node``: its formal inputs and outputs become the node's own; the body's
    other values get names no model value has."""
    renamed = {formal: actual for formal, actual in zip(fn.input, node.input) if actual}
    renamed.update((formal, actual) for formal, actual in zip(fn.output, node.output)
                   if actual)
    out = NodeProto()
    out.CopyFrom(inner)
    for names in (out.input, out.output):
        spliced = [renamed.get(n, f"{n}\x00<body>") if n else n for n in names]
        del names[:]
        names.extend(spliced)
    return out


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
    return str(OpId(finding.domain, finding.op_type))

def _newer_than_scope(target: Target, query: NodeQuery) -> Finding | None:
    """A finding for a body node whose standard op does not exist at the opset the body is
    spliced at (a body written at a newer opset than the model's, e.g. onnxscript's
    ``CastLike`` in an opset-13 model): no runtime can run it there, whether or not the
    target's own check looks at schemas."""
    from rewriter.graph.schemas import onnx_schemas

    if query.domain != "" or not query.opset:
        return None
    if onnx_schemas().resolve("", query.node.op_type, query.opset) is not None:
        return None
    return target.finding(query, "no-schema", f"onnx has no schema for ai.onnx::"
                          f"{query.node.op_type} at opset {query.opset} (the body is "
                          "spliced at the model's opset)")


def _first_opset(entry: DecompositionEntry, node: NodeProto, model_opset: int) -> int | None:
    """For a standard op newer than the model's ai.onnx opset (a node of a plugin's body
    written at a newer opset, e.g. onnxscript's ``CastLike`` spliced into an opset-13
    model): the registration's first opset, to build its body there and convert it down
    (None: the op exists at the model's opset, or the registration starts no later)."""
    from onnx import defs

    lo = entry.opsets[0]
    if normalize_domain(node.domain) != "" or lo <= model_opset:
        return None
    try:
        defs.get_schema(node.op_type, model_opset, "")
    except defs.SchemaError:
        return lo
    return None


def target_schema(targets, domain, op_type, opset):
    for t in targets:
        s = t.schemas.resolve(domain, op_type, opset) if opset else None
        if s is not None:
            return s
    return None

class LazyConstants(Mapping):
    """:func:`_constants`, built on first use: plans are cached per node signature, so most
    rounds never need the index."""

    def __init__(self, model: ModelProto) -> None:
        self._model = model
        self._table: dict | None = None
        self._fed: frozenset[str] | None = None

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

    @property
    def fed(self) -> frozenset[str]:
        """The main graph's inputs that are not initializers: the values its caller feeds
        (read once: the planner asks for every finding, and a big model has 50k
        initializers)."""
        if self._fed is None:
            graph = self._model.graph
            self._fed = frozenset(i.name for i in graph.input) - {t.name
                                                                 for t in graph.initializer}
        return self._fed


# ops whose output depends on their input's shape only, not its values (caller_fed)
_SHAPE_ONLY = frozenset({("", "Shape"), ("", "Size")})


def _with_attributes(node: NodeProto, caller: NodeProto, fn: FunctionProto) -> NodeProto:
    """A body node whose attributes refer to the function's (``alpha = @alpha``), with the
    values the decomposed node gives them, else the function's defaults (left out when
    neither has one): how a nested remedy's builder sees the node once it is inlined."""
    if not any(a.ref_attr_name for a in node.attribute):
        return node
    given = {a.name: a for a in caller.attribute}
    given.update((a.name, a) for a in fn.attribute_proto if a.name not in given)
    out = NodeProto()
    out.CopyFrom(node)
    del out.attribute[:]
    for a in node.attribute:
        source = given.get(a.ref_attr_name) if a.ref_attr_name else a
        if source is not None:
            out.attribute.add().CopyFrom(source)
            out.attribute[-1].name = a.name
            out.attribute[-1].ref_attr_name = ""
    return out


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

def why_not(finding: Finding, candidates: list[Candidate]) -> str:
    """Why no remedy applies to ``finding``: the reason of a pass the finding is about, else
    a plugin's own reason (it beats the placeholder of a kind nobody registered)."""
    def said(c: Candidate) -> str:
        return c.why if c.plugin == "-" else f"{c.why} ({c.kind} of plugin {c.plugin!r})"

    declined = ([said(c) for c in candidates
                 if c.why and c.plugin != "-" and c.kind != RemedyKind.PASS]
                or [said(c) for c in candidates if c.why])
    own = [said(c) for c in candidates if c.why and c.relevant]
    if not finding.op_type:  # the model itself: what the target says beats any pass's
        return (own or [finding.detail])[0]  # boilerplate for a finding not of its kind
    return (own or declined or [finding.detail])[0]


def _one_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0]}" if text else type(e).__name__


def present_inputs(node: NodeProto) -> list[str]:
    """The node's inputs without the trailing empty ones (``""``: an optional input left
    out, the same as not listing it)."""
    inputs = list(node.input)
    while inputs and not inputs[-1]:
        inputs.pop()
    return inputs


def _read_names(nodes) -> set[str]:
    """Every value name the nodes (and their subgraphs) read."""
    from rewriter.graph.walk import subgraphs

    names: set[str] = set()
    for node in nodes:
        names.update(node.input)
        for _, graph in subgraphs(node):
            names |= _read_names(graph.node)
    return names


def body_defect(fn: FunctionProto, node: NodeProto, arity: int | None = None) -> str | None:
    """What is wrong with a decomposition's body for ``node`` (None: nothing): an output
    the node uses that no body node computes, a name declared twice, more outputs than the
    op has. (A body may leave an output the node does not use uncomputed, as the ONNX
    spec's context-dependent bodies do.)"""
    produced = {o for n in fn.node for o in n.output if o}
    used = {i for i, name in enumerate(node.output) if name}
    for i, name in enumerate(fn.output):
        if not name:
            return "its body declares an output with an empty name"
        if i in used and name not in produced and name not in fn.input:
            return f"its body never computes its output {i} ({name!r}), which the node uses"
    for kind, names in (("input", fn.input), ("output", fn.output)):
        twice = sorted({n for n in names if list(names).count(n) > 1})
        if twice:
            return f"its body declares {kind} {twice[0]!r} twice"
    if arity is not None and len(fn.output) > arity:
        return (f"its body gives {len(fn.output)} outputs ({', '.join(fn.output)}); the op "
                f"has {arity}")
    return None


def arity_problem(fn: FunctionProto, node: NodeProto) -> str | None:
    """Why ``fn`` does not fit this node's inputs and outputs (None: it does): the node
    gives an input or uses an output beyond the body's, or the body reads an input the node
    leaves empty (``""`` or not given: an optional input)."""
    inputs = present_inputs(node)
    if len(inputs) > len(fn.input):
        return (f"its body takes {len(fn.input)} input(s) ({', '.join(fn.input)}); the node "
                f"gives {len(inputs)}")
    outputs = [i for i, name in enumerate(node.output) if name]
    if outputs and outputs[-1] >= len(fn.output):
        return (f"its body gives {len(fn.output)} output(s) ({', '.join(fn.output)}); the "
                f"node uses output {outputs[-1]}")
    read = _read_names(fn.node) | set(fn.output)
    for i, formal in enumerate(fn.input):
        if formal in read and (i >= len(inputs) or not inputs[i]):
            return f"its body reads input {i} ({formal!r}), which the node leaves empty"
    return None
