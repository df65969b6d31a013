"""Nodes whose input ranks contradict their schema, as onnx's own shape inference sees them.

Such a model is invalid ONNX on every target: ONNX schemas state the ranks they take only in
their inference functions (``Gemm`` takes rank-2 ``A`` and ``B``), so the check runs onnx's
strict shape inference and keeps the errors about ranks. onnxscript's fusions write one: a
``Gemm`` fed by a rank-3 ``MultiHeadAttention`` output whose declared shape (rank 2) is stale;
once the attention is decomposed (and its stale shapes forgotten), the contradiction shows,
and the finding lets a remedy (onnx-standard's ``Gemm`` as ``MatMul``) replace the node.

A contradiction that only a declared shape makes is not the node's: onnxruntime-genai's
builder declares its ``Constant`` shape tensors as scalars (``value_info``), onnx's inference
keeps the declaration, and the ``Concat`` they feed then "mixes ranks 0 and 1", although every
runtime runs it. Such a problem (gone once the graphs' ``value_info`` is forgotten) is a
warning (:func:`shape_warnings`), not a finding.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Container, Mapping, Sequence
from dataclasses import dataclass

from onnx import ModelProto

from rewriter.detect.targets import CONFIRM_MAX_NODES, RUN_BY_DEFAULT_BELOW, Finding

REASON = "input-rank"
# Bigger models are not checked here (strict inference grows with the node count, and the
# model is serialized for it, weights stored in the file included; the verify stage still
# runs it on the result). 20k nodes: 0.34 s on the loaded 2-core machine.
RANK_CHECK_MAX_NODES = CONFIRM_MAX_NODES
RANK_CHECK_MAX_BYTES = RUN_BY_DEFAULT_BELOW

# one error of onnx's "Inference error(s): ..." list: "(op_type:Gemm, node name: n): [...] text"
_ERROR = re.compile(r"\(op_type:([\w.]+)(?:, node name: ([^)]*))?\): \[\w+\] ([^\n]*)")
_ABOUT_RANK = re.compile(r"\brank", re.IGNORECASE)
# an output's declared shape that disagrees with the inferred one: the declaration is wrong
# (stale), not the node; verify's strict inference reports those
_DECLARED = "existing shape"
_NESTED = "Inference error(s):"


_MAX_CLEARING_ROUNDS = 8  # inference runs of without_contradicted_declarations, at most


@dataclass(frozen=True)
class RankProblem:
    """onnx's words about one node whose input ranks contradict its schema."""

    op_type: str
    node_name: str  # "" when onnx did not name it (an unnamed node)
    message: str


@dataclass(frozen=True)
class RankCheck:
    """onnx's strict inference on one model: the rank problems that are the nodes' (findings)
    and those only its declared shapes make (warnings)."""

    problems: tuple[RankProblem, ...] = ()
    declared_only: tuple[RankProblem, ...] = ()
    # (op_type, node name) of the nodes whose declared output shape contradicts the one
    # onnx infers for them
    stale: tuple[tuple[str, str], ...] = ()


_memo: dict[bytes, RankCheck] = {}  # one entry: the last model's digest


def rank_problems(model: ModelProto) -> tuple[RankProblem, ...]:
    """The rank contradictions onnx's strict shape inference reports in ``model`` (subgraphs
    included) that are the nodes' own, not made by a declared shape (see
    :func:`rank_check`)."""
    return rank_check(model).problems


def shape_warnings(model: ModelProto) -> list[str]:
    """One sentence per rank contradiction only the model's declared shapes make (a warning,
    not a finding: the node is valid, its declared input shape is not)."""
    return [f"onnx's shape inference fails on {p.op_type} {p.node_name!r}: {p.message} "
            "(made by a declared shape (value_info) that contradicts the inferred one; "
            "without the declarations the node infers: not a finding)"
            for p in rank_check(model).declared_only]


