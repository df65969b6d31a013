"""The example models the README runs: shipped, reproducible, and doing what it says."""

from __future__ import annotations

import runpy
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx.reference import ReferenceEvaluator

from rewriter.api import check, rewrite

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def test_example_models_match_their_generators(tmp_path):
    for script, model in (("make_new_opset_export.py", "new_opset_export.onnx"),
                          ("make_failing_export.py", "failing_export.onnx")):
        built = runpy.run_path(str(EXAMPLES / script))["build"]()
        assert built.SerializeToString() == (EXAMPLES / model).read_bytes(), model


def test_readme_rewrite_runs_on_onnxruntime_with_the_same_numbers(plugins, tmp_path):
    source = EXAMPLES / "new_opset_export.onnx"
    assert not check(source, ["onnxruntime"], plugins=plugins, confirm=False).ok
    out = tmp_path / "rewritten.onnx"
    result = rewrite(source, ["onnxruntime"], output=out, plugins=plugins)
    assert result.report.ok and result.model == str(out)
    x = np.random.default_rng(0).standard_normal((2, 5, 16)).astype(np.float32)
    expected = ReferenceEvaluator(str(source)).run(None, {"x": x})[0]
    got = ort.InferenceSession(str(out)).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


def test_failing_export_lists_the_vendor_ops(plugins):
    report = check(EXAMPLES / "failing_export.onnx", ["onnxruntime"], plugins=plugins,
                   confirm=False)
    assert sorted(f.op_type for f in report.findings) == ["ATen", "GemmFastGelu", "NhwcConv"]


def test_failing_export_is_fixed_and_verified(plugins, tmp_path):
    """All three vendor ops have remedies (com-microsoft and pytorch plugins); the result
    holds only standard ops and the engine's own comparison (original run with the plugins'
    numpy kernels on the reference evaluator) passes."""
    out = tmp_path / "fixed.onnx"
    result = rewrite(EXAMPLES / "failing_export.onnx", ["onnxruntime"], output=out,
                     plugins=plugins)
    assert result.report.ok and not result.report.remaining
    assert result.report.verification["compare"] == "ok"
    fixed = onnx.load(out)
    assert {n.domain for n in fixed.graph.node} <= {"", "ai.onnx"}
    ops = {op for (_kind, _plugin, _rule, op) in result.report.applied}
    assert {"com.microsoft::NhwcConv(1)", "com.microsoft::GemmFastGelu(1)",
            "org.pytorch.aten::ATen(1)"} <= ops
