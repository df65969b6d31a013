"""Adapters for shape and indexing ops: ``Squeeze``/``Unsqueeze`` (13), ``Split`` (13,
18), ``Pad`` (11, 18, 19), ``Slice`` (10), ``Shape(start, end)`` (15), ``Reshape(allowzero)``
(14), ``ScatterElements``/``ScatterND`` reductions (18) and ``Trilu`` (14).
"""

from __future__ import annotations

import numpy as np
from onnx import NodeProto, TensorProto, helper, numpy_helper

from .common import Decline, Env, attr, input_at, set_attrs, with_inputs, with_outputs
from .registry import adapter, ints, need_const

INT64_MAX = np.iinfo(np.int64).max


@adapter(("Squeeze", "Unsqueeze"), 13, reads_constants=True)
def _squeeze_axes_to_attribute(node: NodeProto, env: Env) -> list[NodeProto]:
    axes = need_const(node, env, 1, "axes")
    if axes is None:
        if node.op_type == "Unsqueeze":
            raise Decline("Unsqueeze needs axes")
        return [with_inputs(node, node.input[:1])]
    return [with_inputs(set_attrs(node, axes=ints(axes)), node.input[:1])]


@adapter("Split", 13, reads_constants=True)
def _split_sizes_to_attribute(node: NodeProto, env: Env) -> list[NodeProto]:
    split = need_const(node, env, 1, "split")
    if split is None:
        return [with_inputs(node, node.input[:1])]
    return [with_inputs(set_attrs(node, split=ints(split)), node.input[:1])]


