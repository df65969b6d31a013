"""The ``pytorch`` plugin beyond its samples: the aten fallbacks (``ATen``,
``org.pytorch.aten``, ``com.microsoft::ATen``/``ATenOp``) decomposed and checked against
torch's own operators on the plugin's samples are in ``tests/test_oracles.py``; here:
declines, the kernel fallbacks, If branches, a real torch export, the numpy kernels against
torch, caffe2's GenerateProposals kernel against a loop-by-loop numpy oracle of caffe2's
algorithm (dynamic shapes too), the four corpus models.
"""

from __future__ import annotations

import functools
import json
import math
import re

import numpy as np
import pytest
from onnx import TensorProto, helper, load

import rewriter
from rewriter import testing
from rewriter.api import rewrite
from rewriter.errors import UnfixableError
from rewriter.plugin import Declined, DecompositionContext
from rewriter.testing import run_onnxruntime as run_ort
from rewriter.testing import value_info as vi
from tests.conftest import CORPUS

ort = pytest.importorskip("onnxruntime")
torch = pytest.importorskip("torch")
F = torch.nn.functional

F32, F16, F64 = TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE
I64 = TensorProto.INT64
NP = {F32: np.float32, F16: np.float16, F64: np.float64}
TOL = {F32: dict(rtol=1e-4, atol=1e-5), F16: dict(rtol=1e-2, atol=2e-3),
       F64: dict(rtol=1e-7, atol=1e-8)}
MS, ATEN, CAFFE2 = "com.microsoft", "org.pytorch.aten", "org.pytorch._caffe2"


# a model importing ai.onnx 13, com.microsoft and org.pytorch.aten (nodes may sit in subgraphs)
_pt_model = functools.partial(testing.make_model, opset=13, domains=[MS, ATEN], ir_version=8)


def _declines(model, plugins):
    with pytest.raises(UnfixableError):
        rewrite(model, ["onnxruntime"], plugins=plugins, confirm=False, verify=False)


def _torch(fn, *args, **kwargs):
    """``fn`` on torch tensors made from the numpy arrays among ``args``."""
    args = [torch.from_numpy(a) if isinstance(a, np.ndarray) else a for a in args]
    return fn(*args, **kwargs).numpy()


def _expect(got, expected, elem):
    assert got.dtype == np.dtype(NP[elem])
    assert got.shape == expected.shape
    np.testing.assert_allclose(got.astype(np.float64), expected.astype(np.float64), **TOL[elem])


def _rand(rng, shape, elem, scale=2.0):
    return (rng.standard_normal(shape) * scale).astype(NP[elem])


def _aten(inputs, output="Y", **attrs):
    return helper.make_node("ATen", inputs, [output], **attrs)


# -- layer_norm / group_norm -------------------------------------------------------------


def test_double_gelu_runs_the_kernel_on_onnxruntime(plugins):
    """onnxruntime has no double Erf: for it, the body is refused and the numpy kernel runs
    the node."""
    x = _rand(np.random.default_rng(6), [3, 8], F64, 3.0)
    model = _pt_model([_aten(["X"], operator="gelu")], [vi("X", F64)], [vi("Y", F64)], opset=9)
    result = rewrite(model, ["onnxruntime"], plugins=plugins, confirm=False, verify=False)
    assert result.model.graph.node[0].domain == "ai.onnx.contrib"
    (got,) = rewriter.session(result.model, plugins=plugins).run(None, {"X": x})
    _expect(got, _torch(F.gelu, x), F64)


# -- declines ----------------------------------------------------------------------------


@pytest.mark.parametrize("node,opset", [
    (_aten(["X"], operator="im2col", kernel_size=[2, 2]), 13),  # unknown operator
    (_aten(["X"], operator="roll", shifts=[1, 2], dims=[0]), 13),  # shifts/dims mismatch
    (_aten(["X"], operator="cumsum", dim=-1), 9),  # CumSum-less opset, rank unknown
    (_aten(["X"], operator="silu", inplace=1), 13),  # an argument silu does not have
    (_aten(["X"], operator="gelu", overload_name="out"), 13),  # an unknown overload
    (_aten(["X"], operator="gelu", approximate="erf"), 13),  # an unknown mode
    (_aten(["X"], operator="gelu"), 8),  # no Erf before opset 9
    (_aten(["X"], operator="adaptive_avg_pool2d", output_size=[2, 2]), 10),  # Slice inputs
    (_aten(["X", "X"], operator="silu"), 13),  # more tensors than the schema has
    (_aten(["X"], operator="layer_norm", normalized_shape=[4], eps="x"), 13),  # a bad type
])
def test_builder_declines(node, opset):
    from rewriter_plugins.pytorch import build_aten

    ctx = DecompositionContext(node, opset, {"": opset}, ["tensor(float)"] * len(node.input))
    with pytest.raises(Declined) as declined:
        build_aten(ctx)
    assert str(declined.value)  # a reason --explain shows


