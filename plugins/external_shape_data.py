"""Pass ``external-shape-data``: store inline the small tensors shape inference reads as values.

onnx's shape inference reads some inputs' values (Reshape's shape, Slice's starts, a Reduce's
axes, ...: :data:`SHAPE_DATA_INPUTS`) and cannot read them from external data ("Cannot parse
data from external tensors. Please load external data into raw data for tensor: NAME"), and
onnxruntime, which runs that inference when it loads a model, refuses such a model. Exporters
that save every tensor externally (``size_threshold=0``) make such models. The onnxruntime
target reports each node whose value-read input is an external initializer
(``external-shape-data``); this pass reads exactly those tensors from the model's folder (no
other file: the location must stay inside it) and stores them inline. Every other tensor stays
external and untouched. A model given in memory has no folder: the pass declines.

The table is onnx's: every ``getInputData`` whose tensor reaches ``ParseData`` in the
operator definitions (``onnx/defs/**``), ai.onnx domain.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from operator import attrgetter

from rewriter.plugin import Finding, PassContext, RewritePass, hookimpl, opset_map

REASON = "external-shape-data"
NAME = "external-shape-data"

_REDUCE_18 = ("ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceMax",
              "ReduceMean", "ReduceMin", "ReduceProd", "ReduceSumSquare")
_WINDOWS = ("BlackmanWindow", "HammingWindow", "HannWindow")

# ai.onnx op -> ((from since-version, input indices whose values shape inference reads), ...),
# ascending: the last entry whose version is at most the node's schema version applies.
SHAPE_DATA_INPUTS: dict[str, tuple[tuple[int, tuple[int, ...]], ...]] = {
    "AffineGrid": ((20, (1,)),),
    "CenterCropPad": ((18, (1,)),),
    "Col2Im": ((18, (1, 2)),),
    "ConstantOfShape": ((9, (0,)),),
    "DFT": ((17, (1,)), (20, (1, 2))),
    "Expand": ((8, (1,)),),
    "MelWeightMatrix": ((17, (0, 1)),),
    "OneHot": ((9, (0, 1)), (11, (1,))),
    "Pad": ((11, (1,)), (18, (1, 3))),
    "Range": ((11, (0, 1, 2)),),
    "ReduceSum": ((13, (1,)),),
    "Reshape": ((5, (1,)),),
    "Resize": ((10, (1,)), (11, (2, 3))),
    "STFT": ((17, (1, 3)),),
    "Slice": ((10, (1, 2, 3, 4)),),
    "Split": ((13, (1,)),),
    "SplitToSequence": ((11, (1,)),),
    "Squeeze": ((13, (1,)),),
    "Tile": ((6, (1,)),),
    "TopK": ((10, (1,)),),
    "Unsqueeze": ((13, (1,)),),
    "Upsample": ((9, (1,)),),
    **{op: ((18, (1,)),) for op in _REDUCE_18},
    **{op: ((17, (0,)),) for op in _WINDOWS},
}


def shape_data_inputs(op_type: str, version: int) -> tuple[int, ...]:
    """The input indices of an ai.onnx ``op_type`` (schema ``version``) whose values onnx's
    shape inference reads."""
    chosen: tuple[int, ...] = ()
    for since, indices in SHAPE_DATA_INPUTS.get(op_type, ()):
        if since <= version:
            chosen = indices
    return chosen


_CONTROL_FLOW = frozenset({"If", "Loop", "Scan", "SequenceMap"})  # ops with subgraphs
_WATCHED = frozenset(SHAPE_DATA_INPUTS).union(_CONTROL_FLOW)
_OP_TYPE, _NAME = attrgetter("op_type"), attrgetter("name")
_EXTERNAL, _GRAPH = 1, 5  # TensorProto.EXTERNAL, AttributeProto.GRAPH


def external_shape_reads(model, since_version) -> Iterator[tuple[str, object, object, int]]:
    """(node path, node, external initializer, schema version) for each value-read input of
    an ai.onnx node that is an external initializer of its graph or an enclosing one, in the
    main graph and the If/Loop/Scan/SequenceMap bodies. ``since_version(op_type, opset)``
    resolves the node's schema version (None: unknown). Per graph, one C-level read of the
    op types, and of the initializer names only when some node reads a value."""
    opset = opset_map(model.opset_import).get("")
    if opset:
        yield from _graph_reads(model.graph, "graph", opset, (), since_version)


class _Initializers:
    """A graph's initializers by name, indexed when first asked."""

    def __init__(self, graph) -> None:
        self.tensors = graph.initializer
        self.index: dict[str, int] | None = None

    def get(self, name: str):
        if self.index is None:
            self.index = {n: j for j, n in enumerate(map(_NAME, self.tensors))}
        j = self.index.get(name)
        return None if j is None else self.tensors[j]


