"""``LinearAttention`` (opset 27):

* ``LinearAttention(query, key, value[, past_state][, decay][, beta])`` (every
  ``update_rule``, GQA): the recurrence of the spec as a ``Loop`` over time carrying the
  state, in float32 as the reference evaluator computes it (the spec's own body is a
  ``Scan`` that OpenVINO's frontend cannot convert). Registered by the ``onnx-functions``
  plugin in place of the spec body (:func:`build_linear_attention`).
"""

from __future__ import annotations

import numpy as np
from onnx import FunctionProto, TensorProto, helper

from rewriter.plugin import Arg, Declined, OpSample, declining
from rewriter.plugin import present as _present

from .common import (
    DOMAIN,
    Body,
    attributes_known,
    body_opset,
    float_elem,
    formal_inputs,
)

# -- LinearAttention -----------------------------------------------------------------------

_UPDATE_RULES = {"linear": (False, False), "gated": (True, False), "delta": (False, True),
                 "gated_delta": (True, True)}  # rule: (decay, delta correction)


def _heads_first(b: Body, x: str, heads: int, size: int = -1) -> str:
    """(B, T, H * D) -> (B, H, T, D) in float32 (``heads`` -1 with ``size`` 1: one head per
    last-axis entry)."""
    shape = b.ints([0, 0, heads, size])
    return b.op("Transpose", b.op("Reshape", b.cast(x, TensorProto.FLOAT), shape),
                perm=[0, 2, 1, 3])


