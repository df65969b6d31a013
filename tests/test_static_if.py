"""static-if: an If whose condition is known before the run, nested Ifs in the branch taken
(an op's body choosing by rank, then by size) and branches whose values share names with the
main graph (two decompositions of one op), each folded; checked against onnxruntime running
the model with its Ifs."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper
from rewriter_plugins.static_if import StaticIfPass, known_conditions


class _Ctx:
    def __init__(self) -> None:
        self.recorded: list[tuple] = []

    def record(self, *args) -> None:
        self.recorded.append(args)


def _branch(name: str, nodes, output: str, constants: dict[str, float]):
    return helper.make_graph(
        nodes, name, [], [helper.make_tensor_value_info(output, TensorProto.FLOAT, [3])],
        [numpy_helper.from_array(np.array(v, np.float32), k) for k, v in constants.items()])


def _rank_then_size(x: str, out: str) -> list:
    """``out`` = x * 2 if x is rank 1 and of 3 elements, x + 1 if of another size, x - 1 if
    of another rank: an If on the rank whose then branch holds an If on the size.
    Inner values are named alike for every call (``t``, ``inner``, ``sized``)."""
    inner = helper.make_node(
        "If", ["sized"], ["inner"],
        then_branch=_branch("by_size_then", [helper.make_node("Mul", [x, "c2"], ["t"])], "t",
                            {"c2": 2.0}),
        else_branch=_branch("by_size_else", [helper.make_node("Add", [x, "c1"], ["t"])], "t",
                            {"c1": 1.0}))
    then_rank = helper.make_graph(
        [helper.make_node("Size", [x], ["n"]),
         helper.make_node("Constant", [], ["three"], value=numpy_helper.from_array(
             np.array(3, np.int64))),
         helper.make_node("Equal", ["n", "three"], ["sized"]), inner],
        "by_rank_then", [], [helper.make_tensor_value_info("inner", TensorProto.FLOAT, [3])])
    else_rank = _branch("by_rank_else", [helper.make_node("Sub", [x, "c1"], ["t"])], "t",
                        {"c1": 1.0})
    return [helper.make_node("Shape", [x], [f"{out}_shape"]),
            helper.make_node("Size", [f"{out}_shape"], [f"{out}_rank"]),
            helper.make_node("Equal", [f"{out}_rank", "one"], [f"{out}_is_1d"]),
            helper.make_node("If", [f"{out}_is_1d"], [out], then_branch=then_rank,
                             else_branch=else_rank)]


def _model() -> onnx.ModelProto:
    nodes = [*_rank_then_size("x", "y1"), *_rank_then_size("y1", "y2")]
    graph = helper.make_graph(
        nodes, "nested", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
        [helper.make_tensor_value_info("y2", TensorProto.FLOAT, [3])],
        [numpy_helper.from_array(np.array(1, np.int64), "one")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_nested_ifs_with_alike_names_fold_to_the_branches_taken():
    model = _model()
    assert known_conditions(model) == {3: True, 7: True}
    folded = onnx.ModelProto()
    folded.CopyFrom(model)
    ctx = _Ctx()
    assert StaticIfPass().run(folded, ctx) is folded
    onnx.checker.check_model(folded, full_check=True)
    assert "If" not in {n.op_type for n in folded.graph.node}
    # two outer Ifs (then: rank 1), then the two inner ones spliced with them (then: size 3)
    assert [r[-1] for r in ctx.recorded] == ["ai.onnx::If (then branch)"] * 4
    outputs = [o for n in folded.graph.node for o in n.output]
    assert len(outputs) == len(set(outputs))  # the second call's values were renamed
    feeds = {"x": np.array([1, -2, 3], np.float32)}
    before = ort.InferenceSession(model.SerializeToString()).run(None, feeds)[0]
    after = ort.InferenceSession(folded.SerializeToString()).run(None, feeds)[0]
    np.testing.assert_array_equal(before, after)
    np.testing.assert_array_equal(after, feeds["x"] * 4)


def test_an_if_whose_condition_the_run_decides_stays():
    model = _model()
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "n"  # size unknown
    original = onnx.ModelProto()
    original.CopyFrom(model)
    result = StaticIfPass().run(model, _Ctx())
    # the rank is known (the first outer If folds), x's size is not: the If on it stays
    assert result is model
    kept = [n for n in model.graph.node if n.op_type == "If"]
    assert kept and any(n.output[0] == "inner" for n in kept)
    onnx.checker.check_model(model, full_check=True)
    feeds = {"x": np.array([1, -2, 3], np.float32)}
    before = ort.InferenceSession(original.SerializeToString()).run(None, feeds)[0]
    after = ort.InferenceSession(model.SerializeToString()).run(None, feeds)[0]
    np.testing.assert_array_equal(before, after)
