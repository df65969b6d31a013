"""check: findings, reasons and paths on small models, for each built-in target."""

from __future__ import annotations

import json

import pytest
from onnx import TensorProto, helper

from rewriter.api import check
from rewriter.cli import main
from rewriter.detect.walker import group_findings
from tests.conftest import model_from_text, write_model


def _findings(model, target, plugins, **kw):
    report = check(model, [target], plugins=plugins, confirm=False, **kw)
    return report.results[0].findings


def _one_node(op, opset, itype=TensorProto.FLOAT, domain="", extra=(), **attrs):
    node = helper.make_node(op, ["x"], ["y"], domain=domain, name=f"{op}_0", **attrs)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", itype, [2])],
        [helper.make_tensor_value_info("y", itype, [2])],
    )
    opsets = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, v) for d, v in extra]
    return helper.make_model(graph, opset_imports=opsets)


@pytest.mark.parametrize(
    ("model", "reason", "words"),
    [
        (_one_node("Foo", 18, domain="com.acme", extra=[("com.acme", 1)]), "unknown-domain",
         "com.acme"),
        (_one_node("Foo", 18, domain="com.acme"), "domain-not-imported", "com.acme"),
        (_one_node("Foo", 18), "no-schema", "Foo"),
        (_one_node("Relu", 30), "opset-too-new", "opset 30"),
    ],
    ids=["unknown-domain", "no-import", "no-schema", "opset-too-new"],
)
def test_onnxruntime_reasons(plugins, model, reason, words):
    findings = _findings(model, "onnxruntime", plugins)
    assert findings, "expected a finding"
    assert findings[0].reason == reason
    assert words in findings[0].detail


def test_onnxruntime_no_kernel_for_that_opset_version(plugins):
    model = model_from_text("""
        <ir_version: 10, opset_import: ["" : 22]>
        g (float[1,1,4,4] X, float[1,4] rois, int64[1] idx) => (float[1,1,2,2] Y) {
            Y = RoiAlign <output_height: int = 2, output_width: int = 2> (X, rois, idx)
        }""")
    (finding,) = _findings(model, "onnxruntime", plugins)
    assert finding.reason == "no-kernel"
    assert finding.version == 22
    assert "RoiAlign(22)" in finding.detail and "16" in finding.detail


def test_onnxruntime_unsupported_type_binding_names_expected_and_actual(plugins):
    model = model_from_text("""
        <ir_version: 11, opset_import: ["" : 26]>
        g (bool[4] X) => (uint8[4] Y) {
            Y = BitCast <to: int = 2> (X)
        }""")
    (finding,) = _findings(model, "onnxruntime", plugins)
    assert finding.reason == "type-binding"
    assert "T1=tensor(bool)" in finding.detail and "float" in finding.detail


def test_onnxruntime_function_op_runs_by_expansion_and_float16_by_cast(plugins):
    # Relu(14) has no int8... it has; LayerNormalization(17) float16 runs via kernels/casts.
    model = model_from_text("""
        <ir_version: 8, opset_import: ["" : 18]>
        g (float16[2,4] X, float16[4] S) => (float16[2,4] Y, float[2] Z) {
            Y = LayerNormalization (X, S)
            A = Cast <to: int = 1> (X)
            Z = ReduceMean <keepdims: int = 0> (A, axes)
        }""".replace("(A, axes)", "(A)"))
    assert _findings(model, "onnxruntime", plugins) == []


def test_subgraph_paths(plugins):
    then_branch = helper.make_graph(
        [helper.make_node("Foo", ["x"], ["t"], domain="com.acme", name="foo_in_then")],
        "then", [], [helper.make_tensor_value_info("t", TensorProto.FLOAT, [2])],
    )
    else_branch = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["e"], name="relu_in_else")],
        "else", [], [helper.make_tensor_value_info("e", TensorProto.FLOAT, [2])],
    )
    body = helper.make_graph(
        [helper.make_node("Identity", ["c"], ["c_out"]),
         helper.make_node("Foo", ["x"], ["s"], domain="com.acme", name="foo_in_loop")],
        "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("s", TensorProto.FLOAT, [2])],
    )
    nodes = [
        helper.make_node("If", ["cond"], ["y"], name="If_3", then_branch=then_branch,
                         else_branch=else_branch),
        helper.make_node("Loop", ["n", "cond"], ["scan"], name="Loop_1", body=body),
    ]
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2]),
         helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
         helper.make_tensor_value_info("n", TensorProto.INT64, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2]),
         helper.make_tensor_value_info("scan", TensorProto.FLOAT, None)],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid("com.acme", 1)]
    )
    for target in ("onnxruntime", "reference", "opset:17"):
        paths = sorted(f.path for f in _findings(model, target, plugins) if f.path != "model")
        assert paths == [
            "graph/node 0 (If_3)/then_branch/node 0 (foo_in_then)",
            "graph/node 1 (Loop_1)/body/node 1 (foo_in_loop)",
        ], target


def test_model_local_function_body_is_checked_and_the_call_is_not_a_finding(plugins):
    model = model_from_text("""
        <ir_version: 10, opset_import: ["" : 18, "local" : 1, "com.acme" : 1]>
        g (float[2] X) => (float[2] Y) {
            Y = local.Block (X)
        }
        <domain: "local", opset_import: ["" : 18, "com.acme" : 1]>
        Block (x) => (y) {
            t = Relu (x)
            y = com.acme.Fused (t)
        }""")
    for target in ("onnxruntime", "reference", "opset:17"):
        findings = [f for f in _findings(model, target, plugins) if f.path != "model"]
        assert [(f.path, f.op_type) for f in findings] == [
            ("function local:Block/node 1 (Fused)", "Fused")
        ], target


