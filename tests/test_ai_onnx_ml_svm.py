"""Property-based tests (Hypothesis) of the SVM bodies (``rewriter_plugins.ai_onnx_ml.svm``)
against onnxruntime's own ``SVMClassifier`` and ``SVMRegressor`` kernels, over random
machines: every kernel type, libsvm (one-vs-one votes, with and without Platt
probabilities) and liblinear forms, two to five classes, int64 or string labels, every
``post_transform`` the kernel defines there, float, double and integer ``X``, NaN rows; the
regressor with and without support vectors, ``one_class``. The body runs on onnxruntime
with only standard ops.

Bounded for CI (``SVM_EXAMPLES``, default 25 per property, no example database).
"""

from __future__ import annotations

import os

import numpy as np
import onnx
import onnx.inliner
import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper
from rewriter_plugins.ai_onnx_ml import svm

from rewriter.plugin import DecompositionContext

ort = pytest.importorskip("onnxruntime")

EXAMPLES = int(os.environ.get("SVM_EXAMPLES", "25"))
BOUNDED = settings(max_examples=EXAMPLES, deadline=None, database=None,
                   suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
TRANSFORMS = ("NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO", "PROBIT")
NEAR_ZERO = 1e-4  # a pair score this close to 0 may vote either way in float32


def _values(draw, count: int, low: float, high: float) -> list[float]:
    return draw(st.lists(st.floats(low, high, width=32), min_size=count, max_size=count))


def _model(op: str, attributes: dict, x: np.ndarray, outputs) -> onnx.ModelProto:
    node = helper.make_node(op, ["X"], [n for n, _ in outputs], domain="ai.onnx.ml",
                            **attributes)
    graph = helper.make_graph([node], "svm", [helper.make_tensor_value_info(
        "X", helper.np_dtype_to_tensor_dtype(x.dtype), list(x.shape))],
        [helper.make_tensor_value_info(n, t, None) for n, t in outputs])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("ai.onnx.ml", 1)])
    model.ir_version = 10
    return model


BUILDERS = {"SVMClassifier": svm.build_svm_classifier, "SVMRegressor": svm.build_svm_regressor}


def _lowered(model: onnx.ModelProto, builders=None) -> onnx.ModelProto:
    """``model`` with every SVM node replaced by its body (inlined; ``builders``: by op type,
    default :data:`BUILDERS`). The SVM nodes read graph inputs (a single-node model,
    skl2onnx's exports)."""
    builders = {**BUILDERS, **(builders or {})}
    inputs = {i.name: i.type for i in model.graph.input}
    opsets = {o.domain: o.version for o in model.opset_import}
    functions, nodes = [], []
    for node in model.graph.node:
        if node.domain != "ai.onnx.ml" or node.op_type not in builders:
            nodes.append(node)
            continue
        x = inputs[node.input[0]]
        type_name = helper.tensor_dtype_to_np_dtype(x.tensor_type.elem_type).name
        type_name = {"float32": "float", "float64": "double"}.get(type_name, type_name)
        ctx = DecompositionContext(node, opsets[""], opsets, [f"tensor({type_name})"],
                                   declared={node.input[0]: x})
        fn = builders[node.op_type](ctx)
        fn.name = f"{fn.name}_{len(functions)}"
        functions.append(fn)
        nodes.append(helper.make_node(fn.name, list(node.input), list(node.output),
                                      domain=fn.domain))
    graph = helper.make_graph(nodes, "lowered", list(model.graph.input),
                              list(model.graph.output), list(model.graph.initializer))
    lowered = helper.make_model(graph, opset_imports=[
        helper.make_opsetid("", opsets[""]), helper.make_opsetid(functions[0].domain, 1)],
        functions=functions)
    lowered.ir_version = 10
    lowered = onnx.inliner.inline_local_functions(lowered)
    assert not [n for n in lowered.graph.node if n.op_type in BUILDERS]
    return lowered


def _run(model: onnx.ModelProto, x: np.ndarray) -> list:
    options = ort.SessionOptions()
    options.log_severity_level = 4
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    return session.run(None, {model.graph.input[0].name: x})


