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

import numpy as np
from onnx import FunctionProto

from rewriter.plugin import Arg, Declined, OpSample

from . import tree_strategies
from ._common import (
    DOMAIN,
    DOUBLE,
    FLOAT,
    INT64,
    Body,
    body_opset,
    declared_elem,
    features_rank,
    input_elem,
    logistic,
    make_string_const,
    post_transform,
    probit,
    text,
    texts,
)
from .tree_ensembles import (
    AGGREGATES_V5,
    Ensemble,
    combine_leaf_weights,
    float_or_tensor_attribute,
    read_ensemble_v1,
    read_ensemble_v5,
)

# -- the scores after the trees ------------------------------------------------------------


def _regression_scores(b: Body, ens: Ensemble, scores: str, has: str | None, aggregate: str,
                       base: np.ndarray, transform: str, out: int = FLOAT) -> str:
    """The regressor's ``FinalizeScores`` (onnxruntime 1.32): float32 ``[N, n_targets]``.
    ``out`` DOUBLE (a producer declaring the output double, which skl2onnx does for a double
    forest at ml opset 1, a model onnxruntime refuses and the reference evaluator computes in
    double): double sums are kept without rounding them to float32 (a post transform is
    computed in float32 and widened)."""
    acc = ens.compare
    keep = out == DOUBLE and acc == DOUBLE
    if ens.n_out == 1:
        origin = float(base[0]) if len(base) == 1 else 0.0
        y = scores
        if aggregate == "AVERAGE":
            y = b.op("Div", y, b.scalar_like(float(ens.n_trees), acc))
        y = b.op("Add", y, b.scalar_like(origin, acc))
        if keep and transform != "PROBIT":
            return y
        y = b.cast(y, FLOAT) if acc != FLOAT else y
        y = probit(b, y) if transform == "PROBIT" else y
        return b.cast(y, out) if out != FLOAT else y
    y = scores
    if aggregate == "AVERAGE":
        y = b.op("Div", y, b.scalar_like(float(ens.n_trees), acc))
    if len(base) == ens.n_out:
        y = b.op("Add", y, b.floats(base, acc))
    if has is not None:  # a target no leaf of the row scored stays 0 (base value or not)
        y = b.op("Where", has, y, b.scalar_like(0.0, acc))
    if keep and transform == "NONE":
        return y
    y = b.cast(y, FLOAT) if acc != FLOAT else y
    y = post_transform(b, y, transform)
    return b.cast(y, out) if out != FLOAT else y


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
    ens, base = read_ensemble_v1(ctx, "target", n_out, single_first=n_out == 1)
    aggregate = text(ctx.attribute("aggregate_function"), "SUM")
    transform = text(ctx.attribute("post_transform"), "NONE")
    if aggregate not in AGGREGATES_V5:
        raise Declined(f"unknown aggregate_function {aggregate!r}")
    combine_leaf_weights(ens, aggregate)
    b = Body(body_opset(ctx))
    scores, has, note = _lower(b, ens, _x_rows(b, ctx, ens), aggregate,
                               n_out > 1 and not ens.presence()[0].all(), strategy)
    out = declared_elem(ctx, node.output[0])
    y = _regression_scores(b, ens, scores, has, aggregate, base, transform,
                           out if out == DOUBLE else FLOAT)
    fn = b.function(DOMAIN, "tree_ensemble_regressor", ["X"], [y])
    _note(fn, note)
    return fn


def build_tree_ensemble(ctx, strategy: str | None = None) -> FunctionProto:
    """The body of the node (``strategy``: ``gemm`` or ``traversal`` instead of the cost
    model's choice)."""
    node = ctx.node
    if len(node.output) != 1:
        raise Declined("TreeEnsemble has one output")
    ens, aggregate, transform, elem = read_ensemble_v5(ctx)
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
    ens, base = read_ensemble_v1(ctx, "class", n_out, single_first=False)
    combine_leaf_weights(ens, "SUM")
    transform = text(ctx.attribute("post_transform"), "NONE")
    class_ids = list(ctx.attribute("class_ids", []) or [])
    raw_weights = float_or_tensor_attribute(ctx, "class_weights")
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
