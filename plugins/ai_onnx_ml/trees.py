"""Tree ensembles of ai.onnx.ml, as onnxruntime's tree kernels (``tree_ensemble_common.h``,
``tree_ensemble_aggregator.h``) compute them.

* ``TreeEnsembleRegressor(X) -> Y`` and ``TreeEnsembleClassifier(X) -> (label, scores)``
  (ml opsets 1 and 3; 3 adds the ``*_as_tensor`` double attributes), ``TreeEnsemble(X) ->
  Y`` (ml opset 5: nodes and leaves in separate arrays, set membership). ``X`` is read as
  rows (a 1-D ``X`` is one row). Each tree is walked from its root (the first node listed of
  each tree): a node goes to its true child where ``x[feature] MODE threshold`` holds, or
  where ``x`` is NaN and ``missing_value_tracks_true`` is set; modes ``BRANCH_LEQ``, ``LT``,
  ``GTE``, ``GT``, ``EQ``, ``NEQ`` and set membership (NaN compares false except for NEQ).
  Thresholds are compared in the kernel's precision: float32 for a float or integer ``X``
  (integers converted to float32), double for a double ``X`` (a float threshold widened),
  double for the ``*_as_tensor`` double thresholds (onnxruntime refuses those with a float
  ``X``), ``X``'s type for ``TreeEnsemble``.
* The leaves' weights are aggregated per target (``SUM``, ``AVERAGE``, ``MIN``, ``MAX``; the
  classifier sums): sums in the thresholds' precision, a leaf of a one-target regressor
  contributing its first weight only. Then ``base_values`` (one per target, or one value
  for a single target), then ``post_transform``: ``NONE``, ``SOFTMAX``, ``LOGISTIC``,
  ``SOFTMAX_ZERO``, ``PROBIT`` over the scores (a single target takes only ``PROBIT``).
* The classifier's label is the class label (int64 or string, as given) of the highest
  score among the classes some leaf scored (or a base value set). Two classes follow the
  kernel's special cases: with one distinct class id in the weights (``binary_case``) the
  label is the second class where the positive score is above 0.5 (all weights positive,
  scores ``[1 - s, s]``) or above 0 (else ``[-s, s]``, or their logistic); otherwise the
  label is the literal 1 or 0 (the label strings' second or first) by the positive score's
  sign, and two ``base_values`` make the scores ``[-(b1 + s0), b1 + s0]`` where class 1 was
  scored.

The lowering into standard ops (``tree_strategies``): ``gemm`` or ``traversal``, chosen per
ensemble by a cost model; the rule in the report names the strategy and why. Modes are first
rewritten into two (``x <= t`` and set membership), swapping the children and the NaN
direction: ``x < t`` is ``x <= nextafter(t, -inf)`` in the comparing precision, ``x > t``
and ``x >= t`` the negations, ``x == t`` a set of one, ``x != t`` its negation (exact).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from onnx import FunctionProto

from rewriter.plugin import Arg, Declined, OpSample

from . import tree_strategies
from ._common import (
    DOMAIN,
    DOUBLE,
    FLOAT,
    INT32,
    INT64,
    Body,
    body_opset,
    features_rank,
    input_elem,
    logistic,
    make_string_const,
    post_transform,
    probit,
    text,
    texts,
)
from ._common import attribute_array as _array

LEQ, MEMBER = 1, 2
MODES_V5 = ("BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ",
            "BRANCH_MEMBER")
AGGREGATES_V5 = ("AVERAGE", "SUM", "MIN", "MAX")
TRANSFORMS_V5 = ("NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO", "PROBIT")


@dataclass
class Ensemble:
    """Trees in the canonical form the strategies lower: every node is a leaf, ``x <= t``
    or set membership, children swapped where the mode was negated."""

    compare: int  # FLOAT or DOUBLE: the precision thresholds are compared (and sums kept) in
    n_out: int  # targets, or classes
    roots: list[int]
    kind: list[int]  # 0 leaf, LEQ, MEMBER
    feature: list[int]
    threshold: list[float]
    sets: list[np.ndarray | None]
    true_child: list[int]
    false_child: list[int]
    missing_true: list[bool]
    weights: list[dict[int, float]]  # per node (leaves): target -> weight
    tree_of: list[int] = field(default_factory=list)

    @property
    def n_trees(self) -> int:
        return len(self.roots)

    def depth(self) -> int:
        """The most decisions on any root-to-leaf path."""
        best = 0
        stack = [(r, 0) for r in self.roots]
        while stack:
            node, d = stack.pop()
            if self.kind[node] == 0:
                best = max(best, d)
            else:
                stack += [(self.true_child[node], d + 1), (self.false_child[node], d + 1)]
        return best

    def leaves_of(self, tree: int) -> list[int]:
        return [n for n in range(len(self.kind)) if self.kind[n] == 0 and self.tree_of[n] == tree]

    def internal_of(self, tree: int) -> list[int]:
        return [n for n in range(len(self.kind)) if self.kind[n] != 0 and self.tree_of[n] == tree]

    def presence(self) -> tuple[np.ndarray, np.ndarray]:
        """Per target: whether every row scores it (some tree has it on every leaf), and
        whether some row may."""
        always = np.zeros(self.n_out, bool)
        ever = np.zeros(self.n_out, bool)
        for t in range(self.n_trees):
            leaves = self.leaves_of(t)
            on_all = np.ones(self.n_out, bool)
            for leaf in leaves:
                mask = np.zeros(self.n_out, bool)
                mask[list(self.weights[leaf])] = True
                ever |= mask
                on_all &= mask
            always |= on_all
        return always, ever


class _Raw:
    """A tree node before canonicalization."""

    __slots__ = ("mode", "feature", "value", "members", "true", "false", "track", "weights")

    def __init__(self, mode, feature, value, members, true, false, track):
        self.mode, self.feature, self.value, self.members = mode, feature, value, members
        self.true, self.false, self.track = true, false, track
        self.weights: dict[int, float] = {}


MAX_DEPTH = 200  # deeper paths are taken for a cycle


def _canonical(raw: list[_Raw], roots: list[int], compare: int, n_out: int) -> Ensemble:
    """The trees reachable from ``roots``, renumbered, in canonical modes; a node reached
    by two paths (TreeEnsemble-5 may share leaves) is copied for each."""
    dtype = np.float64 if compare == DOUBLE else np.float32
    ens = Ensemble(compare, n_out, [], [], [], [], [], [], [], [], [], [])
    for tree, root in enumerate(roots):
        ens.roots.append(len(ens.kind))
        stack = [(root, None, 0)]  # (raw node, (parent, side) to point at it, depth)
        while stack:
            old, parent, depth = stack.pop()
            if depth > MAX_DEPTH:
                raise Declined(f"a path is deeper than {MAX_DEPTH} nodes (a cycle?)")
            here = len(ens.kind)
            if parent is not None:
                (ens.true_child if parent[1] else ens.false_child)[parent[0]] = here
            node = raw[old]
            ens.tree_of.append(tree)
            if node.mode == "LEAF":
                if not node.weights:
                    raise Declined("a leaf has no weight (onnxruntime refuses such an "
                                   "ensemble)")
                ens.weights.append(dict(node.weights))
                ens.kind.append(0)
                ens.feature.append(0)
                ens.threshold.append(0.0)
                ens.sets.append(None)
                ens.missing_true.append(False)
                ens.true_child.append(here)
                ens.false_child.append(here)
                continue
            ens.weights.append({})  # (the kernel ignores weights on a branch)
            true, false, track = node.true, node.false, bool(node.track)
            value = dtype(node.value) if node.members is None else None
            members = node.members
            mode = node.mode
            if mode in ("BRANCH_GT", "BRANCH_GTE", "BRANCH_NEQ"):
                true, false = false, true
                track = False if mode == "BRANCH_NEQ" else not track
                mode = {"BRANCH_GT": "BRANCH_LEQ", "BRANCH_GTE": "BRANCH_LT",
                        "BRANCH_NEQ": "BRANCH_EQ"}[mode]
            if mode == "BRANCH_LT":
                value = dtype(np.nan) if value == -np.inf else np.nextafter(value, dtype(-np.inf))
                mode = "BRANCH_LEQ"
            if mode == "BRANCH_EQ":
                members, mode = np.array([value], dtype), "BRANCH_MEMBER"
            ens.kind.append(LEQ if mode == "BRANCH_LEQ" else MEMBER)
            ens.feature.append(int(node.feature))
            ens.threshold.append(float(value) if mode == "BRANCH_LEQ" else 0.0)
            ens.sets.append(None if mode == "BRANCH_LEQ" else np.asarray(members, dtype))
            ens.missing_true.append(track)
            ens.true_child.append(-1)
            ens.false_child.append(-1)
            stack += [(false, (here, False), depth + 1), (true, (here, True), depth + 1)]
    return ens


def _compare_type(ctx, as_tensor: bool) -> int:
    elem = input_elem(ctx)
    if elem not in (FLOAT, DOUBLE, INT64, INT32):
        raise Declined("X must be float, double, int64 or int32")
    return DOUBLE if elem == DOUBLE or as_tensor else FLOAT


def _float_or_tensor(ctx, name: str) -> np.ndarray | None:
    tensor = _array(ctx, f"{name}_as_tensor", np.float64)
    plain = _array(ctx, name, np.float32)
    if tensor is not None and plain is not None and len(plain) and len(tensor):
        raise Declined(f"{name} and {name}_as_tensor are both given")
    return tensor if tensor is not None else plain


def _ensemble_v1(ctx, weights_prefix: str, n_out: int, single_first: bool
                 ) -> tuple[Ensemble, np.ndarray]:
    """The ensemble of a TreeEnsembleRegressor/Classifier node and its base values."""
    tree_ids = list(ctx.attribute("nodes_treeids", []) or [])
    node_ids = list(ctx.attribute("nodes_nodeids", []) or [])
    modes = texts(ctx.attribute("nodes_modes", []))
    features = list(ctx.attribute("nodes_featureids", []) or [])
    trues = list(ctx.attribute("nodes_truenodeids", []) or [])
    falses = list(ctx.attribute("nodes_falsenodeids", []) or [])
    tracks = list(ctx.attribute("nodes_missing_value_tracks_true", []) or [])
    as_tensor = any(_array(ctx, f"{n}_as_tensor") is not None for n in (
        "nodes_values", "base_values", f"{weights_prefix}_weights"))
    compare = _compare_type(ctx, as_tensor)
    values = _float_or_tensor(ctx, "nodes_values")
    n = len(tree_ids)
    if not n or any(len(a) != n for a in (node_ids, modes, features, trues, falses)) or (
            values is None or len(values) != n):
        raise Declined("the nodes_* attributes must all give one value per node")
    unknown = sorted(set(modes) - set(MODES_V5[:-1]) - {"LEAF"})
    if unknown:
        raise Declined(f"unknown node modes: {', '.join(unknown)}")
    position: dict[tuple[int, int], int] = {}
    roots, seen_trees = [], set()
    for i, (t, nid) in enumerate(zip(tree_ids, node_ids)):
        if (t, nid) in position:
            raise Declined(f"node {nid} of tree {t} is listed twice")
        position[(t, nid)] = i
        if i == 0 or tree_ids[i - 1] != t:
            if t in seen_trees:
                raise Declined(f"the nodes of tree {t} are not listed together")
            seen_trees.add(t)
            roots.append(i)
    raw = []
    for i in range(n):
        leaf = modes[i] == "LEAF"
        children = (0, 0)
        if not leaf:
            try:
                children = (position[(tree_ids[i], trues[i])],
                            position[(tree_ids[i], falses[i])])
            except KeyError:
                raise Declined(f"node {node_ids[i]} of tree {tree_ids[i]} points to a node "
                               "its tree lacks") from None
        raw.append(_Raw(modes[i], features[i], values[i], None, *children,
                        i < len(tracks) and tracks[i] == 1))
    w_ids = list(ctx.attribute(f"{weights_prefix}_ids", []) or [])
    w_nodes = list(ctx.attribute(f"{weights_prefix}_nodeids", []) or [])
    w_trees = list(ctx.attribute(f"{weights_prefix}_treeids", []) or [])
    w_values = _float_or_tensor(ctx, f"{weights_prefix}_weights")
    w_values = np.zeros(0) if w_values is None else w_values
    if not (len(w_ids) == len(w_nodes) == len(w_trees) == len(w_values)):
        raise Declined(f"the {weights_prefix}_* attributes differ in length")
    order = sorted(range(len(w_ids)), key=lambda k: (w_trees[k], w_nodes[k], k))
    for k in order:
        where = position.get((w_trees[k], w_nodes[k]))
        if where is None:
            raise Declined(f"a weight names node {w_nodes[k]} of tree {w_trees[k]}, which "
                           "is not listed")
        if raw[where].mode != "LEAF":
            continue  # the kernel ignores weights on a branch
        target = 0 if single_first else int(w_ids[k])
        if not 0 <= target < n_out:
            raise Declined(f"a weight's target {w_ids[k]} is outside 0..{n_out - 1}")
        node = raw[where]
        if single_first:
            node.weights.setdefault(0, float(w_values[k]))
        else:
            node.weights.setdefault(target, [])
            node.weights[target].append(float(w_values[k]))
    base = _float_or_tensor(ctx, "base_values")
    return _canonical(raw, roots, compare, n_out), (
        np.zeros(0) if base is None else np.asarray(base, np.float64))


def _combine(ens: Ensemble, aggregate: str) -> None:
    """Several weights of one leaf for one target, combined as the aggregate adds them."""
    how = {"MIN": min, "MAX": max}.get(aggregate, sum)
    for weights in ens.weights:
        for target, w in list(weights.items()):
            if isinstance(w, list):
                weights[target] = float(how(w)) if aggregate in ("MIN", "MAX") else float(
                    np.sum(np.asarray(w, np.float64 if ens.compare == DOUBLE else np.float32)))


def _ensemble_v5(ctx) -> tuple[Ensemble, str, str, int]:
    """The ensemble of a TreeEnsemble (ml 5) node, its aggregate, transform, and X's type."""
    elem = input_elem(ctx)
    if elem not in (FLOAT, DOUBLE, 10):  # float16 compares exactly in float32
        raise Declined("X must be float, double or float16")
    compare = DOUBLE if elem == DOUBLE else FLOAT
    dtype = np.float64 if compare == DOUBLE else np.float32
    splits = _array(ctx, "nodes_splits")
    modes = _array(ctx, "nodes_modes")
    features = list(ctx.attribute("nodes_featureids", []) or [])
    trues = list(ctx.attribute("nodes_truenodeids", []) or [])
    falses = list(ctx.attribute("nodes_falsenodeids", []) or [])
    true_leaf = list(ctx.attribute("nodes_trueleafs", []) or [])
    false_leaf = list(ctx.attribute("nodes_falseleafs", []) or [])
    tracks = list(ctx.attribute("nodes_missing_value_tracks_true", []) or [])
    roots = list(ctx.attribute("tree_roots", []) or [])
    targets = list(ctx.attribute("leaf_targetids", []) or [])
    weights = _array(ctx, "leaf_weights")
    n_out = int(ctx.attribute("n_targets", 0) or 0)
    n = len(features)
    if splits is None or modes is None or weights is None or n_out < 1 or any(
            len(a) != n for a in (splits, modes, trues, falses, true_leaf, false_leaf)) or (
            len(targets) != len(weights)):
        raise Declined("the nodes_*, leaf_* attributes must agree in length, n_targets >= 1")
    members = _array(ctx, "membership_values")
    sets = iter(np.split(members, np.flatnonzero(np.isnan(members)))) if members is not None \
        else iter(())
    raw = []
    for i in range(n):
        mode = MODES_V5[int(modes[i])] if 0 <= int(modes[i]) < len(MODES_V5) else None
        if mode is None:
            raise Declined(f"unknown node mode {int(modes[i])}")
        member = None
        if mode == "BRANCH_MEMBER":
            chunk = next(sets, None)
            if chunk is None:
                raise Declined("membership_values lacks a set for a member node")
            member = chunk[~np.isnan(chunk)].astype(dtype)
        true = n + int(trues[i]) if true_leaf[i] else int(trues[i])
        false = n + int(falses[i]) if false_leaf[i] else int(falses[i])
        raw.append(_Raw(mode, features[i], splits[i], member, true, false,
                        i < len(tracks) and tracks[i] == 1))
    for target, w in zip(targets, weights):
        if not 0 <= int(target) < n_out:
            raise Declined(f"a leaf's target {target} is outside 0..{n_out - 1}")
        leaf = _Raw("LEAF", 0, 0.0, None, 0, 0, False)
        leaf.weights = {int(target): [float(w)]}
        raw.append(leaf)
    if any(not 0 <= r < n for r in roots) or not roots:
        raise Declined("tree_roots must name nodes")
    aggregate = AGGREGATES_V5[int(ctx.attribute("aggregate_function", 1))]
    transform = TRANSFORMS_V5[int(ctx.attribute("post_transform", 0))]
    ens = _canonical(raw, roots, compare, n_out)
    _combine(ens, aggregate)
    return ens, aggregate, transform, elem


