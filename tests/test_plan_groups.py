"""Planning once per group of findings (issue 16): passes that say their answer is the same
for an op (``RewritePass.offers_for_op``) are asked once for its findings, and the plan is
what asking every pass about every finding gives."""

from __future__ import annotations

from collections import defaultdict
from types import MappingProxyType

import onnx
import pytest
from onnx import helper

import rewriter.plan.planner as planner_module
from rewriter.detect.targets import TargetOptions, resolve_targets
from rewriter.detect.walker import detect
from rewriter.engine import pipeline, plan_findings
from rewriter.io.model import load_model
from rewriter.plan.passes import PassContext, RewritePass, answers_per_op, ask_offers
from rewriter.plan.planner import LazyConstants, Planner

TARGETS = ("onnxruntime", "reference", "opset:13")


def _target(plugins, name):
    return resolve_targets(plugins, [name], TargetOptions(confirm=False))[0]


def _planner(model, target, plugins, passes=None):
    config = MappingProxyType({"targets": (target.name,), "prefer": "decompose",
                               "partial": False, "dry_run": True, "base_dir": None})
    ctx = PassContext([target], plugins.registry, config)
    if passes is None:
        passes = pipeline(plugins, [target], config)
    for p in passes:
        p.prepare(model, ctx)
    return Planner([target], plugins, passes, ctx), ctx


def _plan(model, target, plugins, per_finding: bool, monkeypatch):
    findings = detect(model, target, confirm=False, record=False).findings
    planner, _ = _planner(model, target, plugins)
    with monkeypatch.context() as m:
        if per_finding:  # every pass asked about every finding, as before offers_for_op
            m.setattr(planner_module, "answers_per_op", lambda p, f, ctx: False)
        planned = plan_findings(planner, findings, LazyConstants(model), {}, explain=True)
    return findings, planned


def _same_plan(model, plugins, name, monkeypatch) -> int:
    target = _target(plugins, name)
    found, grouped = _plan(model, target, plugins, False, monkeypatch)
    again, each = _plan(model, target, plugins, True, monkeypatch)
    assert [f.path for f in grouped.unfixable] == [f.path for f in each.unfixable]
    by_path = {f.path: id(f) for f in again}
    assert {f.path: grouped.why[id(f)] for f in grouped.unfixable} == \
        {f.path: each.why[by_path[f.path]] for f in each.unfixable}
    assert sorted(f.path for f in found if id(f) in grouped.relevant_pass) == \
        sorted(f.path for f in again if id(f) in each.relevant_pass)
    assert [f.path for f in grouped.typed_later] == [f.path for f in each.typed_later]
    assert grouped.explain == each.explain
    return len(found)


@pytest.mark.parametrize("name", TARGETS)
def test_generated_model_same_plan_as_asking_every_pass(plugins, name, monkeypatch):
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from generate import generate_model

    model = generate_model(3000, custom_fraction=0.28, seed=1).model
    assert _same_plan(model, plugins, name, monkeypatch) > 100


@pytest.mark.parametrize("name", TARGETS)
def test_corpus_same_plan_as_asking_every_pass(plugins, corpus, name, monkeypatch):
    total = 0
    for path in sorted(corpus.glob("*.onnx")):
        total += _same_plan(load_model(path).model, plugins, name, monkeypatch)
    assert total > 10


@pytest.mark.parametrize("name", TARGETS)
def test_builtin_passes_answer_alike_where_they_say_so(plugins, corpus, name):
    """Each built-in pass's ``offers`` and ``handles`` give every finding of an op (same
    target, reason, domain, op type, version) the answer of the op's first finding, for
    the findings ``offers_for_op`` says so of, on the corpus."""
    target = _target(plugins, name)
    said = 0
    for path in sorted(corpus.glob("*.onnx")):
        model = load_model(path).model
        findings = detect(model, target, confirm=False, record=False).findings
        planner, ctx = _planner(model, target, plugins)
        for p in planner.passes:
            first: dict[tuple, tuple] = {}
            for f in findings:
                if not answers_per_op(p, f, ctx):
                    continue
                said += 1
                answer = (ask_offers(p, f, ctx), p.handles(f, ctx))
                key = (f.target, f.reason, f.domain, f.op_type, f.version)
                assert first.setdefault(key, answer) == answer, (path.name, p.name, f.path)
    assert said > 10


class _Counting(RewritePass):
    """Remedies nothing; counts what it is asked."""

    def __init__(self, per_op: bool) -> None:
        self.per_op = per_op
        self.asked: defaultdict[str, int] = defaultdict(int)

    def offers_for_op(self, finding, ctx) -> bool:
        return self.per_op

    def offers(self, finding, ctx):
        self.asked[finding.op_type] += 1
        return False, f"{finding.op_type} is not mine"

    def run(self, model, ctx):
        return None


def _acme_model() -> onnx.ModelProto:
    """20 nodes of com.acme::Foo (10 with alpha 1, 10 with alpha 2) and 5 of com.acme::Bar:
    no plugin remedies them."""
    # (the first reads a Relu's output: a node reading a graph input plans apart)
    nodes, value = [helper.make_node("Relu", ["x"], ["r"], "relu")], "r"
    for i in range(25):
        op, attrs = ("Foo", {"alpha": float(1 + i % 2)}) if i < 20 else ("Bar", {})
        nodes.append(helper.make_node(op, [value], [f"v{i}"], f"n{i}", domain="com.acme",
                                      **attrs))
        value = f"v{i}"
    graph = helper.make_graph(
        nodes, "acme", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info(value, onnx.TensorProto.FLOAT, [2])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18),
                                                   helper.make_opsetid("com.acme", 1)])


def _ask(plugins, passes):
    model = _acme_model()
    target = _target(plugins, "reference")
    findings = detect(model, target, confirm=False, record=False).findings
    planner, _ = _planner(model, target, plugins, passes)
    planned = plan_findings(planner, findings, LazyConstants(model), {})
    return findings, planned


def test_pass_answering_per_op_is_asked_once_per_signature_and_op(plugins):
    once = _Counting(per_op=True)
    findings, planned = _ask(plugins, [once])
    assert len(findings) == 25 and len(planned.unfixable) == 25
    # asked once per node signature and op, not 25 times: Foo's signatures are the first
    # (input typed: a Relu's output), alpha 1 and alpha 2 (inputs from a custom op: untyped)
    assert dict(once.asked) == {"Foo": 3, "Bar": 1}
    assert {planned.why[id(f)] for f in planned.unfixable} == {
        "no installed plugin registers a decomposition for this op"}


def test_pass_without_offers_for_op_is_asked_per_finding(plugins):
    """The default (a third-party pass written before offers_for_op) is asked about every
    finding, and so is every pass next to it (the findings then share nothing)."""
    each, once = _Counting(per_op=False), _Counting(per_op=True)
    _, planned = _ask(plugins, [each, once])
    assert dict(each.asked) == {"Foo": 20, "Bar": 5}
    assert dict(once.asked) == {"Foo": 20, "Bar": 5}
    assert len(planned.unfixable) == 25


def test_offers_for_op_raising_names_the_pass(plugins):
    class Broken(_Counting):
        def offers_for_op(self, finding, ctx) -> bool:
            raise KeyError("oops")

    broken = Broken(per_op=True)
    broken.name, broken.plugin = "broken-pass", "acme"
    with pytest.raises(Exception, match=r"pass 'broken-pass': offers_for_op\(\) on .* raised "
                       r"KeyError"):
        _ask(plugins, [broken])
