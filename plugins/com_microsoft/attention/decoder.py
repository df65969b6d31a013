"""``DecoderMaskedMultiHeadAttention`` of com.microsoft in standard ONNX (notation:
``core``):

* ``DecoderMaskedMultiHeadAttention(query, key, value[, mask_index, attention_bias],
  past_key, past_value, past_sequence_length[, beam_width, cache_indirection, bias])``,
  self-attention on one new token with ``past_present_share_buffer``: ``past_*`` are
  ``(B, N, M, H)`` buffers of max length ``M``; ``present = past`` with row ``P =
  past_sequence_length`` replaced by the new K/V; attention reads rows ``0 .. P``, with
  ``mask_index`` ``(B, P + 1)`` and ``attention_bias`` as ``MultiHeadAttention``'s. With
  ``beam_width > 1`` and ``cache_indirection`` ``(B / beam, beam, M)``, row ``t < P`` of
  batch row ``i * beam + j`` is read from row ``i * beam + cache_indirection[i, j, t]``.
  Declined: cross-attention (no past), packed QKV, separate past and present buffers,
  ``output_qk``, an ``attention_bias`` together with beams.
"""

from __future__ import annotations

import numpy as np
from onnx import FunctionProto, TensorProto

from rewriter.plugin import Declined
from rewriter.plugin import present as _present

from ..common import unknown_attributes
from .core import (
    DEFAULT_MASK_FILTER_VALUE,
    DOMAIN,
    AttentionBody,
    add_qkv_bias,
    attend,
    attention_elem_type,
    attention_scale,
    split_heads,
)

_DMMHA_ATTRIBUTES = {"num_heads", "scale", "mask_filter_value", "past_present_share_buffer",
                     "output_qk"}
_DMMHA_INPUTS = ["query", "key", "value", "mask_index", "attention_bias", "past_key",
                 "past_value", "past_sequence_length", "beam_width", "cache_indirection",
                 "bias"]


def build_decoder_masked_mha(ctx) -> FunctionProto | None:
    """``com.microsoft::DecoderMaskedMultiHeadAttention``, self-attention with a shared
    past/present buffer (see the module docstring)."""
    node = ctx.node
    elem = attention_elem_type(ctx, 0, 1, 2, 4, 5, 6, 10)
    num_heads = ctx.attribute("num_heads")
    beams = _present(node.input, 8) and _present(node.input, 9)
    if (elem is None or not num_heads or unknown_attributes(node, _DMMHA_ATTRIBUTES)
            or not ctx.attribute("past_present_share_buffer", 0) or ctx.attribute("output_qk", 0)
            or not all(_present(node.input, i) for i in (0, 1, 2, 5, 6, 7))
            or len(node.input) > 11
            or (beams and _present(node.input, 4))  # a bias read through the beams: declined
            or not _present(node.output, 0) or len(node.output) > 3
            or _present(node.output, 1) != _present(node.output, 2)):
        raise Declined("needs num_heads, one known float type, past_present_share_buffer=1, "
                       "no output_qk, known attributes; query, key, value, past_key, "
                       "past_value and past_sequence_length given; no attention_bias with "
                       "beams; present_key and present_value both or neither")
    for i in (0, 1, 2):
        if _present(node.input, i) and ctx.rank(node.input[i]) not in (None, 3):
            raise Declined("query, key and value must be 3-D")
    mask_rank = ctx.rank(node.input[3]) if _present(node.input, 3) else None
    if mask_rank not in (None, 2):
        raise Declined("the mask must be 2-D")
    b = AttentionBody(ctx.opset, elem)
    zero, one = b.const(0, np.int64), b.const(1, np.int64)
    q, k, v = "query", "key", "value"
    if _present(node.input, 10):
        q, k, v = add_qkv_bias(b, q, k, v, "bias")
    qh, kh, vh = (split_heads(b, x, num_heads) for x in (q, k, v))     # (B, N, 1, H)
    past_len = b.op("Reshape", b.op("Cast", "past_sequence_length", to=TensorProto.INT64),
                    b.ints([]))
    total = b.op("Add", past_len, one)
    slots = b.op("Range", zero, b.dim("past_key", 2), one)
    is_new = b.op("Reshape", b.op("Equal", slots, past_len), b.ints([1, 1, -1, 1]))
    present_k = b.op("Where", is_new, kh, "past_key")
    present_v = b.op("Where", is_new, vh, "past_value")
    total_1 = b.unsqueeze(total, [0])
    keys = b.slice(present_k, [0], total_1, [2])
    values = b.slice(present_v, [0], total_1, [2])
    if beams:
        keys, values = (_through_beams(b, x, past_len, total) for x in (present_k, present_v))
    biases = []
    if _present(node.input, 3):
        b.set_mask_values(float(ctx.attribute("mask_filter_value", DEFAULT_MASK_FILTER_VALUE)))
        mask = b.slice("mask_index", [0], total_1, [1])
        biases.append(b.unsqueeze(b.where_masked(b.op("Greater", mask, b.const(0, np.int32))),
                                  [1, 2]))
    if _present(node.input, 4):
        biases.append("attention_bias")
    b.op("Identity", attend(b, qh, keys, values, attention_scale(ctx), biases), outputs=["output"])
    outputs = ["output"]
    if len(node.output) > 1:
        b.op("Identity", present_k, outputs=["present_key"])
        b.op("Identity", present_v, outputs=["present_value"])
        outputs += ["present_key", "present_value"]
    return b.function(DOMAIN, "decoder_masked_mha", _DMMHA_INPUTS[:len(node.input)], outputs)


def _through_beams(b: AttentionBody, present: str, past_len: str, total: str) -> str:
    """``(B, N, T, H)``: key ``t < past_len`` of row ``r = i * beam + j`` read from row
    ``i * beam + cache_indirection[i, j, t]`` of ``present`` (B, N, M, H); the new key
    (``t = past_len``) and every key when ``beam_width`` is 1 from row ``r`` itself."""
    zero, one = b.const(0, np.int64), b.const(1, np.int64)
    batch = b.dim(present, 0)
    beam = b.op("Reshape", b.op("Cast", "beam_width", to=TensorProto.INT64), b.ints([]))
    indirection = b.op("Reshape", b.op("Cast", "cache_indirection", to=TensorProto.INT64),
                       b.op("Concat", b.unsqueeze(batch, [0]), b.ints([-1]), axis=0))
    indirection = b.slice(indirection, [0], b.unsqueeze(total, [0]), [1])    # (B, T)
    rows = b.op("Range", zero, batch, one)
    first_of_group = b.op("Sub", rows, b.op("Mod", rows, beam))
    source = b.op("Add", b.unsqueeze(first_of_group, [1]), indirection)
    steps = b.op("Range", zero, total, one)
    own = b.op("Or", b.unsqueeze(b.op("Equal", steps, past_len), [0]),
               b.op("Not", b.op("Greater", beam, one)))
    source = b.op("Where", own, b.unsqueeze(rows, [1]), source)                    # (B, T)
    steps_2d = b.op("Expand", b.unsqueeze(steps, [0]), b.op("Shape", source))
    index = b.op("Concat", b.unsqueeze(source, [2]), b.unsqueeze(steps_2d, [2]), axis=2)
    gathered = b.op("GatherND", b.op("Transpose", present, perm=[0, 2, 1, 3]), index)
    return b.op("Transpose", gathered, perm=[0, 2, 1, 3])