# -- the scores after the trees ------------------------------------------------------------


def _regression_scores(b: Body, ens: Ensemble, scores: str, has: str | None, aggregate: str,
                       base: np.ndarray, transform: str) -> str:
    """The regressor's ``FinalizeScores`` (onnxruntime 1.32): float32 ``[N, n_targets]``."""
    acc = ens.compare
    if ens.n_out == 1:
        origin = float(base[0]) if len(base) == 1 else 0.0
        y = scores
        if aggregate == "AVERAGE":
            y = b.op("Div", y, b.scalar_like(float(ens.n_trees), acc))
        y = b.op("Add", y, b.scalar_like(origin, acc))
        y = b.cast(y, FLOAT) if acc != FLOAT else y
        return probit(b, y) if transform == "PROBIT" else y
    y = scores
    if aggregate == "AVERAGE":
        y = b.op("Div", y, b.scalar_like(float(ens.n_trees), acc))
    if len(base) == ens.n_out:
        y = b.op("Add", y, b.floats(base, acc))
    if has is not None:  # a target no leaf of the row scored stays 0 (base value or not)
        y = b.op("Where", has, y, b.scalar_like(0.0, acc))
    y = b.cast(y, FLOAT) if acc != FLOAT else y
    return post_transform(b, y, transform)


