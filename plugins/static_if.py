"""Pass ``static-if``: an ``If`` of the main graph whose condition is known before the model
runs is replaced by the branch it takes.

ONNX function bodies choose between forms with an ``If`` on something static: AffineGrid's
body asks whether ``size`` has 4 elements (2-D) or 5 (3-D). A runtime that converts both
branches and checks their shapes (OpenVINO's ONNX frontend: "Shapes [2,3,4] and [?,2,3] are
not consistent") refuses the branch that is never taken. When a finding lies in such an
``If`` (the node itself or a node of its branches), this pass computes the condition from
what is known without inputs: constants and initializers, ``Shape``/``Size`` of values whose
shape is static (onnx's shape inference), and a few deterministic ops over those (evaluated by
the ONNX reference evaluator, on at most ``LIMIT`` elements each); the ``If`` is then
replaced by the nodes of the branch taken, its outputs by ``Identity`` of the branch's; a
value of the branch whose name the main graph has already (two decompositions of the same op
make the same names inside their Ifs) is renamed as it is spliced in.
"""

from __future__ import annotations

from operator import attrgetter

from rewriter.plugin import (
    Finding,
    PassContext,
    RewritePass,
    hookimpl,
    main_node_index,
    rename_reads,
)

LIMIT = 1024  # elements of a value computed ahead of the run
MAX_NESTING = 16  # Ifs in taken branches folded in turn, at most this deep
# ops computed ahead of the run when all their inputs are known (no subgraphs, no randomness)
FOLDABLE = frozenset({
    "Abs", "Add", "And", "Cast", "CastLike", "Concat", "Div", "Equal", "Gather", "Greater",
    "GreaterOrEqual", "Identity", "Less", "LessOrEqual", "Max", "Min", "Mul", "Neg", "Not",
    "Or", "ReduceProd", "ReduceSum", "Reshape", "Slice", "Squeeze", "Sub", "Unsqueeze", "Xor",
})
_DEFAULT = ("", "ai.onnx")
# findings the opset conversion remedies inside the branches as they are: folding the If
# for them would expose shapes it hides (AffineGrid's body feeds a [1]-shaped branch output
# to Range, which onnxruntime's shape inference refuses once the shape is static)
VERSION_REASONS = frozenset({"opset-too-new", "ir-too-new"})


def _static_shapes(model) -> dict[str, list[int]]:
    """Value name -> its shape, for the values onnx's shape inference gives a static one."""
    from onnx import shape_inference

    try:
        inferred = shape_inference.infer_shapes(model)
    except Exception:  # noqa: BLE001 - shapes are a help: without them fewer Ifs fold
        inferred = model
    graph = inferred.graph
    out = {}
    for value in (*graph.input, *graph.value_info, *graph.output):
        tensor = value.type.tensor_type
        if (value.type.HasField("tensor_type") and tensor.HasField("shape")
                and all(d.HasField("dim_value") for d in tensor.shape.dim)):
            out[value.name] = [d.dim_value for d in tensor.shape.dim]
    return out


def _evaluate(node, values: dict, opsets) -> list | None:
    """The outputs of ``node`` on known ``values`` (reference evaluator), or None."""
    import numpy as np
    from onnx import TypeProto, helper
    from onnx.reference import ReferenceEvaluator

    names = list(dict.fromkeys(i for i in node.input if i))
    try:
        inputs = [helper.make_tensor_value_info(
            n, helper.np_dtype_to_tensor_dtype(values[n].dtype), values[n].shape) for n in names]
        outputs = [helper.make_value_info(o, TypeProto()) for o in node.output]
        model = helper.make_model(helper.make_graph([node], "ahead", inputs, outputs),
                                  opset_imports=opsets)
        results = ReferenceEvaluator(model).run(None, {n: values[n] for n in names})
    except Exception:  # noqa: BLE001 - not computable ahead: the If stays
        return None
    return [np.asarray(r) for r in results]


_OP_TYPE, _OUTPUTS = attrgetter("op_type"), attrgetter("output")


def known_conditions(model) -> dict[int, bool]:
    """Index of each main-graph ``If`` whose condition is known before the run -> its value."""
    import numpy as np
    from onnx import AttributeProto, numpy_helper

    graph = model.graph
    nodes = graph.node
    ifs = [i for i, op in enumerate(map(_OP_TYPE, nodes))  # op types read C-level
           if op == "If" and nodes[i].domain in _DEFAULT]
    if not ifs:
        return {}
    if {nodes[i].input[0] for i in ifs} <= {v.name for v in graph.input}:
        return {}  # every condition is fed by the caller: none known before the run
    # main-graph node index by output name (indices: no node object kept per output)
    producer = {o: i for i, outputs in enumerate(map(_OUTPUTS, nodes)) for o in outputs}
    producer.pop("", None)
    # the nodes the conditions depend on, visited in graph order below
    wanted, stack = set(), [nodes[i].input[0] for i in ifs]
    while stack:
        name = stack.pop()
        index = producer.get(name)
        if index is None or index in wanted:
            continue
        wanted.add(index)
        node = nodes[index]
        if node.op_type not in ("Shape", "Size"):
            stack.extend(i for i in node.input if i)
    initializers = {t.name: t for t in graph.initializer}
    values: dict = {}
    shapes = None
    opsets = list(model.opset_import)
    subgraphs = (AttributeProto.GRAPH, AttributeProto.GRAPHS)
    for index in sorted(wanted):
        node = nodes[index]
        if node.domain not in _DEFAULT:
            continue
        for name in node.input:
            tensor = initializers.get(name)
            if name and name not in values and tensor is not None and not tensor.external_data \
                    and int(np.prod(tensor.dims)) <= LIMIT:
                values[name] = numpy_helper.to_array(tensor)
        if node.op_type in ("Shape", "Size") and not node.attribute:
            if shapes is None:
                shapes = _static_shapes(model)
            shape = shapes.get(node.input[0])
            if shape is not None:
                values[node.output[0]] = (np.array(shape, np.int64) if node.op_type == "Shape"
                                          else np.array(int(np.prod(shape)), np.int64))
            continue
        if node.op_type != "Constant" and (node.op_type not in FOLDABLE or not all(
                i in values for i in node.input if i)):
            continue
        if any(a.type in subgraphs for a in node.attribute):
            continue
        results = _evaluate(node, values, opsets)
        for name, value in zip(node.output, results or []):
            if name and value.size <= LIMIT:
                values[name] = value
    out = {}
    for i in ifs:
        value = values.get(graph.node[i].input[0])
        if value is not None and value.size == 1:
            out[i] = bool(value.reshape(-1)[0])
    return out


