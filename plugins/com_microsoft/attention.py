"""com.microsoft attention-family ops in standard ONNX (registered by the ``com-microsoft``
plugin, whose ``register_decompositions`` hook calls this module's).

Notation: ``B`` batch, ``S`` query length, ``P`` past length, ``T = P + L`` total key length,
``N`` heads, ``H`` head size; ``Qh`` is ``(B, N, S, H)``, ``Kh``/``Vh`` are ``(B, N, T, H)``.
Every attention op ends in the same core::

    scores = scale * Qh @ Kh^T + mask_bias (+ attention_bias)        # (B, N, S, T)
    output = Transpose(Softmax(scores, axis=-1) @ Vh) -> (B, S, N * H_v)

``scale`` defaults to ``1/sqrt(H)`` (a ``scale`` attribute of 0 also means the default, as in
onnxruntime). ``mask_bias`` is additive, as in onnxruntime's CPU kernels: every masked key
position adds ``mask_filter_value`` (default -10000), so a fully masked row is softmax of
its scores. The causal mask (``unidirectional``) leaves keys ``j > i + P`` out of the
softmax altogether (adds ``-inf``), as onnxruntime 1.32's CPU kernel does: a query whose
visible keys are all masked attends to those, never to future keys.

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
* ``RotaryEmbedding(input, position_ids, cos_cache, sin_cache)``: per position ``p``
  (``position_ids[b, s]``, or ``position_ids[0] + s`` when it has one element), with ``x1``,
  ``x2`` the two halves of the first ``rotary_embedding_dim`` channels of each head (or its
  even and odd channels when ``interleaved``): ``x1' = x1 cos - x2 sin``,
  ``x2' = x2 cos + x1 sin``; the remaining channels pass through. Input ``(B, S, D)`` or
  ``(B, N, S, H)`` (rank dispatched at run time when unknown). Declined:
  ``is_packed_batching``, ``scale`` other than 1.
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
* ``EmbedLayerNormalization``, ``RemovePadding``, ``RestorePadding``: see their builders.

``register_kernels`` adds numpy kernels for ``RemovePadding``, ``RestorePadding`` (no
onnxruntime CPU kernel) and ``Attention`` (with or without past: the oracle when the original
cannot run on onnxruntime, e.g. its CPU kernel refusing a 4-D mask). Every body is checked
against onnxruntime's contrib kernels, or these numpy kernels, on the samples registered
below (``tests/test_oracles.py``).
"""

from __future__ import annotations

import numpy as np
from onnx import FunctionProto, GraphProto, NodeProto, TensorProto, helper

from rewriter.plugin import Arg, Declined, FunctionBuilder, OpSample, kernel
from rewriter.plugin import present as _present

DOMAIN = "com.microsoft"
# Range (11) for the causal and padding masks; Unsqueeze/Squeeze/Split switch between
# attribute and input forms at 13, so the bodies are valid from 11 upward.
ATTENTION_OPSETS = (11, None)

DEFAULT_MASK_FILTER_VALUE = -10000.0

_FLOAT_TYPES = {
    "tensor(float)": TensorProto.FLOAT,
    "tensor(float16)": TensorProto.FLOAT16,
    "tensor(double)": TensorProto.DOUBLE,
}


class _Body(FunctionBuilder):
    """A function body (or a subgraph of it) at one ai.onnx opset, with the attention
    bodies' mask helpers."""

    zero = filter = ""  # mask values, set by ``set_mask_values``

    def set_mask_values(self, mask_filter_value: float) -> None:
        self.zero = self.literal(0.0)
        self.filter = self.literal(mask_filter_value)

    def dim(self, x: str, axis: int) -> str:
        """``Shape(x)[axis]`` as an int64 scalar."""
        return self.take(self.op("Shape", x), axis)

    def where_masked(self, keep: str) -> str:
        """``0`` where ``keep`` else the mask filter value (set by the caller)."""
        return self.op("Where", keep, self.zero, self.filter)


def _elem(ctx, *indices: int) -> int | None:
    """The float element type of the first input among ``indices`` (default: all) whose
    type is known (the inputs of the op's type ``T`` share it)."""
    types = list(ctx.input_types or [])
    for i in indices or range(len(types)):
        if i < len(types) and types[i] in _FLOAT_TYPES:
            return _FLOAT_TYPES[types[i]]
    return None




def _unknown_attributes(node: NodeProto, known: set[str]) -> bool:
    return any(a.name not in known for a in node.attribute)


# -- the shared attention core -------------------------------------------------------------

def _heads(b: _Body, x: str, num_heads: int) -> str:
    """``(B, S, N*H)`` -> ``(B, N, S, H)``."""
    return b.op("Transpose", b.op("Reshape", x, b.ints([0, 0, num_heads, -1])),
                perm=[0, 2, 1, 3])


def _causal_bias(b: _Body, s_len: str, t_len: str) -> str:
    """``(S, T)``: ``-inf`` on keys ``j > i + (T - S)`` (out of the softmax; key ``i + T - S``
    is always in it), else 0."""
    one, zero = b.const(1, np.int64), b.const(0, np.int64)
    rows = b.op("Add", b.op("Range", zero, s_len, one), b.op("Sub", t_len, s_len))
    cols = b.op("Range", zero, t_len, one)
    future = b.op("Greater", cols, b.unsqueeze(rows, [1]))
    return b.op("Where", future, b.literal(-np.inf), b.zero)