def _column(b: Body, x: str, k: int) -> str:
    return b.slice(x, [k], [k + 1], [1])


def _classifier_outputs(b: Body, ens: Ensemble, scores: str, has: str | None,
                        base: np.ndarray, transform: str, binary_case: bool,
                        all_positive: bool) -> tuple[str, str, bool]:
    """The classifier's ``FinalizeScores``: (label index ``[N]`` int64, float32 scores,
    whether the index is the literal 0/1 rather than a class position)."""
    acc = ens.compare
    n = ens.n_out
    zero = b.scalar_like(0.0, acc)
    if n > 2:
        if len(base) > n:
            raise Declined(f"{len(base)} base values for {n} classes")
        if len(base):
            full = np.zeros(n)
            full[:len(base)] = base
            scores = b.op("Add", scores, b.floats(full, acc))
            if has is not None:
                given = np.arange(n) < len(base)
                has = b.op("Or", has, b.const(given, np.bool_))
        masked = scores if has is None else b.op(
            "Where", has, scores, b.scalar_like(-np.inf, acc))
        index = b.op("ArgMax", masked, axis=1, keepdims=0)
        z = b.cast(scores, FLOAT) if acc != FLOAT else scores
        return index, post_transform(b, z, transform), False
    s0, s1 = _column(b, scores, 0), _column(b, scores, 1)
    true = b.const(np.array([[True]]), np.bool_)
    h0 = true if has is None else _column(b, has, 0)
    h1 = true if has is None else _column(b, has, 1)
    was = -1
    if len(base) == 2:
        b1 = b.scalar_like(float(base[1]), acc)
        lifted = b.op("Add", b1, s0)
        s1 = b.op("Where", h1, lifted, b.op("Add", s1, b1))
        s0 = b.op("Where", h1, b.op("Neg", lifted),
                  b.op("Add", s0, b.scalar_like(float(base[0]), acc)))
        two = true
    elif len(base) == 1:
        s0 = b.op("Add", s0, b.scalar_like(float(base[0]), acc))
        two = h1
    elif len(base) == 0:
        was, two = 3, h1
    else:
        two = true
    positive = b.op("Where", h1, s1, b.op("Where", h0, s0, zero))
    if has is not None:  # a class no leaf scored is written as 0 (ScoreValue's float)
        s0, s1 = b.op("Where", h0, s0, zero), b.op("Where", h1, s1, zero)
    if binary_case:
        limit = 0.5 if all_positive else 0.0
        index = b.cast(b.op("Greater", positive, b.scalar_like(limit, acc)), INT64)
        was = 0 if all_positive else 2
    else:
        index = b.cast(b.op("Greater", positive, zero), INT64)
    index = b.reshape(index, [-1])
    f0 = b.cast(s0, FLOAT) if acc != FLOAT else s0
    f1 = b.cast(s1, FLOAT) if acc != FLOAT else s1
    both = post_transform(b, b.op("Concat", f0, f1, axis=1), transform)
    zero_f = b.scalar_like(0.0, FLOAT)
    if transform == "PROBIT":
        one = b.op("Concat", probit(b, f0), b.op("Mul", f0, zero_f), axis=1)
    elif was in (0, 1):
        one = b.op("Concat", b.op("Sub", b.scalar_like(1.0, FLOAT), f0), f0, axis=1)
    elif was in (2, 3):
        if transform == "LOGISTIC":
            one = b.op("Concat", logistic(b, b.op("Neg", f0)), logistic(b, f0), axis=1)
        else:
            one = b.op("Concat", b.op("Neg", f0), f0, axis=1)
    else:
        one = b.op("Concat", f0, b.op("Mul", f0, zero_f), axis=1)
    z = b.op("Where", two, both, one)
    return index, z, not binary_case


