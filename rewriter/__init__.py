"""onnx-graph-rewriter: find the operators a target runtime cannot run, and rewrite them."""

from __future__ import annotations

from rewriter.hookspecs import hookimpl

__version__ = "0.1.0"

__all__ = [
    "__version__",
    "check",
    "compare",
    "rewrite",
    "session",
    "reference_ops",
    "kernel",
    "hookimpl",
    "inspect_model",
    "load_model",
    "save_model",
    "errors",
]


# name -> (module, attribute or None for the module itself), imported on first use: keeps
# `import rewriter` cheap (the API pulls in onnx only when used)
_LAZY = {
    "check": ("rewriter.api", "check"),
    "rewrite": ("rewriter.api", "rewrite"),
    "compare": ("rewriter.comparison.compare", "compare"),
    "session": ("rewriter.comparison.runtime", "session"),
    "reference_ops": ("rewriter.plan.kernels", "reference_ops"),
    "kernel": ("rewriter.plan.kernels", "kernel"),
    "inspect_model": ("rewriter.report.summary", "inspect_model"),
    "load_model": ("rewriter.io.model", "load_model"),
    "save_model": ("rewriter.io.model", "save_model"),
    "errors": ("rewriter.errors", None),
}


def __getattr__(name: str):
    import importlib

    if name not in _LAZY:
        raise AttributeError(f"module 'rewriter' has no attribute {name!r}")
    module_name, attr = _LAZY[name]
    module = importlib.import_module(module_name)  # not `from rewriter import`: recursion
    return module if attr is None else getattr(module, attr)
