"""Adapters for ops whose axis changed: negative axes before opset 11,
``Softmax``/``LogSoftmax``/``Hardmax`` (13, before which they flatten to 2-D), ``TopK`` (10,
11) and ``DFT``'s axis input (20).
"""

from __future__ import annotations

from onnx import NodeProto, helper

from .common import Decline, Env, attr, set_attrs, with_inputs, with_outputs
from .registry import NEGATIVE_AXES_11, adapter, ints, need_const


@adapter(NEGATIVE_AXES_11, 11)
def _non_negative_axes(node: NodeProto, env: Env) -> list[NodeProto]:
    """Before opset 11 these take axes counted from the front only."""
    rank = env.rank(node.input[0]) if node.input else None
    changes = {}
    for name in ("axis", "axes"):
        value = attr(node, name)
        if value is None:
            continue
        values = [value] if isinstance(value, int) else list(value)
        if all(v >= 0 for v in values):
            continue
        r = rank
        if r is not None and node.op_type == "Unsqueeze":
            r += len(values)
        if r is None:
            raise Decline(f"a negative {name} before opset 11 needs the input's rank")
        values = [v + r if v < 0 else v for v in values]
        changes[name] = values[0] if isinstance(value, int) else values
    return [set_attrs(node, **changes)] if changes else [node]


@adapter(("Softmax", "LogSoftmax", "Hardmax"), 13)
def _softmax_axis(node: NodeProto, env: Env) -> list[NodeProto]:
    """Before 13 these flatten the input to 2-D at ``axis``; equal when ``axis`` is last,
    otherwise the axis is transposed to the end and back."""
    rank = env.rank(node.input[0])
    axis = attr(node, "axis", -1)
    if rank is None:
        if axis == -1:
            return [set_attrs(node, axis=-1)]
        raise Decline(f"{node.op_type}(axis={axis}) needs the input's rank, which is unknown")
    axis = axis + rank if axis < 0 else axis
    if axis == rank - 1:
        return [set_attrs(node, axis=rank - 1)]
    perm = list(range(rank))
    perm[axis], perm[-1] = perm[-1], perm[axis]
    t_in, t_out = env.fresh("transposed"), env.fresh("result")
    return [helper.make_node("Transpose", [node.input[0]], [t_in], perm=perm),
            with_outputs(with_inputs(set_attrs(node, axis=rank - 1), [t_in]), [t_out]),
            helper.make_node("Transpose", [t_out], [node.output[0]], perm=perm)]


@adapter("TopK", 10, reads_constants=True)
def _topk_k_to_attribute(node: NodeProto, env: Env) -> list[NodeProto]:
    k = need_const(node, env, 1, "K")
    return [with_inputs(set_attrs(node, k=ints(k)[0]), node.input[:1])]


@adapter("TopK", 11)
def _topk_11(node: NodeProto, env: Env) -> list[NodeProto]:
    if attr(node, "largest", 1) != 1 or attr(node, "sorted", 1) != 1:
        raise Decline("TopK with largest=0 or sorted=0 exists from opset 11")
    axis = attr(node, "axis", -1)
    if axis < 0:
        rank = env.rank(node.input[0])
        if rank is None:
            raise Decline("a negative axis needs the input's rank, which is unknown")
        axis += rank
    return [set_attrs(node, drop=["largest", "sorted"], axis=axis)]


@adapter("DFT", 20, reads_constants=True)
def _dft_axis_to_attribute(node: NodeProto, env: Env) -> list[NodeProto]:
    axis = need_const(node, env, 2, "axis")
    axis = -2 if axis is None else ints(axis)[0]
    if axis < 0:
        rank = env.rank(node.input[0])
        if rank is None:
            raise Decline("a negative DFT axis needs the input's rank, which is unknown")
        axis += rank
    return [with_inputs(set_attrs(node, axis=axis), node.input[:2])]
