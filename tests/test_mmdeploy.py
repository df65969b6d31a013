"""The ``mmdeploy`` plugin. Its decompositions against their oracles on the plugin's samples
(``torch.nn.functional.grid_sample``, the numpy MMCVRoiAlign and TRTBatchedNMS kernels, the
numpy deformable convolution) are in ``tests/test_oracles.py``; here: those oracles against
independent ones (onnxruntime's RoiAlign and DeformConv, a hand-worked NMS), the kernels
against OpenVINO's runtime (MMCVRoIAlignRotated, DeformableConv2D,
ExperimentalDetectronDetectionOutput) and a brute-force NMSMatch, declines, If branches and
the corpus. Kernels run through ``rewriter.session``.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from rewriter_plugins import mmdeploy

import rewriter
from rewriter.api import rewrite
from rewriter.errors import UnfixableError
from rewriter.testing import make_model, rewrite_fully, rewritten
from rewriter.testing import run_onnxruntime as run_ort
from rewriter.testing import value_info as vi
from tests.conftest import CORPUS, onnxruntime_has_kernel

ort = pytest.importorskip("onnxruntime")

F32 = TensorProto.FLOAT
MM = "mmdeploy"


def _mmmodel(nodes, inputs, outputs, opset, domain=MM, initializers=()):
    return make_model(nodes, inputs, outputs, opset=opset, domains=[domain],
                      initializers=initializers, ir_version=9)


# -- grid_sampler -----------------------------------------------------------------------


def _grid_model(opset, **attrs):
    node = helper.make_node("grid_sampler", ["input", "grid"], ["output"], domain=MM, **attrs)
    return _mmmodel([node], [vi("input", F32, [2, 3, 5, 7]), vi("grid", F32, [2, 4, 6, 2])],
                  [vi("output")], opset)


def test_grid_sampler_bicubic_below_opset_16_has_no_remedy(plugins):
    with pytest.raises(UnfixableError):
        rewrite_fully(_grid_model(13, interpolation_mode=2), "onnxruntime", plugins)


@pytest.mark.parametrize("opset", [11, 17])
def test_grid_sampler_inside_if_branch(plugins, opset):
    torch = pytest.importorskip("torch")
    sampler = helper.make_node("grid_sampler", ["input", "grid"], ["t"], domain=MM,
                               interpolation_mode=0, padding_mode=1, align_corners=0)
    then_branch = helper.make_graph([sampler], "then", [], [vi("t", F32, [1, 2, 3, 4])])
    else_branch = helper.make_graph([helper.make_node("Identity", ["zeros"], ["e"])], "else",
                                    [], [vi("e", F32, [1, 2, 3, 4])])
    node = helper.make_node("If", ["cond"], ["output"], then_branch=then_branch,
                            else_branch=else_branch)
    model = _mmmodel([node], [vi("cond", TensorProto.BOOL, []), vi("input", F32, [1, 2, 5, 5]),
                            vi("grid", F32, [1, 3, 4, 2]), vi("zeros", F32, [1, 2, 3, 4])],
                   [vi("output", F32, [1, 2, 3, 4])], opset)
    out = rewritten(model, "onnxruntime", plugins, standard_only=True)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 2, 5, 5)).astype(np.float32)
    grid = rng.uniform(-1.2, 1.2, (1, 3, 4, 2)).astype(np.float32)
    zeros = np.zeros((1, 2, 3, 4), np.float32)
    (got,) = run_ort(out, {"cond": np.array(True), "input": x, "grid": grid, "zeros": zeros})
    expected = torch.nn.functional.grid_sample(torch.from_numpy(x), torch.from_numpy(grid),
                                               padding_mode="border", align_corners=False)
    np.testing.assert_allclose(got, expected.numpy(), rtol=1e-4, atol=1e-5)
    (got,) = run_ort(out, {"cond": np.array(False), "input": x, "grid": grid, "zeros": zeros})
    assert not got.any()


@pytest.mark.parametrize("ceiling", [13, 15])
def test_grid_sampler_at_opset_22_for_an_older_ceiling_takes_the_gather_body(plugins, ceiling):
    """The model imports opset 22; the target runs up to 13 (no GridSample) or 15: the
    registration for opsets before GridSample is built at the ceiling, converted to 22 for
    the splice, and the whole model lowered again. Numbers against torch's grid_sample."""
    torch = pytest.importorskip("torch")
    model = _grid_model(22, interpolation_mode=0, padding_mode=2, align_corners=1)
    model.ir_version = 10
    model.graph.output[0].CopyFrom(vi("output", F32, [2, 3, 4, 6]))
    result = rewrite(model, [f"opset:{ceiling}"], plugins=plugins, confirm=False,
                     verify=False, explain=True)
    out = result.model
    assert {o.domain: o.version for o in out.opset_import}.get("") == ceiling
    assert {n.domain for n in out.graph.node} <= {""}
    onnx.checker.check_model(out, full_check=True)
    rules = [c["rule"] for item in result.report.explain for c in item["candidates"]
             if c["accepted"] and c["kind"] == "decomposition"]
    assert rules == [f"mmdeploy:grid_sampler (bilinear/nearest) -> Gather (before GridSample) "
                     f"(written at opset {ceiling}, converted to 22)"]
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 3, 5, 7)).astype(np.float32)
    grid = rng.uniform(-1.2, 1.2, (2, 4, 6, 2)).astype(np.float32)
    (got,) = run_ort(out, {"input": x, "grid": grid})
    expected = torch.nn.functional.grid_sample(torch.from_numpy(x), torch.from_numpy(grid),
                                               padding_mode="reflection", align_corners=True)
    np.testing.assert_allclose(got, expected.numpy(), rtol=1e-4, atol=1e-5)


