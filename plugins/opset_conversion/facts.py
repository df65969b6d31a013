"""``ModelFacts``: what conversions may look at in a model: small constants, and value
types with shapes (declared, or inferred on a copy without the weights).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from onnx import (
    AttributeProto,
    GraphProto,
    ModelProto,
    TensorProto,
    TypeProto,
    helper,
    numpy_helper,
)

from rewriter.plugin import iter_scopes, normalize_domain

from .common import MAX_CONSTANT_ELEMENTS, constant_value
from .quantization import widened_4bit


class ModelFacts:
    """What conversions may look at: small constants and value types with shapes."""

    def __init__(self, model: ModelProto) -> None:
        from rewriter.plugin import declared_protos

        self.constants: dict[str, np.ndarray] = {}
        self.types: dict[str, TypeProto] = {}
        for scope in iter_scopes(model):
            g = scope.graph
            if g is not None:
                for t in g.initializer:
                    self._add(t.name, helper.make_tensor_type_proto(t.data_type, list(t.dims)))
                    n = int(np.prod(t.dims)) if len(t.dims) else 1
                    if n <= MAX_CONSTANT_ELEMENTS and t.data_location != TensorProto.EXTERNAL:
                        try:
                            self.constants[t.name] = numpy_helper.to_array(t)
                        except Exception:  # noqa: BLE001 - an odd tensor is just not constant
                            pass
                for name, t in declared_protos(g).items():
                    self._add(name, t)
            for node in scope.nodes:
                if node.op_type == "Constant" and normalize_domain(node.domain) == "" \
                        and node.output:
                    value = constant_value(node)
                    if value is not None and value.size <= MAX_CONSTANT_ELEMENTS:
                        self.constants[node.output[0]] = value
        for name, t in _inferred_types(model).items():
            self._add(name, t)
        self.widened = widened_4bit(model)  # 4-bit weights, widened to 8 bits below 21

    def with_constants(self, extra: Mapping[str, TensorProto]) -> ModelFacts:
        """These facts with the small tensors of ``extra`` as constants too (a copy)."""
        out = object.__new__(ModelFacts)
        out.widened = self.widened
        out.types = dict(self.types)
        out.constants = dict(self.constants)
        for name, tensor in extra.items():
            n = int(np.prod(tensor.dims)) if len(tensor.dims) else 1
            if n <= MAX_CONSTANT_ELEMENTS and tensor.data_location != TensorProto.EXTERNAL:
                out.constants[name] = numpy_helper.to_array(tensor)
                out.types.setdefault(name, helper.make_tensor_type_proto(
                    tensor.data_type, list(tensor.dims)))
        return out

    def _add(self, name: str, t: TypeProto) -> None:
        """Keep the most informative type seen for ``name`` (a graph may declare a value
        with no type at all, or with no shape)."""
        kind = t.WhichOneof("value")
        if not kind:
            return
        old = self.types.get(name)
        if old is None or (kind == old.WhichOneof("value") == "tensor_type"
                           and not old.tensor_type.HasField("shape")
                           and t.tensor_type.HasField("shape")):
            self.types[name] = t


def _inferred_types(model: ModelProto) -> dict[str, TypeProto]:
    """Value types with shapes from onnx's shape inference, run on a copy of the model
    without its weights (only small constants keep their data)."""
    from onnx import shape_inference

    skeleton = ModelProto()
    skeleton.ir_version = model.ir_version
    skeleton.opset_import.extend(model.opset_import)
    skeleton.functions.extend(model.functions)
    g = skeleton.graph
    src = model.graph
    g.input.extend(src.input)
    g.output.extend(src.output)
    g.value_info.extend(src.value_info)
    g.node.extend(src.node)
    inputs = {v.name for v in src.input}
    for t in src.initializer:
        n = int(np.prod(t.dims)) if len(t.dims) else 1
        if n <= MAX_CONSTANT_ELEMENTS and t.data_location != TensorProto.EXTERNAL:
            g.initializer.append(t)
        elif t.name not in inputs:  # a weight: its type and shape are all inference needs
            g.input.append(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
    try:
        inferred = shape_inference.infer_shapes(skeleton, data_prop=True)
    except Exception:  # noqa: BLE001 - declared types are used alone
        return {}
    out: dict[str, TypeProto] = {}

    def collect(graph: GraphProto) -> None:
        for vi in (*graph.value_info, *graph.output, *graph.input):
            out.setdefault(vi.name, vi.type)
        for node in graph.node:
            for a in node.attribute:
                if a.type == AttributeProto.GRAPH:
                    collect(a.g)
                elif a.type == AttributeProto.GRAPHS:
                    for sub in a.graphs:
                        collect(sub)

    collect(inferred.graph)
    return out
