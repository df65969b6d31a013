"""The ops of ai.onnx.ml whose input or output is not a tensor. Their remedy changes the
model's interface, which ``--adapt-interface`` (a later flag) is to allow; until then the
pass here claims their findings and declines each in one line naming the graph input or
output, its type, the target, and the way out.

* ``ZipMap(X) -> seq(map(int64 | string, float))``: each row of class scores as a map from
  class label to score. A sequence of maps cannot become a tensor without changing what the
  model's users receive; no standard op builds a map, so no target without ZipMap runs it.
* ``DictVectorizer(X: map(string | int64, T)) -> tensor``: a map's values at the
  vocabulary's positions. Its input is a map: the same.
"""

from __future__ import annotations

from rewriter.plugin import Declined, RewritePass

from ._common import ML

REGISTRATIONS: list = []  # (no decomposition: a pass declines them)
INTERFACE_OPS = ("ZipMap", "DictVectorizer")
# what a user can do today, per producer (the flag is not there yet)
_NO_ZIPMAP = ("export without ZipMap (skl2onnx: options={'zipmap': False}; onnxmltools: "
              "zipmap=False) to get the probabilities as a float tensor")
_ADAPT = "--adapt-interface (planned) is to rewrite that boundary to tensors"


def interface_reason(op_type: str, node, target: str = "the target",
                     graph_values: frozenset[str] = frozenset()) -> str:
    """Why ``op_type`` (one of :data:`INTERFACE_OPS`) is not rewritten for ``target``, in
    one line naming the value (a graph output or input when it is one of
    ``graph_values``), its type, and the way out."""
    if op_type == "ZipMap":
        strings = node is not None and any(
            a.name == "classlabels_strings" and a.strings for a in node.attribute)
        kind = f"seq(map({'string' if strings else 'int64'}, float))"
        name = node.output[0] if node is not None and node.output else "?"
        where = "output" if name in graph_values else "value"
        return (f"{where} {name!r} is a sequence of maps, {kind} (ZipMap): {target} cannot "
                f"return it and no tensor op builds one; {_ADAPT}, or {_NO_ZIPMAP}")
    name = node.input[0] if node is not None and node.input else "?"
    where = "input" if name in graph_values else "value"
    return (f"{where} {name!r} is a map(string | int64, T) (DictVectorizer): {target} cannot "
            f"take it and no tensor op reads one; {_ADAPT}, or feed the vectorized features "
            "(a tensor) to the model after DictVectorizer")


class InterfaceOps(RewritePass):
    """Claims the findings of ZipMap and DictVectorizer, and declines them with the type that
    keeps them (a sequence of maps, a map)."""

    def __init__(self) -> None:
        self._graph_values: frozenset[str] = frozenset()

    def prepare(self, model, ctx) -> None:
        self._graph_values = frozenset(
            v.name for v in (*model.graph.input, *model.graph.output))

    def handles(self, finding, ctx) -> bool:
        return finding.domain == ML and finding.op_type in INTERFACE_OPS

    def offers(self, finding, ctx):
        if not self.handles(finding, ctx):
            raise Declined("not a ZipMap or DictVectorizer node")
        raise Declined(interface_reason(finding.op_type, finding.node, finding.target,
                                        self._graph_values))

    def run(self, model, ctx):
        return None
