"""A generated transformer-like model (benchmarks/generate.py), small enough for every test
run: ``check`` must find exactly the custom-op nodes the generator inserted, wherever they
are (main graph or If branch), and ``inspect`` must count every node. Not timed; the timings
live in benchmarks/bench_check.py."""

from __future__ import annotations

import importlib.util
import re
import sys
from collections import Counter
from pathlib import Path

import pytest

from rewriter.api import check
from rewriter.io.model import load_model
from rewriter.report.summary import inspect_model

_GENERATE = Path(__file__).resolve().parents[1] / "benchmarks" / "generate.py"


def _generator():
    spec = importlib.util.spec_from_file_location("benchmarks_generate", _GENERATE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


generate = _generator()
NODES = 2000


@pytest.fixture(scope="module", params=["inline", "external"])
def generated(request, tmp_path_factory):
    gen = generate.generate_model(NODES, custom_fraction=0.05, seed=7)
    path = tmp_path_factory.mktemp(request.param) / "model.onnx"
    generate.save_generated(gen, path, external=request.param == "external")
    return gen, path


def test_generator_is_deterministic_and_exact():
    a = generate.generate_model(500, custom_fraction=0.3, seed=1)
    b = generate.generate_model(500, custom_fraction=0.3, seed=1)
    assert a.model.SerializeToString() == b.model.SerializeToString()
    assert a.node_count == 500
    assert a.custom_total == round(0.3 * 500)
    c = generate.generate_model(500, custom_fraction=0.3, seed=2)
    assert c.model.SerializeToString() != a.model.SerializeToString()


def test_check_finds_exactly_the_inserted_custom_ops(generated, plugins):
    gen, path = generated
    assert gen.node_count == NODES
    assert gen.custom_in_subgraphs >= 1 and gen.if_nodes >= 1
    assert set(gen.custom_counts) == {"FastGelu", "SkipLayerNormalization", "FusedSwish"}

    # The reference evaluator implements neither com.microsoft nor com.acme: every custom
    # node is a finding, and nothing else is.
    report = check(path, ["reference"], plugins=plugins, confirm=False)
    findings = report.findings
    assert len(findings) == gen.custom_total
    assert Counter(f.op_type for f in findings) == Counter(gen.custom_counts)
    assert {f.reason for f in findings} == {"unknown-domain"}
    assert len({f.path for f in findings}) == len(findings)
    inside_if = [f for f in findings if "/then_branch/" in f.path]
    assert len(inside_if) == gen.custom_in_subgraphs
    assert all(f.op_type == "FusedSwish" for f in inside_if)

    # onnxruntime has kernels for the com.microsoft ops: only the made-up domain fails.
    report = check(path, ["onnxruntime"], plugins=plugins, confirm=False)
    assert len(report.findings) == gen.custom_counts["FusedSwish"]
    assert {(f.domain, f.op_type, f.reason) for f in report.findings} == {
        ("com.acme", "FusedSwish", "unknown-domain")
    }


def test_inspect_counts_every_node(generated):
    gen, path = generated
    info = inspect_model(load_model(path))
    assert info["nodes"] == NODES == gen.node_count
    assert sum(op["count"] for op in info["operators"]) == NODES
    assert info["subgraphs"] == {"count": 2 * gen.if_nodes, "max_depth": 1}
    counts = {(op["domain"], op["op_type"]): op["count"] for op in info["operators"]}
    assert counts[("com.acme", "FusedSwish")] == gen.custom_counts["FusedSwish"]
    assert counts[("com.microsoft", "FastGelu")] == gen.custom_counts["FastGelu"]
    assert counts[("ai.onnx", "If")] == gen.if_nodes
    assert info["tensors"]["count"] == len(gen.model.graph.initializer)
    external = info["tensors"]["external_bytes"]
    assert (external > 0) == (path.parent.name.startswith("external"))


_BENCH_PLUGIN = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_plugin.py"


@pytest.mark.parametrize("target", ["reference", "onnxruntime"])
def test_rewrite_at_scale_verifies_regions_and_matches_a_whole_walk(generated, tmp_path,
                                                                      monkeypatch, target):
    """The big-model path (regions verified alone, target re-check only where types
    changed), forced on the generated model: nothing custom is left, a whole-model walk and
    onnx's full checker agree with the report, and the statistics are the model's."""
    import onnx

    import rewriter.engine as pipeline
    from rewriter.api import rewrite
    from rewriter.graph.walk import op_counts
    from rewriter.manager import load_plugins

    gen, path = generated
    monkeypatch.setattr(pipeline, "FULL_CHECK_MAX_NODES", 0)
    bench = load_plugins([str(_BENCH_PLUGIN)], autoload=False)
    out = tmp_path / "out.onnx"
    report = rewrite(path, [target], output=out, plugins=bench, confirm=False,
                     verify=False).report
    assert report.ok, report.verification
    assert report.verification_scope.startswith("rewritten regions")
    assert report.recheck_scope != "whole model"
    assert check(out, [target], plugins=bench, confirm=False).findings == []
    result = onnx.load(out)
    onnx.checker.check_model(result, full_check=True)
    counts = op_counts(result)
    left = {d for d, _ in counts} & {"com.acme", "com.microsoft"}
    assert left == (set() if target == "reference" else {"com.microsoft"})  # it runs those
    assert report.after.nodes == sum(counts.values())
    assert report.after.ops == pipeline.ModelStats.from_counts(counts).ops  # from the plan
    applied = sum(report.applied.values())
    assert applied == (gen.custom_total if target == "reference"
                       else gen.custom_counts["FusedSwish"])


def test_recheck_from_the_splice_visits_less_and_finds_the_same(generated, tmp_path,
                                                                  monkeypatch):
    """The re-check looks only at the nodes the splice kept and the body nodes making a
    call's outputs (the positions it recorded), and finds what a pass over every node of
    the result finds: the same findings, conflicts, checked nodes and types."""
    import rewriter.engine as pipeline
    from rewriter.api import rewrite
    from rewriter.manager import load_plugins

    gen, path = generated
    monkeypatch.setattr(pipeline, "FULL_CHECK_MAX_NODES", 0)
    seen = []
    real = pipeline.recheck

    def both(model, target, before, replaced, body_outputs, visit=None):
        fast = real(model, target, before, replaced, body_outputs, visit)
        whole = real(model, target, before, replaced, body_outputs)
        seen.append((len(visit.merged()) if visit else 0, len(model.graph.node)))
        assert (fast.findings, fast.conflicts, fast.checked, fast.types) == (
            whole.findings, whole.conflicts, whole.checked, whole.types)
        return fast

    monkeypatch.setattr(pipeline, "recheck", both)
    bench = load_plugins([str(_BENCH_PLUGIN)], autoload=False)
    report = rewrite(path, ["reference"], output=tmp_path / "out.onnx", plugins=bench,
                     confirm=False, verify=False).report
    assert report.ok and report.recheck_scope != "whole model"
    (visited, nodes), = seen
    assert gen.main_graph_nodes - gen.custom_total <= visited < nodes  # kept + calls' ends


def test_provenance_is_compact_and_names_readable(tmp_path):
    """At 28% custom ops, the provenance (one table in the model's metadata, per-node keys
    where a node's rule is not its region's) is at most 2% of the rewritten model; every
    created node is named ``<replaced node>/<op>_<k>`` within 80 characters (a 200-character
    original name is cut) and leads to its plugin and rule; --strip-provenance removes it
    all and keeps the graph."""
    import onnx

    from rewriter.api import rewrite
    from rewriter.apply.provenance import TABLE_KEY, read_table, stamp_of
    from rewriter.manager import load_plugins

    gen = generate.generate_model(3000, custom_fraction=0.28, seed=3)
    custom = [n for n in gen.model.graph.node if n.domain in ("com.acme", "com.microsoft")]
    long_name = "layer." * 33 + "act"  # 201 characters
    custom[0].name = long_name
    custom[1].name = "ffn.gelu"
    replaced = {n.name or n.output[0]: n.op_type for n in gen.model.graph.node
                if n.domain in ("com.acme", "com.microsoft")}
    path = tmp_path / "model.onnx"
    generate.save_generated(gen, path, external=True)
    bench = load_plugins([str(_BENCH_PLUGIN)], autoload=False)
    original_names = {n.name for n in gen.model.graph.node}

    def rewritten(strip: bool) -> tuple[onnx.ModelProto, int]:
        out = tmp_path / f"out_{strip}.onnx"
        report = rewrite(path, ["reference"], output=out, plugins=bench, confirm=False,
                         verify=False, strip_provenance=strip).report
        assert report.written, report.verdict_reason
        return onnx.load(out, load_external_data=False), out.stat().st_size

    model, size = rewritten(False)
    table = read_table(model)
    provenance = sum(p.ByteSize() + 2 for p in model.metadata_props if p.key == TABLE_KEY)
    provenance += sum(p.ByteSize() + 2 for n in model.graph.node for p in n.metadata_props)
    assert provenance / size <= 0.02, (provenance, size)
    created = [n for n in model.graph.node if n.name not in original_names]
    assert len(created) > len(replaced)
    assert max(len(n.name) for n in model.graph.node) <= 80
    rules = {"FastGelu": "bench:FastGelu (tanh approximation)",
             "FusedSwish": "bench:FusedSwish",
             "SkipLayerNormalization": "bench:SkipLayerNormalization"}
    for node in created:
        base = node.name.rpartition("/")[0]
        op = replaced["ffn.gelu" if base == "ffn.gelu" else
                      long_name if "~" in base else base]
        plugin, rule, replaced_op = stamp_of(node, table)
        assert (plugin, rule) == ("bench_plugin", rules[op])
        assert replaced_op.endswith(f"::{op}")
    assert any(n.name.startswith("ffn.gelu/") for n in created)
    assert any(n.name.startswith("layer.layer.") and re.search(r"~[0-9a-f]{8}/", n.name)
               for n in created)

    stripped, stripped_size = rewritten(True)
    assert not any(p.key == TABLE_KEY for p in stripped.metadata_props)
    assert not any(n.metadata_props for n in stripped.graph.node)
    assert all(stamp_of(n, read_table(stripped)) is None for n in stripped.graph.node)
    assert [n.name for n in stripped.graph.node] == [n.name for n in model.graph.node]
    assert stripped_size < size


def test_confirmation_by_default_is_sized_by_node_count(generated, plugins, monkeypatch):
    """A session's creation costs by node, not by byte: a model past
    CONFIRM_MAX_NODES main-graph nodes is not confirmed by default, however small its
    file; --confirm still forces it."""
    import rewriter.detect.targets as targets
    from rewriter.detect.targets import TargetOptions, resolve_targets

    _, path = generated
    loaded = load_model(path)
    for option, limit, expected in [(None, 10**6, True), (None, 1000, False),
                                    (True, 1000, True)]:
        monkeypatch.setattr(targets, "CONFIRM_MAX_NODES", limit)
        (target,) = resolve_targets(plugins, ["onnxruntime"], TargetOptions(confirm=option))
        assert target.wants_confirm(loaded) is expected, (option, limit)


def test_cut_names_that_share_a_prefix_stay_distinct():
    """Two replaced nodes whose long names differ only past the cut: their created nodes'
    names must differ (onnxruntime refuses two nodes of one name; seen on two bfloat16
    Attention node cases)."""
    from rewriter.apply.inline import MAX_NAME, region_base

    labels = ["MatMul_0", "Softmax_12"]
    a = region_base("attention/" + "x" * 100 + "/a", labels)
    b = region_base("attention/" + "x" * 100 + "/b", labels)
    assert a != b
    assert all(len(f"{base}/{label}") <= MAX_NAME for base in (a, b) for label in labels)
    assert region_base("short", labels) == "short"


def _external(tensor, location: str, folder: Path, offset: int) -> None:
    """Move ``tensor``'s bytes to ``folder/location`` at ``offset``."""
    from onnx import TensorProto

    data = tensor.raw_data
    with open(folder / location, "ab") as f:
        f.seek(0, 2)
        assert f.tell() == offset
        f.write(data)
    tensor.ClearField("raw_data")
    tensor.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", str(offset)),
                       ("length", str(len(data)))):
        entry = tensor.external_data.add()
        entry.key, entry.value = key, value


