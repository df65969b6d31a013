"""com.microsoft attention-family ops (registered by the ``com-microsoft`` plugin)."""


def register_decompositions(registry):
    """Called by ``rewriter_plugins.com_microsoft``."""
