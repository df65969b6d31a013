"""The cleanup stage after a rewrite (issue 30, item 2): fewer nodes, the same numbers, the
guards that keep it the rewrite's business only (external weights never read, random draws
never merged, the interface and the op set kept), and ``--no-cleanup``."""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from rewriter.api import rewrite
from rewriter.apply.simplify import simplify
from rewriter.cli import main

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def _ops(model: onnx.ModelProto) -> Counter:
    return Counter(n.op_type for n in model.graph.node)


def _run(model: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    return ort.InferenceSession(model.SerializeToString()).run(None, feeds)


@pytest.mark.parametrize("target", ["onnxruntime", "opset:13"])
def test_cleanup_removes_nodes_and_keeps_the_numbers(plugins, target):
    model = onnx.load(EXAMPLES / "failing_export.onnx")
    kept = rewrite(model, target, plugins=plugins, cleanup=False)
    tidied = rewrite(model, target, plugins=plugins)
    assert kept.report.verdict == tidied.report.verdict == "verified"
    assert kept.report.cleanup == "turned off (--no-cleanup)"
    assert tidied.report.cleanup.startswith(f"{len(kept.model.graph.node)} → "), \
        tidied.report.cleanup
    assert len(tidied.model.graph.node) < len(kept.model.graph.node)
    assert _ops(tidied.model)["Constant"] == 0 < _ops(kept.model)["Constant"]
    # the same numbers, on inputs of their own (the verdict's are the rewrite's)
    feeds = {}
    for value in model.graph.input:
        dims = [d.dim_value or 2 for d in value.type.tensor_type.shape.dim]
        feeds[value.name] = np.random.default_rng(7).standard_normal(dims).astype(np.float32)
    for a, b in zip(_run(kept.model, feeds), _run(tidied.model, feeds)):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)
    # provenance survives: every created node still leads to its row
    table = next(p.value for p in tidied.model.metadata_props if p.key == "rewriter.provenance")
    assert json.loads(table)["rows"]