def _rows(draw, width: int, dtype) -> np.ndarray:
    rows = np.asarray(_values(draw, 6 * width, -2.0, 2.0), np.float64).reshape(6, width)
    if np.dtype(dtype).kind == "f" and draw(st.booleans()):
        rows[draw(st.integers(0, 5)), draw(st.integers(0, width - 1))] = np.nan
    if np.dtype(dtype).kind == "i":
        rows = np.round(rows * 2)
    return rows.astype(dtype)


@st.composite
def kernels(draw) -> dict:
    kernel = draw(st.sampled_from(svm.KERNELS))
    degree = draw(st.sampled_from([0.0, 1.0, 2.0, 3.0, 4.0, 2.5]))
    return {"kernel_type": kernel,
            "kernel_params": [draw(st.floats(0.0625, 1.0, width=32)),
                              draw(st.floats(-1.0, 1.0, width=32)), degree]}


@BOUNDED
@given(data=st.data(), count=st.integers(2, 5), width=st.integers(1, 4),
       proba=st.booleans(), transform=st.sampled_from(TRANSFORMS), strings=st.booleans(),
       dtype=st.sampled_from([np.float32, np.float64, np.int64, np.int32]))
def test_libsvm_classifier_matches_onnxruntime(data, count, width, proba, transform, strings,
                                              dtype):
    if count == 2 and not proba and transform == "PROBIT":
        transform = "NONE"  # (the kernel leaves its second score unwritten: declined)
    per_class = data.draw(st.lists(st.integers(1, 3), min_size=count, max_size=count))
    total, pairs = sum(per_class), count * (count - 1) // 2
    attributes = {**data.draw(kernels()), "vectors_per_class": per_class,
                  "support_vectors": _values(data.draw, total * width, -2.0, 2.0),
                  "coefficients": _values(data.draw, (count - 1) * total, -2.0, 2.0),
                  "rho": _values(data.draw, pairs, -1.0, 1.0), "post_transform": transform}
    if proba:
        attributes["prob_a"] = _values(data.draw, pairs, -4.0, -0.125)
        attributes["prob_b"] = _values(data.draw, pairs, -1.0, 1.0)
    labels = list(range(3, 3 + count))
    if strings:
        attributes["classlabels_strings"] = [f"c{k}" for k in labels]
    else:
        attributes["classlabels_ints"] = labels
    x = _rows(data.draw, width, dtype)
    outputs = [("label", TensorProto.STRING if strings else TensorProto.INT64),
               ("scores", TensorProto.FLOAT)]
    model = _model("SVMClassifier", attributes, x, outputs)
    expected = _run(model, x)
    got = _run(_lowered(model), x)
    # the pairs' scores themselves (no Platt, no transform): rows where one is near 0 may
    # vote (and so label) either way in float32
    plain = {k: v for k, v in attributes.items() if k not in ("prob_a", "prob_b")}
    pair_scores = np.asarray(_run(_model("SVMClassifier", {**plain, "post_transform": "NONE"},
                                         x, outputs), x)[1])
    clear = ~np.any(np.abs(pair_scores) < NEAR_ZERO, axis=1)
    note(f"expected {expected!r}\ngot {got!r}\npair scores {pair_scores!r}")
    assert got[0].dtype == expected[0].dtype and got[0].shape == expected[0].shape
    assert got[0][clear].tolist() == expected[0][clear].tolist()
    assert got[1].dtype == expected[1].dtype and got[1].shape == expected[1].shape
    np.testing.assert_allclose(got[1][clear], expected[1][clear], rtol=1e-4, atol=1e-5)


