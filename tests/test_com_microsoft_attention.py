"""The com.microsoft attention family (``rewriter_plugins.com_microsoft.attention``) beyond
its samples: every decomposition against its oracle (onnxruntime's CPU contrib kernels, or
numpy where onnxruntime has none) on the samples the plugin registers, at ai.onnx opsets 12
and 17, is in ``tests/test_oracles.py``. Here: the numpy oracles themselves, declines, a
known mask rank, nodes inside If branches, the corpus models.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
from onnx import ModelProto, TensorProto, helper, load, numpy_helper
from onnx.checker import check_model
from rewriter_plugins.com_microsoft.attention import kernels, samples
from rewriter_plugins.com_microsoft.attention.kernels import (
    attention_reference,
    remove_padding_kernel,
    restore_padding_kernel,
)

from rewriter import testing
from rewriter import testing as oracle_check
from rewriter.api import rewrite
from rewriter.errors import UnfixableError
from rewriter.manager import load_plugins
from rewriter.testing import run_onnxruntime as run_ort
from rewriter.testing import value_info as vi
from tests.conftest import CORPUS

ort = pytest.importorskip("onnxruntime")

MS = "com.microsoft"
F32, I32 = TensorProto.FLOAT, TensorProto.INT32
TOL = dict(rtol=1e-4, atol=1e-5)
N = samples.N


@pytest.fixture(scope="module")
def plugins():
    return load_plugins(autoload=False)


# a model importing ai.onnx 17 and com.microsoft (its nodes may sit in subgraphs)
_ms_model = functools.partial(testing.make_model, opset=17, domains=[MS])


def _sample(plugins, op_type, sample, dtype="float"):
    """The plugin's own sample as a one-node model and its feeds (inputs x0, x1, ...)."""
    (entry,) = [e for e in plugins.registry.decompositions
                if e.domain == MS and e.op_type == op_type]
    check = oracle_check.build(entry, sample, dtype)
    return check.model, check.feeds[0]


def _rand(rng, shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def _check(model, plugins, feeds, expected=None):
    """Rewrite, run, compare with ``expected`` (default: onnxruntime on the original)."""
    if expected is None:
        expected = run_ort(model, feeds)
    got = run_ort(testing.rewritten(model, "reference", plugins, standard_only=True), feeds)
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert g.shape == np.shape(e)
        np.testing.assert_allclose(g.astype(np.float64), np.asarray(e, np.float64), **TOL)


# -- Attention ------------------------------------------------------------------------------


def test_attention_known_mask_rank(plugins):
    """A declared mask shape skips the run-time rank dispatch (no If in the result)."""
    model, feeds = _sample(plugins, "Attention", samples._attention_sample("mask-2d", 17))
    mask = feeds.pop("x3")
    mask[1] = [1, 0, 1, 1]  # a fully masked row is float32 rounding against float64
    model.graph.initializer.append(numpy_helper.from_array(mask, "x3"))
    del model.graph.input[3]
    decomposed = testing.rewritten(model, "reference", plugins, standard_only=True)
    assert "If" not in {n.op_type for n in decomposed.graph.node}
    expected = [attention_reference(feeds["x0"], feeds["x1"], feeds["x2"], mask,
                                    num_heads=N)[0]]
    _check(model, plugins, feeds, expected)


def test_attention_reference_matches_onnxruntime(plugins):
    """The numpy oracle itself agrees with onnxruntime's kernel (2-D mask, past, causal:
    future keys out of the softmax)."""
    model, feeds = _sample(plugins, "Attention",
                           samples._attention_sample("past-causal-mask-2d", 17))
    feeds["x3"][1, :3] = 1  # no fully masked row (its float32 scores lose ~1e-3 near -1e4)
    feeds["x3"][0, :2] = [0, 1]  # query 0 sees keys 0..3: key 0 masked, 1..3 in the past
    expected = run_ort(model, feeds)
    got = attention_reference(feeds["x0"], feeds["x1"], feeds["x2"], feeds["x3"],
                              num_heads=N, unidirectional=1, past=feeds["x4"])
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, **TOL)


