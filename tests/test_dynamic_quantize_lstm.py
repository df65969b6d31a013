"""``com.microsoft::DynamicQuantizeLSTM`` (``rewriter_plugins.com_microsoft.quantized_lstm``):
what it declines, and a ``torch.nn.LSTM`` quantized by ``quantize_dynamic`` rewritten for
``opset:17``, ``reference`` and ``openvino``, verified and computing onnxruntime's numbers.
The oracle samples (against onnxruntime's kernel) run in ``tests/test_oracles.py``."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from rewriter_plugins.com_microsoft.quantized_lstm import build_dynamic_quantize_lstm

from rewriter.plugin import Declined, DecompositionContext

_NAMES = ["X", "W", "R", "B", "", "h0", "c0", "", "ws", "wz", "rs", "rz"]


def _ctx(batch, hidden=8, inputs=None, **attributes) -> DecompositionContext:
    names = list(inputs or _NAMES)
    node = helper.make_node("DynamicQuantizeLSTM", names, ["Y", "Y_h", "Y_c"],
                            domain="com.microsoft", hidden_size=hidden, **attributes)
    x = helper.make_tensor_type_proto(TensorProto.FLOAT, [5, batch, 6])
    types = ["tensor(float)", "tensor(int8)", "tensor(int8)"] + [None] * 9
    return DecompositionContext(node, 17, {"": 17, "com.microsoft": 1}, types,
                                declared={"X": x})


@pytest.mark.parametrize("batch,hidden", [(1, 8), (3, 260), (4, 300), (2, 8), (5, 300),
                                          ("N", 8)])
def test_every_batch_is_built(batch, hidden):
    """The body computes onnxruntime's one-thread arithmetic for any batch (a batch whose
    result depends on the thread count included: the oracle runs such a model on one
    thread)."""
    assert build_dynamic_quantize_lstm(_ctx(batch, hidden)) is not None


@pytest.mark.parametrize("ctx,reason", [
    (lambda: _ctx(1, inputs=[*_NAMES[:4], "lens", *_NAMES[5:]]), "sequence_lens"),
    (lambda: _ctx(1, inputs=[*_NAMES[:7], "P", *_NAMES[8:]]), "peepholes"),
    (lambda: _ctx(1, activations=["Relu", "Tanh", "Tanh"]), "activations"),
    (lambda: _ctx(1, direction="sideways"), "direction"),
])
def test_declines_what_it_cannot_compute_as_the_kernel_does(ctx, reason):
    with pytest.raises(Declined, match=reason):
        build_dynamic_quantize_lstm(ctx())


# -- a quantized torch.nn.LSTM, end to end ----------------------------------------------------

torch = pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")
quantization = pytest.importorskip("onnxruntime.quantization")

from rewriter.api import rewrite  # noqa: E402


class _Lstm(torch.nn.Module):
    def __init__(self, layers: int, bidirectional: bool):
        super().__init__()
        self.lstm = torch.nn.LSTM(6, 8, num_layers=layers, bidirectional=bidirectional)

    def forward(self, x):
        y, (h, c) = self.lstm(x)
        return y, h, c


def _quantized(tmp_path, layers: int, bidirectional: bool, batch: int = 1
               ) -> tuple[onnx.ModelProto, dict]:
    """The LSTM exported (dynamo=False, opset 17; a dynamic batch when ``batch`` > 1) and
    ``quantize_dynamic``'d (int8 weights)."""
    torch.manual_seed(0)
    x = torch.randn(5, batch, 6)
    source, out = tmp_path / "lstm.onnx", tmp_path / "lstm.quant.onnx"
    axes = {"x": {1: "batch"}} if batch > 1 else None
    torch.onnx.export(_Lstm(layers, bidirectional).eval(), (x,), str(source), dynamo=False,
                      opset_version=17, input_names=["x"], output_names=["y", "h", "c"],
                      dynamic_axes=axes)
    quantization.quantize_dynamic(str(source), str(out),
                                  weight_type=quantization.QuantType.QInt8)
    model = onnx.load(out)
    assert sum(n.op_type == "DynamicQuantizeLSTM" for n in model.graph.node) == layers
    return model, {"x": x.numpy()}


