"""Pass ``static-sequences``: sequences and optionals of the main graph whose structure is
known before the run are replaced by the tensors they hold.

OpenVINO's ONNX frontend converts no ``SequenceAt``, ``SequenceLength`` or optional op (and
the reference and opset targets lack some at older opsets), while exporters make sequences
and optionals of a fixed structure: ``SequenceConstruct(a, b, ...)`` read back with
``SequenceAt`` at a constant position or joined with ``ConcatFromSequence``, an
``Optional(x)`` read with ``OptionalHasElement`` / ``OptionalGetElement``. When every reader
of such a value is one of those (and the value is no graph output), the readers become
``Identity`` of the element, ``Concat`` of the elements (each ``Unsqueeze``-d first for
``new_axis = 1``), or a constant (the length; ``true`` for a present optional), and the
producer goes. Sequences that cross the model's boundary, grow in loops or are read at a
position known only at run time are left alone.
"""

from __future__ import annotations

from rewriter.plugin import Finding, PassContext, RewritePass, hookimpl, main_node_index

_DEFAULT = ("", "ai.onnx")
_READERS = frozenset({"SequenceAt", "SequenceLength", "ConcatFromSequence",
                      "OptionalHasElement", "OptionalGetElement"})
_PRODUCERS = frozenset({"SequenceConstruct", "Optional"})


def _constant_int(model, name: str) -> int | None:
    """The value of a one-element integer initializer or Constant ``name``, if it is one."""
    from onnx import numpy_helper

    for tensor in model.graph.initializer:
        if tensor.name == name and not tensor.external_data:
            value = numpy_helper.to_array(tensor)
            return int(value.reshape(-1)[0]) if value.size == 1 else None
    for node in model.graph.node:
        if node.op_type == "Constant" and node.output[0] == name and node.domain in _DEFAULT:
            for a in node.attribute:
                if a.name == "value":
                    value = numpy_helper.to_array(a.t)
                    return int(value.reshape(-1)[0]) if value.size == 1 else None
                if a.name == "value_int":
                    return int(a.i)
    return None


def resolvable(model) -> dict[str, list[str]]:
    """Value name of each main-graph sequence or optional whose elements are known before the
    run and whose readers can all be replaced -> its elements."""
    graph = model.graph
    outputs = {o.name for o in graph.output}
    readers: dict[str, list] = {}
    for node in graph.node:
        for name in node.input:
            if name:
                readers.setdefault(name, []).append(node)
    nested = set()  # values read inside subgraphs: left alone
    stack = [a.g for n in graph.node for a in n.attribute if a.g.node]
    while stack:
        sub = stack.pop()
        for n in sub.node:
            nested.update(n.input)
            stack.extend(a.g for a in n.attribute if a.g.node)
    out = {}
    for node in graph.node:
        if node.op_type not in _PRODUCERS or node.domain not in _DEFAULT:
            continue
        value = node.output[0]
        elements = [i for i in node.input if i]
        if (value in outputs or value in nested or not readers.get(value)
                or (node.op_type == "Optional" and len(elements) != 1)):
            continue
        ok = True
        for reader in readers[value]:
            if reader.op_type not in _READERS or reader.domain not in _DEFAULT:
                ok = False
            elif reader.op_type == "SequenceAt":
                position = _constant_int(model, reader.input[1])
                ok = position is not None and -len(elements) <= position < len(elements)
            elif reader.op_type.startswith("Optional") != (node.op_type == "Optional"):
                ok = False
            if not ok:
                break
        if ok:
            out[value] = elements
    return out