@declining
def build_linear_attention(ctx) -> FunctionProto | None:
    """``LinearAttention`` as a ``Loop`` over time carrying the state, in float32, as the
    reference evaluator computes it."""
    node = ctx.node
    rule = ctx.attribute("update_rule", b"gated_delta")
    rule = rule.decode() if isinstance(rule, bytes) else rule
    q_heads, kv_heads = ctx.attribute("q_num_heads"), ctx.attribute("kv_num_heads")
    elem = float_elem(ctx, 0)
    if (rule not in _UPDATE_RULES or not q_heads or not kv_heads or q_heads % kv_heads
            or elem is None or len(node.input) > 6 or len(node.output) > 2
            or not all(_present(node.input, i) for i in range(3))
            or not attributes_known(node, ["update_rule", "q_num_heads", "kv_num_heads",
                                           "scale", "chunk_size"])):
        raise Declined("needs a known update_rule, q_num_heads a multiple of kv_num_heads, query, "
                       "key and value of a known float type, known attributes")
    gated, delta = _UPDATE_RULES[rule]
    if _present(node.input, 4) != gated or _present(node.input, 5) != delta:
        raise Declined("the update rule's inputs (and no others) must be given")
    state_type = float_elem(ctx, 3) if _present(node.input, 3) else elem
    b = Body(body_opset(ctx))
    f32 = TensorProto.FLOAT
    q4 = _heads_first(b, "query", q_heads)                                  # (B, Hq, T, dk)
    k4 = _heads_first(b, "key", kv_heads)
    v4 = _heads_first(b, "value", kv_heads)
    decay4 = _heads_first(b, "decay", kv_heads) if gated else None        # (B, Hkv, T, 1|dk)
    beta4 = _heads_first(b, "beta", -1, 1) if delta else None                # (B, Hkv|1, T, 1)
    shape_k, shape_v = b.op("Shape", k4), b.op("Shape", v4)
    d_k = b.slice(shape_k, [3], [4], [0])
    if _present(node.input, 3):
        state0 = b.cast("past_state", f32)
    else:
        state0 = b.fill(b.op("Concat", b.slice(shape_k, [0], [2], [0]), d_k,
                             b.slice(shape_v, [3], [4], [0]), axis=0), 0.0, f32)
    scale = ctx.attribute("scale", 0.0)
    if scale:
        scale_value = b.const(np.array(scale), np.float32)
    else:
        scale_value = b.op("Reciprocal", b.op("Sqrt", b.cast(d_k, f32)))
    steps = b.op("Gather", b.op("Shape", q4), b.const(np.array(2, np.int64)), axis=0)

    body = b.child()
    step, cond, state_in = body.fresh("t"), body.fresh("cond"), body.fresh("state")

    def at(x: str) -> str:
        return body.op("Gather", x, step, axis=2)

    q_t, k_t, v_t = at(q4), at(k4), at(v4)                                # (B, H, d)
    state = state_in
    if gated:
        state = body.op("Mul", state, body.unsqueeze(body.op("Exp", at(decay4)), [-1]))
    if delta:  # v_t <- beta_t (v_t - S^T k_t)
        retrieved = body.squeeze(body.op("MatMul", body.unsqueeze(k_t, [2]), state), [2])
        v_t = body.op("Mul", at(beta4), body.op("Sub", v_t, retrieved))
    state = body.op("Add", state, body.op("Mul", body.unsqueeze(k_t, [-1]),
                                          body.unsqueeze(v_t, [-2])))
    read = state
    if q_heads != kv_heads:  # each KV state serves q_heads / kv_heads query heads in turn
        shape = body.op("Shape", state)                                  # (B, Hkv, dk, dv)
        spread = body.op("Expand", body.unsqueeze(state, [2]),
                         body.ints([1, 1, q_heads // kv_heads, 1, 1]))
        read = body.op("Reshape", spread, body.op(
            "Concat", body.slice(shape, [0], [1], [0]), body.ints([q_heads]),
            body.slice(shape, [2], [4], [0]), axis=0))
    out_t = body.op("Mul", body.squeeze(body.op("MatMul", body.unsqueeze(q_t, [2]), read), [2]),
                    scale_value)                                          # (B, Hq, dv)
    cond_out = body.op("Identity", cond)
    graph = helper.make_graph(
        body.nodes, b.fresh("linear_attention_step"),
        [helper.make_tensor_value_info(step, TensorProto.INT64, []),
         helper.make_tensor_value_info(cond, TensorProto.BOOL, []),
         helper.make_tensor_value_info(state_in, f32, None)],
        [helper.make_tensor_value_info(cond_out, TensorProto.BOOL, []),
         helper.make_tensor_value_info(state, f32, None),
         helper.make_tensor_value_info(out_t, f32, None)])
    # (an explicit condition: the reference evaluator runs no trip when it is omitted)
    final_state, outs = b.op("Loop", steps, b.const(np.array(True), TensorProto.BOOL), state0,
                             outputs=2, body=graph)
    # (T, B, Hq, dv) -> (B, T, Hq * dv)
    output = b.op("Reshape", b.op("Transpose", outs, perm=[1, 0, 2, 3]), b.ints([0, 0, -1]))
    outputs = [b.cast(output, elem)]
    if len(node.output) > 1 and node.output[1]:
        outputs.append(b.cast(final_state, state_type or elem))
    return b.function(DOMAIN, "linear_attention", formal_inputs(node, [
        "query", "key", "value", "past_state", "decay", "beta"]), outputs)


def _la_inputs(rule, past, decay_dim, beta_dim, heads):
    """(B=2, T=3) queries of ``heads[0]`` heads, keys/values of ``heads[1]``; head size 4;
    decay per head (``decay_dim`` 1) or per key dim (4), negative (log-space); beta per
    KV head or shared."""
    q_heads, kv_heads = heads
    inputs = [f"T[2,3,{4 * q_heads}]", f"T[2,3,{4 * kv_heads}]", f"T[2,3,{4 * kv_heads}]"]
    inputs.append(f"T[2,{kv_heads},4,4]" if past else None)
    inputs.append(Arg(f"T[2,3,{kv_heads * decay_dim}]", low=-1.0, high=0.0)
                  if decay_dim else None)
    inputs.append(Arg(f"T[2,3,{kv_heads if beta_dim == 2 else 1}]", low=0.0, high=1.0)
                  if beta_dim else None)
    while inputs[-1] is None:
        inputs.pop()
    return inputs


def linear_attention_samples() -> list[OpSample]:
    """``LinearAttention``'s samples (the onnx-functions plugin registers the op with
    :func:`build_linear_attention`, in place of the spec's body)."""
    return [
        OpSample(_la_inputs(rule, past, decay_dim, beta_dim, heads), ["T", "T"],
                 {"update_rule": rule, "q_num_heads": heads[0], "kv_num_heads": heads[1],
                  **({"scale": 0.5} if rule == "linear" else {})},
                 opset=27, name=f"{rule}-{'past' if past else 'nopast'}-q{heads[0]}kv"
                                f"{heads[1]}", dtypes=["float", "float16"],
                 tolerance=(1e-4, 1e-4))
        for rule, past, decay_dim, beta_dim, heads in [
            ("linear", True, None, None, (2, 2)), ("gated", False, 1, None, (2, 2)),
            ("gated", True, 4, None, (4, 2)), ("delta", True, None, 1, (2, 2)),
            ("gated_delta", True, 1, 2, (2, 1)), ("gated_delta", False, 4, 1, (4, 2))]]
