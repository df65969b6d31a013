"""Write ``new_opset_export.onnx``: an LLM-style MLP block exported at opset 28, the newest
ONNX opset, using spec function ops that onnxruntime (1.32, CPU) cannot run yet:
``SwiGLU`` (opset 28) and ``Swish`` (opset 24). ``onnx-rewriter rewrite`` lowers them to
their spec function bodies so the model runs with the same numbers.

Run ``python examples/make_new_opset_export.py`` to regenerate it (deterministic).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from onnx import TensorProto, helper, numpy_helper, save


def build():
    rng = np.random.default_rng(0)

    def weight(name, *shape):
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.1).astype(np.float32), name)

    nodes = [
        helper.make_node("RMSNormalization", ["x", "norm_scale"], ["normed"], name="mlp/norm",
                         axis=-1),
        helper.make_node("MatMul", ["normed", "w_gate"], ["gate"], name="mlp/gate"),
        helper.make_node("MatMul", ["normed", "w_up"], ["up"], name="mlp/up"),
        helper.make_node("SwiGLU", ["gate", "up"], ["activated"], name="mlp/swiglu"),
        helper.make_node("MatMul", ["activated", "w_down"], ["down"], name="mlp/down"),
        helper.make_node("Add", ["x", "down"], ["residual"], name="mlp/residual"),
        helper.make_node("Swish", ["residual"], ["y"], name="head/swish", alpha=1.0),
    ]
    graph = helper.make_graph(
        nodes, "new_opset_export",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", 16])],
        [numpy_helper.from_array(np.ones(16, np.float32), "norm_scale"),
         weight("w_gate", 16, 32), weight("w_up", 16, 32), weight("w_down", 32, 16)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 28)],
                              producer_name="onnx-graph-rewriter example")
    model.ir_version = 13
    return model


if __name__ == "__main__":
    save(build(), Path(__file__).with_name("new_opset_export.onnx"))