# -- builders --------------------------------------------------------------------------------

RULE_NOTE = "rule_note"  # the planner appends a body's note to the rule's name in reports


def _note(fn: FunctionProto, note: str) -> None:
    entry = fn.metadata_props.add()
    entry.key, entry.value = RULE_NOTE, note


def _lower(b: Body, ens: Ensemble, x: str, aggregate: str, need_has: bool,
           strategy: str | None) -> tuple[str, str | None, str]:
    plan = tree_strategies.choose(ens, aggregate, need_has, force=strategy)
    scores, has = plan.build(b, ens, x, aggregate, need_has)
    return scores, has, plan.note


def _x_rows(b: Body, ctx, ens: Ensemble) -> str:
    rank = features_rank(ctx, ctx.node.op_type)
    x = b.rows("X", rank)
    return x if input_elem(ctx) == ens.compare else b.cast(x, ens.compare)


def build_tree_ensemble_regressor(ctx, strategy: str | None = None) -> FunctionProto:
    """The body of the node (``strategy``: ``gemm`` or ``traversal`` instead of the cost
    model's choice)."""
    node = ctx.node
    if len(node.output) != 1:
        raise Declined("TreeEnsembleRegressor has one output")
    n_out = int(ctx.attribute("n_targets", 0) or 0)
    if n_out < 1:
        raise Declined("n_targets must be 1 or more (onnxruntime refuses 0)")
    ens, base = _ensemble_v1(ctx, "target", n_out, single_first=n_out == 1)
    aggregate = text(ctx.attribute("aggregate_function"), "SUM")
    transform = text(ctx.attribute("post_transform"), "NONE")
    if aggregate not in AGGREGATES_V5:
        raise Declined(f"unknown aggregate_function {aggregate!r}")
    _combine(ens, aggregate)
    b = Body(body_opset(ctx))
    scores, has, note = _lower(b, ens, _x_rows(b, ctx, ens), aggregate,
                               n_out > 1 and not ens.presence()[0].all(), strategy)
    y = _regression_scores(b, ens, scores, has, aggregate, base, transform)
    fn = b.function(DOMAIN, "tree_ensemble_regressor", ["X"], [y])
    _note(fn, note)
    return fn


