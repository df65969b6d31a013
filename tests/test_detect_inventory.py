"""Detection by op and type signature (``Target.check_op``, issue 16) finds what asking the
target about every node finds: same findings, same reasons, same types."""

from __future__ import annotations

from collections import defaultdict

import pytest

from rewriter.detect.targets import (
    BY_NODE,
    BY_TYPES,
    OP_VERDICTS,
    REFUSED,
    RUNS,
    TargetOptions,
    op_verdicts_apply,
    resolve_targets,
)
from rewriter.detect.walker import _Walker
from rewriter.io.model import load_model

TARGETS = ("onnxruntime", "reference", "opset:13")


def _target(plugins, name):
    return resolve_targets(plugins, [name], TargetOptions(confirm=False))[0]


def _walk(model, target, by_signature: bool):
    walker = _Walker(model, target)
    walker.keep_nodes, walker.record = True, True
    if not by_signature:
        walker.signatures = None  # every node asked and typed on its own
    return walker, walker.run()


def _facts(finding) -> tuple:
    return (finding.target, finding.path, finding.domain, finding.op_type, finding.version,
            finding.reason, finding.detail, finding.node_name, finding.input_types,
            dict(finding.scope_opsets or {}), id(finding.node))


def _same_detection(model, plugins, name) -> int:
    new, found = _walk(model, _target(plugins, name), by_signature=True)
    old, expected = _walk(model, _target(plugins, name), by_signature=False)
    assert [_facts(f) for f in found] == [_facts(f) for f in expected], name
    assert new.main_types == old.main_types
    assert (new.produced, new.owners) == (old.produced, old.owners)
    assert sorted(f.path for f in found if id(f) in new.in_main) == \
        sorted(f.path for f in expected if id(f) in old.in_main)
    return len(found)


@pytest.mark.parametrize("name", TARGETS)
def test_generated_model_same_findings_as_asking_every_node(plugins, name):
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from generate import generate_model

    model = generate_model(3000, custom_fraction=0.28, seed=1).model
    assert _same_detection(model, plugins, name) > 100


@pytest.mark.parametrize("name", TARGETS)
def test_corpus_same_findings_as_asking_every_node(plugins, corpus, name):
    total = 0
    for path in sorted(corpus.glob("*.onnx")):
        total += _same_detection(load_model(path).model, plugins, name)
    assert total > 10


@pytest.mark.parametrize("name", TARGETS)
def test_check_op_agrees_with_check_node_on_node_cases(plugins, name):
    """Over onnx's backend node cases, every node's answer from ``check_node`` is what its
    op's ``check_op`` promises: none where it runs, one answer per op where refused, one per
    type signature where it depends on types."""
    from benchmarks.conformance import node_cases

    target = _target(plugins, name)
    answers: dict[tuple, set] = defaultdict(set)
    ask = target.check_node

    def recording(query):
        finding = ask(query)
        types = query.types
        key = (query.domain, query.node.op_type, query.opset)
        signature = (tuple(types.get(n) if n else "" for n in query.inputs),
                     tuple(types.get(n) if n else None for n in query.outputs))
        verdict = None if finding is None else (finding.reason, finding.detail,
                                                finding.version)
        answers[key].add((signature, verdict))
        return finding

    target.check_node = recording  # an instance attribute: check_op no longer speaks for it
    assert not op_verdicts_apply(target)
    for _, model in node_cases():
        _walk(model, target, by_signature=True)
    del target.check_node
    seen = defaultdict(int)
    for key, pairs in answers.items():
        mode = target.check_op(*key)
        assert mode in OP_VERDICTS
        seen[mode] += 1
        verdicts = {v for _, v in pairs}
        if mode == RUNS:
            assert verdicts == {None}, (key, verdicts)
        elif mode == REFUSED:
            assert len(verdicts) == 1 and None not in verdicts, (key, verdicts)
        elif mode == BY_TYPES:
            by_signature = defaultdict(set)
            for signature, verdict in pairs:
                by_signature[signature].add(verdict)
            assert all(len(v) == 1 for v in by_signature.values()), (key, by_signature)
    assert seen[BY_TYPES if name == "onnxruntime" else RUNS] > 100, dict(seen)
    assert seen[REFUSED] or name == "onnxruntime", dict(seen)


