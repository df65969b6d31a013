"""16-bit quantization on OpenVINO: the QNN recipe of onnxruntime's quantizer (uint16
activations through com.microsoft QuantizeLinear/DequantizeLinear) rewritten for
``-t openvino`` runs there with onnxruntime's numbers, where the original is far off."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

ov = pytest.importorskip("openvino")
ort = pytest.importorskip("onnxruntime")
quantization = pytest.importorskip("onnxruntime.quantization")

from rewriter_plugins import openvino_target  # noqa: E402
from rewriter_plugins.onnxruntime_target import QDQ_MATMULNBITS_ACCURACY_LEVEL  # noqa: E402

from rewriter.api import resolve_targets, rewrite  # noqa: E402
from rewriter.detect.walker import find_unsupported  # noqa: E402


def _float_model() -> onnx.ModelProto:
    """Conv -> Relu -> Flatten -> MatMul, random weights (seed 0)."""
    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array(rng.normal(0, 0.3, (8, 3, 3, 3)).astype(np.float32), "W"),
               numpy_helper.from_array(rng.normal(0, 0.1, (8,)).astype(np.float32), "B"),
               numpy_helper.from_array(rng.normal(0, 0.3, (288, 10)).astype(np.float32), "M")]
    nodes = [helper.make_node("Conv", ["x", "W", "B"], ["c"]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("Flatten", ["r"], ["f"]),
             helper.make_node("MatMul", ["f", "M"], ["y"])]
    graph = helper.make_graph(
        nodes, "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 10])], weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


class _Calibration(quantization.CalibrationDataReader):
    def __init__(self):
        rng = np.random.default_rng(1)
        self.batches = iter([{"x": rng.normal(0, 1, (1, 3, 8, 8)).astype(np.float32)}
                             for _ in range(8)])

    def get_next(self):
        return next(self.batches, None)


def _qnn_model(tmp_path, weight_type) -> onnx.ModelProto:
    """The QNN recipe: uint16 activations, com.microsoft Q/DQ."""
    source, out = tmp_path / "float.onnx", tmp_path / "qnn.onnx"
    onnx.save(_float_model(), source)
    quantization.quantize_static(
        str(source), str(out), _Calibration(), quant_format=quantization.QuantFormat.QDQ,
        activation_type=quantization.QuantType.QUInt16, weight_type=weight_type,
        extra_options={"UseQDQContribOps": True})
    return onnx.load(out)


def _on_openvino(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    outputs = openvino_target.compile_model(model.SerializeToString())({"x": x})
    return next(iter(outputs.values()))


def _on_onnxruntime(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    options = ort.SessionOptions()
    options.add_session_config_entry(QDQ_MATMULNBITS_ACCURACY_LEVEL, "0")
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


@pytest.mark.parametrize("weights", ["QUInt8", "QUInt16"])
def test_qnn_recipe_model_rewritten_for_openvino_computes_onnxruntimes_numbers(
        plugins, tmp_path, weights):
    model = _qnn_model(tmp_path, getattr(quantization.QuantType, weights))
    assert {(n.domain, n.op_type) for n in model.graph.node} >= {
        ("com.microsoft", "QuantizeLinear"), ("com.microsoft", "DequantizeLinear")}
    x = np.random.default_rng(5).normal(0, 1, (2, 3, 8, 8)).astype(np.float32)
    expected = _on_onnxruntime(model, x)
    # uint16's step at the output: its scale (the last DequantizeLinear's)
    scales = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    step = float(scales["y_scale"])
    assert np.abs(_on_openvino(model, x) - expected).max() > 100 * step  # OpenVINO's own

    result = rewrite(model, ["openvino"], plugins=plugins)
    assert result.report.verdict == "verified", result.report.verdict_reason
    rewritten = result.model
    assert not [n for n in rewritten.graph.node if n.op_type.endswith("QuantizeLinear")
                and n.domain == "com.microsoft"]
    got = _on_openvino(rewritten, x)
    # OpenVINO rounds x / scale from a reciprocal: one step of the last quantization at most
    assert np.abs(got - expected).max() <= step * 1.01


def test_16bit_qdq_and_8bit_weights_in_a_16bit_model_are_openvino_findings(plugins, tmp_path):
    (target,) = resolve_targets(plugins, ["openvino"])
    model = _qnn_model(tmp_path, quantization.QuantType.QUInt8)
    findings = find_unsupported(model, target)
    reasons = {(f.op_type, f.node_name): f.detail for f in findings}
    sixteen = [k for k, v in reasons.items() if "16-bit" in v and "otherwise" in v]
    weights = [k for k, v in reasons.items() if "8-bit weights" in v]
    assert len(sixteen) == 8  # 4 QuantizeLinear, 4 DequantizeLinear of activations
    assert {name for _, name in weights} == {"M_DequantizeLinear", "W_DequantizeLinear"}


def test_an_8bit_qdq_model_keeps_its_dequantize_linear_on_openvino(plugins, tmp_path):
    source, out = tmp_path / "float.onnx", tmp_path / "q8.onnx"
    onnx.save(_float_model(), source)
    quantization.quantize_static(
        str(source), str(out), _Calibration(), quant_format=quantization.QuantFormat.QDQ,
        activation_type=quantization.QuantType.QUInt8,
        weight_type=quantization.QuantType.QInt8)
    (target,) = resolve_targets(plugins, ["openvino"])
    findings = find_unsupported(onnx.load(out), target)
    assert not [f for f in findings if "QuantizeLinear" in f.op_type], findings
