"""The ``tensorrt`` plugin: TensorRT plugin ops decomposed into standard ONNX, run on
onnxruntime and checked against the numpy kernels that follow the plugins' CUDA code
(``rewriter_custom_ops.trt_nms`` / ``trt_attention``). Scores are random, so distinct.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from rewriter_custom_ops import trt_attention, trt_nms
from rewriter_plugins import tensorrt

from rewriter.api import rewrite
from rewriter.functions import DecompositionContext
from tests.conftest import CORPUS

ort = pytest.importorskip("onnxruntime")

F32, F16, I32 = TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.INT32


def _vi(name, elem, shape=None):
    return helper.make_tensor_value_info(name, elem, shape)


def _model(nodes, inputs, outputs, domain="", opset=17):
    graph = helper.make_graph(nodes, "g", inputs, outputs)
    imports = [helper.make_opsetid("", opset)]
    if domain:
        imports.append(helper.make_opsetid(domain, 1))
    model = helper.make_model(graph, opset_imports=imports)
    model.ir_version = 8
    return model


def _rewritten(model, plugins):
    result = rewrite(model, ["onnxruntime"], plugins=plugins, confirm=False, verify=False)
    assert not result.report.remaining, [f.as_dict() for f in result.report.remaining]
    assert {n.domain for n in result.model.graph.node} <= {"", "ai.onnx"}
    return result.model


def _run(model, feeds):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def _boxes(rng, batch, n, classes=None):
    """Corner boxes in [0, 1] with much overlap (some given with reversed corners)."""
    shape = (batch, n) if classes is None else (batch, n, classes)
    center = rng.uniform(0.2, 0.8, (*shape, 2))
    size = rng.uniform(0.05, 0.4, (*shape, 2))
    boxes = np.concatenate([center - size / 2, center + size / 2], -1).astype(np.float32)
    flip = rng.random(shape) < 0.2
    boxes[flip] = boxes[flip][:, [2, 3, 0, 1]]
    return boxes


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
    return _model([node], [_vi(name, F32, list(shape)) for name, shape in inputs],
                  [_vi(n, I32 if n in ("num_detections", "detection_classes") else F32)
                   for n in EFFICIENT_OUTPUTS], domain)


@pytest.mark.parametrize("case", [
    dict(),
    dict(class_agnostic=1),
    dict(background_class=1, box_coding=1),
    dict(score_activation=1, score_threshold=0.45),
    dict(anchors=True),
    dict(anchors=True, box_coding=1, class_agnostic=1),
    dict(per_class_boxes=True),
    dict(per_class_boxes=True, class_agnostic=1, max_output_boxes=200),
], ids=["default", "agnostic", "background-centersize", "sigmoid", "anchors-corner",
        "anchors-centersize-agnostic", "per-class-boxes", "per-class-agnostic-pad"])
def test_efficient_nms(plugins, case):
    case = dict(case)
    rng = np.random.default_rng(len(str(case)))
    batch, n, classes = 2, 60, 3
    anchors = case.pop("anchors", False)
    per_class = case.pop("per_class_boxes", False)
    attrs = dict(score_threshold=0.3, iou_threshold=0.45, max_output_boxes=25,
                 background_class=-1, score_activation=0, box_coding=0, class_agnostic=0,
                 plugin_version="1")
    attrs.update(case)
    if attrs["box_coding"] == 1:  # (center, size) boxes
        corners = _boxes(rng, batch, n, classes if per_class else None)
        lo, hi = np.minimum(corners[..., :2], corners[..., 2:]), np.maximum(
            corners[..., :2], corners[..., 2:])
        boxes = np.concatenate([(lo + hi) / 2, hi - lo], -1).astype(np.float32)
    else:
        boxes = _boxes(rng, batch, n, classes if per_class else None)
    if anchors:  # raw deltas around anchor boxes
        boxes = (rng.standard_normal(boxes.shape) * 0.1).astype(np.float32)
        anchor = _boxes(rng, 1, n)
        if attrs["box_coding"] == 1:
            anchor = np.abs(anchor)
    scores = rng.random((batch, n, classes)).astype(np.float32)
    if attrs["score_activation"]:
        scores = (scores * 6 - 3).astype(np.float32)
    feeds = {"boxes": boxes, "scores": scores}
    if anchors:
        feeds["anchors"] = anchor
    model = _efficient_model([(k, v.shape) for k, v in feeds.items()], attrs)
    got = _run(_rewritten(model, plugins), feeds)
    expected = trt_nms.efficient_nms(*feeds.values(), **attrs, plugin_namespace="")
    assert 0 < expected[0].min() and expected[0].max() <= attrs["max_output_boxes"]
    _assert_outputs(got, expected, EFFICIENT_OUTPUTS)


def test_efficient_nms_candidate_cap(plugins):
    """Only the 4096 best candidates enter NMS: with nothing suppressed and room for all,
    exactly 4096 come out of 4500."""
    rng = np.random.default_rng(1)
    feeds = {"boxes": _boxes(rng, 1, 1500), "scores": rng.random((1, 1500, 3)).astype(
        np.float32)}
    attrs = dict(score_threshold=0.0, iou_threshold=1.0, max_output_boxes=4500,
                 background_class=-1, score_activation=0, box_coding=0)
    model = _efficient_model([(k, v.shape) for k, v in feeds.items()], attrs, domain="")
    got = _run(_rewritten(model, plugins), feeds)
    expected = trt_nms.efficient_nms(*feeds.values(), **attrs, class_agnostic=0,
                                     plugin_version="1", plugin_namespace="")
    assert expected[0][0, 0] == 4096
    _assert_outputs(got, expected, EFFICIENT_OUTPUTS)


def test_efficient_nms_onnx(plugins):
    rng = np.random.default_rng(2)
    feeds = {"boxes": _boxes(rng, 2, 50), "scores": rng.random((2, 50, 4)).astype(np.float32)}
    attrs = dict(score_threshold=0.2, iou_threshold=0.5, max_output_boxes_per_class=6)
    node = helper.make_node("EfficientNMS_ONNX_TRT", ["boxes", "scores"], ["selected"],
                            domain="trt.plugins", **attrs)
    model = _model([node], [_vi("boxes", F32, [2, 50, 4]), _vi("scores", F32, [2, 50, 4])],
                   [_vi("selected", I32)], "trt.plugins")
    (got,) = _run(_rewritten(model, plugins), feeds)
    expected = trt_nms.efficient_nms_onnx(*feeds.values(), **attrs, center_point_box=0,
                                          plugin_version="1", plugin_namespace="")
    assert got.dtype == np.int32 and got.shape == (12, 3)
    np.testing.assert_array_equal(got, expected)
    # nothing above the threshold: every row is -1
    feeds["scores"] = (feeds["scores"] * 0.1).astype(np.float32)
    (got,) = _run(_rewritten(model, plugins), feeds)
    np.testing.assert_array_equal(got, np.full((12, 3), -1, np.int32))


BATCHED_OUTPUTS = ["num_detections", "nmsed_boxes", "nmsed_scores", "nmsed_classes"]


def _batched_model(op_type, classes, n, share, attrs):
    node = helper.make_node(op_type, ["boxes", "scores"], BATCHED_OUTPUTS, domain="",
                            **attrs)
    return _model([node], [_vi("boxes", F32, [2, n, 1 if share else classes, 4]),
                           _vi("scores", F32, [2, n, classes])],
                  [_vi(o, I32 if o == "num_detections" else F32) for o in BATCHED_OUTPUTS])


@pytest.mark.parametrize("op_type,share,extra", [
    ("BatchedNMSDynamic_TRT", 1, {}),
    ("BatchedNMS_TRT", 1, dict(backgroundLabelId=0, clipBoxes=0)),
    ("BatchedNMSDynamic_TRT", 0, dict(topK=10, keepTopK=10)),
    ("BatchedNMSDynamic_TRT", 1, dict(keepTopK=60, topK=60, scoreThreshold=0.8)),
], ids=["shared", "background-noclip", "per-class-topk", "padding"])
def test_batched_nms(plugins, op_type, share, extra):
    rng = np.random.default_rng(3)
    classes, n = 4, 50
    boxes = _boxes(rng, 2, n, 1 if share else classes) * np.float32(1.3) - np.float32(0.15)
    scores = rng.random((2, n, classes)).astype(np.float32)
    attrs = dict(shareLocation=share, backgroundLabelId=-1, numClasses=classes, topK=30,
                 keepTopK=20, scoreThreshold=0.25, iouThreshold=0.5, isNormalized=1,
                 clipBoxes=1)
    attrs.update(extra)
    model = _batched_model(op_type, classes, n, share, attrs)
    feeds = {"boxes": boxes.astype(np.float32), "scores": scores}
    got = _run(_rewritten(model, plugins), feeds)
    expected = trt_nms.batched_nms(*feeds.values(), **{
        "scoreBits": 16, "caffeSemantics": 1, "plugin_version": "1", "plugin_namespace": "",
        **attrs})
    assert expected[0].min() > 0
    _assert_outputs(got, expected, BATCHED_OUTPUTS)
    if attrs["keepTopK"] == 60:  # fewer detections than slots: class -1 in the padding
        assert (expected[3][:, -1] == -1).all()


def test_nms_verifies_against_the_kernel(plugins):
    """No runtime has EfficientNMS_TRT: rewrite's own verification runs the original on the
    reference evaluator with the numpy kernel and finds the decomposition equal."""
    attrs = dict(score_threshold=0.05, iou_threshold=0.5, max_output_boxes=10,
                 background_class=-1, score_activation=0, box_coding=0)
    model = _efficient_model([("boxes", (1, 30, 4)), ("scores", (1, 30, 2))], attrs)
    result = rewrite(model, ["onnxruntime"], plugins=plugins, confirm=False)
    assert result.report.verification["compare"] == "ok", result.report.verification


def _fmha_model(elem, shape_q, shape_kv, **attrs):
    node = helper.make_node("fMHAPlugin", ["q", "k", "v"], ["output"], **attrs)
    return _model([node], [_vi("q", elem, shape_q), _vi("k", elem, shape_kv),
                           _vi("v", elem, shape_kv)], [_vi("output", elem, shape_q)], opset=18)


@pytest.mark.parametrize("elem,causal", [(F16, 0), (F16, 1), (F32, 0)])
def test_fmha(plugins, elem, causal):
    rng = np.random.default_rng(4)
    dtype = np.float16 if elem == F16 else np.float32
    q = rng.standard_normal((2, 7, 3, 8)).astype(dtype)
    k, v = (rng.standard_normal((2, 7, 3, 8)).astype(dtype) for _ in range(2))
    model = _fmha_model(elem, [2, 7, 3, 8], [2, 7, 3, 8], scale=0.35, causal=causal)
    (got,) = _run(_rewritten(model, plugins), {"q": q, "k": k, "v": v})
    expected = trt_attention.fmha(q, k, v, scale=0.35, dropout_p=0.0, causal=causal,
                                  return_attn_probs=0)
    assert got.dtype == dtype
    tol = 2e-3 if elem == F16 else 1e-5
    np.testing.assert_allclose(got.astype(np.float64), expected.astype(np.float64),
                               rtol=tol, atol=tol)


@pytest.mark.parametrize("builder,op_type,attrs", [
    (tensorrt.build_fmha, "fMHAPlugin", dict(dropout_p=0.1)),
    (tensorrt.build_fmha, "fMHAPlugin", dict(return_attn_probs=1)),
    (tensorrt.build_fmha, "fMHAPlugin", dict(window=4)),
    (tensorrt.build_disentangled_attention, "DisentangledAttention_TRT", dict(span=1,
                                                                              factor=0.1)),
    (tensorrt.build_batched_nms, "BatchedNMS_TRT", dict(numClasses=3, topK=5, keepTopK=9)),
    (tensorrt.build_batched_nms, "BatchedNMS_TRT", dict(numClasses=3, topK=5, keepTopK=5,
                                                        isNormalized=0)),
    (tensorrt.build_efficient_nms, "EfficientNMS_TRT", dict(plugin_version="2")),
], ids=["dropout", "attn-probs", "unknown-attribute", "span-1", "keep-over-topk",
        "pixel-boxes", "version-2"])
def test_builders_decline(builder, op_type, attrs):
    """Forms the decompositions do not honour are declined (never dropped silently)."""
    inputs = ["a", "b"] if "NMS" in op_type else ["a", "b", "c"]
    node = helper.make_node(op_type, inputs, ["y"], **attrs)
    ctx = DecompositionContext(node, 17, {"": 17}, ["tensor(float)"] * 3)
    assert builder(ctx) is None
    ctx.node.ClearField("attribute")
    if op_type == "fMHAPlugin":  # the same node without the attribute is accepted
        assert builder(ctx) is not None


def test_fmha_inside_if_branch(plugins):
    """fMHAPlugin nodes in both branches of an If, reading outer-scope q, k, v."""
    rng = np.random.default_rng(5)
    shape = [1, 5, 2, 4]
    branches = [helper.make_graph(
        [helper.make_node("fMHAPlugin", ["q", "k", "v"], [name], scale=scale)], name, [],
        [_vi(name, F16, shape)]) for name, scale in (("then", 0.5), ("else", 2.0))]
    node = helper.make_node("If", ["cond"], ["output"], then_branch=branches[0],
                            else_branch=branches[1])
    model = _model([node], [_vi("cond", TensorProto.BOOL, []),
                            *[_vi(x, F16, shape) for x in "qkv"]], [_vi("output", F16, shape)],
                   opset=18)
    rewritten = _rewritten(model, plugins)
    feeds = {x: rng.standard_normal(shape).astype(np.float16) for x in "qkv"}
    for cond, scale in ((True, 0.5), (False, 2.0)):
        (got,) = _run(rewritten, {**feeds, "cond": np.array(cond)})
        expected = trt_attention.fmha(*feeds.values(), scale=scale, dropout_p=0.0, causal=0,
                                      return_attn_probs=0)
        np.testing.assert_allclose(got.astype(np.float32), expected.astype(np.float32),
                                   rtol=2e-3, atol=2e-3)


def test_disentangled_attention(plugins):
    rng = np.random.default_rng(6)
    n, seq, span = 3, 40, 8
    feeds = {"c2c": rng.standard_normal((n, seq, seq)).astype(np.float32),
             "c2p": rng.standard_normal((n, seq, 2 * span)).astype(np.float32),
             "p2c": rng.standard_normal((n, seq, 2 * span)).astype(np.float32)}
    node = helper.make_node("DisentangledAttention_TRT", list(feeds), ["output"],
                            domain="trt.plugins", span=span, factor=0.2)
    model = _model([node], [_vi(k, F32, list(v.shape)) for k, v in feeds.items()],
                   [_vi("output", F32)], "trt.plugins", opset=12)
    (got,) = _run(_rewritten(model, plugins), feeds)
    expected = trt_attention.disentangled_attention(
        *feeds.values(), span=span, factor=0.2, plugin_version="1", plugin_namespace="")
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)
    # the log buckets: |r - c| = 39 > span / 2 lands in column span + bucket, not clamped
    index = trt_attention.relative_index(seq, span, 2 * span)
    assert index[39, 0] == 2 * span - 1 and index[5, 0] == span + 5 and index[0, 6] < 4


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
    (got,) = _run(rewritten, {"q": q, "k": k, "v": v})
    reference = _reference_attention_fixed(
        CORPUS / "testdata" / "trt_fmha_plugin_attention" / "reference_standard_attention.onnx")
    names = [i.name for i in reference.graph.input]
    (expected,) = _run(reference, dict(zip(names, (x.astype(np.float32) for x in (q, k, v)))))
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
    (got,) = _run(onnx.load(result.model), feeds)
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