@pytest.mark.parametrize("constant_outside", [False, True])
def test_save_renames_every_external_location_with_and_without_a_walk(tmp_path, monkeypatch,
                                                                      constant_outside):
    """The save reads the main graph's initializers for external data and checks the
    serialized bytes for any other; a Constant's external tensor makes it walk the model.
    Either way every location is renamed to the copy, the values read back are the input's,
    and the domain imports from the engine's counts are the walk's."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    import rewriter.io.model as io_model
    from rewriter.io.model import missing_imports, save_model

    walks = []
    real_walk = io_model._location_entries
    monkeypatch.setattr(io_model, "_location_entries",
                        lambda m: walks.append(1) or real_walk(m))

    w = numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3), "W")
    c = numpy_helper.from_array(np.full((2, 3), 0.5, np.float32), "c")
    src = tmp_path / "src"
    src.mkdir()
    _external(w, "weights.bin", src, 0)
    if constant_outside:
        _external(c, "weights.bin", src, 24)
    nodes = [helper.make_node("Constant", [], ["C"], value=c),
             helper.make_node("Add", ["W", "C"], ["S"]),
             helper.make_node("Custom", ["S"], ["Y"], domain="com.acme")]
    graph = helper.make_graph(nodes, "g", [], [helper.make_tensor_value_info(
        "Y", TensorProto.FLOAT, [2, 3])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, src / "model.onnx")
    loaded = load_model(src / "model.onnx")
    walked = missing_imports(loaded.model)
    assert walked == [("com.acme", None)]

    outs = []
    for domains in (None, {"", "com.acme"}):
        out_dir = tmp_path / f"out{len(outs)}"
        out_dir.mkdir()
        out = save_model(loaded.model, out_dir / "m.onnx", source=loaded, domains=domains)
        outs.append(out.read_bytes())
        written = onnx.load(str(out), load_external_data=False)
        locations = {e.value for t in [written.graph.initializer[0],
                                       written.graph.node[0].attribute[0].t]
                     for e in t.external_data if e.key == "location"}
        assert locations == {"m.onnx.data"}
        assert [(o.domain, o.version) for o in written.opset_import] == [("", 17),
                                                                        ("com.acme", 1)]
        full = onnx.load(str(out))  # reads the copied data
        np.testing.assert_array_equal(numpy_helper.to_array(full.graph.initializer[0]),
                                      np.arange(6, dtype=np.float32).reshape(2, 3))
        np.testing.assert_array_equal(numpy_helper.to_array(full.graph.node[0].attribute[0].t),
                                      np.full((2, 3), 0.5, np.float32))
    assert outs[0] == outs[1]
    assert len(walks) == (2 if constant_outside else 0)
    assert [e.value for e in loaded.model.graph.initializer[0].external_data
            if e.key == "location"] == ["weights.bin"]  # the caller's model as it was


def _swish_plugin(folder: Path) -> Path:
    """A plugin file registering conftest's com.acme::FusedSwish decomposition."""
    from conftest import FUSED_SWISH_SOURCE

    plugin = folder / "acme_swish.py"
    plugin.write_text("from onnx import parser\nfrom rewriter import hookimpl\n"
                      + FUSED_SWISH_SOURCE + "\n@hookimpl\ndef register_decompositions("
                      "registry):\n    registry.add('com.acme', 'FusedSwish', FUSED_SWISH)\n")
    return plugin