@pytest.mark.parametrize("batch,seq,past,causal", [(1, 3, 2, 0), (2, 1, 2, 1), (1, 3, 0, 1)])
def test_attention_numpy_kernel_with_megatron_mask_matches_onnxruntime(batch, seq, past,
                                                                      causal):
    """The numpy kernel the rewrite's oracle runs for an Attention onnxruntime's CPU kernel
    refuses (Megatron's 4-D mask) agrees with onnxruntime's own kernel on the rows and
    columns its CUDA kernel reads (a 3-D mask), with a past state and without."""
    rng = np.random.default_rng(batch * 100 + seq * 10 + past)
    x, weights = _rand(rng, [batch, seq, 8]), _rand(rng, [8, 24], scale=0.5)
    bias, cache = _rand(rng, [24]), _rand(rng, [2, batch, N, past, 4])
    mask = np.tril(np.ones((16, 16), np.int32))[None, None].repeat(batch, 0)
    mask[..., 0] = rng.integers(0, 2, (batch, 1, 16))  # key 0 masked on some rows
    mask[..., past + seq - 1, past + seq - 1] = 1
    attrs = {"num_heads": N, "unidirectional": causal}
    expected = kernels.megatron_attention_oracle(x, weights, bias, mask, cache, **attrs)
    got = kernels.attention_kernel.fn(x, weights, bias, mask, cache, **attrs)
    for g, e in zip(got, expected, strict=True):
        np.testing.assert_allclose(g, e, **TOL)


@pytest.mark.parametrize("attrs", [dict(do_rotary=1), dict(past_present_share_buffer=1)])
def test_attention_declines(plugins, attrs):
    node = helper.make_node("Attention", ["x", "w"], ["y"], domain=MS, num_heads=2, **attrs)
    model = _ms_model([node], [vi("x", F32, [1, 2, 4]), vi("w", F32, [4, 12])], [vi("y", F32)])
    with pytest.raises(UnfixableError):
        rewrite(model, ["reference"], plugins=plugins, confirm=False, verify=False)


@pytest.mark.parametrize("inputs,shapes", [
    (["q", "", "", "bias"], [[1, 2, 2, 3, 4], [24]]),  # packed QKV with a bias
    (["q", "k", "v"], [[1, 2, 8], [1, 2, 5, 4], [1, 2, 8]]),  # BNSH key, 3-D value
], ids=["packed-qkv-bias", "mixed-ranks"])
def test_multi_head_attention_forms_it_declines(plugins, inputs, shapes):
    """Packed QKV with a bias (no producer writes it, no CPU kernel to check it) and key /
    value of different layouts: declined."""
    node = helper.make_node("MultiHeadAttention", inputs, ["y"], domain=MS, num_heads=2)
    names = [n for n in inputs if n]
    model = _ms_model([node], [vi(n, F32, s) for n, s in zip(names, shapes)], [vi("y", F32)])
    with pytest.raises(UnfixableError):
        rewrite(model, ["reference"], plugins=plugins, confirm=False, verify=False)


# -- RemovePadding / RestorePadding ---------------------------------------------------------

def test_padding_kernels_independent_oracle():
    """The numpy kernels against the documented semantics written out by hand."""
    x = np.arange(2 * 3 * 2, dtype=np.float32).reshape(2, 3, 2)
    counts = np.array([2, 1], np.int32)
    out, offsets, cumulated, max_len = remove_padding_kernel(x, counts)
    np.testing.assert_array_equal(offsets, [[0, 1, 3], [2, 4, 5]])
    np.testing.assert_array_equal(out, x.reshape(6, 2)[[0, 1, 3]])
    np.testing.assert_array_equal(cumulated, [0, 2, 3])
    np.testing.assert_array_equal(max_len, [2])
    restored = restore_padding_kernel(out, offsets)
    expected = x.copy()
    expected[0, 2] = expected[1, 1:] = 0
    np.testing.assert_array_equal(restored, expected)


# -- inside an If branch, and the corpus ----------------------------------------------------


def _inside_if(plugins, op_type, sample):
    """The sample's node in the then branch of an If (reading outer-scope values; the else
    branch passes inputs through), checked for both conditions against onnxruntime."""
    model, feeds = _sample(plugins, op_type, sample)
    node = model.graph.node[0]
    outputs = [o for o in node.output if o]
    branch = [o + "_t" for o in outputs]
    then_node = helper.make_node(op_type, list(node.input), branch, domain=MS)
    then_node.attribute.extend(node.attribute)
    passed = [n for n in node.input if n][:len(outputs)]
    then_branch = helper.make_graph([then_node], "then", [], [vi(o, F32) for o in branch])
    else_branch = helper.make_graph(
        [helper.make_node("Identity", [i], [o + "_e"]) for i, o in zip(passed, outputs)],
        "else", [], [vi(o + "_e", F32) for o in outputs])
    if_node = helper.make_node("If", ["cond"], outputs, then_branch=then_branch,
                               else_branch=else_branch)
    inputs = [vi("cond", TensorProto.BOOL, [])] + list(model.graph.input)
    wrapped = _ms_model([if_node], inputs, [vi(o, F32) for o in outputs])
    wrapped.graph.initializer.extend(model.graph.initializer)
    for cond in (True, False):
        _check(wrapped, plugins, {**feeds, "cond": np.array(cond)})