def test_check_op_is_used_only_where_it_speaks_for_check_node(plugins):
    from rewriter.comparison.oracles import _Refusing
    from rewriter.detect.targets import Target

    target = _target(plugins, "onnxruntime")
    assert op_verdicts_apply(target)

    class Stricter(type(target)):  # check_node overridden, check_op inherited
        def check_node(self, query):
            return super().check_node(query)

    stricter = Stricter.__new__(Stricter)
    stricter.__dict__.update(target.__dict__)
    assert not op_verdicts_apply(stricter)
    assert not op_verdicts_apply(_Refusing(target, {}))  # forwards check_op to another

    class Plain(Target):
        def check_node(self, query):
            return None

    assert Plain().check_op("", "Relu", 13) == BY_NODE
    assert not op_verdicts_apply(Plain())


def test_node_names_read_by_the_load_serve_detection(plugins, corpus):
    """``load_model(node_io=True)`` keeps what the structure check read of each main-graph
    node; detection from those finds what it finds reading the nodes itself."""
    from rewriter.detect.walker import detect

    target = _target(plugins, "onnxruntime")
    compared = 0
    for path in sorted(corpus.glob("*.onnx")):
        loaded = load_model(path, node_io=True)
        nodes = loaded.model.graph.node
        assert loaded.main_io == [(tuple(n.input), tuple(n.output)) for n in nodes]
        given = detect(loaded.model, target, confirm=False, main_io=loaded.main_io)
        read = detect(loaded.model, target, confirm=False)
        assert [_facts(f) for f in given.findings] == [_facts(f) for f in read.findings]
        assert given.main_types == read.main_types
        compared += len(read.findings)
    assert compared > 10
    assert load_model(path).main_io is None  # kept only when asked


@pytest.mark.parametrize("name", ["reference", "opset:17", "opset:13"])
def test_op_inventory_alone_where_every_op_runs(plugins, corpus, name):
    """``check``'s detection (no record, no confirmation) skips the walk when every op of
    the model runs by ``check_op``, and finds what the walk finds, on models that run and
    on models that do not (generated without and with custom ops, and the corpus)."""
    import sys
    from pathlib import Path

    from rewriter.detect.walker import detect

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from generate import generate_model

    models = [generate_model(2000, custom_fraction=0.0, seed=2).model,
              generate_model(2000, custom_fraction=0.28, seed=2).model]
    models += [load_model(p).model for p in sorted(corpus.glob("*.onnx"))]
    skipped = 0
    for model in models:
        target = _target(plugins, name)
        fast = detect(model, target, confirm=False, record=False)
        walked = detect(model, _target(plugins, name), confirm=False, record=False,
                        inventory=False)
        assert walked.walked
        assert [_facts(f) for f in fast.findings] == [_facts(f) for f in walked.findings]
        skipped += not fast.walked
        if not fast.walked:
            assert not any(f.node is not None for f in walked.findings)
    # the generated model without custom ops runs on the reference evaluator and opset:17
    assert skipped >= (0 if name == "opset:13" else 1)
    clean = detect(models[0], _target(plugins, name), confirm=False, record=False)
    assert clean.walked == (name == "opset:13")  # LayerNormalization-17 is above opset 13
    onnxruntime = detect(models[0], _target(plugins, "onnxruntime"), confirm=False,
                         record=False)
    assert onnxruntime.walked  # its kernels are registered per type: the walk types them


@pytest.mark.parametrize("name", ["onnxruntime", "reference"])
def test_the_loads_node_facts_give_the_same_findings(plugins, tmp_path, name):
    """``check`` hands detection what the load read of the main graph (each node's inputs
    and outputs, the positions of the nodes holding subgraphs): the findings, subgraphs'
    included, are those of a walk reading every node itself."""
    import sys
    from pathlib import Path

    import onnx

    from rewriter.detect.walker import detect
    from rewriter.graph.walk import subgraphs

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from generate import generate_model

    gen = generate_model(3000, custom_fraction=0.28, seed=1)
    assert gen.summary()["custom_in_subgraphs"] and gen.summary()["if_nodes"]
    path = tmp_path / "m.onnx"
    onnx.save(gen.model, path)
    loaded = load_model(path, node_io=True)
    nodes = loaded.model.graph.node
    assert loaded.main_holders == {i for i, n in enumerate(nodes) if any(subgraphs(n))}
    target = _target(plugins, name)
    given = detect(loaded.model, target, confirm=False, record=False, inventory=False,
                   main_io=loaded.main_io, main_holders=loaded.main_holders)
    read = detect(loaded.model, target, confirm=False, record=False, inventory=False)
    assert [_facts(f) for f in given.findings] == [_facts(f) for f in read.findings]
    assert any("/then_branch/" in f.path or "/else_branch/" in f.path
               for f in given.findings)
