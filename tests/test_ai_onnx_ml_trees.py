"""Property-based tests (Hypothesis) of the tree lowering (``rewriter_plugins.ai_onnx_ml``,
``trees`` and ``tree_strategies``) against onnxruntime's own tree kernels, over random
ensembles: every node mode (set membership for ``TreeEnsemble``-5), NaN inputs with and
without ``missing_value_tracks_true``, every ``post_transform``, every aggregate, base values,
two and more classes (the binary special cases), thresholds and weights on a coarse grid so
that inputs fall on thresholds and classes tie. Each ensemble is lowered by each strategy
(``gemm``, ``traversal``) and run on onnxruntime with only standard ops.

Bounded for CI (``TREE_EXAMPLES``, default 30 per property, no example database); the
``slow`` variants draw bigger ensembles.
"""

from __future__ import annotations

import os

import numpy as np
import onnx
import onnx.inliner
import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper
from rewriter_plugins.ai_onnx_ml import tree_strategies, trees

from rewriter.plugin import DecompositionContext

ort = pytest.importorskip("onnxruntime")

EXAMPLES = int(os.environ.get("TREE_EXAMPLES", "30"))
BOUNDED = settings(max_examples=EXAMPLES, deadline=None, database=None,
                   suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
HEAVY = settings(max_examples=max(EXAMPLES // 3, 5), deadline=None, database=None,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
STRATEGIES = ("gemm", "traversal")
MODES = ("BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ")
GRID = (-1.0, -0.5, 0.0, 0.5, 1.0)
FEATURES = 3


@st.composite
def tree_shapes(draw, max_depth: int) -> list:
    """One tree as nested tuples: ("leaf",) or (mode, feature, value, track, true, false)."""
    def grow(depth):
        if depth >= max_depth or (depth > 0 and draw(st.booleans())):
            return ("leaf",)
        return (draw(st.sampled_from(MODES)), draw(st.integers(0, FEATURES - 1)),
                draw(st.sampled_from(GRID)), draw(st.booleans()), grow(depth + 1),
                grow(depth + 1))
    return grow(0)


def _flatten(tree) -> list:
    """Nodes in pre-order: (mode, feature, value, track, true index, false index)."""
    out = []

    def visit(node) -> int:
        i = len(out)
        out.append(None)
        if node[0] == "leaf":
            out[i] = ("LEAF", 0, 0.0, False, 0, 0)
        else:
            t, f = visit(node[4]), visit(node[5])
            out[i] = (node[0], node[1], node[2], node[3], t, f)
        return i
    visit(tree)
    return out


@st.composite
def ensembles(draw, n_out: int, max_trees: int = 3, max_depth: int = 3,
              weight_prefix: str = "target") -> dict:
    """The attributes of a TreeEnsembleRegressor/Classifier (ml opset 1)."""
    a: dict[str, list] = {k: [] for k in (
        "nodes_treeids", "nodes_nodeids", "nodes_featureids", "nodes_modes", "nodes_values",
        "nodes_truenodeids", "nodes_falsenodeids", "nodes_missing_value_tracks_true")}
    w: dict[str, list] = {f"{weight_prefix}_{k}": [] for k in ("treeids", "nodeids", "ids",
                                                               "weights")}
    one_class = n_out == 2 and draw(st.booleans())  # the binary case: one class id
    for t in range(draw(st.integers(1, max_trees))):
        for i, (mode, feat, value, track, true, false) in enumerate(
                _flatten(draw(tree_shapes(max_depth)))):
            for key, v in zip(a, (t, i, feat, mode, value, true, false, int(track))):
                a[key].append(v)
            if mode != "LEAF":
                continue
            targets = [1] if one_class else draw(st.lists(
                st.integers(0, n_out - 1), min_size=1, max_size=n_out, unique=True))
            for target in targets:
                for key, v in zip(w, (t, i, target, draw(st.sampled_from(
                        (-0.75, -0.25, 0.0, 0.25, 0.5, 1.0))))):
                    w[key].append(v)
    return {**a, **w}


def _rows(draw, n: int = 6) -> np.ndarray:
    values = draw(st.lists(st.sampled_from(GRID + (0.25, -0.75, 2.0, float("nan"))),
                           min_size=n * FEATURES, max_size=n * FEATURES))
    return np.asarray(values, np.float64).reshape(n, FEATURES)


def _model(op: str, attributes: dict, x: np.ndarray, outputs, ml: int = 1) -> onnx.ModelProto:
    elem = helper.np_dtype_to_tensor_dtype(x.dtype)
    node = helper.make_node(op, ["X"], [name for name, _ in outputs], domain="ai.onnx.ml",
                            **attributes)
    graph = helper.make_graph([node], "trees", [helper.make_tensor_value_info(
        "X", elem, list(x.shape))], [helper.make_tensor_value_info(n, t, None)
                                     for n, t in outputs])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("ai.onnx.ml", ml)])
    model.ir_version = 10
    return model


def _lowered(model: onnx.ModelProto, builder, strategy: str) -> onnx.ModelProto:
    """The model with its node replaced by the body ``builder`` writes (inlined)."""
    node = model.graph.node[0]
    x = model.graph.input[0]
    elem = x.type.tensor_type.elem_type
    ctx = DecompositionContext(node, 17, {"": 17, "ai.onnx.ml": model.opset_import[1].version},
                               [f"tensor({helper.tensor_dtype_to_np_dtype(elem).name})"
                                .replace("float32", "float").replace("float64", "double")],
                               declared={"X": x.type})
    fn = builder(ctx, strategy)
    call = helper.make_node(fn.name, list(node.input), list(node.output), domain=fn.domain)
    graph = helper.make_graph([call], "lowered", list(model.graph.input),
                              [helper.make_tensor_value_info(o.name, o.type.tensor_type
                                                             .elem_type, None)
                               for o in model.graph.output])
    lowered = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                      helper.make_opsetid(fn.domain, 1)],
                                functions=[fn])
    lowered.ir_version = 10
    lowered = onnx.inliner.inline_local_functions(lowered)
    assert all(n.domain in ("", "ai.onnx") for n in lowered.graph.node)
    return lowered