def test_attention_inside_if_branch(plugins):
    """An Attention (mask rank unknown) inside an If branch."""
    _inside_if(plugins, "Attention", samples._attention_sample("causal-mask-2d", 17))


def test_group_query_attention_inside_if_branch(plugins):
    """Token generation with rotary inside an If branch."""
    _inside_if(plugins, "GroupQueryAttention", samples._gqa_sample("rotary-token", 17))


@pytest.mark.parametrize("attrs", [dict(past_present_share_buffer=0), dict(output_qk=1)])
def test_decoder_masked_mha_declines(plugins, attrs):
    """Past and present not sharing a buffer (which onnxruntime's CPU kernel refuses too)
    and the qk output are declined."""
    model, _ = _sample(plugins, "DecoderMaskedMultiHeadAttention",
                       samples._dmmha_sample("plain", 17))
    node = model.graph.node[0]
    kept = [a for a in node.attribute if a.name not in attrs]
    del node.attribute[:]
    node.attribute.extend(kept + [helper.make_attribute(k, v) for k, v in attrs.items()])
    with pytest.raises(UnfixableError):
        rewrite(model, ["reference"], plugins=plugins, confirm=False, verify=False)


def test_decoder_masked_mha_packed_and_cross_attention_decline(plugins):
    """Packed QKV (no oracle: onnxruntime's CPU kernel fails on it) and cross-attention (no
    past: key and value are the encoder's BNSH K/V) are declined."""
    packed = helper.make_node("DecoderMaskedMultiHeadAttention",
                              ["q", "", "", "", "", "pk", "pv", "past"], ["y", "pk_o", "pv_o"],
                              domain=MS, num_heads=2, past_present_share_buffer=1)
    cross = helper.make_node("DecoderMaskedMultiHeadAttention", ["q", "k", "v"], ["y"],
                             domain=MS, num_heads=2)
    for node, inputs in ((packed, [vi("q", F32, [4, 1, 48]), vi("pk", F32, [4, 2, 6, 8]),
                                   vi("pv", F32, [4, 2, 6, 8]), vi("past", I32, [1])]),
                         (cross, [vi("q", F32, [2, 1, 16]), vi("k", F32, [2, 2, 5, 8]),
                                  vi("v", F32, [2, 2, 5, 8])])):
        model = _ms_model([node], inputs, [vi(o, F32) for o in node.output])
        with pytest.raises(UnfixableError):
            rewrite(model, ["reference"], plugins=plugins, confirm=False, verify=False)


def _corpus(name):
    path = CORPUS / name
    if not path.is_file():
        pytest.skip(f"{path} is absent")
    return load(str(path))


def test_packed_attention_corpus_runs_on_onnxruntime(plugins):
    """RemovePadding / RestorePadding have no CPU kernel: decomposed, the model runs, and
    agrees with the numpy kernels chained by hand."""
    model = _corpus("ort_packed_attention_fp32.onnx")
    result = rewrite(model, ["onnxruntime"], plugins=plugins, confirm=False,
                     verify=False)
    assert not result.report.remaining
    rng = np.random.default_rng(11)
    hidden, counts = 24, np.array([3, 1, 4], np.int32)
    batch, seq = len(counts), 4
    padded = _rand(rng, [batch, seq, hidden])
    packed, token_offset, cumulated, _ = remove_padding_kernel(padded, counts)
    feeds = {"input": packed, "weight": _rand(rng, [hidden, 3 * hidden], scale=0.3),
             "bias": _rand(rng, [3 * hidden]), "token_offset": token_offset,
             "cumulative_sequence_length": cumulated}
    got = run_ort(result.model, feeds)[0]
    restored = restore_padding_kernel(packed, token_offset)
    attended = attention_reference(restored, feeds["weight"], feeds["bias"], counts,
                                   num_heads=12, mask_filter_value=-3.4028234663852886e38)[0]
    expected = remove_padding_kernel(attended, counts)[0]
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)
    # rewrite's own verification: the original on the reference evaluator with the kernels
    verified = rewrite(model, ["onnxruntime"], plugins=plugins, confirm=False,
                       compare_options={"inputs": feeds})
    assert verified.report.verification["compare"] == "ok", verified.report.verification


