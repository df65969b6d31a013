"""Stage 2, detect: targets (what a runtime can run) and the walk that finds what it cannot.

* ``targets``: ``Target``, ``Finding``, ``NodeQuery``, confirmation in a child process.
* ``runtime_target``: ``RuntimeTarget``, the base class for targets that answer by loading
  the model in a runtime, and ``ProbeWorker``.
* ``probe_models``: one-node probe models, a model's constants and shapes, the model as a
  file with its external data beside it.
* ``walker``: the walk over graphs, bodies and functions; ``bisect``, ``ranks``: finding the
  node a refusal is about, rank contradictions.
"""