# -- MMCVRoiAlign ------------------------------------------------------------------------


def _onnx_roi_align(x, rois, mode, aligned, **attrs):
    """onnxruntime's RoiAlign on the split rois: an independent oracle for avg mode."""
    node = helper.make_node("RoiAlign", ["X", "boxes", "index"], ["Y"], mode=mode,
                            coordinate_transformation_mode="half_pixel" if aligned
                            else "output_half_pixel", **attrs)
    model = _mmmodel([node], [vi("X"), vi("boxes"), vi("index", TensorProto.INT64)],
                   [vi("Y")], 16)
    return run_ort(model, {"X": x, "boxes": rois[:, 1:], "index": rois[:, 0].astype(np.int64)})[0]


@pytest.mark.parametrize("aligned", [0, 1])
@pytest.mark.parametrize("sampling_ratio", [0, 2])
def test_roi_align_kernel_matches_onnxruntime_roialign(aligned, sampling_ratio):
    from rewriter_custom_ops.mm_roi_align import roi_align

    rng = np.random.default_rng(10 + aligned + sampling_ratio)
    x = rng.standard_normal((2, 3, 12, 10)).astype(np.float32)
    rois = mmdeploy.samples.random_rois(rng, (9, 5)).astype(np.float32)
    attrs = dict(output_height=3, output_width=4, spatial_scale=0.5,
                 sampling_ratio=sampling_ratio)
    got = roi_align(x, rois, mode="avg", aligned=aligned, **attrs)
    np.testing.assert_allclose(got, _onnx_roi_align(x, rois, "avg", aligned, **attrs),
                               rtol=1e-4, atol=1e-5)


def _roi_model(opset, domain=MM, **attrs):
    node = helper.make_node("MMCVRoiAlign", ["input", "rois"], ["output"], domain=domain,
                            **attrs)
    return _mmmodel([node], [vi("input", F32, [2, 3, 12, 10]), vi("rois", F32, [9, 5])],
                  [vi("output")], opset, domain)


@pytest.mark.parametrize("opset,attrs", [(16, dict(mode="max", aligned=1)),
                                         (11, dict(mode="avg", aligned=1))],
                         ids=["max-mode", "aligned-before-16"])
