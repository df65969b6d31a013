"""rewrite end to end: real onnxruntime runs the result, the reference evaluator runs the
original (with a Python kernel for a made-up op), and the two must agree numerically.

Unsupported ops used: ai.onnx::SwiGLU-28 (a spec function op whose body calls Swish-24, for
which onnxruntime has no kernel; the built-in onnx-functions plugin lowers both), and a
made-up com.acme::FusedSwish that a plugin file loaded with ``-p`` decomposes.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import numpy_helper
from onnx.reference import ReferenceEvaluator
from onnx.reference.op_run import OpRun

from rewriter.api import rewrite
from rewriter.cli import main
from rewriter.errors import UnfixableError
from rewriter.manager import load_plugins
from rewriter.plan.functions import REMEDY_DOMAIN
from tests.conftest import (
    FUSED_SWISH_KERNEL_SOURCE,
    FUSED_SWISH_SOURCE,
    model_from_text,
    onnxruntime_max_opset,
    onnxruntime_refusal,
    write_model,
)

RTOL, ATOL = 1e-5, 1e-6
# SwiGLU's models are at ai.onnx 28; an older onnxruntime stops below (1.23: at 23), and
# rewrite for it also converts the model down to that ceiling (the opset-conversion pass)
CONVERTS_DOWN = onnxruntime_max_opset() < 28
X = np.linspace(-3, 3, 7).astype(np.float32)

# -- a third-party decomposition, loaded with -p ------------------------------------------

ACME_PLUGIN = '''
"""Decompositions for ops of the (made-up) com.acme domain."""
from onnx import parser

from rewriter import hookimpl

''' + FUSED_SWISH_SOURCE + '''

@hookimpl
def register_decompositions(registry):
    registry.add("com.acme", "FusedSwish", FUSED_SWISH, description="acme:FusedSwish")
''' + FUSED_SWISH_KERNEL_SOURCE


class FusedSwish(OpRun):
    """The reference evaluator's kernel for com.acme::FusedSwish (the oracle)."""

    op_domain = "com.acme"

    def _run(self, x, alpha=None):
        alpha = 1.0 if alpha is None else alpha
        return ((x / (1 + np.exp(-alpha * x))).astype(x.dtype),)


