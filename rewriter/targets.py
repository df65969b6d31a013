"""0.x import path (deprecated): ``rewriter.targets``. Its public names now live in
``rewriter.detect.targets``, ``rewriter.plugin``; importing one from here works for
the 1.x series with a DeprecationWarning (see :mod:`rewriter._compat`)."""

from rewriter._compat import forwarder

__getattr__ = forwarder("rewriter.targets", {
    "Finding": "rewriter.plugin",
    "NodeQuery": "rewriter.plugin",
    "Target": "rewriter.plugin",
    "TargetOptions": "rewriter.plugin",
    "refused_node": "rewriter.detect.targets",
})