def rank_check(model: ModelProto) -> RankCheck:
    """onnx's strict shape inference on ``model``: its rank problems, split into the nodes'
    own and those that vanish when every graph's ``value_info`` is dropped (inference run
    again without them, only when a declared shape contradicted an inferred one). Nothing
    for a model above :data:`RANK_CHECK_MAX_NODES` main-graph nodes or
    :data:`RANK_CHECK_MAX_BYTES` bytes in its file. Remembered for the last model seen (each
    target's walk of the same model asks again)."""
    if (len(model.graph.node) > RANK_CHECK_MAX_NODES
            or model.ByteSize() > RANK_CHECK_MAX_BYTES):
        return RankCheck()
    data = model.SerializeToString()
    digest = hashlib.blake2b(data, digest_size=16).digest()
    if digest in _memo:
        return _memo[digest]
    text = _strict_errors(data)
    found = tuple(_parse(text))
    stale = tuple(dict.fromkeys((m.group(1), (m.group(2) or "").strip())
                                for m in _ERROR.finditer(text) if _DECLARED in m.group(3)))
    result = RankCheck(found, stale=stale)
    if found and stale:
        undeclared = ModelProto()
        undeclared.ParseFromString(data)
        _drop_value_info(undeclared)
        remaining = {(p.op_type, p.node_name, p.message)
                     for p in _parse(_strict_errors(undeclared.SerializeToString()))}
        result = RankCheck(
            tuple(p for p in found if (p.op_type, p.node_name, p.message) in remaining),
            tuple(p for p in found if (p.op_type, p.node_name, p.message) not in remaining),
            stale)
    _memo.clear()
    _memo[digest] = result
    return result


def without_contradicted_declarations(model: ModelProto) -> tuple[ModelProto, list[str]]:
    """``model``, or a copy whose declared shapes (``value_info``) onnx's strict inference
    contradicts are cleared (their element types stay), with one sentence for the repair.
    Only standard-domain nodes' outputs are cleared: their schemas' inference is onnx's own
    (a vendor op's may be the one that is wrong). onnxruntime-genai's builder declares its
    rank-1 ``Constant`` shape tensors as scalars; planning that trusts them refuses to
    lower the ``Reshape`` they feed ("shape input must be 1D")."""
    stale = set(rank_check(model).stale)
    if not stale and not forget_contradicted_constant_shapes(model, dry_run=True):
        return model, []
    copy = ModelProto()
    copy.CopyFrom(model)
    cleared = forget_contradicted_constant_shapes(copy)
    cleared += clear_contradicted_declarations(copy)
    if not cleared:
        return model, []
    return copy, [cleared_sentence(cleared)]


def cleared_sentence(cleared: Sequence[str], where: str = "") -> str:
    """The repair's sentence for the declared shapes ``cleared``."""
    shown = ", ".join(repr(n) for n in cleared[:3]) + (
        f" (and {len(cleared) - 3} more)" if len(cleared) > 3 else "")
    return (f"cleared {len(cleared)} declared shape(s) (value_info, or a graph output's, "
            f"then declared as onnx infers it) that onnx's shape inference contradicts"
            f"{where}: {shown}")


def clear_contradicted_declarations(model: ModelProto,
                                    only: Container[str] | None = None) -> list[str]:
    """Clear, in place, the declared shapes of standard-domain nodes' outputs that onnx's
    strict inference contradicts (``only``: of these value names), until it finds no more
    (inference stops at a node it fails on: once its inputs are right, it sees further);
    the names cleared."""
    cleared: list[str] = []
    for _ in range(_MAX_CLEARING_ROUNDS):
        stale = set(rank_check(model).stale)
        if not stale or not _clear_outputs(model, stale, cleared, only):
            break
    _infer_cleared_outputs(model, cleared)
    return cleared


def _infer_cleared_outputs(model: ModelProto, cleared: list[str]) -> None:
    """The main graph's outputs among ``cleared`` given the shape onnx infers for them (a
    graph output must declare a shape below IR version 4)."""
    import onnx

    outputs = [o for o in model.graph.output if o.name in cleared]
    if not outputs:
        return
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:  # noqa: BLE001 - inference is a help here, not a requirement
        return
    shapes = {v.name: v.type.tensor_type.shape
              for v in [*inferred.graph.value_info, *inferred.graph.output]
              if v.type.tensor_type.HasField("shape")}
    for output in outputs:
        if output.name in shapes:
            output.type.tensor_type.shape.CopyFrom(shapes[output.name])


def _clear_outputs(model: ModelProto, nodes: set[tuple[str, str]], cleared: list[str],
                   only: Container[str] | None = None) -> int:
    """Clear the declared shapes of the outputs of standard-domain ``nodes`` (op_type, name)
    in ``model`` (``only``: of these value names), adding their names to ``cleared``; how
    many were cleared."""
    from rewriter.graph.walk import iter_scopes, normalize_domain

    before = len(cleared)
    for scope in iter_scopes(model):
        if scope.graph is None:
            continue
        outputs = {o for node in scope.graph.node if (node.op_type, node.name) in nodes
                   and normalize_domain(node.domain) == "" for o in node.output}
        # a graph's own outputs too: a declaration the computation contradicts (CatBoost
        # declares its regressor's output [N], which its TreeEnsembleRegressor computes as
        # [N, 1], as onnxruntime's kernel returns it)
        for info in [*scope.graph.value_info, *scope.graph.output]:
            if (info.name in outputs and info.type.tensor_type.HasField("shape")
                    and (only is None or info.name in only)):
                info.type.tensor_type.ClearField("shape")
                cleared.append(info.name)
    return len(cleared) - before