@pytest.fixture(scope="module")
def acme_plugin(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("plugins") / "acme.py"
    path.write_text(ACME_PLUGIN)
    return path


@pytest.fixture(scope="module")
def acme_plugins(acme_plugin):
    return load_plugins([str(acme_plugin)], autoload=False)


# -- models: the unsupported op inside an If branch, a Loop body, a model-local function ----

OPS = {
    # op call in text format, with {v} for its input; ai.onnx opset; extra imports
    "swiglu": ("SwiGLU <alpha: float = {alpha}> ({v}, {v})", 28, ""),
    "acme": ("com.acme.FusedSwish <alpha: float = {alpha}> ({v})", 18, ', "com.acme" : 1'),
}

CONTAINERS = {
    "if": ("""
        <ir_version: 10, opset_import: ["" : {opset}{imports}]>
        g (float[N] x, bool c) => (float[N] y) {{
            ["orig_if"] y = If (c) <
                then_branch = then_g () => (float[N] t) {{ ["orig_bad"] t = {call_x} }},
                else_branch = else_g () => (float[N] e) {{ ["orig_relu"] e = Relu (x) }}
            >
        }}""", {"x": X, "c": np.array(True)}),
    "loop": ("""
        <ir_version: 10, opset_import: ["" : {opset}{imports}]>
        g (float[N] x, int64 n) => (float[N] y) {{
            ["orig_cond"] cond = Constant <value = bool {{1}}> ()
            ["orig_loop"] y = Loop (n, cond, x) <
                body = body (int64 i, bool cin, float[N] acc) => (bool cout, float[N] out) {{
                    ["orig_id"] cout = Identity (cin)
                    ["orig_bad"] out = {call_acc}
                }}
            >
        }}""", {"x": X, "n": np.array(3, dtype=np.int64)}),
    "function": ("""
        <ir_version: 10, opset_import: ["" : {opset}, "local" : 1{imports}]>
        g (float[N] x) => (float[N] y) {{
            ["orig_call"] y = local.Block (x)
        }}
        <domain: "local", opset_import: ["" : {opset}{imports}]>
        Block (x) => (y) {{
            ["orig_bad"] t = {call_x}
            ["orig_add"] y = Add (t, x)
        }}""", {"x": X}),
}


def make_model(container: str, op: str, alpha: float = 0.5) -> tuple[onnx.ModelProto, dict]:
    text, feeds = CONTAINERS[container]
    call, opset, imports = OPS[op]
    model = model_from_text(textwrap.dedent(text).format(
        opset=opset, imports=imports,
        call_x=call.format(alpha=alpha, v="x"), call_acc=call.format(alpha=alpha, v="acc"),
    ))
    return model, feeds


# -- helpers -------------------------------------------------------------------------------

def all_nodes(model: onnx.ModelProto):
    """Every node: the graph, subgraphs at any depth, model-local functions."""
    def walk(nodes):
        for node in nodes:
            yield node
            for a in node.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    yield from walk(a.g.node)
                for g in a.graphs:
                    yield from walk(g.node)
    yield from walk(model.graph.node)
    for f in model.functions:
        yield from walk(f.node)


def op_types(model) -> set[str]:
    return {f"{n.domain or 'ai.onnx'}::{n.op_type}" for n in all_nodes(model)}


def provenance(node) -> dict[str, str]:
    return {p.key: p.value for p in node.metadata_props}


def session(model: onnx.ModelProto) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.log_severity_level = 4
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def run_ort(model, feeds):
    return session(model).run(None, feeds)


class Oracle(ReferenceEvaluator):
    """The reference evaluator with FusedSwish known everywhere: onnx builds the evaluators of
    model-local functions with this class but without ``new_ops``, so it is a default."""

    def __init__(self, proto, *args, **kwargs):
        kwargs.setdefault("new_ops", [FusedSwish])
        super().__init__(proto, *args, **kwargs)


def run_reference(model, feeds):
    return Oracle(model).run(None, feeds)


def assert_refused_by_onnxruntime(model):
    with pytest.raises(Exception, match=onnxruntime_refusal(model)):
        session(model)


def assert_swiglu_applied(applied: set[tuple[str, str, str]], rewritten=None) -> None:
    """(kind, plugin, op) applied to a SwiGLU-28 model for onnxruntime: SwiGLU and Swish
    decomposed; on an onnxruntime below opset 28, conversions to its ceiling (and the ops
    they make that it lacks, decomposed) too, and the result at that ceiling."""
    swiglu = {("decomposition", "onnx-functions", "ai.onnx::SwiGLU(28)"),
              ("decomposition", "onnx-functions", "ai.onnx::Swish(24)")}
    if not CONVERTS_DOWN:
        assert applied == swiglu
        return
    assert {(k, p, op.split("(")[0]) for k, p, op in applied} >= {
        (k, p, op.split("(")[0]) for k, p, op in swiglu}
    assert {(k, p) for k, p, _ in applied} <= {("decomposition", "onnx-functions"),
                                              ("conversion", "opset-conversion")}
    assert ("conversion", "opset-conversion") in {(k, p) for k, p, _ in applied}
    if rewritten is not None:
        assert {o.version for o in rewritten.opset_import if o.domain in ("", "ai.onnx")} == {
            onnxruntime_max_opset()}


def assert_close(actual, expected, rtol=RTOL, atol=ATOL):
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        assert a.dtype == e.dtype and a.shape == e.shape
        np.testing.assert_allclose(a, e, rtol=rtol, atol=atol)


def run_cli(args, capsys) -> tuple[int, str, str]:
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


# -- numeric end to end --------------------------------------------------------------------

@pytest.mark.parametrize("container", sorted(CONTAINERS))
def test_spec_function_op_is_lowered_and_runs_on_onnxruntime(container, plugins):
    model, feeds = make_model(container, "swiglu")
    original = model.SerializeToString()
    assert_refused_by_onnxruntime(model)

    result = rewrite(model, ["onnxruntime"], plugins=plugins)
    report = result.report
    assert report.ok, report.as_dict()
    assert model.SerializeToString() == original, "the input model must not be changed"
    assert report.verification == {
        "checker": "ok", "shape_inference": "ok", "onnxruntime load": "ok", "compare": "ok"}
    applied = {(str(k), p, op) for (k, p, _rule, op) in report.applied}
    rewritten = result.model
    assert isinstance(rewritten, onnx.ModelProto)
    assert_swiglu_applied(applied, rewritten)
    assert not {"ai.onnx::SwiGLU", "ai.onnx::Swish"} & op_types(rewritten)
    assert_close(run_ort(rewritten, feeds), run_reference(model, feeds))
    _assert_provenance(rewritten, {"onnx-functions"})
    _assert_clean(rewritten, container)


@pytest.mark.parametrize("container", sorted(CONTAINERS))
def test_plugin_decomposition_from_p_file_rewrites_custom_op(container, acme_plugin, tmp_path,
                                                             capsys):
    model, feeds = make_model(container, "acme", alpha=1.7)
    assert_refused_by_onnxruntime(model)
    source = write_model(tmp_path / "in.onnx", model)
    out = tmp_path / "out.onnx"

    code, stdout, err = run_cli(
        ["-p", acme_plugin, "rewrite", source, "-o", out, "--json"], capsys)
    assert code == 0, err
    report = json.loads(stdout)
    assert report["ok"] and report["output"] == str(out)
    assert [(a["plugin"], a["rule"], a["op"], a["nodes"]) for a in report["applied"]] == [
        ("acme", "acme:FusedSwish", "com.acme::FusedSwish(1)", 1)]
    rewritten = onnx.load(out)
    assert "com.acme::FusedSwish" not in op_types(rewritten)
    assert_close(run_ort(rewritten, feeds), run_reference(model, feeds))
    _assert_provenance(rewritten, {"acme"}, rules={"acme:FusedSwish"})
    _assert_clean(rewritten, container)
    # the domain only the rewritten node used is no longer imported, anywhere
    for container_proto in [rewritten, *rewritten.functions]:
        assert "com.acme" not in {o.domain for o in container_proto.opset_import}


def _assert_provenance(model, plugins: set[str], rules: set[str] | None = None):
    """Original nodes (named orig_*) keep no stamp; every node the rewrite created (named
    after the node it replaces, ``orig_x/Op_k``) says which plugin and rule made it."""
    from rewriter.apply.provenance import read_table, stamp_of

    table = read_table(model)
    created = 0
    for node in all_nodes(model):
        stamp = stamp_of(node, table)
        if node.name.startswith("orig_") and "/" not in node.name:
            assert node.name != "orig_bad", "the unsupported node is still there"
            assert stamp is None
            continue
        created += 1
        assert stamp is not None, node
        assert stamp[0] in plugins
        if rules is not None:
            assert stamp[1] in rules
    assert created >= 3


def _assert_clean(model, container):
    """No remedy functions or imports are left; the model's own function stays."""
    assert all(f.domain != REMEDY_DOMAIN for f in model.functions)
    for proto in [model, *model.functions]:
        assert REMEDY_DOMAIN not in {o.domain for o in proto.opset_import}
    if container == "function":
        assert [(f.domain, f.name) for f in model.functions] == [("local", "Block")]
    else:
        assert not model.functions
    onnx.checker.check_model(model, full_check=True)


def test_cleanup_removes_only_what_the_rewrite_left_unused(acme_plugins):
    """Imports and functions that only rewritten nodes used go; ones the model already had
    without using them are not the rewrite's business and stay."""
    model = model_from_text("""
        <ir_version: 10, opset_import: ["" : 18, "com.acme" : 1, "com.unused" : 1, "local" : 1]>
        g (float[N] x) => (float[N] y) {
            y = local.Block (x)
        }
        <domain: "local", opset_import: ["" : 18, "com.acme" : 1]>
        Block (x) => (y) {
            y = com.acme.FusedSwish (x)
        }
        <domain: "local", opset_import: ["" : 18]>
        Spare (x) => (y) {
            y = Relu (x)
        }""")
    result = rewrite(model, ["onnxruntime"], plugins=acme_plugins, confirm=False)
    assert result.report.ok
    out = result.model
    assert {o.domain: o.version for o in out.opset_import} == {
        "": 18, "com.unused": 1, "local": 1}
    assert [f.name for f in out.functions] == ["Block", "Spare"]
    assert {o.domain for o in out.functions[0].opset_import} == {""}
    assert_close(run_ort(out, {"x": X}), run_reference(model, {"x": X}))


def test_nothing_to_do_returns_the_model_unchanged(plugins):
    model = model_from_text("""
        <ir_version: 10, opset_import: ["" : 18, "com.unused" : 1]>
        g (float[N] x) => (float[N] y) { y = Relu (x) }""")
    result = rewrite(model, ["onnxruntime"], plugins=plugins, confirm=False)
    assert result.report.ok and not result.report.applied
    assert result.model.SerializeToString() == model.SerializeToString()


# -- unfixable, partial, dry run, explain ----------------------------------------------------

MIXED = """
    <ir_version: 10, opset_import: ["" : 28, "com.acme" : 1, "org.example" : 3]>
    g (float[N] x, bool c) => (float[N] y, float[N] z, float[N] w) {
        y = SwiGLU (x, x)
        z = com.acme.Mystery (x)
        w = If (c) <
            then_branch = then_g () => (float[N] t) {
                t1 = com.acme.Mystery (x)
                t = org.example.Gizmo (t1)
            },
            else_branch = else_g () => (float[N] e) { e = Relu (x) }
        >
    }"""


def test_unfixable_lists_every_finding_and_changes_nothing(plugins, tmp_path):
    model = model_from_text(MIXED)
    source = write_model(tmp_path / "in.onnx", model)
    before = source.read_bytes()
    out = tmp_path / "out.onnx"
    with pytest.raises(UnfixableError) as info:
        rewrite(source, ["onnxruntime"], output=out, plugins=plugins)
    e = info.value
    assert sorted(f.op_label for f in e.findings) == [
        "com.acme::Mystery(1)", "com.acme::Mystery(1)", "org.example::Gizmo(3)"]
    message = str(e)
    assert message.startswith("3 finding(s) have no remedy, nothing was changed")
    assert "com.acme::Mystery(1) ×2" in message and "org.example::Gizmo(3) ×1" in message
    assert "no installed plugin registers a decomposition" in message
    assert "SwiGLU" not in message  # it has a remedy
    assert "\n" not in message
    assert source.read_bytes() == before
    assert not out.exists()
    assert list(tmp_path.iterdir()) == [source]
    # a ModelProto is not touched either
    proto = model_from_text(MIXED)
    with pytest.raises(UnfixableError):
        rewrite(proto, ["onnxruntime"], plugins=plugins)
    assert proto.SerializeToString() == model.SerializeToString()


def test_cli_unfixable_exits_1_with_one_line_and_writes_nothing(tmp_path, capsys,
                                                               monkeypatch):
    monkeypatch.setenv("COLUMNS", "1000")  # one line (long errors wrap to the terminal)
    source = write_model(tmp_path / "in.onnx", model_from_text(MIXED))
    before = source.read_bytes()
    code, stdout, err = run_cli(["rewrite", source, "-o", tmp_path / "out.onnx"], capsys)
    assert code == 1
    assert err.startswith("error: 3 finding(s) have no remedy") and err.count("\n") == 1
    assert not (tmp_path / "out.onnx").exists() and source.read_bytes() == before


def test_partial_rewrites_what_it_can_and_reports_the_rest(tmp_path, capsys):
    model = model_from_text(MIXED)
    source = write_model(tmp_path / "in.onnx", model)
    out = tmp_path / "out.onnx"
    # no runtime runs com.acme::Mystery or org.example::Gizmo, so nothing can run the
    # original: what --partial changed is unverified, and written only when allowed
    code, stdout, err = run_cli(
        ["rewrite", source, "-o", out, "--partial", "--json", "--no-confirm"], capsys)
    assert code == 3, err
    report = json.loads(stdout)
    assert report["verdict"] == "unverified" and not report["written"] and not out.exists()
    assert "could not evaluate the original" in report["verdict_reason"]
    code, stdout, err = run_cli(["rewrite", source, "-o", out, "--partial", "--json",
                                 "--no-confirm", "--allow-unverified"], capsys)
    assert code == 3, err
    report = json.loads(stdout)
    assert not report["ok"] and report["output"] == str(out) and report["written"]
    # paths are in the written model (the SwiGLU before them became several nodes)
    remaining = sorted((r["op_type"], "then_branch" in r["path"]) for r in report["remaining"])
    assert remaining == [("Gizmo", True), ("Mystery", False), ("Mystery", True)]
    rewritten = onnx.load(out)
    assert_swiglu_applied({(a["kind"], a["plugin"], a["op"]) for a in report["applied"]},
                          rewritten)
    ops = op_types(rewritten)
    assert {"com.acme::Mystery", "org.example::Gizmo"} <= ops
    assert not {"ai.onnx::SwiGLU", "ai.onnx::Swish"} & ops
    # the imports the remaining nodes need are kept
    assert {o.domain for o in rewritten.opset_import} == {"", "com.acme", "org.example"}


def test_dry_run_plans_and_writes_nothing(tmp_path, capsys):
    model, _ = make_model("if", "swiglu")
    source = write_model(tmp_path / "in.onnx", model)
    before = source.read_bytes()
    out = tmp_path / "out.onnx"
    code, stdout, err = run_cli(["rewrite", source, "-o", out, "--dry-run", "--json"], capsys)
    assert code == 0, err
    report = json.loads(stdout)
    assert report["dry_run"] and report["output"] is None
    # planned: SwiGLU's decomposition (Swish inside it comes later), and on an onnxruntime
    # below opset 28 the pass that converts the model to its ceiling
    assert [(a["kind"], a["op"]) for a in report["applied"]] == [
        ("decomposition", "ai.onnx::SwiGLU(28)")] + [("pass", "ai.onnx")] * CONVERTS_DOWN
    assert not out.exists() and source.read_bytes() == before
    assert list(tmp_path.iterdir()) == [source]
    # an unfixable model: the plan says what remains, still nothing written
    write_model(source, model_from_text(MIXED))
    code, stdout, _ = run_cli(["rewrite", source, "-o", out, "--dry-run", "--json"], capsys)
    assert code == 1
    assert len(json.loads(stdout)["remaining"]) == 3
    assert not out.exists()


EXPLAIN_PLUGIN = '''
"""Decompositions that decline in every way the engine knows."""
from onnx import parser

from rewriter.plugin import Declined, hookimpl

USES_UNKNOWN = parser.parse_function("""
<domain: "com.acme", opset_import: ["": 18, "com.acme": 1]>
Chain (x) => (y) {
    y = com.acme.Mystery (x)
}
""")


def declines(ctx):
    return None


def says_why(ctx):
    raise Declined("axis must be a constant")


@hookimpl
def register_decompositions(registry):
    registry.add("com.acme", "Mystery", declines, description="acme:declines")
    registry.add("com.acme", "Chain", USES_UNKNOWN, description="acme:chain")
    registry.add("com.acme", "Old", USES_UNKNOWN, opsets=(1, 12), description="acme:old")
    registry.add("com.acme", "Reasoned", says_why, description="acme:reasoned")
'''


def test_explain_lists_candidates_and_why_each_declined(tmp_path, capsys):
    plugin = tmp_path / "explainer.py"
    plugin.write_text(EXPLAIN_PLUGIN)
    source = write_model(tmp_path / "in.onnx", model_from_text("""
        <ir_version: 10, opset_import: ["" : 28, "com.acme" : 1, "org.example" : 1]>
        g (float[N] x) => (float[N] a, float[N] b, float[N] c, float[N] d, float[N] e,
                           float[N] f) {
            a = SwiGLU (x, x)
            b = com.acme.Mystery (x)
            c = com.acme.Chain (x)
            d = com.acme.Old (x)
            e = com.acme.Reasoned (x)
            f = org.example.Gizmo (x)
        }"""))
    out = tmp_path / "out.onnx"
    code, stdout, err = run_cli(
        ["rewrite", source, "-o", out, "--explain", "--json", "-p", plugin], capsys)
    assert code == 1, err
    report = json.loads(stdout)
    why = {item["finding"]["op_type"]: item["candidates"] for item in report["explain"]}
    if CONVERTS_DOWN:  # the model's opset is above onnxruntime's: converting it is chosen
        model_level = why.pop("")
        assert [c["plugin"] for c in model_level if c["accepted"]] == ["opset-conversion"]
    assert set(why) == {"SwiGLU", "Mystery", "Chain", "Old", "Reasoned", "Gizmo"}

    def only(op):
        """The one decomposition candidate (passes, when installed, are listed too)."""
        (candidate,) = [c for c in why[op] if c["kind"] == "decomposition"]
        return candidate

    for op, candidates in why.items():
        if op != "SwiGLU":  # nothing accepted, and every candidate says why not
            assert all(not c["accepted"] and c["why"] for c in candidates), candidates

    assert only("SwiGLU")["accepted"] and only("SwiGLU")["plugin"] == "onnx-functions"
    assert only("Mystery") == {"kind": "decomposition", "plugin": "explainer",
                               "rule": "acme:declines", "accepted": False,
                               "why": "declined (its builder returned None, no reason given)",
                               "relevant": False}
    assert not only("Chain")["accepted"]
    assert only("Chain")["why"].startswith("its body uses com.acme::Mystery")
    old_why = "valid for ai.onnx opsets 1..12; the model is at 28"
    if CONVERTS_DOWN:  # the model is converted down, so the planner also tries opset 12
        assert only("Old")["why"].startswith(f"{old_why}; written at 12: its body uses "
                                             "com.acme::Mystery(1)")
    else:
        assert only("Old")["why"] == old_why
    assert only("Reasoned")["why"] == "axis must be a constant"
    assert only("Gizmo")["why"] == "no installed plugin registers a decomposition for this op"
    assert not out.exists()

    code, stdout, _ = run_cli(["rewrite", source, "-o", out, "--explain", "-p", plugin], capsys)
    assert code == 1
    assert "declined: valid for ai.onnx opsets 1..12" in stdout
    assert "chosen" in stdout
    assert not out.exists()


# -- inputs and outputs ----------------------------------------------------------------------

def test_rewrite_returns_the_kind_it_was_given(plugins, tmp_path):
    import onnx_ir

    model, feeds = make_model("loop", "swiglu")
    expected = run_reference(model, feeds)

    from_proto = rewrite(model, ["onnxruntime"], plugins=plugins, confirm=False)
    assert isinstance(from_proto.model, onnx.ModelProto)

    ir_model = onnx_ir.from_proto(model)
    from_ir = rewrite(ir_model, ["onnxruntime"], plugins=plugins, confirm=False)
    assert isinstance(from_ir.model, onnx_ir.Model)
    assert from_ir.report.ok

    # in_place on an in-memory model has no file to write back to: nothing is written
    with_in_place = rewrite(model, ["onnxruntime"], plugins=plugins, confirm=False,
                            in_place=True)
    assert isinstance(with_in_place.model, onnx.ModelProto)
    assert with_in_place.report.output is None
    assert not (Path.cwd() / "<in-memory model>").exists()

    source = write_model(tmp_path / "in.onnx", model)
    from_path = rewrite(source, ["onnxruntime"], output=tmp_path / "out.onnx", plugins=plugins,
                        confirm=False)
    assert from_path.model == str(tmp_path / "out.onnx")

    for rewritten in (from_proto.model, onnx_ir.to_proto(from_ir.model),
                      onnx.load(from_path.model)):
        assert "ai.onnx::SwiGLU" not in op_types(rewritten)
        assert_close(run_ort(rewritten, feeds), expected)


def test_cli_refuses_to_overwrite_the_input_without_in_place(tmp_path, capsys):
    model, feeds = make_model("function", "swiglu")
    source = write_model(tmp_path / "in.onnx", model)
    before = source.read_bytes()
    code, stdout, err = run_cli(["rewrite", source, "-o", source], capsys)
    assert code == 2
    assert err.startswith("error: ") and err.count("\n") == 1 and "--in-place" in err
    assert source.read_bytes() == before

    # refused before any work: even an unfixable model gets the usage error
    mixed = write_model(tmp_path / "mixed.onnx", model_from_text(MIXED))
    code, _, err = run_cli(["rewrite", mixed, "-o", mixed], capsys)
    assert code == 2 and err.count("\n") == 1 and "--in-place" in err

    code, _, err = run_cli(["rewrite", source], capsys)  # no output at all
    assert code == 2 and err.count("\n") == 1 and "-o" in err
    assert source.read_bytes() == before

    code, _, err = run_cli(["rewrite", source, "--in-place"], capsys)
    assert code == 0, err
    assert_close(run_ort(onnx.load(source), feeds), run_reference(model, feeds))


# -- the real corpus -------------------------------------------------------------------------

def _test_data(corpus: Path, name: str):
    folder = corpus / "testdata" / name / "test_data_set_0"

    def read(prefix):
        arrays = []
        for path in sorted(folder.glob(f"{prefix}_*.pb"),
                           key=lambda p: int(p.stem.rsplit("_", 1)[1])):
            tensor = onnx.TensorProto()
            tensor.ParseFromString(path.read_bytes())
            arrays.append(numpy_helper.to_array(tensor))
        return arrays

    return read("input"), read("output")


@pytest.mark.parametrize("name", [
    "onnx_op28_swiglu",
    "onnx_op22_roialign_aligned_false",
    "onnx_op26_bitcast_bool_to_uint8",
])
def test_corpus_model_is_fixed_and_matches_its_test_data_or_clearly_unfixable(
        name, corpus, plugins, tmp_path, capsys):
    source = corpus / f"{name}.onnx"
    before = source.read_bytes()
    original = onnx.load(source)
    assert_refused_by_onnxruntime(original)
    out = tmp_path / "out.onnx"
    data = corpus / "testdata" / name  # generated inputs may not fit (RoiAlign's indices)
    given = ["--inputs", data] if data.is_dir() else []
    code, stdout, err = run_cli(["rewrite", source, "-o", out, "-t", "onnxruntime", *given],
                                capsys)
    assert source.read_bytes() == before
    if name == "onnx_op28_swiglu" or code == 0:  # SwiGLU must be fixed; others once a
        assert code == 0, err                       # plugin can (e.g. opset down-conversion)
        inputs, outputs = _test_data(corpus, name)
        rewritten = onnx.load(out)
        feeds = dict(zip((i.name for i in rewritten.graph.input), inputs))
        # the onnx backend suite's own tolerance: RoiAlign's expected values are written
        # to 4 decimals
        assert_close(run_ort(rewritten, feeds), outputs, rtol=1e-3, atol=1e-5)
        return
    # cannot be fixed yet: one clear line naming the op, what onnxruntime lacks, and that
    # no remedy exists; nothing written
    assert code == 1 and not out.exists()
    assert err.count("\n") == 1
    op = {"onnx_op22_roialign_aligned_false": "ai.onnx::RoiAlign(22)",
          "onnx_op26_bitcast_bool_to_uint8": "ai.onnx::BitCast(26)"}[name]
    assert err.startswith(f"error: 1 finding(s) have no remedy, nothing was changed: "
                          f"onnxruntime: {op} ×1: ")
    lacks = {"onnx_op22_roialign_aligned_false": "no CPUExecutionProvider kernel for "
             "RoiAlign(22); kernels exist for versions 10-15, 16",
             "onnx_op26_bitcast_bool_to_uint8": "no kernel for BitCast(26) with "
             "T1=tensor(bool)"}[name]
    assert lacks in err
    assert "no remedy: no installed plugin registers a decomposition for this op" in err
    with pytest.raises(UnfixableError, match="nothing was changed"):
        rewrite(original, ["onnxruntime"], plugins=plugins)


def test_corpus_layernorm_declared_at_opset_12_is_left_alone(corpus, plugins, tmp_path, capsys):
    """ai.onnx::LayerNormalization exists only from opset 17, but onnxruntime registers its
    own under the default domain from opset 1, so the model runs there as it is: the rewrite
    for onnxruntime changes nothing, says the checker's complaint is the original's, and
    succeeds. For a target that really lacks the op, it fails clearly instead."""
    source = corpus / "ort_layernorm_opset12.onnx"
    original = onnx.load(source)
    out = tmp_path / "out.onnx"
    code, stdout, err = run_cli(["rewrite", source, "-o", out, "--json"], capsys)
    assert code == 0, err
    report = json.loads(stdout)
    assert report["ok"] and not report["applied"] and not report["remaining"]
    assert report["verification"]["checker"].startswith("pre-existing: the original fails too")
    assert report["verification"]["onnxruntime load"] == "ok"
    assert out.read_bytes() == original.SerializeToString()

    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 8)).astype(np.float32)
    scale = rng.standard_normal(8).astype(np.float32)
    bias = rng.standard_normal(8).astype(np.float32)
    (y,) = run_ort(onnx.load(out), {"INPUT": x, "SCALE": scale, "BIAS": bias})
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    np.testing.assert_allclose(y, (x - mean) / np.sqrt(var + 1e-4) * scale + bias,
                               rtol=1e-4, atol=1e-5)

    # the reference evaluator follows onnx's schemas: no LayerNormalization at opset 12. For
    # it, onnxruntime's op is a vendor op: decomposed at opset 12, verified against
    # onnxruntime running the original
    result = rewrite(original, ["reference"], plugins=plugins)
    assert result.report.verdict == "verified", result.report.verdict_reason
    assert result.report.comparison.oracle == "onnxruntime"
    assert "LayerNormalization" not in {n.op_type for n in result.model.graph.node}


