"""The ``tract`` target (plugins/tract_target/) against the real tract package: capability
from what tract loads, types and optimizes, a tract crash as a verdict, confirmation by a
run in a child, rewrites verified on tract's own outputs, a clean refusal when tract is
absent, and the conformance rescue (benchmarks/conformance_tract.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.conftest import cli_without, model_from_text

ROOT = Path(__file__).resolve().parents[1]
NOT_INSTALLED = "error: tract is not installed: pip install 'onnx-graph-rewriter[tract]'"


def _relu_model() -> onnx.ModelProto:
    return model_from_text("""
        <ir_version: 8, opset_import: ["" : 17]>
        g (float[2, 3] x) => (float[2, 3] y) { y = Relu(x) }
    """)


# -- tract absent: one line, exit 2 (no tract import needed) -----------------------------------

@pytest.mark.parametrize("command", ["check", "rewrite"])
def test_missing_tract_is_one_line_and_exit_2(tmp_path, command):
    model = tmp_path / "m.onnx"
    model.write_bytes(_relu_model().SerializeToString())
    argv = {"check": ["check", str(model)],
            "rewrite": ["rewrite", str(model), "-o", str(tmp_path / "out.onnx")]}[command]
    argv += ["--target", "tract"]
    proc = cli_without("tract", argv)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip() == NOT_INSTALLED
    assert not (tmp_path / "out.onnx").exists()


# -- everything below needs tract ---------------------------------------------------------------

tract = pytest.importorskip("tract")

from rewriter_plugins import tract_target  # noqa: E402

from rewriter.api import check, resolve_targets, rewrite  # noqa: E402
from rewriter.comparison.compare import compare  # noqa: E402
from rewriter.detect.walker import find_unsupported  # noqa: E402

sys.path.insert(0, str(ROOT / "benchmarks"))


@pytest.fixture(scope="module")
def target(plugins):
    (t,) = resolve_targets(plugins, ["tract"])
    return t


def test_description_names_the_installed_tract(target):
    assert target.description == f"tract {tract.version()} (CPU)"


def test_findings_carry_tracts_reasons(target):
    # SwiGLU (opset 28) is loaded as Unimplemented; CumSum wants its axis constant; Relu and
    # Swish run
    model = model_from_text("""
        <ir_version: 11, opset_import: ["" : 28]>
        g (float[2, 8] x, float[2, 4] z, int64 axis) => (float[2, 4] y, float[2, 4] c,
                                                         float[2, 4] r) {
            h = SwiGLU(x)
            y = Relu(h)
            c = CumSum(z, axis)
            r = Swish(z)
        }
    """)
    findings = {f.op_type: f for f in find_unsupported(model, target)}
    assert set(findings) == {"SwiGLU", "CumSum"}
    assert findings["SwiGLU"].reason == "no-kernel"
    assert "Unimplemented" in findings["SwiGLU"].detail
    assert findings["CumSum"].reason == "runtime-refused"
    assert "Axis expected to be a const" in findings["CumSum"].detail
    assert all(f.target == "tract" for f in findings.values())


def test_a_tract_panic_is_a_verdict_and_the_next_probe_still_runs():
    # tract 0.23.9 panics (an assertion in its shape code, across its C API: the process
    # aborts) on a Squeeze of a scalar with axes it does not have
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [])
    axes = numpy_helper.from_array(np.array([-2, -1], np.int64), "axes")
    graph = helper.make_graph([helper.make_node("Squeeze", ["x", "axes"], ["y"])], "g", [x],
                              [helper.make_value_info("y", onnx.TypeProto())], [axes])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                              ir_version=8)
    verdict = tract_target.probe(model.SerializeToString(), "ai.onnx::Squeeze")
    if verdict is None:
        pytest.skip("this tract no longer panics on it")
    assert verdict[0] == "runtime-refused"
    assert "tract crashed" in verdict[1]
    assert tract_target.probe(_relu_model().SerializeToString(), "ai.onnx::Relu") is None


def test_unknown_shapes_are_not_held_against_a_node(target):
    # the Reshape's input comes from a contrib op: its shape is unknown, and tract cannot
    # check a [2, 32] reshape against symbols; the Reshape itself is not a finding
    model = onnx.load(ROOT / "examples" / "failing_export.onnx")
    findings = find_unsupported(model, target)
    assert sorted(f.op_type for f in findings) == ["ATen", "GemmFastGelu", "NhwcConv"]


def test_scalar_inputs_are_probed(target):
    model = model_from_text("""
        <ir_version: 8, opset_import: ["" : 17]>
        g (float x, float z) => (float y) { y = Add(x, z) }
    """)
    assert find_unsupported(model, target) == []


def test_check_confirms_by_loading_and_running(plugins):
    report = check(_relu_model(), ["tract"], plugins=plugins, confirm=True)
    assert report.ok and report.results[0].confirmed is True
    assert report.results[0].confirmation.startswith(
        "loaded and ran once on generated inputs; its outputs equal onnxruntime's")


def test_readme_example_is_rewritten_and_verified_on_tract(plugins):
    original = onnx.load(ROOT / "examples" / "new_opset_export.onnx")
    result = rewrite(original, ["tract"], plugins=plugins)
    assert result.report.verification["compare"] == "ok"
    assert not result.report.remaining
    assert {o.op_type for o in result.model.graph.node}.isdisjoint({"SwiGLU"})
    # tract's outputs of the rewritten model against the reference evaluator running the
    # original, on inputs of another seed
    compared = compare(original, result.model, ["tract"], original_target="reference",
                       plugins=plugins, seed=7, runs=2)
    assert compared.status == "equal", compared.summary()
    assert compared.targets[0].target == "tract"


def test_vendor_ops_are_rewritten_and_run_on_tract(plugins, target):
    original = onnx.load(ROOT / "examples" / "failing_export.onnx")
    result = rewrite(original, ["tract"], plugins=plugins)
    assert result.report.verification["compare"] == "ok", result.report.verdict_reason
    assert find_unsupported(result.model, target) == []
    assert result.report.comparison.oracle == "onnxruntime with plugin kernels"


def test_runs_on_feeds_of_other_shapes(plugins, target):
    # a symbolic batch: each shape of feeds gets its own typed and optimized model
    model = model_from_text("""
        <ir_version: 8, opset_import: ["" : 17]>
        g (float[N, 3] x) => (float[N, 3] y) { y = Softmax <axis = -1> (x) }
    """)
    run = target.prepare(model, None)
    for n in (1, 4):
        x = np.random.default_rng(n).standard_normal((n, 3)).astype(np.float32)
        e = np.exp(x - x.max(-1, keepdims=True))
        np.testing.assert_allclose(run({"x": x})["y"], e / e.sum(-1, keepdims=True),
                                   rtol=1e-5, atol=1e-6)


# -- conformance: the rescue count may not drop ------------------------------------------------

def test_conformance_rescue_on_tract():
    import conformance_tract as bench

    wanted = set(sorted(bench.RESCUED)[::4]) | bench.RUNNING_SAMPLE
    cases = [c for c in bench._common.all_cases() if c.name in wanted]
    assert len(cases) == len(wanted), "a case left the onnx package"
    result = bench.measure_rescue(cases, verify=False)
    lost = sorted((bench.RESCUED & wanted) - set(result.rescued))
    failures = "\n".join(f"{len(v)} × {k}: {', '.join(v[:4])}" for k, v in result.failed.items())
    assert not lost, f"no longer rescued: {lost}\n{failures}"
    assert set(result.running) == bench.RUNNING_SAMPLE
    assert not result.changed and not result.rewritten_running, result.changed


# -- what the caller feeds, attribute references in nested bodies, refusals at run time ----------

def _cumulative(op: str, opset: int) -> onnx.ModelProto:
    return model_from_text(f"""
        <ir_version: 10, opset_import: ["" : {opset}]>
        g (float[2, 3, 4] x, int64 axis) => (float[2, 3, 4] y) {{
            y = {op} <exclusive = 1, reverse = 1> (x, axis)
        }}
    """)


@pytest.mark.parametrize("op,opset,oracle", [
    ("CumSum", 14, lambda x, k: np.flip(np.cumsum(np.flip(x, k), k) - np.flip(x, k), k)),
    ("CumProd", 26, None),
])
def test_an_axis_the_caller_feeds_is_dispatched_to_constant_axes(plugins, target, op, opset,
                                                                 oracle):
    # tract types CumSum only with a constant axis, and the CumProd body of onnx-lowering
    # reshapes to a shape computed from the axis: with the axis a graph input, both are
    # declined and the per-axis form (plugins/static_axis.py) chosen, which tract runs
    model = _cumulative(op, opset)
    result = rewrite(model, ["tract"], plugins=plugins, verify=False)
    assert {p for (_k, p, _r, label) in result.report.applied if op in label} == {"tract"}
    assert find_unsupported(result.model, target) == []
    run = target.prepare(result.model, None)
    x = np.random.default_rng(0).uniform(0.5, 1.5, (2, 3, 4)).astype(np.float32)
    from onnx.reference import ReferenceEvaluator

    for k in (0, 1, 2, -1):
        axis = np.array(k, np.int64)
        (expected,) = ReferenceEvaluator(model).run(None, {"x": x, "axis": axis})
        if oracle is not None:
            np.testing.assert_allclose(expected, oracle(x, k), rtol=1e-5)
        np.testing.assert_allclose(run({"x": x, "axis": axis})["y"], expected, rtol=1e-5,
                                   atol=1e-6)


def test_nested_bodies_see_the_attributes_the_node_gives(plugins, target):
    # SoftmaxCrossEntropyLoss's spec body calls NegativeLogLikelihoodLoss with
    # ignore_index = @ignore_index, reduction = @reduction; that nested body was built with
    # ignore_index 0 and reduction mean (a 0.5 error on tract, a rank error for 'none')
    model = model_from_text("""
        <ir_version: 8, opset_import: ["" : 13]>
        g (float[3, 5, 2] x, int64[3, 2] labels) => (float[3, 2] loss, float[3, 5, 2] lp) {
            loss, lp = SoftmaxCrossEntropyLoss <ignore_index = 2, reduction = "none"> (x, labels)
        }
    """)
    result = rewrite(model, ["tract"], plugins=plugins, verify=False)
    x = np.random.default_rng(1).standard_normal((3, 5, 2)).astype(np.float32)
    labels = np.array([[2, 0], [1, 2], [4, 3]], np.int64)
    # the op's documentation: loss = -log_softmax(x)[n, labels[n, d], d], 0 where ignored
    log_prob = x - np.log(np.exp(x).sum(axis=1, keepdims=True))
    picked = np.take_along_axis(log_prob, labels[:, None, :], axis=1)[:, 0, :]
    expected = np.where(labels == 2, 0.0, -picked)
    got = target.prepare(result.model, None)({"x": x, "labels": labels})
    np.testing.assert_allclose(got["loss"], expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got["lp"], log_prob, rtol=1e-5, atol=1e-6)


def test_refusals_only_a_run_shows_are_findings(target):
    # a shape as the model's output (tract hands it out as TDim, which its API cannot
    # return) and a Dropout in training mode with the default ratio both type and optimize
    shape = model_from_text("""
        <ir_version: 8, opset_import: ["" : 17]>
        g (float[2, 3] x) => (int64[2] y) { y = Shape(x) }
    """)
    (finding,) = find_unsupported(shape, target)
    assert finding.path == "model" and "'y'" in finding.detail and "TDim" in finding.detail
    dropout = model_from_text("""
        <ir_version: 8, opset_import: ["" : 17]>
        g (float[2, 3] x) => (float[2, 3] y) {
            t = Constant <value = bool {1}> ()
            y = Dropout (x, , t)
        }
    """)
    (finding,) = find_unsupported(dropout, target)
    assert finding.op_type == "Dropout" and "training mode" in finding.detail


def test_a_node_tract_types_but_cannot_evaluate_is_found_and_rewritten(plugins, target):
    # tract 0.23.9 types IsNaN and IsInf of double and fails evaluating them: the probe runs
    # the one-node model once on zeros; the comparisons of plugins/float_classes.py run
    model = model_from_text("""
        <ir_version: 8, opset_import: ["" : 20]>
        g (double[2, 4] x) => (bool[2, 4] n, bool[2, 4] i) {
            n = IsNaN(x)
            i = IsInf <detect_negative = 0> (x)
        }
    """)
    findings = find_unsupported(model, target)
    if not findings:
        pytest.skip("this tract evaluates IsNaN and IsInf of double")
    assert {f.op_type for f in findings} == {"IsNaN", "IsInf"}
    assert all("fails running it" in f.detail for f in findings)
    result = rewrite(model, ["tract"], plugins=plugins, verify=False)
    assert find_unsupported(result.model, target) == []
    x = np.array([[np.nan, np.inf, -np.inf, 0.0], [-0.0, 1.5, -2.0, 1e300]])
    got = target.prepare(result.model, None)({"x": x})
    np.testing.assert_array_equal(got["n"], np.isnan(x))
    np.testing.assert_array_equal(got["i"], np.isposinf(x))


# -- blame: tract's own words, not the probe's construction -----------------------------------

def test_a_probe_clashing_with_its_own_made_up_dimensions_is_not_a_finding():
    """A Tanh over float[2, 4, 4, s] (s unknown): the probe ran it on zeros of shape
    [1, 1, 1, 1] and tract said "Clashing resolution for expression. 2=2 != 1" about the
    probe's own dimensions; known dimensions are kept now, and a clash with made-up ones is
    the probe's, not the node's."""
    model = model_from_text("""
        <ir_version: 8, opset_import: ["" : 17]>
        g (float[2, 4, 4, s] x) => (y) { y = Tanh(x) }
    """)
    assert tract_target.probe_here(model.SerializeToString(), "Tanh") is None


def test_tract_blames_the_node_its_own_loader_names(plugins, tmp_path):
    """The expanded local-window attention case: tract's loader refuses its Pad (a rank-1
    constant value where tract wants a scalar); the probes of Tanh and MatMul refused them
    only with the symbols they were given (a clash, broadcast((unk__14), ...)), and rewrite
    "fixed" them into a model that still failed. Only the node tract names is found."""
    import conformance_tract  # noqa: F401 - benchmarks on sys.path
    from _common import all_cases

    (case,) = [c for c in all_cases()
               if c.name == "test_attention_local_window_gqa_rank4_mask_expanded"]
    path = tmp_path / "case.onnx"
    path.write_bytes(case.model.SerializeToString())
    with pytest.raises(Exception) as refused:  # tract itself, as its users load a model
        tract.onnx().load(str(path)).into_model()
    nodes = case.model.graph.node  # tract names a node by its name, else its first output
    (blamed,) = [i for i, n in enumerate(nodes)
                 if f'"{n.name or n.output[0]}"' in str(refused.value)]
    (result,) = check(case.model, ["tract"], plugins=plugins, confirm=False).results
    assert [f.path for f in result.findings] == [f"graph/node {blamed} (Pad)"]
    assert not any("Clashing" in f.detail or "unk__" in f.detail for f in result.findings)


@pytest.mark.parametrize("name", ["test_attention_3d_local_window", "test_gru_reverse"])
def test_node_cases_tract_computes_otherwise_are_rewritten_right(plugins, target, name):
    """tract 0.23 runs these with other numbers (a ``computes-differently`` finding):
    Attention-25 with a sliding window (0.126 off), whose spec body filled its bias with a
    ``ConstantOfShape`` without value, which tract made float64 and could not type
    ("Impossible to unify F64 with F32"); a reverse GRU, rewritten as a forward one on the
    reversed sequence. The rewritten model runs on tract with the case's own inputs and
    gives its expected outputs."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from onnx.backend.test.case.node import collect_testcases

        (case,) = [c for c in collect_testcases() if c.name == name]
    inputs, expected = case.data_sets[0]
    feeds = {i.name: np.asarray(v) for i, v in zip(case.model.graph.input, inputs)}
    outputs = [o.name for o in case.model.graph.output]
    before = target.prepare(case.model, None)(feeds)
    assert not all(np.allclose(before[n], e, atol=1e-4) for n, e in zip(outputs, expected)), \
        "tract computes it right now"
    result = rewrite(case.model, ["tract"], plugins=plugins)
    assert result.report.verdict == "verified", result.report.verdict_reason
    got = target.prepare(result.model, None)(feeds)
    for n, e in zip(outputs, expected, strict=True):
        np.testing.assert_allclose(got[n], e, rtol=1e-4, atol=1e-5)


def test_a_result_tract_fails_on_the_callers_values_is_not_verified(plugins):
    """MelWeightMatrix's five inputs are scalars the caller feeds. Generated at the
    values the spec can build a filter bank from (so that onnxruntime runs the original
    at all), tract fails on the body's ``Slice`` (DynSlice), as it does with the node
    case's own values: the rewrite is not verified and nothing is returned. (Generated at
    0..3, every set failed on onnxruntime, nothing was compared, and the verdict said
    verified.)"""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from onnx.backend.test.case.node import collect_testcases

        (case,) = [c for c in collect_testcases() if c.name == "test_melweightmatrix"]
    result = rewrite(case.model, ["tract"], plugins=plugins, confirm=False)
    report = result.report
    assert report.verdict != "verified", report.comparison.summary()
    assert result.model is None
    assert report.comparison.regimes[0].ran, "the typical inputs did not run the original"
