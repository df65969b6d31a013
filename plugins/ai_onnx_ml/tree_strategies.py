"""Lowering a canonical tree ensemble (:class:`tree_ensembles.Ensemble`) into standard ops,
by one of two strategies (Hummingbird's, from the ONNX graph rather than a scikit-learn object),
chosen per ensemble by a cost model:

* ``gemm``: every decision of every tree at once. ``Gather`` the features the internal
  nodes test, compare with the thresholds (``x <= t``; set membership as ``Equal`` with the
  set's values and a ``MatMul`` counting the hits per node), then per tree (a batched
  ``MatMul`` of the decisions with a ``[internal, leaves]`` matrix of +1 for a leaf in the
  true subtree, -1 in the false one) a leaf is reached where the sum equals its count of
  true edges; a ``MatMul`` of that one-hot with the leaves' weights sums the trees
  (``MIN``/``MAX``: per tree, then reduced). Few ops, work ``N * trees * internal *
  leaves``: good for shallow trees and at batch 1.
* ``traversal``: every tree walked at once, one level per step (``depth`` steps, unrolled):
  the node's feature and threshold, the row's value, ``x <= t`` as 0/1, the next node from
  the packed children. The state is kept flat (``[1, N * T]``, twice the node number) and
  every lookup is a ``GatherElements`` from a ``[1, 2 * nodes]`` table (onnxruntime's
  ``Gather`` from a 1-D table is ~4x slower). Work ``N * trees * depth``, ops ``~8 *
  depth``: good for deep trees and big batches.

Both are exact: a feature value is gathered, never multiplied; the decisions and the
counts are small integers in float32; only the sum of the trees' weights may round in
another order than the kernel's.

The cost model (:func:`choose`): each strategy's constants' bytes, and its latency at batch
1 and 1024 estimated as ``ops * OP_US + work * ELEMENT_NS`` (constants measured on
onnxruntime's CPU provider, ``benchmarks/bench_trees.py``). A strategy whose constants pass
``MAX_SIZE_RATIO`` times the ensemble's own attribute bytes is left out (unless none fits:
the smallest then); of the rest, the lowest sum of latencies relative to the best at each
batch wins. The rule in the report says which ran and why.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._common import Body

# fitted to benchmarks/bench_trees.py on onnxruntime 1.32's CPU provider, one thread
OP_US = 0.6  # running one small op
ELEMENT_NS = 3.0  # per element a level of the traversal touches (gathers, compares)
MAC_NS = 1.2  # per multiply-add of gemm's small batched MatMuls
MAX_SIZE_RATIO = 4.0
BATCHES = (1, 1024)
NODE_BYTES = 60  # an ensemble's attributes per node (ids, feature, mode, value, children)


@dataclass
class Plan:
    name: str
    note: str
    build: object


def _shape(ens) -> dict:
    trees = ens.n_trees
    internal = [len(ens.internal_of(t)) for t in range(trees)]
    leaves = [len(ens.leaves_of(t)) for t in range(trees)]
    members = [i for i, k in enumerate(ens.kind) if k == 2]
    set_values = sum(len(ens.sets[i]) for i in members)
    return dict(trees=trees, imax=max(internal), lmax=max(leaves), internal=sum(internal),
                nodes=len(ens.kind), depth=ens.depth(), members=len(members),
                set_values=set_values, kmax=max([len(ens.sets[i]) for i in members] or [0]),
                track=any(ens.missing_true))


def estimates(ens, aggregate: str) -> dict[str, dict]:
    """Each strategy's constants' bytes and estimated latency (µs) per batch."""
    s = _shape(ens)
    c = ens.n_out
    width = 8 if ens.compare == 11 else 4
    minmax = aggregate in ("MIN", "MAX")
    t, imax, lmax = s["trees"], s["imax"], s["lmax"]
    gemm_bytes = (s["internal"] * (8 + width) + s["set_values"] * (8 + width)
                  + s["set_values"] * s["members"] * 4 + t * imax * 8
                  + t * imax * lmax * 4 + t * lmax * 4 + t * lmax * c * 4 * (2 if minmax else 1))
    # feature, threshold, children and leaf row per node, each twice; sets twice; weights
    trav_bytes = s["nodes"] * (48 + 2 * width) + 2 * s["nodes"] * s["kmax"] * width \
        + s["nodes"] * c * (width + 1)
    out = {}
    for name, size in (("gemm", gemm_bytes), ("traversal", trav_bytes)):
        latency = {}
        for n in BATCHES:
            if name == "gemm":
                ops = 14 + (5 if s["members"] else 0) + (2 if s["track"] else 0) + (
                    6 if minmax else 0)
                work = n * s["internal"] * 3 + n * s["set_values"] * 2
                macs = n * t * imax * lmax + n * t * lmax * c
            else:
                ops = 12 + s["depth"] * (8 + (7 if s["members"] else 0) + (
                    3 if s["track"] else 0)) + (4 if minmax else 0)
                work = s["depth"] * n * t * (8 + 2 * s["kmax"]) + n * t * c * 2
                macs = 0
            latency[n] = ops * OP_US + (work * ELEMENT_NS + macs * MAC_NS) / 1000.0
        out[name] = {"bytes": int(size), "latency_us": latency}
    return out


def choose(ens, aggregate: str, need_has: bool, force: str | None = None) -> Plan:
    """The strategy for ``ens`` (``force``: a strategy by name, for tests and benchmarks)."""
    s = _shape(ens)
    original = s["nodes"] * NODE_BYTES
    est = estimates(ens, aggregate)
    builders = {"gemm": build_gemm, "traversal": build_traversal}
    if force is not None:
        chosen, why = force, "forced"
    else:
        fits = [k for k, v in est.items() if v["bytes"] <= MAX_SIZE_RATIO * original]
        pool = fits or [min(est, key=lambda k: est[k]["bytes"])]
        best = {n: min(est[k]["latency_us"][n] for k in pool) for n in BATCHES}
        score = {k: sum(est[k]["latency_us"][n] / best[n] for n in BATCHES) for k in pool}
        chosen = min(pool, key=lambda k: (score[k], k))
        other = [k for k in est if k != chosen]
        why = ("the only one within the size bound" if len(fits) == 1 else
               "none within the size bound: the smallest" if not fits else
               "lower estimated latency at batch 1 and 1024")
        if other and fits:
            o = other[0]
            why += (f"; {o}: {est[o]['bytes'] / original:.1f}x bytes, "
                    f"{est[o]['latency_us'][1]:.0f}/{est[o]['latency_us'][1024]:.0f} us")
    e = est[chosen]
    note = (f"{chosen}: {s['trees']} trees, depth {s['depth']}, {s['nodes']} nodes; "
            f"{e['bytes'] / original:.1f}x the ensemble's bytes, est. "
            f"{e['latency_us'][1]:.0f}/{e['latency_us'][1024]:.0f} us at batch 1/1024; {why}")
    return Plan(chosen, note, builders[chosen])


def _np(ens):
    return np.float64 if ens.compare == 11 else np.float32


def _missing(b: Body, cond: str, values: str, tracks: np.ndarray) -> str:
    """``cond`` or (NaN and tracking)."""
    if not tracks.any():
        return cond
    nan = b.op("IsNaN", values)
    if not tracks.all():
        nan = b.op("And", nan, b.const(tracks, np.bool_))
    return b.op("Or", cond, nan)


def _member_hits(b: Body, ens, values: str, nodes: list[int]) -> str:
    """``[N, len(nodes)]`` bool: whether each node's value is in its set (``values``: the
    gathered feature values of ``nodes``)."""
    owner, flat = [], []
    for col, node in enumerate(nodes):
        owner += [col] * len(ens.sets[node])
        flat += list(ens.sets[node])
    if not flat:
        return b.op("Less", values, b.op("Sub", values, values))  # all false (NaN-safe)
    hits = b.op("Equal", b.op("Gather", values, b.ints(owner), axis=1),
                b.const(np.asarray(flat, _np(ens)), _np(ens)))
    incidence = np.zeros((len(flat), len(nodes)), np.float32)
    incidence[np.arange(len(flat)), owner] = 1.0
    counts = b.op("MatMul", b.cast(hits, 1), b.const(incidence, np.float32))
    return b.op("Greater", counts, b.const(np.array(0.5, np.float32), np.float32))


def build_gemm(b: Body, ens, x: str, aggregate: str, need_has: bool):
    dt = _np(ens)
    internal = [i for i, k in enumerate(ens.kind) if k != 0]
    leq = [i for i in internal if ens.kind[i] == 1]
    mem = [i for i in internal if ens.kind[i] == 2]
    parts, order = [], leq + mem
    if leq:
        values = b.op("Gather", x, b.ints([ens.feature[i] for i in leq]), axis=1)
        cond = b.less_or_equal(values, b.const(np.asarray([ens.threshold[i] for i in leq],
                                                          dt), dt))
        parts.append(_missing(b, cond, values, np.array([ens.missing_true[i] for i in leq])))
    if mem:
        values = b.op("Gather", x, b.ints([ens.feature[i] for i in mem]), axis=1)
        cond = _member_hits(b, ens, values, mem)
        parts.append(_missing(b, cond, values, np.array([ens.missing_true[i] for i in mem])))
    column = {node: k for k, node in enumerate(order)}
    trees = ens.n_trees
    per_internal = [ens.internal_of(t) for t in range(trees)]
    per_leaf = [ens.leaves_of(t) for t in range(trees)]
    imax = max(1, max(len(p) for p in per_internal))
    lmax = max(len(p) for p in per_leaf)
    pad = len(order)  # the zero column appended
    gather = np.full((trees, imax), pad, np.int64)
    paths = np.zeros((trees, imax, lmax), np.float32)
    trues = np.full((trees, 1, lmax), -1.0, np.float32)
    for t in range(trees):
        local = {node: k for k, node in enumerate(per_internal[t])}
        for k, node in enumerate(per_internal[t]):
            gather[t, k] = column[node]
        trues[t, 0, :len(per_leaf[t])] = 0.0
        # walk down: each leaf's ancestors with the side taken
        stack = [(ens.roots[t], [])]
        leaf_pos = {leaf: j for j, leaf in enumerate(per_leaf[t])}
        while stack:
            node, path = stack.pop()
            if ens.kind[node] == 0:
                j = leaf_pos[node]
                for anc, side in path:
                    paths[t, local[anc], j] = 1.0 if side else -1.0
                    trues[t, 0, j] += 1.0 if side else 0.0
                continue
            stack.append((ens.true_child[node], path + [(node, True)]))
            stack.append((ens.false_child[node], path + [(node, False)]))
    if parts:
        decisions = b.cast(parts[0] if len(parts) == 1 else b.op("Concat", *parts, axis=1), 1)
        decisions = b.op("Pad", decisions, b.ints([0, 0, 0, 1]),
                         b.const(np.array(0.0, np.float32), np.float32))
    else:  # every tree a single leaf
        decisions = b.op("Expand", b.const(np.zeros((1, 1), np.float32), np.float32),
                         b.op("Concat", b.slice(b.op("Shape", x), [0], [1], [0]), b.ints([1]),
                              axis=0))
    per_tree = b.op("Gather", decisions, b.const(gather.reshape(-1)), axis=1)
    per_tree = b.op("Transpose", b.reshape(per_tree, [0, trees, imax]), perm=[1, 0, 2])
    sums = b.op("MatMul", per_tree, b.const(paths, np.float32))  # [T, N, L]
    onehot = b.cast(b.op("Equal", sums, b.const(trues, np.float32)), 1)
    c = ens.n_out
    weights = np.zeros((trees, lmax, c), dt)
    present = np.zeros((trees, lmax, c), np.float32)
    for t in range(trees):
        for j, leaf in enumerate(per_leaf[t]):
            for target, w in ens.weights[leaf].items():
                weights[t, j, target] = w
                present[t, j, target] = 1.0
    flat = b.reshape(b.op("Transpose", onehot, perm=[1, 0, 2]), [0, trees * lmax])
    has = None
    if aggregate in ("MIN", "MAX"):
        hit = onehot if dt == np.float32 else b.cast(onehot, 11)
        per = b.op("MatMul", hit, b.const(weights, dt))  # [T, N, C]
        seen = b.op("Greater", b.op("MatMul", onehot, b.const(present, np.float32)),
                    b.const(np.array(0.5, np.float32), np.float32))
        fill = np.inf if aggregate == "MIN" else -np.inf
        per = b.op("Where", seen, per, b.const(np.array(fill, dt), dt))
        scores = b.reduce("ReduceMin" if aggregate == "MIN" else "ReduceMax", per, [0],
                          keepdims=0)
        if need_has:
            has = b.cast(b.reduce_max(b.cast(seen, 1), [0], keepdims=0), 9)
        return scores, has
    hit = flat if dt == np.float32 else b.cast(flat, 11)
    scores = b.op("MatMul", hit, b.const(weights.reshape(trees * lmax, c), dt))
    if need_has:
        counts = b.op("MatMul", flat, b.const(present.reshape(trees * lmax, c), np.float32))
        has = b.op("Greater", counts, b.const(np.array(0.5, np.float32), np.float32))
    return scores, has


def _take(b: Body, table: str, flat: str) -> str:
    """``table[flat]`` for a ``[1, n]`` table and ``[1, M]`` indices: ``GatherElements``,
    which onnxruntime runs ~4x faster than ``Gather`` from a 1-D table (measured at
    ``[1024, 20]`` indices)."""
    return b.op("GatherElements", table, flat, axis=1)


def build_traversal(b: Body, ens, x: str, aggregate: str, need_has: bool):
    """Every tree walked at once. The state is twice the node number, flat (``[1, N * T]``,
    row-major ``[N, T]``); the node tables are ``[1, 2 * nodes]`` (each node's entry twice),
    so one level is: feature, the row's value (``x`` flattened, each row's offset added),
    threshold, ``x <= t`` as 0/1, and the next state ``packed[state + decision]`` (false
    child first, so a NaN, false for ``<=``, takes it)."""
    dt = _np(ens)
    n = len(ens.kind)
    depth = ens.depth()
    trees = ens.n_trees

    def twice(values, dtype) -> np.ndarray:
        return np.repeat(np.asarray(values, dtype), 2)[None, :]

    packed = np.empty(2 * n, np.int64)
    packed[0::2], packed[1::2] = ens.false_child, ens.true_child
    feature = b.const(twice(ens.feature, np.int64))
    threshold = b.const(twice(ens.threshold, dt), dt)
    following = b.const((2 * packed)[None, :])
    members = [i for i, k in enumerate(ens.kind) if k == 2]
    tracks = np.asarray(ens.missing_true, bool)
    shape = b.op("Shape", x)
    batch, width = b.slice(shape, [0], [1], [0]), b.slice(shape, [1], [2], [0])
    grid = b.op("Concat", batch, b.ints([trees]), axis=0)  # [N, T]
    state = b.reshape(b.op("Expand", b.const(2 * np.asarray([ens.roots], np.int64)), grid),
                      [1, -1])
    rows = b.op("Range", b.const(np.array(0, np.int64)), b.reshape(batch, []),
                b.const(np.array(1, np.int64)))
    offset = b.reshape(b.op("Expand", b.unsqueeze(b.op("Mul", rows, b.reshape(width, [])),
                                                  [1]), grid), [1, -1])
    x_flat = b.reshape(x, [1, -1])
    if members:
        kmax = max(len(ens.sets[i]) for i in members)
        sets = np.full((n, kmax), np.nan, dt)
        for i in members:
            sets[i, :len(ens.sets[i])] = ens.sets[i]
        sets_c = b.const(np.repeat(sets, 2, axis=0), dt)
        is_member = b.const(twice([k == 2 for k in ens.kind], np.bool_), np.bool_)
    if tracks.any() and not tracks.all():
        tracks_c = b.const(twice(tracks, np.bool_), np.bool_)
    for _ in range(depth):
        values = _take(b, x_flat, b.op("Add", offset, _take(b, feature, state)))
        cond = b.less_or_equal(values, _take(b, threshold, state))
        if members:
            wanted = b.op("Gather", sets_c, b.reshape(state, [-1]))  # [N * T, kmax]
            hits = b.op("Equal", b.reshape(values, [-1, 1]), wanted)
            hit = b.cast(b.reduce_max(b.cast(hits, 6), [1], keepdims=0), 9)
            member = _take(b, is_member, state)  # (onnxruntime has no bool Where)
            cond = b.op("Or", b.op("And", member, b.reshape(hit, [1, -1])),
                        b.op("And", b.op("Not", member), cond))
        if tracks.any():
            nan = b.op("IsNaN", values)
            if not tracks.all():
                nan = b.op("And", nan, _take(b, tracks_c, state))
            cond = b.op("Or", cond, nan)
        state = _take(b, following, b.op("Add", state, b.cast(cond, 7)))
    return _leaf_scores(b, ens, state, aggregate, need_has)


def _leaf_cells(b: Body, slot: str, c: int) -> str:
    """The flat positions ``[1, N * T * C]`` of leaves ``slot`` (``[1, N * T]``) in a
    flattened ``[L, C]`` table: ``slot * C + k`` for each ``k < C``."""
    if c == 1:
        return slot
    return b.reshape(b.op("Add", b.op("Mul", b.reshape(slot, [-1, 1]), b.const(
        np.array(c, np.int64))), b.const(np.arange(c, dtype=np.int64)[None, :])), [1, -1])


def _per_leaf(b: Body, table: np.ndarray, cells: str, trees: int, dtype) -> str:
    """``table`` (``[L, C]``) at the leaf positions ``cells`` (:func:`_leaf_cells`) as
    ``[N, T, C]``, by ``GatherElements`` on the flattened table."""
    flat = b.const(table.reshape(1, -1), dtype)
    return b.reshape(_take(b, flat, cells), [-1, trees, table.shape[1]])


def _leaf_scores(b: Body, ens, state: str, aggregate: str, need_has: bool):
    """The trees' aggregated leaf weights ``[N, C]`` (and which targets a leaf scored) from
    the leaf each tree reached (``state``: ``[1, N * T]`` twice the node numbers,
    row-major)."""
    dt = _np(ens)
    n = len(ens.kind)
    leaves = [i for i, k in enumerate(ens.kind) if k == 0]
    row = np.zeros(n, np.int64)
    row[leaves] = np.arange(len(leaves))
    c = ens.n_out
    weights = np.zeros((len(leaves), c), dt)
    present = np.zeros((len(leaves), c), bool)
    for j, leaf in enumerate(leaves):
        for target, w in ens.weights[leaf].items():
            weights[j, target] = w
            present[j, target] = True
    slot = _take(b, b.const(np.repeat(row, 2)[None, :]), state)  # [1, N * T]
    cells = _leaf_cells(b, slot, c)
    per = _per_leaf(b, weights, cells, ens.n_trees, dt)  # [N, T, C]
    has = None
    if aggregate in ("MIN", "MAX") or need_has:
        seen = _per_leaf(b, present, cells, ens.n_trees, np.bool_)
        if need_has:
            has = b.cast(b.reduce_max(b.cast(seen, 6), [1], keepdims=0), 9)
    if aggregate in ("MIN", "MAX"):
        fill = np.inf if aggregate == "MIN" else -np.inf
        per = b.op("Where", seen, per, b.const(np.array(fill, dt), dt))
        return b.reduce("ReduceMin" if aggregate == "MIN" else "ReduceMax", per, [1],
                        keepdims=0), has
    return b.reduce_sum(per, [1], keepdims=0), has
