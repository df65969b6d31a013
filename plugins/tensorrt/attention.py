"""``fMHAPlugin`` (flash attention) and ``DisentangledAttention_TRT`` (DeBERTa's log-bucket
relative attention) as MatMul/Softmax and GatherElements (semantics:
``rewriter_custom_ops.trt_attention``)."""

from __future__ import annotations

import numpy as np
from onnx import FunctionProto, TensorProto, helper

from rewriter.plugin import Declined

from .common import (
    BODY_DOMAIN,
    DISENTANGLED_ATTRIBUTES,
    FLOAT_ELEM_TYPES,
    FMHA_ATTRIBUTES,
    Body,
    as_float32,
    check_attributes,
    check_same_float_type,
    is_plugin_version_one,
)


def build_fmha(ctx) -> FunctionProto | None:
    node = ctx.node
    types = list(ctx.input_types or [])
    if len(node.input) != 3 or not all(node.input) or len(node.output) != 1:
        raise Declined("takes q, k and v and gives one output")
    check_attributes(node, FMHA_ATTRIBUTES)
    check_same_float_type(types)
    if float(ctx.attribute("dropout_p", 0.0)) != 0.0:
        raise Declined("dropout_p != 0 (random) is not decomposed")
    if int(ctx.attribute("return_attn_probs", 0)) != 0:
        raise Declined("return_attn_probs=1 is not decomposed")
    elem = FLOAT_ELEM_TYPES[types[0]]
    g = Body(ctx.opset)
    q = g.op("Transpose", g.op("Cast", "q", to=TensorProto.FLOAT), perm=[0, 2, 1, 3])
    k = g.op("Transpose", g.op("Cast", "k", to=TensorProto.FLOAT), perm=[0, 2, 3, 1])
    v = g.op("Transpose", g.op("Cast", "v", to=TensorProto.FLOAT), perm=[0, 2, 1, 3])
    logits = g.op("Mul", g.op("MatMul", q, k),
                  g.const(as_float32(ctx.attribute("scale", 1.0)), np.float32))
    if int(ctx.attribute("causal", 0)):
        rows = g.op("Range", g.const(0), g.dim("q", 1), g.const(1))
        cols = g.op("Range", g.const(0), g.dim("k", 1), g.const(1))
        future = g.op("Greater", g.unsqueeze(cols, [0]), g.unsqueeze(rows, [1]))
        logits = g.op("Where", future, g.const(-np.inf, np.float32), logits)
    probs = g.op("Softmax", logits, axis=-1)  # the last axis at every opset
    out = g.op("Transpose", g.op("MatMul", probs, v), perm=[0, 2, 1, 3])
    g.nodes.append(helper.make_node("Cast", [out], ["output"], to=elem))
    return g.function(BODY_DOMAIN, "fmha", ["q", "k", "v"], ["output"])


def build_disentangled_attention(ctx) -> FunctionProto | None:
    node = ctx.node
    types = list(ctx.input_types or [])
    span = ctx.attribute("span")
    factor = ctx.attribute("factor")
    if len(node.input) != 3 or not all(node.input) or len(node.output) != 1:
        raise Declined("takes three inputs and gives one output")
    check_attributes(node, DISENTANGLED_ATTRIBUTES)
    if span is None or factor is None:
        raise Declined("span and factor must be given")
    if int(span) < 2:
        raise Declined(f"span {int(span)} < 2")
    check_same_float_type(types)
    if not is_plugin_version_one(ctx):
        raise Declined("only plugin_version 1 is decomposed")
    span = int(span)
    mid = span // 2
    elem = FLOAT_ELEM_TYPES[types[0]]
    dtype = np.float32 if elem == TensorProto.FLOAT else np.float16
    g = Body(ctx.opset)
    c2c_shape = g.op("Shape", "c2c")
    seq = g.take(c2c_shape, 1)
    pos = g.op("Range", g.const(0), seq, g.const(1))
    delta = g.op("Cast", g.op("Sub", g.unsqueeze(pos, [1]), g.unsqueeze(pos, [0])),
                 to=TensorProto.FLOAT)  # row - column
    magnitude = g.op("Abs", delta)
    # t = (mid - 1) / (log(L - 1) - log(mid)) * (1 - 1e-7), all in float32 as the kernel
    log_mid = as_float32(np.log(np.float32(mid)))
    length = g.op("Cast", g.op("Sub", g.dim("c2p", 2), g.const(1)),
                  to=TensorProto.FLOAT)
    t = g.op("Mul", g.op("Div", g.const(float(mid - 1), np.float32),
                         g.op("Sub", g.op("Log", length), g.const(log_mid, np.float32))),
             g.const(1 - np.float32(1e-7), np.float32))
    log_bucket = g.op("Add", g.op("Ceil", g.op("Mul", g.op("Sub", g.op("Log", magnitude),
                                                           g.const(log_mid, np.float32)), t)),
                      g.const(float(mid), np.float32))
    bucket = g.op("Where", g.op("Greater", magnitude, g.const(float(mid), np.float32)),
                  g.op("Mul", g.op("Sign", delta), log_bucket), delta)
    index = g.op("Cast", g.op("Clip", g.op("Add", bucket, g.const(float(span), np.float32)),
                              g.const(0.0, np.float32), g.const(2.0 * span - 1, np.float32)),
                 to=TensorProto.INT64)  # [S,S]: I(row - column)
    c2p = g.op("GatherElements", "c2p", g.op("Expand", index, c2c_shape), axis=2)
    p2c = g.op("Transpose", g.op("GatherElements", "p2c", g.op(
        "Expand", g.op("Transpose", index, perm=[1, 0]), c2c_shape), axis=2), perm=[0, 2, 1])
    if elem == TensorProto.FLOAT:
        total = g.op("Add", g.op("Add", "c2c", c2p), p2c)
    else:  # the fp16 kernel adds c2c + (c2p + p2c)
        total = g.op("Add", "c2c", g.op("Add", c2p, p2c))
    g.op("Mul", total, g.const(float(factor), dtype), outputs=["output"])
    return g.function(BODY_DOMAIN, "disentangled_attention", ["c2c", "c2p", "p2c"],
                      ["output"])