def _mask_bias_of_rank(b: _Body, mask: str, rank: int, s_len: str, t_len: str,
                       batch: str) -> str:
    """The additive bias of an int32 ``mask_index`` of known rank, broadcastable to
    ``(B, N, S, T)``."""
    zero_i = b.const(0, np.int32)
    if rank == 1:
        return _mask_bias_1d(b, mask, batch, t_len)
    if rank == 2:  # (B, T) raw 0/1
        return b.unsqueeze(b.where_masked(b.op("Greater", mask, zero_i)), [1, 2])
    if rank == 3:  # (B, S, T) raw 0/1
        return b.unsqueeze(b.where_masked(b.op("Greater", mask, zero_i)), [1])
    # rank 4: (B, 1, M, M) Megatron: rows P .. P+S, columns 0 .. T
    past_1 = b.unsqueeze(b.op("Sub", t_len, s_len), [0])
    t_1 = b.unsqueeze(t_len, [0])
    rows = b.slice(mask, b.op("Concat", past_1, b.ints([0]), axis=0),
                   b.op("Concat", t_1, t_1, axis=0), [2, 3])
    return b.where_masked(b.op("Greater", rows, zero_i))


def _mask_bias_1d(b: _Body, mask: str, batch: str, t_len: str) -> str:
    """``(B)`` end positions or ``(2B)`` end then start positions -> ``(B, 1, 1, T)``."""
    mask64 = b.op("Cast", mask, to=TensorProto.INT64)
    batch_1 = b.unsqueeze(batch, [0])
    zeros = b.fill(batch_1, 0, np.int64)
    padded = b.op("Concat", mask64, zeros, axis=0)  # (2B) or (3B): [B, 2B) is start or 0
    ends = b.slice(padded, [0], batch_1, [0])
    starts = b.slice(padded, batch_1, b.op("Add", batch_1, batch_1), [0])
    positions = b.op("Range", b.const(0, np.int64), t_len, b.const(1, np.int64))
    keep = b.op("And", b.op("Less", positions, b.unsqueeze(ends, [1])),
                b.op("Not", b.op("Less", positions, b.unsqueeze(starts, [1]))))
    return b.unsqueeze(b.where_masked(keep), [1, 2])


def _mask_bias(b: _Body, mask: str, rank: int | None, s_len: str, t_len: str,
               batch: str) -> str:
    """The additive bias of ``mask_index`` (int32), broadcastable to ``(B, N, S, T)``;
    ``rank`` None: dispatched at run time on the mask's rank (nested ``If``)."""
    if rank is not None:
        return _mask_bias_of_rank(b, mask, rank, s_len, t_len, batch)
    rank_value = b.op("Size", b.op("Shape", mask))

    def dispatch(builder: _Body, ranks: list[int]) -> str:
        if len(ranks) == 1:
            return _mask_bias_of_rank(builder, _as_rank(builder, mask, ranks[0]), ranks[0],
                                      s_len, t_len, batch)
        then_b, else_b = builder.child(), builder.child()
        then_out = _mask_bias_of_rank(then_b, _as_rank(then_b, mask, ranks[0]), ranks[0],
                                      s_len, t_len, batch)
        else_out = dispatch(else_b, ranks[1:])
        cond = builder.op("Equal", rank_value, builder.const(ranks[0], np.int64))
        return builder.op("If", cond, then_branch=_graph(then_b, then_out),
                          else_branch=_graph(else_b, else_out))

    return dispatch(b, [2, 1, 3, 4])


def _as_rank(b: _Body, mask: str, rank: int) -> str:
    """``mask`` reshaped to ``rank`` dimensions (the leading ones kept, the rest folded into
    the last): the identity in the branch taken, and shape inference of the branches not
    taken (which still runs when the mask's shape is known) sees the rank it expects."""
    if rank == 1:
        return b.op("Reshape", mask, b.ints([-1]))
    dims = b.op("Concat", b.op("Shape", mask), b.ints([1, 1, 1]), axis=0)
    leading = b.slice(dims, [0], [rank - 1], [0])
    return b.op("Reshape", mask, b.op("Concat", leading, b.ints([-1]), axis=0))


def _graph(b: _Body, output: str) -> GraphProto:
    return helper.make_graph(b.nodes, b.fresh("branch"), [],
                             [helper.make_tensor_value_info(output, b.elem_type, None)])


def _attend(b: _Body, qh: str, kh: str, vh: str, scale: float | None,
            biases: list[str]) -> str:
    """The core: ``(B, N, S, H)`` x ``(B, N, T, H)`` x ``(B, N, T, Hv)`` -> ``(B, S, N*Hv)``."""
    scores = b.op("MatMul", qh, b.op("Transpose", kh, perm=[0, 1, 3, 2]))
    if scale is None:  # 1/sqrt(H) from the run-time head size
        head = b.op("Cast", b.dim(qh, 3), to=b.elem_type)
        scale_value = b.op("Reciprocal", b.op("Sqrt", head))
    else:
        scale_value = b.literal(scale)
    scores = b.op("Mul", scores, scale_value)
    for bias in biases:
        scores = b.op("Add", scores, bias)
    probs = b.op("Softmax", scores, axis=-1)  # last axis: the same at every opset
    context = b.op("Transpose", b.op("MatMul", probs, vh), perm=[0, 2, 1, 3])
    return b.op("Reshape", context, b.ints([0, 0, -1]))


# -- Attention ------------------------------------------------------------------------------

_ATTENTION_ATTRIBUTES = {"num_heads", "unidirectional", "qkv_hidden_sizes", "scale",
                         "mask_filter_value", "do_rotary", "past_present_share_buffer",
                         "rotary_embedding_dim"}