def _run(model: onnx.ModelProto, x: np.ndarray) -> list:
    options = ort.SessionOptions()
    options.log_severity_level = 4
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    return session.run(None, {"X": x})


def _compare(model, builder, x, strategies=STRATEGIES, label_first=False, oracle=None):
    expected = _run(oracle if oracle is not None else model, x)
    for strategy in strategies:
        got = _run(_lowered(model, builder, strategy), x)
        for i, (e, g) in enumerate(zip(expected, got)):
            note(f"{strategy} output {i}: expected {e!r}, got {g!r}")
            assert g.dtype == e.dtype and g.shape == e.shape, (strategy, i, g.dtype, g.shape)
            if label_first and i == 0:
                np.testing.assert_array_equal(g, e, err_msg=strategy)
            else:
                np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-6, err_msg=strategy)


@BOUNDED
@given(data=st.data(), n_targets=st.integers(1, 3),
       aggregate=st.sampled_from(["SUM", "AVERAGE", "MIN", "MAX"]),
       transform=st.sampled_from(["NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO", "PROBIT"]),
       dtype=st.sampled_from([np.float32, np.float64]))
def test_regressor_matches_onnxruntime(data, n_targets, aggregate, transform, dtype):
    attributes = data.draw(ensembles(n_targets))
    attributes.update(n_targets=n_targets, aggregate_function=aggregate,
                      post_transform=transform)
    base = data.draw(st.sampled_from([[], [0.25] * n_targets, [0.5]]))
    if base and (len(base) == n_targets or n_targets == 1):
        attributes["base_values"] = base
    x = _rows(data.draw).astype(dtype)
    if transform == "PROBIT":  # probit of values in (0, 1)
        attributes["target_weights"] = [abs(w) / 8 for w in attributes["target_weights"]]
    model = _model("TreeEnsembleRegressor", attributes, x, [("Y", TensorProto.FLOAT)])
    _compare(model, trees.build_tree_ensemble_regressor, x)


@BOUNDED
@given(data=st.data(), n_classes=st.integers(2, 4),
       transform=st.sampled_from(["NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO", "PROBIT"]),
       dtype=st.sampled_from([np.float32, np.float64, np.int64]), strings=st.booleans())