def _graph_reads(graph, path, opset, outer: tuple, since_version):
    """``outer``: the enclosing graphs' :class:`_Initializers`, innermost first."""
    nodes = graph.node
    ops = list(map(_OP_TYPE, nodes))
    if _WATCHED.isdisjoint(ops):
        return
    picked = [i for i, op in enumerate(ops) if op in _WATCHED]
    reads = []  # (node index, input name, schema version)
    flow = []
    per_op: dict[str, tuple[int, tuple[int, ...]]] = {}  # op -> (version, indices read)
    for i in picked:
        op = ops[i]
        if op in _CONTROL_FLOW:
            flow.append(i)
            continue
        known = per_op.get(op)
        if known is None:
            version = since_version(op, opset) or 0
            known = per_op[op] = (version, shape_data_inputs(op, version))
        inputs = nodes[i].input
        reads += [(i, inputs[k], known[0]) for k in known[1] if k < len(inputs) and inputs[k]]
    scopes = ((_Initializers(graph),) if len(graph.initializer) else ()) + outer
    if not scopes:
        return
    for i, name, version in reads:
        for scope in scopes:
            tensor = scope.get(name)
            if tensor is not None:
                break
        node = nodes[i]
        if (tensor is not None and tensor.data_location == _EXTERNAL
                and node.domain in ("", "ai.onnx")):
            yield f"{path}/node {i} ({node.name or node.op_type})", node, tensor, version
    for i in flow:
        node = nodes[i]
        for attr in node.attribute:
            bodies = [(attr.name, attr.g)] if attr.type == _GRAPH else [
                (f"{attr.name}[{k}]", g) for k, g in enumerate(attr.graphs)]
            for label, body in bodies:
                yield from _graph_reads(
                    body, f"{path}/node {i} ({node.name or node.op_type})/{label}", opset,
                    scopes, since_version)


def _inside(base_dir: str, location: str) -> str | None:
    """Why ``location`` may not be read from ``base_dir`` (None: it may)."""
    if not location or os.path.isabs(location) or ".." in location.replace("\\", "/").split("/"):
        return f"location {location!r} is not a relative path inside the model's folder"
    full = os.path.join(base_dir, location)
    if os.path.islink(full):
        return f"{location!r} is a symlink"
    base = os.path.realpath(base_dir)
    if os.path.commonpath([os.path.realpath(full), base]) != base:
        return f"{location!r} resolves outside the model's folder"
    if not os.path.isfile(full):
        return f"{location!r} is not a regular file in the model's folder"
    return None


class ExternalShapeDataPass(RewritePass):
    phase = "legalize"

    def handles(self, finding: Finding, ctx: PassContext) -> bool:
        return finding.reason == REASON

    def offers_for_op(self, finding: Finding, ctx: PassContext) -> bool:
        return True  # the reason and the run's base_dir decide

    def offers(self, finding: Finding, ctx: PassContext) -> tuple[bool, str]:
        if finding.reason != REASON:
            return False, "stores inline only the tensors shape inference reads"
        if not ctx.options.get("base_dir"):
            return False, ("the model was given in memory: no folder to read its external "
                           "data from (load it from its file)")
        return True, "reads the tensor from the model's external data and stores it inline"

    def run(self, model, ctx: PassContext):
        base_dir = ctx.options.get("base_dir")
        if not base_dir:
            return None
        from onnx.external_data_helper import load_external_data_for_tensor

        from rewriter.plugin import onnx_schemas

        schemas = onnx_schemas()

        def since(op_type: str, opset: int) -> int | None:
            schema = schemas.resolve("", op_type, opset)
            return schema.since_version if schema is not None else None

        base = os.fspath(base_dir)
        done: set[int] = set()
        for _path, node, tensor, _version in list(external_shape_reads(model, since)):
            if id(tensor) in done:
                continue
            location = next((e.value for e in tensor.external_data if e.key == "location"), "")
            problem = _inside(base, location)
            if problem:
                raise ValueError(f"external data of {tensor.name!r} (read by {node.op_type} "
                                 f"{node.name!r}): {problem}")
            load_external_data_for_tensor(tensor, base)
            done.add(id(tensor))
            ctx.record("conversion", self.plugin, "inline shape data", f"ai.onnx::{node.op_type}")
        return model if done else None


@hookimpl
def register_passes(registry):
    registry.add(NAME, ExternalShapeDataPass, phase="legalize")
