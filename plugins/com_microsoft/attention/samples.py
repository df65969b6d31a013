"""The oracle samples of the attention family (``tests/test_oracles.py`` runs each op's
body against its oracle on them): float32 at ai.onnx opsets 12 and 17, some float16."""

from __future__ import annotations

import numpy as np

from rewriter.plugin import Arg, OpSample

_OPSETS = (12, 17)  # the bodies switch op forms at 13 and 17
B, S, D, N, P = 2, 4, 8, 2, 3  # batch, sequence, hidden, heads, past


def _binary_mask(empty_row: int | None = None):
    """Random 0/1 int32 masks (about 70% ones), optionally with one fully masked row."""
    def draw(rng, shape):
        mask = (rng.random(shape) > 0.3).astype(np.int32)
        if empty_row is not None:
            mask[empty_row] = 0
        return mask
    return draw


def _cos(rng, shape):
    return np.cos(rng.random(shape) * 6)


def _sin(rng, shape):
    return np.sin(rng.random(shape) * 6)


def _megatron_mask(rng, shape):
    """Causal (lower triangular) per batch entry; the last entry never sees key 0."""
    mask = np.tril(np.ones(shape[-2:], np.int32))[None, None].repeat(shape[0], 0)
    mask[-1, 0, :, 0] = 0
    return mask


def _attention_mask_arg(case: str, batch: int, total: int) -> Arg:
    """The ``mask_index`` of an ``Attention`` sample (``mask-2d``, ``mask-1d``, ``mask-2b``
    or 3-D) for ``batch`` entries of ``total`` keys; a 2-D mask of two entries masks the
    second entirely."""
    if "mask-2d" in case:
        return Arg(f"int32[{batch},{total}]", values=_binary_mask(1 if batch == 2 else None))
    if "mask-1d" in case:  # key ends
        return Arg(f"int32[{batch}]", values=[2, total][:batch])
    if "mask-2b" in case:  # key ends, then key starts
        return Arg(f"int32[{2 * batch}]", values=[3, total, 1, 0] if batch == 2 else [3, 1])
    return Arg(f"int32[{batch},4,{total}]", values=_binary_mask())


def _attention_sample(case: str, opset: int, dtypes=None) -> OpSample:
    """``case`` names the inputs: ``past`` (``P`` cached positions; ``past-empty`` none),
    ``batch1`` (one batch entry instead of two), the mask form, ``causal``, ..."""
    past = 0 if "past-empty" in case else P
    batch = 1 if "batch1" in case else 2
    total = S + past if "past" in case else S
    inputs = [f"T[{batch},4,8]", Arg("T[8,24]", low=-1, high=1), "T[24]"]
    outputs, attrs = ["T"], {"num_heads": N}
    if case == "no-bias":
        inputs[2] = None
    if "mask" in case and case != "mask-filter":
        inputs.append(_attention_mask_arg(case, batch, total))
    if "past" in case:
        inputs += [None] * (4 - len(inputs)) + [f"T[2,{batch},{N},{past},{D // N}]"]
        outputs.append("T")
    if "causal" in case:
        attrs["unidirectional"] = 1
    if case == "scale":
        attrs["scale"] = 0.3
    if case == "qkv-sizes":
        attrs["qkv_hidden_sizes"] = [4, 4, 8]
        inputs[1:3] = [Arg("T[8,16]", low=-1, high=1), "T[16]"]
    if case == "attention-bias":
        inputs += [None, None, "T[1,2,4,4]"]
    if case == "mask-filter":
        attrs["mask_filter_value"] = -50.0
        inputs.append(Arg("int32[2,4]", values=_binary_mask()))
    return OpSample(inputs, outputs, attrs, opset=opset, dtypes=dtypes, name=case,
                    tolerance=(2e-2, 2e-2) if dtypes == ["float16"] else None,
                    min_onnxruntime=_NO_BIAS_CRASH if case == "no-bias" else None)


def _megatron_sample(case: str, opset: int) -> OpSample:
    """``Attention`` with Megatron's (B, 1, M, M) mask (GPT-2 exports): ``P`` cached
    positions (``past-empty``: none) of two batch entries (``batch1``: one), ``causal``."""
    past = 0 if "past-empty" in case else P
    batch, seq = (1, 3) if "batch1" in case else (2, 4)
    attrs = {"num_heads": N, "unidirectional": 1} if "causal" in case else {"num_heads": N}
    return OpSample([f"T[{batch},{seq},8]", Arg("T[8,24]", low=-1, high=1), "T[24]",
                     Arg(f"int32[{batch},1,16,16]", values=_megatron_mask),
                     f"T[2,{batch},{N},{past},{D // N}]"],
                    ["T", "T"], attrs, opset=opset, dtypes=_F32,
                    oracle=_OWN + "megatron_attention_oracle", name=f"megatron-mask-{case}")


