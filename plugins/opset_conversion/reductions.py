"""Adapters for reductions: ``Reduce*`` axes from an input back to an attribute
(``ReduceSum`` 13, the others 18; axes computed at run time go through ``ReduceSum`` or axis by
axis under ``If``), and bool ``ReduceMax``/``ReduceMin`` (20).
"""

from __future__ import annotations

import numpy as np
from onnx import NodeProto, TensorProto, helper

from .common import Decline, Env, attr, input_at, set_attrs, with_inputs, with_outputs
from .registry import adapter, ints, need_const

REDUCE_18 = ("ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
             "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare")


#: reductions that are ReduceSum (whose axes are an input from opset 13) of a function of
#: the input, followed by a function of the sum
_VIA_SUM = {
    "ReduceSumSquare": ("square", None),
    "ReduceL1": ("Abs", None),
    "ReduceL2": ("square", "Sqrt"),
    "ReduceLogSum": (None, "Log"),
    "ReduceLogSumExp": ("Exp", "Log"),
    "ReduceMean": (None, "mean"),
}


@adapter(REDUCE_18, 18, reads_constants=True)
@adapter("ReduceSum", 13, reads_constants=True)
def _reduce_axes_to_attribute(node: NodeProto, env: Env) -> list[NodeProto]:
    name = input_at(node, 1)
    if name and env.const(name) is None:
        if node.op_type in _VIA_SUM:
            return _reduce_via_sum(node, env)
        return _reduce_axis_by_axis(node, env)
    axes = need_const(node, env, 1, "axes")
    noop = attr(node, "noop_with_empty_axes", 0)
    if axes is None or axes.size == 0:
        if noop:
            return [helper.make_node("Identity", [node.input[0]], [node.output[0]])]
        return [with_inputs(set_attrs(node, drop=["noop_with_empty_axes"]), node.input[:1])]
    return [with_inputs(set_attrs(node, drop=["noop_with_empty_axes"], axes=ints(axes)),
                         node.input[:1])]


def _reduce_axis_by_axis(node: NodeProto, env: Env) -> list[NodeProto]:
    """Axes computed at run time, for a reduction without a ReduceSum form: reduce each axis
    of the (statically known) rank in turn, under an If that asks whether the axis is
    listed; then squeeze the listed axes unless keepdims."""
    x, axes, y = node.input[0], node.input[1], node.output[0]
    rank, elem = env.rank(x), env.elem_type(x)
    if rank is None or elem is None:
        raise Decline(f"{node.op_type} with axes computed at run time needs the input's rank "
                      "and type")
    if env.to.get("", 1 << 30) < 11:
        raise Decline(f"{node.op_type} with axes computed at run time needs If branches of "
                      "different shapes (opset 11)")
    keepdims = attr(node, "keepdims", 1)
    noop = attr(node, "noop_with_empty_axes", 0)
    f = env.fresh
    r, c_r = env.constant_node(np.array(rank, dtype=np.int64), "rank")
    zero, c_zero = env.constant_node(np.array(0, dtype=np.int64), "zero")
    axes64, neg, shifted, norm, n_axes, empty = (f(h) for h in (
        "axes64", "negative", "shifted", "axes", "n_axes", "empty"))
    nodes = [c_r, c_zero,
             helper.make_node("Cast", [axes], [axes64], to=TensorProto.INT64),
             helper.make_node("Less", [axes64, zero], [neg]),
             helper.make_node("Add", [axes64, r], [shifted]),
             helper.make_node("Where", [neg, shifted, axes64], [norm]),
             helper.make_node("Size", [axes64], [n_axes]),
             helper.make_node("Equal", [n_axes, zero], [empty])]
    current = x
    conds = []
    for i in range(rank):
        idx, c_idx = env.constant_node(np.array(i, dtype=np.int64), f"axis{i}")
        eq, hits, count, listed = f("eq"), f("hits"), f("count"), f("listed")
        nodes += [c_idx,
                  helper.make_node("Equal", [norm, idx], [eq]),
                  helper.make_node("Cast", [eq], [hits], to=TensorProto.INT64),
                  helper.make_node("ReduceSum", [hits], [count], keepdims=0),
                  helper.make_node("Greater", [count, zero], [listed])]
        cond = listed
        if not noop:  # no axes listed: every axis is reduced
            cond = f("reduce")
            nodes.append(helper.make_node("Or", [listed, empty], [cond]))
        conds.append(cond)
        current = _if_then(nodes, env, cond, current, elem, set_attrs(
            helper.make_node(node.op_type, [current], ["_"]), axes=[i], keepdims=1))
    if not keepdims:  # drop the reduced axes, last first so the indices stay valid
        for i in reversed(range(rank)):
            if env.emit_opset >= 13:
                a, c_a = env.constant_node(np.array([i], dtype=np.int64), f"squeeze{i}")
                nodes.append(c_a)
                squeeze = helper.make_node("Squeeze", [current, a], ["_"])
            else:
                squeeze = helper.make_node("Squeeze", [current], ["_"], axes=[i])
            current = _if_then(nodes, env, conds[i], current, elem, squeeze)
    nodes.append(helper.make_node("Identity", [current], [y]))
    return nodes