def test_verification_runs_on_models_with_external_data(plugins, tmp_path, monkeypatch):
    """onnx's checker resolves external data against the current directory; the engine must
    verify from the model's folder, wherever it is called from."""
    import os

    import onnx as _onnx
    from onnx import TensorProto, helper, numpy_helper

    from rewriter.api import rewrite

    w = numpy_helper.from_array(np.ones((4, 4), np.float32), "W")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["X", "W"], ["h"]),
         helper.make_node("Swish", ["h"], ["Y"], alpha=1.0)],
        "g", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [2, 4])], [w],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 24)])
    model.ir_version = 10
    src = tmp_path / "src"
    src.mkdir()
    _onnx.save(model, src / "m.onnx", save_as_external_data=True, location="m.data",
               size_threshold=0)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    out = tmp_path / "out.onnx"
    result = rewrite(src / "m.onnx", ["onnxruntime"], output=out, plugins=plugins,
                     confirm=False)
    assert result.report.verification["checker"] == "ok"
    assert result.report.verification["shape_inference"] == "ok"
    assert (tmp_path / "out.onnx.data").is_file()
    assert os.getcwd() == str(elsewhere)


# -- plans that depend on more than the signature; verification and re-check at scale -----

SHAPES_PLUGIN = '''
"""com.acme ops whose bodies depend on constants, declared shapes and used outputs."""
from onnx import TensorProto, helper, numpy_helper

from rewriter import hookimpl


def _function(name, inputs, outputs, nodes, opset=18):
    return helper.make_function("com.acme", name, inputs, outputs, nodes,
                                [helper.make_opsetid("", opset)])


def build_scale(ctx):
    """Scale(x, s) = x * s for a constant s, baked into the body."""
    s = ctx.constant(ctx.node.input[1])
    if s is None:
        return None
    c = helper.make_node("Constant", [], ["c"], value=numpy_helper.from_array(s, "c"))
    return _function("Scale", ["x", "s"], ["y"], [c, helper.make_node("Mul", ["x", "c"], ["y"])])


def build_flip(ctx):
    """Flip(x): every axis reversed (a Transpose); the rank comes from x's declared shape."""
    declared = ctx.declared.get(ctx.node.input[0])
    if declared is None or not declared.tensor_type.HasField("shape"):
        return None
    rank = len(declared.tensor_type.shape.dim)
    return _function("Flip", ["x"], ["y"], [
        helper.make_node("Transpose", ["x"], ["y"], perm=list(range(rank))[::-1])])


def build_pair(ctx):
    """Pair(x) -> (Relu(x)[, Neg(x)]): the body has the outputs the node uses."""
    if len(ctx.node.output) == 1:
        return _function("Pair", ["x"], ["y"], [helper.make_node("Relu", ["x"], ["y"])])
    return _function("Pair", ["x"], ["y", "z"], [helper.make_node("Relu", ["x"], ["y"]),
                                                   helper.make_node("Neg", ["x"], ["z"])])


def build_cast(to):
    def build(ctx):
        return _function("Cast", ["x"], ["y"], [helper.make_node("Cast", ["x"], ["y"], to=to)])
    return build


@hookimpl
def register_decompositions(registry):
    registry.add("com.acme", "Scale", build_scale, description="shapes:Scale")
    registry.add("com.acme", "Flip", build_flip, description="shapes:Flip")
    registry.add("com.acme", "Pair", build_pair, description="shapes:Pair")
    registry.add("com.acme", "ToHalf", build_cast(TensorProto.FLOAT16),
                 description="shapes:ToHalf")
    registry.add("com.acme", "ToBF16", build_cast(TensorProto.BFLOAT16),
                 description="shapes:ToBF16")
'''


