"""Target ``tract``: Sonos' tract inference engine (the ``tract`` package), an optional
dependency (``pip install 'onnx-graph-rewriter[tract]'``).

Capability is tract's own answer: the whole model loaded, typed and optimized when it is
small, else one probe model per distinct node signature, asked in a worker process
(``docs/targets.md``, ``tract``). This plugin also registers the remedies only tract needs
(``static_axis``, ``float_classes``).

Modules:

* ``target``: :class:`TractTarget` (a :class:`rewriter.plugin.RuntimeTarget`): the whole model
  first, node probes, the model's interface, what a refusal blames, confirmation and runs.
* ``probes``: tract's answer on a probe model (run once on zeros where it can), asked in a
  worker process; the symbols a probe gives dimensions it does not know.
* ``runtime``: tract itself: loading by path or from bytes, typing, optimizing, its errors
  in one line, the confirming child.
"""

from __future__ import annotations

from rewriter.plugin import TargetError, TargetOptions, hookimpl

from .probes import PROBE_TIMEOUT_S, probe, probe_here
from .runtime import (
    BY_BYTES,
    BY_PATH,
    NOT_INSTALLED,
    clean_message,
    confirm_child,
    load,
    runnable,
    runnable_by_routes,
    tract_runtime,
    version,
)
from .target import TractTarget

__all__ = [
    "BY_BYTES", "BY_PATH", "NOT_INSTALLED", "PROBE_TIMEOUT_S", "TractTarget", "clean_message",
    "confirm_child", "load", "make_target", "probe", "probe_here", "register_decompositions",
    "register_targets", "runnable", "runnable_by_routes", "version",
]


def make_target(argument: str | None, options: TargetOptions | None = None) -> TractTarget:
    """``tract`` (it takes no argument); TargetError when tract is not installed."""
    if argument:
        raise TargetError(f"target 'tract' takes no argument (got {argument!r})")
    tract_runtime()
    return TractTarget(options)


@hookimpl
def register_targets(registry):
    registry.add("tract", make_target, description="tract (Sonos' inference engine for the edge)")


@hookimpl
def register_decompositions(registry):
    from rewriter_plugins import float_classes, static_axis

    static_axis.register(registry)
    float_classes.register(registry)
