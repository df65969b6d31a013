"""The com.microsoft attention family (``rewriter_plugins.com_microsoft_attention``) against
its oracles: onnxruntime's CPU contrib kernels running the original node (Attention,
MultiHeadAttention, RotaryEmbedding, EmbedLayerNormalization), or numpy where onnxruntime
has none (RemovePadding, RestorePadding, Attention with Megatron's 4-D mask). Each one-node
model is rewritten for the ``reference`` target (no com.microsoft at all) and run on
onnxruntime, at ai.onnx opsets 12 and 17 (the bodies switch op forms at 13 and 17).
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest
from onnx import ModelProto, TensorProto, helper, load
from onnx.checker import check_model
from rewriter_plugins.com_microsoft_attention import (
    attention_reference,
    remove_padding_kernel,
    restore_padding_kernel,
)

from rewriter.api import rewrite
from rewriter.manager import load_plugins
from rewriter.pipeline import UnfixableError
from tests.conftest import CORPUS

ort = pytest.importorskip("onnxruntime")

MS = "com.microsoft"
F32, F16, I32, I64 = TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.INT32, TensorProto.INT64
NP = {F32: np.float32, F16: np.float16}
TOL = {F32: dict(rtol=1e-4, atol=1e-5), F16: dict(rtol=2e-2, atol=2e-2)}
OPSETS = [12, 17]
KERNEL_PLUGIN = '''
from rewriter import hookimpl

@hookimpl
def register_kernels(registry):
    from rewriter_plugins import com_microsoft_attention
    com_microsoft_attention.register_kernels(registry)
'''


@pytest.fixture(scope="module")
def plugins():
    return load_plugins(autoload=False)


@pytest.fixture(scope="module")
def plugins_with_kernels(tmp_path_factory):
    """The built-ins, plus this module's numpy kernels if com_microsoft does not register
    them yet."""
    loaded = load_plugins(autoload=False)
    if (MS, "RemovePadding") in loaded.registry.kernels:
        return loaded
    path = tmp_path_factory.mktemp("plugin") / "attention_kernels.py"
    path.write_text(KERNEL_PLUGIN)
    return load_plugins([str(path)], autoload=False)


def _vi(name, elem, shape=None):
    return helper.make_tensor_value_info(name, elem, shape)


def _model(nodes, inputs, outputs, opset=17):
    graph = helper.make_graph(nodes, "g", inputs, outputs)
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid(MS, 1)])
    model.ir_version = 8
    return model


def _one_node(op_type, feeds, outputs, opset, names=None, **attrs):
    """A model of one ``op_type`` node whose inputs are ``names`` ("" for gaps) fed by
    ``feeds`` (types from the arrays, shapes left unknown as in optimiser output)."""
    names = names if names is not None else list(feeds)
    elems = {np.dtype(np.float32): F32, np.dtype(np.float16): F16, np.dtype(np.int32): I32,
             np.dtype(np.int64): I64}
    node = helper.make_node(op_type, names, [o for o, _ in outputs], domain=MS, **attrs)
    return _model([node], [_vi(n, elems[feeds[n].dtype]) for n in names if n],
                  [_vi(o, e) for o, e in outputs], opset)


def _run(model, feeds):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def _rewritten(model, plugins):
    result = rewrite(model, ["reference"], plugins=plugins, confirm=False, verify=False)
    assert not result.report.remaining, [f.as_dict() for f in result.report.remaining]
    nodes = list(result.model.graph.node)
    nodes += [inner for n in nodes for a in n.attribute if a.g for inner in a.g.node]
    assert {n.domain for n in nodes} <= {"", "ai.onnx"}
    return result.model


def _check(model, plugins, feeds, elem=F32, expected=None):
    """Rewrite, run, compare with ``expected`` (default: onnxruntime on the original)."""
    if expected is None:
        expected = _run(model, feeds)
    got = _run(_rewritten(model, plugins), feeds)
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert g.shape == np.shape(e)
        if g.dtype.kind == "f":
            assert g.dtype == np.dtype(NP[elem])
            np.testing.assert_allclose(g.astype(np.float64), np.asarray(e, np.float64),
                                       **TOL[elem])
        else:
            np.testing.assert_array_equal(g, e)


def _rand(rng, shape, elem=F32, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(NP[elem])


# -- Attention ------------------------------------------------------------------------------

B, S, D, N, P = 2, 4, 8, 2, 3


def _attention_case(case, elem, rng):
    total = S + P if "past" in case else S
    feeds = {"x": _rand(rng, [B, S, D], elem), "w": _rand(rng, [D, 3 * D], elem, 0.5),
             "b": _rand(rng, [3 * D], elem)}
    names, outputs, attrs = ["x", "w", "b"], [("y", elem)], {"num_heads": N}
    if case == "no-bias":
        names[2] = ""
        del feeds["b"]
    if "mask" in case and case != "mask-filter":
        if "mask-2d" in case:
            mask = (rng.random((B, total)) > 0.3).astype(np.int32)
            mask[1] = 0  # a fully masked row: softmax of the unmasked scores, as onnxruntime
        elif "mask-1d" in case:
            mask = np.array([2, total], np.int32)
        elif "mask-2b" in case:
            mask = np.array([3, total, 1, 0], np.int32)
        else:  # 3-D
            mask = (rng.random((B, S, total)) > 0.3).astype(np.int32)
        names.append("m")
        feeds["m"] = mask
    if "past" in case:
        names += [""] * (4 - len(names)) + ["past"]
        feeds["past"] = _rand(rng, [2, B, N, P, D // N], elem)
        outputs.append(("present", elem))
    if "causal" in case:
        attrs["unidirectional"] = 1
    if case == "scale":
        attrs["scale"] = 0.3
    if case == "qkv-sizes":
        attrs["qkv_hidden_sizes"] = [4, 4, 8]
        feeds["w"], feeds["b"] = feeds["w"][:, :16], feeds["b"][:16]
    if case == "attention-bias":
        names += ["", "", "ab"]
        feeds["ab"] = _rand(rng, [1, N, S, S], elem)
    if case == "mask-filter":
        attrs["mask_filter_value"] = -50.0
        names.append("m")
        feeds["m"] = (rng.random((B, S)) > 0.5).astype(np.int32)
    return names, feeds, outputs, attrs


ATTENTION_CASES = ["plain", "no-bias", "mask-2d", "mask-1d", "mask-2b", "mask-3d", "causal",
                   "causal-mask-2d", "past", "past-causal-mask-2d", "scale", "qkv-sizes",
                   "attention-bias", "mask-filter"]


@pytest.mark.parametrize("opset", OPSETS)
@pytest.mark.parametrize("case", ATTENTION_CASES)
def test_attention(plugins, case, opset):
    rng = np.random.default_rng(zlib.crc32(case.encode()))
    names, feeds, outputs, attrs = _attention_case(case, F32, rng)
    model = _one_node("Attention", feeds, outputs, opset, names, **attrs)
    _check(model, plugins, feeds)


@pytest.mark.parametrize("case", ["plain", "past-causal-mask-2d", "mask-1d"])
def test_attention_float16(plugins, case):
    rng = np.random.default_rng(1)
    names, feeds, outputs, attrs = _attention_case(case, F16, rng)
    model = _one_node("Attention", feeds, outputs, 17, names, **attrs)
    _check(model, plugins, feeds, F16)


def test_attention_known_mask_rank(plugins):
    """A declared mask shape skips the run-time rank dispatch (no If in the result)."""
    rng = np.random.default_rng(2)
    names, feeds, outputs, attrs = _attention_case("mask-2d", F32, rng)
    feeds["m"][1] = [1, 0, 1, 1]  # a fully masked row is float32 rounding against float64
    model = _one_node("Attention", feeds, outputs, 17, names, **attrs)
    model.graph.initializer.append(helper.make_tensor("m", I32, feeds["m"].shape,
                                                      feeds["m"].ravel().tolist()))
    mask = feeds.pop("m")
    del model.graph.input[3]
    out = _rewritten(model, plugins)
    assert "If" not in {n.op_type for n in out.graph.node}
    expected = [attention_reference(feeds["x"], feeds["w"], feeds["b"], mask, num_heads=N)[0]]
    _check(model, plugins, feeds, expected=expected)


@pytest.mark.parametrize("opset", OPSETS)
def test_attention_megatron_mask_with_past(plugins, opset):
    """Megatron GPT-2's (B, 1, M, M) mask: onnxruntime's CPU kernel refuses it, so numpy
    (rows P .. P+S, columns 0 .. T, as the CUDA kernel reads it) is the oracle."""
    rng = np.random.default_rng(3)
    feeds = {"x": _rand(rng, [B, S, D]), "w": _rand(rng, [D, 3 * D], scale=0.5),
             "b": _rand(rng, [3 * D]), "m": np.tril(np.ones((16, 16), np.int32))[None, None]
             .repeat(B, 0), "past": _rand(rng, [2, B, N, P, D // N])}
    feeds["m"][1, 0, :, 0] = 0
    model = _one_node("Attention", feeds, [("y", F32), ("present", F32)], opset, num_heads=N)
    expected = attention_reference(feeds["x"], feeds["w"], feeds["b"], feeds["m"], num_heads=N,
                                   past=feeds["past"])
    _check(model, plugins, feeds, expected=list(expected))


def test_attention_reference_matches_onnxruntime():
    """The numpy oracle itself agrees with onnxruntime's kernel (2-D mask, past, causal)."""
    rng = np.random.default_rng(4)
    names, feeds, outputs, attrs = _attention_case("past-causal-mask-2d", F32, rng)
    feeds["m"][1, :3] = 1  # no fully masked row (its float32 scores lose ~1e-3 near -1e4)
    model = _one_node("Attention", feeds, outputs, 17, names, **attrs)
    expected = _run(model, feeds)
    got = attention_reference(feeds["x"], feeds["w"], feeds["b"], feeds["m"], num_heads=N,
                              unidirectional=1, past=feeds["past"])
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("attrs", [dict(do_rotary=1), dict(past_present_share_buffer=1)])
def test_attention_declines(plugins, attrs):
    feeds = {"x": np.zeros([1, 2, 4], np.float32), "w": np.zeros([4, 12], np.float32)}
    model = _one_node("Attention", feeds, [("y", F32)], 17, num_heads=2, **attrs)
    with pytest.raises(UnfixableError):
        rewrite(model, ["reference"], plugins=plugins, confirm=False, verify=False)


