"""0.x import path (deprecated): ``rewriter.bodies``. Its public names now live in
``rewriter.plugin``; importing one from here works for
the 1.x series with a DeprecationWarning (see :mod:`rewriter._compat`)."""

from rewriter._compat import forwarder

__getattr__ = forwarder("rewriter.bodies", {
    "FunctionBuilder": "rewriter.plugin",
    "declining": "rewriter.plugin",
    "Declined": "rewriter.plugin",
})
