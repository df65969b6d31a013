"""Build the plugin manager: built-ins and third-party plugins from the ``onnx_rewriter``
entry-point group, plus ``-p`` plugins for one run, minus ``-p no:NAME``.

Order is deterministic: built-ins register first, then every other plugin sorted by name, so
a plugin can never take a name a built-in registers, and a clash always blames the same
plugin whatever the order of installation or of ``-p`` options.

Nothing happens at import time; call :func:`load_plugins`.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import inspect
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
    # how they were loaded, so a child process (compare's isolated runs) can load the same
    specs: tuple[str, ...] = ()
    autoload: bool = True


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
    """Entry points of the group sorted by name. The same distribution seen twice on sys.path
    is listed once; two distributions using one name are both kept, so that loading them
    reports the clash instead of one silently shadowing the other."""
    eps = metadata.entry_points(group=ENTRY_POINT_GROUP)
    seen: dict[tuple[str, str | None], metadata.EntryPoint] = {}
    for ep in sorted(eps, key=lambda e: e.name):
        dist = _dist_name(ep)[0]
        seen.setdefault((ep.name, dist and dist.replace("_", "-").lower()), ep)
    return list(seen.values())


_LOCAL = "-p (this run only)"


def _spec_name(spec: str) -> str:
    """The plugin name a ``-p`` value gets: a file's stem (its folder's name for a package's
    ``__init__.py``), or the module name."""
    if spec.endswith(".py") or Path(spec).is_file():
        path = Path(spec)
        return path.parent.resolve().name if path.stem == "__init__" else path.stem
    return spec


def _import_spec(spec: str, name: str):
    """Import a ``-p`` value: a module name or a path to a .py file."""
    path = Path(spec)
    if spec.endswith(".py") or path.is_file():
        if not path.is_file():
            raise PluginError(name, f"plugin file {spec!r} not found", _LOCAL)
        module_name = f"onnx_rewriter_local_{name}"
        module_spec = importlib.util.spec_from_file_location(module_name, path)
        if module_spec is None or module_spec.loader is None:
            raise PluginError(name, f"cannot import {spec!r}", _LOCAL)
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[module_name] = module
        try:
            module_spec.loader.exec_module(module)
        except BaseException:
            sys.modules.pop(module_name, None)  # no half-initialised module left behind
            raise
        return module
    return importlib.import_module(spec)


def load_plugins(
    plugins: Sequence[str] = (),
    *,
    autoload: bool | None = None,
) -> Plugins:
    """Load plugins and collect their registrations.

    Args:
        plugins: ``-p`` values: module names or .py files to add, ``no:NAME`` to block one.
            The name of an installed entry point loads that plugin even when autoload is
            off (as in pytest).
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

    entry_points = _entry_points()
    requested = {p for p in plugins if not p.startswith("no:")}
    for ep in entry_points:
        dist, version = _dist_name(ep)
        builtin = _is_own(dist)
        if ep.name in blocked:
            continue
        if not (autoload or builtin or ep.name in requested):
            continue
        info = PluginInfo(ep.name, dist, version, builtin, ep.value.partition(":")[0])
        try:
            module = ep.load()
        except (Exception, SystemExit) as e:  # noqa: BLE001 - sys.exit() at import too
            raise PluginError(ep.name, f"failed to import {ep.value!r}: {_one_line(e)}",
                              info.origin) from e
        _register(pm, registry, module, info)

    entry_point_names = {ep.name for ep in entry_points}
    for spec in plugins:
        if spec.startswith("no:") or spec in entry_point_names:
            continue  # entry points named by -p were loaded above
        name = _spec_name(spec)
        if name in blocked:
            continue
        try:
            module = _import_spec(spec, name)
        except PluginError:
            raise
        except (Exception, SystemExit) as e:  # noqa: BLE001 - sys.exit() at import too
            raise PluginError(name, f"failed to import {spec!r}: {_one_line(e)}", _LOCAL) from e
        _register(pm, registry, module, PluginInfo(name, module=getattr(module, "__name__", None)))

    try:
        pm.check_pending()
    except pluggy.PluginValidationError as e:  # _check_hookimpls should have caught it
        plugin = getattr(e, "plugin", None)
        plugin_name = (pm.get_name(plugin) if plugin is not None else None) or "?"
        raise registry.plugin_error(plugin_name, _validation_message(e)) from e

    _collect(pm, registry)
    return Plugins(pm, registry, tuple(_replayable(p) for p in plugins), autoload)


