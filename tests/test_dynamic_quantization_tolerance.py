"""A model that quantizes activations on a grid computed at run time is compared at
float16's tolerance: a one-ulp difference upstream moves the grid (the scale comes from the
data's largest magnitude) and a value one 8-bit step apart flows on. Run for real: a
DynamicQuantizeLinear whose input differs by one ulp between the original and the rewritten
model."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from rewriter.comparison.compare import compare, computed_in


def _model(c: np.ndarray) -> onnx.ModelProto:
    """y = MatMul(DequantizeLinear(DynamicQuantizeLinear(x * c)), w) (float32 throughout)."""
    w = np.random.default_rng(0).normal(0, 0.05, (64, 8)).astype(np.float32)
    nodes = [helper.make_node("Mul", ["x", "c"], ["m"]),
             helper.make_node("DynamicQuantizeLinear", ["m"], ["q", "s", "z"]),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["d"]),
             helper.make_node("MatMul", ["d", "w"], ["y"])]
    graph = helper.make_graph(
        nodes, "dq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])],
        [numpy_helper.from_array(c, "c"), numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_the_ops_that_quantize_at_run_time_are_found():
    assert computed_in(_model(np.ones(64, np.float32))) == (
        "float16", ["ai.onnx::DynamicQuantizeLinear"])
    node = helper.make_node("MatMulNBits", ["a", "b", "s"], ["y"], domain="com.microsoft",
                            K=16, N=8, bits=4, block_size=16, accuracy_level=4)
    graph = helper.make_graph([node], "g", [], [])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    assert computed_in(model) == ("float16", ["com.microsoft::MatMulNBits"])
    for a in model.graph.node[0].attribute:  # accuracy level 0: activations are not quantized
        if a.name == "accuracy_level":
            a.i = 0
    assert computed_in(model) == (None, [])


def test_a_value_moved_by_one_ulp_to_the_next_step_is_verified_and_said(plugins, tmp_path):
    # the grid: range [0, 15.9375] over 255 steps, 0.0625 each (exact); 0.15625 is 2.5
    # steps, rounded half to even to 2, and one ulp above it to 3
    x = np.full((1, 64), 1.0, np.float32)
    x[0, 0], x[0, 1] = 15.9375, 0.15625
    c = np.ones(64, np.float32)
    bumped = c.copy()
    bumped[1] = np.nextafter(np.float32(1), np.float32(2))
    for name, model in (("a.onnx", _model(c)), ("b.onnx", _model(bumped))):
        onnx.save(model, tmp_path / name)
    np.savez(tmp_path / "inputs.npz", x=x)
    report = compare(str(tmp_path / "a.onnx"), str(tmp_path / "b.onnx"), ["onnxruntime"],
                     inputs=str(tmp_path / "inputs.npz"), plugins=plugins, localize=False)
    # one step (0.0625) times a weight: beyond float32's tolerance...
    assert report.max_abs is not None and report.max_abs > 1e-3
    # ...within float16's, and the summary says why
    assert report.verdict == "verified", report.summary()
    assert "activations quantized at run time by ai.onnx::DynamicQuantizeLinear" in \
        report.summary()
    assert report.tolerances["computed_in"] == "float16"
