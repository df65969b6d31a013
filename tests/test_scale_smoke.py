"""A generated transformer-like model (benchmarks/generate.py), small enough for every test
run: ``check`` must find exactly the custom-op nodes the generator inserted, wherever they
are (main graph or If branch), and ``inspect`` must count every node. Not timed; the timings
live in benchmarks/bench_check.py."""

from __future__ import annotations

import importlib.util
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
    applied = sum(report.applied.values())
    assert applied == (gen.custom_total if target == "reference"
                       else gen.custom_counts["FusedSwish"])
