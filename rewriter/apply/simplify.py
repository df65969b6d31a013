"""The cleanup stage after a rewrite: the graph tidied with onnxscript's optimizer and onnx-ir's
passes rather than by hand: constants folded (shape computations included, where shapes are
known), ``Constant`` nodes lifted to initializers, dead nodes and unused opset
imports removed, common subexpressions merged. Nodes that remain keep their metadata (the
rewrite's provenance).

It is the rewrite's business only where it is safe to be: a result whose graph interface,
opset imports or set of operators it would change (a rule that introduces an op the targets
were not asked about) is kept as it was, and said so; weights in external data are never
read (folding is left out for such a model); common subexpressions are not merged where a
node may draw random numbers or is not a standard op (its determinism is unknown). The
result is verified like any other change, by the comparison that follows.
"""

from __future__ import annotations

from dataclasses import dataclass

from onnx import ModelProto, TensorProto

from rewriter.graph.walk import iter_scopes, normalize_domain

#: above this many nodes the cleanup is left out (it walks the whole graph in Python)
CLEANUP_MAX_NODES = 10_000
#: a node is folded only when its inputs hold at most this many elements each (1 MiB of
#: float32: shape and index computations of static shapes fold, big weights are left alone)
FOLD_INPUT_LIMIT = 262_144
#: and its outputs at most this many (a folded output becomes an initializer: more than
#: this would trade a few nodes for megabytes of constants, as onnxslim does)
FOLD_OUTPUT_LIMIT = 262_144
_RANDOM_OPS = frozenset({"RandomUniform", "RandomNormal", "RandomUniformLike",
                         "RandomNormalLike", "Bernoulli", "Multinomial", "Dropout"})
#: domains whose ops are pure functions of their inputs (the random ones excepted)
_DETERMINISTIC_DOMAINS = frozenset({"", "ai.onnx.ml", "com.microsoft"})


@dataclass
class Cleanup:
    """What the cleanup did to a result."""

    nodes_before: int
    nodes_after: int
    done: bool  # the cleaned model replaced the result
    note: str  # one sentence for the report

    def __str__(self) -> str:
        return self.note


def _nodes(model: ModelProto) -> int:
    return sum(len(scope.nodes) for scope in iter_scopes(model))


def _ops(model: ModelProto) -> set[tuple[str, str]]:
    return {(normalize_domain(n.domain), n.op_type)
            for scope in iter_scopes(model) for n in scope.nodes}


def _interface(model: ModelProto) -> tuple:
    g = model.graph
    return (tuple(v.SerializeToString() for v in g.input),
            tuple(v.name for v in g.output),
            tuple(v.type.tensor_type.elem_type if v.type.HasField("tensor_type") else None
                  for v in g.output),
            tuple(sorted((normalize_domain(o.domain), o.version) for o in model.opset_import)))


def _has_external_data(model: ModelProto) -> bool:
    return any(t.data_location == TensorProto.EXTERNAL
               for scope in iter_scopes(model) if scope.graph is not None
               for t in scope.graph.initializer)


def _may_merge_subexpressions(model: ModelProto) -> bool:
    """Whether two alike nodes may become one: every op is known to compute the same
    outputs from the same inputs (standard, ai.onnx.ml and onnxruntime's contrib ops, none
    drawing random numbers); a custom op may keep state or draw."""
    return all(normalize_domain(n.domain) in _DETERMINISTIC_DOMAINS
               and n.op_type not in _RANDOM_OPS
               and not any(word in n.op_type for word in ("Random", "Dropout"))
               for scope in iter_scopes(model) for n in scope.nodes)


