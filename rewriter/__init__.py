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


def __getattr__(name: str):
    # Keep `import rewriter` cheap: the API pulls in onnx only when used.
    if name in ("check", "rewrite"):
        from rewriter import api

        return getattr(api, name)
    if name == "compare":
        from rewriter.comparison import compare

        return compare
    if name == "session":
        from rewriter.runtime import session

        return session
    if name in ("reference_ops", "kernel"):
        from rewriter import kernels

        return getattr(kernels, name)
    if name == "inspect_model":
        from rewriter.summary import inspect_model

        return inspect_model
    if name in ("load_model", "save_model"):
        from rewriter import io

        return getattr(io, name)
    if name == "errors":
        from rewriter import errors

        return errors
    raise AttributeError(f"module 'rewriter' has no attribute {name!r}")
