"""Remedies as ONNX functions: build, specialise, stamp and splice them into a model.

A decomposition becomes a ``FunctionProto``; the unsupported node is pointed at it and
onnx's C++ inliner splices the body in (in the main graph, in If/Loop/Scan bodies and in
model-local functions), renaming values as needed.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from onnx import FunctionProto, ModelProto, NodeProto, TypeProto

from rewriter.console import time_limit
from rewriter.graph.walk import normalize_domain, opset_map

REMEDY_DOMAIN = "rewriter.remedy"
PROVENANCE_PLUGIN = "rewriter.plugin"
PROVENANCE_RULE = "rewriter.rule"
PROVENANCE_OP = "rewriter.op"  # the op the stamped node helps replace ("com.acme::Gelu")


class Recording(Mapping):
    """A read-only view of ``data`` that notes every name looked up in ``log`` (as
    ``(kind, name)``; ``(kind, "*")`` when the whole mapping was iterated). The planner
    reuses a body for another node only when everything its builder read is the same."""

    def __init__(self, data: Mapping, log: list, kind: str) -> None:
        self._data, self._log, self._kind = data, log, kind

    def __getitem__(self, name):
        self._log.append((self._kind, name))
        return self._data[name]

    def __contains__(self, name) -> bool:
        self._log.append((self._kind, name))
        return name in self._data

    def __iter__(self):
        self._log.append((self._kind, "*"))
        return iter(self._data)

    def __len__(self) -> int:
        self._log.append((self._kind, "*"))
        return len(self._data)


@dataclass
class DecompositionContext:
    """What a decomposition builder may look at to build a body for one node.

    ``declared``: the types (with shapes) the model states for values (graph inputs,
    outputs, value_info, every graph), by name; ``constants``: initializers and Constant
    outputs by name. A body built from them is reused only for nodes where the names the
    builder looked up hold the same values."""

    node: NodeProto
    opset: int  # the ai.onnx opset the body must be written for
    opsets: Mapping[str, int]
    input_types: list[str | None]
    declared: Mapping[str, TypeProto] = field(default_factory=dict)
    constants: Mapping[str, Any] = field(default_factory=dict)  # name -> TensorProto
    # the highest ai.onnx opset every target runs (an opset:N target, an older runtime),
    # when one has a ceiling below ``opset``: the body is lowered to it afterwards, so a
    # builder may prefer a form whose ops exist there (None: no such ceiling)
    ceiling: int | None = None

    def constant(self, name: str) -> np.ndarray | None:
        """The value of a node input that is an initializer or Constant output, else None."""
        from onnx import numpy_helper

        tensor = self.constants.get(name)
        if tensor is None or tensor.data_location == tensor.EXTERNAL:
            return None
        return numpy_helper.to_array(tensor)

    def shape(self, name: str) -> list[int | None] | None:
        """The shape of value ``name`` (an initializer's or Constant's, else the declared
        one): ints, None for a dimension not known; None when the rank is not known."""
        if not name:
            return None
        tensor = (self.constants or {}).get(name)
        if tensor is not None:  # an initializer's dims, its data external or not
            return [int(d) for d in tensor.dims]
        declared = (self.declared or {}).get(name)
        if declared is None or not declared.HasField("tensor_type"):
            return None
        tensor_type = declared.tensor_type
        if not tensor_type.HasField("shape"):
            return None
        return [d.dim_value if d.HasField("dim_value") else None
                for d in tensor_type.shape.dim]

    def rank(self, name: str) -> int | None:
        """The rank of value ``name`` (see :meth:`shape`), or None."""
        shape = self.shape(name)
        return None if shape is None else len(shape)

    def attribute(self, name: str, default: Any = None) -> Any:
        from onnx import helper

        for a in self.node.attribute:
            if a.name == name:
                return helper.get_attribute_value(a)
        return default


def resolve_reference(ref: str) -> Any:
    """Import ``"module:attr"`` (dotted attr allowed)."""
    module_name, _, attr = ref.partition(":")
    obj = importlib.import_module(module_name)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


BUILDER_TIME_LIMIT_S = 60.0  # a builder past this declines (rewriter.console.time_limit)


def build_function(builder: Any, ctx: DecompositionContext) -> FunctionProto | None:
    """Turn a registered builder into a FunctionProto for this node (None, or
    :class:`~rewriter.plan.bodies.Declined` raised: it declines). A callable builder may
    return a FunctionProto or an onnxscript function."""
    if isinstance(builder, str):
        builder = resolve_reference(builder)
    if isinstance(builder, FunctionProto):
        fn = FunctionProto()
        fn.CopyFrom(builder)
        return fn
    to_proto = getattr(builder, "to_function_proto", None)
    if to_proto is not None:  # an onnxscript OnnxFunction
        return to_proto()
    if callable(builder):
        with time_limit(BUILDER_TIME_LIMIT_S, "the decomposition builder"):  # never hangs
            result = builder(ctx)
        if result is None:
            return None
        if isinstance(result, FunctionProto):
            return result
        to_proto = getattr(result, "to_function_proto", None)
        if to_proto is not None:
            return to_proto()
        raise TypeError(f"decomposition builder returned {type(result).__name__}")
    raise TypeError(f"unsupported decomposition builder {builder!r}")


def specialise(
    fn: FunctionProto, name: str, opsets: Mapping[str, int], plugin: str, rule: str,
    op: str = "",
) -> FunctionProto:
    """A copy of ``fn`` named ``REMEDY_DOMAIN:name``, importing the model's opset versions
    for every domain the model also imports (the inliner insists they agree), with every
    body node stamped with provenance (``op``: the replaced op, ``domain::op_type``)."""
    out = FunctionProto()
    out.CopyFrom(fn)
    out.domain = REMEDY_DOMAIN
    out.name = name
    out.overload = ""
    body_opsets = opset_map(out.opset_import)
    if "" not in body_opsets:
        body_opsets[""] = opsets.get("", 1)
    for domain in body_opsets:
        if domain in opsets:
            body_opsets[domain] = opsets[domain]
    del out.opset_import[:]
    for domain, version in sorted(body_opsets.items()):
        entry = out.opset_import.add()
        entry.domain = domain
        entry.version = version
    _stamp(out.node, plugin, rule, op)
    return out


def _stamp(nodes, plugin: str, rule: str, op: str = "") -> None:
    from rewriter.graph.walk import subgraphs

    stamp = [(PROVENANCE_PLUGIN, plugin), (PROVENANCE_RULE, rule)]
    if op:
        stamp.append((PROVENANCE_OP, op))
    for node in nodes:
        keys = {p.key for p in node.metadata_props}
        if PROVENANCE_RULE not in keys:  # a nested remedy's nodes keep their own stamp
            for key, value in stamp:
                entry = node.metadata_props.add()
                entry.key = key
                entry.value = value
        if not node.name:
            node.name = rule
        for _, g in subgraphs(node):
            _stamp(g.node, plugin, rule, op)


def retarget(node: NodeProto, fn: FunctionProto) -> None:
    """Point ``node`` at the remedy function (attributes bind to the function's). Optional
    inputs and outputs the node leaves empty at the end (``""``) are dropped: the inliner
    binds arguments by position and takes no more than the function declares."""
    node.domain = fn.domain
    node.op_type = fn.name
    node.overload = fn.overload
    for names in (node.input, node.output):
        while names and not names[-1]:
            names.pop()
    declared = set(fn.attribute) | {a.name for a in fn.attribute_proto}
    kept = [a for a in node.attribute if a.name in declared]
    if len(kept) != len(node.attribute):
        del node.attribute[:]
        node.attribute.extend(kept)
    # onnx's inliner ignores the function's default attribute values: set them on the call
    present = {a.name for a in node.attribute}
    for default in fn.attribute_proto:
        if default.name not in present:
            node.attribute.add().CopyFrom(default)


def splice(model: ModelProto, functions: list[FunctionProto]) -> ModelProto:
    """Add ``functions``, inline exactly those, and return the new model."""
    from onnx import inliner

    if not functions:
        return model
    model.functions.extend(functions)
    if not any(normalize_domain(o.domain) == REMEDY_DOMAIN for o in model.opset_import):
        entry = model.opset_import.add()
        entry.domain = REMEDY_DOMAIN
        entry.version = 1
    ids = [(f.domain, f.name) for f in functions]
    out = inliner.inline_selected_functions(model, ids, False)
    remaining = [f for f in out.functions if f.domain != REMEDY_DOMAIN]
    del out.functions[:]
    out.functions.extend(remaining)
    return out
