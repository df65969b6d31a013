"""rewriter.plan.bodies.FunctionBuilder: every opset-dependent form, built at an opset before and
after its signature changed, passes onnx's checker and computes what numpy does on
onnxruntime and on the reference evaluator."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from rewriter.plan.bodies import Declined, FunctionBuilder, declining, typed_tensor
from tests.conftest import make_model

DOMAIN = "test.bodies"
RNG = np.random.default_rng(0)


def _run(fn: onnx.FunctionProto, feeds: dict[str, np.ndarray], expected: list,
         opset: int) -> list[list[np.ndarray]]:
    """Call ``fn`` from a one-node model; its outputs on onnxruntime and the reference
    evaluator (after onnx's full checker)."""
    names = list(feeds)
    outputs = [f"y{i}" for i in range(len(expected))]
    node = helper.make_node(fn.name, names, outputs, domain=DOMAIN)
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
         for n, v in feeds.items()],
        [helper.make_tensor_value_info(o, helper.np_dtype_to_tensor_dtype(np.asarray(e).dtype),
                                       np.shape(e)) for o, e in zip(outputs, expected)])
    model = make_model(graph, [helper.make_opsetid("", opset), helper.make_opsetid(DOMAIN, 1)],
                       functions=[fn])
    onnx.checker.check_model(model, full_check=True)
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    return [session.run(None, feeds), ReferenceEvaluator(model).run(None, feeds)]


def _check(b: FunctionBuilder, inputs: list[str], outputs, feeds, expected) -> None:
    outputs = outputs if isinstance(outputs, list) else [outputs]
    fn = b.function(DOMAIN, "f", inputs, outputs)
    for results in _run(fn, feeds, expected, b.opset):
        assert len(results) == len(expected)
        for got, want in zip(results, expected):
            np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
            assert got.shape == np.shape(want)


def _ops(b: FunctionBuilder) -> list[str]:
    return [n.op_type for n in b.nodes]


X = RNG.standard_normal((2, 3, 4)).astype(np.float32)


@pytest.mark.parametrize("opset", [11, 13])
def test_unsqueeze_squeeze(opset):
    b = FunctionBuilder(opset)
    up = b.unsqueeze("x", [0, 2])
    down = b.squeeze(up, [0])
    node = next(n for n in b.nodes if n.op_type == "Unsqueeze")
    assert (len(node.input) == 2) == (opset >= 13)
    _check(b, ["x"], [up, down], {"x": X}, [X[None, :, None], X[:, None]])


@pytest.mark.parametrize("opset", [11, 13])
def test_reduce_sum(opset):
    b = FunctionBuilder(opset)
    kept, dropped = b.reduce_sum("x", [1]), b.reduce_sum("x", [0, 2], keepdims=0)
    assert len(b.nodes[-1].input) == (2 if opset >= 13 else 1)
    _check(b, ["x"], [kept, dropped], {"x": X},
           [X.sum(axis=1, keepdims=True), X.sum(axis=(0, 2))])


@pytest.mark.parametrize("opset", [13, 18])
@pytest.mark.parametrize("kind", ["mean", "max"])
def test_reduce_mean_max(opset, kind):
    b = FunctionBuilder(opset)
    method = b.reduce_mean if kind == "mean" else b.reduce_max
    y = method("x", [-1], keepdims=0)
    assert len(b.nodes[-1].input) == (2 if opset >= 18 else 1)
    want = X.mean(axis=-1) if kind == "mean" else X.max(axis=-1)
    _check(b, ["x"], y, {"x": X}, [want])


@pytest.mark.parametrize("opset", [11, 13])
def test_split_sizes(opset):
    b = FunctionBuilder(opset)
    parts = b.split("x", [1, 3], axis=2)
    assert len(parts) == 2
    _check(b, ["x"], parts, {"x": X}, [X[:, :, :1], X[:, :, 1:]])


@pytest.mark.parametrize("opset", [11, 13, 18])
def test_split_equal_parts(opset):
    b = FunctionBuilder(opset)
    parts = b.split("x", None, axis=-1, parts=2)
    split = b.nodes[-1]
    assert any(a.name == "num_outputs" for a in split.attribute) == (opset >= 18)
    _check(b, ["x"], parts, {"x": X}, [X[..., :2], X[..., 2:]])


