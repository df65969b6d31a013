"""0.x import path (deprecated): ``rewriter.oracle_check``. Its public names now live in
``rewriter.testing``; importing one from here works for
the 1.x series with a DeprecationWarning (see :mod:`rewriter._compat`)."""

from rewriter._compat import forwarder

__getattr__ = forwarder("rewriter.oracle_check", {
    "oracle_plugins": "rewriter.testing",
    "checks": "rewriter.testing",
    "check_one": "rewriter.testing",
    "without_oracle": "rewriter.testing",
})