@pytest.fixture(scope="module")
def shapes_plugins(tmp_path_factory):
    path = tmp_path_factory.mktemp("plugins") / "shapes.py"
    path.write_text(SHAPES_PLUGIN)
    return load_plugins([str(path)], autoload=False)


def test_bodies_differ_where_constants_declared_shapes_or_used_outputs_do(shapes_plugins):
    """Plans are cached per node signature; a builder that reads a constant or a declared
    shape, or sees which outputs are used, must still get its own body per node."""
    model = model_from_text("""
        <ir_version: 10, opset_import: ["" : 18, "com.acme" : 1]>
        g (float[2, 3] a, float[2, 3, 4] b) => (float[2, 3] y1, float[2, 3] y2,
                                              float[3, 2] f1, float[4, 3, 2] f2,
                                              float[2, 3] p1, float[2, 3] p2, float[2, 3] n2) {
            two = Constant <value = float {2.0}> ()
            ten = Constant <value = float {10.0}> ()
            y1 = com.acme.Scale (a, two)
            y2 = com.acme.Scale (a, ten)
            f1 = com.acme.Flip (a)
            f2 = com.acme.Flip (b)
            p1 = com.acme.Pair (a)
            p2, n2 = com.acme.Pair (a)
        }""")
    # no runtime runs com.acme ops: this test is the oracle (numpy, below)
    result = rewrite(model, ["onnxruntime"], plugins=shapes_plugins, confirm=False,
                     verify=False)
    assert result.report.ok and result.report.verdict == "unverified", result.report
    a = np.arange(6, dtype=np.float32).reshape(2, 3) - 2.5
    b = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    expected = [a * 2, a * 10, a.T, b.transpose(2, 1, 0), np.maximum(a, 0),
                np.maximum(a, 0), -a]
    assert_close(run_ort(result.model, {"a": a, "b": b}), expected)