def test_roi_align_kernel_where_roialign_differs(plugins, opset, attrs):
    """Max mode (ONNX's differs) and aligned at opset < 16 run the numpy kernel."""
    from rewriter_custom_ops.mm_roi_align import roi_align

    rng = np.random.default_rng(30 + opset)
    x = rng.standard_normal((2, 3, 12, 10)).astype(np.float32)
    rois = mmdeploy.samples.random_rois(rng, (9, 5)).astype(np.float32)
    model = _roi_model(opset, output_height=2, output_width=3, spatial_scale=0.75, **attrs)
    result = rewrite_fully(model, "onnxruntime", plugins)
    assert result.model.graph.node[0].domain == "ai.onnx.contrib"
    (got,) = rewriter.session(result.model).run(None, {"input": x, "rois": rois})
    expected = roi_align(x, rois, output_height=2, output_width=3, spatial_scale=0.75,
                         sampling_ratio=0, **attrs)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    if attrs["mode"] == "max":  # and it is the max of the samples, not their average
        assert not np.allclose(got, roi_align(x, rois, output_height=2, output_width=3,
                                              spatial_scale=0.75, sampling_ratio=0,
                                              mode="avg", aligned=1))


# -- deformable convolutions -------------------------------------------------------------


def _deform_case(rng, n=2, c=4, h=7, w=6, o=6, kh=3, kw=2, groups=1, dg=2, stride=(2, 1),
                 pad=(1, 1), dilation=(1, 2)):
    oh = (h + 2 * pad[0] - (dilation[0] * (kh - 1) + 1)) // stride[0] + 1
    ow = (w + 2 * pad[1] - (dilation[1] * (kw - 1) + 1)) // stride[1] + 1
    return dict(
        input=rng.standard_normal((n, c, h, w)).astype(np.float32),
        offset=mmdeploy.samples.random_offsets(
            rng, (n, dg * 2 * kh * kw, oh, ow)).astype(np.float32),
        mask=rng.uniform(0, 1, (n, dg * kh * kw, oh, ow)).astype(np.float32),
        weight=rng.standard_normal((o, c // groups, kh, kw)).astype(np.float32),
        bias=rng.standard_normal(o).astype(np.float32),
    ), dict(stride=list(stride), padding=list(pad), dilation=list(dilation), groups=groups,
            deform_groups=dg)


def test_numpy_deform_conv_matches_onnxruntime_deformconv():
    """The numpy oracle agrees with onnxruntime's DeformConv (torchvision's semantics)."""
    from rewriter_custom_ops.mm_deform_conv import deform_conv2d

    if not onnxruntime_has_kernel("DeformConv"):
        pytest.skip("the installed onnxruntime has no DeformConv kernel to agree with")

    rng = np.random.default_rng(40)
    v, a = _deform_case(rng, groups=2, dg=2)
    names = ["X", "W", "offset", "B", "mask"]
    node = helper.make_node("DeformConv", names, ["Y"], strides=a["stride"],
                            pads=a["padding"] * 2, dilations=a["dilation"], group=2,
                            offset_group=2)
    model = _mmmodel([node], [vi(n) for n in names], [vi("Y")], 19)
    (got,) = run_ort(model, dict(X=v["input"], W=v["weight"], offset=v["offset"], B=v["bias"],
                              mask=v["mask"]))
    expected = deform_conv2d(v["input"], v["offset"], v["weight"], v["mask"], v["bias"],
                             strides=a["stride"], pads=a["padding"] * 2,
                             dilations=a["dilation"], groups=2, offset_groups=2)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)


def test_deform_conv_gather_with_initializer_weight_in_if_branch(plugins):
    """Opset 11, symbolic image sizes, the kernel size read from the weight initializer,
    the node inside an If branch."""
    from rewriter_custom_ops.mm_deform_conv import deform_conv2d

    v, a = _deform_case(np.random.default_rng(45), n=1, h=9, w=8, stride=(1, 2), pad=(2, 0),
                        dilation=(2, 1))
    conv = helper.make_node("MMCVModulatedDeformConv2d", ["input", "offset", "mask", "weight",
                                                          "bias"], ["t"], domain=MM, **a)
    then_branch = helper.make_graph([conv], "then", [], [vi("t", F32, None)])
    else_branch = helper.make_graph([helper.make_node("Identity", ["offset"], ["e"])], "else",
                                    [], [vi("e", F32, None)])
    node = helper.make_node("If", ["cond"], ["output"], then_branch=then_branch,
                            else_branch=else_branch)
    model = _mmmodel([node], [vi("cond", TensorProto.BOOL, []),
                            vi("input", F32, ["N", 4, "H", "W"]),
                            vi("offset", F32, ["N", 24, "h", "w"]),
                            vi("mask", F32, ["N", 12, "h", "w"])], [vi("output", F32, None)],
                   11, initializers=[numpy_helper.from_array(v["weight"], "weight"),
                                     numpy_helper.from_array(v["bias"], "bias")])
    feeds = {"cond": np.array(True), "input": v["input"], "offset": v["offset"],
             "mask": v["mask"]}
    (got,) = run_ort(rewritten(model, "onnxruntime", plugins, standard_only=True), feeds)
    expected = deform_conv2d(v["input"], v["offset"], v["weight"], v["mask"], v["bias"],
                             strides=a["stride"], pads=a["padding"] * 2,
                             dilations=a["dilation"], offset_groups=2)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)


