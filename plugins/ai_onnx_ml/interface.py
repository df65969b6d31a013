"""The ops of ai.onnx.ml whose input or output is not a tensor, and the graph outputs a
target cannot return. Their remedy changes the model's interface, which only
``--adapt-interface`` allows; without it the pass here claims their findings and declines
each in one line naming the graph input or output, its type, the target, and the flag.

* ``ZipMap(X) -> seq(map(int64 | string, float))``: each row of class scores as a map from
  class label to score. A sequence of maps cannot become a tensor without changing what the
  model's users receive; no standard op builds a map, so no target without ZipMap runs it.
  Adapted: the graph output keeps its name and becomes ``X``, the float tensor ``[N, C]``
  (the ZipMap node is replaced by an Identity), the labels go to the model's metadata.
* A string label output (a classifier's ``classlabels_strings``, or ``Gather`` from a
  constant table of strings as their bodies compute it, possibly through Identity, Reshape,
  Squeeze, Unsqueeze, Flatten or Cast): tract's Python API cannot return a string tensor.
  Adapted: the output becomes the int64 index into the label table, which goes to the
  model's metadata.
* ``DictVectorizer(X: map(string | int64, T)) -> tensor``: a map's values at the
  vocabulary's positions. Its input is a map: not adapted.

The record in the metadata, and the conversions between the two interfaces that the
comparison and ``rewriter.session`` make, are :mod:`rewriter.io.interface`'s.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from rewriter.plugin import Adaptation, Declined, RewritePass, record_adaptation, type_string

from ._common import ML, NO_IMPORT_OPSET

REGISTRATIONS: list = []  # (no decomposition: a pass adapts or declines them)
INTERFACE_OPS = ("ZipMap", "DictVectorizer")
FLAG = "--adapt-interface"
# what a user can do without the flag, per producer
_NO_ZIPMAP = ("export without ZipMap (skl2onnx: options={'zipmap': False}; onnxmltools: "
              "zipmap=False) to get the probabilities as a float tensor")
_ADAPT = (f"{FLAG} rewrites it to the float probabilities [N, C] (the class labels in the "
          "model's metadata)")
_CLASSIFIERS = ("LinearClassifier", "SVMClassifier", "TreeEnsembleClassifier")
# ops a label passes through unchanged (their first input is the label)
_PASS_THROUGH = ("Identity", "Reshape", "Squeeze", "Unsqueeze", "Flatten", "Cast")


def interface_reason(op_type: str, node, target: str = "the target",
                     graph_values: frozenset[str] = frozenset()) -> str:
    """Why ``op_type`` (one of :data:`INTERFACE_OPS`) is not rewritten for ``target``, in
    one line naming the value (a graph output or input when it is one of
    ``graph_values``), its type, and the way out."""
    if op_type == "ZipMap":
        kind = f"seq(map({'string' if _zipmap_labels(node)[1] else 'int64'}, float))"
        name = node.output[0] if node is not None and node.output else "?"
        where = "output" if name in graph_values else "value"
        way_out = f"{_ADAPT}, or {_NO_ZIPMAP}" if where == "output" else _NO_ZIPMAP
        return (f"{where} {name!r} is a sequence of maps, {kind} (ZipMap): {target} cannot "
                f"return it and no tensor op builds one; {way_out}")
    name = node.input[0] if node is not None and node.input else "?"
    where = "input" if name in graph_values else "value"
    return (f"{where} {name!r} is a map(string | int64, T) (DictVectorizer): {target} cannot "
            f"take it and no tensor op reads one ({FLAG} does not adapt a map input); feed "
            "the vectorized features (a tensor) to the model after DictVectorizer")


def _zipmap_labels(node) -> tuple[list, bool]:
    """ZipMap's class labels and whether they are strings."""
    for a in node.attribute if node is not None else ():
        if a.name == "classlabels_strings" and a.strings:
            return [s.decode() for s in a.strings], True
        if a.name == "classlabels_int64s" and a.ints:
            return list(a.ints), False
    return [], False


