"""A dynamically quantized model whose rewritten form mismatches only because a one-ulp
difference upstream lands a value on the next 8-bit step is verified segment by segment,
anchored at its quantization points (rewriter.comparison.anchoring); a rewrite that is wrong
before or at a quantization point still mismatches. Run for real: the original on
onnxruntime, the rewritten model on the reference evaluator."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from rewriter.comparison.anchoring import ANCHOR_SUFFIX, anchored, quantized_activations
from rewriter.comparison.compare import compare


def _model(c: np.ndarray, quantized: bool = True) -> onnx.ModelProto:
    """y = DequantizeLinear(DynamicQuantizeLinear(x * c)) (``quantized``; else y = x * c)."""
    nodes = [helper.make_node("Mul", ["x", "c"], ["m"])]
    if quantized:
        nodes += [helper.make_node("DynamicQuantizeLinear", ["m"], ["q", "s", "z"]),
                  helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"])]
    else:
        nodes.append(helper.make_node("Identity", ["m"], ["y"]))
    graph = helper.make_graph(
        nodes, "dq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])],
        [numpy_helper.from_array(c, "c")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 8
    return model


def _inputs(tie: bool = True) -> np.ndarray:
    # the grid: [0, 255] over 255 steps of exactly 1; 2.5 rounds half to even to 2, and
    # one ulp above it to 3; 0.375 is not on the grid (a rewrite that skips the
    # quantization shows there). Without the tie, runtimes agree on the original (OpenVINO,
    # the second opinion on a mismatch, rounds ties otherwise)
    x = np.full((1, 64), 1.0, np.float32)
    x[0, 0], x[0, 1], x[0, 2] = 255.0, 2.5 if tie else 2.25, 0.375
    return x


def _compare(tmp_path, subject: onnx.ModelProto, tie: bool = True):
    onnx.save(_model(np.ones(64, np.float32)), tmp_path / "a.onnx")
    onnx.save(subject, tmp_path / "b.onnx")
    np.savez(tmp_path / "inputs.npz", x=_inputs(tie))
    return compare(str(tmp_path / "a.onnx"), str(tmp_path / "b.onnx"), ["reference"],
                   inputs=str(tmp_path / "inputs.npz"), localize=False)


def _one_ulp_above_at_the_tie() -> np.ndarray:
    c = np.ones(64, np.float32)
    c[1] = np.nextafter(np.float32(1), np.float32(2))
    return c


def test_the_quantized_activation_is_the_anchor_and_the_cut_model_reads_it():
    original = _model(np.ones(64, np.float32))
    assert quantized_activations(original, original) == ["m"]
    cut = anchored(original, {"m": np.zeros((1, 64), np.float32)})
    assert [n.input[0] for n in cut.graph.node if n.op_type == "DynamicQuantizeLinear"] == \
        ["m" + ANCHOR_SUFFIX]
    assert "m" + ANCHOR_SUFFIX in [i.name for i in cut.graph.input]
    assert "m" in [o.name for o in cut.graph.output]
    onnx.checker.check_model(cut, full_check=True)
    # declared as the model knows the value: static here (tract types the model ahead)
    (anchor,) = [i for i in cut.graph.input if i.name == "m" + ANCHOR_SUFFIX]
    assert [d.dim_value for d in anchor.type.tensor_type.shape.dim] == [1, 64]


def test_a_value_moved_by_one_ulp_onto_the_next_step_is_verified_anchored(tmp_path):
    report = _compare(tmp_path, _model(_one_ulp_above_at_the_tie()))
    assert report.verdict == "verified", report.summary()
    (target,) = report.targets
    # unanchored, one whole step (1.0): beyond any float tolerance
    assert target.anchored is not None and target.anchored.unanchored_max_abs == 1.0
    assert target.anchored.points == ["m"]
    assert target.max_abs is not None and target.max_abs < 1e-6
    assert "anchored at the oracle's values at 1 run-time quantization point" in \
        report.summary()
    assert report.as_dict()["targets"][0]["anchored"]["unanchored_max_abs"] == 1.0


@pytest.mark.parametrize("subject", [
    pytest.param(lambda: _model(np.full(64, 1.1, np.float32)), id="wrong-before-the-anchor"),
    pytest.param(lambda: _model(np.ones(64, np.float32), quantized=False),
                 id="quantization-dropped"),
])
def test_a_wrong_rewrite_still_mismatches_anchored(tmp_path, subject):
    report = _compare(tmp_path, subject(), tie=False)
    assert report.verdict == "mismatch", report.summary()
    (target,) = report.targets
    assert target.anchored is not None and target.anchored.status == "mismatch"
    assert "anchored at" not in report.summary()


def test_a_model_without_run_time_quantization_is_not_anchored(tmp_path):
    onnx.save(_model(np.ones(64, np.float32), quantized=False), tmp_path / "a.onnx")
    onnx.save(_model(np.full(64, 1.1, np.float32), quantized=False), tmp_path / "b.onnx")
    np.savez(tmp_path / "inputs.npz", x=_inputs())
    report = compare(str(tmp_path / "a.onnx"), str(tmp_path / "b.onnx"), ["reference"],
                     inputs=str(tmp_path / "inputs.npz"), localize=False)
    assert report.verdict == "mismatch"
    assert report.targets[0].anchored is None
