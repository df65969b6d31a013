"""``inspect``: what a model contains, read from the protobuf without loading weights."""

from __future__ import annotations

from collections import Counter
from operator import attrgetter
from typing import Any

from onnx import TypeProto, ValueInfoProto

from rewriter.graph.opid import domain_label
from rewriter.graph.schemas import onnx_schemas, onnxruntime_schemas
from rewriter.graph.typeinfer import type_string
from rewriter.graph.walk import iter_scopes, iter_tensor_sites
from rewriter.io.model import LoadedModel, tensor_nbytes, uses_external_data


def _shape(tp: TypeProto) -> list[int | str] | None:
    if tp.WhichOneof("value") != "tensor_type" or not tp.tensor_type.HasField("shape"):
        return None
    dims: list[int | str] = []
    for d in tp.tensor_type.shape.dim:
        if d.HasField("dim_value"):
            dims.append(d.dim_value)
        elif d.HasField("dim_param"):
            dims.append(d.dim_param)
        else:
            dims.append("?")
    return dims


def _value(vi: ValueInfoProto) -> dict[str, Any]:
    return {"name": vi.name, "type": type_string(vi.type) or "?", "shape": _shape(vi.type)}


def inspect_model(loaded: LoadedModel) -> dict[str, Any]:
    """A JSON-ready summary of the model."""
    model = loaded.model
    schemas = onnx_schemas()
    inventory: Counter = Counter()
    subgraph_count = 0
    max_depth = 0
    node_count = 0
    scopes = list(iter_scopes(model))
    by_op = attrgetter("domain", "op_type")
    for scope in scopes:
        if scope.graph is not None and scope.depth > 0:
            subgraph_count += 1
            max_depth = max(max_depth, scope.depth)
        nodes = scope.nodes
        node_count += len(nodes)
        # count per distinct operator first: resolving a schema per node is the slow part
        for (domain, op_type), count in Counter(map(by_op, nodes)).items():
            domain = domain if domain != "ai.onnx" else ""
            opset = scope.opsets.get(domain)
            schema = schemas.resolve(domain, op_type, opset) if opset else None
            if schema is None and opset and domain not in schemas.domains:
                schema = onnxruntime_schemas().resolve(domain, op_type, opset)
            inventory[(domain, op_type, schema.since_version if schema else None)] += count

    local_functions = {(f.domain, f.name) for f in model.functions}
    operators = [
        {
            "domain": domain_label(d),
            "op_type": op,
            "since_version": v,
            "count": n,
            "local_function": (d, op) in local_functions,
        }
        for (d, op, v), n in sorted(
            inventory.items(), key=lambda kv: (-kv[1], kv[0][0], kv[0][1], kv[0][2] or 0)
        )
    ]
    init_count = init_bytes = external_bytes = 0
    for _, tensor in iter_tensor_sites(model, scopes):
        nbytes = tensor_nbytes(tensor) or 0
        init_count += 1
        init_bytes += nbytes
        if uses_external_data(tensor):
            external_bytes += nbytes

    initializer_names = {t.name for t in model.graph.initializer} if model.graph.input else set()
    return {
        "path": str(loaded.path),
        "file_size": loaded.file_size,
        "ir_version": model.ir_version,
        "producer": " ".join(x for x in (model.producer_name, model.producer_version) if x),
        "model_version": model.model_version,
        "opset_imports": {domain_label(o.domain): o.version for o in model.opset_import},
        "inputs": [_value(v) for v in model.graph.input if v.name not in initializer_names],
        "outputs": [_value(v) for v in model.graph.output],
        "nodes": node_count,
        "operators": operators,
        "functions": [
            {
                "domain": f.domain,
                "name": f.name,
                "overload": f.overload,
                "nodes": len(f.node),
                "inputs": list(f.input),
                "outputs": list(f.output),
            }
            for f in model.functions
        ],
        "subgraphs": {"count": subgraph_count, "max_depth": max_depth},
        "tensors": {"count": init_count, "bytes": init_bytes, "external_bytes": external_bytes},
        "external_data": [
            {"location": f.location, "size": f.size, "tensors": f.tensors}
            for f in loaded.external_files.values()
        ],
    }