def test_whisper_corpus_compares_ok(plugins):
    """Rewritten for the reference evaluator and onnxruntime: compared with onnxruntime's
    run of the original (SkipLayerNormalization and BiasGelu come from com_microsoft)."""
    try:
        result = rewrite(_corpus("ort_whisper_encoder_self_attention.onnx"),
                         ["reference", "onnxruntime"], plugins=plugins, confirm=False)
    except UnfixableError as e:
        assert "Attention" not in str(e), str(e)
        pytest.skip(f"another com.microsoft op is not rewritten yet: {e}")
    assert result.report.verification["compare"] == "ok", result.report.verification


@pytest.mark.parametrize("name", ["ort_gpt2_megatron_skiplayernorm.onnx",
                                  "ort_whisper_encoder_self_attention.onnx"])
def test_corpus_attention_nodes_rewritten(plugins, name):
    """Attention and EmbedLayerNormalization leave no finding for the reference target
    (other com.microsoft ops are another module's business)."""
    result = rewrite(_corpus(name), ["reference"], plugins=plugins, partial=True,
                     confirm=False, verify=False)
    left = {f.as_dict().get("op_type") or str(f.as_dict()) for f in result.report.remaining}
    assert not any("Attention" in op or "EmbedLayer" in op for op in left), left


def _megatron_feeds(rng, batch, seq, past):
    """Feeds for the GPT-2 (Megatron) corpus model at a decode step after ``past`` tokens:
    positions ``past .. past + seq``, a causal 64 x 64 mask with key 0 masked for the last
    batch entry."""
    mask = np.tril(np.ones((64, 64), np.float32))[None, None].repeat(batch, 0)
    mask[-1, 0, :, 0] = 0
    positions = np.arange(past, past + seq, dtype=np.int64)[None].repeat(batch, 0)
    return {"input_ids": rng.integers(0, 10, (batch, seq)).astype(np.int64),
            "position_ids": positions, "attention_mask": mask,
            "past_0": _rand(rng, [2, batch, 2, past, 4])}


def _megatron_with_3d_mask(model: ModelProto) -> ModelProto:
    """The corpus model with its Attention reading a 3-D mask input ``mask_3d`` (B, S, T),
    which onnxruntime's CPU kernel takes (it refuses the 4-D one)."""
    copy = ModelProto()
    copy.CopyFrom(model)
    (node,) = [n for n in copy.graph.node if n.op_type == "Attention"]
    node.input[3] = "mask_3d"
    copy.graph.input.append(vi("mask_3d", I32, ["batch", "seq", "total"]))
    return copy


@pytest.mark.parametrize("batch,seq,past", [(1, 3, 2), (2, 1, 2), (2, 3, 0)])
def test_gpt2_megatron_corpus_with_a_past_agrees_with_onnxruntimes_kernel(plugins, batch, seq,
                                                                         past):
    """GPT-2 (Megatron) at a step after ``past`` tokens (issue 27: batch 1, 3 new tokens after
    2): rewritten for the reference evaluator and onnxruntime, verified by the rewrite, and
    equal to onnxruntime running the original with its Attention given the rows
    ``past .. past + seq`` of the 4-D mask as a 3-D mask (its CUDA kernel's reading)."""
    model = _corpus("ort_gpt2_megatron_skiplayernorm.onnx")
    feeds = _megatron_feeds(np.random.default_rng(27 + batch + seq + past), batch, seq, past)
    result = rewrite(model, ["reference", "onnxruntime"], plugins=plugins, confirm=False,
                     compare_options={"inputs": feeds})
    assert result.report.verification["compare"] == "ok", result.report.verification
    total = past + seq
    mask_3d = feeds["attention_mask"][:, 0, past:total, :total].astype(np.int32)
    expected = run_ort(_megatron_with_3d_mask(model), {**feeds, "mask_3d": mask_3d})
    got = run_ort(result.model, feeds)
    from onnx.reference import ReferenceEvaluator

    on_reference = ReferenceEvaluator(result.model).run(None, feeds)
    for g, r, e in zip(got, on_reference, expected, strict=True):
        assert g.shape == e.shape
        np.testing.assert_allclose(g, e, **TOL)
        np.testing.assert_allclose(r, e, **TOL)


