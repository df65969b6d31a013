"""``GroupQueryAttention`` of com.microsoft in standard ONNX (notation: ``core``):

* ``GroupQueryAttention(query, key, value[, past_key, past_value], seqlens_k[,
  total_sequence_length][, cos_cache, sin_cache][, position_ids, attention_bias,
  head_sink])``: ``N`` query heads share ``N_kv`` K/V heads (query head ``h`` reads K/V head
  ``h // (N / N_kv)``); ``query`` may pack ``(B, S, (N + 2 N_kv) H)``. Per batch entry,
  ``T_b = seqlens_k[b] + 1`` keys exist after the step and ``P_b = max(T_b - S, 0)`` before
  it (0: a prompt, possibly right-padded; ``T_b - S``: token generation or a later chunk).
  ``do_rotary`` rotates Q and the new K at positions ``P_b + s`` (as ``RotaryEmbedding``).
  ``present`` is ``(B, N_kv, max(total_sequence_length, past length), H)``: the past's
  first ``P_b`` rows, the ``S`` new rows, then zeros (onnxruntime's CPU kernel). Query row
  ``s`` sees keys ``j <= P_b + s`` and ``j < T_b`` (and ``j > P_b + s - local_window_size``
  when set); ``softcap`` maps ``x -> softcap * tanh(x / softcap)`` before
  ``attention_bias`` is added; ``smooth_softmax`` adds one zero logit, ``head_sink`` one
  logit per head, to the softmax. Without input 6 (OpenVINO accepts the omission) the
  total is ``max(max(T_b), S)``. ``position_ids`` ``(B, S)`` replace the rotary positions
  (a first prompt, ``S`` equal to the total, reads only ``position_ids[0, 0]``, counting up
  from it, as onnxruntime documents); the masks keep ``P_b + s``. Declined: a quantized
  cache (``k_scale``/``v_scale``), ``q_norm_weight``/``k_norm_weight``, ``query_seqlens``,
  ``causal=0``, ``sliding_window_cache``, ``qk_output``.
"""

from __future__ import annotations

import numpy as np
from onnx import FunctionProto, TensorProto, helper

from rewriter.plugin import Declined
from rewriter.plugin import present as _present

from ..common import unknown_attributes
from .core import DOMAIN, AttentionBody, attention_elem_type, attention_scale
from .rotary import rotate

_GQA_ATTRIBUTES = {"num_heads", "kv_num_heads", "scale", "softcap", "do_rotary",
                   "rotary_interleaved", "local_window_size", "smooth_softmax", "causal",
                   "qk_output", "sliding_window_cache", "k_quant_type", "v_quant_type",
                   "kv_cache_bit_width", "qk_norm_epsilon", "q_norm_epsilon", "k_norm_epsilon"}
_GQA_INPUTS = ["query", "key", "value", "past_key", "past_value", "seqlens_k",
               "total_sequence_length", "cos_cache", "sin_cache", "position_ids",
               "attention_bias", "head_sink"]


def _gqa_declines(ctx) -> bool:
    node = ctx.node
    types = list(ctx.input_types or [])
    elem_type = types[0] if types else None
    if (unknown_attributes(node, _GQA_ATTRIBUTES)
            or not ctx.attribute("num_heads") or not ctx.attribute("kv_num_heads")
            or ctx.attribute("num_heads") % ctx.attribute("kv_num_heads")
            or ctx.attribute("causal", 1) != 1 or ctx.attribute("qk_output", 0)
            or ctx.attribute("sliding_window_cache", 0)
            or any(ctx.attribute(name, "NONE") not in ("NONE", b"NONE")
                   for name in ("k_quant_type", "v_quant_type"))
            or not _present(node.input, 0) or not _present(node.input, 5)
            or _present(node.input, 1) != _present(node.input, 2)
            or _present(node.input, 3) != _present(node.input, 4)
            or _present(node.input, 7) != _present(node.input, 8)
            or _present(node.input, 7) != bool(ctx.attribute("do_rotary", 0))
            or any(_present(node.input, i) for i in range(12, 17)) or len(node.input) > 17
            or not _present(node.output, 0) or len(node.output) > 3):
        return True
    if _present(node.input, 11) and ctx.attribute("smooth_softmax", -1) == 1:
        return True
    # a quantized cache (uint8 / int8 / float8) is declined: past must have the query's type
    return any(i < len(types) and types[i] is not None and types[i] != elem_type
               for i in (1, 2, 3, 4, 7, 8, 10, 11))