def _mha_packed_sample(case: str, opset: int, dtypes=None) -> OpSample:
    """Packed QKV (B, S, N, 3, H), packed KV (B, L, N, 2, H) or BNSH key/value (B, N, L,
    H), with N = 2 heads of size 4."""
    length = S if case.startswith("packed-qkv") else 5
    if case.startswith("packed-qkv"):
        inputs = [f"T[2,{S},{N},3,4]", None, None]
    elif case.startswith("packed-kv"):
        inputs = ["T[2,4,8]", f"T[2,{length},{N},2,4]", None]
    else:
        inputs = ["T[2,4,8]", f"T[2,{N},{length},4]", f"T[2,{N},{length},4]"]
    attrs = {"num_heads": N}
    if "mask" in case:
        inputs += [None, Arg(f"int32[2,{length}]", values=_binary_mask())]
    if "causal" in case:
        attrs["unidirectional"] = 1
    outputs = ["T", "T", "T"] if "present" in case else ["T"]
    oracle = None if case.startswith("bnsh") else _OWN + "mha_unpacked_oracle"
    return OpSample(inputs, outputs, attrs, opset=opset, dtypes=dtypes, name=case,
                    oracle=oracle, tolerance=(2e-2, 2e-2) if dtypes == ["float16"] else None)


def _mha_sample(case: str, opset: int, dtypes=None) -> OpSample:
    length = S if case.startswith(("self", "causal")) or "past" in case else 5
    total = length + (P if "past" in case else 0)
    batch = 1 if "batch1" in case else 2
    inputs = [f"T[{batch},4,8]", f"T[{batch},{length},8]", f"T[{batch},{length},8]"]
    outputs, attrs = ["T"], {"num_heads": N}
    if "bias" in case and case != "attention-bias":
        inputs.append("T[24]")
    if "mask" in case:
        inputs += [None] * (4 - len(inputs))
        inputs.append(Arg(f"int32[{batch},{total}]", values=_binary_mask()) if "2d" in case
                      else Arg(f"int32[{batch},4,{total}]", values=_binary_mask()) if "3d" in case
                      else Arg(f"int32[{batch}]", values=[2, total][:batch]))
    if case == "attention-bias":
        inputs += [None, None, f"T[2,1,4,{total}]"]
    if "past" in case:
        inputs += [None] * (6 - len(inputs)) + [f"T[{batch},2,{P},4]"] * 2
        outputs += ["T", "T"]
    if case.startswith("causal") or "-causal" in case:
        attrs["unidirectional"] = 1
    return OpSample(inputs, outputs, attrs, opset=opset, dtypes=dtypes, name=case,
                    tolerance=(2e-2, 2e-2) if dtypes == ["float16"] else None,
                    min_onnxruntime=_HEAD_BROADCAST_BIAS if case == "attention-bias" else None)


def _rotary_sample(case: str, opset: int, dtypes=None) -> OpSample:
    head, max_len = 8, 16
    rot = 4 if case == "partial" else head
    attrs = {} if case == "no-num-heads" else {"num_heads": N}
    if case == "partial":
        attrs["rotary_embedding_dim"] = rot
    if case == "interleaved":
        attrs["interleaved"] = 1
    x = "T[2,2,4,8]" if case == "bnsh" else "T[2,4,16]"
    pos = (Arg("int64[1]", values=[3]) if case == "single-position"
           else Arg("int64[2,4]", low=0, high=max_len))
    cache = f"T[{max_len},{rot // 2}]"
    return OpSample([x, pos, Arg(cache, values=_cos), Arg(cache, values=_sin)],
                    attributes=attrs, opset=opset, dtypes=dtypes, name=case,
                    tolerance=(2e-2, 2e-2) if dtypes == ["float16"] else None)