def test_softmax_zero_leaves_a_nan_pair_score_out_of_the_max_and_the_sum():
    """A POLY kernel of degree 2.5 on a negative dot product gives NaN pair scores; the
    kernel's SOFTMAX_ZERO keeps those NaN and still normalises the rest (a regression
    Hypothesis found: the max over the row was NaN)."""
    attributes = {"kernel_type": "POLY", "kernel_params": [1.0, 0.0, 2.5],
                  "vectors_per_class": [1, 1, 1], "support_vectors": [-1.0, 1.0, 2.0],
                  "coefficients": [1.0, 0.5, -1.0, 0.25, 1.0, -0.5], "rho": [0.1, 0.2, 0.3],
                  "post_transform": "SOFTMAX_ZERO", "classlabels_ints": [3, 4, 5]}
    x = np.array([[1.0], [-1.0], [0.5]], np.float32)
    outputs = [("label", TensorProto.INT64), ("scores", TensorProto.FLOAT)]
    model = _model("SVMClassifier", attributes, x, outputs)
    expected, got = _run(model, x), _run(_lowered(model), x)
    assert np.isnan(expected[1]).any() and not np.isnan(expected[1]).all()
    np.testing.assert_array_equal(np.isnan(got[1]), np.isnan(expected[1]))
    np.testing.assert_allclose(got[1], expected[1], rtol=1e-5, atol=1e-6)


@BOUNDED
@given(data=st.data(), count=st.integers(2, 4), width=st.integers(1, 4),
       proba=st.booleans(), transform=st.sampled_from(TRANSFORMS),
       positive=st.booleans(), dtype=st.sampled_from([np.float32, np.float64, np.int64]))
def test_liblinear_classifier_matches_onnxruntime(data, count, width, proba, transform,
                                                  positive, dtype):
    low = 0.0 if positive else -2.0
    attributes = {"coefficients": _values(data.draw, count * width, low, 2.0),
                  "rho": _values(data.draw, 1, -1.0, 1.0), "post_transform": transform,
                  "kernel_params": [0.0, 0.0, 0.0], "classlabels_ints": list(range(count))}
    if proba:  # (no support vectors: onnxruntime reads them only to choose the label)
        attributes["prob_a"], attributes["prob_b"] = [-1.0], [0.5]
    x = _rows(data.draw, width, dtype)
    outputs = [("label", TensorProto.INT64), ("scores", TensorProto.FLOAT)]
    model = _model("SVMClassifier", attributes, x, outputs)
    expected = _run(model, x)
    got = _run(_lowered(model), x)
    raw = np.asarray(_run(_model("SVMClassifier", {**attributes, "post_transform": "NONE"}, x,
                                 outputs), x)[1])
    top = np.sort(raw, axis=1)
    # rows whose two highest scores (or the highest and the label's thresholds) nearly tie
    clear = ((top[:, -1] - top[:, -2]) > NEAR_ZERO) & (np.abs(top[:, -1]) > NEAR_ZERO) & (
        np.abs(top[:, -1] - 0.5) > NEAR_ZERO)
    note(f"expected {expected!r}\ngot {got!r}")
    assert got[0][clear].tolist() == expected[0][clear].tolist()
    np.testing.assert_allclose(got[1], expected[1], rtol=1e-4, atol=1e-5)


@BOUNDED
@given(data=st.data(), supports=st.integers(0, 5), width=st.integers(1, 4),
       one_class=st.booleans())
def test_regressor_matches_onnxruntime(data, supports, width, one_class):
    attributes = {**data.draw(kernels()), "n_supports": supports,
                  "coefficients": _values(data.draw, supports or width, -2.0, 2.0),
                  "rho": _values(data.draw, 1, -1.0, 1.0), "one_class": int(one_class)}
    if supports:
        attributes["support_vectors"] = _values(data.draw, supports * width, -2.0, 2.0)
    x = _rows(data.draw, width, np.float32)
    model = _model("SVMRegressor", attributes, x, [("Y", TensorProto.FLOAT)])
    expected = _run(model, x)
    got = _run(_lowered(model), x)
    note(f"expected {expected!r}\ngot {got!r}")
    assert got[0].shape == expected[0].shape and got[0].dtype == expected[0].dtype
    if one_class:
        plain = _run(_model("SVMRegressor", {**attributes, "one_class": 0}, x,
                            [("Y", TensorProto.FLOAT)]), x)[0]
        clear = np.abs(plain) > NEAR_ZERO
        np.testing.assert_array_equal(got[0][clear], expected[0][clear])
    else:
        np.testing.assert_allclose(got[0], expected[0], rtol=1e-4, atol=1e-5)


