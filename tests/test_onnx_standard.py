"""The ``onnx-standard`` plugin: BitCast from bool to a one-byte integer as Cast (against
the ONNX reference evaluator's BitCast on the plugin's samples: ``tests/test_oracles.py``),
inside an If branch with rewrite's own verification, and on the corpus test data; the
BitCast bodies bit for bit on OpenVINO, which holds int64 in int32 and double in float32
(the 64-bit forms, and ``onnx-lowering``'s Mod of doubles, have no remedy there)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, load_tensor, numpy_helper
from onnx.reference import ReferenceEvaluator

from rewriter.api import rewrite
from tests.conftest import CORPUS


def _bitcast_model(to: int, elem: int = TensorProto.BOOL, in_if: bool = False):
    node = helper.make_node("BitCast", ["x"], ["y"], to=to)
    out = helper.make_tensor_value_info("y", to, [6])
    inputs = [helper.make_tensor_value_info("x", elem, [6])]
    if in_if:
        branch = helper.make_graph([node], "then", [], [out])
        other = helper.make_graph(
            [helper.make_node("Cast", ["x"], ["y2"], to=to)], "else", [],
            [helper.make_tensor_value_info("y2", to, [6])])
        node = helper.make_node("If", ["c"], ["y"], then_branch=branch, else_branch=other)
        inputs.append(helper.make_tensor_value_info("c", TensorProto.BOOL, []))
    graph = helper.make_graph([node], "g", inputs, [out])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 26)])


@pytest.mark.parametrize("to", [TensorProto.UINT8, TensorProto.INT8])
@pytest.mark.parametrize("in_if", [True], ids=["if-branch"])
def test_bool_bitcast_runs_on_onnxruntime_bit_for_bit(plugins, to, in_if):
    model = _bitcast_model(to, in_if=in_if)
    result = rewrite(model, ["onnxruntime"], plugins=plugins, confirm=False)
    assert result.report.verification["compare"] == "ok"
    x = np.array([True, False, True, True, False, False])
    feeds = {"x": x, **({"c": np.array(True)} if in_if else {})}
    (expected,) = ReferenceEvaluator(model).run(None, feeds)
    (got,) = ort.InferenceSession(result.model.SerializeToString()).run(None, feeds)
    assert got.dtype == expected.dtype and np.array_equal(got, expected)


def test_bitcasts_without_an_arithmetic_form_are_declined():
    """Pairs of different widths, bfloat16, a bool of another width and unknown types are
    declined; the others have a body (checked against the reference evaluator's BitCast in
    tests/test_oracles.py)."""
    from rewriter_plugins.onnx_standard import build_bitcast

    from rewriter.plugin import Declined, DecompositionContext

    def ctx(to, input_type):
        node = helper.make_node("BitCast", ["x"], ["y"], to=to)
        return DecompositionContext(node=node, opset=26, opsets={"": 26},
                                    input_types=[input_type])

    assert build_bitcast(ctx(TensorProto.UINT8, "tensor(bool)")) is not None
    assert build_bitcast(ctx(TensorProto.INT32, "tensor(float)")) is not None
    assert build_bitcast(ctx(TensorProto.UINT64, "tensor(int64)")) is not None
    for to, source in ((TensorProto.INT16, "tensor(float)"),  # widths differ
                       (TensorProto.INT16, "tensor(bfloat16)"),
                       (TensorProto.BOOL, "tensor(uint8)")):
        with pytest.raises(Declined, match="only bool to a byte, same-width integers"):
            build_bitcast(ctx(to, source))
    with pytest.raises(Declined, match="a known element type"):
        build_bitcast(ctx(TensorProto.UINT8, None))


def test_corpus_bitcast_matches_its_test_data(plugins):
    path = CORPUS / "onnx_op26_bitcast_bool_to_uint8.onnx"
    if not path.exists():
        pytest.skip("corpus absent")
    data = CORPUS / "testdata" / path.stem / "test_data_set_0"
    x = numpy_helper.to_array(load_tensor(str(data / "input_0.pb")))
    y = numpy_helper.to_array(load_tensor(str(data / "output_0.pb")))
    result = rewrite(onnx.load(path), ["onnxruntime"], plugins=plugins, confirm=False)
    (got,) = ort.InferenceSession(result.model.SerializeToString()).run(None, {"x": x})
    assert got.dtype == y.dtype and np.array_equal(got, y)


# -- OpenVINO: its CPU plugin holds int64 in int32 and double in float32 (issue 27) -----------

BITCAST_NODE_CASES = {  # ONNX backend node cases: the 16- and 32-bit ones OpenVINO computes
    "test_bitcast_uint32_to_int32": True, "test_bitcast_int32_to_float32": True,
    "test_bitcast_float32_to_int32": True, "test_bitcast_uint16_to_int16": True,
    "test_bitcast_int64_to_float64": False, "test_bitcast_float64_to_int64": False,
}


def _node_case(name: str):
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from onnx.backend.test.case.node import collect_testcases

        (case,) = [c for c in collect_testcases() if c.name == name]
    return case


def _on_openvino(model, feeds: dict, plugins) -> list:
    """``model`` run on OpenVINO as the openvino target runs it."""
    from rewriter.api import resolve_targets

    (target,) = resolve_targets(plugins, ["openvino"])
    run = target.prepare(model, None)
    outputs = run(feeds)
    return [outputs[o.name] for o in model.graph.output]


@pytest.mark.parametrize("name", sorted(BITCAST_NODE_CASES))
def test_bitcast_node_cases_on_openvino_with_their_own_inputs(plugins, name):
    """With the case's own inputs (values past 2^31, negative floats): the 16- and 32-bit
    BitCasts, rewritten for OpenVINO, give the expected bits there (the int64 form gave -1
    for 2^31 - 1, and 2.4999998 for -2.5); the 64-bit ones have no remedy, and say why."""
    pytest.importorskip("openvino")
    from rewriter.errors import UnfixableError

    case = _node_case(name)
    if not BITCAST_NODE_CASES[name]:
        with pytest.raises(UnfixableError, match="computes (int64 in int32|double in float32)"):
            rewrite(case.model, ["openvino"], plugins=plugins, confirm=False, verify=False)
        return
    result = rewrite(case.model, ["openvino"], plugins=plugins)
    assert result.report.verdict == "verified", result.report.verdict_reason
    names = [i.name for i in case.model.graph.input]
    for inputs, expected in case.data_sets:
        got = _on_openvino(result.model, dict(zip(names, map(np.asarray, inputs))), plugins)
        for g, e in zip(got, expected, strict=True):
            e = np.asarray(e)
            assert g.dtype == e.dtype and np.array_equal(g.view(np.uint8), e.view(np.uint8))


@pytest.mark.parametrize("source,to", [
    ("uint32", TensorProto.INT32), ("int32", TensorProto.UINT32), ("int16", TensorProto.UINT16),
    ("int32", TensorProto.FLOAT), ("uint32", TensorProto.FLOAT), ("uint16", TensorProto.FLOAT16),
    ("float", TensorProto.INT32), ("float", TensorProto.UINT32), ("float16", TensorProto.INT16),
    ("float16", TensorProto.UINT16)])
def test_bitcast_bodies_are_bit_exact_on_openvino(plugins, source, to):
    """Zeros of both signs, extremes, infinities, NaN patterns, integers by the sign bit and
    the smallest subnormal's bits: the rewritten BitCast on OpenVINO against the reference
    evaluator's BitCast (a NaN pattern gives a NaN, not its payload or sign). A subnormal
    float *input* is left out: OpenVINO's fused element-wise kernels read it as zero (the
    smallest float32 subnormal came back as the bits of -0.0; node by node it computes
    right), which no arrangement of standard ops avoids."""
    pytest.importorskip("openvino")
    elem = getattr(TensorProto, source.upper())
    model = _bitcast_model(to, elem)
    dtype = np.dtype(helper.tensor_dtype_to_np_dtype(elem))
    if dtype.kind == "f":
        x = np.array([0.0, -0.0, np.inf, -np.inf, -2.5, np.finfo(dtype).max], dtype)
    else:
        info = np.iinfo(dtype)
        x = np.array([info.min, info.max, 0, info.max // 2, info.max // 2 + 1, 1], dtype)
    result = rewrite(model, ["openvino"], plugins=plugins, verify=False)
    (expected,) = ReferenceEvaluator(model).run(None, {"x": x})
    (got,) = _on_openvino(result.model, {"x": x}, plugins)
    assert got.dtype == expected.dtype
    if expected.dtype.kind == "f":
        numbers = ~np.isnan(expected)
        np.testing.assert_array_equal(np.signbit(got[numbers]), np.signbit(expected[numbers]))
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("name", ["test_mod_float_edge_cases_fmod_0_float64",
                                  "test_mod_float_edge_cases_fmod_0_float32"])
def test_float_mod_on_openvino_double_has_no_remedy(plugins, name):
    """Mod(fmod=0) of doubles: OpenVINO would compute any body in float32, an infinite
    divisor becoming 3.4e38 (-3 mod inf gave 3.4e38, not inf): no remedy, and the message
    says so; in float32 the body runs there with the case's expected outputs."""
    pytest.importorskip("openvino")
    from rewriter.errors import UnfixableError

    case = _node_case(name)
    if name.endswith("float64"):
        with pytest.raises(UnfixableError, match="computes double in float32"):
            rewrite(case.model, ["openvino"], plugins=plugins, confirm=False, verify=False)
        return
    result = rewrite(case.model, ["openvino"], plugins=plugins)
    names = [i.name for i in case.model.graph.input]
    for inputs, expected in case.data_sets:
        got = _on_openvino(result.model, dict(zip(names, map(np.asarray, inputs))), plugins)
        for g, e in zip(got, expected, strict=True):
            np.testing.assert_array_equal(np.signbit(g), np.signbit(np.asarray(e)))
            np.testing.assert_allclose(g, e, rtol=0, atol=0)


