"""Write ``failing_export.onnx``: a small MLP block as exporters and onnxruntime's
transformer optimizer leave it, with operators that stock onnxruntime (CPU) cannot run.

- ``com.microsoft::GemmFastGelu``: a fusion with only a ROCm kernel,
- ``com.microsoft::NhwcConv``: a layout fusion with no CPU kernel,
- ``org.pytorch.aten::ATen`` (layer_norm): PyTorch's fallback when an op has no ONNX export.

Run ``python examples/make_failing_export.py`` to regenerate it (deterministic).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from onnx import TensorProto, helper, numpy_helper, save


def build():
    rng = np.random.default_rng(0)

    def init(name, *shape):
        return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32) * 0.1, name)

    nodes = [
        helper.make_node("NhwcConv", ["image", "conv_w", "conv_b"], ["features"],
                         domain="com.microsoft", name="stem/NhwcConv", pads=[1, 1, 1, 1],
                         kernel_shape=[3, 3]),
        helper.make_node("Reshape", ["features", "flat_shape"], ["tokens"], name="flatten"),
        helper.make_node("GemmFastGelu", ["tokens", "fc1_w", "fc1_b"], ["hidden"],
                         domain="com.microsoft", name="mlp/GemmFastGelu"),
        helper.make_node("MatMul", ["hidden", "fc2_w"], ["projected"], name="mlp/fc2"),
        helper.make_node("ATen", ["projected", "ln_w", "ln_b"], ["out"], domain="org.pytorch.aten",
                         name="norm/ATen_layer_norm", operator="layer_norm",
                         normalized_shape=[16], eps=1e-5),
    ]
    initializers = [
        init("conv_w", 4, 3, 3, 3), init("conv_b", 4),
        numpy_helper.from_array(np.array([2, 32], dtype=np.int64), "flat_shape"),
        init("fc1_w", 32, 64), init("fc1_b", 64), init("fc2_w", 64, 16),
        numpy_helper.from_array(np.ones(16, np.float32), "ln_w"),
        numpy_helper.from_array(np.zeros(16, np.float32), "ln_b"),
    ]
    graph = helper.make_graph(
        nodes, "failing_export",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 4, 4, 3])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [2, 16])],
        initializers,
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1),
                       helper.make_opsetid("org.pytorch.aten", 1)],
        producer_name="onnx-graph-rewriter example",
    )
    model.ir_version = 8
    return model


if __name__ == "__main__":
    save(build(), Path(__file__).with_name("failing_export.onnx"))
