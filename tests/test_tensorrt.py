"""The ``tensorrt`` plugin: TensorRT plugin ops decomposed into standard ONNX. The
decompositions against the numpy kernels that follow the plugins' CUDA code
(``rewriter_custom_ops.trt_nms`` / ``trt_attention``) on the plugin's samples are in
``tests/test_oracles.py``; here: the candidate cap, verification, declines, If branches,
the corpus models. Scores are random, so distinct.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from rewriter_custom_ops import trt_attention, trt_nms
from rewriter_plugins import tensorrt

from rewriter import testing
from rewriter.api import rewrite
from rewriter.plugin import Declined, DecompositionContext
from rewriter.testing import make_model, run_onnxruntime, value_info
from tests.conftest import CORPUS

ort = pytest.importorskip("onnxruntime")

F32, F16, I32 = TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.INT32


def _assert_outputs(got, expected, names):
    for name, g, e in zip(names, got, expected):
        assert g.dtype == e.dtype, (name, g.dtype, e.dtype)
        assert g.shape == e.shape, (name, g.shape, e.shape)
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-6, err_msg=name)


EFFICIENT_OUTPUTS = ["num_detections", "detection_boxes", "detection_scores",
                     "detection_classes"]


def _efficient_model(inputs, attrs, domain="TRT"):
    node = helper.make_node("EfficientNMS_TRT", [name for name, _ in inputs],
                            EFFICIENT_OUTPUTS, domain=domain, **attrs)
    return make_model([node], [value_info(name, F32, list(shape)) for name, shape in inputs],
                      [value_info(n, I32 if n in ("num_detections", "detection_classes")
                                  else F32) for n in EFFICIENT_OUTPUTS], opset=17)


def test_efficient_nms_candidate_cap(plugins):
    """Only the 4096 best candidates enter NMS: with nothing suppressed and room for all,
    exactly 4096 come out of 4500."""
    rng = np.random.default_rng(1)
    feeds = {"boxes": tensorrt.samples.random_corners(rng, (1, 1500, 4)).astype(np.float32),
             "scores": rng.random((1, 1500, 3)).astype(np.float32)}
    attrs = dict(score_threshold=0.0, iou_threshold=1.0, max_output_boxes=4500,
                 background_class=-1, score_activation=0, box_coding=0)
    model = _efficient_model([(k, v.shape) for k, v in feeds.items()], attrs, domain="")
    rewritten = testing.rewritten(model, "onnxruntime", plugins, standard_only=True)
    got = run_onnxruntime(rewritten, feeds)
    expected = trt_nms.efficient_nms(*feeds.values(), **attrs, class_agnostic=0,
                                     plugin_version="1", plugin_namespace="")
    assert expected[0][0, 0] == 4096
    _assert_outputs(got, expected, EFFICIENT_OUTPUTS)


def test_nms_verifies_against_the_kernel(plugins):
    """No runtime has EfficientNMS_TRT: rewrite's own verification runs the original on the
    reference evaluator with the numpy kernel and finds the decomposition equal."""
    attrs = dict(score_threshold=0.05, iou_threshold=0.5, max_output_boxes=10,
                 background_class=-1, score_activation=0, box_coding=0)
    model = _efficient_model([("boxes", (1, 30, 4)), ("scores", (1, 30, 2))], attrs)
    result = rewrite(model, ["onnxruntime"], plugins=plugins, confirm=False)
    assert result.report.verification["compare"] == "ok", result.report.verification


@pytest.mark.parametrize("builder,op_type,attrs,reason", [
    (tensorrt.build_fmha, "fMHAPlugin", dict(dropout_p=0.1), "dropout_p != 0"),
    (tensorrt.build_fmha, "fMHAPlugin", dict(return_attn_probs=1), "return_attn_probs=1"),
    (tensorrt.build_fmha, "fMHAPlugin", dict(window=4), "unknown attribute(s) window"),
    (tensorrt.build_disentangled_attention, "DisentangledAttention_TRT",
     dict(span=1, factor=0.1), "span 1 < 2"),
    (tensorrt.build_batched_nms, "BatchedNMS_TRT", dict(numClasses=3, topK=5, keepTopK=9),
     "keepTopK 9, topK 5"),
    (tensorrt.build_batched_nms, "BatchedNMS_TRT", dict(numClasses=3, topK=5, keepTopK=5,
                                                        isNormalized=0), "isNormalized=0"),
    (tensorrt.build_efficient_nms, "EfficientNMS_TRT", dict(plugin_version="2"),
     "only plugin_version 1"),
], ids=["dropout", "attn-probs", "unknown-attribute", "span-1", "keep-over-topk",
        "pixel-boxes", "version-2"])
def test_builders_decline(builder, op_type, attrs, reason):
    """Forms the decompositions do not honour are declined with the reason (never dropped
    silently)."""
    inputs = ["a", "b"] if "NMS" in op_type else ["a", "b", "c"]
    node = helper.make_node(op_type, inputs, ["y"], **attrs)
    ctx = DecompositionContext(node, 17, {"": 17}, ["tensor(float)"] * 3)
    with pytest.raises(Declined) as declined:
        builder(ctx)
    assert reason in str(declined.value)
    ctx.node.ClearField("attribute")
    if op_type == "fMHAPlugin":  # the same node without the attribute is accepted
        assert builder(ctx) is not None


def test_fmha_inside_if_branch(plugins):
    """fMHAPlugin nodes in both branches of an If, reading outer-scope q, k, v."""
    rng = np.random.default_rng(5)
    shape = [1, 5, 2, 4]
    branches = [helper.make_graph(
        [helper.make_node("fMHAPlugin", ["q", "k", "v"], [name], scale=scale)], name, [],
        [value_info(name, F16, shape)]) for name, scale in (("then", 0.5), ("else", 2.0))]
    node = helper.make_node("If", ["cond"], ["output"], then_branch=branches[0],
                            else_branch=branches[1])
    model = make_model([node], [value_info("cond", TensorProto.BOOL, []),
                                *[value_info(x, F16, shape) for x in "qkv"]],
                       [value_info("output", F16, shape)], opset=18)
    rewritten = testing.rewritten(model, "onnxruntime", plugins, standard_only=True)
    feeds = {x: rng.standard_normal(shape).astype(np.float16) for x in "qkv"}
    for cond, scale in ((True, 0.5), (False, 2.0)):
        (got,) = run_onnxruntime(rewritten, {**feeds, "cond": np.array(cond)})
        expected = trt_attention.fmha(*feeds.values(), scale=scale, dropout_p=0.0, causal=0,
                                      return_attn_probs=0)
        np.testing.assert_allclose(got.astype(np.float32), expected.astype(np.float32),
                                   rtol=2e-3, atol=2e-3)


def test_disentangled_attention_log_buckets():
    """The kernel's relative positions (its values against the decomposition are checked in
    tests/test_oracles.py): |r - c| = 39 > span / 2 lands in column span + bucket, not
    clamped; short distances are the distance itself."""
    index = trt_attention.relative_index(40, 8, 16)
    assert index[39, 0] == 15 and index[5, 0] == 13 and index[0, 6] < 4


# -- the corpus models ---------------------------------------------------------------------


def _reference_attention_fixed(path):
    """The un-plugged attention graph as it was exported: its value_info types every
    intermediate float32, only the graph's inputs and output were relabelled float16 (the
    type error that keeps it from loading). Relabel them float32."""
    model = onnx.load(str(path))
    for value in [*model.graph.input, *model.graph.output]:
        value.type.tensor_type.elem_type = F32
    return model


def test_corpus_fmha(plugins, tmp_path):
    path = CORPUS / "trt_fmha_plugin_attention.onnx"
    if not path.exists():
        pytest.skip("corpus model absent")
    result = rewrite(str(path), ["onnxruntime"], plugins=plugins, output=tmp_path / "o.onnx")
    assert not result.report.remaining
    assert result.report.verification["compare"] == "ok", result.report.verification
    rewritten = onnx.load(result.model)
    rng = np.random.default_rng(7)
    q, k, v = (rng.standard_normal((2, 1536, 8, 40)).astype(np.float16) for _ in range(3))
    (got,) = run_onnxruntime(rewritten, {"q": q, "k": k, "v": v})
    reference = _reference_attention_fixed(
        CORPUS / "testdata" / "trt_fmha_plugin_attention" / "reference_standard_attention.onnx")
    names = [i.name for i in reference.graph.input]
    (expected,) = run_onnxruntime(
        reference, dict(zip(names, (x.astype(np.float32) for x in (q, k, v)))))
    np.testing.assert_allclose(got.astype(np.float32), expected.astype(np.float32),
                               rtol=1e-2, atol=2e-3)


def test_corpus_disentangled_attention(plugins, tmp_path):
    path = CORPUS / "ort_trt_plugin_disentangled_attention.onnx"
    if not path.exists():
        pytest.skip("corpus model absent")
    result = rewrite(str(path), ["onnxruntime"], plugins=plugins, output=tmp_path / "o.onnx")
    assert not result.report.remaining
    assert result.report.verification["onnxruntime load"] == "ok"
    # the original lacks the opset import of 'trt.plugins': compare adds it to run the
    # original on the reference evaluator with the plugin's kernel; so does a copy with it
    assert result.report.verification["compare"] == "ok"
    original = onnx.load(str(path))
    original.opset_import.append(helper.make_opsetid("trt.plugins", 1))
    import rewriter

    report = rewriter.compare(original, onnx.load(result.model), ["onnxruntime"],
                              plugins=plugins)
    assert report.ok, report.summary()
    rng = np.random.default_rng(8)
    feeds = {f"input{i}": rng.standard_normal((12, 256, 256)).astype(np.float32)
             for i in (1, 2, 3)}
    (got,) = run_onnxruntime(onnx.load(result.model), feeds)
    expected = trt_attention.disentangled_attention(
        *feeds.values(), span=128, factor=np.float32(0.123), plugin_version="1",
        plugin_namespace="")
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)


def test_registration(plugins):
    ops = {(d.domain, d.op_type) for d in plugins.registry.decompositions
           if d.plugin == "tensorrt"}
    assert ("", "EfficientNMS_TRT") in ops and ("TRT", "EfficientNMS_TRT") in ops
    assert ("trt.plugins", "DisentangledAttention_TRT") in ops and ("", "fMHAPlugin") in ops
    kernels = {k for k, e in plugins.registry.kernels.items() if e.plugin == "tensorrt"}
    assert kernels >= ops