def build_tree_ensemble(ctx, strategy: str | None = None) -> FunctionProto:
    """The body of the node (``strategy``: ``gemm`` or ``traversal`` instead of the cost
    model's choice)."""
    node = ctx.node
    if len(node.output) != 1:
        raise Declined("TreeEnsemble has one output")
    ens, aggregate, transform, elem = _ensemble_v5(ctx)
    base = np.zeros(0)
    b = Body(body_opset(ctx))
    scores, has, note = _lower(b, ens, _x_rows(b, ctx, ens), aggregate,
                               ens.n_out > 1 and not ens.presence()[0].all(), strategy)
    y = _regression_scores(b, ens, scores, has, aggregate, base, transform)
    if elem != FLOAT:
        y = b.cast(y, elem)
    fn = b.function(DOMAIN, "tree_ensemble", ["X"], [y])
    _note(fn, note)
    return fn


def build_tree_ensemble_classifier(ctx, strategy: str | None = None) -> FunctionProto:
    """The body of the node (``strategy``: ``gemm`` or ``traversal`` instead of the cost
    model's choice)."""
    node = ctx.node
    if len(node.output) != 2 or not node.output[0]:
        raise Declined("TreeEnsembleClassifier's label and scores must both be used")
    ints = list(ctx.attribute("classlabels_int64s", []) or [])
    strings = texts(ctx.attribute("classlabels_strings", []))
    if bool(ints) == bool(strings):
        raise Declined("give classlabels_int64s or classlabels_strings (one of them)")
    n_out = len(ints or strings)
    if n_out < 2:
        raise Declined("a classifier of one class (the kernel's one-score path) is not lowered")
    ens, base = _ensemble_v1(ctx, "class", n_out, single_first=False)
    _combine(ens, "SUM")
    transform = text(ctx.attribute("post_transform"), "NONE")
    class_ids = list(ctx.attribute("class_ids", []) or [])
    raw_weights = _float_or_tensor(ctx, "class_weights")
    binary_case = n_out == 2 and len(set(class_ids)) == 1
    all_positive = raw_weights is None or not bool(np.any(np.asarray(raw_weights) < 0))
    always, _ = ens.presence()
    need_has = not bool(always.all())
    b = Body(body_opset(ctx))
    scores, has, note = _lower(b, ens, _x_rows(b, ctx, ens), "SUM", need_has, strategy)
    index, z, literal = _classifier_outputs(b, ens, scores, has, base, transform,
                                            binary_case, all_positive)
    if strings:
        label = b.op("Gather", make_string_const(b, strings), index, axis=0)
    elif literal:
        label = index
    else:
        label = b.op("Gather", b.const(np.asarray(ints, np.int64)), index, axis=0)
    fn = b.function(DOMAIN, "tree_ensemble_classifier", ["X"], [label, z])
    _note(fn, note)
    return fn


