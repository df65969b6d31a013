"""Verdicts that hold on every runtime (issue 27): a repair the save makes is a change that is
named and compared; each target of a multi-target rewrite gets its verdict from its own
runtime; a runtime that runs a model with other numbers than the oracle's is a finding
(``computes-differently``) on the first node that diverges."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from rewriter.api import check, rewrite
from rewriter.cli import main
from tests.conftest import model_from_text, write_model

# com.microsoft::Gelu used without importing com.microsoft (exporters forget the import;
# onnxruntime fills it in, the save writes it)
NO_IMPORT = """
<ir_version: 8, opset_import: ["": 17]>
g (float[2, 5] x) => (float[2, 5] y) {
    y = com.microsoft.Gelu (x)
}
"""


def _without_import() -> onnx.ModelProto:
    model = model_from_text(NO_IMPORT.replace("com.microsoft.Gelu", "Gelu"))
    model.graph.node[0].domain = "com.microsoft"
    return model


def test_a_missing_import_is_a_repair_compared_like_a_rewrite(tmp_path, plugins):
    source = write_model(tmp_path / "gelu.onnx", _without_import())
    out = tmp_path / "out.onnx"
    result = rewrite(str(source), "onnxruntime", output=out, plugins=plugins)
    report = result.report
    assert not report.applied
    assert report.repairs and "com.microsoft" in report.repairs[0]
    assert report.verdict == "verified", report.verdict_reason
    assert report.comparison is not None and report.comparison.targets[0].verdict == "verified"
    written = onnx.load(out)
    assert {i.domain for i in written.opset_import} == {"", "com.microsoft"}


def test_a_repair_is_named_in_the_text_report(tmp_path, plugins, capsys):
    source = write_model(tmp_path / "gelu.onnx", _without_import())
    code = main(["rewrite", str(source), "-o", str(tmp_path / "out.onnx"), "-t", "onnxruntime"])
    text = capsys.readouterr().out
    assert code == 0
    assert "repair: added the opset import com.microsoft" in text
    assert "nothing to do" not in text and "verified" in text


def test_an_unchanged_model_is_still_unchanged(tmp_path, plugins):
    model = model_from_text(NO_IMPORT.replace('["": 17]', '["": 17, "com.microsoft": 1]'))
    source = write_model(tmp_path / "gelu.onnx", model)
    report = rewrite(str(source), "onnxruntime", output=tmp_path / "o.onnx",
                     plugins=plugins).report
    assert report.verdict == "unchanged" and not report.repairs


# com.microsoft::Gelu (a decomposition for the reference evaluator) next to
# com.microsoft::ExpandDims (onnxruntime runs it; nothing remedies it for the reference
# evaluator): a partial rewrite for both targets leaves the reference evaluator a model it
# cannot run
PARTIAL = """
<ir_version: 8, opset_import: ["": 17, "com.microsoft": 1]>
g (float[2, 5] x) => (float[1, 2, 5] y) {
    a = com.microsoft.Gelu (x)
    axis = Constant <value = int32 {0}> ()
    y = com.microsoft.ExpandDims (a, axis)
}
"""


def test_each_target_has_its_own_runtime_verdict(tmp_path, plugins):
    from onnxruntime import InferenceSession

    model = model_from_text(PARTIAL)
    try:
        InferenceSession(model.SerializeToString())
    except Exception as e:  # noqa: BLE001
        pytest.skip(f"this onnxruntime does not run com.microsoft::ExpandDims: {e}")
    source = write_model(tmp_path / "partial.onnx", model)
    result = rewrite(str(source), ["onnxruntime", "reference"], output=tmp_path / "o.onnx",
                     plugins=plugins, partial=True)
    report = result.report
    verdicts = {t.target: t for t in report.comparison.targets}
    assert verdicts["onnxruntime"].verdict == "verified"
    reference = verdicts["reference"]
    # the reference evaluator's verdict comes from the reference evaluator, which cannot
    # run what is left: not verified, and not "verified on reference (run on onnxruntime)"
    assert reference.verdict == "unverified" and not reference.runtime
    assert "reference cannot run the rewritten model" in reference.error
    assert report.comparison.verdict == "unverified"
    assert report.exit_code == 3  # unverified (and a finding left)
    # what --partial changed was checked on the chain all the same, and is written
    assert reference.elsewhere == {"runtime": "onnxruntime", "status": "equal",
                                   "max_abs": reference.elsewhere["max_abs"]}
    assert report.written and (tmp_path / "o.onnx").exists()


def _lp_normalization_model() -> onnx.ModelProto:
    return model_from_text("""
