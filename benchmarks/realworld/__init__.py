"""Real-world benchmark: tiny transformer models made by the tools people use, rewritten for
each target, with a model x target table of verdicts (``docs/realworld.md``).

``python benchmarks/realworld [build|run] [--cache DIR] [--only PATTERN] ...``; building
needs the ``bench`` extra (transformers, onnxruntime-genai; torch).
"""
