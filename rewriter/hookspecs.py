"""Every hook a plugin can implement.

Registration hooks receive a registry object bound to the calling plugin, so each entry
records who registered it (as tox's ``ToxEnvRegister`` and llm's ``register`` do)::

    from rewriter.plugin import hookimpl

    @hookimpl
    def register_targets(registry):
        registry.add("my-npu", lambda argument, options: MyNpuTarget(),
                     description="Acme NPU SDK 3.1")

Hookspecs carry no default argument values (pluggy >= 1.7 treats them differently).
"""

from __future__ import annotations

from collections.abc import Mapping
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
        registry: call ``registry.add(domain, op_type, kernel, description=...)`` for a
            Python kernel (a :class:`rewriter.plugin.Kernel` made with ``@kernel``, defined
            at module level, or its ``"module:attr"`` name, imported only when a model needs
            it); or
            ``registry.add_native(domain, op_type, library="extensions", target=None,
            attributes=None)`` for an op a custom-op library implements natively with the
            same semantics. One kernel and one native mapping per op, across all plugins.
    """


@hookspec
def register_passes(registry: PassRegistry) -> None:
    """Register extra rewrite passes in named phases.

    Args:
        registry: call ``registry.add(name, pass_factory, phase=...)``:
            ``pass_factory()`` returns a :class:`rewriter.plugin.RewritePass`; ``phase``, one
            of ``decompose``, ``legalize``, ``convert``, ``cleanup`` (default), orders the
            passes of a round (they run after the round's kernels and decompositions).
    """


@hookspec
def modify_pipeline(passes: list[Any], targets: list[Any], config: Mapping[str, Any]) -> None:
    """Insert, remove or reorder ``passes`` in place before a rewrite runs.

    Called once per rewrite, plugin by plugin (by name), after every registered pass was
    instantiated in phase order (``decompose``, ``legalize``, ``convert``, ``cleanup``).

    Args:
        passes: the pass list (:class:`rewriter.plugin.RewritePass` instances), modified in
            place; each round of the rewrite runs, in this order, the passes that offer to
            remedy some finding.
        targets: the targets being rewritten for (:class:`rewriter.plugin.Target`).
        config: the run's options, read-only: ``targets`` (their names), ``prefer``,
            ``partial``, ``dry_run``, ``adapt_interface`` (passes see it as
            ``PassContext.options``).
    """