def forget_contradicted_constant_shapes(model: ModelProto, dry_run: bool = False) -> list[str]:
    """Clear each declared shape (``value_info``) that contradicts the tensor a ``Constant``
    holds (onnx's strict inference does not report every one); the names cleared
    (``dry_run``: that would be)."""
    from rewriter.graph.walk import iter_scopes

    cleared = []
    for scope in iter_scopes(model):
        if scope.graph is None:
            continue
        held = {node.output[0]: list(a.t.dims) for node in scope.graph.node
                if node.op_type == "Constant" and node.domain in ("", "ai.onnx")
                and len(node.output) == 1 for a in node.attribute if a.name == "value"}
        if not held:
            continue
        for info in scope.graph.value_info:
            dims = held.get(info.name)
            if dims is None or not info.type.tensor_type.HasField("shape"):
                continue
            declared = info.type.tensor_type.shape.dim
            if len(declared) != len(dims) or any(
                    d.HasField("dim_value") and d.dim_value != n for d, n in zip(declared, dims)):
                cleared.append(info.name)
                if not dry_run:
                    info.type.tensor_type.ClearField("shape")
    return cleared


def _strict_errors(data: bytes) -> str:
    """The text of onnx's strict shape inference's error on a serialized model ("": none)."""
    from onnx import shape_inference

    try:
        shape_inference.infer_shapes(data, strict_mode=True)
    except Exception as e:  # noqa: BLE001 - onnx's inference errors are the answer
        return str(e)
    return ""


def _drop_value_info(model: ModelProto) -> None:
    """Forget the declared shapes of every graph's intermediate values (inputs and outputs
    stay: they are the graph's interface)."""
    from rewriter.graph.walk import iter_scopes

    for scope in iter_scopes(model):
        if scope.graph is not None:
            del scope.graph.value_info[:]
        elif scope.function is not None:
            del scope.function.value_info[:]


def _parse(text: str) -> list[RankProblem]:
    out = []
    for m in _ERROR.finditer(text):
        op_type, name, message = m.group(1), (m.group(2) or "").strip(), m.group(3).strip()
        if _NESTED in message or _DECLARED in message or not _ABOUT_RANK.search(message):
            continue  # an If/Loop reporting its body's errors (listed after it), not ranks
        out.append(RankProblem(op_type, name, message))
    return out


def rank_findings(model: ModelProto, target: str, skip: set[str] = frozenset(),
                  types: Mapping[str, str] | None = None, keep_nodes: bool = False,
                  in_main: set[int] | None = None) -> list[Finding]:
    """A finding (reason ``input-rank``) for each node of ``model`` whose input ranks
    contradict its schema (:func:`rank_problems`), except those at paths in ``skip`` (the
    target found them already). ``keep_nodes``: each carries its node, its input types from
    ``types`` (the main graph's) and its scope's opsets, for the rewrite engine; the ids of
    the findings on main-graph nodes are added to ``in_main``. A problem
    whose node cannot be told apart (unnamed, and not the only node of its op) is a finding
    on the model."""
    problems = rank_problems(model)
    if not problems:
        return []
    from rewriter.graph.walk import iter_nodes

    sites = list(iter_nodes(model))
    out = []
    for problem in problems:
        if problem.node_name:
            matches = [s for s in sites if s.node.name == problem.node_name
                       and s.node.op_type == problem.op_type]
        else:
            matches = [s for s in sites if s.node.op_type == problem.op_type]
        detail = f"onnx's shape inference: {problem.message}"
        if len(matches) != 1:
            out.append(Finding(target, "model", "", problem.op_type, None, REASON,
                               f"{problem.op_type} {problem.node_name!r}: {detail}".replace(
                                   " '': ", ": ")))
            continue
        site = matches[0]
        if site.path in skip:
            continue
        node = site.node
        if keep_nodes:
            get = (types or {}).get
            out.append(Finding(target, site.path, site.domain, node.op_type,
                               site.opset_version, REASON, detail, node.name, node,
                               tuple(get(n) if n else None for n in node.input),
                               dict(site.scope.opsets)))
            if in_main is not None and site.scope.graph is model.graph:
                in_main.add(id(out[-1]))
        else:
            out.append(Finding(target, site.path, site.domain, node.op_type,
                               site.opset_version, REASON, detail, node.name))
    return out
