"""check: findings, reasons and paths on small models, for each built-in target."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from onnx import TensorProto, helper

from rewriter.api import check
from rewriter.cli import main
from rewriter.detect.walker import group_findings
from tests.conftest import make_model, model_from_text, onnxruntime_max_opset, write_model


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
    return make_model(graph, opsets)


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


@pytest.mark.skipif(onnxruntime_max_opset() < 22, reason="a RoiAlign-22 model is above the "
                    "installed onnxruntime's opset ceiling: that is its first finding")
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


def test_onnxruntime_type_binding_on_every_onnxruntime_names_expected_and_actual(plugins):
    # Abs(13) takes bfloat16; onnxruntime's CPU kernels (1.20 to 1.32) do not
    (finding,) = _findings(_one_node("Abs", 18, itype=TensorProto.BFLOAT16), "onnxruntime",
                           plugins)
    assert finding.reason == "type-binding" and finding.version == 13
    assert "T=tensor(bfloat16)" in finding.detail and "float" in finding.detail


@pytest.mark.skipif(onnxruntime_max_opset() < 26, reason="BitCast is new in ai.onnx 26: "
                    "the installed onnxruntime's first finding is the opset ceiling")
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


# -- check names a remedy iff rewrite applies one (per target) --------------------------------

# node cases with onnxruntime findings (a seeded sample of them) and the corpus: opset
# conversion, provisional findings downstream of untyped contrib ops, kernels OpenVINO
# cannot run, ops nothing remedies
NODE_CASES = ["test_image_decoder_decode_pnm_rgb", "test_flexattention_gqa",
              "test_quantizelinear_uint4", "test_dequantizelinear_e4m3fn_float16",
              "test_dequantizelinear_uint2", "test_cast_FLOAT4E2M1_to_FLOAT",
              "test_castlike_FLOAT_to_FLOAT4E2M1_expanded", "test_quantizelinear_int16",
              "test_pow_types_float32_uint64", "test_lstm_batchwise", "test_bernoulli",
              "test_swiglu_float16_expanded"]
CORPUS_SAMPLE = 14
AGREEMENT_TARGETS = ("onnxruntime", "openvino", "opset:13")


def _disagreements(model, target, plugins) -> tuple[int, list[str]]:
    """Findings where check's remedy and what rewrite (--partial, in memory) does differ."""
    from rewriter.api import rewrite

    if isinstance(model, Path):
        import onnx

        model = onnx.load(model, load_external_data=False)
    (result,) = check(model, target, plugins=plugins, confirm=False).results
    from rewriter.api import finding_key

    named = {key: not text.startswith("none: ") for key, text in result.plan.items()}
    assert set(named) == {finding_key(f) for f in result.findings}
    if not named:
        return 0, []
    done = rewrite(model, target, plugins=plugins, partial=True, verify=False, confirm=False)
    left = {finding_key(f) for f in done.report.remaining}
    return len(named), [f"{target}: {key}: check says {result.plan[key]!r}, rewrite "
                        f"{'leaves it' if key in left else 'fixes it'}"
                        for key, says in named.items() if says != (key not in left)]


@pytest.mark.parametrize("target", AGREEMENT_TARGETS)
def test_check_names_a_remedy_iff_rewrite_applies_one_on_node_cases(plugins, target):
    from benchmarks.conformance import node_cases

    cases = dict(node_cases())
    total, wrong = 0, []
    for name in NODE_CASES:
        n, bad = _disagreements(cases[name], target, plugins)
        total += n
        wrong += [f"{name}: {b}" for b in bad]
    assert total >= 3 and not wrong, "\n".join(wrong)


@pytest.mark.parametrize("target", AGREEMENT_TARGETS)
def test_check_names_a_remedy_iff_rewrite_applies_one_on_the_corpus(plugins, corpus, target):
    import random

    models = sorted(corpus.glob("*.onnx"))
    total, wrong, offered = 0, [], []
    for path in random.Random(17).sample(models, min(CORPUS_SAMPLE, len(models))):
        n, bad = _disagreements(path, target, plugins)
        total += n
        wrong += [f"{path.name}: {b}" for b in bad]
        (result,) = check(path, target, plugins=plugins, confirm=False).results
        offered += [text for text in result.plan.values()]
    assert total >= 3 and not wrong, "\n".join(wrong)
    if target == "openvino":  # OpenVINO runs no Python kernel: none is offered
        assert not any(text.startswith("kernel ") for text in offered), offered


def test_opset_conversion_is_named_as_the_remedy(plugins, tmp_path, capsys):
    model = _one_node("Relu", 18)
    path = write_model(tmp_path / "relu18.onnx", model)
    assert main(["check", str(path), "-t", "opset:13", "--no-confirm", "--json"]) == 1
    groups = json.loads(capsys.readouterr().out)["targets"][0]["groups"]
    assert {g["reason"] for g in groups} == {"opset-too-new"}
    assert all(g["remedies"] and not g["no_remedy"] for g in groups)  # not "none installed"
    (model_level,) = [g for g in groups if g["op"] == "ai.onnx"]
    assert model_level["remedies"] == ["pass (opset-conversion)"]


# -- the library: targets as a string, plugins as names, files or modules ----------------------

PLUGIN_SOURCE = '''
from rewriter.plugin import hookimpl

@hookimpl
def register_targets(registry):
    registry.add("acme-npu", lambda argument, options: None)
'''


def test_targets_as_a_string_and_plugins_as_files_or_modules(plugins, tmp_path, monkeypatch):
    import importlib

    from rewriter.manager import Plugins

    model = _one_node("Relu", 18)
    report = check(model, "opset:17", plugins=plugins, confirm=False)
    assert [r.target for r in report.results] == ["opset:17"]  # not 'o', 'p', 's', ...
    path = tmp_path / "acme_lib_plugin.py"
    path.write_text(PLUGIN_SOURCE)
    from rewriter.api import as_plugins

    for given in (str(path), [path], ["acme_lib_plugin"]):
        monkeypatch.syspath_prepend(str(tmp_path))
        loaded = as_plugins(given)
        assert isinstance(loaded, Plugins) and "acme_lib_plugin" in loaded.registry.plugins
    module = importlib.import_module("acme_lib_plugin")
    assert "acme_lib_plugin" in as_plugins([module]).registry.plugins
    assert as_plugins(plugins) is plugins
    with pytest.raises(TypeError, match="plugins: expected"):
        as_plugins([42])
    with pytest.raises(TypeError, match="targets: expected target names"):
        check(model, [None], plugins=plugins)


def test_stages_are_logged(plugins, caplog):
    import logging

    from rewriter.api import rewrite

    with caplog.at_level(logging.INFO, logger="rewriter"):
        rewrite(_one_node("Relu", 18), "opset:13", plugins=plugins, confirm=False,
                verify=False)
    messages = [r.getMessage() for r in caplog.records if r.name == "rewriter"]
    assert any(m.startswith("rewrite ") and "opset:13" in m for m in messages)
    assert any("remedy application(s)" in m for m in messages)
