"""Built-in plugins of onnx-graph-rewriter (installed as ``rewriter_plugins``).

Each module is registered through the ``onnx_rewriter`` entry-point group, exactly as a
third-party plugin is, and uses only the public ``rewriter`` API.
"""
