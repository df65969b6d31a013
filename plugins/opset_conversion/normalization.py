"""Adapter for ``BatchNormalization`` (14): training mode spelt out in standard
ops.
"""

from __future__ import annotations

import numpy as np
from onnx import NodeProto, helper

from .common import Decline, Env, attr, set_attrs, with_outputs
from .registry import adapter


@adapter("BatchNormalization", 14)
def _batch_norm_training(node: NodeProto, env: Env) -> list[NodeProto]:
    """training_mode=1 (opset 14) normalises with the batch statistics and updates the
    running ones; the older op's training outputs mean something else, so it is spelt out."""
    if not attr(node, "training_mode", 0):
        return [with_outputs(set_attrs(node, drop=["training_mode"]), node.output[:1])]
    x, scale, bias, mean_in, var_in = node.input[:5]
    rank = env.rank(x)
    if rank is None or rank < 2:
        raise Decline("BatchNormalization training needs the input's rank")
    elem = env.elem_type(x)
    if elem is None or any(env.elem_type(n) not in (None, elem) for n in node.input[1:5]):
        raise Decline("BatchNormalization training with mixed or unknown types")
    dtype = helper.tensor_dtype_to_np_dtype(elem)
    eps = attr(node, "epsilon", 1e-5)
    momentum = attr(node, "momentum", 0.9)
    reduce_axes = [0] + list(range(2, rank))
    channel_axes = list(range(1, rank - 1))
    c_eps, n_eps = env.constant_node(np.array(eps, dtype=dtype), "eps")
    c_m, n_m = env.constant_node(np.array(momentum, dtype=dtype), "momentum")
    c_1m, n_1m = env.constant_node(np.array(1 - momentum, dtype=dtype), "one_minus")
    c_red, n_red = env.constant_node(np.array(reduce_axes, dtype=np.int64), "axes")
    nodes = [n_eps, n_m, n_1m, n_red]
    f = env.fresh
    mean, diff, sq, var, var_eps, std, norm = (f(h) for h in (
        "mean", "diff", "sq", "var", "var_eps", "std", "norm"))
    nodes += [helper.make_node("ReduceMean", [x], [mean], axes=reduce_axes, keepdims=1),
              helper.make_node("Sub", [x, mean], [diff]),
              helper.make_node("Mul", [diff, diff], [sq]),
              helper.make_node("ReduceMean", [sq], [var], axes=reduce_axes, keepdims=1),
              helper.make_node("Add", [var, c_eps], [var_eps]),
              helper.make_node("Sqrt", [var_eps], [std]),
              helper.make_node("Div", [diff, std], [norm])]
    scaled = f("scaled")
    if channel_axes:
        c_ch, n_ch = env.constant_node(np.array(channel_axes, dtype=np.int64), "channel_axes")
        s_u, b_u = f("scale"), f("bias")
        nodes += [n_ch, helper.make_node("Unsqueeze", [scale, c_ch], [s_u]),
                  helper.make_node("Unsqueeze", [bias, c_ch], [b_u])]
    else:
        s_u, b_u = scale, bias
    nodes += [helper.make_node("Mul", [norm, s_u], [scaled]),
              helper.make_node("Add", [scaled, b_u], [node.output[0]])]
    for k, (batch, running) in enumerate(((mean, mean_in), (var, var_in)), start=1):
        out = node.output[k] if k < len(node.output) else ""
        if not out:
            continue
        flat, old, new = f("flat"), f("old"), f("new")
        nodes += [helper.make_node("Squeeze", [batch, c_red], [flat]),
                  helper.make_node("Mul", [running, c_m], [old]),
                  helper.make_node("Mul", [flat, c_1m], [new]),
                  helper.make_node("Add", [old, new], [out])]
    return nodes
