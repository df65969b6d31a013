"""``Attention`` and ``MultiHeadAttention`` of com.microsoft in standard ONNX (the core, the
notation and the mask forms: ``core``).

* ``Attention(input, weights[, bias[, mask_index[, past[, attention_bias]]]])``:
  ``QKV = input @ weights + bias`` split into ``(hq, hk, hv)`` (``qkv_hidden_sizes``, default
  three equal parts); ``past`` is ``(2, B, N, P, H)`` concatenated before K and V; ``present``
  is ``Concat(K, V)`` on a new axis 0. ``mask_index``: ``(B, T)`` or ``(B, S, T)`` raw 0/1
  masks (0 masked), ``(B)`` right-padding end positions (keys ``>= end`` masked), ``(2B)``
  ends then starts (keys ``< start`` masked too), and Megatron's ``(B, 1, M, M)`` (rows
  ``P .. P + S``, columns ``0 .. T``; onnxruntime's CPU kernel refuses it, CUDA reads it so:
  checked against the CPU kernel given that slice as a 3-D mask).
  An unknown mask rank is dispatched at run time (``If`` on the rank); a 1-D mask is read
  as ``(B)`` or ``(2B)`` (the GPU-only ``(3B + 2)`` form is declined when the shapes are
  known, misread otherwise). Declined: ``do_rotary``, ``past_present_share_buffer``,
  ``past_sequence_length``.
* ``MultiHeadAttention(query, key, value[, bias[, key_padding_mask[, attention_bias[,
  past_key, past_value]]]])``: ``query``/``key``/``value`` are ``(B, S|L, D)``; ``bias``
  adds to each; the key padding mask as ``Attention``'s; ``past_key``/``past_value``
  ``(B, N, P, H)`` concatenated before K/V give ``present_key``/``present_value``. Also the
  forms onnxruntime's fusions write for diffusion models and its CUDA kernels read: packed
  QKV (``query`` ``(B, S, N, 3, H)``, no key or value: ``q, k, v = query[:, :, :, i]``,
  as ``fusion_attention_unet.py`` interleaves the weights), packed KV (``key`` ``(B, L, N,
  2, H)``, no value), and key/value already in ``(B, N, L, H)`` (a cross-attention cache;
  ``present`` is then key/value themselves). Declined: a bias or past with those three
  forms, ``past_sequence_length``, ``cache_indirection``, ``qk``.
"""

from __future__ import annotations

import numpy as np
from onnx import FunctionProto

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
    causal_bias,
    mask_bias,
    split_heads,
)

# -- Attention ------------------------------------------------------------------------------

_ATTENTION_ATTRIBUTES = {"num_heads", "unidirectional", "qkv_hidden_sizes", "scale",
                         "mask_filter_value", "do_rotary", "past_present_share_buffer",
                         "rotary_embedding_dim"}


def build_attention(ctx) -> FunctionProto | None:
    """``com.microsoft::Attention`` (see the module docstring)."""
    node = ctx.node
    elem = attention_elem_type(ctx, 0, 1, 2, 4, 5)
    if (elem is None or not (_present(node.input, 0) and _present(node.input, 1))
            or not _present(node.output, 0) or len(node.output) > 2
            or _present(node.input, 6) or len(node.input) > 7
            or unknown_attributes(node, _ATTENTION_ATTRIBUTES)
            or ctx.attribute("do_rotary", 0) or ctx.attribute("past_present_share_buffer", 0)):
        raise Declined("needs input and weights given, one known float type, no "
                       "past_sequence_length (input 6), one or two outputs, known attributes, "
                       "no rotary or shared past buffer")
    num_heads = ctx.attribute("num_heads")
    if not num_heads:
        raise Declined("num_heads must be given")
    sizes = ctx.attribute("qkv_hidden_sizes")
    sizes = [int(v) for v in sizes] if sizes else None
    if sizes is not None and (len(sizes) != 3 or any(v <= 0 or v % num_heads for v in sizes)):
        raise Declined("qkv_hidden_sizes must be 3 positive multiples of num_heads")
    if attention_mask_declines(ctx, 3):
        raise Declined("mask_index has a form the body cannot read (rank not 1-4, or the GPU-only "
                       "1-D (3B + 2) form)")

    names = ["input", "weights", "bias", "mask_index", "past", "attention_bias"]
    b = AttentionBody(ctx.opset, elem)
    qkv = b.op("MatMul", "input", "weights")
    if _present(node.input, 2):
        qkv = b.op("Add", qkv, "bias")
    return attention_from_qkv(ctx, b, qkv, sizes, names[:len(node.input)], "attention",
                              mask=3, past=4, attention_bias=5)