def test_the_coupling_runs_its_sweeps_on_the_reference_evaluator():
    """The probabilities' ``Loop`` is given its condition: the reference evaluator runs no
    trip of a ``Loop`` whose condition is omitted (its probabilities were then the start,
    1 / C each)."""
    from onnx.reference import ReferenceEvaluator

    rng = np.random.default_rng(3)
    per_class, width = [2, 1, 2, 1], 3
    attributes = {"vectors_per_class": per_class, "kernel_type": "RBF",
                  "kernel_params": [0.5, 0.0, 0.0],
                  "support_vectors": rng.uniform(-1, 1, sum(per_class) * width).tolist(),
                  "coefficients": rng.uniform(-1, 1, 3 * sum(per_class)).tolist(),
                  "rho": rng.uniform(-0.5, 0.5, 6).tolist(),
                  "prob_a": rng.uniform(-3, -1, 6).tolist(),
                  "prob_b": rng.uniform(-0.2, 0.2, 6).tolist(),
                  "classlabels_ints": [0, 1, 2, 3]}
    x = rng.uniform(-1.5, 1.5, (8, width)).astype(np.float32)
    model = _model("SVMClassifier", attributes, x, [("label", TensorProto.INT64),
                                                    ("scores", TensorProto.FLOAT)])
    expected = _run(model, x)
    got = ReferenceEvaluator(_lowered(model)).run(None, {"X": x})
    assert got[0].tolist() == expected[0].tolist()
    assert np.abs(expected[1] - 0.25).max() > 0.05  # (the start is not the answer)
    np.testing.assert_allclose(got[1], expected[1], rtol=1e-5, atol=1e-6)


# -- scikit-learn's SVMs as skl2onnx exports them (the bench-ml extra) --------------------

# (SVC(probability=True) is deprecated from scikit-learn 1.9; its exports are what is tested)
SKLEARN_WARNINGS = pytest.mark.filterwarnings("ignore::FutureWarning")


def _sklearn_data(classes: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import make_classification

    x, y = make_classification(n_samples=60, n_features=4, n_informative=3, n_redundant=0,
                               n_classes=classes, random_state=seed)
    return x.astype(np.float32), y


def _exported(estimator, x: np.ndarray) -> onnx.ModelProto:
    from skl2onnx import to_onnx

    options = {id(estimator): {"zipmap": False}} if hasattr(estimator, "classes_") else None
    return to_onnx(estimator, x[:1], target_opset={"": 17, "ai.onnx.ml": 1},
                   options=options)


@SKLEARN_WARNINGS
@pytest.mark.parametrize("classes", [2, 3])
@pytest.mark.parametrize("probability", [False, True])
@pytest.mark.parametrize("kernel", ["linear", "rbf", "poly", "sigmoid"])
def test_sklearn_svc_export_lowered_matches_onnxruntime_and_sklearn(kernel, probability,
                                                                    classes):
    pytest.importorskip("sklearn")
    pytest.importorskip("skl2onnx")
    from sklearn.svm import SVC

    x, y = _sklearn_data(classes, seed=classes)
    svc = SVC(kernel=kernel, probability=probability, random_state=0).fit(x, y)
    model = _exported(svc, x)
    assert "SVMClassifier" in {n.op_type for n in model.graph.node}
    lowered = _lowered(model)
    expected, got = _run(model, x), _run(lowered, x)
    assert got[0].tolist() == expected[0].tolist()
    np.testing.assert_allclose(got[1], expected[1], rtol=1e-5, atol=1e-5)
    assert got[0].tolist() == svc.predict(x).tolist()
    if probability:  # libsvm's own coupling, in double: onnxruntime's float32 is this close
        np.testing.assert_allclose(got[1], svc.predict_proba(x), atol=1e-4)


@SKLEARN_WARNINGS
def test_sklearn_svc_string_labels_lowered():
    pytest.importorskip("sklearn")
    pytest.importorskip("skl2onnx")
    from sklearn.svm import SVC

    for classes, probability in [(2, False), (3, True)]:
        x, y = _sklearn_data(classes, seed=7)
        names = np.array(["no", "yes", "maybe"])[:classes]
        svc = SVC(probability=probability, random_state=0).fit(x, names[y])
        model = _exported(svc, x)
        expected, got = _run(model, x), _run(_lowered(model), x)
        assert got[0].tolist() == expected[0].tolist() == svc.predict(x).tolist()
        np.testing.assert_allclose(got[1], expected[1], rtol=1e-5, atol=1e-5)


@SKLEARN_WARNINGS
@pytest.mark.parametrize("kernel", ["linear", "rbf", "poly", "sigmoid"])
def test_sklearn_svr_and_one_class_exports_lowered(kernel):
    pytest.importorskip("sklearn")
    pytest.importorskip("skl2onnx")
    from sklearn.datasets import make_regression
    from sklearn.svm import SVR, OneClassSVM

    x, y = make_regression(n_samples=60, n_features=4, noise=0.1, random_state=2)
    x = x.astype(np.float32)
    for estimator, target in [(SVR(kernel=kernel), y), (OneClassSVM(kernel=kernel, nu=0.2),
                                                        None)]:
        estimator.fit(x, target)
        model = _exported(estimator, x)
        assert "SVMRegressor" in {n.op_type for n in model.graph.node}
        expected, got = _run(model, x), _run(_lowered(model), x)
        for g, e in zip(got, expected):
            assert g.dtype == e.dtype and g.shape == e.shape
            np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-4)
        if target is None:
            assert got[0].ravel().tolist() == estimator.predict(x).tolist()
            np.testing.assert_allclose(got[1].ravel(), estimator.decision_function(x),
                                       rtol=1e-4, atol=1e-4)
        else:
            np.testing.assert_allclose(got[0].ravel(), estimator.predict(x), rtol=1e-4,
                                       atol=1e-3)