def _embed_layer_norm_sample(case: str, opset: int) -> OpSample:
    inputs = [Arg("int32[2,4]", low=0, high=10), None, "T[10,8]", "T[16,8]", None, "T[8]",
              "T[8]"]
    if case == "segments":
        inputs[1], inputs[4] = Arg("int32[2,4]", low=0, high=2), "T[2,8]"
    if case == "mask":  # a 2 is not counted: onnxruntime counts the ones
        inputs.append(Arg("int32[2,4]", values=[[2, 1, 0, 1], [1, 1, 1, 0]]))
    if case.startswith("position-ids"):
        rows = B if case == "position-ids" else 1
        inputs += [None, Arg(f"int32[{rows},4]", low=0, high=16)]
    return OpSample(inputs, ["T", "int32", "T"], {"epsilon": 1e-5}, opset=opset, name=case)


# min_onnxruntime of the samples whose oracle, onnxruntime's own kernel, older releases lack
# or compute otherwise (found on 1.21.0, 1.23.2, 1.30.0 and 1.32.0; releases between them
# were not available to check)
_NO_BIAS_CRASH = ("1.32", "the com.microsoft Attention kernel of onnxruntime 1.21.0, 1.23.2 "
                  "and 1.30.0 crashes the process (segmentation fault) without a bias input")
_HEAD_BROADCAST_BIAS = (
    "1.23", "onnxruntime 1.21.0 broadcasts an attention_bias of one head, (B, 1, S, T), "
    "wrongly for the batch entries after the first (MultiHeadAttention given it per head "
    "agrees); 1.23.2 and 1.32.0 agree with the decomposition")
_GQA_MIN_ONNXRUNTIME = {
    "window": ("1.24", "onnxruntime's local_window_size excluded the current token before "
               "its pull request 25927 (after 1.23.2): the window now includes it, as Hugging "
               "Face's sliding window and the decomposition do; 1.23.2 differs, 1.30.0 agrees"),
    "prompt-padded": ("1.30", "onnxruntime 1.21.0 and 1.23.2 compute the padding rows of a "
                      "right-padded prompt (rows from seqlens_k[b] + 1 on) otherwise than "
                      "1.30.0 and 1.32.0, which agree with the decomposition; the other rows "
                      "agree"),
    "prompt-present-unused": ("1.30", "the GroupQueryAttention schema of onnxruntime 1.23.2 "
                              "requires the present outputs ('output size 1 not in range "
                              "[min=3, max=4]')"),
    **dict.fromkeys(("head-sink", "attention-bias", "prompt-position-ids",
                     "token-position-ids"), (
        "1.23", "onnxruntime 1.21.0's GroupQueryAttention schema has no position_ids, "
        "attention_bias or head_sink input (1.23.2 has them)")),
}
_DMMHA_MIN_ONNXRUNTIME = {
    "first-step": ("1.32", "with past_sequence_length 0 the only key is the new one, so the "
                   "output is the value input and present slot 0 the new key; onnxruntime "
                   "1.21.0, 1.23.2 and 1.30.0 give other values for both"),
    "attention-bias": _HEAD_BROADCAST_BIAS,
}