def test_builder_accepts_what_it_declines_elsewhere():
    """The same builder builds the plain forms of the declined nodes above."""
    from rewriter_plugins.pytorch import build_aten

    for node, opset in [(_aten(["X"], operator="gelu"), 9), (_aten(["X"], operator="silu"), 13)]:
        ctx = DecompositionContext(node, opset, {"": opset}, ["tensor(float)"])
        assert build_aten(ctx) is not None


def test_unknown_operator_has_no_remedy(plugins):
    """im2col has no body, and the ATen kernel's accepts() declines it at planning."""
    node = _aten(["X"], operator="im2col")
    model = _pt_model([node], [vi("X", F32, [1, 2, 4, 4])], [vi("Y", F32)])
    result = rewrite(model, ["onnxruntime"], plugins=plugins, confirm=False, verify=False,
                     explain=True)
    assert result.report.remaining
    (explained,) = result.report.explain
    why = {c["kind"]: c["why"] for c in explained["candidates"] if c["plugin"] == "pytorch"}
    assert "aten::im2col has no numpy kernel" in why["kernel"]
    assert why["decomposition"].startswith("no ATen schema of the operator takes these")


def test_computed_output_size_runs_the_kernel(plugins):
    """org.pytorch.aten with a computed output size: the body needs the size when built, so
    it declines and the numpy kernel runs the node."""
    node = helper.make_node("adaptive_avg_pool2d", ["X", "S"], ["Y"], domain=ATEN)
    model = _pt_model([node], [vi("X", F32, [1, 2, 5, 4]), vi("S", TensorProto.INT64, [2])],
                   [vi("Y", F32)])
    result = rewrite(model, ["onnxruntime"], plugins=plugins, confirm=False, verify=False)
    assert result.model.graph.node[0].domain == "ai.onnx.contrib"
    x = _rand(np.random.default_rng(15), [1, 2, 5, 4], F32)
    size = np.array([3, 3], np.int64)
    (got,) = rewriter.session(result.model, plugins=plugins).run(None, {"X": x, "S": size})
    _expect(got, _torch(F.adaptive_avg_pool2d, x, (3, 3)), F32)


# -- inside an If branch -----------------------------------------------------------------


def test_layer_norm_inside_if(plugins):
    rng = np.random.default_rng(9)
    x, w = _rand(rng, [2, 3, 6], F32), _rand(rng, [6], F32)
    ln = _aten(["X", "W"], output="inner", operator="layer_norm", normalized_shape=[6],
               eps=1e-5)
    then_branch = helper.make_graph([ln], "then", [], [vi("inner", F32)])
    else_branch = helper.make_graph([helper.make_node("Identity", ["X"], ["other"])], "else",
                                    [], [vi("other", F32)])
    node = helper.make_node("If", ["C"], ["Y"], then_branch=then_branch,
                            else_branch=else_branch)
    model = _pt_model([node], [vi("C", TensorProto.BOOL, []), vi("X", F32, [2, 3, 6]),
                            vi("W", F32, [6])], [vi("Y", F32)], opset=11)
    out = testing.rewritten(model, "onnxruntime", plugins, standard_only=True)
    (got,) = run_ort(out, {"C": np.array(True), "X": x, "W": w})
    _expect(got, _torch(F.layer_norm, x, (6,), w), F32)
    (other,) = run_ort(out, {"C": np.array(False), "X": x, "W": w})
    np.testing.assert_array_equal(other, x)


# -- numpy kernels (the reference evaluator's oracle for the originals) -------------------