def test_deform_conv_declines_groups_with_offset_groups(plugins):
    v, a = _deform_case(np.random.default_rng(0), groups=2, dg=2)
    node = helper.make_node("MMCVDeformConv2d", ["input", "offset", "weight"], ["output"],
                            domain=MM, **a)
    model = _mmmodel([node], [vi(n) for n in ("input", "offset", "weight")], [vi("output")], 19)
    with pytest.raises(UnfixableError):
        rewrite_fully(model, "onnxruntime", plugins)


# -- OpenVINO as the oracle --------------------------------------------------------------


def _openvino(model, feeds):
    ov = pytest.importorskip("openvino")
    core = ov.Core()
    compiled = core.compile_model(core.read_model(model.SerializeToString(), b""), "CPU")
    return [np.asarray(v) for v in compiled(feeds).values()]


def _corpus(name):
    path = CORPUS / f"{name}.onnx"
    if not path.exists():
        pytest.skip(f"{path} is absent")
    return path


def test_corpus_roi_align_rotated(plugins):
    """OpenVINO runs mmdeploy::MMCVRoIAlignRotated itself; the kernel agrees with it on
    valid rois (the model's dims are -1, which input generation cannot fill: inputs given)."""
    path = _corpus("ov_mmdeploy_roi_align_rotated")
    rng = np.random.default_rng(50)
    count = 7
    rois = np.stack([rng.integers(0, 2, count), rng.uniform(0, 15, count),
                     rng.uniform(0, 12, count), rng.uniform(0.5, 10, count),
                     rng.uniform(0.5, 10, count), rng.uniform(-3, 3, count)], 1)
    feeds = {"X": rng.standard_normal((2, 3, 10, 12)).astype(np.float32),
             "rois": rois.astype(np.float32)}
    (expected,) = _openvino(onnx.load(str(path)), feeds)
    result = rewrite(onnx.load(str(path)), ["onnxruntime"], plugins=plugins, confirm=False,
                     compare_options={"inputs": feeds, "expected": {"Y": expected}})
    assert result.report.ok, result.report.verification
    assert result.report.verification["compare"] == "ok"
    (got,) = rewriter.session(result.model).run(None, feeds)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("clockwise,aligned,sampling_ratio", [(1, 1, 2), (0, 1, 0)])
def test_roi_align_rotated_kernel_matches_openvino(clockwise, aligned, sampling_ratio):
    from rewriter_custom_ops.mm_roi_align_rotated import roi_align_rotated

    attrs = dict(output_height=3, output_width=4, spatial_scale=0.5,
                 sampling_ratio=sampling_ratio, aligned=aligned, clockwise=clockwise)
    node = helper.make_node("MMCVRoIAlignRotated", ["X", "rois"], ["Y"], domain=MM, **attrs)
    model = _mmmodel([node], [vi("X", F32, [2, 3, 10, 12]), vi("rois", F32, [6, 6])],
                   [vi("Y")], 11)
    rng = np.random.default_rng(51 + clockwise)
    rois = np.stack([rng.integers(0, 2, 6), rng.uniform(0, 24, 6), rng.uniform(0, 20, 6),
                     rng.uniform(0.2, 16, 6), rng.uniform(0.2, 16, 6),
                     rng.uniform(-3, 3, 6)], 1).astype(np.float32)
    x = rng.standard_normal((2, 3, 10, 12)).astype(np.float32)
    (expected,) = _openvino(model, {"X": x, "rois": rois})
    np.testing.assert_allclose(roi_align_rotated(x, rois, **attrs), expected, rtol=1e-4,
                               atol=1e-5)