# -- MultiHeadAttention ---------------------------------------------------------------------

MHA_CASES = ["self", "cross", "bias", "mask-2d", "mask-1d", "causal", "past",
             "past-bias-mask-2d", "attention-bias"]


def _mha_case(case, elem, rng, kv_len=5):
    length = S if case in ("self", "causal") or "past" in case else kv_len
    total = length + (P if "past" in case else 0)
    feeds = {"q": _rand(rng, [B, S, D], elem), "k": _rand(rng, [B, length, D], elem),
             "v": _rand(rng, [B, length, D], elem)}
    names, outputs, attrs = ["q", "k", "v"], [("y", elem)], {"num_heads": N}
    if "bias" in case and case != "attention-bias":
        names.append("bias")
        feeds["bias"] = _rand(rng, [3 * D], elem)
    if "mask" in case:
        names += [""] * (4 - len(names)) + ["mask"]
        feeds["mask"] = ((rng.random((B, total)) > 0.3).astype(np.int32) if "2d" in case
                         else np.array([2, total], np.int32))
    if case == "attention-bias":
        names += ["", "", "ab"]
        feeds["ab"] = _rand(rng, [B, 1, S, total], elem)
    if "past" in case:
        names += [""] * (6 - len(names)) + ["pk", "pv"]
        feeds["pk"] = _rand(rng, [B, N, P, D // N], elem)
        feeds["pv"] = _rand(rng, [B, N, P, D // N], elem)
        outputs += [("present_key", elem), ("present_value", elem)]
    if case == "causal":
        attrs["unidirectional"] = 1
    return names, feeds, outputs, attrs


@pytest.mark.parametrize("opset", OPSETS)
@pytest.mark.parametrize("case", MHA_CASES)
def test_multi_head_attention(plugins, case, opset):
    rng = np.random.default_rng(zlib.crc32(case.encode()))
    names, feeds, outputs, attrs = _mha_case(case, F32, rng)
    _check(_one_node("MultiHeadAttention", feeds, outputs, opset, names, **attrs), plugins,
           feeds)


@pytest.mark.parametrize("case", ["cross", "past-bias-mask-2d"])
def test_multi_head_attention_float16(plugins, case):
    names, feeds, outputs, attrs = _mha_case(case, F16, np.random.default_rng(5))
    _check(_one_node("MultiHeadAttention", feeds, outputs, 17, names, **attrs), plugins,
           feeds, F16)


def test_multi_head_attention_packed_qkv_declines(plugins):
    """Packed QKV (no key): declined."""
    feeds = {"q": np.zeros([1, 2, 2, 3, 4], np.float32)}
    model = _one_node("MultiHeadAttention", feeds, [("y", F32)], 17, num_heads=2)
    with pytest.raises(UnfixableError):
        rewrite(model, ["reference"], plugins=plugins, confirm=False, verify=False)


# -- RotaryEmbedding ------------------------------------------------------------------------

def _rotary_case(case, elem, rng):
    head, max_len = 8, 16
    rot = 4 if case == "partial" else head
    attrs = {} if case == "no-num-heads" else {"num_heads": N}
    if case == "partial":
        attrs["rotary_embedding_dim"] = rot
    if case == "interleaved":
        attrs["interleaved"] = 1
    x = _rand(rng, [B, N, S, head] if case == "bnsh" else [B, S, N * head], elem)
    pos = (np.array([3], np.int64) if case == "single-position"
           else rng.integers(0, max_len, (B, S)).astype(np.int64))
    angles = rng.random((max_len, rot // 2)) * 6
    feeds = {"x": x, "pos": pos, "cos": np.cos(angles).astype(NP[elem]),
             "sin": np.sin(angles).astype(NP[elem])}
    return feeds, attrs


@pytest.mark.parametrize("opset", OPSETS)
@pytest.mark.parametrize("case", ["plain", "no-num-heads", "bnsh", "interleaved", "partial",
                                  "single-position"])
def test_rotary_embedding(plugins, case, opset):
    feeds, attrs = _rotary_case(case, F32, np.random.default_rng(6))
    _check(_one_node("RotaryEmbedding", feeds, [("y", F32)], opset, **attrs), plugins, feeds)


@pytest.mark.parametrize("case", ["plain", "interleaved"])
def test_rotary_embedding_float16(plugins, case):
    feeds, attrs = _rotary_case(case, F16, np.random.default_rng(7))
    _check(_one_node("RotaryEmbedding", feeds, [("y", F16)], 17, **attrs), plugins, feeds, F16)


# -- EmbedLayerNormalization ----------------------------------------------------------------

@pytest.mark.parametrize("opset", OPSETS)
@pytest.mark.parametrize("case", ["mask", "no-mask", "segments", "position-ids",
                                  "position-ids-broadcast"])
def test_embed_layer_norm(plugins, case, opset):
    rng = np.random.default_rng(8)
    vocab, max_len = 10, 16
    feeds = {"ids": rng.integers(0, vocab, (B, S)).astype(np.int32),
             "we": _rand(rng, [vocab, D]), "pe": _rand(rng, [max_len, D]),
             "gamma": _rand(rng, [D]), "beta": _rand(rng, [D])}
    names = ["ids", "", "we", "pe", "", "gamma", "beta"]
    if case == "segments":
        names[1], names[4] = "seg", "se"
        feeds["seg"] = rng.integers(0, 2, (B, S)).astype(np.int32)
        feeds["se"] = _rand(rng, [2, D])
    if case == "mask":
        names.append("mask")  # a 2 is not counted: onnxruntime counts the ones
        feeds["mask"] = np.array([[2, 1, 0, 1], [1, 1, 1, 0]], np.int32)
    if case.startswith("position-ids"):
        names += ["", "pos"]
        rows = B if case == "position-ids" else 1
        feeds["pos"] = rng.integers(0, max_len, (rows, S)).astype(np.int32)
    outputs = [("y", F32), ("mask_index", I32), ("sum", F32)]
    model = _one_node("EmbedLayerNormalization", feeds, outputs, opset, names, epsilon=1e-5)
    _check(model, plugins, feeds)


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


@pytest.mark.parametrize("opset", OPSETS)
@pytest.mark.parametrize("elem", [F32, F16])
def test_remove_restore_padding(plugins, opset, elem):
    rng = np.random.default_rng(9)
    x = _rand(rng, [3, 5, 4], elem)
    counts = np.array([2, 5, 0], np.int32)
    remove = _one_node("RemovePadding", {"x": x, "c": counts},
                       [("y", elem), ("offset", I32), ("cum", I32), ("max", I32)], opset)
    expected = remove_padding_kernel(x.astype(np.float32), counts)
    _check(remove, plugins, {"x": x, "c": counts}, elem, list(expected))
    packed, offsets = expected[0].astype(NP[elem]), expected[1]
    restore = _one_node("RestorePadding", {"p": packed, "o": offsets}, [("z", elem)], opset)
    _check(restore, plugins, {"p": packed, "o": offsets}, elem,
           [restore_padding_kernel(packed.astype(np.float32), offsets)])


# -- inside an If branch, and the corpus ----------------------------------------------------

def test_inside_if_branch(plugins):
    """An Attention (reading outer-scope values, mask rank unknown) inside an If branch."""
    rng = np.random.default_rng(10)
    names, feeds, _, attrs = _attention_case("causal-mask-2d", F32, rng)
    then_branch = helper.make_graph(
        [helper.make_node("Attention", names, ["t"], domain=MS, **attrs)], "then", [],
        [_vi("t", F32, [B, S, D])])
    else_branch = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["e"])], "else", [], [_vi("e", F32, [B, S, D])])
    node = helper.make_node("If", ["cond"], ["y"], then_branch=then_branch,
                            else_branch=else_branch)
    inputs = [_vi("cond", TensorProto.BOOL, []), _vi("x", F32), _vi("w", F32),
              _vi("b", F32), _vi("m", I32)]
    model = _model([node], inputs, [_vi("y", F32, [B, S, D])])
    for cond in (True, False):
        _check(model, plugins, {**feeds, "cond": np.array(cond)})


def _corpus(name):
    path = CORPUS / name
    if not path.is_file():
        pytest.skip(f"{path} is absent")
    return load(str(path))


def test_packed_attention_corpus_runs_on_onnxruntime(plugins_with_kernels):
    """RemovePadding / RestorePadding have no CPU kernel: decomposed, the model runs, and
    agrees with the numpy kernels chained by hand."""
    model = _corpus("ort_packed_attention_fp32.onnx")
    result = rewrite(model, ["onnxruntime"], plugins=plugins_with_kernels, confirm=False,
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
    got = _run(result.model, feeds)[0]
    restored = restore_padding_kernel(packed, token_offset)
    attended = attention_reference(restored, feeds["weight"], feeds["bias"], counts,
                                   num_heads=12, mask_filter_value=-3.4028234663852886e38)[0]
    expected = remove_padding_kernel(attended, counts)[0]
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)
    # rewrite's own verification: the original on the reference evaluator with the kernels
    verified = rewrite(model, ["onnxruntime"], plugins=plugins_with_kernels, confirm=False,
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


# -- GroupQueryAttention --------------------------------------------------------------------

GQA_CASES = ["prompt", "prompt-padded", "prompt-past-buffer", "token", "token-grown-cache",
             "subsequent-prompt", "rotary-prompt", "rotary-token", "rotary-interleaved",
             "rotary-partial", "packed-rotary", "window", "softcap", "smooth", "head-sink",
             "attention-bias", "scale", "multi-query", "prompt-present-unused"]


def _gqa_case(case, elem, rng):
    """A GroupQueryAttention node: the prompt form (no past, or a past buffer the prompt
    fills) or token generation (a past buffer of max length, the new K/V written at each
    batch entry's own position ``seqlens_k[b]``)."""
    n_heads, kv_heads = (4, 1) if case == "multi-query" else (4, 2)
    head = 32 if case == "rotary-partial" else 16
    batch, max_len = 2, 8
    if "prompt" in case and case != "subsequent-prompt":
        seq, seqlens = 4, [3, 3]
        if case == "prompt-padded":
            seqlens = [3, 1]  # right padding: entry 1 has two tokens
    elif case == "subsequent-prompt":  # one entry, 3 new tokens after 2 cached ones
        batch, seq, seqlens = 1, 3, [4]
    else:
        seq, seqlens = 1, [5, 2]
    total = max(seqlens) + 1
    past_len = {"prompt": None, "prompt-padded": None, "rotary-prompt": None,
                "prompt-present-unused": None, "token-grown-cache": total - 1}.get(case, max_len)
    feeds = {"q": _rand(rng, [batch, seq, n_heads * head], elem),
             "k": _rand(rng, [batch, seq, kv_heads * head], elem),
             "v": _rand(rng, [batch, seq, kv_heads * head], elem)}
    names = ["q", "k", "v", "", "", "seqlens", "total"]
    if past_len is not None:
        names[3:5] = ["pk", "pv"]
        feeds["pk"] = _rand(rng, [batch, kv_heads, past_len, head], elem)
        feeds["pv"] = _rand(rng, [batch, kv_heads, past_len, head], elem)
    feeds["seqlens"] = np.array(seqlens, np.int32)
    feeds["total"] = np.array(total, np.int32)
    attrs = {"num_heads": n_heads, "kv_num_heads": kv_heads}
    if "rotary" in case:
        names += ["cos", "sin"]
        angles = rng.random((max_len + 4, 8)) * 6
        feeds["cos"], feeds["sin"] = (np.cos(angles).astype(NP[elem]),
                                      np.sin(angles).astype(NP[elem]))
        attrs["do_rotary"] = 1
        if case == "rotary-interleaved":
            attrs["rotary_interleaved"] = 1
    if case == "packed-rotary":
        feeds["q"] = np.concatenate([feeds["q"], feeds.pop("k"), feeds.pop("v")], axis=-1)
        names[1:3] = ["", ""]
    if case == "window":
        attrs["local_window_size"] = 3
    if case == "softcap":
        attrs["softcap"] = 1.5
    if case == "smooth":
        attrs["smooth_softmax"] = 1
    if case == "scale":
        attrs["scale"] = 0.3
    if case in ("head-sink", "attention-bias"):
        names += [""] * (9 - len(names))
        if case == "head-sink":
            names += ["", "", "sink"]
            feeds["sink"] = _rand(rng, [n_heads], elem)
        else:
            names += ["", "ab"]
            feeds["ab"] = _rand(rng, [batch, 1, seq, total], elem)
            attrs["softcap"] = 2.0  # the bias is added after the softcap
    # (onnxruntime ignores the past when the present outputs are not requested: only
    # the prompt form is comparable without them)
    outputs = [("y", elem)] + ([] if case == "prompt-present-unused"
                               else [("present_key", elem), ("present_value", elem)])
    return names, feeds, outputs, attrs


@pytest.mark.parametrize("opset", OPSETS)
@pytest.mark.parametrize("case", GQA_CASES)
def test_group_query_attention(plugins, case, opset):
    rng = np.random.default_rng(zlib.crc32(case.encode()))
    names, feeds, outputs, attrs = _gqa_case(case, F32, rng)
    _check(_one_node("GroupQueryAttention", feeds, outputs, opset, names, **attrs), plugins,
           feeds)


@pytest.mark.parametrize("case", ["prompt-padded", "rotary-token", "packed-rotary", "window",
                                  "head-sink"])
def test_group_query_attention_float16(plugins, case):
    names, feeds, outputs, attrs = _gqa_case(case, F16, np.random.default_rng(12))
    _check(_one_node("GroupQueryAttention", feeds, outputs, 17, names, **attrs), plugins,
           feeds, F16)


# -- DecoderMaskedMultiHeadAttention --------------------------------------------------------

DMMHA_CASES = ["plain", "bias", "mask", "attention-bias", "scale", "first-step",
               "last-slot", "beams", "beams-mask", "beam-width-1"]


def _dmmha_case(case, rng):
    """Self-attention on one new token with past/present buffers of max length ``M``: the
    new K/V go to slot ``past_sequence_length``, attention reads slots ``0 .. past``."""
    batch, heads, head, max_len = 4, 2, 8, 6
    past = {"first-step": 0, "last-slot": max_len - 1}.get(case, 3)
    hidden = heads * head
    feeds = {"q": _rand(rng, [batch, 1, hidden]), "k": _rand(rng, [batch, 1, hidden]),
             "v": _rand(rng, [batch, 1, hidden])}
    names = ["q", "k", "v", "", "", "pk", "pv", "past"]
    feeds["pk"] = _rand(rng, [batch, heads, max_len, head])
    feeds["pv"] = _rand(rng, [batch, heads, max_len, head])
    feeds["past"] = np.array([past], np.int32)
    attrs = {"num_heads": heads, "past_present_share_buffer": 1}
    names += ["", "", ""]
    if case.startswith("beam"):  # 2 sequences of 2 beams each
        beam = 1 if case == "beam-width-1" else 2
        names[8:10] = ["beam", "indirection"]
        feeds["beam"] = np.array([beam], np.int32)
        feeds["indirection"] = rng.integers(0, beam, (batch // beam, beam, max_len)).astype(
            np.int32)
    if case in ("bias", "beams"):
        names[10] = "bias"
        feeds["bias"] = _rand(rng, [3 * hidden])
    if case == "packed":
        feeds["q"] = np.concatenate([feeds["q"], feeds.pop("k"), feeds.pop("v")], axis=-1)
        names[1:3] = ["", ""]
    if "mask" in case:
        names[3] = "mask"
        feeds["mask"] = (rng.random((batch, past + 1)) > 0.3).astype(np.int32)
        attrs["mask_filter_value"] = -50.0
    if case == "attention-bias":
        names[4] = "ab"
        feeds["ab"] = _rand(rng, [batch, 1, 1, past + 1])
    if case == "scale":
        attrs["scale"] = 0.4
    outputs = [("y", F32), ("present_key", F32), ("present_value", F32)]
    return names, feeds, outputs, attrs


@pytest.mark.parametrize("opset", OPSETS)
@pytest.mark.parametrize("case", DMMHA_CASES)
def test_decoder_masked_mha(plugins, case, opset):
    rng = np.random.default_rng(zlib.crc32(case.encode()))
    names, feeds, outputs, attrs = _dmmha_case(case, rng)
    _check(_one_node("DecoderMaskedMultiHeadAttention", feeds, outputs, opset, names, **attrs),
           plugins, feeds)


@pytest.mark.parametrize("case, attrs", [("plain", dict(past_present_share_buffer=0)),
                                         ("plain", dict(output_qk=1)), ("packed", {})])
def test_decoder_masked_mha_declines(plugins, case, attrs):
    """Past and present not sharing a buffer (which onnxruntime's CPU kernel refuses too),
    the qk output, and packed QKV (no oracle: onnxruntime's CPU kernel fails on it) are
    declined."""
    names, feeds, outputs, base = _dmmha_case(case, np.random.default_rng(13))
    model = _one_node("DecoderMaskedMultiHeadAttention", feeds, outputs, 17, names,
                      **{**base, **attrs})
    with pytest.raises(UnfixableError):
        rewrite(model, ["reference"], plugins=plugins, confirm=False, verify=False)


def test_decoder_masked_mha_cross_attention_declines(plugins):
    """Cross-attention (no past: key and value are the encoder's BNSH K/V): declined."""
    feeds = {"q": np.zeros([2, 1, 16], np.float32), "k": np.zeros([2, 2, 5, 8], np.float32),
             "v": np.zeros([2, 2, 5, 8], np.float32)}
    model = _one_node("DecoderMaskedMultiHeadAttention", feeds, [("y", F32)], 17, num_heads=2)
    with pytest.raises(UnfixableError):
        rewrite(model, ["reference"], plugins=plugins, confirm=False, verify=False)


# -- GroupQueryAttention / DecoderMaskedMultiHeadAttention: If branch and corpus ------------

def test_group_query_attention_inside_if_branch(plugins):
    """Token generation with rotary inside an If branch, reading outer-scope values."""
    names, feeds, outputs, attrs = _gqa_case("rotary-token", F32, np.random.default_rng(14))
    branch_outputs = [o + "_t" for o, _ in outputs]
    then_branch = helper.make_graph(
        [helper.make_node("GroupQueryAttention", names, branch_outputs, domain=MS, **attrs)],
        "then", [], [_vi(o, F32) for o in branch_outputs])
    else_branch = helper.make_graph(
        [helper.make_node("Identity", ["q"], ["e0"]), helper.make_node("Identity", ["pk"], ["e1"]),
         helper.make_node("Identity", ["pv"], ["e2"])], "else", [],
        [_vi(o, F32) for o in ("e0", "e1", "e2")])
    node = helper.make_node("If", ["cond"], [o for o, _ in outputs], then_branch=then_branch,
                            else_branch=else_branch)
    elems = {np.dtype(np.float32): F32, np.dtype(np.int32): I32}
    inputs = [_vi("cond", TensorProto.BOOL, [])] + [_vi(n, elems[feeds[n].dtype])
                                                    for n in names if n]
    model = _model([node], inputs, [_vi(o, F32) for o, _ in outputs])
    for cond in (True, False):
        _check(model, plugins, {**feeds, "cond": np.array(cond)})


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
    copy.graph.input.append(_vi("total_sequence_length", I32, []))
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
        expected = _run(with_total, {**feeds, "total_sequence_length": np.array(
            max(seqlens) + 1, np.int32)})
        got = _run(decomposed, feeds)
        for g, e in zip(got, expected, strict=True):
            np.testing.assert_allclose(g, e, **TOL[F32])


def test_gqa_corpus_with_total_sequence_length(plugins):
    """The corpus model with input 6 supplied: rewritten for the reference target, it
    agrees with onnxruntime's kernel (prompt and token generation, rotary, packed QKV)."""
    model = _with_total_sequence_length(_corpus("ov_com_microsoft_gqa_rotary.onnx"))
    rewritten = _rewritten(model, plugins)
    rng = np.random.default_rng(16)
    for batch, seq, past, seqlens in GQA_CORPUS_STEPS:
        feeds = _gqa_corpus_feeds(rng, batch, seq, past, seqlens)
        feeds["total_sequence_length"] = np.array(max(seqlens) + 1, np.int32)
        for g, e in zip(_run(rewritten, feeds), _run(model, feeds), strict=True):
            np.testing.assert_allclose(g, e, **TOL[F32])


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
    for g, e in zip(_run(result.model, feeds), _run(model, feeds), strict=True):
        np.testing.assert_allclose(g, e, **TOL[F32])
