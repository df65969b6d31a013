"""QOperator models (``quantize_static(..., quant_format=QuantFormat.QOperator)``) rewritten
for targets without the QLinear ops: the com-microsoft plugin's DequantizeLinear -> float
op -> QuantizeLinear bodies (``plugins/com_microsoft/qoperator/``; per-op oracle checks:
``tests/test_oracles.py``), verified end to end against onnxruntime's own kernels."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from rewriter.api import rewrite
from rewriter.manager import load_plugins

pytest.importorskip("onnxruntime")
quantization = pytest.importorskip("onnxruntime.quantization")

QLINEAR_OPS = {"QLinearConv", "QLinearAdd", "QLinearMul", "QLinearSigmoid", "QLinearLeakyRelu",
               "QLinearAveragePool", "QLinearConcat", "QLinearGlobalAveragePool", "QGemm",
               "QLinearSoftmax"}


@pytest.fixture(scope="module")
def plugins():
    return load_plugins()


def _float_cnn() -> tuple:
    """A small CNN whose QOperator form holds ten QLinear ops (three convolutions, a residual
    Add, LeakyRelu, Sigmoid * x, average and max pools, Concat, a global pool, Gemm,
    Softmax)."""
    rng = np.random.default_rng(0)

    def weight(name, shape, spread=0.3):
        return numpy_helper.from_array((rng.standard_normal(shape) * spread).astype(np.float32),
                                       name)

    initializers = [weight("c1w", [8, 3, 3, 3]), weight("c1b", [8], 0.1),
                    weight("c2w", [8, 8, 3, 3], 0.15), weight("c2b", [8], 0.1),
                    weight("c3w", [8, 4, 3, 3], 0.2), weight("c3b", [8], 0.1),
                    weight("fw", [16, 10]), weight("fb", [10], 0.1),
                    numpy_helper.from_array(np.array([1, -1], np.int64), "shape")]
    node = helper.make_node
    nodes = [node("Conv", ["x", "c1w", "c1b"], ["c1"], pads=[1, 1, 1, 1]),
             node("Relu", ["c1"], ["r1"]),
             node("Conv", ["r1", "c2w", "c2b"], ["c2"], pads=[1, 1, 1, 1]),
             node("Add", ["c2", "r1"], ["a1"]),
             node("LeakyRelu", ["a1"], ["l1"], alpha=0.1),
             node("Conv", ["l1", "c3w", "c3b"], ["c3"], pads=[1, 1, 1, 1], group=2,
                  strides=[2, 2]),
             node("Sigmoid", ["c3"], ["s1"]),
             node("Mul", ["c3", "s1"], ["m1"]),
             node("AveragePool", ["m1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
             node("MaxPool", ["m1"], ["p2"], kernel_shape=[2, 2], strides=[2, 2]),
             node("Concat", ["p1", "p2"], ["cat"], axis=1),
             node("GlobalAveragePool", ["cat"], ["g"]),
             node("Reshape", ["g", "shape"], ["flat"]),
             node("Gemm", ["flat", "fw", "fb"], ["logits"]),
             node("Softmax", ["logits"], ["y"], axis=-1)]
    graph = helper.make_graph(
        nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])], initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), rng


def _qoperator_cnn(tmp_path, per_channel: bool, activations: str, weights: str):
    import onnx

    model, rng = _float_cnn()
    source, target = tmp_path / "float.onnx", tmp_path / "qoperator.onnx"
    onnx.save(model, source)

    class Calibration(quantization.CalibrationDataReader):
        def __init__(self):
            self.feeds = iter([{"x": rng.standard_normal([1, 3, 16, 16]).astype(np.float32)}
                               for _ in range(8)])

        def get_next(self):
            return next(self.feeds, None)

    quantization.quantize_static(
        str(source), str(target), Calibration(), quant_format=quantization.QuantFormat.QOperator,
        per_channel=per_channel, activation_type=getattr(quantization.QuantType, activations),
        weight_type=getattr(quantization.QuantType, weights))
    return onnx.load(target)


FORMS = [(False, "QUInt8", "QInt8"), (False, "QInt8", "QInt8"), (False, "QUInt8", "QUInt8"),
         (True, "QUInt8", "QInt8"), (True, "QInt8", "QInt8")]


@pytest.mark.parametrize("per_channel,activations,weights", FORMS)
@pytest.mark.parametrize("target", ["opset:17", "reference", "openvino"])
def test_qoperator_cnn_is_verified(tmp_path, plugins, target, per_channel, activations,
                                   weights):
    if target == "openvino":
        pytest.importorskip("openvino")
        if per_channel:
            pytest.xfail("OpenVINO 2026.4 runs a per-channel QLinearConv (8 in, 8 out channels) "
                         "natively and computes it otherwise than onnxruntime (up to 162 units "
                         "off); no finding for that form yet")
    model = _qoperator_cnn(tmp_path, per_channel, activations, weights)
    assert QLINEAR_OPS <= {n.op_type for n in model.graph.node}
    result = rewrite(model, [target], plugins=plugins)
    assert result.report.verdict == "verified", result.report.verification
    if target != "openvino":  # OpenVINO keeps the forms it computes as onnxruntime does
        left = {n.op_type for n in result.model.graph.node if n.domain == "com.microsoft"}
        assert not left, left  # QLinearConv/QLinearMatMul are ai.onnx ops: kept at opset 17