def _gqa_corpus_feeds(rng, batch, seq, past, seqlens):
    """Feeds for the corpus model: packed QKV (2 query heads, 1 KV head, head size 16)."""
    angles = rng.random((16, 8)) * 6
    return {"query": _rand(rng, [batch, seq, 64]),
            "past_key": _rand(rng, [batch, 1, past, 16]),
            "past_value": _rand(rng, [batch, 1, past, 16]),
            "seqlens_k": np.array(seqlens, np.int32).reshape(batch, 1),
            "cos_cache": np.cos(angles).astype(np.float32),
            "sin_cache": np.sin(angles).astype(np.float32)}


GQA_CORPUS_STEPS = [(2, 1, 8, [5, 2]), (2, 4, 0, [3, 3]), (1, 1, 3, [3])]


def _with_total_sequence_length(model):
    """The corpus model with input 6 (which onnxruntime requires) as a graph input."""
    copy = ModelProto()
    copy.CopyFrom(model)
    copy.graph.node[0].input[6] = "total_sequence_length"
    copy.graph.input.append(vi("total_sequence_length", I32, []))
    return copy


def test_gqa_corpus_without_total_sequence_length(plugins):
    """OpenVINO's GQA test model leaves out input 6, so onnxruntime refuses the node as
    invalid. The planner accepts a decomposition that takes the node as it is: this one
    derives the total (max(seqlens_k) + 1), and the result runs on onnxruntime, agreeing
    with onnxruntime's kernel given the total."""
    model = _corpus("ov_com_microsoft_gqa_rotary.onnx")
    result = rewrite(model, ["onnxruntime"], plugins=plugins, confirm=False, verify=False)
    assert not result.report.remaining
    decomposed = result.model
    check_model(decomposed, full_check=True)
    assert {n.domain for n in decomposed.graph.node} <= {"", "ai.onnx"}
    with_total = _with_total_sequence_length(model)
    rng = np.random.default_rng(15)
    for batch, seq, past, seqlens in GQA_CORPUS_STEPS:
        feeds = _gqa_corpus_feeds(rng, batch, seq, past, seqlens)
        expected = run_ort(with_total, {**feeds, "total_sequence_length": np.array(
            max(seqlens) + 1, np.int32)})
        got = run_ort(decomposed, feeds)
        for g, e in zip(got, expected, strict=True):
            np.testing.assert_allclose(g, e, **TOL)


def test_gqa_corpus_with_total_sequence_length(plugins):
    """The corpus model with input 6 supplied: rewritten for the reference target, it
    agrees with onnxruntime's kernel (prompt and token generation, rotary, packed QKV)."""
    model = _with_total_sequence_length(_corpus("ov_com_microsoft_gqa_rotary.onnx"))
    rewritten = testing.rewritten(model, "reference", plugins, standard_only=True)
    rng = np.random.default_rng(16)
    for batch, seq, past, seqlens in GQA_CORPUS_STEPS:
        feeds = _gqa_corpus_feeds(rng, batch, seq, past, seqlens)
        feeds["total_sequence_length"] = np.array(max(seqlens) + 1, np.int32)
        for g, e in zip(run_ort(rewritten, feeds), run_ort(model, feeds), strict=True):
            np.testing.assert_allclose(g, e, **TOL)


def test_dmmha_corpus_compares_ok(plugins):
    """onnxruntime's DecoderMaskedMultiHeadAttention test model (beam search inputs):
    rewritten into standard ONNX, it compares "ok" against onnxruntime's run of the
    original, with valid decoding inputs (2 sequences of 2 beams, past length 4)."""
    model = _corpus("ort_dmmha_self_attn.onnx")
    rng = np.random.default_rng(17)
    batch, heads, head, max_len = 4, 2, 32, 7
    feeds = {"q": _rand(rng, [batch, 1, 64]), "k": _rand(rng, [batch, 1, 64]),
             "v": _rand(rng, [batch, 1, 64]), "b": _rand(rng, [192]),
             "past_k": _rand(rng, [batch, heads, max_len, head]),
             "past_v": _rand(rng, [batch, heads, max_len, head]),
             "past_seq_len": np.array([4], np.int32), "beam_width": np.array([2], np.int32),
             "cache_indir": rng.integers(0, 2, (2, 2, max_len)).astype(np.int32)}
    result = rewrite(model, ["reference", "onnxruntime"], plugins=plugins, confirm=False,
                     compare_options={"inputs": feeds})
    assert result.report.verification["compare"] == "ok", result.report.verification
    for g, e in zip(run_ort(result.model, feeds), run_ort(model, feeds), strict=True):
        np.testing.assert_allclose(g, e, **TOL)
