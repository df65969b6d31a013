"""The core every com.microsoft attention op ends in, and its helpers (heads, masks, the
run-time rank dispatch, the body builder with mask values).

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
"""

from __future__ import annotations

import numpy as np
from onnx import GraphProto, TensorProto, helper

from rewriter.plugin import FunctionBuilder

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


class AttentionBody(FunctionBuilder):
    """A function body (or a subgraph of it) at one ai.onnx opset, with the attention
    bodies' mask helpers."""

    zero = filter = ""  # mask values, set by ``set_mask_values``

    def set_mask_values(self, mask_filter_value: float) -> None:
        self.zero = self.literal(0.0)
        self.filter = self.literal(mask_filter_value)

    def where_masked(self, keep: str) -> str:
        """``0`` where ``keep`` else the mask filter value (set by the caller)."""
        return self.op("Where", keep, self.zero, self.filter)


def attention_elem_type(ctx, *indices: int) -> int | None:
    """The float element type of the first input among ``indices`` (default: all) whose
    type is known (the inputs of the op's type ``T`` share it)."""
    types = list(ctx.input_types or [])
    for i in indices or range(len(types)):
        if i < len(types) and types[i] in _FLOAT_TYPES:
            return _FLOAT_TYPES[types[i]]
    return None


# -- the shared attention core -------------------------------------------------------------

def split_heads(b: AttentionBody, x: str, num_heads: int) -> str:
    """``(B, S, N*H)`` -> ``(B, N, S, H)``."""
    return b.op("Transpose", b.op("Reshape", x, b.ints([0, 0, num_heads, -1])),
                perm=[0, 2, 1, 3])


def causal_bias(b: AttentionBody, s_len: str, t_len: str) -> str:
    """``(S, T)``: ``-inf`` on keys ``j > i + (T - S)`` (out of the softmax; key ``i + T - S``
    is always in it), else 0."""
    one, zero = b.const(1, np.int64), b.const(0, np.int64)
    rows = b.op("Add", b.op("Range", zero, s_len, one), b.op("Sub", t_len, s_len))
    cols = b.op("Range", zero, t_len, one)
    future = b.op("Greater", cols, b.unsqueeze(rows, [1]))
    return b.op("Where", future, b.literal(-np.inf), b.zero)


def _mask_bias_of_rank(b: AttentionBody, mask: str, rank: int, s_len: str, t_len: str,
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


def _mask_bias_1d(b: AttentionBody, mask: str, batch: str, t_len: str) -> str:
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


def mask_bias(b: AttentionBody, mask: str, rank: int | None, s_len: str, t_len: str,
               batch: str) -> str:
    """The additive bias of ``mask_index`` (int32), broadcastable to ``(B, N, S, T)``;
    ``rank`` None: dispatched at run time on the mask's rank (nested ``If``)."""
    if rank is not None:
        return _mask_bias_of_rank(b, mask, rank, s_len, t_len, batch)
    rank_value = b.op("Size", b.op("Shape", mask))

    def dispatch(builder: AttentionBody, ranks: list[int]) -> str:
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


def _as_rank(b: AttentionBody, mask: str, rank: int) -> str:
    """``mask`` reshaped to ``rank`` dimensions (the leading ones kept, the rest folded into
    the last): the identity in the branch taken, and shape inference of the branches not
    taken (which still runs when the mask's shape is known) sees the rank it expects."""
    if rank == 1:
        return b.op("Reshape", mask, b.ints([-1]))
    dims = b.op("Concat", b.op("Shape", mask), b.ints([1, 1, 1]), axis=0)
    leading = b.slice(dims, [0], [rank - 1], [0])
    return b.op("Reshape", mask, b.op("Concat", leading, b.ints([-1]), axis=0))


def _graph(b: AttentionBody, output: str) -> GraphProto:
    return helper.make_graph(b.nodes, b.fresh("branch"), [],
                             [helper.make_tensor_value_info(output, b.elem_type, None)])


def attend(b: AttentionBody, qh: str, kh: str, vh: str, scale: float | None,
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


def attention_scale(ctx) -> float | None:
    scale = ctx.attribute("scale", 0.0)
    return None if not scale else float(scale)


def dispatch_rank(b: AttentionBody, x: str, ranks: list[int], make) -> str:
    """``make(builder, x_as_rank, rank)`` for the run-time rank of ``x`` among ``ranks`` (the
    last one is the fallback), as nested ``If`` nodes."""
    if len(ranks) == 1:
        return make(b, _as_rank(b, x, ranks[0]), ranks[0])
    then_b, else_b = b.child(), b.child()
    then_out = make(then_b, _as_rank(then_b, x, ranks[0]), ranks[0])
    else_out = dispatch_rank(else_b, x, ranks[1:], make)
    cond = b.op("Equal", b.op("Size", b.op("Shape", x)), b.const(ranks[0], np.int64))
    return b.op("If", cond, then_branch=_graph(then_b, then_out),
                else_branch=_graph(else_b, else_out))


def add_qkv_bias(b: AttentionBody, q: str, k: str, v: str, bias: str) -> tuple[str, str, str]:
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
