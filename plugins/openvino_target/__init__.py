"""Target ``openvino[:DEVICE]``: OpenVINO (CPU device by default), an optional dependency.

Capability is OpenVINO's own answer: the whole model converted and compiled when it is
small, else one probe model per distinct node signature; ``confirm`` and ``prepare`` read
the model by path as users do (``docs/targets.md``, ``openvino``).

Modules:

* ``target``: :class:`OpenVINOTarget` (a :class:`rewriter.plugin.RuntimeTarget`): the whole
  model first, node probes, what a refusal blames, confirmation and runs.
* ``probes``: OpenVINO's answer on a one-node probe model, and the node forms a probe cannot
  decide (fed axes or weights in a decomposition body, a graph input or output it refuses).
* ``inexact``: ops and forms OpenVINO runs otherwise than their definition (known-inexact
  translations, int64 in int32, double in float32, 16-bit Q/DQ).
* ``runtime``: OpenVINO itself: converting, compiling, the routes users read a model by,
  its messages in one line.
* ``runs``: running a compiled model (values to and from OpenVINO's tensors) and the
  confirming child.
"""

from __future__ import annotations

from rewriter.plugin import TargetError, TargetOptions, hookimpl

from .inexact import INEXACT, KNOWN_INEXACT, has_16bit_qdq, inexact_form
from .runs import confirm_child, from_openvino, port_names, to_openvino
from .runtime import (
    BY_BYTES,
    BY_CONVERT,
    BY_PATH,
    DEFAULT_DEVICE,
    NOT_INSTALLED,
    USER_ROUTES,
    clean_message,
    compile_model,
    compiled_by_routes,
    convert,
    openvino_runtime,
    reason_of,
)
from .target import OpenVINOTarget

__all__ = [
    "BY_BYTES", "BY_CONVERT", "BY_PATH", "DEFAULT_DEVICE", "INEXACT", "KNOWN_INEXACT",
    "NOT_INSTALLED", "USER_ROUTES", "OpenVINOTarget", "clean_message", "compile_model",
    "compiled_by_routes", "confirm_child", "convert", "from_openvino", "has_16bit_qdq",
    "inexact_form", "make_target", "port_names", "reason_of", "register_targets",
    "to_openvino",
]


def make_target(argument: str | None, options: TargetOptions | None = None) -> OpenVINOTarget:
    """``openvino`` (the CPU device) or ``openvino:DEVICE``; TargetError for a device OpenVINO
    does not have here."""
    _, core, _ = openvino_runtime()
    device = (argument or DEFAULT_DEVICE).upper()
    available = core.available_devices
    if device not in available and not any(d.startswith(device + ".") for d in available):
        raise TargetError(f"OpenVINO device {argument!r} is not available here; available: "
                          + ", ".join(available))
    return OpenVINOTarget(device, options)


@hookimpl
def register_targets(registry):
    registry.add(
        "openvino",
        make_target,
        description="OpenVINO's ONNX frontend and CPU device (openvino:DEVICE for others)",
    )
