"""Pass ``ir-version``: lower a model's IR version to the newest a target loads.

A runtime refuses a model whose IR version is newer than it knows ("Unsupported model IR
version: 13, max supported IR version: 11"), whatever its operators. Targets that know their
limit set ``max_ir_version`` and report an ``ir-too-new`` finding at ``model``; this pass,
run after the opset conversion (phase ``cleanup``), sets the IR version to the lowest such
limit when the model's opset imports allow it (``onnx.helper.find_min_ir_version_for``).
The verification that follows (checker, and each target loading the result) decides whether
the model uses nothing of the newer IR.
"""

from __future__ import annotations

from rewriter.plugin import Finding, PassContext, RewritePass, hookimpl, opset_map

REASON = "ir-too-new"


def ir_ceiling(targets) -> int | None:
    """The lowest ``max_ir_version`` any target sets."""
    limits = [t.max_ir_version for t in targets if getattr(t, "max_ir_version", None)]
    return min(limits) if limits else None


def min_ir_for(opsets: dict[str, int]) -> int:
    """The lowest IR version onnx allows for these opset imports."""
    from onnx import helper

    return helper.find_min_ir_version_for(
        [helper.make_opsetid(d, v) for d, v in opsets.items()], ignore_unknown=True)


def _capped(opsets: dict[str, int], targets) -> dict[str, int]:
    """The imports once every target's opset ceiling is applied (by the opset conversion)."""
    out = dict(opsets)
    for t in targets:
        for domain, top in (getattr(t, "max_opsets", None) or {}).items():
            if domain in out:
                out[domain] = min(out[domain], top)
    return out


class IrVersionPass(RewritePass):
    phase = "cleanup"

    def __init__(self) -> None:
        self._opsets: dict[str, int] = {}

    def prepare(self, model, ctx: PassContext) -> None:
        self._opsets = opset_map(model.opset_import)

    def handles(self, finding: Finding, ctx: PassContext) -> bool:
        return finding.reason == REASON

    def offers_for_op(self, finding: Finding, ctx: PassContext) -> bool:
        return True  # the reason, the targets and the model's opsets decide

    def offers(self, finding: Finding, ctx: PassContext) -> tuple[bool, str]:
        if finding.reason != REASON:
            return False, "lowers IR versions only"
        top = ir_ceiling(ctx.targets)
        if top is None:
            return False, "no target sets an IR version limit"
        need = min_ir_for(_capped(self._opsets, ctx.targets))
        if need > top:
            return False, (f"the model's opset imports need IR version {need}; the target "
                           f"loads up to {top}")
        return True, f"sets the IR version to {top}"

    def run(self, model, ctx: PassContext):
        top = ir_ceiling(ctx.targets)
        if top is None or model.ir_version <= top:
            return None
        if min_ir_for(opset_map(model.opset_import)) > top:
            return None  # the opsets are not lowered (yet): nothing to do this round
        before = model.ir_version
        model.ir_version = top
        ctx.record("conversion", self.plugin, "IR version", f"IR {before} -> {top}")
        return model


@hookimpl
def register_passes(registry):
    registry.add("ir-version", IrVersionPass, phase="cleanup")