def simplify(model: ModelProto) -> tuple[ModelProto, Cleanup]:
    """``model`` cleaned (a new ModelProto; ``model`` is not changed), or ``model`` itself
    when the cleanup is left out or would change what it must not, with what was done."""
    import onnx_ir as ir
    from onnx_ir.passes import common
    from onnxscript.optimizer import _constant_folding
    from onnxscript.rewriter import _DEFAULT_REWRITE_RULES, RewritePass

    before = _nodes(model)
    if before > CLEANUP_MAX_NODES:
        return model, Cleanup(before, before, False, f"left out: {before:,} nodes, above "
                              f"{CLEANUP_MAX_NODES:,} (--no-cleanup turns it off)")
    fold = not _has_external_data(model)
    steps: list = []
    if fold:
        steps.append(_constant_folding.FoldConstantsPass(
            shape_inference=True, input_size_limit=FOLD_INPUT_LIMIT,
            output_size_limit=FOLD_OUTPUT_LIMIT))
    # (functions are left to the engine's own cleanup: one the model had without using it
    # is not the rewrite's business)
    steps += [RewritePass(_DEFAULT_REWRITE_RULES), common.RemoveUnusedNodesPass(),
              common.RemoveUnusedOpsetsPass()]
    passes = [ir.passes.PassManager(steps, steps=2, early_stop=True),
              common.RemoveUnusedNodesPass()]
    if model.ir_version >= 4:  # before IR 4 an initializer must also be a graph input
        passes.append(common.LiftConstantsToInitializersPass(lift_all_constants=True,
                                                             size_limit=0))
    if _may_merge_subexpressions(model):
        passes.append(common.CommonSubexpressionEliminationPass())
    passes.append(common.RemoveUnusedNodesPass())
    # folded on the shapes inference gives from the inputs, not on the intermediate ones the
    # model declares (a producer's may be stale or specialised: a folded Shape would keep it)
    declared = list(model.graph.value_info)
    del model.graph.value_info[:]
    interface = [(v, _copy(v)) for v in (*model.graph.input, *model.graph.output)]
    _unique_symbols(model)
    try:
        work = ir.from_proto(model)
        ir.passes.Sequential(*passes)(work)
        cleaned = ir.to_proto(work)
    except Exception as e:  # noqa: BLE001 - a library refusing the model leaves it as it is
        line = (str(e).strip().splitlines() or [type(e).__name__])[0][:160]
        return model, Cleanup(before, before, False, f"left out: the optimizer stopped "
                              f"({type(e).__name__}: {line})")
    finally:
        model.graph.value_info.extend(declared)
        for value, kept in interface:
            value.CopyFrom(kept)
    _keep_declarations(cleaned, declared)
    if [v.name for v in cleaned.graph.input] == [v.name for v in model.graph.input] and \
            [v.name for v in cleaned.graph.output] == [v.name for v in model.graph.output]:
        for values, originals in ((cleaned.graph.input, model.graph.input),
                                  (cleaned.graph.output, model.graph.output)):
            for value, original in zip(values, originals):
                value.CopyFrom(original)
    after = _nodes(cleaned)
    if _interface(cleaned)[:3] != _interface(model)[:3]:
        return model, Cleanup(before, before, False, "left out: it would change the "
                              "model's inputs or outputs")
    _castlikes_kept(cleaned, model)
    new_ops = _ops(cleaned) - _ops(model)
    if new_ops:
        listed = ", ".join(f"{d or 'ai.onnx'}::{op}" for d, op in sorted(new_ops))
        return model, Cleanup(before, before, False, f"left out: it would bring in {listed}, "
                              "which the targets were not asked about")
    _outputs_kept_apart(cleaned, model)  # (after the op check: its Identity is no new op)
    _keep_imports(cleaned, model)
    broken = _checker_problem(cleaned)
    if broken and not _checker_problem(model):
        return model, Cleanup(before, before, False, f"left out: onnx's checker refuses the "
                              f"cleaned graph ({broken})")
    if after >= before and len(cleaned.graph.initializer) == len(model.graph.initializer):
        return model, Cleanup(before, before, False, "nothing to clean up")
    folded = "constants folded" if fold else "constants not folded (external weights unread)"
    return cleaned, Cleanup(before, after, True, f"{before:,} → {after:,} nodes: {folded}, "
                            "dead and duplicate nodes removed")


def _copy(value):
    out = type(value)()
    out.CopyFrom(value)
    return out


def _unique_symbols(model: ModelProto) -> None:
    """Every symbolic dim of the graph's inputs and outputs under a name of its own: a model
    may name two dims alike that its users feed differently (onnxruntime's beam-search
    models call the batch of sequences and the batch of beams both ``batch_size``), and the
    optimizer would fold arithmetic on them as if they were equal."""
    for i, value in enumerate((*model.graph.input, *model.graph.output)):
        if value.type.HasField("tensor_type") and value.type.tensor_type.HasField("shape"):
            for j, dim in enumerate(value.type.tensor_type.shape.dim):
                if not dim.HasField("dim_value"):
                    dim.dim_param = f"cleanup_{i}_{j}"