def test_classifier_matches_onnxruntime(data, n_classes, transform, dtype, strings):
    attributes = data.draw(ensembles(n_classes, weight_prefix="class"))
    labels = list(range(10, 10 + n_classes))
    if strings:
        attributes["classlabels_strings"] = [f"c{k}" for k in labels]
    else:
        attributes["classlabels_int64s"] = labels
    attributes["post_transform"] = transform
    # (onnxruntime 1.32 takes no or one base value per class; two classes with PROBIT and
    # no base values leave the kernel's second score unwritten: not drawn)
    base = data.draw(st.sampled_from([[], [0.25, -0.5, 0.75, 0.0][:n_classes]]))
    if n_classes == 2 and transform == "PROBIT":
        base = [0.25, 0.25]
    if base:
        attributes["base_values"] = base
    x = _rows(data.draw)
    x = np.nan_to_num(x, nan=0.5).astype(dtype) if dtype == np.int64 else x.astype(dtype)
    model = _model("TreeEnsembleClassifier", attributes, x,
                   [("label", TensorProto.STRING if strings else TensorProto.INT64),
                    ("scores", TensorProto.FLOAT)])
    _compare(model, trees.build_tree_ensemble_classifier, x, label_first=True)


def _as_v5(attributes: dict, n_targets: int, members: dict, dtype) -> dict:
    """A TreeEnsemble-5 of the same trees (``members``: node -> set, for member nodes)."""
    trees_ = sorted(set(attributes["nodes_treeids"]))
    branch, leaf_of = [], {}
    for i, mode in enumerate(attributes["nodes_modes"]):
        if mode == "LEAF":
            leaf_of[i] = len(leaf_of)
        else:
            branch.append(i)
    index = {node: k for k, node in enumerate(branch)}
    start = {t: attributes["nodes_treeids"].index(t) for t in trees_}

    def child(t, local):
        g = start[t] + local
        return (leaf_of[g], 1) if g in leaf_of else (index[g], 0)

    modes = ("BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ")
    out = {k: [] for k in ("nodes_featureids", "nodes_truenodeids", "nodes_trueleafs",
                           "nodes_falsenodeids", "nodes_falseleafs",
                           "nodes_missing_value_tracks_true")}
    splits, codes, membership = [], [], []
    for g in branch:
        t = attributes["nodes_treeids"][g]
        out["nodes_featureids"].append(attributes["nodes_featureids"][g])
        for side in ("true", "false"):
            target, is_leaf = child(t, attributes[f"nodes_{side}nodeids"][g])
            out[f"nodes_{side}nodeids"].append(target)
            out[f"nodes_{side}leafs"].append(is_leaf)
        out["nodes_missing_value_tracks_true"].append(
            attributes["nodes_missing_value_tracks_true"][g])
        splits.append(attributes["nodes_values"][g])
        if g in members:
            codes.append(6)
            membership += list(members[g]) + [np.nan]
        else:
            codes.append(modes.index(attributes["nodes_modes"][g]))
    weights = [0.0] * len(leaf_of)
    targets = [0] * len(leaf_of)
    for t, n, k, w in zip(attributes["target_treeids"], attributes["target_nodeids"],
                          attributes["target_ids"], attributes["target_weights"]):
        g = start[t] + n
        if g in leaf_of and weights[leaf_of[g]] == 0.0:
            weights[leaf_of[g]], targets[leaf_of[g]] = w, k
    result = {**out, "tree_roots": [index.get(start[t], 0) for t in trees_],
              "nodes_splits": numpy_helper.from_array(np.asarray(splits, dtype)),
              "nodes_modes": numpy_helper.from_array(np.asarray(codes, np.uint8)),
              "leaf_targetids": targets,
              "leaf_weights": numpy_helper.from_array(np.asarray(weights, dtype)),
              "n_targets": n_targets}
    if membership:
        result["membership_values"] = numpy_helper.from_array(np.asarray(membership, dtype))
    return result


@BOUNDED
@given(data=st.data(), n_targets=st.integers(1, 3), aggregate=st.integers(0, 3),
       transform=st.integers(0, 3), dtype=st.sampled_from([np.float32, np.float64]))