def test_split_needs_sizes_or_parts():
    with pytest.raises(ValueError):
        FunctionBuilder(13).split("x", None)


@pytest.mark.parametrize("opset, elem_type", [(9, None), (13, TensorProto.FLOAT),
                                              (15, None)])
@pytest.mark.parametrize("low, high", [(-0.5, 0.75), (None, 0.25), (-0.25, None)])
def test_clip(opset, elem_type, low, high):
    b = FunctionBuilder(opset, elem_type)
    y = b.clip("x", low, high)
    ops = _ops(b)
    assert ("CastLike" in ops) == (opset >= 11 and elem_type is None)
    assert (len(b.nodes[-1].input) > 1) == (opset >= 11)
    _check(b, ["x"], y, {"x": X}, [np.clip(X, low, high)])


def test_clip_unknown_type_below_castlike_declines():
    with pytest.raises(Declined):
        FunctionBuilder(13).clip("x", 0.0, 1.0)


@pytest.mark.parametrize("opset", [9, 13])
def test_slice(opset):
    b = FunctionBuilder(opset)
    y = b.slice("x", [1, 0], [3, -1], [1, 2])
    assert (len(b.nodes[-1].input) > 1) == (opset >= 10)
    _check(b, ["x"], y, {"x": X}, [X[:, 1:3, 0:-1]])


def test_slice_computed_bounds_and_steps():
    b = FunctionBuilder(13)
    end = b.op("Shape", "x")  # (2, 3, 4): the ends of axes 0..2
    y = b.slice("x", [0, 0, 0], end, [0, 1, 2], steps=[1, 2, 3])
    _check(b, ["x"], y, {"x": X}, [X[:, ::2, ::3]])


def test_slice_computed_bounds_below_10_declines():
    b = FunctionBuilder(9)
    with pytest.raises(Declined):
        b.slice("x", [0], b.op("Shape", "x"), [0])


@pytest.mark.parametrize("elem_type", [TensorProto.FLOAT, TensorProto.DOUBLE,
                                       TensorProto.FLOAT16])
def test_literal_known_type(elem_type):
    dtype = helper.tensor_dtype_to_np_dtype(elem_type)
    b = FunctionBuilder(11, elem_type)
    y = b.op("Mul", "x", b.literal(0.1))
    assert "CastLike" not in _ops(b)
    x = X.astype(dtype)
    _check(b, ["x"], y, {"x": x}, [x * dtype.type(0.1)])


def test_literal_castlike():
    b = FunctionBuilder(15)
    y = b.op("Add", "x", b.literal(2.5, "x"))
    assert _ops(b)[-2:] == ["CastLike", "Add"]
    x = X.astype(np.float64)
    _check(b, ["x"], y, {"x": x}, [x + 2.5])
    with pytest.raises(Declined):
        FunctionBuilder(14).literal(1.0, "x")
    with pytest.raises(ValueError):
        FunctionBuilder(15).literal(1.0)


def test_const_fill_take_reshape():
    b = FunctionBuilder(13, TensorProto.FLOAT)
    ones = b.fill(b.op("Shape", "x"), 1.0)  # body's element type
    counts = b.fill(b.ints([2]), 7, np.int64)
    second = b.take("x", 1, axis=1)
    flat = b.reshape("x", [2, -1])
    ints = b.const([3, 4], TensorProto.INT32)
    _check(b, ["x"], [ones, counts, second, flat, ints], {"x": X},
           [np.ones_like(X), np.full([2], 7, np.int64), X[:, 1], X.reshape(2, -1),
            np.array([3, 4], np.int32)])


def test_default_dtype():
    class Int64Builder(FunctionBuilder):
        default_dtype = np.int64

    b = Int64Builder(13)
    name = b.const(0)
    value = numpy_helper.to_array(b.nodes[-1].attribute[0].t)
    assert b.nodes[-1].output[0] == name and value.dtype == np.int64
    plain = FunctionBuilder(13)
    plain.const(np.float32(0.5))
    assert numpy_helper.to_array(plain.nodes[-1].attribute[0].t).dtype == np.float32


