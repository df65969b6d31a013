"""0.x import path (deprecated): ``rewriter.kernels``. Its public names now live in
``rewriter.plan.kernels``, ``rewriter.plugin``; importing one from here works for
the 1.x series with a DeprecationWarning (see :mod:`rewriter._compat`)."""

from rewriter._compat import forwarder

__getattr__ = forwarder("rewriter.kernels", {
    "kernel": "rewriter.plugin",
    "reference_ops": "rewriter.plugin",
    "Kernel": "rewriter.plan.kernels",
    "native_only": "rewriter.plan.kernels",
})