def test_spliced_calls_bind_given_and_default_attributes(tmp_path):
    """The protobuf splice takes each call as it is (not retargeted at its function first):
    an attribute the call sets is bound, one it leaves out takes the function's default,
    one the function does not declare is dropped. Checked numerically on the reference
    evaluator against numpy's swish."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper
    from onnx.reference import ReferenceEvaluator

    from rewriter.api import rewrite

    plugin = _swish_plugin(tmp_path)
    nodes = [helper.make_node("FusedSwish", ["x"], ["a"], domain="com.acme", name="plain"),
             helper.make_node("FusedSwish", ["a"], ["b"], domain="com.acme", name="given",
                              alpha=2.5),
             helper.make_node("FusedSwish", ["b"], ["y"], domain="com.acme", name="extra",
                              beta=7.0)]
    model = helper.make_model(
        helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                     [7])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [7])]),
        opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid("com.acme", 1)])
    result = rewrite(model, ["reference"], plugins=[str(plugin)], verify=False)
    rewritten = result.model
    assert result.report.applied and not result.report.remaining
    assert {n.domain for n in rewritten.graph.node} == {""}
    onnx.checker.check_model(rewritten, full_check=True)

    def swish(v, alpha=1.0):
        return v / (1 + np.exp(-alpha * v))

    x = np.linspace(-3, 3, 7).astype(np.float32)
    (got,) = ReferenceEvaluator(rewritten).run(None, {"x": x})
    np.testing.assert_allclose(got, swish(swish(swish(x), 2.5)), rtol=1e-5, atol=1e-6)


def test_spliced_names_avoid_every_name_the_model_defines(tmp_path):
    """The splice names a body's own values ``<call's first output>/<body value>``; names
    the model already has (a graph input, a node output, a name only declared) are avoided
    as detection knew them (read from its sets, not a copy): the result is valid SSA and
    computes the same. Checked on the reference evaluator against numpy's swish."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper
    from onnx.reference import ReferenceEvaluator

    from rewriter.api import rewrite

    plugin = _swish_plugin(tmp_path)
    vector = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [5]) for n in ("x", "h/a")]
    nodes = [helper.make_node("FusedSwish", ["x"], ["h"], domain="com.acme", name="swish"),
             helper.make_node("Neg", ["x"], ["h/ac"], name="neg"),
             helper.make_node("Add", ["h", "h/a"], ["t"], name="add"),
             helper.make_node("Add", ["t", "h/ac"], ["y"], name="add2")]
    graph = helper.make_graph(nodes, "g", vector,
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [5])],
                              value_info=[helper.make_tensor_value_info(
                                  "h/s", TensorProto.FLOAT, [5])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18),
                                                    helper.make_opsetid("com.acme", 1)])
    result = rewrite(model, ["reference"], plugins=[str(plugin)], verify=False)
    rewritten = result.model
    assert result.report.applied and not result.report.remaining
    onnx.checker.check_model(rewritten, full_check=True)
    made = [o for n in rewritten.graph.node for o in n.output]
    assert len(made) == len(set(made))  # every value defined once
    assert {"h/a", "h/ac", "h/s"}.isdisjoint(
        o for n in rewritten.graph.node if n.op_type != "Neg" for o in n.output)
    x = np.linspace(-2, 2, 5).astype(np.float32)
    other = np.arange(5, dtype=np.float32)
    (got,) = ReferenceEvaluator(rewritten).run(None, {"x": x, "h/a": other})
    np.testing.assert_allclose(got, x / (1 + np.exp(-x)) + other - x, rtol=1e-5, atol=1e-6)


