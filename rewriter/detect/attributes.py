"""Nodes that give as an attribute what their operator takes as an input at the model's
opset (``ReduceMean``'s ``axes`` from opset 18): invalid ONNX on every target, which
runtimes read otherwise. onnxruntime refuses the model ("Unrecognized attribute: axes for
operator ReduceMean"); OpenVINO ignores the attribute (and reduces over every axis).
onnxruntime's ``MatMulNBitsQuantizer`` writes such nodes when it raises an opset-17 model to
21. The finding (reason ``attribute-as-input``) lets a remedy move the attribute to the input
(onnx-standard's ``axes_inputs``).
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache

from onnx import ModelProto, defs

from rewriter.detect.targets import Finding

REASON = "attribute-as-input"


@cache
def _moved(op_type: str, opset: int) -> frozenset[str]:
    """The input names of ``op_type``'s ai.onnx schema at ``opset`` that are not attributes
    there (what an attribute of that name would mean: the input)."""
    try:
        schema = defs.get_schema(op_type, opset, "")
    except defs.SchemaError:
        return frozenset()
    return frozenset(i.name for i in schema.inputs) - set(schema.attributes)


def attribute_findings(model: ModelProto, target: str, skip: set[str] = frozenset(),
                       types: Mapping[str, str] | None = None, keep_nodes: bool = False,
                       in_main: set[int] | None = None) -> list[Finding]:
    """A finding for each ai.onnx node with an attribute its schema takes as an input,
    except at the paths in ``skip`` (the target found them already). ``keep_nodes``, ``types``
    and ``in_main`` as :func:`rewriter.detect.ranks.rank_findings`."""
    from rewriter.graph.walk import iter_nodes

    out = []
    for site in iter_nodes(model):
        node = site.node
        if site.domain not in ("", "ai.onnx") or not node.attribute or site.path in skip:
            continue
        version = site.opset_version
        moved = _moved(node.op_type, version) if version else frozenset()
        wrong = [a.name for a in node.attribute if a.name in moved]
        if not wrong:
            continue
        detail = (f"{node.op_type} at opset {version} takes {', '.join(wrong)} as an input, "
                  "not an attribute (the attribute is invalid ONNX; onnxruntime refuses the "
                  "model, OpenVINO ignores it)")
        if keep_nodes:
            get = (types or {}).get
            out.append(Finding(target, site.path, site.domain, node.op_type, version, REASON,
                               detail, node.name, node,
                               tuple(get(n) if n else None for n in node.input),
                               dict(site.scope.opsets)))
            if in_main is not None and site.scope.graph is model.graph:
                in_main.add(id(out[-1]))
        else:
            out.append(Finding(target, site.path, site.domain, node.op_type, version, REASON,
                               detail, node.name))
    return out


def with_attributes_as_inputs(model: ModelProto) -> tuple[ModelProto, int]:
    """A copy of ``model`` whose nodes' integer-list attributes their schema takes as inputs
    (``ReduceMean``'s ``axes`` at opset 18+) are moved to those inputs, each a ``Constant``
    node placed before its node, and how many nodes changed; ``model`` itself, and 0, when
    there are none. The comparison's oracle runs an original so, as the model was written
    (OpenVINO would run it ignoring the attribute)."""
    from onnx import AttributeProto, helper
    from onnx import ModelProto as Proto

    from rewriter.graph.walk import iter_scopes

    def offending(node, opsets) -> list[str]:
        if (node.domain or "") not in ("", "ai.onnx") or not node.attribute:
            return []
        moved = _moved(node.op_type, opsets.get("", 0)) if opsets.get("", 0) else frozenset()
        return [a.name for a in node.attribute
                if a.name in moved and a.type == AttributeProto.INTS]

    if not any(offending(n, scope.opsets) for scope in iter_scopes(model)
               for n in scope.nodes):
        return model, 0
    copy = Proto()
    copy.CopyFrom(model)
    changed = 0
    for scope in list(iter_scopes(copy)):
        nodes = scope.graph.node if scope.graph is not None else scope.function.node
        rebuilt = []
        for node in nodes:
            names = offending(node, scope.opsets)
            if names:
                changed += 1
                formal = [i.name for i in defs.get_schema(node.op_type,
                                                          scope.opsets[""], "").inputs]
                inputs = list(node.input) + [""] * (len(formal) - len(node.input))
                for name in names:
                    value = next(a for a in node.attribute if a.name == name)
                    const = f"{node.name or node.op_type}/{name}_as_input"
                    rebuilt.append(helper.make_node(
                        "Constant", [], [const], name=const,
                        value=helper.make_tensor(const, 7, [len(value.ints)],
                                                 list(value.ints))))
                    inputs[formal.index(name)] = const
                    node.attribute.remove(value)
                while inputs and not inputs[-1]:
                    inputs.pop()
                del node.input[:]
                node.input.extend(inputs)
            rebuilt.append(node)
        if len(rebuilt) != len(nodes):
            kept = [type(n)() for n in rebuilt]
            for k, n in zip(kept, rebuilt):
                k.CopyFrom(n)
            del nodes[:]
            nodes.extend(kept)
    return copy, changed
