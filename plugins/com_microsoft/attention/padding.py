"""``RemovePadding`` and ``RestorePadding`` of com.microsoft in standard ONNX (their numpy
kernels, the oracles: ``kernels``)."""

from __future__ import annotations

import numpy as np
from onnx import FunctionProto, TensorProto

from rewriter.plugin import Declined
from rewriter.plugin import present as _present

from ..common import single_output
from .core import DOMAIN, AttentionBody, attention_elem_type


def build_remove_padding(ctx) -> FunctionProto | None:
    """``com.microsoft::RemovePadding(input (B, S, D), sequence_token_count (B))``: with
    ``valid[b, s] = s < count[b]``, ``token_offset`` is the flat indices ``b * S + s`` of the
    valid tokens, then of the padding ones (each in order); ``output = input.reshape(B*S,
    D)[token_offset[:sum(count)]]``; ``cumulated_seq_len = [0, cumsum(count)]``;
    ``max_seq_len = [max(count)]``."""
    node = ctx.node
    elem = attention_elem_type(ctx, 0)
    if (elem is None or node.attribute or len(node.input) != 2
            or not all(_present(node.input, i) for i in range(2)) or len(node.output) > 4):
        raise Declined("takes input and sequence_token_count, no attributes, at most 4 outputs")
    b = AttentionBody(ctx.opset, elem)
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
    elem = attention_elem_type(ctx, 0)
    if (elem is None or node.attribute or len(node.input) != 2
            or not all(_present(node.input, i) for i in range(2)) or not single_output(node)):
        raise Declined("takes input and token_offset, no attributes, one output")
    b = AttentionBody(ctx.opset, elem)
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
