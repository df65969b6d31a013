"""Nodes whose input ranks contradict their schema, as onnx's own shape inference sees them.

Such a model is invalid ONNX on every target: ONNX schemas state the ranks they take only in
their inference functions (``Gemm`` takes rank-2 ``A`` and ``B``), so the check runs onnx's
strict shape inference and keeps the errors about ranks. onnxscript's fusions write one: a
``Gemm`` fed by a rank-3 ``MultiHeadAttention`` output whose declared shape (rank 2) is stale;
once the attention is decomposed (and its stale shapes forgotten), the contradiction shows,
and the finding lets a remedy (onnx-standard's ``Gemm`` as ``MatMul``) replace the node.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
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


@dataclass(frozen=True)
class RankProblem:
    """onnx's words about one node whose input ranks contradict its schema."""

    op_type: str
    node_name: str  # "" when onnx did not name it (an unnamed node)
    message: str


_memo: dict[bytes, tuple[RankProblem, ...]] = {}  # one entry: the last model's digest


def rank_problems(model: ModelProto) -> tuple[RankProblem, ...]:
    """The rank contradictions onnx's strict shape inference reports in ``model`` (subgraphs
    included); none for a model above :data:`RANK_CHECK_MAX_NODES` main-graph nodes or
    :data:`RANK_CHECK_MAX_BYTES` bytes in its file. Remembered for the last model seen (each
    target's walk of the same model asks again)."""
    if (len(model.graph.node) > RANK_CHECK_MAX_NODES
            or model.ByteSize() > RANK_CHECK_MAX_BYTES):
        return ()
    from onnx import shape_inference

    data = model.SerializeToString()
    digest = hashlib.blake2b(data, digest_size=16).digest()
    if digest in _memo:
        return _memo[digest]
    try:
        shape_inference.infer_shapes(data, strict_mode=True)
        found: tuple[RankProblem, ...] = ()
    except Exception as e:  # noqa: BLE001 - onnx's inference errors are the answer
        found = tuple(_parse(str(e)))
    _memo.clear()
    _memo[digest] = found
    return found


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
