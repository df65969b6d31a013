"""Classical-ML exports on the targets that lack the ai.onnx.ml ops, in the forms producers
write them (built here with onnx's helper, so no producer is needed): a binary tree
classifier tract's loader refuses, LightGBM's ai.onnx opset 8/9, a label cast to int64
that tract types as a shape, CatBoost's regressor declaring ``[N]``, and a
ColumnTransformer-like pipeline whose ML ops have no inferred shapes. Each rewritten result
runs on the target's own runtime and matches onnxruntime's run of the original."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from rewriter.api import rewrite

T = TensorProto
X = np.random.default_rng(0).normal(size=(16, 5)).astype(np.float32)
X[::4, 1] = np.nan  # the imputer's missing values


def _runtime(target: str) -> None:
    if target == "tract":
        pytest.importorskip("tract")
    else:
        pytest.importorskip("openvino")


def _tree() -> dict:
    """One tree: ``x0 <= 0.5`` goes to leaf 1, else leaf 2."""
    return dict(nodes_treeids=[0, 0, 0], nodes_nodeids=[0, 1, 2], nodes_featureids=[0, 0, 0],
                nodes_values=[0.5, 0.0, 0.0], nodes_modes=["BRANCH_LEQ", "LEAF", "LEAF"],
                nodes_truenodeids=[1, 0, 0], nodes_falsenodeids=[2, 0, 0],
                nodes_missing_value_tracks_true=[0, 0, 0], nodes_hitrates=[1.0, 1.0, 1.0])


def _model(nodes, outputs, opset: int | None = 17, initializer=()) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "ml", [helper.make_tensor_value_info("X", T.FLOAT,
                                                                          [None, 5])],
                              outputs, initializer=list(initializer))
    imports = [helper.make_opsetid("ai.onnx.ml", 1)]
    if opset is not None:
        imports.append(helper.make_opsetid("", opset))
    model = helper.make_model(graph, opset_imports=imports)
    model.ir_version = 8 if opset is not None else 3
    return model


def _classifier(opset: int = 17, classes: int = 2, label_cast: bool = False
                ) -> onnx.ModelProto:
    """Two classes: skl2onnx's binary GradientBoostingClassifier form (one score, class
    0's weights, one base value, LOGISTIC); three: LightGBM's (a score per class, SOFTMAX),
    whose export casts the label to int64 (at ai.onnx opset 9)."""
    if classes == 2:
        attributes = {"class_treeids": [0, 0], "class_nodeids": [1, 2], "class_ids": [0, 0],
                      "class_weights": [-1.0, 2.0], "post_transform": "LOGISTIC",
                      "base_values": [0.25]}
    else:
        attributes = {"class_treeids": [0] * 6, "class_nodeids": [1, 1, 1, 2, 2, 2],
                      "class_ids": [0, 1, 2] * 2,
                      "class_weights": [0.5, -1.0, 0.25, -0.5, 1.5, 0.75],
                      "post_transform": "SOFTMAX"}
    attributes = {**_tree(), **attributes, "classlabels_int64s": list(range(classes))}
    label = "label0" if label_cast else "label"
    nodes = [helper.make_node("TreeEnsembleClassifier", ["X"], [label, "probabilities"],
                              domain="ai.onnx.ml", **attributes)]
    if label_cast:
        nodes.append(helper.make_node("Cast", [label], ["label"], to=T.INT64))
    return _model(nodes, [
        helper.make_tensor_value_info("label", T.INT64, [None]),
        helper.make_tensor_value_info("probabilities", T.FLOAT, [None, classes])], opset)


def _regressor(opset: int | None, declared) -> onnx.ModelProto:
    attributes = {**_tree(), "target_treeids": [0, 0], "target_nodeids": [1, 2],
                  "target_ids": [0, 0], "target_weights": [-1.0, 2.0], "n_targets": 1}
    return _model([helper.make_node("TreeEnsembleRegressor", ["X"], ["Y"],
                                    domain="ai.onnx.ml", **attributes)],
                  [helper.make_tensor_value_info("Y", T.FLOAT, declared)], opset)


def _pipeline() -> onnx.ModelProto:
    """ArrayFeatureExtractor, Imputer, Scaler, Normalizer, LinearRegressor: onnx infers no
    shape for the ML ops' outputs, so no body downstream knows its input's rank."""
    ml = "ai.onnx.ml"
    nodes = [
        helper.make_node("ArrayFeatureExtractor", ["X", "cols"], ["f"], domain=ml),
        helper.make_node("Imputer", ["f"], ["i"], domain=ml,
                         imputed_value_floats=[0.5, -1.0, 2.0],
                         replaced_value_float=float("nan")),
        helper.make_node("Scaler", ["i"], ["s"], domain=ml, offset=[0.1, 0.2, 0.3],
                         scale=[2.0, 0.5, 1.5]),
        helper.make_node("Normalizer", ["s"], ["n"], domain=ml, norm="L2"),
        helper.make_node("LinearRegressor", ["n"], ["Y"], domain=ml,
                         coefficients=[0.3, -0.7, 1.1], intercepts=[0.2]),
    ]
    cols = numpy_helper.from_array(np.array([0, 1, 2], np.int64), "cols")
    return _model(nodes, [helper.make_tensor_value_info("Y", T.FLOAT, [None, 1])],
                  initializer=[cols])


CASES = {
    # tract's loader wants one base value per class (it refused the node as invalid, though
    # onnx's checker and onnxruntime take it)
    "binary-classifier": (_classifier, "tract", ""),
    # tract types a Cast to int64 as a shape (TDim); CastLike needs opset 15
    "label-cast-opset9": (lambda: _classifier(9, classes=3, label_cast=True), "tract",
                          "raised from 9 to 15"),
    # the tree bodies need ai.onnx 11
    "regressor-opset8": (lambda: _regressor(8, [None, 1]), "openvino", "raised from 8 to 11"),
    # CatBoost: ai.onnx.ml alone, IR 3, its output declared [N] and computed [N, 1]
    "regressor-declared-rank-1": (lambda: _regressor(None, [None]), "openvino",
                                  "declared as onnx infers it"),
    "pipeline-openvino": (_pipeline, "openvino", ""),
    "pipeline-tract": (_pipeline, "tract", ""),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_classical_ml_form_runs_on_the_target_with_onnxruntimes_numbers(name, tmp_path):
    build, target, repair = CASES[name]
    _runtime(target)
    import onnxruntime as ort

    model = build()
    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    result = rewrite(str(path), [target], output=tmp_path / "out.onnx")
    report = result.report
    assert report.verdict == "verified", report.verdict_reason
    assert not repair or any(repair in r for r in report.repairs), report.repairs
    want = ort.InferenceSession(str(path)).run(None, {"X": X})
    if target == "tract":
        from rewriter_plugins.tract_target.runtime import runnable

        got = [np.asarray(v.to_numpy()) for v in runnable(
            None, {"X": X}, path=str(tmp_path / "out.onnx")).run([X])]
    else:
        import openvino as ov

        compiled = ov.Core().compile_model(ov.Core().read_model(str(tmp_path / "out.onnx")),
                                           "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
        outputs = compiled([X])
        got = [outputs[i] for i in range(len(want))]
    for w, g in zip(want, got, strict=True):
        np.testing.assert_allclose(np.asarray(g, w.dtype).reshape(w.shape), w, rtol=1e-5,
                                   atol=1e-6)


def _double_regressor() -> onnx.ModelProto:
    """skl2onnx 1.20's float64 forest: ml opset 1 (float thresholds and weights), X and Y
    declared double; onnxruntime refuses it (the op's Y is float), the reference evaluator
    computes it in double."""
    attributes = {**_tree(), "target_treeids": [0, 0], "target_nodeids": [1, 2],
                  "target_ids": [0, 0], "target_weights": [0.1, 0.3], "n_targets": 1,
                  "nodes_values": [0.3, 0.0, 0.0]}
    graph = helper.make_graph(
        [helper.make_node("TreeEnsembleRegressor", ["X"], ["Y"], domain="ai.onnx.ml",
                          **attributes)], "ml",
        [helper.make_tensor_value_info("X", T.DOUBLE, [None, 5])],
        [helper.make_tensor_value_info("Y", T.DOUBLE, [None, 1])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("ai.onnx.ml", 1),
                                                   helper.make_opsetid("", 17)])


@pytest.mark.parametrize("target", ["onnxruntime", "tract", "openvino"])
def test_a_forest_declared_double_runs_and_keeps_its_double_numbers(target, tmp_path):
    """The tree body keeps the sums in double where the producer declares Y double, so the
    result matches the one runtime that runs the original (the reference evaluator), in the
    declared type; onnxruntime's own load of the original fails."""
    if target != "onnxruntime":
        _runtime(target)
    import onnxruntime as ort
    from onnx.reference import ReferenceEvaluator

    path, out = tmp_path / "model.onnx", tmp_path / "out.onnx"
    onnx.save(_double_regressor(), path)
    with pytest.raises(Exception, match="does not match expected type"):
        ort.InferenceSession(str(path))
    report = rewrite(str(path), [target], output=out).report
    assert report.verdict == "verified", report.verdict_reason
    x = np.array([[0.3, 0, 0, 0, 0], [0.30000001, 0, 0, 0, 0], [np.nan, 1, 2, 3, 4]])
    want = ReferenceEvaluator(str(path)).run(None, {"X": x})[0]
    got = ort.InferenceSession(str(out)).run(None, {"X": x})[0]
    assert got.dtype == np.float64
    np.testing.assert_array_equal(got, want)  # 0.1 and 0.3 as float32 values, in double
    if target == "openvino":
        assert "openvino computes float64 in float32" in report.comparison.summary()