# -- samples ---------------------------------------------------------------------------------


def _tree_attributes(prefix: str, n_out: int, modes=("BRANCH_LEQ",), tensor=False, seed=0,
                     tracks=False, depth=3, trees=2, targets=None):
    """A small random ensemble's attributes (complete trees of ``depth``; every leaf weighs
    ``targets``, default all)."""
    rng = np.random.default_rng(seed)
    a = {k: [] for k in ("nodes_treeids", "nodes_nodeids", "nodes_featureids", "nodes_modes",
                         "nodes_values", "nodes_truenodeids", "nodes_falsenodeids",
                         "nodes_missing_value_tracks_true", f"{prefix}_treeids",
                         f"{prefix}_nodeids", f"{prefix}_ids", f"{prefix}_weights")}
    for t in range(trees):
        count = 2 ** (depth + 1) - 1
        for i in range(count):
            leaf = i >= 2 ** depth - 1
            a["nodes_treeids"].append(t)
            a["nodes_nodeids"].append(i)
            a["nodes_featureids"].append(int(rng.integers(0, 3)))
            a["nodes_modes"].append("LEAF" if leaf else str(modes[i % len(modes)]))
            a["nodes_values"].append(0.0 if leaf else float(np.round(rng.uniform(-1, 1), 1)))
            a["nodes_truenodeids"].append(0 if leaf else 2 * i + 1)
            a["nodes_falsenodeids"].append(0 if leaf else 2 * i + 2)
            a["nodes_missing_value_tracks_true"].append(int(tracks and i % 2 == 0))
            if leaf:
                for k in (range(n_out) if targets is None else targets):
                    a[f"{prefix}_treeids"].append(t)
                    a[f"{prefix}_nodeids"].append(i)
                    a[f"{prefix}_ids"].append(k)
                    a[f"{prefix}_weights"].append(float(np.round(rng.uniform(-1, 1), 2)))
    if tensor:
        from onnx import numpy_helper

        for name in ("nodes_values", f"{prefix}_weights"):
            a[f"{name}_as_tensor"] = numpy_helper.from_array(np.asarray(a.pop(name)))
    return a


