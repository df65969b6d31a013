"""Library entry points that tie plugins, I/O and detection together."""

from __future__ import annotations

import os
from collections.abc import Sequence

from onnx import ModelProto

from rewriter.detect import CheckReport, TargetResult, find_unsupported
from rewriter.errors import TargetError
from rewriter.io import LoadedModel, load_model
from rewriter.manager import Plugins, load_plugins
from rewriter.targets import Target, TargetOptions, runtime_refusal

ModelLike = str | os.PathLike | ModelProto | LoadedModel


def as_loaded(model: ModelLike) -> LoadedModel:
    """A LoadedModel from a path (safely loaded), a ModelProto or a LoadedModel."""
    if isinstance(model, LoadedModel):
        return model
    if isinstance(model, ModelProto):
        from pathlib import Path

        return LoadedModel(model=model, path=Path("<in-memory model>"), file_size=model.ByteSize())
    return load_model(model)


def resolve_targets(
    plugins: Plugins, names: Sequence[str], options: TargetOptions | None = None
) -> list[Target]:
    """Instantiate targets by name (``onnxruntime``, ``opset:13``, ``onnxruntime:CUDA``)."""
    options = options or TargetOptions()
    targets = []
    for spec in names:
        name, _, argument = spec.partition(":")
        entry = plugins.registry.targets.get(name)
        if entry is None:
            known = ", ".join(sorted(plugins.registry.targets)) or "none"
            raise TargetError(f"unknown target {spec!r}; installed targets: {known}")
        try:
            target = entry.factory(argument or None, options)
        except TargetError:
            raise
        except Exception as e:  # noqa: BLE001 - a factory failing is the plugin's fault
            raise plugins.registry.plugin_error(
                entry.plugin, f"target {spec!r} could not be created: {type(e).__name__}: {e}"
            ) from e
        if not isinstance(target, Target):
            raise plugins.registry.plugin_error(
                entry.plugin, f"target {spec!r}: factory returned {type(target).__name__}, "
                "not a rewriter.targets.Target"
            )
        targets.append(target)
    return targets


def check(
    model: ModelLike,
    targets: Sequence[str] = ("onnxruntime",),
    *,
    plugins: Plugins | None = None,
    confirm: bool | None = None,
    custom_op_libraries: Sequence[str] = (),
) -> CheckReport:
    """List every node each target cannot run.

    Args:
        model: a path, a ``ModelProto`` or a :class:`~rewriter.io.LoadedModel`.
        targets: target names, e.g. ``["onnxruntime", "opset:13"]``.
        plugins: loaded plugins (default: :func:`rewriter.manager.load_plugins`).
        confirm: build a real session where the static verdict says "runs" (default: the
            target decides, e.g. onnxruntime confirms models under 100 MiB).
        custom_op_libraries: shared libraries of custom ops to register in onnxruntime
            (``"extensions"`` names onnxruntime-extensions).
    """
    plugins = plugins or load_plugins()
    loaded = as_loaded(model)
    options = TargetOptions(custom_op_libraries=tuple(custom_op_libraries), confirm=confirm)
    results = []
    for target in resolve_targets(plugins, targets, options):
        findings = find_unsupported(loaded.model, target)
        result = TargetResult(target.name, target.description, findings)
        can_confirm = loaded.path.is_file() if loaded.path.name != "<in-memory model>" else False
        wants = getattr(target, "wants_confirm", lambda _l: bool(confirm))(loaded)
        if not findings and can_confirm and wants:
            error = target.confirm(loaded)
            if error is None:
                result.confirmed = True
            else:
                result.confirmed = False
                result.findings = [runtime_refusal(target.name, loaded.model, error)]
        results.append(result)
    return CheckReport(str(loaded.path), results)
