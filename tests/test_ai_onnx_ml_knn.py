"""A k-NN classifier as skl2onnx exports it (``Normalizer``, a ``Scan`` over the rows whose
body measures squared distances with ``ReduceSumSquare``, ``TopK``, ``ArrayFeatureExtractor``
of the training labels) rewritten for ``opset:13``: the ``Scan`` is lowered to a ``Loop``
and the ``ReduceSumSquare``-18 inside its body converted in the same rewrite. Both were once
chosen in one round, and the body call was spliced into the ``Scan``'s body, which the
``Scan``'s own remedy had taken away ("the splice found 0 of 1 calls by identity", exit 2).
The oracle: numpy, written from the ops' definitions."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from rewriter.api import rewrite

ort = pytest.importorskip("onnxruntime")

TRAIN = np.array([[1, 0, 0, 0], [0, 1, 0, 0], [1, 1, 0, 0], [0, 0, 1, 1], [0, 0, 0, 1]],
                 np.float32)
LABELS = np.array([7, 8, 7, 9, 9], np.int64)


def knn_model(opset: int = 22) -> onnx.ModelProto:
    f = TensorProto.FLOAT
    body = helper.make_graph(
        [helper.make_node("Sub", ["state", "row"], ["diff"]),
         helper.make_node("ReduceSumSquare", ["diff", "axes"], ["dist"], keepdims=0),
         helper.make_node("Identity", ["state"], ["state_out"])],
        "distances",
        [helper.make_tensor_value_info("state", f, [5, 4]),
         helper.make_tensor_value_info("row", f, [4])],
        [helper.make_tensor_value_info("state_out", f, [5, 4]),
         helper.make_tensor_value_info("dist", f, [5])],
        initializer=[numpy_helper.from_array(np.array([1], np.int64), "axes")])
    nodes = [
        helper.make_node("Normalizer", ["X"], ["Xn"], domain="ai.onnx.ml", norm="L2"),
        helper.make_node("Scan", ["train", "Xn"], ["train_out", "D"], body=body,
                         num_scan_inputs=1),
        helper.make_node("Neg", ["D"], ["negD"]),
        helper.make_node("TopK", ["negD", "k"], ["values", "indices"]),
        helper.make_node("ArrayFeatureExtractor", ["labels", "indices"], ["near"],
                         domain="ai.onnx.ml"),
        helper.make_node("Reshape", ["near", "shape"], ["Y"]),
    ]
    graph = helper.make_graph(
        nodes, "knn", [helper.make_tensor_value_info("X", f, [None, 4])],
        [helper.make_tensor_value_info("Y", TensorProto.INT64, [None, 3]),
         helper.make_tensor_value_info("D", f, [None, 5])],
        initializer=[numpy_helper.from_array(TRAIN, "train"),
                     numpy_helper.from_array(LABELS, "labels"),
                     numpy_helper.from_array(np.array([3], np.int64), "k"),
                     numpy_helper.from_array(np.array([-1, 3], np.int64), "shape")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset),
                                                    helper.make_opsetid("ai.onnx.ml", 1)])
    model.ir_version = 10
    onnx.checker.check_model(model, full_check=True)
    return model


def _numpy_knn(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    norm = np.sqrt((x.astype(np.float64) ** 2).sum(axis=1, keepdims=True))
    xn = x / norm
    dist = ((TRAIN[None, :, :] - xn[:, None, :]) ** 2).sum(axis=2)
    order = np.argsort(dist, axis=1, kind="stable")[:, :3]
    return LABELS[order], dist


def test_knn_rewrites_for_opset_13_and_computes_the_neighbours():
    x = np.array([[1.0, 0.1, 0.0, 0.0], [0.0, 0.0, 2.0, 2.1], [0.2, 3.0, 0.1, 0.0]],
                 np.float32)
    result = rewrite(knn_model(), ["opset:13"], confirm=False, verify=False)
    model = result.model
    onnx.checker.check_model(model, full_check=True)
    assert max(o.version for o in model.opset_import if o.domain in ("", "ai.onnx")) <= 13
    ops = {n.op_type for n in model.graph.node}
    assert "Scan" not in ops and "Loop" in ops, ops
    labels, dist = _numpy_knn(x)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    got_labels, got_dist = session.run(None, {"X": x})
    np.testing.assert_allclose(got_dist, dist, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(got_labels, labels)
