"""Reading a tree ensemble's attributes (TreeEnsembleRegressor/Classifier of ml opsets 1 and
3, TreeEnsemble of ml opset 5) into the canonical :class:`Ensemble` the strategies lower
(``tree_strategies``): nodes renumbered per tree, modes rewritten into ``x <= t`` and set
membership (see ``trees``), a leaf's weights per target."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from rewriter.plugin import Declined

from ._common import DOUBLE, FLOAT, INT32, INT64, input_elem, texts
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


def float_or_tensor_attribute(ctx, name: str) -> np.ndarray | None:
    """The float attribute ``name`` or its double ``name_as_tensor`` (Declined: both)."""
    tensor = _array(ctx, f"{name}_as_tensor", np.float64)
    plain = _array(ctx, name, np.float32)
    if tensor is not None and plain is not None and len(plain) and len(tensor):
        raise Declined(f"{name} and {name}_as_tensor are both given")
    return tensor if tensor is not None else plain


def read_ensemble_v1(ctx, weights_prefix: str, n_out: int, single_first: bool
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
    values = float_or_tensor_attribute(ctx, "nodes_values")
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
    w_values = float_or_tensor_attribute(ctx, f"{weights_prefix}_weights")
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
    base = float_or_tensor_attribute(ctx, "base_values")
    return _canonical(raw, roots, compare, n_out), (
        np.zeros(0) if base is None else np.asarray(base, np.float64))


def combine_leaf_weights(ens: Ensemble, aggregate: str) -> None:
    """Several weights of one leaf for one target, combined as the aggregate adds them."""
    how = {"MIN": min, "MAX": max}.get(aggregate, sum)
    for weights in ens.weights:
        for target, w in list(weights.items()):
            if isinstance(w, list):
                weights[target] = float(how(w)) if aggregate in ("MIN", "MAX") else float(
                    np.sum(np.asarray(w, np.float64 if ens.compare == DOUBLE else np.float32)))


def read_ensemble_v5(ctx) -> tuple[Ensemble, str, str, int]:
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
    combine_leaf_weights(ens, aggregate)
    return ens, aggregate, transform, elem