def _outputs_kept_apart(cleaned: ModelProto, model: ModelProto) -> None:
    """A graph output that the model's nodes did not read, and that the cleanup made a value
    read inside the graph (an Identity before it folded away), gets its Identity back: its
    declared shape is the producer's word for the output alone, and a runtime would apply it
    to the values computed from it (onnxruntime merges shape computations by symbolic dims)."""
    from onnx import helper

    def readers(graph) -> set[str]:
        return {name for node in graph.node for name in node.input}

    read_before, read_now = readers(model.graph), readers(cleaned.graph)
    taken = {o for n in cleaned.graph.node for o in n.output} | \
        {v.name for v in (*cleaned.graph.input, *cleaned.graph.initializer)}
    for output in cleaned.graph.output:
        name = output.name
        if name in read_before or name not in read_now:
            continue
        inner, k = f"{name}/kept", 0
        while inner in taken:
            k, inner = k + 1, f"{name}/kept_{k + 1}"
        taken.add(inner)
        for node in cleaned.graph.node:
            for names in (node.input, node.output):
                for i, value in enumerate(names):
                    if value == name:
                        names[i] = inner
        cleaned.graph.node.append(helper.make_node("Identity", [inner], [name],
                                                   name=f"{name}/Identity_kept"))


def _castlikes_kept(cleaned: ModelProto, model: ModelProto) -> None:
    """A main-graph ``CastLike`` the rewrite wrote stays one: onnxscript's constant folding
    turns it into the ``Cast`` it stands for, which tract 0.23 types otherwise (its ``Cast``
    to int64 gives a shape, ``TDim``, its API cannot hand out; the ``onnx-standard`` plugin
    writes a ``CastLike`` for it)."""
    from onnx import helper

    wrote = {n.output[0] for n in model.graph.node if n.op_type == "CastLike" and n.output
             and n.domain in ("", "ai.onnx")}
    if not wrote:
        return
    nodes = []
    for node in cleaned.graph.node:
        if node.op_type == "Cast" and node.output and node.output[0] in wrote:
            to = next(a.i for a in node.attribute if a.name == "to")
            like = f"{node.output[0]}/like"
            nodes.append(helper.make_node("Constant", [], [like],
                                          value=helper.make_tensor("like", to, [0], [])))
            kept = helper.make_node("CastLike", [node.input[0], like], list(node.output),
                                    name=node.name)
            kept.attribute.extend(a for a in node.attribute if a.name == "saturate")
            nodes.append(kept)
        else:
            nodes.append(node)
    del cleaned.graph.node[:]
    cleaned.graph.node.extend(nodes)


def _keep_declarations(cleaned: ModelProto, declared) -> None:
    """The result declares what the model declared, for the values that remain, and nothing
    more: the optimizer's inferred shapes (symbolic dims it names itself) are not written
    into the model, where a runtime would read them as the producer's word."""
    for scope in iter_scopes(cleaned):
        if scope.graph is not None:
            del scope.graph.value_info[:]
    remaining = {o for n in cleaned.graph.node for o in n.output}
    cleaned.graph.value_info.extend(v for v in declared if v.name in remaining)


def _checker_problem(model: ModelProto) -> str:
    """onnx's (basic) checker on ``model``: its first line, or "" when it passes."""
    import onnx

    try:
        onnx.checker.check_model(model)
    except Exception as e:  # noqa: BLE001 - the checker's refusal is the answer
        return (str(e).strip().splitlines() or [type(e).__name__])[0][:160]
    return ""


def _keep_imports(cleaned: ModelProto, model: ModelProto) -> None:
    """The result's model-level facts as they were (IR version, opset imports, metadata):
    the cleanup tidies the graph only."""
    cleaned.ir_version = model.ir_version
    del cleaned.opset_import[:]
    cleaned.opset_import.extend(model.opset_import)
    del cleaned.metadata_props[:]
    cleaned.metadata_props.extend(model.metadata_props)
    cleaned.producer_name, cleaned.producer_version = model.producer_name, model.producer_version