def test_big_rewrite_verifies_regions_and_rechecks_only_what_changed(acme_plugins,
                                                                      monkeypatch):
    """Above FULL_CHECK_MAX_NODES the full checker runs on each remedy function alone and
    the target re-check only where input types changed (none here: detection typed the
    first FusedSwish's output from its plan, so the Add was judged with it); the result is
    still fully valid."""
    import rewriter.engine as pipeline

    monkeypatch.setattr(pipeline, "FULL_CHECK_MAX_NODES", 0)
    model = model_from_text("""
        <ir_version: 10, opset_import: ["" : 18, "com.acme" : 1]>
        g (float[N] x) => (float[N] y) {
            s = com.acme.FusedSwish (x)
            r = Relu (x)
            t = Add (s, r)
            y = com.acme.FusedSwish <alpha: float = 0.5> (t)
        }""")
    result = rewrite(model, ["onnxruntime"], plugins=acme_plugins, confirm=False)
    report = result.report
    assert report.ok, report.verification
    assert report.verification["checker"] == report.verification["shape_inference"] == "ok"
    assert report.verification_scope.startswith("rewritten regions: 2 remedy function(s)")
    assert report.recheck_scope.startswith("0 node(s)")
    onnx.checker.check_model(result.model, full_check=True)
    assert_close(run_ort(result.model, {"x": X}), run_reference(model, {"x": X}))