def attention_mask_declines(ctx, mask: int) -> bool:
    """Whether ``Attention``'s ``mask_index`` (node input ``mask``) has a form the body
    cannot read: a rank other than 1-4, or the GPU-only ``(3B + 2)`` 1-D form."""
    node = ctx.node
    if not _present(node.input, mask):
        return False
    shape = ctx.shape(node.input[mask])
    if shape is None:
        return False
    batch_dim = (ctx.shape(node.input[0]) or [None])[0]
    return len(shape) not in (1, 2, 3, 4) or bool(
        len(shape) == 1 and shape[0] and batch_dim and shape[0] not in (batch_dim,
                                                                        2 * batch_dim))


def attention_from_qkv(ctx, b: AttentionBody, qkv: str, sizes: list[int] | None, inputs: list[str],
                       name: str, *, mask: int, past: int,
                       attention_bias: int | None) -> FunctionProto | None:
    """The body of ``Attention`` (and ``QAttention``) from the projected ``qkv`` (B, S,
    hq + hk + hv): heads, ``past``, masks and the core; ``mask``/``past``/``attention_bias``
    are the node's input indices, ``inputs`` the function's formal input names (the mask
    is called ``mask_index``, the past ``past``). Outputs ``output`` and ``present``."""
    node = ctx.node
    num_heads = ctx.attribute("num_heads")
    has_mask = _present(node.input, mask)
    if has_mask or ctx.attribute("unidirectional", 0):
        b.set_mask_values(float(ctx.attribute("mask_filter_value", DEFAULT_MASK_FILTER_VALUE)))
    q, k, v = b.split(qkv, sizes, axis=-1, parts=3)
    qh, kh, vh = (split_heads(b, x, num_heads) for x in (q, k, v))
    if _present(node.input, past):
        zero, one = b.const(0, np.int64), b.const(1, np.int64)
        kh = b.op("Concat", b.op("Gather", "past", zero, axis=0), kh, axis=2)
        vh = b.op("Concat", b.op("Gather", "past", one, axis=0), vh, axis=2)
    s_len, t_len = b.dim(qh, 2), b.dim(kh, 2)
    biases = []
    if has_mask:
        biases.append(mask_bias(b, "mask_index", ctx.rank(node.input[mask]), s_len, t_len,
                                 b.dim(inputs[0], 0)))
    if ctx.attribute("unidirectional", 0):
        biases.append(causal_bias(b, s_len, t_len))
    if attention_bias is not None and _present(node.input, attention_bias):
        biases.append("attention_bias")
    outputs = ["output"]
    b.op("Identity", attend(b, qh, kh, vh, attention_scale(ctx), biases), outputs=["output"])
    if _present(node.output, 1):
        b.op("Concat", b.unsqueeze(kh, [0]), b.unsqueeze(vh, [0]), axis=0,
             outputs=["present"])
        outputs.append("present")
    elif len(node.output) > 1:
        raise Declined("only output and present are computed (an output after an empty "
                       "present is used)")
    return b.function(DOMAIN, name, inputs, outputs)


# -- MultiHeadAttention ---------------------------------------------------------------------

_MHA_ATTRIBUTES = {"num_heads", "unidirectional", "scale", "mask_filter_value"}