def _if_then(nodes: list, env: Env, cond: str, value: str, elem: int, step: NodeProto) -> str:
    """Append ``If(cond)`` whose then-branch is ``step`` applied to ``value`` (its output
    named "_", renamed here) and whose else-branch passes ``value`` on; return its output."""
    then_out, else_out, after = env.fresh("then"), env.fresh("else"), env.fresh("step")
    step = with_outputs(step, [then_out])
    then_g = helper.make_graph([step], env.fresh("then_branch"), [],
                               [helper.make_tensor_value_info(then_out, elem, None)])
    else_g = helper.make_graph([helper.make_node("Identity", [value], [else_out])],
                               env.fresh("else_branch"), [],
                               [helper.make_tensor_value_info(else_out, elem, None)])
    nodes.append(helper.make_node("If", [cond], [after], then_branch=then_g,
                                  else_branch=else_g))
    return after


def _reduce_via_sum(node: NodeProto, env: Env) -> list[NodeProto]:
    """Axes computed at run time: ReduceSum takes them as an input already at opset 13."""
    before, after = _VIA_SUM[node.op_type]
    x, axes, y = node.input[0], node.input[1], node.output[0]
    nodes = []
    term = x
    if before == "square":
        term = env.fresh("square")
        nodes.append(helper.make_node("Mul", [x, x], [term]))
    elif before:
        term = env.fresh(before.lower())
        nodes.append(helper.make_node(before, [x], [term]))
    total = env.fresh("sum") if after else y
    keep = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    nodes.append(helper.make_node("ReduceSum", [term, axes], [total], **keep))
    if after == "mean":
        elem = env.elem_type(x)
        if elem is None:
            raise Decline("ReduceMean with axes computed at run time needs the input type")
        n_in, n_out, count, count_t = (env.fresh(h) for h in ("n_in", "n_out", "count", "n"))
        nodes += [helper.make_node("Size", [x], [n_in]),
                  helper.make_node("Size", [total], [n_out]),
                  helper.make_node("Div", [n_in, n_out], [count]),
                  helper.make_node("Cast", [count], [count_t], to=elem),
                  helper.make_node("Div", [total, count_t], [y])]
    elif after:
        nodes.append(helper.make_node(after, [total], [y]))
    return nodes


@adapter(("ReduceMax", "ReduceMin"), 20)
def _reduce_bool(node: NodeProto, env: Env) -> list[NodeProto]:
    if env.elem_type(node.input[0]) != TensorProto.BOOL:
        if env.elem_type(node.input[0]) is None:
            raise Decline("the input type is unknown (bool needs a cast)")
        return [node]
    x8, y8 = env.fresh("u8"), env.fresh("r8")
    return [
        helper.make_node("Cast", [node.input[0]], [x8], to=TensorProto.UINT8),
        with_outputs(with_inputs(node, [x8, *node.input[1:]]), [y8]),
        helper.make_node("Cast", [y8], [node.output[0]], to=TensorProto.BOOL),
    ]
