"""Build the plugin manager: built-ins and third-party plugins from the ``onnx_rewriter``
entry-point group (sorted by name), plus ``-p`` plugins for one run, minus ``-p no:NAME``.

Nothing happens at import time; call :func:`load_plugins`.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import pluggy

from rewriter import hookspecs
from rewriter.errors import PluginError
from rewriter.registry import (
    DecompositionRegistry,
    KernelRegistry,
    PassRegistry,
    PluginInfo,
    Registry,
    TargetRegistry,
)

ENTRY_POINT_GROUP = "onnx_rewriter"
DISABLE_AUTOLOAD_ENV = "ONNX_REWRITER_DISABLE_PLUGIN_AUTOLOAD"
OWN_DISTRIBUTION = "onnx-graph-rewriter"

_REGISTRATION_HOOKS = (
    ("register_targets", TargetRegistry),
    ("register_decompositions", DecompositionRegistry),
    ("register_kernels", KernelRegistry),
    ("register_passes", PassRegistry),
)


@dataclass
class Plugins:
    """A loaded plugin manager and what its plugins registered."""

    manager: pluggy.PluginManager
    registry: Registry


def _autoload_disabled() -> bool:
    return os.environ.get(DISABLE_AUTOLOAD_ENV, "").strip() not in ("", "0", "false", "no")


def _dist_name(ep: metadata.EntryPoint) -> tuple[str | None, str | None]:
    dist = getattr(ep, "dist", None)
    if dist is None:
        return None, None
    return dist.metadata["Name"], dist.version


def _is_own(dist_name: str | None) -> bool:
    return bool(dist_name) and dist_name.replace("_", "-").lower() == OWN_DISTRIBUTION


def _entry_points() -> list[metadata.EntryPoint]:
    eps = metadata.entry_points(group=ENTRY_POINT_GROUP)
    seen: dict[str, metadata.EntryPoint] = {}
    for ep in sorted(eps, key=lambda e: e.name):
        seen.setdefault(ep.name, ep)  # the same dist on sys.path twice lists it twice
    return list(seen.values())


def _import_spec(spec: str):
    """Import ``-p`` argument: a module name or a path to a .py file."""
    path = Path(spec)
    if spec.endswith(".py") or path.is_file():
        if not path.is_file():
            raise PluginError(spec, "plugin file not found")
        name = f"onnx_rewriter_local_{path.stem}"
        module_spec = importlib.util.spec_from_file_location(name, path)
        if module_spec is None or module_spec.loader is None:
            raise PluginError(spec, "cannot import this file")
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[name] = module
        module_spec.loader.exec_module(module)
        return path.stem, module
    return spec, importlib.import_module(spec)


def load_plugins(
    plugins: Sequence[str] = (),
    *,
    autoload: bool | None = None,
) -> Plugins:
    """Load plugins and collect their registrations.

    Args:
        plugins: ``-p`` values: module names or .py files to add, ``no:NAME`` to block one.
        autoload: load third-party entry points (default: unless
            ``ONNX_REWRITER_DISABLE_PLUGIN_AUTOLOAD`` is set). Built-ins always load.

    Raises:
        PluginError: a plugin failed to import, has an invalid hook, or registered something
            invalid; the message names the plugin and its distribution.
    """
    if autoload is None:
        autoload = not _autoload_disabled()
    pm = pluggy.PluginManager(hookspecs.PROJECT)
    pm.add_hookspecs(hookspecs)
    blocked = {p[3:] for p in plugins if p.startswith("no:")}
    for name in blocked:
        pm.set_blocked(name)
    registry = Registry()

    for ep in _entry_points():
        dist, version = _dist_name(ep)
        builtin = _is_own(dist)
        if ep.name in blocked or (not autoload and not builtin):
            continue
        info = PluginInfo(ep.name, dist, version, builtin)
        try:
            module = ep.load()
        except Exception as e:  # noqa: BLE001 - any import failure is the plugin's
            raise PluginError(ep.name, f"failed to import {ep.value!r}: {_one_line(e)}",
                              info.origin) from e
        _register(pm, registry, module, info)

    for spec in plugins:
        if spec.startswith("no:"):
            continue
        try:
            name, module = _import_spec(spec)
        except PluginError:
            raise
        except Exception as e:  # noqa: BLE001
            raise PluginError(spec, f"failed to import: {_one_line(e)}", "-p") from e
        if name in blocked:
            continue
        _register(pm, registry, module, PluginInfo(name))

    try:
        pm.check_pending()
    except pluggy.PluginValidationError as e:
        name = getattr(getattr(e, "plugin", None), "__name__", None) or "?"
        plugin_name = pm.get_name(e.plugin) if getattr(e, "plugin", None) else name
        raise registry.plugin_error(plugin_name, _one_line(e)) from e

    _collect(pm, registry)
    return Plugins(pm, registry)


def _register(pm: pluggy.PluginManager, registry: Registry, module, info: PluginInfo) -> None:
    if pm.has_plugin(info.name):
        other = registry.plugins.get(info.name)
        raise PluginError(
            info.name,
            f"a plugin of this name is already loaded (from {other.origin if other else '?'})",
            info.origin,
        )
    registry.plugins[info.name] = info
    try:
        pm.register(module, name=info.name)
    except pluggy.PluginValidationError as e:
        raise PluginError(info.name, _one_line(e), info.origin) from e
    except ValueError as e:
        raise PluginError(info.name, _one_line(e), info.origin) from e


def _collect(pm: pluggy.PluginManager, registry: Registry) -> None:
    """Call each registration hook plugin by plugin (sorted by name), so every entry knows
    which plugin made it."""
    for hook_name, view_class in _REGISTRATION_HOOKS:
        caller = getattr(pm.hook, hook_name)
        impls = sorted(caller.get_hookimpls(), key=lambda i: i.plugin_name)
        for impl in impls:
            view = view_class(registry, impl.plugin_name)
            try:
                impl.function(registry=view)
            except PluginError:
                raise
            except Exception as e:  # noqa: BLE001
                raise registry.plugin_error(
                    impl.plugin_name, f"{hook_name} failed: {_one_line(e)}"
                ) from e


def _one_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    first = text[0] if text else ""
    return f"{type(e).__name__}: {first}" if first else type(e).__name__