def test_typed_tensor_bfloat16():
    tensor = typed_tensor([1.0, -2.5], TensorProto.BFLOAT16, "t")
    assert tensor.data_type == TensorProto.BFLOAT16 and tensor.name == "t"
    np.testing.assert_array_equal(
        numpy_helper.to_array(tensor).astype(np.float32), [1.0, -2.5])


def test_function_passthrough_and_repeat_get_identity():
    b = FunctionBuilder(13)
    y = b.op("Neg", "x")
    fn = b.function(DOMAIN, "f", ["x"], ["x", y, y])
    assert len(set(fn.output)) == 3 and "x" not in fn.output
    assert [n.op_type for n in fn.node] == ["Neg", "Identity", "Identity"]
    assert {(o.domain, o.version) for o in fn.opset_import} == {("", 13)}
    for results in _run(fn, {"x": X}, [X, -X, -X], 13):
        for got, want in zip(results, [X, -X, -X]):
            np.testing.assert_array_equal(got, want)


def test_function_attributes_and_imports():
    b = FunctionBuilder(17)
    b.op("Identity", "x", outputs=["y"])
    fn = b.function(DOMAIN, "f", ["x"], ["y"], ["alpha"], opset_imports={"com.acme": 2})
    assert list(fn.attribute) == ["alpha"]
    assert {(o.domain, o.version) for o in fn.opset_import} == {("", 17), ("com.acme", 2)}


def test_child_names_stay_unique_in_if_branches():
    b = FunctionBuilder(13, TensorProto.FLOAT)
    then_b, else_b = b.child(), b.child()
    assert then_b.opset == 13 and then_b.elem_type == TensorProto.FLOAT
    then_out = then_b.op("Mul", "x", then_b.literal(2.0))
    else_out = else_b.op("Neg", "x")
    info = [helper.make_tensor_value_info(o, TensorProto.FLOAT, None)
            for o in (then_out, else_out)]
    cond = b.op("Greater", b.reduce_sum("x", [0, 1, 2], keepdims=0), b.literal(0.0))
    y = b.op("If", cond,
             then_branch=helper.make_graph(then_b.nodes, "then", [], [info[0]]),
             else_branch=helper.make_graph(else_b.nodes, "else", [], [info[1]]))
    names = [o for node in b.nodes + then_b.nodes + else_b.nodes for o in node.output]
    assert len(names) == len(set(names))
    _check(b, ["x"], y, {"x": X}, [X * 2 if X.sum() > 0 else -X])


def test_op_drops_none_attributes_and_takes_names():
    b = FunctionBuilder(9)
    y = b.op("Clip", "x", outputs=["clipped"], min=None, max=1.0)
    assert y == "clipped" and [a.name for a in b.nodes[-1].attribute] == ["max"]
    a, c = b.op("Split", "x", outputs=2, axis=0)
    assert a != c


def test_declining():
    @declining
    def build(ctx):
        raise Declined("no")

    # the marker changes nothing: Declined reaches the planner, which keeps its reason
    assert build.__name__ == "build"
    with pytest.raises(Declined, match="no"):
        build(None)


@pytest.mark.parametrize("opset", [9, 13])
@pytest.mark.parametrize("axis", [0, 2, -1, -3])
def test_dim_and_dim_vector(opset, axis):
    """``dim`` is ``Shape(x)[axis]`` as an int64 scalar, ``dim_vector`` the same as a
    1-element vector (attributes of Slice below opset 10), usable to build a shape."""
    b = FunctionBuilder(opset)
    scalar, vector = b.dim("x", axis), b.dim_vector("x", axis)
    shape = b.op("Concat", vector, b.dim_vector("x", 0), axis=0)
    _check(b, ["x"], [scalar, vector, shape], {"x": X},
           [np.array(X.shape[axis], np.int64), np.array([X.shape[axis]], np.int64),
            np.array([X.shape[axis], X.shape[0]], np.int64)])