def test_the_splice_builds_the_result_from_the_input_and_leaves_it_as_it_was(
        acme_plugins, monkeypatch):
    """The rewrite reads the input and builds the result from it (no working copy): the
    input's bytes stay as they were, a call inside an If branch is spliced in a copy of
    the If, a stale declared shape of a replaced output is cleared in the result only, and
    above FULL_CHECK_MAX_NODES onnx's checker runs on the input (the kept nodes, byte for
    byte) while each remedy function is fully checked alone; the result still passes the
    full checker and computes what the original computes."""
    import rewriter.engine as pipeline

    monkeypatch.setattr(pipeline, "FULL_CHECK_MAX_NODES", 0)
    model = model_from_text("""
        <ir_version: 10, opset_import: ["" : 18, "com.acme" : 1]>
        g (float[N] x, bool c) => (float[N] y, float[N] z) <float[2, 2] s> {
            s = com.acme.FusedSwish (x)
            t = Relu (s)
            y = Add (t, x)
            z = If (c) <
                then_branch = g1 () => (float[N] a) { a = com.acme.FusedSwish (x) },
                else_branch = g2 () => (float[N] b) { b = Relu (x) }>
        }""")
    before = model.SerializeToString()
    result = rewrite(model, ["onnxruntime"], plugins=acme_plugins, confirm=False,
                     verify=False)
    report = result.report
    assert model.SerializeToString() == before
    assert report.ok, report.verification
    assert "non-full checker on the input" in report.verification_scope
    out = result.model
    assert not [n for n in out.graph.node if n.domain == "com.acme"]
    branch = next(a.g for n in out.graph.node if n.op_type == "If" for a in n.attribute
                  if a.name == "then_branch")
    assert branch.node and not [n for n in branch.node if n.domain == "com.acme"]
    (s,) = [v for v in out.graph.value_info if v.name == "s"]
    assert not s.type.tensor_type.HasField("shape")  # stale [2, 2] cleared...
    (s,) = [v for v in model.graph.value_info if v.name == "s"]
    assert s.type.tensor_type.HasField("shape")  # ...in the result only
    onnx.checker.check_model(out, full_check=True)
    for c in (True, False):
        feeds = {"x": X, "c": np.array(c)}
        assert_close(run_ort(out, feeds), run_reference(model, feeds))


