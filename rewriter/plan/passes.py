"""Rewrite passes: whole-model transformations plugins register (``register_passes``).

The decomposition pass lives in the engine; passes cover what is not a per-node function
body, such as converting a model to another opset. A pass says which findings it remedies
(so planning can fail before anything changes) and then runs on the whole model.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from onnx import ModelProto

if TYPE_CHECKING:
    from rewriter.detect.targets import Finding, Target
    from rewriter.registry import Registry

PHASES = ("decompose", "legalize", "convert", "cleanup")


@dataclass
class PassContext:
    """What a pass sees: the targets, every plugin's registrations, and a tally to report
    what it changed."""

    targets: Sequence[Target]
    registry: Registry
    options: Mapping[str, Any] = field(default_factory=dict)
    applied: Counter = field(default_factory=Counter)

    def record(self, kind: str, plugin: str, rule: str, op_label: str, count: int = 1) -> None:
        self.applied[(kind, plugin, rule, op_label)] += count


class RewritePass:
    """Base class. ``name`` and ``plugin`` are filled in from the registration."""

    name: str = ""
    plugin: str = ""
    phase: str = "convert"

    def prepare(self, model: ModelProto, ctx: PassContext) -> None:
        """Called with the model before planning, so :meth:`offers` can look at it (constant
        inputs, declared shapes). The model must not be changed here."""

    def handles(self, finding: Finding, ctx: PassContext) -> bool:
        """Whether ``finding`` is of the kind this pass is about (an opset conversion pass
        and an ``opset-too-new`` finding): when nothing remedies it, this pass's reason for
        declining is the one reported."""
        return False

    def offers(self, finding: Finding, ctx: PassContext) -> tuple[bool, str]:
        """Whether this pass remedies ``finding``, and a short explanation either way."""
        return False, "does not handle this finding"

    def run(self, model: ModelProto, ctx: PassContext) -> ModelProto | None:
        """Transform ``model``; return the new model, or None when nothing changed."""
        raise NotImplementedError


def instantiate(registry: Registry) -> list[RewritePass]:
    """One instance of every registered pass, in phase order then name order."""
    passes = []
    for entry in sorted(
        registry.passes.values(),
        key=lambda e: (PHASES.index(e.phase) if e.phase in PHASES else len(PHASES), e.name),
    ):
        factory: Callable[..., RewritePass] = entry.factory
        instance = factory()
        if not isinstance(instance, RewritePass):
            raise registry.plugin_error(
                entry.plugin, f"pass {entry.name!r}: factory returned {type(instance).__name__}, "
                "not a rewriter.plan.passes.RewritePass",
            )
        instance.name = instance.name or entry.name
        instance.plugin = entry.plugin
        instance.phase = entry.phase
        passes.append(instance)
    return passes