def test_tree_ensemble_5_matches_onnxruntime(data, n_targets, aggregate, transform, dtype):
    attributes = data.draw(ensembles(n_targets))
    # trees whose root is a leaf have no node in TreeEnsemble-5's arrays: give them a branch
    roots = [i for i, t in enumerate(attributes["nodes_treeids"])
             if i == 0 or attributes["nodes_treeids"][i - 1] != t]
    if any(attributes["nodes_modes"][r] == "LEAF" for r in roots):
        return
    branches = [i for i, m in enumerate(attributes["nodes_modes"]) if m != "LEAF"]
    chosen = data.draw(st.lists(st.sampled_from(branches), unique=True, max_size=3))
    # (onnxruntime takes integer set members only)
    members = {g: data.draw(st.lists(st.sampled_from((-1.0, 0.0, 1.0, 2.0)), min_size=1,
                                      max_size=3, unique=True)) for g in chosen}
    v5 = _as_v5(attributes, n_targets, members, dtype)
    v5.update(aggregate_function=aggregate, post_transform=transform)
    # (onnxruntime tests membership on the value cast to an integer: -0.5 is in {0}; the
    # spec compares the value itself: integer inputs, where both agree)
    x = np.floor(_rows(data.draw)).astype(dtype)
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    model = _model("TreeEnsemble", v5, x, [("Y", elem)], ml=5)
    # onnxruntime reads post_transform 1 as LOGISTIC and 2 as SOFTMAX (its own enum's
    # order), the spec 1 as SOFTMAX and 2 as LOGISTIC: the body follows the spec, and is
    # compared with onnxruntime told the other code
    oracle = _model("TreeEnsemble", {**v5, "post_transform": {1: 2, 2: 1}.get(transform,
                                                                               transform)},
                    x, [("Y", elem)], ml=5)
    _compare(model, trees.build_tree_ensemble, x, oracle=oracle)


@pytest.mark.slow
@HEAVY
@given(data=st.data(), n_classes=st.integers(2, 5))
def test_bigger_classifiers_match_onnxruntime(data, n_classes):
    attributes = data.draw(ensembles(n_classes, max_trees=8, max_depth=6,
                                     weight_prefix="class"))
    attributes["classlabels_int64s"] = list(range(n_classes))
    attributes["post_transform"] = "SOFTMAX"
    x = _rows(data.draw, 40).astype(np.float32)
    model = _model("TreeEnsembleClassifier", attributes, x,
                   [("label", TensorProto.INT64), ("scores", TensorProto.FLOAT)])
    _compare(model, trees.build_tree_ensemble_classifier, x, label_first=True)


def test_the_cost_model_names_its_choice_and_prefers_traversal_for_deep_trees():
    """A shallow ensemble is lowered by gemm, a deep one (whose gemm matrices outgrow the
    size bound) by traversal; the note says which and why."""
    def complete(depth):
        if depth == 0:
            return ("leaf",)
        return ("BRANCH_LEQ", depth % FEATURES, 0.5, False, complete(depth - 1),
                complete(depth - 1))

    def ensemble(depth, count):
        a = {k: [] for k in ("nodes_treeids", "nodes_nodeids", "nodes_featureids",
                             "nodes_modes", "nodes_values", "nodes_truenodeids",
                             "nodes_falsenodeids", "nodes_missing_value_tracks_true",
                             "target_treeids", "target_nodeids", "target_ids",
                             "target_weights")}
        for t in range(count):
            for i, (mode, feat, value, _track, true, false) in enumerate(
                    _flatten(complete(depth))):
                for key, v in zip(list(a)[:8], (t, i, feat, mode, value, true, false, 0)):
                    a[key].append(v)
                if mode == "LEAF":
                    for key, v in zip(list(a)[8:], (t, i, 0, 0.5)):
                        a[key].append(v)
        return a

    notes = {}
    for depth in (2, 10):
        attributes = {**ensemble(depth, 4), "n_targets": 1}
        x = np.zeros((2, FEATURES), np.float32)
        model = _model("TreeEnsembleRegressor", attributes, x, [("Y", TensorProto.FLOAT)])
        node = model.graph.node[0]
        ctx = DecompositionContext(node, 17, {"": 17, "ai.onnx.ml": 1}, ["tensor(float)"],
                                   declared={"X": model.graph.input[0].type})
        fn = trees.build_tree_ensemble_regressor(ctx)
        notes[depth] = next(p.value for p in fn.metadata_props if p.key == trees.RULE_NOTE)
    assert notes[2].startswith("gemm:") and "depth 2" in notes[2], notes[2]
    assert notes[10].startswith("traversal:") and "depth 10" in notes[10], notes[10]
    assert tree_strategies.MAX_SIZE_RATIO == 4.0