def test_new_names_stay_distinct_when_two_calls_share_an_output(tmp_path):
    """A call's new value names ("<its first output>/<body value>") are remembered for
    that call only when no two calls share an output; in a model where two calls write the
    same name (invalid, kept as it is), every new name is still made once."""
    from collections import Counter

    from onnx import TensorProto, helper

    from rewriter.api import rewrite

    plugin = _swish_plugin(tmp_path)
    nodes = [helper.make_node("FusedSwish", ["x"], ["h"], domain="com.acme", name="one"),
             helper.make_node("FusedSwish", ["x"], ["h"], domain="com.acme", name="two"),
             helper.make_node("Neg", ["h"], ["y"], name="neg")]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18),
                                                    helper.make_opsetid("com.acme", 1)])
    rewritten = rewrite(model, ["reference"], plugins=[str(plugin)], verify=False,
                        partial=True).model
    made = Counter(o for n in rewritten.graph.node for o in n.output if o != "h")
    assert made and max(made.values()) == 1, made
    assert sum(o == "h" for n in rewritten.graph.node for o in n.output) == 2


def test_new_names_stay_distinct_when_a_body_value_holds_a_slash(tmp_path):
    """A body value named with "/" can make one call's new name another's ("o" + "/s/t"
    and "o/s" + "/t"): such a body's names are remembered across calls, and each is made
    once. Checked on the reference evaluator against numpy."""
    from collections import Counter

    import numpy as np
    from onnx import TensorProto, helper
    from onnx.reference import ReferenceEvaluator

    from rewriter.api import rewrite

    plugin = tmp_path / "acme_slash.py"
    plugin.write_text(
        "from onnx import helper\nfrom rewriter import hookimpl\n"
        "BODY = helper.make_function('com.acme', 'Twice', ['x'], ['y'], [\n"
        "    helper.make_node('Sigmoid', ['x'], ['t']),\n"
        "    helper.make_node('Mul', ['x', 't'], ['s/t']),\n"
        "    helper.make_node('Add', ['s/t', 't'], ['y'])],\n"
        "    [helper.make_opsetid('', 18)])\n"
        "@hookimpl\ndef register_decompositions(registry):\n"
        "    registry.add('com.acme', 'Twice', BODY)\n")
    nodes = [helper.make_node("Twice", ["x"], ["o"], domain="com.acme", name="one"),
             helper.make_node("Twice", ["o"], ["o/s"], domain="com.acme", name="two")]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("o/s", TensorProto.FLOAT, [4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18),
                                                    helper.make_opsetid("com.acme", 1)])
    rewritten = rewrite(model, ["reference"], plugins=[str(plugin)], verify=False).model
    made = Counter(o for n in rewritten.graph.node for o in n.output)
    assert max(made.values()) == 1, made

    def twice(v):
        t = 1 / (1 + np.exp(-v))
        return v * t + t

    x = np.linspace(-2, 2, 4).astype(np.float32)
    (got,) = ReferenceEvaluator(rewritten).run(None, {"x": x})
    np.testing.assert_allclose(got, twice(twice(x)), rtol=1e-5, atol=1e-6)