def test_a_kernel_remedy_changes_a_copy_and_leaves_the_input_as_it_was(acme_plugins):
    """A remedy the splice from the input does not cover (a kernel) changes a copy of the
    model, its findings pointed at the copy's nodes."""
    model = model_from_text("""
        <ir_version: 10, opset_import: ["" : 18, "com.acme" : 1]>
        g (float[N] x) => (float[N] y) {
            a = com.acme.FusedSwish (x)
            y = com.acme.FusedSwish (a)
        }""")
    before = model.SerializeToString()
    result = rewrite(model, ["onnxruntime"], plugins=acme_plugins, prefer="kernel",
                     confirm=False, verify=False)
    assert model.SerializeToString() == before
    assert result.report.ok and result.model is not model
    assert [n.domain for n in result.model.graph.node] != [n.domain for n in model.graph.node]


TYPE_CHANGE = """
    <ir_version: 10, opset_import: ["" : 18, "com.acme" : 1]>
    g (float[N] x) => (float[N] y) {
        h = com.acme.ToHalf (x)
        y = Add (h, x)
    }"""


@pytest.mark.parametrize("limit", [0, 10**9], ids=["regions", "whole-model"])
def test_a_body_whose_type_breaks_its_consumer_fails_verification(shapes_plugins, monkeypatch,
                                                                 limit):
    """ToHalf's output type was unknown; its body makes it float16, which the Add consuming
    it with a float cannot take: both verification modes must say so."""
    import rewriter.engine as pipeline

    monkeypatch.setattr(pipeline, "FULL_CHECK_MAX_NODES", limit)
    result = rewrite(model_from_text(TYPE_CHANGE), ["onnxruntime"], plugins=shapes_plugins,
                     confirm=False, verify=False)
    verdict = result.report.verification["shape_inference"]
    assert not result.report.ok
    assert "float16" in verdict or "inconsistent type" in verdict.lower(), verdict