def _model(nodes, inputs, outputs, initializers=(), opset=17):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def _float(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def test_random_draws_are_never_merged():
    """Two identical random ops are two draws: merging them would make them one."""
    nodes = [helper.make_node("RandomNormalLike", ["x"], ["a"], seed=1.0),
             helper.make_node("RandomNormalLike", ["x"], ["b"], seed=1.0),
             helper.make_node("Bernoulli", ["p"], ["c"]),
             helper.make_node("Bernoulli", ["p"], ["d"]),
             helper.make_node("Sub", ["a", "b"], ["ab"]),
             helper.make_node("Sub", ["c", "d"], ["cd"])]
    model = _model(nodes, [_float("x", [4]), _float("p", [4])],
                   [_float("ab", [4]), _float("cd", [4])])
    cleaned, _ = simplify(model)
    assert _ops(cleaned)["RandomNormalLike"] == 2 and _ops(cleaned)["Bernoulli"] == 2


def test_common_subexpressions_are_merged_and_constants_folded():
    nodes = [helper.make_node("Constant", [], ["k"], value=numpy_helper.from_array(
                 np.array([2.0], np.float32))),
             helper.make_node("Mul", ["k", "k"], ["k2"]),  # folds to 4
             helper.make_node("Exp", ["x"], ["e1"]),
             helper.make_node("Exp", ["x"], ["e2"]),  # the same as e1
             helper.make_node("Add", ["e1", "e2"], ["s"]),
             helper.make_node("Mul", ["s", "k2"], ["y"])]
    model = _model(nodes, [_float("x", [3])], [_float("y", [3])])
    cleaned, what = simplify(model)
    assert what.done and _ops(cleaned) == Counter({"Exp": 1, "Add": 1, "Mul": 1}), what
    x = np.array([0.0, 1.0, -2.0], np.float32)
    (y,) = _run(cleaned, {"x": x})
    np.testing.assert_allclose(y, 8 * np.exp(x), rtol=1e-6)
    assert [o.name for o in cleaned.graph.output] == ["y"]


def _contrib_model(extra_op: tuple[str, str]) -> onnx.ModelProto:
    """Two alike Exp beside two alike ``extra_op`` nodes, each pair summed."""
    domain, op = extra_op
    nodes = [helper.make_node("Exp", ["x"], ["e1"]), helper.make_node("Exp", ["x"], ["e2"]),
             helper.make_node(op, ["x"], ["f1"], domain=domain),
             helper.make_node(op, ["x"], ["f2"], domain=domain),
             helper.make_node("Add", ["e1", "e2"], ["s"]),
             helper.make_node("Add", ["f1", "f2"], ["t"])]
    model = _model(nodes, [_float("x", [3])], [_float("s", [3]), _float("t", [3])])
    model.opset_import.append(helper.make_opsetid(domain, 1))
    return model


def test_onnxruntime_contrib_ops_are_merged_but_not_unknown_or_random_ones():
    """A graph with onnxruntime's contrib ops (a MatMulNBits the target runs) still has its
    duplicates merged (the genai models kept them twice); a custom op may keep state and a
    dropout draws, so neither allows it."""
    cleaned, _ = simplify(_contrib_model(("com.microsoft", "Gelu")))
    assert _ops(cleaned)["Exp"] == 1 and _ops(cleaned)["Gelu"] == 1, _ops(cleaned)
    x = np.array([0.5, -1.0, 2.0], np.float32)
    s, t = _run(cleaned, {"x": x})
    np.testing.assert_allclose(s, 2 * np.exp(x), rtol=1e-6)
    gelu = 0.5 * x * (1 + np.array([math.erf(v / math.sqrt(2)) for v in x], np.float32))
    np.testing.assert_allclose(t, 2 * gelu, rtol=1e-5)
    for op in (("com.acme", "Stateful"), ("com.microsoft", "BitmaskDropout")):
        cleaned, _ = simplify(_contrib_model(op))
        assert _ops(cleaned)["Exp"] == 2 and _ops(cleaned)[op[1]] == 2, (op, _ops(cleaned))


def test_weights_in_external_data_are_never_read(tmp_path):
    """Folding is left out for a model with external data (folding would read it)."""
    w = numpy_helper.from_array(np.arange(4, dtype=np.float32), "w")
    nodes = [helper.make_node("Neg", ["w"], ["nw"]), helper.make_node("Add", ["x", "nw"], ["y"])]
    model = _model(nodes, [_float("x", [4])], [_float("y", [4])], [w])
    onnx.save(model, tmp_path / "m.onnx", save_as_external_data=True,
              all_tensors_to_one_file=True, location="m.data", size_threshold=0)
    loaded = onnx.load(tmp_path / "m.onnx", load_external_data=False)
    (tmp_path / "m.data").unlink()  # a read would fail
    cleaned, what = simplify(loaded)
    assert "not folded" in what.note or not what.done, what
    assert _ops(cleaned)["Neg"] == 1
    (init,) = cleaned.graph.initializer
    assert init.data_location == TensorProto.EXTERNAL


def test_the_cli_says_what_the_cleanup_did_and_no_cleanup_turns_it_off(tmp_path, capsys):
    source = EXAMPLES / "failing_export.onnx"
    for flags, expect in (([], "→"), (["--no-cleanup"], "turned off (--no-cleanup)")):
        out = tmp_path / f"out{len(flags)}.onnx"
        code = main(["rewrite", str(source), "-o", str(out), "-t", "onnxruntime", "--json",
                     *flags])
        assert code == 0
        report = json.loads(capsys.readouterr().out)
        assert expect in report["cleanup"], report["cleanup"]


def test_a_graph_output_stays_apart_from_the_values_read_inside():
    """onnxruntime applies an output's declared shape to the values computed from it: an
    Identity that kept the output apart must not be folded into the graph's inner values
    (seen: ort_dmmha_self_attn, whose declarations name two batch sizes alike)."""
    nodes = [helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("Identity", ["r"], ["present"]),
             helper.make_node("Shape", ["r"], ["s"]),
             helper.make_node("Cast", ["s"], ["y"], to=TensorProto.FLOAT)]
    model = _model(nodes, [_float("x", ["n", 3])], [_float("present", ["batch", 3]),
                                                   _float("y", [2])])
    cleaned, _ = simplify(model)
    read = {name for node in cleaned.graph.node for name in node.input}
    assert "present" not in read
    (producer,) = [n for n in cleaned.graph.node if "present" in n.output]
    assert producer.op_type == "Identity"
    x = np.array([[1.0, -2.0, 3.0]], np.float32)
    for a, b in zip(_run(cleaned, {"x": x}), _run(model, {"x": x})):
        np.testing.assert_array_equal(a, b)


def test_cleanup_keeps_the_declared_value_types_only():
    """The folding's shape inference types every value ("float[N,3]"); the result keeps the
    types it declared before the cleanup: tract refuses intermediate values with a symbolic
    batch once a caller sets concrete input shapes ("Impossible to unify Sym(N) with
    Val(3)")."""
    from onnx import TensorProto, helper

    from rewriter.apply.simplify import simplify

    graph = helper.make_graph(
        [helper.make_node("Constant", [], ["one"], value=helper.make_tensor(
            "one", TensorProto.FLOAT, [], [1.0])),
         helper.make_node("Add", ["x", "one"], ["a"]), helper.make_node("Relu", ["a"], ["r"]),
         helper.make_node("Identity", ["r"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])],
        value_info=[helper.make_tensor_value_info("a", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    cleaned, done = simplify(model)
    assert done.done, done.note
    assert [(v.name, v.type) for v in cleaned.graph.value_info] == \
        [(v.name, v.type) for v in model.graph.value_info
         if v.name in {o for n in cleaned.graph.node for o in n.output}]


def test_cleanup_of_an_ir3_model_lifts_no_constant():
    """IR version 3 lists every initializer among the graph's inputs (CatBoost exports it):
    a Constant lifted to an initializer would fail onnx's checker ("in initializer but not
    in graph input"), so constants stay nodes there."""
    import onnx
    from onnx import TensorProto, helper

    from rewriter.apply.simplify import simplify

    graph = helper.make_graph(
        [helper.make_node("Constant", [], ["two"], value=helper.make_tensor(
            "two", TensorProto.FLOAT, [], [2.0])),
         helper.make_node("Mul", ["x", "two"], ["m"]), helper.make_node("Identity", ["m"], ["y"])],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N"])])
    model = helper.make_model(graph, ir_version=3, opset_imports=[helper.make_opsetid("", 9)])
    onnx.checker.check_model(model)
    cleaned, done = simplify(model)
    assert not cleaned.graph.initializer
    onnx.checker.check_model(cleaned)