def _gqa_sample(case: str, opset: int, dtypes=None) -> OpSample:
    """The prompt form (no past, or a past buffer the prompt fills) or token generation (a
    past buffer of max length, the new K/V written at each entry's ``seqlens_k[b]``)."""
    n_heads, kv_heads = {"multi-query": (4, 1), "token-one-head": (1, 1)}.get(case, (4, 2))
    head = 32 if case == "rotary-partial" else 16
    batch, max_len = 2, 8
    if "prompt" in case and case != "subsequent-prompt":
        seq, seqlens = 4, [3, 3]
        if case == "prompt-padded":
            seqlens = [3, 1]  # right padding: entry 1 has two tokens
    elif case == "subsequent-prompt":  # one entry, 3 new tokens after 2 cached ones
        batch, seq, seqlens = 1, 3, [4]
    elif case == "token-one-head":  # 1-sized batch, heads and new tokens
        batch, seq, seqlens = 1, 1, [5]
    else:
        seq, seqlens = 1, [5, 2]
    total = max(seqlens) + 1
    past_len = {"prompt": None, "prompt-padded": None, "rotary-prompt": None,
                "prompt-present-unused": None, "token-grown-cache": total - 1}.get(case, max_len)
    inputs = [f"T[{batch},{seq},{n_heads * head}]", f"T[{batch},{seq},{kv_heads * head}]",
              f"T[{batch},{seq},{kv_heads * head}]", None, None,
              Arg(f"int32[{batch}]", values=seqlens), Arg("int32[]", values=total)]
    if past_len is not None:
        inputs[3:5] = [f"T[{batch},{kv_heads},{past_len},{head}]"] * 2
    attrs = {"num_heads": n_heads, "kv_num_heads": kv_heads}
    if "rotary" in case:
        inputs += [Arg(f"T[{max_len + 4},8]", values=_cos), Arg(f"T[{max_len + 4},8]",
                                                                values=_sin)]
        attrs["do_rotary"] = 1
        if case == "rotary-interleaved":
            attrs["rotary_interleaved"] = 1
    if case == "packed-rotary":
        inputs[0] = f"T[{batch},{seq},{(n_heads + 2 * kv_heads) * head}]"
        inputs[1:3] = [None, None]
    if case.endswith("position-ids"):  # arbitrary positions (only the first in a prompt)
        inputs.append(Arg(f"int64[{batch},{seq}]", low=0, high=max_len + 4))
    attrs.update({"window": {"local_window_size": 3}, "softcap": {"softcap": 1.5},
                  "smooth": {"smooth_softmax": 1}, "scale": {"scale": 0.3}}.get(case, {}))
    if case in ("head-sink", "attention-bias"):
        inputs += [None] * (9 - len(inputs))
        if case == "head-sink":
            inputs += [None, None, f"T[{n_heads}]"]
        else:
            inputs += [None, f"T[{batch},1,{seq},{total}]"]
            attrs["softcap"] = 2.0  # the bias is added after the softcap
    # (onnxruntime ignores the past when the present outputs are not requested: only the
    # prompt form is comparable without them)
    outputs = ["T"] if case == "prompt-present-unused" else ["T", "T", "T"]
    return OpSample(inputs, outputs, attrs, opset=opset, dtypes=dtypes, name=case,
                    tolerance=(2e-2, 2e-2) if dtypes == ["float16"] else None,
                    min_onnxruntime=_GQA_MIN_ONNXRUNTIME.get(case.removeprefix("rotary-")))


def _dmmha_sample(case: str, opset: int) -> OpSample:
    """Self-attention on one new token with past/present buffers of max length ``M``: the
    new K/V go to slot ``past_sequence_length``, attention reads slots ``0 .. past``."""
    batch, heads, head, max_len = (1, 1, 8, 6) if case == "one-head" else (4, 2, 8, 6)
    past = {"first-step": 0, "last-slot": max_len - 1}.get(case, 3)
    hidden = heads * head
    buffer = f"T[{batch},{heads},{max_len},{head}]"
    inputs = [f"T[{batch},1,{hidden}]"] * 3 + [None, None, buffer, buffer,
                                              Arg("int32[1]", values=[past]), None, None, None]
    attrs = {"num_heads": heads, "past_present_share_buffer": 1}
    if case.startswith("beam"):  # 2 sequences of 2 beams each
        beam = 1 if case == "beam-width-1" else 2
        inputs[8:10] = [Arg("int32[1]", values=[beam]),
                        Arg(f"int32[{batch // beam},{beam},{max_len}]", low=0, high=beam)]
    if case in ("bias", "beams"):
        inputs[10] = f"T[{3 * hidden}]"
    if "mask" in case:
        inputs[3] = Arg(f"int32[{batch},{past + 1}]", values=_binary_mask())
        attrs["mask_filter_value"] = -50.0
    if case == "attention-bias":
        inputs[4] = f"T[{batch},1,1,{past + 1}]"
    if case == "scale":
        attrs["scale"] = 0.4
    while inputs[-1] is None:
        inputs.pop()
    return OpSample(inputs, ["T", "T", "T"], attrs, opset=opset, name=case,
                    min_onnxruntime=_DMMHA_MIN_ONNXRUNTIME.get(case))


ATTENTION_CASES = ["plain", "no-bias", "mask-2d", "mask-1d", "mask-2b", "mask-3d", "causal",
                   "causal-mask-2d", "past", "past-causal-mask-2d", "scale", "qkv-sizes",
                   "attention-bias", "mask-filter",
                   # a past state of each kind: empty or not, batch of 1 or 2, causal or not,
                   # each mask form (issue 27)
                   "past-causal", "past-mask-1d", "past-mask-2b", "past-mask-3d",
                   "past-empty", "past-empty-causal-mask-2d", "past-batch1",
                   "past-batch1-causal", "past-batch1-causal-mask-2d", "past-batch1-mask-1d",
                   "past-batch1-mask-3d"]
MHA_CASES = ["self", "cross", "bias", "mask-2d", "mask-1d", "mask-3d", "causal",
             "causal-mask-2d", "past", "past-bias-mask-2d", "attention-bias",
             "past-batch1-causal", "past-batch1-mask-1d"]