def _replayable(spec: str) -> str:
    """A ``-p`` value that loads the same plugin from any working directory."""
    if not spec.startswith("no:") and (spec.endswith(".py") or Path(spec).is_file()):
        return str(Path(spec).absolute())
    return spec


def _register(pm: pluggy.PluginManager, registry: Registry, module, info: PluginInfo) -> None:
    if pm.has_plugin(info.name):
        other = registry.plugins.get(info.name)
        raise PluginError(
            info.name,
            f"a plugin of this name is already loaded (from {other.origin if other else '?'})",
            info.origin,
        )
    loaded_as = pm.get_name(module) if pm.is_registered(module) else None
    if loaded_as is not None:
        other = registry.plugins.get(loaded_as)
        raise PluginError(
            info.name,
            f"module {module.__name__!r} is already loaded as plugin {loaded_as!r} (from "
            f"{other.origin if other else '?'}): -p it by that name, or not at all",
            info.origin,
        )
    _check_hookimpls(pm, module, info)
    registry.plugins[info.name] = info
    try:
        pm.register(module, name=info.name)
    except pluggy.PluginValidationError as e:
        raise PluginError(info.name, _validation_message(e), info.origin) from e
    except ValueError as e:
        raise PluginError(info.name, _one_line(e), info.origin) from e


def _hook_names(pm: pluggy.PluginManager) -> list[str]:
    return sorted(
        name for name in dir(pm.hook)
        if not name.startswith("_") and getattr(getattr(pm.hook, name), "spec", None)
    )


def _check_hookimpls(pm: pluggy.PluginManager, module, info: PluginInfo) -> None:
    """Reject hookimpls naming no hook, or taking arguments their hook does not pass, with a
    message a plugin author can act on (pluggy's own spans several lines)."""
    for attr in dir(module):
        opts = pm.parse_hookimpl_opts(module, attr)
        if opts is None:
            continue
        hook = opts.get("specname") or attr
        caller = getattr(pm.hook, hook, None)
        spec = getattr(caller, "spec", None)
        if spec is None:
            if opts.get("optionalhook"):
                continue
            close = difflib.get_close_matches(hook, _hook_names(pm), n=1)
            hint = f"did you mean {close[0]!r}?" if close else (
                "hooks are: " + ", ".join(_hook_names(pm)))
            raise PluginError(info.name, f"@hookimpl {hook!r} is not a hook ({hint})",
                              info.origin)
        if opts.get("hookwrapper") or opts.get("wrapper"):
            if any(hook == name for name, _ in _REGISTRATION_HOOKS):
                raise PluginError(info.name, f"@hookimpl {hook!r} cannot be a wrapper",
                                  info.origin)
        try:
            params = inspect.signature(getattr(module, attr)).parameters.values()
        except (TypeError, ValueError):
            continue  # pluggy validates what inspect cannot
        required = [
            p.name for p in params
            if p.default is p.empty
            and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
        ]
        unknown = [a for a in required if a not in spec.argnames]
        if unknown:
            raise PluginError(
                info.name,
                f"@hookimpl {attr}({', '.join(required)}): argument(s) {', '.join(unknown)} "
                f"not passed by the hook {hook}({', '.join(spec.argnames)})",
                info.origin,
            )


def _validation_message(e: pluggy.PluginValidationError) -> str:
    """pluggy's multi-line validation message on one line."""
    lines = [line.strip() for line in str(e).strip().splitlines() if line.strip()]
    return "; ".join(lines) or type(e).__name__


def _collect(pm: pluggy.PluginManager, registry: Registry) -> None:
    """Call each registration hook plugin by plugin (built-ins first, then by name), so every
    entry knows which plugin made it."""
    def order(impl) -> tuple[bool, str]:
        info = registry.plugins.get(impl.plugin_name)
        return (not (info and info.builtin), impl.plugin_name)

    for hook_name, view_class in _REGISTRATION_HOOKS:
        caller = getattr(pm.hook, hook_name)
        impls = sorted(caller.get_hookimpls(), key=order)
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
