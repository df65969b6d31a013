"""A target that runs the original as it is, and whose users' session computes other
numbers than the oracle's session (onnxruntime fuses Q/DQ into QLinear* kernels, which round
otherwise than the definition at half-way points): compared like for like, with the original
as its users load it, run for real."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from tests.calibration import static_quantized_cnn

ort = pytest.importorskip("onnxruntime")
pytest.importorskip("onnxruntime.quantization")

from rewriter_plugins.onnxruntime_target import DISABLE_QUANT_QDQ  # noqa: E402

from rewriter.comparison.compare import compare  # noqa: E402


def _run(model: onnx.ModelProto, feeds: dict, fuse_qdq: bool) -> np.ndarray:
    options = ort.SessionOptions()
    if not fuse_qdq:
        options.add_session_config_entry(DISABLE_QUANT_QDQ, "1")
    return ort.InferenceSession(model.SerializeToString(), options,
                                providers=["CPUExecutionProvider"]).run(None, feeds)[0]


def _inputs_where_the_fusion_rounds_otherwise(model) -> dict:
    for seed in range(3, 40):
        x = np.random.default_rng(seed).normal(0, 1, (2, 3, 8, 8)).astype(np.float32)
        if not np.array_equal(_run(model, {"x": x}, True), _run(model, {"x": x}, False)):
            return {"x": x}
    pytest.fail("no input set where onnxruntime's QDQ fusion rounds otherwise")


def test_a_qdq_model_on_onnxruntime_is_compared_with_itself_as_loaded(plugins, tmp_path):
    model = static_quantized_cnn(tmp_path, "QDQ")
    path = tmp_path / "qdq.onnx"
    onnx.save(model, path)
    feeds = _inputs_where_the_fusion_rounds_otherwise(model)
    np.savez(tmp_path / "inputs.npz", **feeds)
    report = compare(str(path), str(path), ["onnxruntime"], inputs=str(tmp_path / "inputs.npz"),
                     plugins=plugins, localize=False)
    assert report.verdict == "verified", report.summary()
    (target,) = report.targets
    assert target.as_loaded and target.max_abs == 0
    assert "as its users load it" in report.summary()


def test_another_target_is_compared_with_the_oracles_definition(plugins, tmp_path):
    """Another target than the oracle's runtime: judged against the oracle's definition run
    (no fusion), not against the fused one."""
    from rewriter.api import rewrite

    model = static_quantized_cnn(tmp_path, "QDQ")
    path, lowered = tmp_path / "qdq.onnx", tmp_path / "lowered.onnx"
    onnx.save(model, path)
    onnx.save(rewrite(model, ["reference"], plugins=plugins, verify=False).model, lowered)
    feeds = _inputs_where_the_fusion_rounds_otherwise(model)
    np.savez(tmp_path / "inputs.npz", **feeds)
    report = compare(str(path), str(lowered), ["reference"],
                     inputs=str(tmp_path / "inputs.npz"), plugins=plugins, localize=False)
    (target,) = report.targets
    assert not target.as_loaded and report.oracle == "onnxruntime", report.summary()
    got = target.produced[0]["y"]
    definition, fused = _run(model, feeds, False), _run(model, feeds, True)
    assert target.max_abs == pytest.approx(float(np.abs(got - definition).max()))
    assert np.abs(got - definition).max() != np.abs(got - fused).max()