@adapter("Split", 18)
def _split_num_outputs(node: NodeProto, env: Env) -> list[NodeProto]:
    n = attr(node, "num_outputs")
    if n is None:
        return [node]
    base = set_attrs(node, drop=["num_outputs"])
    if input_at(node, 1):
        return [base]
    axis = attr(node, "axis", 0)
    shape = env.shape(node.input[0])
    if shape is not None:
        dim = shape[axis]
        if dim is not None:
            chunk = -(-dim // n)
            sizes = [chunk] * (n - 1) + [dim - chunk * (n - 1)]
            if min(sizes) >= 0:  # (else an invalid split, e.g. in a branch never taken)
                name, const = env.constant_node(np.array(sizes, dtype=np.int64), "split")
                return [const, with_inputs(base, [node.input[0], name])]
    # sizes at run time: ceil(dim / n) for all but the last chunk, the rest for the last
    nodes = []
    shape_name, dim_name = env.fresh("shape"), env.fresh("dim")
    idx, c_idx = env.constant_node(np.array([axis], dtype=np.int64), "axis")
    nm1, c_nm1 = env.constant_node(np.array([n - 1], dtype=np.int64), "n_minus_1")
    nn, c_n = env.constant_node(np.array([n], dtype=np.int64), "n")
    nodes += [c_idx, c_nm1, c_n,
              helper.make_node("Shape", [node.input[0]], [shape_name]),
              helper.make_node("Gather", [shape_name, idx], [dim_name], axis=0)]
    plus, chunk, used, last = (env.fresh(h) for h in ("plus", "chunk", "used", "last"))
    nodes += [helper.make_node("Add", [dim_name, nm1], [plus]),
              helper.make_node("Div", [plus, nn], [chunk]),
              helper.make_node("Mul", [chunk, nm1], [used]),
              helper.make_node("Sub", [dim_name, used], [last])]
    firsts, sizes = env.fresh("firsts"), env.fresh("sizes")
    nodes += [helper.make_node("Expand", [chunk, nm1], [firsts]),
              helper.make_node("Concat", [firsts, last], [sizes], axis=0)]
    nodes.append(with_inputs(base, [node.input[0], sizes]))
    return nodes


@adapter("Pad", 11, reads_constants=True)
def _pad_inputs_to_attributes(node: NodeProto, env: Env) -> list[NodeProto]:
    pads = need_const(node, env, 1, "pads")
    value = need_const(node, env, 2, "constant_value")
    attrs = {"pads": ints(pads)}
    if value is not None:
        attrs["value"] = float(np.asarray(value).reshape(-1)[0]) if value.size else 0.0
    return [with_inputs(set_attrs(node, **attrs), node.input[:1])]


@adapter("Pad", 18, reads_constants=True)
def _pad_axes(node: NodeProto, env: Env) -> list[NodeProto]:
    if not input_at(node, 3):
        return [with_inputs(node, node.input[:3])]
    rank = env.rank(node.input[0])
    if rank is None:
        raise Decline("Pad with axes needs the input's rank, which is unknown")
    axes = env.const(node.input[3])
    pads_name = node.input[1]
    if axes is None:
        return _pad_runtime_axes(node, env, rank)
    axes = [a + rank if a < 0 else a for a in ints(axes)]
    pads = env.const(pads_name)
    if pads is not None:
        pads = ints(pads)
        full = [0] * (2 * rank)
        for k, a in enumerate(axes):
            full[a] = pads[k]
            full[a + rank] = pads[k + len(axes)]
        name, const = env.constant_node(np.array(full, dtype=np.int64), "pads")
        return [const, with_inputs(node, [node.input[0], name, input_at(node, 2)])]
    # pads computed at run time: scatter them into a zero vector of the full length
    indices = np.array(axes + [a + rank for a in axes], dtype=np.int64)
    zeros, c_zeros = env.constant_node(np.zeros(2 * rank, dtype=np.int64), "zeros")
    idx, c_idx = env.constant_node(indices, "indices")
    full, cast = env.fresh("pads"), env.fresh("pads64")
    return [c_zeros, c_idx,
            helper.make_node("Cast", [pads_name], [cast], to=TensorProto.INT64),
            helper.make_node("ScatterElements", [zeros, idx, cast], [full], axis=0),
            with_inputs(node, [node.input[0], full, input_at(node, 2)])]


def _pad_runtime_axes(node: NodeProto, env: Env, rank: int) -> list[NodeProto]:
    """pads[k] and pads[k + len(axes)] go to positions axes[k] and axes[k] + rank."""
    zeros, c_zeros = env.constant_node(np.zeros(2 * rank, dtype=np.int64), "zeros")
    r, c_r = env.constant_node(np.array(rank, dtype=np.int64), "rank")
    z, c_z = env.constant_node(np.array(0, dtype=np.int64), "zero")
    axes64, neg, shifted, norm, ends, idx, pads64, full = (env.fresh(h) for h in (
        "axes64", "negative", "shifted", "axes", "ends", "indices", "pads64", "pads"))
    return [c_zeros, c_r, c_z,
            helper.make_node("Cast", [node.input[3]], [axes64], to=TensorProto.INT64),
            helper.make_node("Less", [axes64, z], [neg]),
            helper.make_node("Add", [axes64, r], [shifted]),
            helper.make_node("Where", [neg, shifted, axes64], [norm]),
            helper.make_node("Add", [norm, r], [ends]),
            helper.make_node("Concat", [norm, ends], [idx], axis=0),
            helper.make_node("Cast", [node.input[1]], [pads64], to=TensorProto.INT64),
            helper.make_node("ScatterElements", [zeros, idx, pads64], [full], axis=0),
            with_inputs(node, [node.input[0], full, input_at(node, 2)])]


@adapter("Pad", 19)
def _pad_wrap(node: NodeProto, env: Env) -> list[NodeProto]:
    if attr(node, "mode", b"constant") in (b"wrap", "wrap"):
        raise Decline("Pad mode 'wrap' exists from opset 19")
    return [node]


@adapter("Slice", 10, reads_constants=True)
def _slice_inputs_to_attributes(node: NodeProto, env: Env) -> list[NodeProto]:
    starts = need_const(node, env, 1, "starts")
    ends = need_const(node, env, 2, "ends")
    axes = need_const(node, env, 3, "axes")
    steps = need_const(node, env, 4, "steps")
    if steps is not None and any(s != 1 for s in ints(steps)):
        raise Decline("Slice with steps other than 1 exists from opset 10")
    attrs = {"starts": ints(starts), "ends": ints(ends)}
    if axes is not None:
        attrs["axes"] = ints(axes)
    return [with_inputs(set_attrs(node, **attrs), node.input[:1])]


@adapter("Shape", 15)
def _shape_start_end(node: NodeProto, env: Env) -> list[NodeProto]:
    start, end = attr(node, "start", 0), attr(node, "end")
    base = set_attrs(node, drop=["start", "end"])
    if start == 0 and end is None:
        return [base]
    full = env.fresh("shape")
    s, c_s = env.constant_node(np.array([start], dtype=np.int64), "start")
    e, c_e = env.constant_node(np.array([INT64_MAX if end is None else end], dtype=np.int64),
                               "end")
    a, c_a = env.constant_node(np.array([0], dtype=np.int64), "axes")
    return [c_s, c_e, c_a, with_outputs(base, [full]),
            helper.make_node("Slice", [full, s, e, a], [node.output[0]])]


@adapter("Reshape", 14, reads_constants=True)
def _reshape_allowzero(node: NodeProto, env: Env) -> list[NodeProto]:
    if attr(node, "allowzero", 0):
        # allowzero matters only for a 0 in the target shape, and a valid one can hold a 0
        # only when the input has no elements
        shape = env.const(input_at(node, 1))
        dims = env.shape(node.input[0])
        nonempty = dims is not None and all(d is not None and d > 0 for d in dims)
        if not nonempty and (shape is None or 0 in ints(shape)):
            return _reshape_zero_dims(node, env)
    return [set_attrs(node, drop=["allowzero"])]


def _reshape_zero_dims(node: NodeProto, env: Env) -> list[NodeProto]:
    """allowzero=1 with a target shape that may hold a 0: then the output has no elements
    and exactly that shape, which ConstantOfShape makes; otherwise a plain Reshape."""
    x, shape, y = node.input[0], node.input[1], node.output[0]
    elem = env.elem_type(x)
    if elem is None or elem == TensorProto.STRING or env.to.get("", 1 << 30) < 11:
        raise Decline("Reshape(allowzero=1) with a zero (or unknown) target dimension "
                      "exists from opset 14")
    f = env.fresh
    zero, c_zero = env.constant_node(np.array(0, dtype=np.int64), "zero")
    is_zero, hits, count, any_zero = f("is_zero"), f("hits"), f("count"), f("any_zero")
    then_out, else_out = f("empty"), f("reshaped")
    fill = numpy_helper.from_array(np.zeros(1, dtype=helper.tensor_dtype_to_np_dtype(elem)))
    then_g = helper.make_graph(
        [helper.make_node("ConstantOfShape", [shape], [then_out], value=fill)],
        f("then"), [], [helper.make_tensor_value_info(then_out, elem, None)])
    else_g = helper.make_graph(
        [helper.make_node("Reshape", [x, shape], [else_out])],
        f("else"), [], [helper.make_tensor_value_info(else_out, elem, None)])
    return [c_zero,
            helper.make_node("Equal", [shape, zero], [is_zero]),
            helper.make_node("Cast", [is_zero], [hits], to=TensorProto.INT64),
            helper.make_node("ReduceSum", [hits], [count], keepdims=0),
            helper.make_node("Greater", [count, zero], [any_zero]),
            helper.make_node("If", [any_zero], [y], then_branch=then_g, else_branch=else_g)]


@adapter(("ScatterElements", "ScatterND"), 18)
def _scatter_reduction(node: NodeProto, env: Env) -> list[NodeProto]:
    reduction = attr(node, "reduction", b"none")
    reduction = reduction.decode() if isinstance(reduction, bytes) else reduction
    if reduction in ("max", "min"):
        raise Decline(f"{node.op_type}(reduction={reduction!r}) exists from opset 18")
    return [node]


@adapter("Trilu", 14)
def _trilu(node: NodeProto, env: Env) -> list[NodeProto]:
    """Trilu with Range/comparison/Where (opset 13): keep x[i, j] where j - i >= k
    (upper) or j - i <= k (lower)."""
    x = node.input[0]
    elem = env.elem_type(x)
    if elem is None:
        raise Decline("the input type is unknown")
    nodes = []
    shape = env.fresh("shape")
    nodes.append(helper.make_node("Shape", [x], [shape]))
    m2, c_m2 = env.constant_node(np.array(-2, dtype=np.int64), "m2")
    m1, c_m1 = env.constant_node(np.array(-1, dtype=np.int64), "m1")
    zero, c_zero = env.constant_node(np.array(0, dtype=np.int64), "zero")
    one, c_one = env.constant_node(np.array(1, dtype=np.int64), "one")
    rows_n, cols_n, rows, cols = (env.fresh(h) for h in ("n", "m", "rows", "cols"))
    ax, c_ax = env.constant_node(np.array([1], dtype=np.int64), "axis1")
    rows_col, diff, mask, out_zero = (env.fresh(h) for h in ("rows2d", "diff", "mask", "zero"))
    nodes += [c_m2, c_m1, c_zero, c_one, c_ax,
              helper.make_node("Gather", [shape, m2], [rows_n], axis=0),
              helper.make_node("Gather", [shape, m1], [cols_n], axis=0),
              helper.make_node("Range", [zero, rows_n, one], [rows]),
              helper.make_node("Range", [zero, cols_n, one], [cols]),
              helper.make_node("Unsqueeze", [rows, ax], [rows_col]),
              helper.make_node("Sub", [cols, rows_col], [diff])]
    k = input_at(node, 1)
    if not k:
        k = zero
    else:
        k64 = env.fresh("k")
        nodes.append(helper.make_node("Cast", [k], [k64], to=TensorProto.INT64))
        k = k64
    compare = "GreaterOrEqual" if attr(node, "upper", 1) else "LessOrEqual"
    nodes.append(helper.make_node(compare, [diff, k], [mask]))
    dtype = helper.tensor_dtype_to_np_dtype(elem)
    z, c_z = env.constant_node(np.zeros((), dtype=dtype), "zero")
    nodes += [c_z, helper.make_node("Where", [mask, x, z], [node.output[0]])]
    return nodes
