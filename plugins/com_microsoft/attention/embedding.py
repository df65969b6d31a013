"""``EmbedLayerNormalization`` of com.microsoft in standard ONNX (its body serves
``QEmbedLayerNormalization`` too)."""

from __future__ import annotations

import numpy as np
from onnx import FunctionProto, TensorProto

from rewriter.plugin import Declined
from rewriter.plugin import present as _present

from ..common import unknown_attributes
from .core import DOMAIN, AttentionBody, attention_elem_type

EMBED_LAYER_NORM_DEFAULT_EPSILON = 1e-12  # onnxruntime's kDefaultEmbedLayerNormEpsilon


def _layer_norm(b: AttentionBody, x: str, gamma: str, beta: str, epsilon: float) -> str:
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
    elem = attention_elem_type(ctx, 2, 3, 4, 5, 6)
    if (elem is None or unknown_attributes(node, {"epsilon", "mask_index_type"})
            or not all(_present(node.input, i) for i in (0, 2, 3, 5, 6))
            or _present(node.input, 1) != _present(node.input, 4) or len(node.input) > 9
            or not _present(node.output, 0) or len(node.output) > 3):
        raise Declined("needs input_ids, word, position embeddings, gamma and beta of a known "
                       "float type; segment_ids and its embedding both or neither; known "
                       "attributes")
    names = ["input_ids", "segment_ids", "word_embedding", "position_embedding",
             "segment_embedding", "gamma", "beta", "mask", "position_ids"]
    b = AttentionBody(ctx.opset, elem)
    tables = ["word_embedding", "position_embedding", "segment_embedding", "gamma", "beta"]
    return embed_layer_norm_body(ctx, b, tables, names[:len(node.input)],
                                 position_ids=_present(node.input, 8))


def embed_layer_norm_body(ctx, b: AttentionBody, tables: list[str], inputs: list[str], *,
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
