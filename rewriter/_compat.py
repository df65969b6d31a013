"""The 0.x import paths, kept importable for the 1.x series (``docs/plugins.md``, "Stability
and changelog"): each old module forwards the public names its 0.x documentation listed to
where they live now, with a :class:`DeprecationWarning` naming the import to use instead.
Nothing else is forwarded, and nothing is imported before a name is asked for."""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable, Mapping
from typing import Any

REMOVED_IN = "2.0"


def forwarder(old_module: str, names: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``old_module`` forwarding each of ``names`` (old name ->
    "new.module" where it lives now, under the same name) with a DeprecationWarning."""

    def __getattr__(name: str) -> Any:
        new_module = names.get(name)
        if new_module is None:
            raise AttributeError(f"module {old_module!r} has no attribute {name!r} (0.x "
                                 f"compatibility forwards only {', '.join(sorted(names))})")
        warnings.warn(
            f"{old_module}.{name} moved: use `from {new_module} import {name}` "
            f"({old_module} is a 0.x import path, kept until onnx-graph-rewriter "
            f"{REMOVED_IN}; see docs/plugins.md, 'Stability and changelog')",
            DeprecationWarning, stacklevel=2)
        return getattr(importlib.import_module(new_module), name)

    return __getattr__