def _on_onnxruntime(model: onnx.ModelProto, feeds: dict, threads: int = 0
                    ) -> list[np.ndarray]:
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def _close(got, expected) -> None:
    for g, e in zip(got, expected, strict=True):
        np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("layers,bidirectional", [(1, False), (2, False), (1, True),
                                                  (2, True)])
def test_quantized_torch_lstm_is_verified_for_opset_17_and_the_reference_evaluator(
        plugins, tmp_path, layers, bidirectional):
    from onnx.reference import ReferenceEvaluator

    model, feeds = _quantized(tmp_path, layers, bidirectional)
    expected = _on_onnxruntime(model, feeds)
    for target in ("opset:17", "reference"):
        result = rewrite(model, [target], plugins=plugins)
        assert result.report.verdict == "verified", (target, result.report.verdict_reason)
        rewritten = result.model
        assert not [n for n in rewritten.graph.node if n.domain == "com.microsoft"]
        # the kernel's own arithmetic: bit for bit on onnxruntime
        assert all(np.array_equal(g, e) for g, e in
                   zip(_on_onnxruntime(rewritten, feeds), expected))
        _close(ReferenceEvaluator(rewritten).run(None, feeds), expected)


@pytest.mark.parametrize("layers,bidirectional", [(1, False), (1, True)])
def test_quantized_torch_lstm_is_verified_for_openvino(plugins, tmp_path, layers,
                                                       bidirectional):
    pytest.importorskip("openvino")
    from rewriter_plugins import openvino_target

    model, feeds = _quantized(tmp_path, layers, bidirectional)
    result = rewrite(model, ["openvino"], plugins=plugins)
    assert result.report.verdict == "verified", result.report.verdict_reason
    assert ("decomposition", "com-microsoft", "com-microsoft:DynamicQuantizeLSTM",
            "com.microsoft::DynamicQuantizeLSTM(1)") in result.report.applied
    outputs = openvino_target.compile_model(result.model.SerializeToString())(feeds)
    _close(list(outputs.values()), _on_onnxruntime(model, feeds))


def test_openvino_reports_its_own_dynamic_quantize_lstm_as_known_inexact():
    pytest.importorskip("openvino")
    from rewriter_plugins.openvino_target.inexact import KNOWN_INEXACT

    assert ("com.microsoft", "DynamicQuantizeLSTM") in KNOWN_INEXACT


def test_a_batch_whose_result_depends_on_the_thread_count_is_verified_against_one_thread(
        plugins, tmp_path):
    """Batch 3, hidden 8: onnxruntime's kernel splits the batch over its threads. The
    comparison's oracle runs the original on one thread; the body computes that, bit for
    bit on onnxruntime; on 2 threads the kernel's answer is another one."""
    model, feeds = _quantized(tmp_path, 1, False, batch=3)
    one_thread = _on_onnxruntime(model, feeds, threads=1)
    result = rewrite(model, ["opset:17"], plugins=plugins, compare_options={"inputs": feeds})
    assert result.report.verdict == "verified", result.report.verdict_reason
    assert all(np.array_equal(g, e) for g, e in
               zip(_on_onnxruntime(result.model, feeds, threads=2), one_thread))
    two_threads = _on_onnxruntime(model, feeds, threads=2)
    assert max(float(np.abs(a - b).max()) for a, b in zip(two_threads, one_thread)) > 1e-4


def test_onnxruntime_runs_a_thread_dependent_original_on_one_thread_only_as_the_oracle(
        tmp_path):
    from rewriter_plugins.onnxruntime_target import OnnxRuntimeTarget

    from rewriter.detect.targets import TargetOptions

    model, feeds = _quantized(tmp_path, 1, False, batch=3)
    oracle = OnnxRuntimeTarget(options=TargetOptions(oracle=True)).prepare(model, tmp_path)
    got = list(oracle(feeds).values())
    assert all(np.array_equal(g, e) for g, e in
               zip(got, _on_onnxruntime(model, feeds, threads=1)))
    target = OnnxRuntimeTarget().prepare(model, tmp_path)  # as a user loads it
    assert all(np.array_equal(g, e) for g, e in
               zip(target(feeds).values(), _on_onnxruntime(model, feeds)))
