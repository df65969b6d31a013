"""What kind of remedy changed a node: the first field of every ``applied`` entry of a
rewrite report. A string enum: it compares equal to its value and prints as it in JSON."""

from __future__ import annotations

from rewriter.graph.textenum import TextEnum


class RemedyKind(TextEnum):
    DECOMPOSITION = "decomposition"  # the node's body spliced in (a FunctionProto)
    KERNEL = "kernel"  # the node retargeted to a custom kernel (Python or native)
    PASS = "pass"  # a whole-model pass offers to remedy the finding (planning)
    CONVERSION = "conversion"  # what a pass recorded it did (opset or IR conversion)