def _replacement(model, reader, elements: list[str]) -> list:
    from onnx import TensorProto, helper

    out = reader.output[0]
    name = reader.name or out  # node names stay unique: a reader's own, or its output's
    if reader.op_type in ("SequenceAt", "OptionalGetElement"):
        position = 0 if reader.op_type == "OptionalGetElement" else _constant_int(
            model, reader.input[1])
        return [helper.make_node("Identity", [elements[position]], [out], name=name)]
    if reader.op_type in ("SequenceLength", "OptionalHasElement"):
        tensor = (helper.make_tensor("length", TensorProto.INT64, [], [len(elements)])
                  if reader.op_type == "SequenceLength"
                  else helper.make_tensor("present", TensorProto.BOOL, [], [True]))
        return [helper.make_node("Constant", [], [out], name=name, value=tensor)]
    attributes = {a.name: a.i for a in reader.attribute}
    axis, new_axis = attributes.get("axis", 0), attributes.get("new_axis", 0)
    nodes, parts = [], list(elements)
    if new_axis:
        opset = next((o.version for o in model.opset_import if o.domain in _DEFAULT), 13)
        axes = f"{out}/axes"
        if opset >= 13:  # Unsqueeze takes its axes as an input from opset 13
            nodes.append(helper.make_node("Constant", [], [axes], name=f"{name}/axes",
                                          value=helper.make_tensor("axes", TensorProto.INT64,
                                                                   [1], [axis])))
        parts = []
        for i, element in enumerate(elements):
            parts.append(f"{out}/part{i}")
            nodes.append(helper.make_node("Unsqueeze", [element, axes], [parts[-1]],
                                          name=f"{name}/unsqueeze{i}") if opset >= 13 else
                         helper.make_node("Unsqueeze", [element], [parts[-1]],
                                          name=f"{name}/unsqueeze{i}", axes=[axis]))
    nodes.append(helper.make_node("Concat", parts, [out], name=name, axis=axis))
    return nodes


class StaticSequencesPass(RewritePass):
    """Replaces sequences and optionals of a fixed structure by the tensors they hold."""

    phase = "legalize"

    def __init__(self) -> None:
        self._model = None
        self._known: dict[str, list[str]] | None = None

    def prepare(self, model, ctx: PassContext) -> None:
        self._model, self._known = model, None

    def _resolves(self, finding: Finding) -> bool:
        index = main_node_index(finding.path)
        model = self._model
        if index is None or model is None:
            return False
        nodes = model.graph.node
        if index >= len(nodes):
            return False
        node = nodes[index]
        if node.op_type not in _READERS | _PRODUCERS:
            return False
        if self._known is None:
            self._known = resolvable(model)
        value = node.output[0] if node.op_type in _PRODUCERS else node.input[0]
        return value in self._known

    def handles(self, finding: Finding, ctx: PassContext) -> bool:
        return self._resolves(finding)

    def offers_for_op(self, finding: Finding, ctx: PassContext) -> bool:
        return finding.op_type not in _READERS | _PRODUCERS  # no other node is resolved

    def offers(self, finding: Finding, ctx: PassContext) -> tuple[bool, str]:
        if not self._resolves(finding):
            return False, ("not a sequence or optional of a fixed structure read only by "
                           "SequenceAt at a constant position, SequenceLength, "
                           "ConcatFromSequence or the optional ops")
        return True, "the sequence or optional is replaced by the tensors it holds"

    def run(self, model, ctx: PassContext):
        known = resolvable(model)
        if not known:
            return None
        producers = {v for v in known}
        nodes = []
        for node in model.graph.node:
            if node.op_type in _PRODUCERS and node.output[0] in producers:
                continue
            if node.op_type in _READERS and node.input and node.input[0] in known:
                nodes.extend(_replacement(model, node, known[node.input[0]]))
                ctx.record("conversion", self.plugin, "static sequence",
                           f"ai.onnx::{node.op_type}")
                continue
            nodes.append(node)
        del model.graph.node[:]
        model.graph.node.extend(nodes)
        kept = {o for n in nodes for o in n.output}
        info = [v for v in model.graph.value_info if v.name not in producers or v.name in kept]
        del model.graph.value_info[:]
        model.graph.value_info.extend(info)
        return model


@hookimpl
def register_passes(registry):
    registry.add("static-sequences", StaticSequencesPass, phase="legalize")