CAST_NODE_CASES = ["test_cast_DOUBLE_to_FLOAT", "test_cast_FLOAT_to_FLOAT8E4M3FN",
                   "test_cast_FLOAT16_to_FLOAT8E5M2", "test_castlike_FLOAT16_to_FLOAT8E4M3FN"]


def _as_float64(value: np.ndarray, like: np.ndarray) -> np.ndarray:
    """``value`` (a float 8 output may come as its uint8 bits) as float64 values."""
    value = np.asarray(value)
    if value.dtype == np.uint8 and like.dtype != np.uint8:
        value = value.view(like.dtype)
    return value.astype(np.float64)


@pytest.mark.parametrize("name", CAST_NODE_CASES)
def test_cast_node_cases_on_openvino_with_their_own_inputs(plugins, name):
    """OpenVINO 2026.4 casts an infinite double to float as 3.4e38 and does not saturate a
    cast to float 8 (1e6 to float8e4m3fn gave NaN): ``rewrite`` finds it with its own input
    regimes (no test data), and its verified result gives the case's expected outputs on
    OpenVINO with the case's own inputs, bit for bit (NaN where expected)."""
    pytest.importorskip("openvino")
    case = _node_case(name)
    names = [i.name for i in case.model.graph.input]
    inputs, expected = case.data_sets[0]
    feeds = {n: numpy_helper.to_array(v) if isinstance(v, onnx.TensorProto) else np.asarray(v)
             for n, v in zip(names, inputs)}
    expected = [numpy_helper.to_array(v) if isinstance(v, onnx.TensorProto) else v
                for v in expected]
    before = _as_float64(_on_openvino(case.model, feeds, plugins)[0], np.asarray(expected[0]))
    want = np.asarray(expected[0]).astype(np.float64)
    assert not np.array_equal(before, want, equal_nan=True), "OpenVINO computes it right now"
    result = rewrite(case.model, ["openvino"], plugins=plugins)
    assert result.report.verdict == "verified", result.report.verdict_reason
    got = _as_float64(_on_openvino(result.model, feeds, plugins)[0], np.asarray(expected[0]))
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("op_type", ["Greater", "GreaterOrEqual"])
def test_greater_with_nan_is_found_and_fixed_on_openvino(plugins, op_type):
    """OpenVINO 2026.4's Greater and GreaterOrEqual are true for a NaN on either side: the
    special-values regime finds it, and the rewritten model (Less/LessOrEqual, operands
    swapped) gives numpy's comparison there, NaN and infinities included."""
    pytest.importorskip("openvino")
    from rewriter.api import check

    io_ = ([helper.make_tensor_value_info(n, TensorProto.FLOAT, ["n"]) for n in "ab"],
           [helper.make_tensor_value_info("z", TensorProto.BOOL, ["n"])])
    model = helper.make_model(helper.make_graph(
        [helper.make_node(op_type, ["a", "b"], ["z"])], "g", *io_),
        opset_imports=[helper.make_opsetid("", 17)])
    report = check(model, ["openvino"], plugins=plugins)
    assert [(f.op_type, f.reason) for f in report.findings] == [(op_type, "computes-differently")]
    result = rewrite(model, ["openvino"], plugins=plugins)
    assert result.report.verdict == "verified", result.report.verdict_reason
    a = np.array([np.nan, 1, np.nan, np.inf, -np.inf, 0, 2, 3, np.inf, 1], np.float32)
    b = np.array([1, np.nan, np.nan, np.inf, np.inf, -0.0, 2, 1, 1e30, -np.inf], np.float32)
    want = np.greater(a, b) if op_type == "Greater" else np.greater_equal(a, b)
    (got,) = _on_openvino(result.model, {"a": a, "b": b}, plugins)
    np.testing.assert_array_equal(got, want)