class InterfaceOps(RewritePass):
    """Claims the findings of ZipMap and DictVectorizer and of graph outputs a target cannot
    return; with ``--adapt-interface`` (``ctx.options["adapt_interface"]``) rewrites ZipMap
    outputs and string label outputs to tensors, else declines naming the flag."""

    def __init__(self) -> None:
        self._graph_values: frozenset[str] = frozenset()
        self._outputs: frozenset[str] = frozenset()
        self._model = None
        self._why_not: dict[str, str] = {}  # graph output -> why it cannot be adapted ("")
        self._wanted: set[str] = set()  # graph outputs to adapt (from accepted findings)

    def prepare(self, model, ctx) -> None:
        self._graph_values = frozenset(
            v.name for v in (*model.graph.input, *model.graph.output))
        self._outputs = frozenset(v.name for v in model.graph.output)
        self._model = model  # (read when a finding asks: an output's adaptation)
        self._why_not = {}

    def _cannot_adapt(self, name: str) -> str:
        """Why output ``name`` of the prepared model is not one the flag adapts ("": it
        is)."""
        if name not in self._why_not:
            try:
                _plan_output(self._model, name)
                self._why_not[name] = ""
            except Declined as e:
                self._why_not[name] = str(e)
        return self._why_not[name]

    def handles(self, finding, ctx) -> bool:
        if finding.domain == ML and finding.op_type in INTERFACE_OPS:
            return True
        return not finding.op_type and finding.value in self._graph_values

    def offers(self, finding, ctx):
        if not self.handles(finding, ctx):
            raise Declined("not a ZipMap or DictVectorizer node, nor a graph input or output")
        adapt = bool(ctx.options.get("adapt_interface"))
        if finding.op_type:
            name = finding.node.output[0] if finding.op_type == "ZipMap" and \
                finding.node is not None and finding.node.output else ""
            if not adapt or name not in self._outputs:
                raise Declined(interface_reason(finding.op_type, finding.node, finding.target,
                                                self._graph_values))
        else:
            name = finding.value
            kind = "output" if name in self._outputs else "input"
            if kind == "input":
                raise Declined(f"input {name!r} is part of the model's interface, and "
                               f"{FLAG} adapts outputs only (ZipMap's maps, string labels)")
            if not adapt:
                raise Declined(f"{kind} {name!r} is part of the model's interface: rerun "
                               f"with {FLAG}")
        why = self._cannot_adapt(name)
        if why:
            raise Declined(f"{FLAG} cannot adapt output {name!r}: {why}")
        self._wanted.add(name)
        return True, f"{FLAG}: output {name!r} becomes a tensor (its labels in the metadata)"

    def run(self, model, ctx):
        if not ctx.options.get("adapt_interface"):
            return None
        outputs = {v.name for v in model.graph.output}
        todo = sorted(self._wanted & outputs)
        if not todo:
            return None
        changed = False
        for name in todo:
            try:
                adapt = _plan_output(model, name)
            except Declined:  # (what this round spliced hides it: the re-check says so)
                continue
            op_label = adapt(model)
            if op_label:
                ctx.record("interface", self.plugin, f"{FLAG} {name}", op_label)
                changed = True
        return model if changed else None


# -- what an output's adaptation changes ------------------------------------------------------

def _producers(graph) -> dict[str, object]:
    return {o: n for n in graph.node for o in n.output if o}


def _consumers(graph, name: str) -> int:
    return sum(1 for n in graph.node for i in n.input if i == name) + \
        sum(1 for v in graph.output if v.name == name)


def _plan_output(model, name: str):
    """A function adapting graph output ``name`` of ``model`` in place (and returning the op
    it adapted), or Declined saying why the output is not one the flag adapts. An output
    that is a tensor of another type than string needs nothing: Declined too."""
    graph = model.graph
    output = next(v for v in graph.output if v.name == name)
    producers = _producers(graph)
    node = producers.get(name)
    was = type_string(output.type) or ""
    if node is not None and node.domain == ML and node.op_type == "ZipMap":
        labels, strings = _zipmap_labels(node)
        if not labels:
            raise Declined("its ZipMap has no class labels")
        was = was or f"seq(map({'string' if strings else 'int64'},tensor(float)))"
        return lambda m: _adapt_zipmap(m, name, labels, was)
    if output.type.tensor_type.elem_type != TensorProto.STRING:
        raise Declined(f"it is {was or 'of an unknown type'}, neither ZipMap's sequence of "
                       "maps nor a string tensor")
    if _consumers(graph, name) > 1:
        raise Declined("nodes of the model read it as strings")
    chain, value = [], name
    while (node := producers.get(value)) is not None and node.domain in ("", "ai.onnx") \
            and node.op_type in _PASS_THROUGH:
        if node.op_type == "Cast" and _attr_int(node, "to") != TensorProto.STRING:
            break
        chain.append(node)
        value = node.input[0]
        if _consumers(graph, value) > 1:
            raise Declined(f"{value!r}, the string labels it is made from, is read elsewhere")
    if node is not None and node.domain == ML and node.op_type in _CLASSIFIERS \
            and node.output[0] == value:
        labels = next(([s.decode() for s in a.strings] for a in node.attribute
                       if a.name == "classlabels_strings" and a.strings), None)
        if labels is None:
            raise Declined(f"its {node.op_type} has no string labels")
        return lambda m: _adapt_labels(m, name, chain, value, labels, node.op_type)
    if node is not None and node.domain in ("", "ai.onnx") and node.op_type == "Gather" \
            and _attr_int(node, "axis", 0) == 0:
        table = _constant(model, node.input[0])
        if table is not None and table.dtype == object and table.ndim == 1:
            labels = [t.decode() if isinstance(t, bytes) else str(t) for t in table]
            return lambda m: _adapt_labels(m, name, chain, value, labels, "Gather")
    raise Declined("it is not the string label of a classifier (classlabels_strings) nor a "
                   "Gather from a constant table of strings")