<ir_version: 8, opset_import: ["": 18]>
g (float[3, 4] x) => (float[3, 4] y) {
    y = LpNormalization <p = 1, axis = -1> (x)
}
""")


def _reference_gets_lp1_wrong() -> bool:
    from onnx.reference import ReferenceEvaluator

    x = np.array([[-1.0, 2.0, -3.0, 4.0]] * 3, np.float32)
    got = ReferenceEvaluator(_lp_normalization_model()).run(None, {"x": x})[0]
    want = x / np.abs(x).sum(axis=-1, keepdims=True)  # the spec: x / ||x||_1 along axis
    return not np.allclose(got, want, atol=1e-6)


def test_a_runtime_computing_other_numbers_is_a_finding_on_the_node(tmp_path, plugins):
    if not _reference_gets_lp1_wrong():
        pytest.skip("this onnx's reference evaluator computes LpNormalization p=1 right")
    source = write_model(tmp_path / "lp.onnx", _lp_normalization_model())
    report = check(str(source), ["reference"], plugins=plugins, confirm=True)
    (finding,) = report.findings
    assert finding.reason == "computes-differently"
    assert finding.op_type == "LpNormalization" and finding.path == "graph/node 0 (LpNormalization)"
    assert "onnxruntime" in finding.detail and "max abs error" in finding.detail
    # without the confirmation (nothing run), there is nothing to compare
    quiet = check(str(source), ["reference"], plugins=plugins, confirm=False)
    assert not quiet.findings


def test_numbers_that_agree_are_no_finding(tmp_path, plugins):
    source = write_model(tmp_path / "lp2.onnx", model_from_text("""
<ir_version: 8, opset_import: ["": 18]>
g (float[3, 4] x) => (float[3, 4] y) {
    y = LpNormalization <p = 2, axis = -1> (x)
}
"""))
    report = check(str(source), ["reference"], plugins=plugins, confirm=True)
    assert not report.findings
    (result,) = report.results
    assert "equal onnxruntime's" in result.confirmation


def test_check_takes_an_onnx_ir_model_as_rewrite_does(plugins):
    import onnx_ir

    model = onnx_ir.from_proto(_without_import())
    report = check(model, "reference", plugins=plugins, confirm=False)
    assert [f.op_type for f in report.findings] == ["Gelu"]
    assert rewrite(model, "reference", plugins=plugins).report.verdict == "verified"


def _bitshift_case(folder):
    """BitShift-28 of int32 by 32, 33 and 40 (out of range: the spec's result is 0) beside
    its test data, as the ONNX repository lays a node case out."""
    from onnx import numpy_helper

    model = model_from_text("""
<ir_version: 11, opset_import: ["": 28]>
g (int32[3] x, int32[3] y) => (int32[3] z) {
    z = BitShift <direction = "LEFT"> (x, y)
}
""")
    folder.mkdir()
    onnx.save(model, folder / "model.onnx")
    data = folder / "test_data_set_0"
    data.mkdir()
    x, y = np.array([16, 1, 7], np.int32), np.array([32, 33, 40], np.int32)
    for i, (name, value) in enumerate((("x", x), ("y", y))):
        (data / f"input_{i}.pb").write_bytes(
            numpy_helper.from_array(value, name).SerializeToString())
    (data / "output_0.pb").write_bytes(
        numpy_helper.from_array(np.zeros(3, np.int32), "z").SerializeToString())
    return folder / "model.onnx", x, y


def test_tract_shifting_out_of_range_is_found_on_the_test_data_and_rescued(tmp_path, plugins):
    pytest.importorskip("tract")
    from rewriter.comparison.isolation import Job, shared_runner

    path, x, y = _bitshift_case(tmp_path / "bitshift")
    (result,) = check(str(path), ["tract"], plugins=plugins).results
    if not result.findings:
        pytest.skip(f"this tract shifts out of range as the spec says: {result.confirmation}")
    (finding,) = result.findings
    assert finding.reason == "computes-differently" and finding.op_type == "BitShift"
    assert "test-data" in finding.detail  # the test data beside the model showed it
    out = tmp_path / "out.onnx"
    report = rewrite(str(path), "tract", output=out, plugins=plugins).report
    assert report.verdict == "verified", report.verdict_reason
    # the result on tract itself, with the case's inputs: the spec's zeros
    job = Job.make("tract", onnx.load(out), tmp_path, [{"x": x, "y": y}], plugins=plugins)
    ran = shared_runner(plugins).run(job, 120)
    assert ran.ok and np.array_equal(ran.outputs[0]["z"], np.zeros(3, np.int32))
