"""Calibration data for ``onnxruntime.quantization.quantize_static`` in tests (``count``
standard normal input sets of one input), and a small CNN quantized with it."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


class CalibrationSets:
    """A ``CalibrationDataReader`` (duck-typed: ``get_next``) of ``count`` sets of ``name``,
    shape ``shape``, drawn with ``seed``."""

    def __init__(self, name: str = "x", shape=(1, 3, 8, 8), count: int = 8, seed: int = 1):
        rng = np.random.default_rng(seed)
        self.sets = iter([{name: rng.normal(0, 1, shape).astype(np.float32)}
                          for _ in range(count)])

    def get_next(self):
        return next(self.sets, None)


def float_cnn() -> onnx.ModelProto:
    """Conv(3 -> 8) -> Relu -> Conv(8 -> 8) + the first Conv (a residual Add) ->
    AveragePool 2x2 -> GlobalAveragePool: a small ResNet-like block, random weights."""
    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array(rng.normal(0, s, shape).astype(np.float32), name)
               for name, shape, s in (("W1", (8, 3, 3, 3), 0.4), ("B1", (8,), 0.1),
                                      ("W2", (8, 8, 3, 3), 0.2), ("B2", (8,), 0.1))]
    nodes = [helper.make_node("Conv", ["x", "W1", "B1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "W2", "B2"], ["c2"], pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["c2", "r1"], ["a"]),
             helper.make_node("AveragePool", ["a"], ["p"], kernel_shape=[2, 2],
                              strides=[2, 2]),
             helper.make_node("GlobalAveragePool", ["p"], ["y"])]
    graph = helper.make_graph(
        nodes, "block", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 8, 1, 1])], weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def static_quantized_cnn(tmp_path, fmt: str) -> onnx.ModelProto:
    """:func:`float_cnn` through ``quantize_static`` as the real-world benchmark calls it
    (``fmt`` "QDQ" or "QOperator", per channel, uint8 activations, int8 weights)."""
    from onnxruntime import quantization

    source, out = tmp_path / "float.onnx", tmp_path / f"{fmt}.onnx"
    onnx.save(float_cnn(), source)
    quantization.quantize_static(
        str(source), str(out), CalibrationSets(count=4),
        quant_format=getattr(quantization.QuantFormat, fmt),
        per_channel=True, activation_type=quantization.QuantType.QUInt8,
        weight_type=quantization.QuantType.QInt8)
    return onnx.load(out)