def _attr_int(node, name: str, default: int | None = None) -> int | None:
    return next((a.i for a in node.attribute if a.name == name), default)


def _constant(model, name: str) -> np.ndarray | None:
    """The value of ``name`` when an initializer or a Constant node holds it."""
    for t in model.graph.initializer:
        if t.name == name:
            return numpy_helper.to_array(t)
    for n in model.graph.node:
        if n.op_type == "Constant" and n.output and n.output[0] == name:
            for a in n.attribute:
                if a.name == "value":
                    return numpy_helper.to_array(a.t)
                if a.name == "value_strings":
                    return np.asarray(list(a.strings), dtype=object)
    return None


def _forget_types(model, names) -> None:
    kept = [v for v in model.graph.value_info if v.name not in set(names)]
    del model.graph.value_info[:]
    model.graph.value_info.extend(kept)


def _adapt_zipmap(model, name: str, labels: list, was: str) -> str:
    """ZipMap's output ``name`` as the float tensor ZipMap was fed (an Identity of it)."""
    graph = model.graph
    index = next(i for i, n in enumerate(graph.node) if name in n.output)
    zipmap = graph.node[index]
    rows = _first_dim(model, zipmap.input[0])
    graph.node.remove(zipmap)
    graph.node.insert(index, helper.make_node("Identity", [zipmap.input[0]], [name],
                                              name=zipmap.name or f"{name}/Identity"))
    if not any(o.domain in ("", "ai.onnx") for o in model.opset_import):
        # (CatBoost's export imports ai.onnx.ml alone: the Identity needs ai.onnx)
        model.opset_import.append(helper.make_opsetid("", NO_IMPORT_OPSET))
    output = next(v for v in graph.output if v.name == name)
    output.type.CopyFrom(helper.make_tensor_type_proto(TensorProto.FLOAT, [rows, len(labels)]))
    _forget_types(model, [name])
    record_adaptation(model, Adaptation(name, "zipmap", was, "tensor(float)", tuple(labels)))
    return f"{ML}::ZipMap"


def _first_dim(model, name: str):
    """The declared first dimension of ``name`` (a size, a name, or None: unknown)."""
    for v in (*model.graph.value_info, *model.graph.input, *model.graph.output):
        if v.name == name and v.type.tensor_type.shape.dim:
            d = v.type.tensor_type.shape.dim[0]
            return d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
    return None


def _adapt_labels(model, name: str, chain, value: str, labels: list, source: str) -> str:
    """The string label output ``name`` as int64 indices into ``labels``: its classifier
    gives the indices (labels 0..C-1), or its Gather reads a table of the indices instead of
    the labels; the Casts to string on the way cast to int64."""
    graph = model.graph
    producer = _producers(graph)[value]
    if source == "Gather":
        # the Gather reads a table of the indices instead of the labels (not the indices
        # themselves: tract types an ArgMax's output as a dimension, TDim, which its API
        # cannot hand out, and a Gather's output as int64)
        index = list(graph.node).index(producer)
        table = f"{value}/label_indices"
        graph.node.insert(index, helper.make_node(
            "Constant", [], [table], name=table,
            value=numpy_helper.from_array(np.arange(len(labels), dtype=np.int64), table)))
        producer.input[0] = table
    else:
        kept = [a for a in producer.attribute if a.name != "classlabels_strings"]
        del producer.attribute[:]
        producer.attribute.extend(kept)
        producer.attribute.append(helper.make_attribute("classlabels_int64s",
                                                        list(range(len(labels)))))
    for node in chain:
        if node.op_type == "Cast":
            for a in node.attribute:
                if a.name == "to":
                    a.i = TensorProto.INT64
    _forget_types(model, [value, *(n.output[0] for n in chain)])
    output = next(v for v in graph.output if v.name == name)
    output.type.tensor_type.elem_type = TensorProto.INT64
    record_adaptation(model, Adaptation(name, "labels", "tensor(string)", "tensor(int64)",
                                        tuple(labels)))
    return f"{ML}::{source}" if source != "Gather" else "ai.onnx::Gather"
