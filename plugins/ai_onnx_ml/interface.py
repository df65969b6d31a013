"""The ops of ai.onnx.ml whose input or output is not a tensor. Their remedy changes the
model's interface, which ``--adapt-interface`` (a later flag) is to allow; until then the
pass here claims their findings and declines each with a reason naming the type.

* ``ZipMap(X) -> seq(map(int64 | string, float))``: each row of class scores as a map from
  class label to score. A sequence of maps cannot become a tensor without changing what the
  model's users receive.
* ``DictVectorizer(X: map(string | int64, T)) -> tensor``: a map's values at the
  vocabulary's positions. Its input is a map: the same.
"""

from __future__ import annotations

from rewriter.plugin import Declined, RewritePass

from ._common import ML

REGISTRATIONS: list = []  # (no decomposition: a pass declines them)
INTERFACE_OPS = ("ZipMap", "DictVectorizer")


def interface_reason(op_type: str, node) -> str:
    """Why ``op_type`` (one of :data:`INTERFACE_OPS`) is not rewritten, naming the type."""
    if op_type == "ZipMap":
        strings = any(a.name == "classlabels_strings" and a.strings for a in node.attribute) \
            if node is not None else False
        kind = f"seq(map({'string' if strings else 'int64'}, float))"
        return (f"ZipMap's output is {kind}, which no tensor holds: rewriting it changes the "
                "model's interface (needs --adapt-interface)")
    return ("DictVectorizer's input is a map(string | int64, T), not a tensor: rewriting it "
            "changes the model's interface (needs --adapt-interface)")


class InterfaceOps(RewritePass):
    """Claims the findings of ZipMap and DictVectorizer, and declines them with the type that
    keeps them (a sequence of maps, a map)."""

    def handles(self, finding, ctx) -> bool:
        return finding.domain == ML and finding.op_type in INTERFACE_OPS

    def offers(self, finding, ctx):
        if not self.handles(finding, ctx):
            raise Declined("not a ZipMap or DictVectorizer node")
        raise Declined(interface_reason(finding.op_type, finding.node))

    def run(self, model, ctx):
        return None