def test_identical_findings_are_grouped(plugins):
    model = model_from_text("""
        <ir_version: 10, opset_import: ["" : 18, "com.acme" : 1]>
        g (float[2] X) => (float[2] Y) {
            a = com.acme.Fused (X)
            b = com.acme.Fused (a)
            c = Relu (b)
            Y = com.acme.Other (c)
        }""")
    groups = group_findings(_findings(model, "onnxruntime", plugins))
    assert [(g.op_type, g.count) for g in groups] == [("Fused", 2), ("Other", 1)]


def test_reference_target(plugins):
    assert _findings(_one_node("Relu", 18), "reference", plugins) == []
    adam = model_from_text("""
        <ir_version: 8, opset_import: ["ai.onnx.preview.training" : 1]>
        g (float R, int64 T, float[2] X, float[2] G, float[2] V, float[2] H)
          => (float[2] X2, float[2] V2, float[2] H2) {
            X2, V2, H2 = ai.onnx.preview.training.Adam (R, T, X, G, V, H)
        }""")
    assert _findings(adam, "reference", plugins) == []
    ms = _one_node("Gelu", 17, domain="com.microsoft", extra=[("com.microsoft", 1)])
    (finding,) = _findings(ms, "reference", plugins)
    assert finding.reason == "unknown-domain"


def test_opset_target_reports_ops_newer_than_the_ceiling(plugins):
    model = model_from_text("""
        <ir_version: 8, opset_import: ["" : 17]>
        g (float[2,4] X, float[4] S) => (float[2,4] Y) {
            r = Relu (X)
            a = Add (r, X)
            Y = LayerNormalization (a, S)
        }""")
    findings = _findings(model, "opset:13", plugins)
    by_op = {f.op_type: f for f in findings}
    assert by_op[""].path == "model" and "opset 17" in by_op[""].detail
    assert "introduced in opset 17" in by_op["LayerNormalization"].detail
    assert "Relu(14)" in by_op["Relu"].detail and "Relu(13)" in by_op["Relu"].detail
    assert "Add" in by_op  # Add(14) is newer than Add(13)
    assert _findings(model, "opset:17", plugins) == []


def test_confirm_turns_a_runtime_refusal_into_a_finding_on_the_node(plugins, tmp_path):
    model = model_from_text("""
        <ir_version: 8, opset_import: ["" : 18]>
        g (float[2,3] A, float[4,5] B) => (float[2,5] Y) {
            Y = MatMul (A, B)
        }""")
    model.graph.node[0].name = "bad_matmul"
    path = write_model(tmp_path / "bad.onnx", model)
    static = check(path, ["onnxruntime"], plugins=plugins, confirm=False)
    assert static.ok
    confirmed = check(path, ["onnxruntime"], plugins=plugins, confirm=True)
    (finding,) = confirmed.results[0].findings
    assert finding.reason == "runtime-refused"
    assert finding.path == "graph/node 0 (bad_matmul)"


def test_custom_op_library_makes_its_ops_runnable(plugins, corpus):
    path = corpus / "ortx_masked_fill.onnx"
    assert not check(path, ["onnxruntime"], plugins=plugins, confirm=False).ok
    report = check(path, ["onnxruntime"], plugins=plugins, confirm=False,
                   custom_op_libraries=["extensions"])
    assert report.ok


def test_cli_json_and_exit_codes(tmp_path, capsys):
    path = write_model(tmp_path / "m.onnx", _one_node("Foo", 18, domain="com.acme",
                                                       extra=[("com.acme", 1)]))
    assert main(["check", str(path), "--json", "-t", "onnxruntime", "-t", "opset:13"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert [t["target"] for t in data["targets"]] == ["onnxruntime", "opset:13"]
    group = data["targets"][0]["groups"][0]
    assert group["op"] == "com.acme::Foo(1)" and group["count"] == 1
    assert group["remedies"] == []
    ok = write_model(tmp_path / "ok.onnx", _one_node("Relu", 18))
    assert main(["check", str(ok)]) == 0
    assert "every node runs" in capsys.readouterr().out
    assert main(["check", str(ok), "-t", "nonsense"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown target 'nonsense'" in err
    assert main(["check", str(ok), "-t", "opset:x"]) == 2
    assert "opset:13" in capsys.readouterr().err


def test_onnxruntime_provider_targets(tmp_path, capsys):
    import onnxruntime

    ok = write_model(tmp_path / "ok.onnx", _one_node("Relu", 18))
    missing = "CUDA" if "CUDAExecutionProvider" not in onnxruntime.get_available_providers() \
        else "NoSuch"
    assert main(["check", str(ok), "-t", f"onnxruntime:{missing}"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"provider '{missing}' is not available" in err
    installed = [p for p in onnxruntime.get_available_providers() if p != "CPUExecutionProvider"]
    if installed:  # e.g. Azure: falls back to CPU kernels for ordinary ops
        short = installed[0].removesuffix("ExecutionProvider")
        assert main(["check", str(ok), "-t", f"onnxruntime:{short}", "--json",
                     "--no-confirm"]) == 0
        data = json.loads(capsys.readouterr().out)
        assert data["targets"][0]["target"] == f"onnxruntime:{short}"