def test_corpus_deformable_conv_2d(plugins):
    """OpenVINO's DeformableConv2D (default domain, opset 7): the kernel against OpenVINO,
    with offsets that reach past every border."""
    path = _corpus("ov_deformable_conv_2d")
    rng = np.random.default_rng(60)
    feeds = {"data": rng.standard_normal((1, 1, 4, 4)).astype(np.float32),
             "deformation": np.round(rng.uniform(-3, 3, (1, 8, 3, 3)) * 2).astype(
                 np.float32) / 2}
    (expected,) = _openvino(onnx.load(str(path)), feeds)
    result = rewrite(onnx.load(str(path)), ["onnxruntime"], plugins=plugins, confirm=False,
                     compare_options={"inputs": feeds, "expected": {"out": expected}})
    assert result.report.verification["compare"] == "ok", result.report.verification
    generated = rewrite(onnx.load(str(path)), ["onnxruntime"], plugins=plugins, confirm=False)
    assert generated.report.ok, generated.report.verification


@pytest.mark.parametrize("attrs", [
    dict(group=2, deformable_groups=2),
    dict(deformable_groups=2, strides=[2, 1], pads=[1, 0, 2, 1], dilations=[1, 2]),
], ids=["groups", "strides-pads-dilations"])
def test_deformable_conv_2d_matches_openvino(plugins, attrs):
    from rewriter_custom_ops.mm_deform_conv import deform_conv2d

    rng = np.random.default_rng(61)
    strides, pads = attrs.get("strides", [1, 1]), attrs.get("pads", [0, 0, 0, 0])
    dilations, groups = attrs.get("dilations", [1, 1]), attrs.get("group", 1)
    out_h = (6 + pads[0] + pads[2] - dilations[0] * 2 - 1) // strides[0] + 1
    out_w = (5 + pads[1] + pads[3] - dilations[1] * 2 - 1) // strides[1] + 1
    shapes = {"data": [2, 4, 6, 5], "deformation": [2, 2 * 2 * 9, out_h, out_w],
              "filters": [6, 4 // groups, 3, 3]}
    node = helper.make_node("DeformableConv2D", list(shapes), ["out"], **attrs)
    model = _mmmodel([node], [vi(n, F32, s) for n, s in shapes.items()], [vi("out")], 11,
                   domain=MM)
    feeds = {"data": rng.standard_normal(shapes["data"]).astype(np.float32),
             "deformation": rng.uniform(-3, 3, shapes["deformation"]).astype(np.float32),
             "filters": rng.standard_normal(shapes["filters"]).astype(np.float32)}
    (expected,) = _openvino(model, feeds)
    result = rewrite_fully(model, "onnxruntime", plugins)
    (got,) = rewriter.session(result.model).run(None, feeds)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)
    torch_sampled = deform_conv2d(feeds["data"], feeds["deformation"], feeds["filters"],
                                  strides=strides, pads=pads, dilations=dilations,
                                  groups=groups, offset_groups=2)
    assert not np.allclose(got, torch_sampled, atol=1e-3)  # the border rule matters


def test_deformable_conv_2d_auto_pad_declined(plugins):
    node = helper.make_node("DeformableConv2D", ["data", "deformation", "filters"], ["out"],
                            auto_pad="SAME_UPPER")
    model = _mmmodel([node], [vi(n) for n in ("data", "deformation", "filters")],
                   [vi("out")], 11, domain=MM)
    with pytest.raises(UnfixableError, match="auto_pad"):
        rewrite_fully(model, "onnxruntime", plugins)


# -- NMSMatch ----------------------------------------------------------------------------


def _nms_match_oracle(boxes, scores, iou_thr, score_thr):
    """A direct transcription of mmdeploy's loop, one pair at a time, in float64."""
    rows = []
    for b in range(boxes.shape[0]):
        for k in range(scores.shape[1]):
            s = scores[b, k].astype(np.float64)
            order = sorted(range(len(s)), key=lambda i: (-s[i], i))
            alive = [True] * len(s)
            for r, i in enumerate(order):
                if not alive[i]:
                    continue
                hits = []
                for j in order[r + 1:]:
                    if not alive[j]:
                        continue
                    a, c = boxes[b, i].astype(np.float64), boxes[b, j].astype(np.float64)
                    w = max(0.0, min(a[2], c[2]) - max(a[0], c[0]))
                    h = max(0.0, min(a[3], c[3]) - max(a[1], c[1]))
                    union = ((a[2] - a[0]) * (a[3] - a[1]) + (c[2] - c[0]) * (c[3] - c[1])
                             - w * h)
                    if w * h / (union + 1e-10) >= iou_thr:
                        alive[j] = False
                        hits.append(j)
                if s[i] > score_thr:
                    rows += [(b, k, i, j) for j in hits]
    return np.array(rows, np.int64).reshape(-1, 4)


def _boxes(rng, batch, count):
    xy = rng.uniform(0, 30, (batch, count, 2))
    return np.concatenate([xy, xy + rng.uniform(5, 20, (batch, count, 2))], -1).astype(
        np.float32)


def test_nms_match(plugins):
    path = _corpus("mmdeploy_nms_match")
    model = onnx.load(str(path))
    result = rewrite_fully(model, "onnxruntime", plugins)
    sess = rewriter.session(result.model)
    rng = np.random.default_rng(70)
    total = 0
    for _ in range(5):
        boxes = _boxes(rng, 1, 5)
        scores = rng.uniform(0, 1, (1, 5, 5)).astype(np.float32)
        feeds = {"boxes": boxes, "scores": scores,
                 "mmdeploy::NMSMatch_2": np.array([0.2], np.float32),
                 "mmdeploy::NMSMatch_3": np.array([0.3], np.float32)}
        (got,) = sess.run(None, feeds)
        expected = _nms_match_oracle(boxes, scores, 0.2, 0.3)
        np.testing.assert_array_equal(got, expected)
        total += len(got)
    assert total > 0  # some boxes were matched


def test_nms_match_batches():
    from rewriter_custom_ops.mm_nms_match import nms_match

    rng = np.random.default_rng(71)
    boxes = _boxes(rng, 2, 12)
    scores = rng.uniform(0, 1, (2, 3, 12)).astype(np.float32)
    got = nms_match(boxes, scores, 0.1, 0.2)
    assert set(got[:, 0]) == {0, 1}
    np.testing.assert_array_equal(got, _nms_match_oracle(boxes, scores, 0.1, 0.2))


def test_corpus_nms_match_end_to_end(plugins):
    model = onnx.load(str(_corpus("mmdeploy_nms_match")))
    result = rewrite(model, ["onnxruntime"], plugins=plugins, confirm=False)
    assert result.report.ok, result.report.verification
    assert result.report.verification["compare"] == "ok"


# -- TRTBatchedNMS -----------------------------------------------------------------------

def test_batched_nms_kernel_by_hand():
    """Strict IoU and score thresholds, topk per class, ties, padding, index, clipping."""
    from rewriter_custom_ops.mm_batched_nms import batched_nms

    boxes = np.array([[[[0, 0, 2, 2]], [[0, 0, 2, 1]], [[1, 1, 3, 3]], [[4, 4, 1.5, 5]],
                       [[0, 1, 2, 2]]]], np.float32)
    # IoU(0, 1) = 0.5 (kept at threshold 0.5), IoU(0, 2) = 1/7, box 3 reversed
    scores = np.array([[[0.9, 0.2], [0.8, 0.2], [0.7, 0.3], [0.6, 0.25], [0.5, 0.1]]],
                      np.float32)
    dets, labels, index = batched_nms(
        boxes, scores, num_classes=2, background_label_id=-1, topk=4, keep_topk=8,
        score_threshold=0.2, iou_threshold=0.5, clip_boxes=0)
    # class 0: boxes 0..3 (topk 4; box 4 dropped), none suppressed; class 1: 2, 3 (> 0.2)
    np.testing.assert_array_equal(labels[0], [0, 0, 0, 0, 1, 1, -1, -1])
    np.testing.assert_array_equal(index[0], [0, 1, 2, 3, 2, 3, -1, -1])
    np.testing.assert_allclose(dets[0, :, 4], [0.9, 0.8, 0.7, 0.6, 0.3, 0.25, 0, 0])
    np.testing.assert_array_equal(dets[0, 3, :4], [4, 4, 1.5, 5])
    dets, labels, index = batched_nms(
        boxes, scores, num_classes=2, background_label_id=0, topk=0, keep_topk=3,
        score_threshold=0.0, iou_threshold=0.1, clip_boxes=1)
    # class 1 only: 2 (0.3), 3 (0.25), then 0 and 1 (0.2, equal: lower box first); 0 is
    # suppressed by 2 (IoU 1/7 > 0.1), so 1 (which only 0 overlapped) stays
    np.testing.assert_array_equal(labels[0], [1, 1, 1])
    np.testing.assert_array_equal(index[0], [2, 3, 1])
    np.testing.assert_allclose(dets[0, :, 4], [0.3, 0.25, 0.2])
    np.testing.assert_array_equal(dets[0, 0, :4], [1, 1, 1, 1])  # clipped to [0, 1]


def test_batched_nms_rewrite_verifies(plugins):
    """rewrite compares the decomposition with the kernel run by the reference evaluator."""
    attrs = dict(num_classes=3, background_label_id=-1, topk=-1, keep_topk=5,
                 score_threshold=0.05, iou_threshold=0.5, is_normalized=0, clip_boxes=0,
                 return_index=1)
    node = helper.make_node("TRTBatchedNMS", ["boxes", "scores"], ["dets", "labels", "index"],
                            domain=MM, **attrs)
    model = _mmmodel([node], [vi("boxes", F32, [1, 10, 1, 4]), vi("scores", F32, [1, 10, 3])],
                   [vi("dets", F32, [1, 5, 5]), vi("labels", TensorProto.INT64, [1, 5]),
                    vi("index", TensorProto.INT64, [1, 5])], 11)
    rng = np.random.default_rng(90)
    feeds = {"boxes": mmdeploy.samples.random_nms_boxes(rng, (1, 10, 1, 4)).astype(np.float32),
             "scores": mmdeploy.samples.random_nms_scores(rng, (1, 10, 3)).astype(np.float32)}
    result = rewrite(model, ["onnxruntime"], plugins=plugins, confirm=False,
                     compare_options={"inputs": feeds})
    assert result.report.ok, result.report.verification
    assert result.report.verification["compare"] == "ok"
    assert [a["kind"] for a in result.report.as_dict()["applied"]] == ["decomposition"]


def test_batched_nms_negative_threshold_runs_the_kernel(plugins):
    """A negative score threshold has no decomposition (the plugin ranks kept negative
    scores below its empty slots, and skips NMS in a class whose best slot is empty): the
    kernel follows the plugin's arrays, under onnxruntime."""
    node = helper.make_node("TRTBatchedNMS", ["boxes", "scores"], ["dets", "labels", "index"],
                            domain=MM, num_classes=1, background_label_id=-1, keep_topk=4, topk=3,
                            score_threshold=-0.5, iou_threshold=0.5, return_index=1)
    model = _mmmodel([node], [vi("boxes", F32, [1, 3, 1, 4]), vi("scores", F32, [1, 3, 1])],
                   [vi("dets"), vi("labels", TensorProto.INT64),
                    vi("index", TensorProto.INT64)], 11)
    result = rewrite_fully(model, "onnxruntime", plugins)
    assert result.model.graph.node[0].domain == "ai.onnx.contrib"
    boxes = np.tile(np.array([0, 0, 1, 1], np.float32), (1, 3, 1, 1))  # identical boxes
    scores = np.array([[[-0.1], [-0.2], [-0.9]]], np.float32)  # -0.9 is no candidate
    dets, labels, index = rewriter.session(result.model).run(
        None, {"boxes": boxes, "scores": scores})
    np.testing.assert_array_equal(labels, [[-1, 0, 0, -1]])
    np.testing.assert_array_equal(index, [[-1, 0, 1, -1]])
    np.testing.assert_allclose(dets[0, :, 4], [0, -0.1, -0.2, 0])


# -- ExperimentalDetectronDetectionOutput (OpenVINO as the oracle) -------------------------


def _detection_inputs(rng, rois=16, classes=2):
    xy = rng.uniform(0, 50, (rois, 2))
    boxes = np.concatenate([xy, xy + rng.uniform(-5, 40, (rois, 2))], 1)  # some empty
    deltas = rng.normal(0, 1, (rois, 4 * classes))
    deltas[:, 2::4] *= 3  # some log sizes beyond max_delta_log_wh
    scores = rng.uniform(0, 1, (rois, classes))
    scores[::2] = np.round(scores[::2] * 4) / 4  # equal scores
    return {"rois": boxes.astype(np.float32), "deltas": deltas.astype(np.float32),
            "scores": scores.astype(np.float32),
            "im_info": np.array([[100, 100, 1]], np.float32)}


def _check_detections(got, expected):
    np.testing.assert_array_equal(got[1], expected[1])  # classes
    np.testing.assert_array_equal(got[2], expected[2])  # scores
    np.testing.assert_allclose(got[0], expected[0], rtol=1e-5, atol=1e-4)


def test_corpus_detectron_detection_output(plugins):
    """The corpus model (2 classes, 5 detections of 16 rois: the sorted path) against
    OpenVINO, through rewrite's own comparison and then on several inputs."""
    path = _corpus("ov_experimental_detectron_detection_output")
    rng = np.random.default_rng(100)
    feeds = _detection_inputs(rng)
    expected = _openvino(onnx.load(str(path)), feeds)
    result = rewrite(onnx.load(str(path)), ["onnxruntime"], plugins=plugins, confirm=False,
                     compare_options={"inputs": feeds, "expected": {
                         "out1": expected[0], "out2": expected[1].astype(np.int64),
                         "out3": expected[2]}})
    assert result.report.verification["compare"] == "ok", result.report.verification
    sess = rewriter.session(result.model)
    for _ in range(6):
        feeds = _detection_inputs(rng)
        _check_detections(sess.run(None, feeds), _openvino(onnx.load(str(path)), feeds))


def test_detectron_detection_output_unsorted_path_matches_openvino(plugins):
    """Three classes, at most 2 per class, room for all: detections stay in class order;
    defaults for the other attributes."""
    node = helper.make_node("ExperimentalDetectronDetectionOutput",
                            ["rois", "deltas", "scores", "im_info"], ["boxes", "classes",
                                                                      "scores_out"],
                            domain="org.openvinotoolkit", num_classes=3, post_nms_count=2,
                            max_detections_per_image=12, nms_threshold=0.3,
                            deltas_weights=[1.0, 2.0, 3.0, 4.0])
    model = _mmmodel([node], [vi("rois", F32, [10, 4]), vi("deltas", F32, [10, 12]),
                            vi("scores", F32, [10, 3]), vi("im_info", F32, [1, 3])],
                   [vi("boxes", F32, [12, 4]), vi("classes", TensorProto.INT64, [12]),
                    vi("scores_out", F32, [12])], 11, domain="org.openvinotoolkit")
    sess = rewriter.session(rewrite_fully(model, "onnxruntime", plugins).model)
    rng = np.random.default_rng(101)
    unsorted = 0
    for _ in range(6):
        feeds = _detection_inputs(rng, rois=10, classes=3)
        got = sess.run(None, feeds)
        _check_detections(got, _openvino(model, feeds))
        assert 0 < (got[2] > 0).sum() <= 4
        unsorted += bool((np.diff(got[2]) > 0).any())
    assert unsorted  # class order, not score order