def _scale(ctx) -> float | None:
    scale = ctx.attribute("scale", 0.0)
    return None if not scale else float(scale)


def build_attention(ctx) -> FunctionProto | None:
    """``com.microsoft::Attention`` (see the module docstring)."""
    node = ctx.node
    elem = _elem(ctx, 0, 1, 2, 4, 5)
    if (elem is None or not (_present(node.input, 0) and _present(node.input, 1))
            or not _present(node.output, 0) or len(node.output) > 2
            or _present(node.input, 6) or len(node.input) > 7
            or _unknown_attributes(node, _ATTENTION_ATTRIBUTES)
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
    b = _Body(ctx.opset, elem)
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


def attention_from_qkv(ctx, b: _Body, qkv: str, sizes: list[int] | None, inputs: list[str],
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
    qh, kh, vh = (_heads(b, x, num_heads) for x in (q, k, v))
    if _present(node.input, past):
        zero, one = b.const(0, np.int64), b.const(1, np.int64)
        kh = b.op("Concat", b.op("Gather", "past", zero, axis=0), kh, axis=2)
        vh = b.op("Concat", b.op("Gather", "past", one, axis=0), vh, axis=2)
    s_len, t_len = b.dim(qh, 2), b.dim(kh, 2)
    biases = []
    if has_mask:
        biases.append(_mask_bias(b, "mask_index", ctx.rank(node.input[mask]), s_len, t_len,
                                 b.dim(inputs[0], 0)))
    if ctx.attribute("unidirectional", 0):
        biases.append(_causal_bias(b, s_len, t_len))
    if attention_bias is not None and _present(node.input, attention_bias):
        biases.append("attention_bias")
    outputs = ["output"]
    b.op("Identity", _attend(b, qh, kh, vh, _scale(ctx), biases), outputs=["output"])
    if _present(node.output, 1):
        b.op("Concat", b.unsqueeze(kh, [0]), b.unsqueeze(vh, [0]), axis=0,
             outputs=["present"])
        outputs.append("present")
    elif len(node.output) > 1:
        raise Declined("only output and present are computed (an output after an empty "
                       "present is used)")
    return b.function(DOMAIN, name, inputs, outputs)


def _dispatch_rank(b: _Body, x: str, ranks: list[int], make) -> str:
    """``make(builder, x_as_rank, rank)`` for the run-time rank of ``x`` among ``ranks`` (the
    last one is the fallback), as nested ``If`` nodes."""
    if len(ranks) == 1:
        return make(b, _as_rank(b, x, ranks[0]), ranks[0])
    then_b, else_b = b.child(), b.child()
    then_out = make(then_b, _as_rank(then_b, x, ranks[0]), ranks[0])
    else_out = _dispatch_rank(else_b, x, ranks[1:], make)
    cond = b.op("Equal", b.op("Size", b.op("Shape", x)), b.const(ranks[0], np.int64))
    return b.op("If", cond, then_branch=_graph(then_b, then_out),
                else_branch=_graph(else_b, else_out))


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


def _unpack(b: _Body, packed: str, parts: int) -> list[str]:
    """(B, S, N, parts, H) -> ``parts`` tensors (B, N, S, H)."""
    return [b.op("Transpose", b.squeeze(x, [3]), perm=[0, 2, 1, 3])
            for x in b.split(packed, [1] * parts, axis=3)]


def build_multi_head_attention(ctx) -> FunctionProto | None:
    """``com.microsoft::MultiHeadAttention`` (see the module docstring)."""
    node = ctx.node
    elem = _elem(ctx, 0, 1, 2, 3, 5, 6, 7)
    num_heads = ctx.attribute("num_heads")
    if (elem is None or not num_heads or _unknown_attributes(node, _MHA_ATTRIBUTES)
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
    b = _Body(ctx.opset, elem)
    if _present(node.input, 4) or ctx.attribute("unidirectional", 0):
        b.set_mask_values(float(ctx.attribute("mask_filter_value", DEFAULT_MASK_FILTER_VALUE)))
    if form == "packed-qkv":
        qh, kh, vh = _unpack(b, "query", 3)
    else:
        qh = _heads(b, "query", num_heads)
        if form == "packed-kv":
            kh, vh = _unpack(b, "key", 2)
        elif form == "bnsh-kv":
            kh, vh = "key", "value"
        else:
            q, k, v = "query", "key", "value"
            if _present(node.input, 3):
                q, k, v = _add_qkv_bias(b, q, k, v, "bias")
            qh, kh, vh = (_heads(b, x, num_heads) for x in (q, k, v))
    if _present(node.input, 6):
        kh = b.op("Concat", "past_key", kh, axis=2)
        vh = b.op("Concat", "past_value", vh, axis=2)
    s_len, t_len = b.dim(qh, 2), b.dim(kh, 2)
    biases = []
    if _present(node.input, 4):
        biases.append(_mask_bias(b, "key_padding_mask", ctx.rank(node.input[4]), s_len,
                                 t_len, b.dim(qh, 0)))
    if ctx.attribute("unidirectional", 0):
        biases.append(_causal_bias(b, s_len, t_len))
    if _present(node.input, 5):
        biases.append("attention_bias")
    b.op("Identity", _attend(b, qh, kh, vh, _scale(ctx), biases), outputs=["output"])
    outputs = ["output"]
    if len(node.output) > 1:
        b.op("Identity", kh, outputs=["present_key"])
        b.op("Identity", vh, outputs=["present_value"])
        outputs += ["present_key", "present_value"]
    return b.function(DOMAIN, "multi_head_attention", inputs, outputs)


def _add_qkv_bias(b: _Body, q: str, k: str, v: str, bias: str) -> tuple[str, str, str]:
    """``q, k, v`` (B, S, D), (B, L, D), (B, L, D_v) plus the three parts of ``bias``
    (D + D + D_v)."""
    q_len, v_len = b.dim(q, 2), b.dim(v, 2)
    if b.opset >= 13:
        sizes = b.op("Concat", *(b.unsqueeze(n, [0]) for n in (q_len, q_len, v_len)), axis=0)
        bq, bk, bv = b.op("Split", bias, sizes, outputs=3, axis=0)
    else:  # Split-11 takes static sizes only: slice instead
        end_q = b.unsqueeze(q_len, [0])
        end_k = b.op("Add", end_q, end_q)
        bq = b.slice(bias, [0], end_q, [0])
        bk = b.slice(bias, end_q, end_k, [0])
        bv = b.slice(bias, end_k, b.ints([np.iinfo(np.int64).max]), [0])
    return b.op("Add", q, bq), b.op("Add", k, bk), b.op("Add", v, bv)


# -- RotaryEmbedding ------------------------------------------------------------------------

_ROTARY_ATTRIBUTES = {"num_heads", "rotary_embedding_dim", "interleaved", "is_packed_batching",
                      "scale"}


def _rotate(b: _Body, x: str, cos: str, sin: str, rot_dim: str, interleaved: bool) -> str:
    """Rotate the first ``rot_dim`` channels of ``x`` (..., H); ``cos``/``sin`` broadcast to
    (..., rot_dim / 2)."""
    rot_1 = b.unsqueeze(rot_dim, [0])
    big = b.ints([np.iinfo(np.int64).max])
    rotated = b.slice(x, [0], rot_1, [-1])
    rest = b.slice(x, rot_1, big, [-1])
    if interleaved:
        x1 = b.op("Gather", rotated_pairs := b.op(
            "Reshape", rotated, b.ints([0, 0, 0, -1, 2])), b.const(0, np.int64), axis=-1)
        x2 = b.op("Gather", rotated_pairs, b.const(1, np.int64), axis=-1)
    else:
        half_1 = b.op("Div", rot_1, b.ints([2]))
        x1 = b.slice(rotated, [0], half_1, [-1])
        x2 = b.slice(rotated, half_1, rot_1, [-1])
    y1 = b.op("Sub", b.op("Mul", x1, cos), b.op("Mul", x2, sin))
    y2 = b.op("Add", b.op("Mul", x2, cos), b.op("Mul", x1, sin))
    if interleaved:
        pairs = b.op("Concat", b.unsqueeze(y1, [-1]), b.unsqueeze(y2, [-1]), axis=-1)
        y = b.op("Reshape", pairs, b.ints([0, 0, 0, -1]))
    else:
        y = b.op("Concat", y1, y2, axis=-1)
    return b.op("Concat", y, rest, axis=-1)


def _rotary_positions(b: _Body, position_ids: str, s_len: str) -> str:
    """``(B, S)`` positions, or ``(1, S)`` ``position_ids[0] + [0, S)`` for a single start."""
    flat = b.op("Reshape", position_ids, b.ints([-1]))
    single = b.op("Equal", b.op("Size", flat), b.const(1, np.int64))
    then_b, else_b = b.child(), b.child()
    start = then_b.op("Reshape", then_b.slice(flat, [0], [1], [0]), then_b.ints([1, 1]))
    steps = then_b.op("Range", then_b.const(0, np.int64), s_len, then_b.const(1, np.int64))
    then_out = then_b.op("Add", start, then_b.unsqueeze(steps, [0]))
    else_out = else_b.op("Identity", position_ids)
    graph_then = helper.make_graph(then_b.nodes, b.fresh("single"), [], [
        helper.make_tensor_value_info(then_out, TensorProto.INT64, None)])
    graph_else = helper.make_graph(else_b.nodes, b.fresh("full"), [], [
        helper.make_tensor_value_info(else_out, TensorProto.INT64, None)])
    return b.op("If", single, then_branch=graph_then, else_branch=graph_else)


def build_rotary_embedding(ctx) -> FunctionProto | None:
    """``com.microsoft::RotaryEmbedding`` (see the module docstring)."""
    node = ctx.node
    elem = _elem(ctx, 0, 2, 3)
    if (elem is None or _unknown_attributes(node, _ROTARY_ATTRIBUTES)
            or ctx.attribute("is_packed_batching", 0) or ctx.attribute("scale", 1.0) != 1.0
            or not all(_present(node.input, i) for i in range(4)) or len(node.input) > 4
            or not _single_output(node)):
        raise Declined("needs input, position_ids, cos_cache and sin_cache of a known float type, "
                       "known attributes, no packed batching, scale 1, one output")
    num_heads = int(ctx.attribute("num_heads", 0))
    interleaved = bool(ctx.attribute("interleaved", 0))
    b = _Body(ctx.opset, elem)
    rot_dim = b.op("Mul", b.dim("cos_cache", 1), b.const(2, np.int64))

    def make(builder: _Body, x: str, rank: int) -> str:
        if rank == 4:  # (B, N, S, H) -> (B, S, N, H)
            bsnh = builder.op("Transpose", x, perm=[0, 2, 1, 3])
        elif num_heads:
            bsnh = builder.op("Reshape", x, builder.ints([0, 0, num_heads, -1]))
        else:  # head size = rotary dim
            bsnh = builder.op("Reshape", x, builder.op(
                "Concat", builder.ints([0, 0, -1]), builder.unsqueeze(rot_dim, [0]), axis=0))
        positions = _rotary_positions(builder, "position_ids", builder.dim(bsnh, 1))
        cos = builder.unsqueeze(builder.op("Gather", "cos_cache", positions, axis=0), [2])
        sin = builder.unsqueeze(builder.op("Gather", "sin_cache", positions, axis=0), [2])
        y = _rotate(builder, bsnh, cos, sin, rot_dim, interleaved)
        if rank == 4:
            return builder.op("Transpose", y, perm=[0, 2, 1, 3])
        return builder.op("Reshape", y, builder.ints([0, 0, -1]))

    rank = ctx.rank(node.input[0])
    if rank in (3, 4):
        out = make(b, "input", rank)
    elif rank is None:
        out = _dispatch_rank(b, "input", [4, 3], make)
    else:
        raise Declined("the input's rank must be 3 or 4")
    b.op("Identity", out, outputs=["output"])
    return b.function(DOMAIN, "rotary_embedding",
                      ["input", "position_ids", "cos_cache", "sin_cache"], ["output"])


# -- EmbedLayerNormalization ----------------------------------------------------------------

EMBED_LAYER_NORM_DEFAULT_EPSILON = 1e-12  # onnxruntime's kDefaultEmbedLayerNormEpsilon


def _layer_norm(b: _Body, x: str, gamma: str, beta: str, epsilon: float) -> str:
    """LayerNormalization over the last axis (the op itself from opset 17, else by hand)."""
    if b.opset >= 17:
        return b.op("LayerNormalization", x, gamma, beta, axis=-1, epsilon=epsilon)

    def mean(v: str) -> str:
        if b.opset >= 18:
            return b.op("ReduceMean", v, b.ints([-1]), keepdims=1)
        return b.op("ReduceMean", v, axes=[-1], keepdims=1)

    centred = b.op("Sub", x, mean(x))
    variance = mean(b.op("Mul", centred, centred))
    std = b.op("Sqrt", b.op("Add", variance, b.literal(epsilon)))
    return b.op("Add", b.op("Mul", b.op("Div", centred, std), gamma), beta)


def build_embed_layer_norm(ctx) -> FunctionProto | None:
    """``com.microsoft::EmbedLayerNormalization(input_ids[, segment_ids], word_embedding,
    position_embedding[, segment_embedding], gamma, beta[, mask[, position_ids]])``:
    ``embedding_sum = word_embedding[input_ids] + position_embedding[position_ids or
    0..S-1] (+ segment_embedding[segment_ids])``, ``output = LayerNormalization(
    embedding_sum, gamma, beta, epsilon)``; ``mask_index[b]`` is the count of ``mask[b, :]
    == 1`` (zeros without a mask), as onnxruntime's CPU kernel computes it."""
    node = ctx.node
    elem = _elem(ctx, 2, 3, 4, 5, 6)
    if (elem is None or _unknown_attributes(node, {"epsilon", "mask_index_type"})
            or not all(_present(node.input, i) for i in (0, 2, 3, 5, 6))
            or _present(node.input, 1) != _present(node.input, 4) or len(node.input) > 9
            or not _present(node.output, 0) or len(node.output) > 3):
        raise Declined("needs input_ids, word, position embeddings, gamma and beta of a known "
                       "float type; segment_ids and its embedding both or neither; known "
                       "attributes")
    names = ["input_ids", "segment_ids", "word_embedding", "position_embedding",
             "segment_embedding", "gamma", "beta", "mask", "position_ids"]
    b = _Body(ctx.opset, elem)
    tables = ["word_embedding", "position_embedding", "segment_embedding", "gamma", "beta"]
    return embed_layer_norm_body(ctx, b, tables, names[:len(node.input)],
                                 position_ids=_present(node.input, 8))


def embed_layer_norm_body(ctx, b: _Body, tables: list[str], inputs: list[str], *,
                          position_ids: bool) -> FunctionProto:
    """The body of ``EmbedLayerNormalization`` (and ``QEmbedLayerNormalization``) from the
    (dequantized) ``tables``: word, position and segment embeddings, gamma, beta; the
    formal inputs ``input_ids``, ``segment_ids`` (when node input 1 is given), ``mask``
    (node input 7) and ``position_ids`` (when ``position_ids``) are read by name."""
    node = ctx.node
    word, position, segment, gamma, beta = tables
    epsilon = float(ctx.attribute("epsilon", EMBED_LAYER_NORM_DEFAULT_EPSILON))
    total = b.op("Gather", word, "input_ids", axis=0)
    if position_ids:
        positions = "position_ids"
    else:
        positions = b.unsqueeze(b.op("Range", b.const(0, np.int64), b.dim("input_ids", 1),
                                     b.const(1, np.int64)), [0])
    total = b.op("Add", total, b.op("Gather", position, positions, axis=0))
    if _present(node.input, 1):
        total = b.op("Add", total, b.op("Gather", segment, "segment_ids", axis=0))
    b.op("Identity", _layer_norm(b, total, gamma, beta, epsilon), outputs=["output"])
    outputs = ["output"]
    if len(node.output) > 1:
        if _present(node.input, 7):
            ones = b.op("Cast", b.op("Equal", "mask", b.const(1, np.int32)), to=TensorProto.INT32)
            if b.opset >= 13:
                count = b.op("ReduceSum", ones, b.ints([1]), keepdims=0)
            else:
                count = b.op("ReduceSum", ones, axes=[1], keepdims=0)
        else:
            count = b.fill(b.unsqueeze(b.dim("input_ids", 0), [0]), 0, np.int32)
        b.op("Identity", count, outputs=["mask_index"])
        outputs.append("mask_index")
    if len(node.output) > 2:
        b.op("Identity", total, outputs=["embedding_sum"])
        outputs.append("embedding_sum")
    return b.function(DOMAIN, node.op_type.lower(), inputs, outputs)


# -- RemovePadding / RestorePadding ---------------------------------------------------------

def build_remove_padding(ctx) -> FunctionProto | None:
    """``com.microsoft::RemovePadding(input (B, S, D), sequence_token_count (B))``: with
    ``valid[b, s] = s < count[b]``, ``token_offset`` is the flat indices ``b * S + s`` of the
    valid tokens, then of the padding ones (each in order); ``output = input.reshape(B*S,
    D)[token_offset[:sum(count)]]``; ``cumulated_seq_len = [0, cumsum(count)]``;
    ``max_seq_len = [max(count)]``."""
    node = ctx.node
    elem = _elem(ctx, 0)
    if (elem is None or node.attribute or len(node.input) != 2
            or not all(_present(node.input, i) for i in range(2)) or len(node.output) > 4):
        raise Declined("takes input and sequence_token_count, no attributes, at most 4 outputs")
    b = _Body(ctx.opset, elem)
    batch, seq = b.dim("input", 0), b.dim("input", 1)
    count = b.op("Cast", "sequence_token_count", to=TensorProto.INT64)
    steps = b.op("Range", b.const(0, np.int64), seq, b.const(1, np.int64))
    padding = b.op("Cast", b.op("Not", b.op("Less", b.unsqueeze(steps, [0]),
                                             b.unsqueeze(count, [1]))), to=TensorProto.INT64)
    n_tokens = b.op("Mul", batch, seq)
    flat_index = b.op("Reshape", b.op("Range", b.const(0, np.int64), n_tokens,
                                      b.const(1, np.int64)), b.op("Concat", b.unsqueeze(
                                          batch, [0]), b.unsqueeze(seq, [0]), axis=0))
    # valid tokens sort before padding ones, each group in index order
    key = b.op("Reshape", b.op("Add", b.op("Mul", padding, n_tokens), flat_index), b.ints([-1]))
    _, order = b.op("TopK", key, b.unsqueeze(n_tokens, [0]), outputs=2, largest=0, sorted=1)
    total_1 = b.op("ReduceSum", count, keepdims=1)  # no axes: all of them, shape (1)
    flat = b.op("Reshape", "input", b.op("Concat", b.unsqueeze(n_tokens, [0]), b.ints([-1]),
                                          axis=0))
    b.op("Gather", flat, b.slice(order, [0], total_1, [0]), axis=0, outputs=["output"])
    b.op("Cast", b.op("Reshape", order, b.op("Shape", padding)), to=TensorProto.INT32,
         outputs=["token_offset"])
    cumsum = b.op("CumSum", "sequence_token_count", b.const(0, np.int32))
    b.op("Concat", b.const([0], np.int32), cumsum, axis=0, outputs=["cumulated_seq_len"])
    b.op("ReduceMax", "sequence_token_count", keepdims=1, outputs=["max_seq_len"])
    outputs = ["output", "token_offset", "cumulated_seq_len", "max_seq_len"]
    return b.function(DOMAIN, "remove_padding", ["input", "sequence_token_count"],
                      outputs[:max(len(node.output), 1)])


def build_restore_padding(ctx) -> FunctionProto | None:
    """``com.microsoft::RestorePadding(input (T, D), token_offset (B, S))``: ``output``
    ``(B, S, D)`` zeros, with flat row ``token_offset[i]`` set to ``input[i]`` for
    ``i < T``."""
    node = ctx.node
    elem = _elem(ctx, 0)
    if (elem is None or node.attribute or len(node.input) != 2
            or not all(_present(node.input, i) for i in range(2)) or not _single_output(node)):
        raise Declined("takes input and token_offset, no attributes, one output")
    b = _Body(ctx.opset, elem)
    tokens_1 = b.unsqueeze(b.dim("input", 0), [0])
    offsets = b.op("Cast", b.op("Reshape", "token_offset", b.ints([-1])), to=TensorProto.INT64)
    indices = b.unsqueeze(b.slice(offsets, [0], tokens_1, [0]), [1])
    n_flat = b.unsqueeze(b.op("Size", "token_offset"), [0])
    zeros = b.op("Expand", b.literal(0.0), b.op("Concat", n_flat, b.unsqueeze(
        b.dim("input", 1), [0]), axis=0))
    scattered = b.op("ScatterND", zeros, indices, "input")
    b.op("Reshape", scattered, b.op("Concat", b.op("Shape", "token_offset"), b.ints([-1]),
                                    axis=0), outputs=["output"])
    return b.function(DOMAIN, "restore_padding", ["input", "token_offset"], ["output"])


# -- GroupQueryAttention --------------------------------------------------------------------

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
    if (_unknown_attributes(node, _GQA_ATTRIBUTES)
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
    elem = _elem(ctx, 0)
    if elem is None or _gqa_declines(ctx):
        raise Declined("a GroupQueryAttention form not decomposed (type, attributes or inputs)")
    num_heads, kv_heads = int(ctx.attribute("num_heads")), int(ctx.attribute("kv_num_heads"))
    window = int(ctx.attribute("local_window_size", -1))
    softcap = float(ctx.attribute("softcap", 0.0))
    b = _Body(ctx.opset, elem)
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
        q = _rotate(b, q, cos, sin, rot_dim, interleaved)
        k = _rotate(b, k, cos, sin, rot_dim, interleaved)
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
    scale = _scale(ctx)
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


def _gqa_present(b: _Body, past: str | None, new: str, past_b: str, seq: str, past_len: str,
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


# -- DecoderMaskedMultiHeadAttention --------------------------------------------------------

_DMMHA_ATTRIBUTES = {"num_heads", "scale", "mask_filter_value", "past_present_share_buffer",
                     "output_qk"}
_DMMHA_INPUTS = ["query", "key", "value", "mask_index", "attention_bias", "past_key",
                 "past_value", "past_sequence_length", "beam_width", "cache_indirection",
                 "bias"]


def build_decoder_masked_mha(ctx) -> FunctionProto | None:
    """``com.microsoft::DecoderMaskedMultiHeadAttention``, self-attention with a shared
    past/present buffer (see the module docstring)."""
    node = ctx.node
    elem = _elem(ctx, 0, 1, 2, 4, 5, 6, 10)
    num_heads = ctx.attribute("num_heads")
    beams = _present(node.input, 8) and _present(node.input, 9)
    if (elem is None or not num_heads or _unknown_attributes(node, _DMMHA_ATTRIBUTES)
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
    b = _Body(ctx.opset, elem)
    zero, one = b.const(0, np.int64), b.const(1, np.int64)
    q, k, v = "query", "key", "value"
    if _present(node.input, 10):
        q, k, v = _add_qkv_bias(b, q, k, v, "bias")
    qh, kh, vh = (_heads(b, x, num_heads) for x in (q, k, v))     # (B, N, 1, H)
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
    b.op("Identity", _attend(b, qh, keys, values, _scale(ctx), biases), outputs=["output"])
    outputs = ["output"]
    if len(node.output) > 1:
        b.op("Identity", present_k, outputs=["present_key"])
        b.op("Identity", present_v, outputs=["present_value"])
        outputs += ["present_key", "present_value"]
    return b.function(DOMAIN, "decoder_masked_mha", _DMMHA_INPUTS[:len(node.input)], outputs)


def _through_beams(b: _Body, present: str, past_len: str, total: str) -> str:
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


def _single_output(node: NodeProto) -> bool:
    return len(node.output) == 1 and bool(node.output[0])


# -- oracle samples --------------------------------------------------------------------------

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
_OWN = "rewriter_plugins.com_microsoft.attention:"


def _oracles() -> dict[str, dict]:
    """Per op: its oracle (onnxruntime's CPU contrib kernel, or this module's numpy where
    onnxruntime has none) and samples, float32 at opsets 12 and 17, some float16."""
    own = "rewriter_plugins.com_microsoft.attention:"
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


def register_decompositions(registry) -> None:
    """Called by ``rewriter_plugins.com_microsoft``'s hook."""
    oracles = _oracles()

    def add(op_type, builder, opsets, dtypes=("float", "float16"), exact=True, note=""):
        registry.add(DOMAIN, op_type, builder, opsets=opsets, dtypes=dtypes, exact=exact,
                     description=f"com-microsoft:{op_type}" + (f" ({note})" if note else ""),
                     **oracles[op_type])

    add("Attention", build_attention, ATTENTION_OPSETS)
    add("MultiHeadAttention", build_multi_head_attention, ATTENTION_OPSETS)
    add("RotaryEmbedding", build_rotary_embedding, ATTENTION_OPSETS)
    add("EmbedLayerNormalization", build_embed_layer_norm, ATTENTION_OPSETS, ("float",))
    add("RemovePadding", build_remove_padding, ATTENTION_OPSETS)
    add("RestorePadding", build_restore_padding, ATTENTION_OPSETS)
    add("GroupQueryAttention", build_group_query_attention, ATTENTION_OPSETS,
        note="no quantized cache, qk norm, query_seqlens or windowed cache")
    add("DecoderMaskedMultiHeadAttention", build_decoder_masked_mha, ATTENTION_OPSETS,
        dtypes=("float",), note="self-attention with a shared past/present buffer only")


# -- numpy kernels: oracles for the reference evaluator (onnxruntime has no CPU kernel for
# RemovePadding / RestorePadding, and its CPU Attention refuses Megatron's 4-D mask) -------

@kernel(signatures=["float, int32 -> float, int32, int32, int32"])
def remove_padding_kernel(x: np.ndarray, counts: np.ndarray):
    """RemovePadding as documented (right padding)."""
    batch, seq = x.shape[:2]
    valid = np.arange(seq)[None, :] < counts[:, None]
    flat = np.arange(batch * seq).reshape(batch, seq)
    offsets = np.concatenate([flat[valid], flat[~valid]]).astype(np.int32)
    output = x.reshape(batch * seq, -1)[offsets[:int(counts.sum())]]
    cumulated = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
    return (output, offsets.reshape(batch, seq), cumulated,
            np.array([counts.max()], np.int32))


@kernel(signatures=["float, int32 -> float"])
def restore_padding_kernel(x: np.ndarray, token_offset: np.ndarray) -> np.ndarray:
    """RestorePadding: scatter the rows of ``x`` to ``token_offset``'s first positions."""
    batch, seq = token_offset.shape
    out = np.zeros((batch * seq, x.shape[1]), x.dtype)
    out[token_offset.reshape(-1)[:x.shape[0]]] = x
    return out.reshape(batch, seq, -1)


def attention_reference(x, weights, bias=None, mask_index=None, *, num_heads: int,
                        unidirectional: int = 0, scale: float = 0.0,
                        mask_filter_value: float = DEFAULT_MASK_FILTER_VALUE,
                        past=None) -> tuple[np.ndarray, np.ndarray]:
    """``com.microsoft::Attention`` in float64 numpy (equal ``qkv_hidden_sizes``): the
    module docstring's formula, mask forms included. Returns (output, present)."""
    x64 = x.astype(np.float64)
    qkv = x64 @ weights.astype(np.float64)
    if bias is not None:
        qkv = qkv + bias
    batch, seq = x.shape[:2]

    def heads(t):
        return t.reshape(batch, t.shape[1], num_heads, -1).transpose(0, 2, 1, 3)

    q, k, v = (heads(t) for t in np.split(qkv, 3, axis=-1))
    if past is not None:
        k = np.concatenate([past[0], k], axis=2)
        v = np.concatenate([past[1], v], axis=2)
    total = k.shape[2]
    scores = q @ k.transpose(0, 1, 3, 2) * (scale or 1 / np.sqrt(q.shape[-1]))
    if mask_index is not None:
        m = mask_index
        if m.ndim == 1:
            positions = np.arange(total)[None, :]
            keep = positions < m[:batch, None]
            if m.shape[0] == 2 * batch:
                keep &= positions >= m[batch:, None]
            keep = keep[:, None, None, :]
        elif m.ndim == 2:
            keep = (m > 0)[:, None, None, :]
        elif m.ndim == 3:
            keep = (m > 0)[:, None]
        else:
            keep = m[:, :, total - seq:total, :total] > 0
        scores = scores + np.where(keep, 0.0, mask_filter_value)
    if unidirectional:  # future keys are out of the softmax
        future = np.arange(total)[None, :] > np.arange(seq)[:, None] + (total - seq)
        scores = scores + np.where(future, -np.inf, 0.0)
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    out = (probs @ v).transpose(0, 2, 1, 3).reshape(batch, seq, -1)
    return out.astype(x.dtype), np.stack([k, v]).astype(x.dtype)


def megatron_attention_oracle(x, weights, bias, mask_index, past, **attributes):
    """``Attention`` with Megatron's (B, 1, M, M) ``mask_index``: onnxruntime's own CPU
    kernel (which refuses the 4-D mask) on rows ``P .. P + S``, columns ``0 .. T`` of it as
    a 3-D (B, S, T) mask, the part onnxruntime's CUDA kernel reads (``attention_softmax.cu``:
    mask row ``total - sequence_length + s``)."""
    from .common import onnxruntime_node as _onnxruntime_node

    seq, total = x.shape[1], past.shape[3] + x.shape[1]
    rows = np.ascontiguousarray(mask_index[:, 0, total - seq:total, :total])
    return tuple(_onnxruntime_node("Attention", DOMAIN, [x, weights, bias, rows, past], 2,
                                   **attributes))


def mha_unpacked_oracle(query, key=None, value=None, bias=None, key_padding_mask=None,
                        attention_bias=None, past_key=None, past_value=None, **attributes):
    """``MultiHeadAttention`` with packed QKV (B, S, N, 3, H) or packed KV (B, L, N, 2, H):
    onnxruntime's own CPU kernel (which refuses the packed forms) on Q, K and V unpacked as
    onnxruntime's ``fusion_attention_unet.py`` packs them (``[..., i, :]`` is Q, K, V)."""
    from .common import onnxruntime_node as _onnxruntime_node

    def flat(x):  # (B, L, N, H) -> (B, L, N * H)
        return np.ascontiguousarray(x.reshape(*x.shape[:2], -1))

    if key is None:
        query, key, value = (flat(query[:, :, :, i]) for i in range(3))
    elif value is None:
        key, value = (flat(key[:, :, :, i]) for i in range(2))
    return tuple(_onnxruntime_node("MultiHeadAttention", DOMAIN, [
        query, key, value, bias, key_padding_mask, attention_bias, past_key, past_value], 3,
        **attributes))


def remove_padding_oracle(x, counts):
    """``RemovePadding`` by the numpy kernel, computed in float32 for float16 input."""
    out = remove_padding_kernel.fn(x.astype(np.float32), counts)
    return (out[0].astype(x.dtype), *out[1:])


def restore_padding_oracle(x, token_offset):
    """``RestorePadding`` by the numpy kernel, computed in float32 for float16 input."""
    return restore_padding_kernel.fn(x.astype(np.float32), token_offset).astype(x.dtype)


_ATTENTION_KERNEL_ATTRIBUTES = {"num_heads": int, "unidirectional": 0, "scale": 0.0,
                                "mask_filter_value": DEFAULT_MASK_FILTER_VALUE}


@kernel(signatures=["float, float, float, int32, float -> float, float",
                    "float, float, float, int32 -> float", "float, float, float -> float",
                    "float, float -> float"], attributes=_ATTENTION_KERNEL_ATTRIBUTES)
def attention_kernel(x, weights, bias=None, mask_index=None, past=None, **attributes):
    """Attention (see ``attention_reference``): the output, and with ``past`` the present
    too (GPT-2 exports with a Megatron mask, which onnxruntime's CPU kernel refuses)."""
    output, present = attention_reference(x, weights, bias, mask_index, past=past,
                                          **attributes)[:2]
    return output if past is None else (output, present)


def register_kernels(registry) -> None:
    """Numpy kernels (the lead calls this from ``com_microsoft``'s ``register_kernels``)."""
    module = "rewriter_plugins.com_microsoft.attention"
    for op_type, attr in (("RemovePadding", "remove_padding_kernel"),
                          ("RestorePadding", "restore_padding_kernel"),
                          ("Attention", "attention_kernel")):
        registry.add(DOMAIN, op_type, f"{module}:{attr}",
                     description=f"com-microsoft:{op_type} (numpy)")
