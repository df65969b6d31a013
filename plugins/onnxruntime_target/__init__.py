"""Target ``onnxruntime[:PROVIDER]``: capability read from onnxruntime's live kernel registry
(``docs/targets.md``, ``onnxruntime``).

Modules:

* ``target``: :class:`OnnxRuntimeTarget` (a :class:`rewriter.plugin.RuntimeTarget` for its
  confirmation): kernels and type bindings, function bodies, custom-op libraries probed
  with one-node sessions, runs.
* ``reduced``: :class:`ReducedBuildTarget`, a reduced build's operator config
  (``onnxruntime:ops=FILE``).
* ``runtime``: onnxruntime itself: its kernel registry, the opsets and IR version it loads,
  providers, custom-op libraries, its messages in one line.
* ``confirm``: the confirming children (a session by path and from bytes, run once; one with
  the plugins' custom kernels; one returning a run's output shapes).
* ``declared_shapes``: intermediate shapes the model declares that a run contradicts
  (``declared-shape`` findings, from the confirmation) and the pass ``declared-shapes``
  that clears them.
"""

from __future__ import annotations

from rewriter.plugin import TargetError, TargetOptions, hookimpl

from .confirm import CONFIRM_CHILD, CONFIRM_TIMEOUT_S
from .reduced import ReducedBuildTarget
from .runtime import (
    CPU,
    DISABLE_QUANT_QDQ,
    EXTENSIONS,
    QDQ_MATMULNBITS_ACCURACY_LEVEL,
    THREAD_DEPENDENT_OPS,
    KernelDef,
    available_providers,
    clean_ort_message,
    released_opsets,
    resolve_library,
    resolve_provider,
    runtime_ceilings,
    runtime_max_ir_version,
    thread_dependent_ops,
)
from .target import CONFIRM_BY_DEFAULT_BELOW, OnnxRuntimeTarget

__all__ = [
    "CONFIRM_BY_DEFAULT_BELOW", "CONFIRM_CHILD", "CONFIRM_TIMEOUT_S", "CPU", "DISABLE_QUANT_QDQ",
    "EXTENSIONS",
    "QDQ_MATMULNBITS_ACCURACY_LEVEL", "KernelDef", "OnnxRuntimeTarget", "ReducedBuildTarget",
    "available_providers", "clean_ort_message", "make_target", "register_targets",
    "released_opsets", "resolve_library", "resolve_provider", "runtime_ceilings",
    "runtime_max_ir_version", "THREAD_DEPENDENT_OPS", "thread_dependent_ops",
]

_OPS = "ops="


def make_target(argument: str | None, options: TargetOptions | None = None) -> OnnxRuntimeTarget:
    """``onnxruntime``, ``onnxruntime:PROVIDER``, ``onnxruntime:ops=FILE`` (a reduced build),
    ``onnxruntime:PROVIDER,ops=FILE``."""
    provider, _, config = (argument or "").partition(_OPS)
    if config or (argument or "").endswith(_OPS):
        if not config:
            raise TargetError("onnxruntime:ops= needs a reduced-build operator config file, "
                              "e.g. onnxruntime:ops=required_operators.config")
        return ReducedBuildTarget(config, resolve_provider(provider.rstrip(",") or None),
                                  options)
    return OnnxRuntimeTarget(resolve_provider(argument), options)


@hookimpl
def register_passes(registry):
    from .declared_shapes import NAME, DeclaredShapesPass

    registry.add(NAME, DeclaredShapesPass, phase="legalize")


@hookimpl
def register_targets(registry):
    registry.add(
        "onnxruntime",
        make_target,
        description="onnxruntime's kernel registry (onnxruntime:PROVIDER for other providers; "
        "onnxruntime:ops=FILE for a reduced build's operator config)",
    )