def build_group_query_attention(ctx) -> FunctionProto | None:
    """``com.microsoft::GroupQueryAttention`` (see the module docstring)."""
    node = ctx.node
    elem = attention_elem_type(ctx, 0)
    if elem is None or _gqa_declines(ctx):
        raise Declined("a GroupQueryAttention form not decomposed (type, attributes or inputs)")
    num_heads, kv_heads = int(ctx.attribute("num_heads")), int(ctx.attribute("kv_num_heads"))
    window = int(ctx.attribute("local_window_size", -1))
    softcap = float(ctx.attribute("softcap", 0.0))
    b = AttentionBody(ctx.opset, elem)
    zero, one = b.const(0, np.int64), b.const(1, np.int64)

    # (B, S, N, H) query and (B, S, N_kv, H) key and value
    if _present(node.input, 1):
        q = b.op("Reshape", "query", b.ints([0, 0, num_heads, -1]))
        k = b.op("Reshape", "key", b.ints([0, 0, kv_heads, -1]))
        v = b.op("Reshape", "value", b.ints([0, 0, kv_heads, -1]))
    else:  # packed QKV: (B, S, (N + 2 N_kv) H)
        packed = b.op("Reshape", "query", b.ints([0, 0, num_heads + 2 * kv_heads, -1]))
        q, k, v = b.split(packed, [num_heads, kv_heads, kv_heads], axis=2)
    seq = b.dim("query", 1)
    total_b = b.op("Add", b.op("Cast", b.op("Reshape", "seqlens_k", b.ints([-1])),
                                to=TensorProto.INT64), one)          # (B) keys after the step
    past_b = b.op("Sub", total_b, seq)                                 # (B) cached before it
    past_b = b.op("Where", b.op("Greater", past_b, zero), past_b, zero)  # 0 for a first prompt
    steps = b.op("Range", zero, seq, one)
    positions = b.op("Add", b.unsqueeze(past_b, [1]), b.unsqueeze(steps, [0]))  # (B, S)
    # the present length: max(total_sequence_length, past buffer length); the total is
    # max(seqlens_k + 1) (at least S) when input 6 is left out
    if _present(node.input, 6):
        total = b.op("Reshape", b.op("Cast", "total_sequence_length", to=TensorProto.INT64),
                     b.ints([]))
    else:
        total = b.op("ReduceMax", total_b, keepdims=0)
        total = b.op("Where", b.op("Greater", total, seq), total, seq)
    if ctx.attribute("do_rotary", 0):
        rotary_positions = positions
        if _present(node.input, 9):  # given positions; a first prompt reads only the first
            first = b.op("Reshape", b.slice(b.op("Reshape", "position_ids", b.ints([-1])),
                                            [0], [1], [0]), b.ints([1, 1]))
            from_first = b.op("Add", first, b.unsqueeze(steps, [0]))
            rotary_positions = b.op("Where", b.op("Equal", seq, total), from_first,
                                    "position_ids")
        interleaved = bool(ctx.attribute("rotary_interleaved", 0))
        rot_dim = b.op("Mul", b.dim("cos_cache", 1), b.const(2, np.int64))
        cos = b.unsqueeze(b.op("Gather", "cos_cache", rotary_positions, axis=0), [2])
        sin = b.unsqueeze(b.op("Gather", "sin_cache", rotary_positions, axis=0), [2])
        q = rotate(b, q, cos, sin, rot_dim, interleaved)
        k = rotate(b, k, cos, sin, rot_dim, interleaved)
    qh, kh, vh = (b.op("Transpose", x, perm=[0, 2, 1, 3]) for x in (q, k, v))
    if _present(node.input, 3):
        past_len = b.dim("past_key", 2)
        present_len = b.op("Where", b.op("Greater", total, past_len), total, past_len)
    else:
        past_len, present_len = zero, total
    present_k, present_v = (
        _gqa_present(b, past, new, past_b, seq, past_len, present_len)
        for past, new in ((("past_key" if _present(node.input, 3) else None), kh),
                          (("past_value" if _present(node.input, 4) else None), vh)))

    keys, values = present_k, present_v
    if num_heads != kv_heads:  # each K/V head serves num_heads / kv_heads query heads
        group = b.ints([1, 1, num_heads // kv_heads, 1, 1])

        def repeat(x: str) -> str:
            shape = b.op("Shape", x)
            target = b.op("Concat", b.slice(shape, [0], [1], [0]), b.ints([num_heads, -1]),
                          b.slice(shape, [3], [4], [0]), axis=0)
            return b.op("Reshape", b.op("Expand", b.unsqueeze(x, [2]), group), target)
        keys, values = repeat(keys), repeat(values)

    scores = b.op("MatMul", qh, b.op("Transpose", keys, perm=[0, 1, 3, 2]))
    scale = attention_scale(ctx)
    if scale is None:
        head = b.op("Cast", b.dim(qh, 3), to=elem)
        scale_value = b.op("Reciprocal", b.op("Sqrt", head))
    else:
        scale_value = b.literal(scale)
    scores = b.op("Mul", scores, scale_value)
    if softcap > 0:
        cap = b.literal(softcap)
        scores = b.op("Mul", b.op("Tanh", b.op("Div", scores, cap)), cap)
    if _present(node.input, 10):  # (B|1, N|1, S, total): zero columns up to present_len
        bias_shape = b.op("Shape", "attention_bias")
        missing = b.op("Sub", present_len, b.dim("attention_bias", 3))
        pad_shape = b.op("Concat", b.slice(bias_shape, [0], [3], [0]),
                         b.unsqueeze(missing, [0]), axis=0)
        padding = b.op("Expand", b.literal(0.0), pad_shape)
        scores = b.op("Add", scores, b.op("Concat", "attention_bias", padding, axis=3))

    # key j is visible to query row s iff j <= past_b + s, j < total_b (and, with a local
    # window, j > past_b + s - window)
    key_pos = b.op("Range", zero, present_len, one)               # (T)
    last = b.unsqueeze(positions, [2])                             # (B, S, 1)
    visible = b.op("And", b.op("Not", b.op("Greater", key_pos, last)),
                   b.op("Less", key_pos, b.unsqueeze(total_b, [1, 2])))
    if window > 0:
        first = b.op("Sub", last, b.const(window, np.int64))
        visible = b.op("And", visible, b.op("Greater", key_pos, first))
    lowest = b.literal(float(np.finfo(helper.tensor_dtype_to_np_dtype(elem)).min))
    scores = b.op("Where", b.unsqueeze(visible, [1]), scores, lowest)

    sink = None
    if _present(node.input, 11):  # one extra logit per head
        sink = b.op("Reshape", "head_sink", b.ints([1, -1, 1, 1]))
    elif ctx.attribute("smooth_softmax", -1) == 1:  # one extra zero logit
        sink = b.literal(0.0)
    if sink is not None:
        scores_shape = b.op("Shape", scores)
        sink_shape = b.op("Concat", b.slice(scores_shape, [0], [3], [0]), b.ints([1]), axis=0)
        scores = b.op("Concat", scores, b.op("Expand", sink, sink_shape), axis=3)
    probs = b.op("Softmax", scores, axis=-1)
    if sink is not None:
        probs = b.slice(probs, [0], b.unsqueeze(present_len, [0]), [3])
    context = b.op("Transpose", b.op("MatMul", probs, values), perm=[0, 2, 1, 3])
    b.op("Reshape", context, b.ints([0, 0, -1]), outputs=["output"])
    outputs = ["output"]
    if len(node.output) > 1:
        b.op("Identity", present_k, outputs=["present_key"])
        b.op("Identity", present_v, outputs=["present_value"])
        outputs += ["present_key", "present_value"]
    return b.function(DOMAIN, "group_query_attention", _GQA_INPUTS[:len(node.input)], outputs)


def _gqa_present(b: AttentionBody, past: str | None, new: str, past_b: str, seq: str, past_len: str,
                 present_len: str) -> str:
    """``(B, N_kv, present_len, H)``: ``past[:, :, :past_b]`` then ``new`` (B, N_kv, S, H),
    zeros after (per batch entry), as onnxruntime's CPU kernel fills it."""
    shape = b.op("Shape", new)
    lead, head = b.slice(shape, [0], [2], [0]), b.slice(shape, [3], [4], [0])

    def zeros(length: str) -> str:
        return b.op("Expand", b.literal(0.0), b.op("Concat", lead, b.unsqueeze(length, [0]),
                                                    head, axis=0))
    one = b.const(1, np.int64)
    parts = ([past, zeros(b.op("Sub", present_len, past_len))] if past
             else [zeros(present_len)])
    rows = b.op("Concat", *parts, new, zeros(one), axis=2)         # present_len + S + 1
    key_pos = b.unsqueeze(b.op("Range", b.const(0, np.int64), present_len, one), [0])
    start = b.unsqueeze(past_b, [1])
    offset = b.op("Sub", key_pos, start)                            # (B, T)
    new_row = b.op("Add", offset, present_len)
    zero_row = b.op("Add", present_len, seq)
    index = b.op("Where", b.op("Less", key_pos, start), key_pos,
                 b.op("Where", b.op("Less", offset, seq), new_row, zero_row))
    target = b.op("Concat", lead, b.unsqueeze(present_len, [0]), head, axis=0)
    return b.op("GatherElements", rows, b.op("Expand", b.unsqueeze(index, [1, 3]), target),
                axis=2)
