"""The ``onnx-standard`` plugin: BitCast from bool to a one-byte integer as Cast (against
the ONNX reference evaluator's BitCast on the plugin's samples: ``tests/test_oracles.py``),
inside an If branch with rewrite's own verification, and on the corpus test data."""

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
    """Pairs of different widths, 64-bit integers between themselves and unknown types are
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
    for to, source in ((TensorProto.INT16, "tensor(float)"),  # widths differ
                       (TensorProto.UINT64, "tensor(int64)"),
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
