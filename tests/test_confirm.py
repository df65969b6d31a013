"""``check`` agrees with the runtime it names: the confirmation loads the model (onnxruntime
session, OpenVINO compilation) and, for small models, runs it once on generated inputs, in a
child process. What the runtime refuses only at run time becomes a ``runtime-refused``
finding on the node it names, which ``rewrite`` remedies like any other; a run that fails on
the generated inputs' values (an index out of range, lengths that do not fit each other) is
not a refusal, and the static verdict stands."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from rewriter.api import check, resolve_targets, rewrite
from rewriter.detect.walker import detect
from tests.conftest import CORPUS, make_model, model_from_text

# onnxruntime's CPU Attention kernel refuses Megatron's (B, 1, M, M) mask when it runs
ORT_4D_MASK = "4D mask in attention cpu kernel is not supported"


def _megatron_attention(count: int = 1, seq: int = 4, hidden: int = 8, heads: int = 2,
                        max_len: int = 8) -> onnx.ModelProto:
    """``count`` chained com.microsoft::Attention nodes (as in Megatron GPT-2) with an
    int32 (B, 1, M, M) mask, as Megatron exports it."""
    rng = np.random.default_rng(0)
    nodes, inits = [], []
    x = "x"
    for i in range(count):
        inits += [numpy_helper.from_array(
                      (rng.standard_normal((hidden, 3 * hidden)) * 0.3).astype(np.float32),
                      f"w{i}"),
                  numpy_helper.from_array(rng.standard_normal(3 * hidden).astype(np.float32),
                                          f"b{i}")]
        nodes.append(helper.make_node("Attention", [x, f"w{i}", f"b{i}", "mask"], [f"y{i}"],
                                      name=f"attention_{i}", domain="com.microsoft",
                                      num_heads=heads))
        x = f"y{i}"
    graph = helper.make_graph(nodes, "megatron", [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", seq, hidden]),
        helper.make_tensor_value_info("mask", TensorProto.INT32, ["batch", 1, max_len, max_len]),
    ], [helper.make_tensor_value_info(x, TensorProto.FLOAT, ["batch", seq, hidden])], inits)
    return make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                   helper.make_opsetid("com.microsoft", 1)])


def _ort_runs(model: onnx.ModelProto, feeds=None) -> list:
    from rewriter.io.inputs import generate_inputs

    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds if feeds is not None else generate_inputs(model))


# -- onnxruntime: a refusal at run time is a finding, and rewrite remedies it ----------------

def test_a_run_time_refusal_is_a_finding_on_the_node_it_names(plugins):
    model = _megatron_attention()
    with pytest.raises(Exception, match=ORT_4D_MASK):  # what onnxruntime itself does
        _ort_runs(model)
    assert check(model, ["onnxruntime"], plugins=plugins, confirm=False).ok  # static: runs
    (result,) = check(model, ["onnxruntime"], plugins=plugins, confirm=True).results
    (finding,) = result.findings
    assert result.confirmed is False
    assert (finding.reason, finding.op_label) == ("runtime-refused", "com.microsoft::Attention(1)")
    assert finding.path == "graph/node 0 (attention_0)" and finding.node_name == "attention_0"
    assert ORT_4D_MASK in finding.detail and "[ONNXRuntimeError]" not in finding.detail
    assert result.confirmation.startswith("refused at run")


def test_rewrite_remedies_a_run_time_refusal_and_verifies_it(plugins):
    model = _megatron_attention()
    result = rewrite(model, ["onnxruntime"], plugins=plugins)
    report = result.report
    assert not report.remaining
    assert [(k[0], k[3]) for k in report.applied] == [
        ("decomposition", "com.microsoft::Attention(1)")]
    assert report.verification["onnxruntime load"] == "ok"  # loaded and ran once
    # the original ran on the reference evaluator with the plugin's numpy Attention kernel
    assert report.verification["compare"] == "ok", report.verification
    assert "Attention" not in {n.op_type for n in result.model.graph.node}
    (out,) = _ort_runs(result.model)
    assert out.shape == (3, 4, 8) and np.isfinite(out).all()


def test_refusals_named_one_after_the_other_are_all_remedied(plugins):
    # onnxruntime names the first Attention it runs; once that one is rewritten, the
    # rewritten model is confirmed again and the next one is named
    model = _megatron_attention(count=2)
    report = rewrite(model, ["onnxruntime"], plugins=plugins, verify=False).report
    assert not report.remaining
    assert sum(report.applied.values()) == 2
    assert report.verification["onnxruntime load"] == "ok"


def test_detection_confirms_only_when_asked_or_by_the_targets_size_rule(plugins):
    model = _megatron_attention()
    (target,) = resolve_targets(plugins, ["onnxruntime"])
    found = detect(model, target)  # small model: confirmed by default
    (finding,) = found.findings
    assert finding.node is model.graph.node[0] and finding.reason == "runtime-refused"
    assert finding.input_types == ("tensor(float)", "tensor(float)", "tensor(float)",
                                   "tensor(int32)")
    assert found.confirmation.stage == "run"
    assert detect(model, target, confirm=False).findings == []
    # nothing is confirmed with --no-confirm: the model is left as it is
    report = rewrite(model, ["onnxruntime"], plugins=plugins, confirm=False,
                     verify=False).report
    assert not report.applied and not report.remaining


def test_gpt2_megatron_corpus_model_rewritten_runs_on_onnxruntime(plugins):
    path = CORPUS / "ort_gpt2_megatron_skiplayernorm.onnx"
    if not path.exists():
        pytest.skip(f"{path} is absent")
    (result,) = check(str(path), ["onnxruntime"], plugins=plugins).results
    (finding,) = result.findings
    assert finding.node_name == "GptAttention_0" and ORT_4D_MASK in finding.detail
    # the numbers (against onnxruntime with the numpy Attention kernel for the refused node)
    # are tested in test_verdicts.py; here: it runs, on a decode step after a past of 2
    rewritten = rewrite(onnx.load(path), ["onnxruntime"], plugins=plugins, verify=False)
    assert not rewritten.report.remaining
    assert rewritten.report.verification["onnxruntime load"] == "ok"
    logits, present = _ort_runs(rewritten.model)
    assert logits.shape == (3, 1, 10) and present.shape == (2, 3, 2, 3, 4)
    assert np.isfinite(logits).all()


# -- a run that fails on the generated inputs' values is not a refusal ------------------------

_RESHAPE = """
<ir_version: 8, opset_import: ["" : 17]>
g (float[3, 4] x, int64[2] shape) => (float[?, ?] y) { y = Reshape(x, shape) }"""
_GATHER = """
<ir_version: 8, opset_import: ["" : 17]>
g (float[2, 4] x, int64[20] i) => (float[20, 4] y) { y = Gather(x, i) }"""


@pytest.mark.parametrize("target", ["onnxruntime", "openvino"])
@pytest.mark.parametrize("text, words", [(_RESHAPE, {"onnxruntime": "cannot be reshaped",
                                                     "openvino": "reshape pattern"}),
                                         (_GATHER, {"onnxruntime": "out of data bounds"})])
def test_a_run_failing_on_generated_values_keeps_the_static_verdict(plugins, target, text,
                                                                    words):
    if target == "openvino":
        pytest.importorskip("openvino")
    model = model_from_text(text)  # generated shape values / indices do not fit x
    (result,) = check(model, [target], plugins=plugins, confirm=True).results
    assert result.findings == [] and result.confirmed is True
    if target in words:
        assert "not counted as a refusal" in result.confirmation
        assert words[target] in result.confirmation
    else:  # OpenVINO does not check Gather's indices: it ran
        assert result.confirmation.startswith("loaded and ran once on generated inputs")
        # onnxruntime fails on these indices: OpenVINO's numbers are compared with nothing
        assert "numbers not compared" in result.confirmation


def test_a_run_failing_on_one_input_set_and_running_on_another_runs(plugins):
    pytest.importorskip("openvino")
    # TopK's K comes from an input: the first generated set has K = 0, which OpenVINO
    # refuses (onnxruntime returns nothing), the next K = 2
    model = model_from_text("""
        <ir_version: 8, opset_import: ["" : 17]>
        g (float[3, 7] x, int64[1] k) => (float[3, ?] v, int64[3, ?] i) { v, i = TopK(x, k) }
    """)
    (result,) = check(model, ["openvino"], plugins=plugins).results
    assert result.findings == []
    assert "failed on one generated input set and ran on another" in result.confirmation
    assert "K (0) must be greater or equal to 1" in result.confirmation


def test_decoder_inputs_get_cache_lengths_that_fit(plugins):
    from rewriter.detect.targets import RUN_SEEDS, generated_feeds

    sets, note = generated_feeds(genai_attention_block())
    assert note == "" and len(sets) == len(RUN_SEEDS)
    feeds = sets[0]
    # a decode step: one new token after a past of 2, the mask covering both (all ones)
    assert feeds["hidden_states"].shape == (3, 1, 64)
    assert feeds["past_key_values.0.key"].shape == (3, 2, 2, 16)
    assert feeds["attention_mask"].shape == (3, 3) and (feeds["attention_mask"] == 1).all()
    # Optimum spells the total as a sum
    optimum = model_from_text("""
        <ir_version: 8, opset_import: ["" : 17]>
        g (int64[batch_size, sequence_length] input_ids,
           int64[batch_size, "past_sequence_length + 1"] attention_mask,
           float[batch_size, 2, past_sequence_length, 4] past) => (int64[batch_size] y) {
            y = ReduceSum <keepdims: int = 0> (attention_mask)
        }""")
    (feeds, *_), _ = generated_feeds(optimum)
    assert feeds["attention_mask"].shape == (3, 3) and feeds["past"].shape == (3, 2, 2, 4)
    # no past length named: every dimension keeps the default
    (feeds, *_), _ = generated_feeds(model_from_text(_RESHAPE))
    assert feeds["x"].shape == (3, 4)


@pytest.mark.parametrize("message, refuses", [
    ("[ONNXRuntimeError] : 6 : RUNTIME_EXCEPTION : Non-zero status code returned while "
     f"running Attention node. Name:'a' Status Message: {ORT_4D_MASK}", True),
    ("[ONNXRuntimeError] : 9 : NOT_IMPLEMENTED : Non-zero status code returned while running "
     "Foo node. Name:'f' Status Message: this layout", True),
    ("[ONNXRuntimeError] : 2 : INVALID_ARGUMENT : Non-zero status code returned while running "
     "Gather node. Name:'' Status Message: indices element out of data bounds, idx=2 must be "
     "within the inclusive range [-2,1]", False),
    ("[ONNXRuntimeError] : 2 : INVALID_ARGUMENT : Non-zero status code returned while running "
     "GroupQueryAttention node. Name:'g' Status Message: seqlens_k[0] = 4 is out of range "
     "[0, 3)", False),
])
def test_onnxruntime_run_errors_that_are_refusals(plugins, message, refuses):
    (target,) = resolve_targets(plugins, ["onnxruntime"])
    assert target.run_refuses(message) is refuses


# -- onnxruntime-genai's attention with a KV cache (fp16, int4) ------------------------------

def genai_attention_block(io: int = TensorProto.FLOAT16, int4: bool = True, softcap: float = 0.0,
                          hidden: int = 64, heads: int = 4, kv_heads: int = 2,
                          max_len: int = 32) -> onnx.ModelProto:
    """One attention block as onnxruntime-genai's model builder writes it for a decoder:
    q/k/v/o projections as com.microsoft::MatMulNBits (4-bit, block 32, accuracy level 4)
    or MatMul, ``attention_mask`` reduced to ``seqlens_k`` and ``total_sequence_length``,
    com.microsoft::GroupQueryAttention with rotary caches and past/present KV
    (``past_key_values.0.key`` -> ``present.0.key``), in ``io`` precision."""
    rng = np.random.default_rng(0)
    head = hidden // heads
    np_io = helper.tensor_dtype_to_np_dtype(io)
    inits, nodes = [], []

    def const(name, array):
        inits.append(numpy_helper.from_array(array, name))
        return name

    def projection(name, x, n_out):
        if int4:
            block = 32
            q = rng.integers(0, 16, size=(n_out, hidden // block, block)).astype(np.uint8)
            const(f"{name}.qweight", (q[..., 0::2] | (q[..., 1::2] << 4)).astype(np.uint8))
            const(f"{name}.scales", (rng.random(n_out * hidden // block) * 0.02).astype(np_io))
            nodes.append(helper.make_node(
                "MatMulNBits", [x, f"{name}.qweight", f"{name}.scales"], [f"{name}/out"],
                name=f"/model/layers.0/attn/{name}/MatMulNBits", domain="com.microsoft",
                K=hidden, N=n_out, bits=4, block_size=block, accuracy_level=4))
        else:
            const(f"{name}.weight", (rng.standard_normal((hidden, n_out)) * 0.05).astype(np_io))
            nodes.append(helper.make_node("MatMul", [x, f"{name}.weight"], [f"{name}/out"],
                                          name=f"/model/layers.0/attn/{name}/MatMul"))
        return f"{name}/out"

    q = projection("q_proj", "hidden_states", hidden)
    k = projection("k_proj", "hidden_states", kv_heads * head)
    v = projection("v_proj", "hidden_states", kv_heads * head)
    const("one", np.array([1], np.int64))
    const("index_1", np.array(1, np.int64))
    sub = "/model/attn_mask_reformat/attn_mask_subgraph"
    nodes += [
        helper.make_node("ReduceSum", ["attention_mask", "one"], ["mask_sum"],
                         name=f"{sub}/ReduceSum", keepdims=1),
        helper.make_node("Sub", ["mask_sum", "one"], ["mask_sub"], name=f"{sub}/Sub"),
        helper.make_node("Cast", ["mask_sub"], ["seqlens_k"], name=f"{sub}/Sub/Cast",
                         to=TensorProto.INT32),
        helper.make_node("Shape", ["attention_mask"], ["mask_shape"], name=f"{sub}/Shape"),
        helper.make_node("Gather", ["mask_shape", "index_1"], ["total_length"],
                         name=f"{sub}/Gather", axis=0),
        helper.make_node("Cast", ["total_length"], ["total_seq_len"],
                         name=f"{sub}/Gather/Cast", to=TensorProto.INT32),
    ]
    frequencies = np.outer(np.arange(max_len), 1.0 / (10000 ** (np.arange(0, head, 2) / head)))
    const("cos_cache", np.cos(frequencies).astype(np_io))
    const("sin_cache", np.sin(frequencies).astype(np_io))
    nodes.append(helper.make_node(
        "GroupQueryAttention",
        [q, k, v, "past_key_values.0.key", "past_key_values.0.value", "seqlens_k",
         "total_seq_len", "cos_cache", "sin_cache"],
        ["attention", "present.0.key", "present.0.value"],
        name="/model/layers.0/attn/GroupQueryAttention", domain="com.microsoft",
        num_heads=heads, kv_num_heads=kv_heads, scale=float(1 / np.sqrt(head)), do_rotary=1,
        rotary_interleaved=0, local_window_size=-1, softcap=softcap))
    out = projection("o_proj", "attention", hidden)
    nodes.append(helper.make_node("Identity", [out], ["output"], name="/model/output"))
    cache = ["batch_size", kv_heads, "past_sequence_length", head]
    present = ["batch_size", kv_heads, "total_sequence_length", head]
    graph = helper.make_graph(nodes, "genai_attention", [
        helper.make_tensor_value_info("hidden_states", io,
                                      ["batch_size", "sequence_length", hidden]),
        helper.make_tensor_value_info("attention_mask", TensorProto.INT64,
                                      ["batch_size", "total_sequence_length"]),
        helper.make_tensor_value_info("past_key_values.0.key", io, cache),
        helper.make_tensor_value_info("past_key_values.0.value", io, cache),
    ], [
        helper.make_tensor_value_info("output", io, ["batch_size", "sequence_length", hidden]),
        helper.make_tensor_value_info("present.0.key", io, present),
        helper.make_tensor_value_info("present.0.value", io, present),
    ], inits)
    model = make_model(graph, opset_imports=[helper.make_opsetid("", 21),
                                                    helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 10
    return model


def _decode_step_feeds(io: int, past: int = 5, seq: int = 1, batch: int = 2) -> dict:
    """Inputs that fit each other as in generation: the mask covers past + new tokens."""
    rng = np.random.default_rng(1)
    np_io = helper.tensor_dtype_to_np_dtype(io)
    return {"hidden_states": rng.standard_normal((batch, seq, 64)).astype(np_io),
            "attention_mask": np.ones((batch, past + seq), np.int64),
            "past_key_values.0.key": rng.standard_normal((batch, 2, past, 16)).astype(np_io),
            "past_key_values.0.value": rng.standard_normal((batch, 2, past, 16)).astype(np_io)}


GENAI_VARIANTS = {"fp16-int4": (TensorProto.FLOAT16, True),
                  "fp32-int4": (TensorProto.FLOAT, True),
                  "fp16": (TensorProto.FLOAT16, False)}
GENAI_ATOL = {TensorProto.FLOAT16: 1e-2, TensorProto.FLOAT: 1e-5}
GQA_NODE = "/model/layers.0/attn/GroupQueryAttention"


@pytest.mark.parametrize("variant", sorted(GENAI_VARIANTS))
def test_genai_attention_with_kv_cache_check_tells_the_truth(plugins, tmp_path, variant):
    pytest.importorskip("openvino")
    io, int4 = GENAI_VARIANTS[variant]
    model = genai_attention_block(io, int4)
    (ort_target, ov_target) = resolve_targets(plugins, ["onnxruntime", "openvino"])

    # onnxruntime loads it and runs a decode step of the generated inputs (batch 3)
    (result,) = check(model, ["onnxruntime"], plugins=plugins).results
    assert result.findings == [] and result.confirmation == (
        "loaded and ran once on generated inputs")
    # OpenVINO compiles it but fails to run it at batch 2: its conversion of
    # GroupQueryAttention takes batch 1 only. The OpenVINO target knows it (KNOWN_INEXACT):
    # a finding without running the model (the genai builder's models declare a head-size
    # dimension the generated inputs do not fill right, so their confirming run fails on
    # the inputs and proves nothing)
    for confirm in (False, None):
        (result,) = check(model, ["openvino"], plugins=plugins, confirm=confirm).results
        (finding,) = result.findings
        assert (finding.reason, finding.node_name) == ("runtime-refused", GQA_NODE)
        assert "conflicts with the reshape pattern" in finding.detail  # OpenVINO's words
        assert "runs only a batch of one" in finding.detail
    # the truth, on inputs of a real decode step: batch 2 fails on OpenVINO, batch 1 runs
    original = ort_target.prepare(model, tmp_path)
    with pytest.raises(RuntimeError, match="conflicts with the reshape pattern"):
        ov_target.prepare(model, tmp_path)(_decode_step_feeds(io, batch=2))
    single = _decode_step_feeds(io, batch=1)
    for key, value in ov_target.prepare(model, tmp_path)(single).items():
        np.testing.assert_allclose(value.astype(np.float32),
                                   original(single)[key].astype(np.float32),
                                   atol=GENAI_ATOL[io], rtol=1e-2)

    # rewrite remedies the refusal (GroupQueryAttention decomposed): batch 2 runs on
    # OpenVINO with onnxruntime's numbers for the original
    rewritten = rewrite(model, ["openvino"], plugins=plugins, verify=False)
    assert [(k[0], k[3]) for k in rewritten.report.applied] == [
        ("decomposition", "com.microsoft::GroupQueryAttention(1)")]
    assert rewritten.report.verification["openvino load"] == "ok"
    feeds = _decode_step_feeds(io, batch=2)
    expected = original(feeds)
    for key, value in ov_target.prepare(rewritten.model, tmp_path)(feeds).items():
        np.testing.assert_allclose(value.astype(np.float32),
                                   expected[key].astype(np.float32),
                                   atol=GENAI_ATOL[io], rtol=1e-2)


def test_genai_attention_with_softcap_is_an_openvino_finding_in_its_words(plugins):
    pytest.importorskip("openvino")
    model = genai_attention_block(TensorProto.FLOAT16, True, softcap=30.0)  # Gemma 2
    (result,) = check(model, ["openvino"], plugins=plugins).results
    (finding,) = result.findings
    assert finding.node_name == "/model/layers.0/attn/GroupQueryAttention"
    assert finding.reason == "runtime-refused"
    assert "softcap is not supported" in finding.detail
    assert check(model, ["onnxruntime"], plugins=plugins).ok  # onnxruntime runs it


# -- the reference evaluator: a NotImplementedError while running is a refusal --------------

def test_reference_evaluator_refusing_at_run_time_is_a_finding_on_its_node(plugins):
    # onnx.reference implements LayerNormalization for stash_type 1 only, and says so only
    # when it runs; onnxruntime runs it
    model = model_from_text("""
        <ir_version: 8, opset_import: ["" : 17]>
        g (float[2, 4] x, float[4] s) => (float[2, 4] y) {
            r = Relu(x)
            y = LayerNormalization <stash_type: int = 10> (r, s)
        }""")
    assert check(model, ["reference"], plugins=plugins, confirm=False).ok
    (result,) = check(model, ["reference"], plugins=plugins).results
    (finding,) = result.findings
    assert (finding.reason, finding.path) == ("runtime-refused",
                                              "graph/node 1 (LayerNormalization)")
    assert finding.detail.startswith("NotImplementedError: LayerNormalization not implemented")
    assert "the node of output 'y'" in finding.detail
    assert check(model, ["onnxruntime"], plugins=plugins).ok