@SKLEARN_WARNINGS
def test_reference_target_rescues_the_evaluators_svc_probabilities():
    """The reference evaluator's multiclass Platt probabilities are not onnxruntime's (nor
    scikit-learn's): ``rewrite --target reference`` finds it computes differently and the
    decomposition, run on the evaluator, is verified."""
    pytest.importorskip("sklearn")
    pytest.importorskip("skl2onnx")
    from onnx.reference import ReferenceEvaluator
    from sklearn.svm import SVC

    from rewriter.api import rewrite

    x, y = _sklearn_data(3, seed=3)
    svc = SVC(probability=True, random_state=0).fit(x, y)
    model = _exported(svc, x)
    feeds = {"X": x[:20]}
    original = ReferenceEvaluator(model).run(None, feeds)
    assert np.abs(original[1] - svc.predict_proba(x[:20])).max() > 1e-2
    result = rewrite(model, ["reference"], compare_options={"inputs": feeds})
    assert result.report.verdict == "verified", result.report.verification
    assert "SVMClassifier" not in {n.op_type for n in result.model.graph.node}
    got = ReferenceEvaluator(result.model).run(None, feeds)
    assert got[0].tolist() == svc.predict(x[:20]).tolist()
    np.testing.assert_allclose(got[1], svc.predict_proba(x[:20]), atol=1e-4)


@pytest.mark.slow  # (~8 s: tract optimizes the ~9,000 nodes)
@SKLEARN_WARNINGS
def test_sklearn_svc_probabilities_unrolled_run_on_tract():
    """The Loop-free body (every sweep in the graph) equals onnxruntime's kernel, on
    onnxruntime and on tract (which refuses the ``Loop``)."""
    pytest.importorskip("sklearn")
    pytest.importorskip("skl2onnx")
    pytest.importorskip("tract")
    from sklearn.svm import SVC

    from rewriter.testing import run_on

    x, y = _sklearn_data(2, seed=5)
    svc = SVC(probability=True, random_state=0).fit(x, y)
    model = _exported(svc, x)
    unrolled = _lowered(model, {"SVMClassifier": svm.build_svm_classifier_unrolled})
    assert "Loop" not in {n.op_type for n in unrolled.graph.node}
    rows = x[:12]
    expected = _run(model, rows)
    for name, got in [("onnxruntime", _run(unrolled, rows)),
                      ("tract", run_on("tract", unrolled, {"X": rows}))]:
        assert np.asarray(got[0]).tolist() == expected[0].tolist(), name
        np.testing.assert_allclose(np.asarray(got[1]), expected[1], rtol=1e-5, atol=1e-6,
                                   err_msg=name)
