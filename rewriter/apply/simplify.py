"""The cleanup stage after a rewrite: the graph tidied with onnxscript's optimizer and onnx-ir's
passes rather than by hand: constants folded (shape computations included, where shapes are
known), ``Constant`` nodes lifted to initializers, dead nodes, unused functions and opset
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
#: a node is folded only when its inputs hold at most this many elements each
FOLD_INPUT_LIMIT = 8_192
#: and its outputs at most this many (a folded output becomes an initializer)
FOLD_OUTPUT_LIMIT = 65_536
_RANDOM_OPS = frozenset({"RandomUniform", "RandomNormal", "RandomUniformLike",
                         "RandomNormalLike", "Bernoulli", "Multinomial", "Dropout"})


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
    return all(normalize_domain(n.domain) == "" and n.op_type not in _RANDOM_OPS
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
    steps += [RewritePass(_DEFAULT_REWRITE_RULES), common.RemoveUnusedNodesPass(),
              common.RemoveUnusedFunctionsPass(), common.RemoveUnusedOpsetsPass()]
    passes = [ir.passes.PassManager(steps, steps=2, early_stop=True),
              common.RemoveUnusedNodesPass()]
    if model.ir_version >= 4:  # (IR 3 lists every initializer among the graph's inputs:
        # CatBoost's exports; a lifted constant would fail onnx's checker there)
        passes.append(common.LiftConstantsToInitializersPass(lift_all_constants=True,
                                                             size_limit=0))
    if _may_merge_subexpressions(model):
        passes.append(common.CommonSubexpressionEliminationPass())
    passes.append(common.RemoveUnusedNodesPass())
    try:
        work = ir.from_proto(model)
        ir.passes.Sequential(*passes)(work)
        cleaned = ir.to_proto(work)
    except Exception as e:  # noqa: BLE001 - a library refusing the model leaves it as it is
        line = (str(e).strip().splitlines() or [type(e).__name__])[0][:160]
        return model, Cleanup(before, before, False, f"left out: the optimizer stopped "
                              f"({type(e).__name__}: {line})")
    after = _nodes(cleaned)
    if _interface(cleaned)[:3] != _interface(model)[:3]:
        return model, Cleanup(before, before, False, "left out: it would change the "
                              "model's inputs or outputs")
    new_ops = _ops(cleaned) - _ops(model)
    if new_ops:
        listed = ", ".join(f"{d or 'ai.onnx'}::{op}" for d, op in sorted(new_ops))
        return model, Cleanup(before, before, False, f"left out: it would bring in {listed}, "
                              "which the targets were not asked about")
    _keep_imports(cleaned, model)
    if after >= before and len(cleaned.graph.initializer) == len(model.graph.initializer):
        return model, Cleanup(before, before, False, "nothing to clean up")
    folded = "constants folded" if fold else "constants not folded (external weights unread)"
    return cleaned, Cleanup(before, after, True, f"{before:,} → {after:,} nodes: {folded}, "
                            "dead and duplicate nodes removed")


def _keep_imports(cleaned: ModelProto, model: ModelProto) -> None:
    """The result's model-level facts as they were (IR version, opset imports, metadata):
    the cleanup tidies the graph only."""
    cleaned.ir_version = model.ir_version
    del cleaned.opset_import[:]
    cleaned.opset_import.extend(model.opset_import)
    del cleaned.metadata_props[:]
    cleaned.metadata_props.extend(model.metadata_props)
    cleaned.producer_name, cleaned.producer_version = model.producer_name, model.producer_version
    # the main graph's value types as the result declared them, not those the folding's
    # shape inference wrote for every value: a symbolic batch on intermediate values
    # ("float[N,3]") makes tract refuse the model once a caller sets concrete input shapes
    # ("Impossible to unify Sym(N) with Val(3)", tract.onnx().load(...).set_input_fact)
    declared = {v.name: v for v in model.graph.value_info}
    kept = [declared[v.name] for v in cleaned.graph.value_info if v.name in declared]
    del cleaned.graph.value_info[:]
    cleaned.graph.value_info.extend(kept)