def _rows(rng, shape):
    """Values on and around the thresholds (multiples of 0.1), some NaN."""
    values = np.round(rng.uniform(-1.2, 1.2, shape), 1)
    values.flat[::7] = np.nan
    return values


def _integer_rows(rng, shape):
    """Integer values and NaN (onnxruntime tests set membership on the value cast to an
    integer, the spec on the value: they agree on integers)."""
    values = rng.integers(-2, 3, shape).astype(np.float64)
    values.flat[::5] = np.nan
    return values


def _v5_attributes(dtype=np.float32) -> dict:
    """Two trees of TreeEnsemble-5 (thresholds and weights of ``dtype``, X's): a
    set-membership root over a ``<`` node (a leaf shared by both sides), and a ``!=`` root;
    three targets."""
    from onnx import numpy_helper

    def tensor(values, of=dtype):
        return numpy_helper.from_array(np.asarray(values, of))
    return {
        "tree_roots": [0, 2], "nodes_featureids": [0, 1, 1],
        "nodes_modes": tensor([6, 1, 5], np.uint8), "nodes_splits": tensor([0, 0.5, 1]),
        "nodes_truenodeids": [1, 0, 2], "nodes_trueleafs": [0, 1, 1],
        "nodes_falsenodeids": [1, 1, 3], "nodes_falseleafs": [1, 1, 1],
        "nodes_missing_value_tracks_true": [1, 0, 1],
        "membership_values": tensor([-1, 2, np.nan]),
        "leaf_targetids": [0, 1, 2, 0], "leaf_weights": tensor([0.5, -1.0, 2.0, 0.25]),
        "n_targets": 3}