def _batch_first_lstm() -> onnx.ModelProto:
    """A PyTorch-like batch-first LSTM: bias, no sequence_lens, initial states."""
    hidden, size, batch, seq = 3, 2, 2, 4
    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array(rng.uniform(-0.5, 0.5, shape).astype(np.float32), name)
               for name, shape in (("W", (1, 4 * hidden, size)), ("R", (1, 4 * hidden, hidden)),
                                   ("B", (1, 8 * hidden)))]
    node = helper.make_node("LSTM", ["X", "W", "R", "B", "", "h0", "c0"], ["Y", "Yh", "Yc"],
                            hidden_size=hidden, layout=1)
    f = TensorProto.FLOAT
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("X", f, [batch, seq, size]),
                      helper.make_tensor_value_info("h0", f, [batch, 1, hidden]),
                      helper.make_tensor_value_info("c0", f, [batch, 1, hidden])],
        [helper.make_tensor_value_info("Y", f, [batch, seq, 1, hidden]),
         helper.make_tensor_value_info("Yh", f, [batch, 1, hidden]),
         helper.make_tensor_value_info("Yc", f, [batch, 1, hidden])], weights)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])


def test_batch_first_lstm_runs_on_onnxruntime_with_the_reference_numbers(plugins):
    """onnxruntime 1.32 refuses layout 1 ("Batchwise recurrent operations ... are not
    supported"): the rewrite (time first between transposes) is verified, and onnxruntime
    then gives the reference evaluator's LSTM outputs."""
    model = _batch_first_lstm()
    with pytest.raises(Exception, match="layout"):
        ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    result = rewrite(model, ["onnxruntime"], plugins=plugins)
    assert result.report.verdict == "verified", result.report.verdict_reason
    rng = np.random.default_rng(1)
    feeds = {"X": rng.standard_normal((2, 4, 2)).astype(np.float32),
             "h0": rng.standard_normal((2, 1, 3)).astype(np.float32),
             "c0": rng.standard_normal((2, 1, 3)).astype(np.float32)}
    want = ReferenceEvaluator(model).run(None, feeds)
    session = ort.InferenceSession(result.model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    for got, expected in zip(session.run(None, feeds), want, strict=True):
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