def test_a_body_changing_a_declared_type_leaves_the_quick_recheck(shapes_plugins,
                                                                   monkeypatch):
    """The re-check looks only at subgraph holders and sinks while no body output changes
    type; here h is declared float and ToHalf's body makes it float16: the re-check goes
    over the kept nodes as a walk of the whole result does, and reports the change."""
    import rewriter.detect.walker as walker
    import rewriter.engine as pipeline

    model = model_from_text("""
        <ir_version: 10, opset_import: ["" : 18, "com.acme" : 1]>
        g (float[N] x) => (float[N] y) <float[N] h> {
            h = com.acme.ToHalf (x)
            y = Add (h, x)
        }""")
    quick, compared = [], []
    real_quick, real_recheck = walker._Walker._recheck_unchanged, pipeline.recheck

    def spy(self, *args):
        quick.append(real_quick(self, *args))
        return quick[-1]

    def both(model, target, before, replaced, body_outputs, visit=None):
        fast = real_recheck(model, target, before, replaced, body_outputs, visit)
        whole = real_recheck(model, target, before, replaced, body_outputs)
        compared.append((fast.findings, fast.conflicts, fast.checked, fast.types))
        assert compared[-1] == (whole.findings, whole.conflicts, whole.checked, whole.types)
        return fast

    monkeypatch.setattr(walker._Walker, "_recheck_unchanged", spy)
    monkeypatch.setattr(pipeline, "recheck", both)
    report = rewrite(model, ["onnxruntime"], plugins=shapes_plugins, confirm=False,
                     verify=False).report
    assert quick == [walker._CHANGED]
    (_, conflicts, _, types), = compared
    assert any("'h'" in c and "float16" in c for c in conflicts), conflicts
    assert not report.ok


def test_a_node_the_new_types_break_is_found_like_a_full_walk(tmp_path, monkeypatch):
    """ToBF16's output type is unknown to onnx's schemas; its body makes it bfloat16, for
    which onnxruntime has no Tanh kernel. Detection types the output from the plan, so the
    Tanh reading it is a finding from the first walk, as the whole-model walk after the
    splice finds it (onnx-standard, which widens a bfloat16 Tanh to float, is left out so
    that the finding stays); without --partial nothing is written and the Tanh is named,
    with where the type of its input comes from."""
    import rewriter.engine as pipeline

    path = tmp_path / "shapes.py"
    path.write_text(SHAPES_PLUGIN)
    shapes_plugins = load_plugins(["no:onnx-standard", str(path)], autoload=False)

    model = model_from_text("""
        <ir_version: 10, opset_import: ["" : 18, "com.acme" : 1]>
        g (float[N] x) => (float[N] z) {
            h = com.acme.ToBF16 (x)
            y = Tanh (h)
            z = Cast <to = 1> (y)
        }""")
    from rewriter.api import check

    # detection alone (no plan) cannot type h: it finds ToBF16 only
    assert [f.op_type for f in check(model, ["onnxruntime"], confirm=False).findings] == [
        "ToBF16"]
    fast = rewrite(model, ["onnxruntime"], plugins=shapes_plugins, confirm=False,
                   partial=True, verify=False).report
    monkeypatch.setattr(pipeline, "_recheck", lambda *args: None)
    walked = rewrite(model, ["onnxruntime"], plugins=shapes_plugins, confirm=False,
                     partial=True, verify=False).report
    assert [(f.op_type, f.reason) for f in fast.remaining] == [("Tanh", "type-binding")]
    assert [f.as_dict() for f in fast.remaining] == [f.as_dict() for f in walked.remaining]
    assert not fast.ok
    with pytest.raises(UnfixableError) as caught:
        rewrite(model, ["onnxruntime"], plugins=shapes_plugins, confirm=False, verify=False)
    (refused,) = caught.value.findings
    assert refused.op_type == "Tanh"  # and says where the type of its input comes from
    assert refused.detail == (f"{walked.remaining[0].detail}; its input 'h' is "
                              "tensor(bfloat16) once com.acme::ToBF16(1) is replaced by its "
                              "remedy")


def test_invalid_node_without_a_taking_decomposition_asks_to_fix_the_export(plugins):
    """A standard node that breaks the ONNX spec (LayerNormalization without its required
    scale) is the exporter's to fix: no remedy is tried (the spec's body would read the
    missing scale), and the explanation says so. (A vendor op onnx has no schema for may be
    taken by a decomposition as it is: tests/test_com_microsoft_attention.py, GQA.)"""
    model = model_from_text("""
        <ir_version: 9, opset_import: ["" : 17]>
        g (float[2, 4] x) => (float[2, 4] y) {
            y = LayerNormalization <axis: int = -1> (x, "")
        }
    """)
    report = rewrite(model, ["onnxruntime"], plugins=plugins, explain=True, dry_run=True,
                     verify=False).report
    (finding,) = report.remaining
    assert finding.reason == "invalid-node"
    assert "fix the export" in json.dumps(report.explain)


def test_kernel_remedies_keep_each_nodes_own_inputs_and_outputs(acme_plugins):
    """Nodes of one signature share a plan; retargeting them to a kernel must not give
    every node the first one's names (it did: the model had one output defined thrice)."""
    model = model_from_text("""
        <ir_version: 10, opset_import: ["" : 18, "com.acme" : 1]>
        g (float[N] x) => (float[N] y) {
            ["first"] a = com.acme.FusedSwish (x)
            ["second"] b = com.acme.FusedSwish (a)
            ["third"] y = com.acme.FusedSwish (b)
        }""")
    result = rewrite(model, ["onnxruntime"], plugins=acme_plugins, prefer="kernel",
                     confirm=False)
    assert result.report.verdict == "verified", result.report.verdict_reason
    nodes = [(n.name, list(n.input), list(n.output)) for n in result.model.graph.node]
    assert nodes == [("first", ["x"], ["a"]), ("second", ["a"], ["b"]), ("third", ["b"], ["y"])]
    x = np.linspace(-3, 3, 7, dtype=np.float32)
    want = x
    for _ in range(3):
        want = want / (1 + np.exp(-want))
    from rewriter.comparison.runtime import session

    (got,) = session(result.model, plugins=acme_plugins).run(None, {"x": x})
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