def test_aten_kernels_against_torch():
    from rewriter_custom_ops import aten_fallback as k

    rng = np.random.default_rng(10)
    x, w, b = _rand(rng, [2, 4, 6], F32), _rand(rng, [6], F32), _rand(rng, [6], F32)
    np.testing.assert_allclose(
        k.aten(x, w, b, operator="layer_norm", overload_name="", eps=1e-5, cudnn_enable=1,
               cudnn_enabled=1, num_groups=k._UNSET, padding_idx=-1, scale_grad_by_freq=0,
               sparse=0, approximate="none", dim=k._UNSET),
        _torch(F.layer_norm, x, (6,), w, b), rtol=1e-5, atol=1e-5)
    gw = _rand(rng, [4], F32)
    np.testing.assert_allclose(k.group_norm(x, 2, gw, gw), F.group_norm(
        torch.from_numpy(x), 2, torch.from_numpy(gw), torch.from_numpy(gw)).numpy(),
        rtol=1e-5, atol=1e-5)
    img = _rand(rng, [2, 3, 5, 7], F32)
    np.testing.assert_allclose(k.adaptive_avg_pool2d(img, np.array([3, 4], np.int64)),
                               F.adaptive_avg_pool2d(torch.from_numpy(img), (3, 4)).numpy(),
                               rtol=1e-5, atol=1e-6)
    for approximate in ("none", "tanh"):
        np.testing.assert_allclose(k.gelu(x, approximate), F.gelu(
            torch.from_numpy(x), approximate=approximate).numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(k.silu(x), F.silu(torch.from_numpy(x)).numpy(), rtol=1e-5,
                               atol=1e-6)
    idx = np.array([[1, 0], [3, 3]], np.int64)
    json_args = json.dumps({"padding_idx": -1, "scale_grad_by_freq": False, "sparse": False})
    np.testing.assert_array_equal(
        k.atenop(x[0], idx, name="aten::embedding", custom_attributes_json=json_args),
        F.embedding(torch.from_numpy(idx), torch.from_numpy(x[0])).numpy())
    with pytest.raises(NotImplementedError, match="im2col"):
        k.run("im2col", [x], {})


# -- caffe2 GenerateProposals ------------------------------------------------------------


def _proposals_oracle(scores, deltas, im_info, anchors, spatial_scale, pre, post, thresh,
                      min_size, plus_one):
    """caffe2's documented algorithm, box by box (float64; an independent numpy oracle)."""
    n, a_count, height, width = scores.shape
    stride = 1.0 / spatial_scale
    clip = math.log(1000.0 / 16.0)
    rois, probs = [], []
    for img in range(n):
        cands = []
        for h in range(height):
            for w in range(width):
                for a in range(a_count):
                    anchor = anchors[a] + np.array([w, h, w, h]) * stride
                    d = deltas[img, a * 4:(a + 1) * 4, h, w]
                    cands.append((float(scores[img, a, h, w]), anchor, d))
        order = sorted(range(len(cands)), key=lambda i: -cands[i][0])  # stable on ties
        if 0 < pre < len(order):
            order = order[:pre]
        im_h, im_w, scale = (float(v) for v in im_info[img])
        boxes = []
        for i in order:
            score, (x1, y1, x2, y2), (dx, dy, dw, dh) = cands[i]
            bw, bh = x2 - x1 + plus_one, y2 - y1 + plus_one
            cx, cy = x1 + 0.5 * bw + dx * bw, y1 + 0.5 * bh + dy * bh
            pw, ph = math.exp(min(dw, clip)) * bw, math.exp(min(dh, clip)) * bh
            box = [cx - 0.5 * pw, cy - 0.5 * ph, cx + 0.5 * pw - plus_one,
                   cy + 0.5 * ph - plus_one]
            box = [max(min(v, (int(im_w) if k % 2 == 0 else int(im_h)) - plus_one), 0)
                   for k, v in enumerate(box)]
            sw, sh = box[2] - box[0] + plus_one, box[3] - box[1] + plus_one
            if (sw >= min_size * scale and sh >= min_size * scale
                    and box[0] + sw / 2 < im_w and box[1] + sh / 2 < im_h):
                boxes.append((score, box))
        kept = []
        for score, box in boxes:
            if 0 < post <= len(kept):
                break
            area = (box[2] - box[0] + plus_one) * (box[3] - box[1] + plus_one)
            suppressed = False
            for _, other in kept:
                iw = max(min(box[2], other[2]) - max(box[0], other[0]) + plus_one, 0)
                ih = max(min(box[3], other[3]) - max(box[1], other[1]) + plus_one, 0)
                o_area = (other[2] - other[0] + plus_one) * (other[3] - other[1] + plus_one)
                if iw * ih / (area + o_area - iw * ih) > thresh:
                    suppressed = True
                    break
            if not suppressed:
                kept.append((score, box))
        rois += [[img, *box] for _, box in kept]
        probs += [score for score, _ in kept]
    return np.array(rois, np.float64).reshape(-1, 5), np.array(probs, np.float64)


def _proposal_inputs(rng, n=2, a=3, h=6, w=5):
    scores = rng.uniform(0, 1, [n, a, h, w]).astype(np.float32)
    deltas = (rng.standard_normal([n, 4 * a, h, w]) * 0.3).astype(np.float32)
    im_info = np.array([[40, 48, 1.0], [37.5, 30.7, 0.5]], np.float32)[:n]
    anchors = np.array([[-4, -4, 11, 11], [-10, -2, 17, 9], [0, 0, 7, 23]], np.float32)[:a]
    return scores, deltas, im_info, anchors


@pytest.mark.parametrize("pre,post,thresh,plus_one", [
    (6000, 300, 0.7, 1), (40, 12, 0.5, 1), (0, 0, 0.6, 0), (25, 5, 0.3, 0),
])
def test_generate_proposals_kernel(plugins, pre, post, thresh, plus_one):
    """``prefer="kernel"``: the Python kernel, run on onnxruntime (via
    onnxruntime-extensions)."""
    feeds = dict(zip("sdia", _proposal_inputs(np.random.default_rng(11))))
    attrs = dict(spatial_scale=0.25, pre_nms_topN=pre, post_nms_topN=post, nms_thresh=thresh,
                 min_size=3.0, legacy_plus_one=plus_one)
    node = helper.make_node("GenerateProposals", list("sdia"), ["rois", "probs"],
                            domain=CAFFE2, **attrs)
    model = _pt_model([node], [vi(k, F32, v.shape) for k, v in feeds.items()],
                   [vi("rois", F32), vi("probs", F32)], opset=9, domains=(CAFFE2,))
    result = rewrite(model, ["onnxruntime"], plugins=plugins, confirm=False, verify=False,
                     prefer="kernel")
    assert not result.report.remaining
    assert result.model.graph.node[0].domain == "ai.onnx.contrib"
    rois, probs = rewriter.session(result.model, plugins=plugins).run(None, feeds)
    expected_rois, expected_probs = _proposals_oracle(
        *feeds.values(), 0.25, pre, post, thresh, 3.0, plus_one)
    assert len(expected_probs) > 3  # the case exercises NMS, not an empty result
    assert rois.shape == expected_rois.shape
    np.testing.assert_allclose(rois, expected_rois, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(probs, expected_probs, rtol=0, atol=0)


def test_generate_proposals_rotated_is_refused():
    from rewriter_custom_ops.caffe2_generate_proposals import generate_proposals

    s, d, i, _ = _proposal_inputs(np.random.default_rng(12), a=1)
    with pytest.raises(NotImplementedError, match="upright"):
        generate_proposals(s, np.zeros([2, 5, 6, 5], np.float32), i, np.zeros([1, 5], np.float32))
    assert d.shape[1] == 4


# -- corpus ------------------------------------------------------------------------------


def _corpus(name):
    path = CORPUS / f"{name}.onnx"
    if not path.is_file():
        pytest.skip(f"corpus model {path} is absent")
    return load(path)


def test_corpus_models(plugins):
    """The four corpus models rewrite for onnxruntime and run; compare (one worker for all)
    is ok where the original can be evaluated. The OpenVINO model imports neither
    org.pytorch.aten nor ai.onnx, so compare cannot load the original: torch checks it."""
    layer_norm = _corpus("pt_aten_layer_norm_fallback")
    embedding = _corpus("pt_com_microsoft_atenop_embedding")
    pool = _corpus("ov_aten_adaptive_avg_pool2d")
    proposals = _corpus("pt_caffe2_generate_proposals")
    results = {}
    for name, model, options in [
        ("layer_norm", layer_norm, None),
        ("embedding", embedding, {"dims": {"input_2_dim_1": 8}}),  # the Add needs width 8
        ("pool", pool, None), ("proposals", proposals, None),
    ]:
        results[name] = result = rewrite(model, ["onnxruntime"], plugins=plugins,
                                         confirm=False, compare_options=options)
        assert not result.report.remaining, name
    # (the pool model imports no org.pytorch.aten opset: compare adds it to run the original)
    for name in ("layer_norm", "embedding", "pool", "proposals"):
        assert results[name].report.verification["compare"] == "ok", name
    # GenerateProposals is decomposed (opset 9: TopK-1 with the static candidate count)
    assert {n.domain for n in results["proposals"].model.graph.node} <= {"", "ai.onnx"}
    assert max(o.version for o in results["layer_norm"].model.opset_import
               if o.domain in ("", "ai.onnx")) == 9

    x = _rand(np.random.default_rng(13), [1, 1, 4, 4], F32)
    (got,) = run_ort(results["pool"].model, {"x": x})
    _expect(got, F.adaptive_avg_pool2d(torch.from_numpy(x), (2, 2)).numpy(), F32)

    attrs = {a.name: helper.get_attribute_value(a) for a in proposals.graph.node[0].attribute}
    rng = np.random.default_rng(14)
    scores = rng.uniform(0, 1, [3, 4, 10, 8]).astype(np.float32)
    deltas = (rng.standard_normal([3, 16, 10, 8]) * 0.2).astype(np.float32)
    im_info = np.array([[20, 16, 0.05], [18, 15, 0.1], [20, 16, 0.02]], np.float32)
    anchors = np.array([[-2, -2, 2, 2], [-4, -1, 4, 1], [0, 0, 3, 6], [-1, -1, 1, 1]],
                       np.float32)
    feeds = {"0": scores, "1": deltas, "2": im_info, "3": anchors}
    rois, probs = rewriter.session(results["proposals"].model, plugins=plugins).run(None, feeds)
    expected_rois, expected_probs = _proposals_oracle(
        scores, deltas, im_info, anchors, attrs["spatial_scale"], attrs["pre_nms_topN"],
        attrs["post_nms_topN"], attrs["nms_thresh"], attrs["min_size"],
        attrs["legacy_plus_one"])
    assert len(expected_probs) > 3
    np.testing.assert_allclose(rois, expected_rois, rtol=1e-5, atol=1e-4)
    np.testing.assert_array_equal(probs, expected_probs.astype(np.float32))


def test_torch_aten_fallback_export(plugins):
    """A real ``ONNX_ATEN_FALLBACK`` export at opset 9 rewrites and matches torch."""
    import io
    import warnings

    class Model(torch.nn.Module):
        def forward(self, x):
            return (F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=True),
                    F.interpolate(x, size=(5, 7), mode="bicubic", align_corners=False),
                    torch.cumsum(x, 1), torch.tril(x, -1), torch.flip(x, (1, 3)))

    buffer = io.BytesIO()
    x = torch.randn(1, 2, 3, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(Model(), (x,), buffer, opset_version=9, dynamo=False,
                          operator_export_type=torch.onnx.OperatorExportTypes.ONNX_ATEN_FALLBACK)
    model = load(io.BytesIO(buffer.getvalue()))
    assert {n.domain for n in model.graph.node} >= {ATEN}
    decomposed = testing.rewritten(model, "onnxruntime", plugins, standard_only=True)
    got = run_ort(decomposed, {model.graph.input[0].name: x.numpy()})
    for value, expected in zip(got, Model()(x)):
        np.testing.assert_allclose(value, expected.numpy(), rtol=1e-5, atol=1e-5)


# -- kernels with list attributes (the reference evaluator's oracle for originals) ---------


@pytest.mark.parametrize("node,feeds,expected", [
    (_aten(["X"], operator="layer_norm", normalized_shape=[3, 4]),
     {"X": np.arange(24, dtype=np.float32).reshape(2, 3, 4) ** 1.5},
     lambda x: F.layer_norm(torch.from_numpy(x), (3, 4)).numpy()),
    (_aten(["X"], operator="roll", shifts=[2, -1], dims=[0, 2]),
     {"X": np.arange(24, dtype=np.float32).reshape(2, 3, 4)},
     lambda x: torch.roll(torch.from_numpy(x), (2, -1), (0, 2)).numpy()),
    (_aten(["X"], operator="cumsum", dim=1), {"X": np.arange(12, dtype=np.int64).reshape(3, 4)},
     lambda x: torch.cumsum(torch.from_numpy(x), 1).numpy()),
])
def test_aten_kernel_list_attributes(plugins, node, feeds, expected):
    """``prefer="kernel"``: the numpy ATen kernel receives normalized_shape, shifts/dims."""
    elem = I64 if feeds["X"].dtype == np.int64 else F32
    model = _pt_model([node], [vi("X", elem, feeds["X"].shape)], [vi("Y", elem)], opset=13)
    result = rewrite(model, ["onnxruntime"], plugins=plugins, confirm=False, verify=False,
                     prefer="kernel")
    assert result.model.graph.node[0].domain == "ai.onnx.contrib"
    (got,) = rewriter.session(result.model, plugins=plugins).run(None, feeds)
    np.testing.assert_allclose(got, expected(feeds["X"]), rtol=1e-5, atol=1e-5)


# -- caffe2 GenerateProposals, decomposed --------------------------------------------------


@pytest.mark.parametrize("opset,pre,post,thresh,plus_one,static", [
    (10, 40, 12, 0.5, 1, False), (13, 0, 0, 0.6, 0, False),
])
def test_generate_proposals_decomposed(plugins, opset, pre, post, thresh, plus_one, static):
    """Undeclared image sizes (the samples of tests/test_oracles.py declare them): TopK, the
    box transform, clip, filter and a greedy-NMS Loop in standard ops, on onnxruntime,
    against the loop-by-loop oracle and the numpy kernel (probabilities equal; boxes to
    float32 rounding of Exp)."""
    from rewriter_custom_ops.caffe2_generate_proposals import generate_proposals

    feeds = dict(zip("sdia", _proposal_inputs(np.random.default_rng(30 + opset))))
    attrs = dict(spatial_scale=0.25, pre_nms_topN=pre, post_nms_topN=post, nms_thresh=thresh,
                 min_size=3.0, legacy_plus_one=plus_one)
    node = helper.make_node("GenerateProposals", list("sdia"), ["rois", "probs"],
                            domain=CAFFE2, **attrs)
    shapes = {k: list(v.shape) if static or k == "a" else None for k, v in feeds.items()}
    model = _pt_model([node], [vi(k, F32, shapes[k]) for k in feeds],
                   [vi("rois", F32), vi("probs", F32)], opset=opset, domains=(CAFFE2,))
    rewritten = testing.rewritten(model, "onnxruntime", plugins, standard_only=True)
    assert "Loop" in {n.op_type for n in rewritten.graph.node}
    rois, probs = run_ort(rewritten, feeds)
    expected_rois, expected_probs = _proposals_oracle(
        *feeds.values(), 0.25, pre, post, thresh, 3.0, plus_one)
    assert len(expected_probs) > 3
    assert rois.shape == expected_rois.shape
    np.testing.assert_allclose(rois, expected_rois, rtol=1e-5, atol=1e-4)
    np.testing.assert_array_equal(probs, expected_probs.astype(np.float32))
    kernel_rois, kernel_probs = generate_proposals(*feeds.values(), **attrs)
    np.testing.assert_allclose(rois, kernel_rois, rtol=1e-6, atol=1e-5)
    np.testing.assert_array_equal(probs, kernel_probs)


def test_generate_proposals_single_output_and_declines(plugins):
    """Only rois used: a one-output body. Declined: rotated anchors, an unknown attribute,
    opset 9 with an unknown candidate count (TopK's k is an attribute there; the numpy kernel
    runs instead)."""
    from rewriter_plugins.pytorch import build_generate_proposals

    def ctx(node, opset, anchors=(3, 4), scores=(2, 3, 6, 5)):
        declared = {"a": helper.make_tensor_type_proto(F32, anchors),
                    "s": helper.make_tensor_type_proto(F32, scores)}
        return DecompositionContext(node, opset, {"": opset, CAFFE2: 1},
                                    ["tensor(float)"] * 4, declared=declared)

    node = helper.make_node("GenerateProposals", list("sdia"), ["rois"], domain=CAFFE2)
    assert list(build_generate_proposals(ctx(node, 11)).output) == ["out0"]
    odd = helper.make_node("GenerateProposals", list("sdia"), ["rois"], domain=CAFFE2, foo=1)
    for declined_ctx, reason in ((ctx(node, 11, anchors=(3, 5)), "anchors declared (A, 4)"),
                                 (ctx(node, 11, anchors=None), "anchors declared (A, 4)"),
                                 (ctx(odd, 11), "unknown attribute(s) foo"),
                                 (ctx(node, 9, scores=("n", 3, "h", "w")),
                                  "the candidate count must be declared")):
        with pytest.raises(Declined, match=re.escape(reason)):
            build_generate_proposals(declined_ctx)
    assert build_generate_proposals(ctx(node, 10, scores=("n", 3, "h", "w"))) is not None