def _mha_form(ctx) -> str | None:
    """Which of the forms ``MultiHeadAttention`` takes a node is in: ``"separate"`` (3-D
    query, key and value), ``"packed-qkv"`` (query (B, S, N, 3, H), no key or value),
    ``"packed-kv"`` (key (B, L, N, 2, H), no value) or ``"bnsh-kv"`` (key and value already
    (B, N, L, H)); None for anything else. An unknown rank is read as the form the present
    inputs allow (3-D where all three are given)."""
    node = ctx.node
    q_rank = ctx.rank(node.input[0])
    k_rank = ctx.rank(node.input[1]) if _present(node.input, 1) else None
    v_rank = ctx.rank(node.input[2]) if _present(node.input, 2) else None
    if not _present(node.input, 1):
        return "packed-qkv" if not _present(node.input, 2) and q_rank in (None, 5) else None
    if q_rank not in (None, 3):
        return None
    if not _present(node.input, 2):
        return "packed-kv" if k_rank in (None, 5) else None
    if 4 in (k_rank, v_rank):
        return "bnsh-kv" if {k_rank, v_rank} <= {4, None} else None
    return "separate" if {k_rank, v_rank} <= {3, None} else None


def _unpack(b: AttentionBody, packed: str, parts: int) -> list[str]:
    """(B, S, N, parts, H) -> ``parts`` tensors (B, N, S, H)."""
    return [b.op("Transpose", b.squeeze(x, [3]), perm=[0, 2, 1, 3])
            for x in b.split(packed, [1] * parts, axis=3)]


def build_multi_head_attention(ctx) -> FunctionProto | None:
    """``com.microsoft::MultiHeadAttention`` (see the module docstring)."""
    node = ctx.node
    elem = attention_elem_type(ctx, 0, 1, 2, 3, 5, 6, 7)
    num_heads = ctx.attribute("num_heads")
    if (elem is None or not num_heads or unknown_attributes(node, _MHA_ATTRIBUTES)
            or not _present(node.input, 0)
            or any(_present(node.input, i) for i in (8, 9)) or len(node.input) > 10
            or _present(node.output, 3) or len(node.output) > 3
            or _present(node.input, 6) != _present(node.input, 7)):
        raise Declined("needs query, num_heads, one known float type and known attributes; no "
                       "cache inputs 8-9, no output 3, past_key and past_value both or neither")
    form = _mha_form(ctx)
    if form is None or (form != "separate" and (_present(node.input, 3)
                                                or _present(node.input, 6))):
        raise Declined("this query/key/value layout is not decomposed (or a bias or a past with "
                       "packed or BNSH inputs)")
    names = ["query", "key", "value", "bias", "key_padding_mask", "attention_bias",
             "past_key", "past_value"]
    inputs = names[:len(node.input)]
    b = AttentionBody(ctx.opset, elem)
    if _present(node.input, 4) or ctx.attribute("unidirectional", 0):
        b.set_mask_values(float(ctx.attribute("mask_filter_value", DEFAULT_MASK_FILTER_VALUE)))
    if form == "packed-qkv":
        qh, kh, vh = _unpack(b, "query", 3)
    else:
        qh = split_heads(b, "query", num_heads)
        if form == "packed-kv":
            kh, vh = _unpack(b, "key", 2)
        elif form == "bnsh-kv":
            kh, vh = "key", "value"
        else:
            q, k, v = "query", "key", "value"
            if _present(node.input, 3):
                q, k, v = add_qkv_bias(b, q, k, v, "bias")
            qh, kh, vh = (split_heads(b, x, num_heads) for x in (q, k, v))
    if _present(node.input, 6):
        kh = b.op("Concat", "past_key", kh, axis=2)
        vh = b.op("Concat", "past_value", vh, axis=2)
    s_len, t_len = b.dim(qh, 2), b.dim(kh, 2)
    biases = []
    if _present(node.input, 4):
        biases.append(mask_bias(b, "key_padding_mask", ctx.rank(node.input[4]), s_len,
                                 t_len, b.dim(qh, 0)))
    if ctx.attribute("unidirectional", 0):
        biases.append(causal_bias(b, s_len, t_len))
    if _present(node.input, 5):
        biases.append("attention_bias")
    b.op("Identity", attend(b, qh, kh, vh, attention_scale(ctx), biases), outputs=["output"])
    outputs = ["output"]
    if len(node.output) > 1:
        b.op("Identity", kh, outputs=["present_key"])
        b.op("Identity", vh, outputs=["present_value"])
        outputs += ["present_key", "present_value"]
    return b.function(DOMAIN, "multi_head_attention", inputs, outputs)