def _branch(node, taken: bool):
    wanted = "then_branch" if taken else "else_branch"
    return next(a.g for a in node.attribute if a.name == wanted)


def _main_names(graph) -> set[str]:
    return ({o for n in graph.node for o in n.output} | {i.name for i in graph.input}
            | {t.name for t in graph.initializer})


def _spliced(branch, taken_names: set[str], prefix: str):
    """A copy of ``branch`` whose values (node outputs, initializers) that clash with
    ``taken_names`` are renamed ``prefix/name`` (unique), with every read of them."""
    from onnx import GraphProto

    out = GraphProto()
    out.CopyFrom(branch)
    inner = {o for n in out.node for o in n.output if o} | {t.name for t in out.initializer}
    clashing = sorted(inner & taken_names)
    if not clashing:
        return out
    used = taken_names | inner
    renames = {}
    for name in clashing:
        new, k = f"{prefix}/{name}", 1
        while new in used:
            new, k = f"{prefix}/{name}_{k}", k + 1
        used.add(new)
        renames[name] = new
    for t in out.initializer:
        t.name = renames.get(t.name, t.name)
    rename_reads(out.node, renames)
    for node in out.node:
        node.output[:] = [renames.get(o, o) for o in node.output]
    for o in out.output:
        o.name = renames.get(o.name, o.name)
    return out


class StaticIfPass(RewritePass):
    """Replaces an ``If`` whose condition is known before the run by its branch."""

    phase = "legalize"

    def __init__(self) -> None:
        self._model = None
        self._known: dict[int, bool] | None = None

    def prepare(self, model, ctx: PassContext) -> None:
        self._model, self._known = model, None  # computed when a finding in an If is asked

    def _if_of(self, finding: Finding) -> int | None:
        """The index of the main-graph If that ``finding`` lies in (or is), if it is one whose
        condition is known before the run."""
        index = main_node_index(finding.path)
        model = self._model
        if index is None or model is None:
            return None
        nodes = model.graph.node
        if index >= len(nodes) or nodes[index].op_type != "If":
            return None
        return index if index in self._known_ifs() else None

    def _known_ifs(self) -> dict[int, bool]:
        """Main-graph If index -> the branch it takes, for the Ifs this pass replaces
        (computed once per model)."""
        if self._known is None:
            model = self._model
            self._known = {} if model is None else known_conditions(model)
        return self._known

    def handles(self, finding: Finding, ctx: PassContext) -> bool:
        return finding.reason not in VERSION_REASONS and self._if_of(finding) is not None

    def offers_for_op(self, finding: Finding, ctx: PassContext) -> bool:
        # the answer reads the finding's path only when some If's condition is known
        return finding.reason in VERSION_REASONS or not self._known_ifs()

    def offers(self, finding: Finding, ctx: PassContext) -> tuple[bool, str]:
        if finding.reason in VERSION_REASONS:
            return False, "an op version above a ceiling: the opset conversion lowers branches"
        index = self._if_of(finding)
        if index is None:
            return False, "not in an If whose condition is known before the run"
        branch = "then" if self._known[index] else "else"
        return True, (f"the If at graph/node {index} always takes its {branch} branch (its "
                      "condition is computed from constants and static shapes): the branch "
                      "replaces it")

    def run(self, model, ctx: PassContext):
        # a branch taken may hold an If of its own (an op's body choosing by rank, then by
        # size): once spliced into the main graph, its condition may be known in turn
        changed = False
        for _ in range(MAX_NESTING):
            if not self._splice_known(model, ctx):
                break
            changed = True
        return model if changed else None

    def _splice_known(self, model, ctx: PassContext) -> bool:
        """Every main-graph If whose condition is known replaced by its branch; whether
        one was."""
        from onnx import helper

        known = known_conditions(model)
        if not known:
            return False
        graph = model.graph
        names = _main_names(graph)
        nodes = []
        for i, node in enumerate(graph.node):
            if i not in known:
                nodes.append(node)
                continue
            # the branch's values keep their names unless the graph has them already
            branch = _spliced(_branch(node, known[i]), names - set(node.output),
                              node.name or f"If_{i}")
            names |= {o for n in branch.node for o in n.output if o} | {
                t.name for t in branch.initializer}
            nodes.extend(branch.node)
            graph.initializer.extend(branch.initializer)
            for source, target in zip(branch.output, node.output):
                if target:
                    nodes.append(helper.make_node("Identity", [source.name], [target],
                                                  name=f"{node.name or 'If'}/{target}"))
            ctx.record("conversion", self.plugin, "static If",
                       f"ai.onnx::If ({'then' if known[i] else 'else'} branch)")
        del graph.node[:]
        graph.node.extend(nodes)
        return True


@hookimpl
def register_passes(registry):
    registry.add("static-if", StaticIfPass, phase="legalize")
