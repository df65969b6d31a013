"""``RotaryEmbedding`` of com.microsoft in standard ONNX (``rotate`` serves
``GroupQueryAttention`` too):

* ``RotaryEmbedding(input, position_ids, cos_cache, sin_cache)``: per position ``p``
  (``position_ids[b, s]``, or ``position_ids[0] + s`` when it has one element), with ``x1``,
  ``x2`` the two halves of the first ``rotary_embedding_dim`` channels of each head (or its
  even and odd channels when ``interleaved``): ``x1' = x1 cos - x2 sin``,
  ``x2' = x2 cos + x1 sin``; the remaining channels pass through. Input ``(B, S, D)`` or
  ``(B, N, S, H)`` (rank dispatched at run time when unknown). Declined:
  ``is_packed_batching``, ``scale`` other than 1.
"""

from __future__ import annotations

import numpy as np
from onnx import FunctionProto, TensorProto, helper

from rewriter.plugin import Declined
from rewriter.plugin import present as _present

from ..common import single_output, unknown_attributes
from .core import DOMAIN, AttentionBody, attention_elem_type, dispatch_rank

_ROTARY_ATTRIBUTES = {"num_heads", "rotary_embedding_dim", "interleaved", "is_packed_batching",
                      "scale"}


def rotate(b: AttentionBody, x: str, cos: str, sin: str, rot_dim: str, interleaved: bool) -> str:
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


def _rotary_positions(b: AttentionBody, position_ids: str, s_len: str) -> str:
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
    elem = attention_elem_type(ctx, 0, 2, 3)
    if (elem is None or unknown_attributes(node, _ROTARY_ATTRIBUTES)
            or ctx.attribute("is_packed_batching", 0) or ctx.attribute("scale", 1.0) != 1.0
            or not all(_present(node.input, i) for i in range(4)) or len(node.input) > 4
            or not single_output(node)):
        raise Declined("needs input, position_ids, cos_cache and sin_cache of a known float type, "
                       "known attributes, no packed batching, scale 1, one output")
    num_heads = int(ctx.attribute("num_heads", 0))
    interleaved = bool(ctx.attribute("interleaved", 0))
    b = AttentionBody(ctx.opset, elem)
    rot_dim = b.op("Mul", b.dim("cos_cache", 1), b.const(2, np.int64))

    def make(builder: AttentionBody, x: str, rank: int) -> str:
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
        y = rotate(builder, bsnh, cos, sin, rot_dim, interleaved)
        if rank == 4:
            return builder.op("Transpose", y, perm=[0, 2, 1, 3])
        return builder.op("Reshape", y, builder.ints([0, 0, -1]))

    rank = ctx.rank(node.input[0])
    if rank in (3, 4):
        out = make(b, "input", rank)
    elif rank is None:
        out = dispatch_rank(b, "input", [4, 3], make)
    else:
        raise Declined("the input's rank must be 3 or 4")
    b.op("Identity", out, outputs=["output"])
    return b.function(DOMAIN, "rotary_embedding",
                      ["input", "position_ids", "cos_cache", "sin_cache"], ["output"])
