"""Every hook a plugin can implement.

Registration hooks receive a registry object bound to the calling plugin, so each entry
records who registered it (as tox's ``ToxEnvRegister`` and llm's ``register`` do)::

    from rewriter import hookimpl

    @hookimpl
    def register_targets(registry):
        registry.add("my-npu", lambda argument, options: MyNpuTarget(),
                     description="Acme NPU SDK 3.1")

Hookspecs carry no default argument values (pluggy >= 1.7 treats them differently).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    from rewriter.registry import (
        DecompositionRegistry,
        KernelRegistry,
        PassRegistry,
        TargetRegistry,
    )

PROJECT = "onnx_rewriter"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec
def register_targets(registry: TargetRegistry) -> None:
    """Register runtimes a model can be checked against.

    Args:
        registry: call ``registry.add(name, factory, description=...)``.
            ``factory(argument, options)`` returns a :class:`rewriter.detect.targets.Target`;
            ``argument`` is the text after ``:`` in ``--target name:argument`` (``None`` when
            absent) and ``options`` a :class:`rewriter.detect.targets.TargetOptions`.
    """


@hookspec
def register_decompositions(registry: DecompositionRegistry) -> None:
    """Register decompositions: a (domain, op_type) expressed in other operators.

    Args:
        registry: call ``registry.add(domain, op_type, builder, opsets=(lo, hi), ...)``.
            ``builder`` is a FunctionProto, an onnxscript function, or a ``"module:attr"``
            string naming one, imported only when a model needs it. ``opsets`` is the range
            of ai.onnx opsets the decomposition is valid at (``hi`` ``None``: no upper
            bound); ranges for one op must not overlap, across all plugins.
    """


@hookspec
def register_kernels(registry: KernelRegistry) -> None:
    """Register custom kernels: what runs an op that cannot be decomposed.

    Args:
        registry: call ``registry.add(domain, op_type, "module:attr", description=...)``
            for a Python kernel (a :class:`rewriter.plan.kernels.Kernel`, made with
            :func:`rewriter.plan.kernels.kernel`), imported only when a model needs it; or
            ``registry.add_native(domain, op_type, library="extensions", target=None,
            attributes=None)`` for an op a custom-op library implements natively with the
            same semantics. One kernel and one native mapping per op, across all plugins.
    """


@hookspec
def register_passes(registry: PassRegistry) -> None:
    """Register extra rewrite passes in named phases.

    Args:
        registry: call ``registry.add(name, pass_factory, phase=...)``.
    """


@hookspec
def modify_pipeline(passes: list[Any], target: Any, config: dict[str, Any]) -> None:
    """Insert, remove or reorder ``passes`` in place before a rewrite runs.

    Args:
        passes: the pass list, modified in place.
        target: the target being rewritten for.
        config: the run's options.
    """
