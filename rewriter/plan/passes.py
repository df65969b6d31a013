"""Rewrite passes: whole-model transformations plugins register (``register_passes``).

The decomposition pass lives in the engine; passes cover what is not a per-node function
body, such as converting a model to another opset. A pass says which findings it remedies
(so planning can fail before anything changes) and then runs on the whole model.

Each round of a rewrite first applies the planned kernels and decompositions, then runs every
pass that offers to remedy some finding left, in the order of :data:`PHASES` (then by name);
``modify_pipeline`` hooks may reorder or filter that list before the rewrite starts.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from onnx import ModelProto

from rewriter.plan.bodies import Declined
from rewriter.registry import PHASES

if TYPE_CHECKING:
    from rewriter.detect.targets import Finding, Target
    from rewriter.errors import PluginError
    from rewriter.registry import Registry

__all__ = ["PHASES", "PassContext", "RewritePass", "answers_per_op", "ask_offers", "instantiate",
           "run_pass"]


@dataclass
class PassContext:
    """What a pass sees: the targets, every plugin's registrations, the run's options (the
    ``config`` ``modify_pipeline`` hooks receive: ``targets``, ``prefer``, ``partial``,
    ``dry_run``, ``adapt_interface``), and a tally to report what it changed."""

    targets: Sequence[Target]
    registry: Registry
    options: Mapping[str, Any] = field(default_factory=dict)
    applied: Counter = field(default_factory=Counter)
    # when a pass whose ``wants_findings`` is True runs: the findings of the round it offered
    # to remedy (what it is to change, e.g. the values a run showed declared wrongly)
    findings: Sequence[Finding] = ()

    def record(self, kind: str, plugin: str, rule: str, op_label: str, count: int = 1) -> None:
        self.applied[(kind, plugin, rule, op_label)] += count


class RewritePass:
    """Base class. ``name`` and ``plugin`` are filled in from the registration."""

    name: str = ""
    plugin: str = ""
    phase: str = "convert"
    # True: before :meth:`run`, the engine sets ``ctx.findings`` to every finding of the
    # round this pass offers to remedy (each asked, not only until the first offer)
    wants_findings: bool = False

    def prepare(self, model: ModelProto, ctx: PassContext) -> None:
        """Called with the model before planning, so :meth:`offers` can look at it (constant
        inputs, declared shapes). The model must not be changed here."""

    def handles(self, finding: Finding, ctx: PassContext) -> bool:
        """Whether ``finding`` is of the kind this pass is about (an opset conversion pass
        and an ``opset-too-new`` finding): when nothing remedies it, this pass's reason for
        declining is the one reported."""
        return False

    def offers(self, finding: Finding, ctx: PassContext) -> tuple[bool, str]:
        """Whether this pass remedies ``finding``, and a short explanation either way
        (``raise Declined("why")`` says no as well)."""
        return False, "does not handle this finding"

    def offers_for_op(self, finding: Finding, ctx: PassContext) -> bool:
        """Whether :meth:`offers` and :meth:`handles` give every finding with ``finding``'s
        target, reason, domain, op type and version (and the same node signature: opsets,
        input types, attributes) the answers they give ``finding``: the planner then asks
        them once for all those findings instead of once each. The default, False, has
        them asked per finding (a pass that reads the node, its path or its inputs)."""
        return False

    def run(self, model: ModelProto, ctx: PassContext) -> ModelProto | None:
        """Transform ``model``; return the new model, or None when nothing changed."""
        raise NotImplementedError


def instantiate(registry: Registry) -> list[RewritePass]:
    """One instance of every registered pass, in phase order then name order."""
    passes = []
    for entry in sorted(registry.passes.values(),
                        key=lambda e: (PHASES.index(e.phase), e.name)):
        factory: Callable[..., RewritePass] = entry.factory
        try:
            instance = factory()
        except Exception as e:  # noqa: BLE001 - a factory failing is its plugin's bug
            raise _pass_error(registry, entry.plugin, entry.name, "could not be created", e) from e
        if not isinstance(instance, RewritePass):
            raise registry.plugin_error(
                entry.plugin, f"pass {entry.name!r}: factory returned {type(instance).__name__}, "
                "not a rewriter.plugin.RewritePass",
            )
        instance.name = instance.name or entry.name
        instance.plugin = entry.plugin
        instance.phase = entry.phase
        passes.append(instance)
    return passes


def ask_offers(p: RewritePass, finding: Finding, ctx: PassContext) -> tuple[bool, str]:
    """``p.offers(finding, ctx)``; a :class:`Declined` it raises is a refusal with that
    reason, any other exception (or an answer that is not ``(bool, str)``) an error naming
    the pass and its plugin."""
    try:
        answer = p.offers(finding, ctx)
    except Declined as e:
        return False, str(e)
    except Exception as e:  # noqa: BLE001 - anything but Declined is the plugin's bug
        raise _pass_error(ctx.registry, p.plugin, p.name, f"offers() on {finding.path}",
                          e) from e
    if (not isinstance(answer, tuple) or len(answer) != 2
            or not isinstance(answer[1], str)):
        raise ctx.registry.plugin_error(
            p.plugin, f"pass {p.name!r}: offers() returned {answer!r}, not (bool, reason)")
    return bool(answer[0]), answer[1]


def answers_per_op(p: RewritePass, finding: Finding, ctx: PassContext) -> bool:
    """``p.offers_for_op(finding, ctx)``, with an exception turned into an error naming the
    pass."""
    try:
        return bool(p.offers_for_op(finding, ctx))
    except Exception as e:  # noqa: BLE001 - the plugin's bug
        raise _pass_error(ctx.registry, p.plugin, p.name, f"offers_for_op() on {finding.path}",
                          e) from e


def run_pass(p: RewritePass, model: ModelProto, ctx: PassContext) -> ModelProto | None:
    """``p.run(model, ctx)``, with an exception turned into an error naming the pass."""
    try:
        result = p.run(model, ctx)
    except Exception as e:  # noqa: BLE001 - the plugin's bug
        raise _pass_error(ctx.registry, p.plugin, p.name, "run()", e) from e
    if result is not None and not isinstance(result, ModelProto):
        raise ctx.registry.plugin_error(
            p.plugin, f"pass {p.name!r}: run() returned {type(result).__name__}, not a "
            "ModelProto or None")
    return result


def _pass_error(registry: Registry, plugin: str, name: str, where: str,
                e: BaseException) -> PluginError:
    text = str(e).strip().splitlines()
    what = f"{type(e).__name__}: {text[0]}" if text else type(e).__name__
    return registry.plugin_error(plugin, f"pass {name!r}: {where} raised {what}")