_ALL_MODES = ("BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ")

REGISTRATIONS = [
    ("TreeEnsembleRegressor", build_tree_ensemble_regressor, ("float", "double"),
     "", [
         OpSample([Arg("T[8,3]", values=_rows)], ["float"],
                  {**_tree_attributes("target", 1, _ALL_MODES, tracks=True),
                   "n_targets": 1, "aggregate_function": agg, "base_values": [0.5]},
                  opset=0, name=f"modes-nan-{agg.lower()}")
         for agg in AGGREGATES_V5] + [
         OpSample([Arg("T[6,3]", values=_rows)], ["float"],
                  {**_tree_attributes("target", 3, seed=2, trees=3), "n_targets": 3,
                   "post_transform": tr, "aggregate_function": agg,
                   "base_values": [0.1, 0.2, -0.3]}, opset=13,
                  name=f"3-targets-{agg.lower()}-{tr.lower()}", dtypes=["float"])
         for agg, tr in [("SUM", "SOFTMAX"), ("MAX", "LOGISTIC"), ("AVERAGE", "NONE"),
                         ("MIN", "SOFTMAX_ZERO")]] + [
         OpSample([Arg("T[6,3]", values=_rows)], ["float"],
                  {**_tree_attributes("target", 1, _ALL_MODES, tensor=True, seed=3),
                   "n_targets": 1}, opset=17, name="as-tensor", dtypes=["double"],
                  domain_opset=3)]),
    ("TreeEnsembleClassifier", build_tree_ensemble_classifier, ("float", "double", "int64"),
     "", [
         OpSample([Arg("T[8,3]", values=_rows)], ["int64", "float"],
                  {**_tree_attributes("class", 3, _ALL_MODES, tracks=True, seed=4),
                   "classlabels_int64s": [3, 5, 7], "post_transform": tr}, opset=0,
                  name=f"3-classes-{tr.lower()}", dtypes=["float"])
         for tr in ("NONE", "SOFTMAX", "LOGISTIC")] + [
         OpSample([Arg("T[8,3]", low=-2, high=2)], ["string", "float"],
                  {**_tree_attributes("class", 2, seed=5), "classlabels_strings": ["no", "yes"]},
                  opset=13, name="2-classes-strings")] + [
         OpSample([Arg("T[8,3]", values=_rows)], ["int64", "float"],
                  {**_tree_attributes("class", 2, seed=6, targets=[1], tracks=True),
                   "classlabels_int64s": [4, 9], "post_transform": tr, **base}, opset=17,
                  name=f"binary-{tr.lower()}-{len(base.get('base_values', []))}-base",
                  dtypes=["float"])
         for tr, base in [("LOGISTIC", {}), ("NONE", {"base_values": [0.5, -0.25]})]]),
    ("TreeEnsemble", build_tree_ensemble, ("float", "double"), "", [
        OpSample([Arg("T[8,2]", values=_integer_rows)], ["T"], {
            **_v5_attributes(np.float32 if dtype == "float" else np.float64),
            "post_transform": tr, "aggregate_function": agg}, opset=0, domain_opset=5,
                 name=f"member-{agg}-{tr}", dtypes=[dtype])
        for agg, tr, dtype in [(1, 0, "float"), (0, 4, "float"), (3, 3, "double"),
                               (2, 0, "double")]]),
]