MHA_PACKED_CASES = ["packed-qkv", "packed-qkv-causal-mask-present", "packed-kv",
                    "packed-kv-mask", "bnsh-kv", "bnsh-kv-mask-present"]
MEGATRON_CASES = ["past", "past-empty", "past-batch1", "past-batch1-causal"]
ROTARY_CASES = ["plain", "no-num-heads", "bnsh", "interleaved", "partial", "single-position"]
EMBED_CASES = ["mask", "no-mask", "segments", "position-ids", "position-ids-broadcast"]
GQA_CASES = ["prompt", "prompt-padded", "prompt-past-buffer", "token", "token-grown-cache",
             "subsequent-prompt", "rotary-prompt", "rotary-token", "rotary-interleaved",
             "rotary-partial", "packed-rotary", "window", "softcap", "smooth", "head-sink",
             "attention-bias", "scale", "multi-query", "prompt-present-unused", "token-one-head",
             "rotary-prompt-position-ids", "rotary-token-position-ids"]
DMMHA_CASES = ["plain", "bias", "mask", "attention-bias", "scale", "first-step",
               "last-slot", "beams", "beams-mask", "beam-width-1", "one-head"]
_F32, _F16 = ["float"], ["float16"]
_OWN = "rewriter_plugins.com_microsoft.attention.kernels:"


def oracles() -> dict[str, dict]:
    """Per op: its oracle (onnxruntime's CPU contrib kernel, or the numpy of ``kernels`` where
    onnxruntime has none) and samples, float32 at opsets 12 and 17, some float16."""
    own = _OWN
    return {
        "Attention": dict(oracle="onnxruntime", samples=[
            *[_attention_sample(c, o, _F32) for c in ATTENTION_CASES for o in _OPSETS],
            *[_attention_sample(c, 17, _F16) for c in ("plain", "past-causal-mask-2d",
                                                       "mask-1d")],
            # Megatron's (B, 1, M, M) mask: onnxruntime's CPU kernel refuses it; its CUDA
            # kernel reads rows P .. P+S, columns 0 .. T: the CPU kernel on that 3-D slice
            *[_megatron_sample(c, o) for c in MEGATRON_CASES for o in _OPSETS]]),
        "MultiHeadAttention": dict(oracle="onnxruntime", samples=[
            *[_mha_sample(c, o, _F32) for c in MHA_CASES for o in _OPSETS],
            *[_mha_sample(c, 17, _F16) for c in ("cross", "past-bias-mask-2d")],
            # packed forms: onnxruntime's CPU kernel refuses them, so its own kernel runs
            # on the unpacked tensors (mha_unpacked_oracle)
            *[_mha_packed_sample(c, o, _F32) for c in MHA_PACKED_CASES for o in _OPSETS],
            *[_mha_packed_sample(c, 17, _F16) for c in ("packed-qkv", "bnsh-kv")]]),
        "RotaryEmbedding": dict(oracle="onnxruntime", samples=[
            *[_rotary_sample(c, o, _F32) for c in ROTARY_CASES for o in _OPSETS],
            *[_rotary_sample(c, 17, _F16) for c in ("plain", "interleaved")]]),
        "EmbedLayerNormalization": dict(oracle="onnxruntime", samples=[
            _embed_layer_norm_sample(c, o) for c in EMBED_CASES for o in _OPSETS]),
        "RemovePadding": dict(oracle=own + "remove_padding_oracle", samples=[
            OpSample(["T[3,5,4]", Arg("int32[3]", values=[2, 5, 0])],
                     ["T", "int32", "int32", "int32"], opset=o) for o in _OPSETS]),
        "RestorePadding": dict(oracle=own + "restore_padding_oracle", samples=[
            OpSample(["T[7,4]", Arg("int32[3,5]", values=[[0, 1, 5, 6, 7], [8, 9, 2, 3, 4],
                                                         [10, 11, 12, 13, 14]])], opset=o)
            for o in _OPSETS]),
        "GroupQueryAttention": dict(oracle="onnxruntime", samples=[
            *[_gqa_sample(c, o, _F32) for c in GQA_CASES for o in _OPSETS],
            *[_gqa_sample(c, 17, _F16) for c in ("prompt-padded", "rotary-token",
                                                 "packed-rotary", "window", "head-sink")]]),
        "DecoderMaskedMultiHeadAttention": dict(oracle="onnxruntime", samples=[
            _dmmha_sample(c, o) for c in DMMHA_CASES for o in _OPSETS]),
    }
