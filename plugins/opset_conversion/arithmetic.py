"""Adapters for elementwise arithmetic: float ``Mod(fmod=0)`` (28), 8/16-bit integer
``Add``/``Sub``/``Mul``/``Div`` (14), integer ``Relu`` (14), half-precision ``IsInf`` (20),
signed ``BitShift`` (28), ``Clip``'s bounds as attributes (11) and ``Range``'s ``stash_type``
(27).
"""

from __future__ import annotations

import numpy as np
from onnx import NodeProto, TensorProto, helper

from .common import Decline, Env, attr, set_attrs, with_inputs, with_outputs
from .registry import adapter, need_const


@adapter("Mod", 28)
def _mod_float_floor(node: NodeProto, env: Env) -> list[NodeProto]:
    """Mod(fmod=0) on floats exists from opset 28: fmod, then move a remainder whose sign
    differs from the divisor's by one divisor (the result takes the divisor's sign)."""
    elem = env.elem_type(node.input[0])
    if elem is None:
        raise Decline("the input type is unknown")
    floating = elem in (TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16,
                        TensorProto.BFLOAT16)
    if not floating or attr(node, "fmod", 0):
        return [node]
    a, b = node.input[0], node.input[1]
    dtype = helper.tensor_dtype_to_np_dtype(elem)
    zero, c_zero = env.constant_node(np.zeros((), dtype=dtype), "zero")
    r, nz, r_neg, b_neg, differ, fix, shifted = (env.fresh(h) for h in (
        "fmod", "nonzero", "r_neg", "b_neg", "differ", "fix", "shifted"))
    is_zero = env.fresh("is_zero")
    return [c_zero,
            helper.make_node("Mod", [a, b], [r], fmod=1),
            helper.make_node("Equal", [r, zero], [is_zero]),
            helper.make_node("Not", [is_zero], [nz]),
            helper.make_node("Less", [r, zero], [r_neg]),
            helper.make_node("Less", [b, zero], [b_neg]),
            helper.make_node("Xor", [r_neg, b_neg], [differ]),
            helper.make_node("And", [nz, differ], [fix]),
            helper.make_node("Add", [r, b], [shifted]),
            helper.make_node("Where", [fix, shifted, r], [node.output[0]])]


_NARROW_INTS = (TensorProto.INT8, TensorProto.INT16, TensorProto.UINT8, TensorProto.UINT16)


@adapter(("Add", "Sub", "Mul", "Div"), 14)
def _arithmetic_narrow_ints(node: NodeProto, env: Env) -> list[NodeProto]:
    """8- and 16-bit integers (opset 14): compute in int32 and cast back, which wraps the
    same way (Div truncates, and int32 holds every quotient)."""
    elem = env.elem_type(node.input[0])
    if elem not in _NARROW_INTS:
        return [node]
    a, b, wide = env.fresh("a32"), env.fresh("b32"), env.fresh("r32")
    return [helper.make_node("Cast", [node.input[0]], [a], to=TensorProto.INT32),
            helper.make_node("Cast", [node.input[1]], [b], to=TensorProto.INT32),
            with_outputs(with_inputs(node, [a, b]), [wide]),
            helper.make_node("Cast", [wide], [node.output[0]], to=elem)]


@adapter("Relu", 14)
def _relu_ints(node: NodeProto, env: Env) -> list[NodeProto]:
    elem = env.elem_type(node.input[0])
    if elem not in (TensorProto.INT8, TensorProto.INT16, TensorProto.INT32, TensorProto.INT64):
        return [node]
    zero, c_zero = env.constant_node(np.zeros((), dtype=helper.tensor_dtype_to_np_dtype(elem)),
                                     "zero")
    return [c_zero, helper.make_node("Max", [node.input[0], zero], [node.output[0]])]


@adapter("IsInf", 20)
def _isinf_half(node: NodeProto, env: Env) -> list[NodeProto]:
    if env.elem_type(node.input[0]) not in (TensorProto.FLOAT16, TensorProto.BFLOAT16):
        return [node]
    wide = env.fresh("x32")
    return [helper.make_node("Cast", [node.input[0]], [wide], to=TensorProto.FLOAT),
            with_inputs(node, [wide])]


_UNSIGNED = {TensorProto.INT8: TensorProto.UINT8, TensorProto.INT16: TensorProto.UINT16,
             TensorProto.INT32: TensorProto.UINT32, TensorProto.INT64: TensorProto.UINT64}


@adapter("BitShift", 28)
def _bitshift_signed(node: NodeProto, env: Env) -> list[NodeProto]:
    """Signed integers (opset 28) through the unsigned ones of the same width: a cast
    between them keeps the bits. A right shift is arithmetic: for x < 0 it is
    -1 - ((-1 - x) >> y). A shift by a negative amount or by the width or more gives 0, or
    -1 for a right shift of a negative x (clamping the amount to width - 1 does that)."""
    elem = env.elem_type(node.input[0])
    if elem not in _UNSIGNED:
        if elem is None:
            raise Decline("the input type is unknown")
        return [node]
    width = np.dtype(helper.tensor_dtype_to_np_dtype(elem)).itemsize * 8
    x, y, z = node.input[0], node.input[1], node.output[0]
    f = env.fresh
    nodes: list[NodeProto] = []
    compute = elem
    if elem == TensorProto.INT16:  # (onnxruntime has no int16 Where: compute in int32)
        compute = TensorProto.INT32
        x32, y32, z32 = f("x32"), f("y32"), f("z32")
        nodes += [helper.make_node("Cast", [x], [x32], to=compute),
                  helper.make_node("Cast", [y], [y32], to=compute)]
        x, y, z, final = x32, y32, z32, z
    unsigned = _UNSIGNED[compute]
    dtype = helper.tensor_dtype_to_np_dtype(compute)
    zero, c_zero = env.constant_node(np.zeros((), dtype=dtype), "zero")
    top, c_top = env.constant_node(np.array(width - 1, dtype=dtype), "top")
    minus1, c_m1 = env.constant_node(np.array(-1, dtype=dtype), "minus1")
    nodes += [c_zero, c_top, c_m1]
    back_to = [] if compute == elem else [
        helper.make_node("Cast", [z], [final], to=elem)]  # keeps the low bits
    y_neg, y_big, y_bad, y_ok, y_u = f("y_neg"), f("y_big"), f("y_bad"), f("y"), f("y_u")
    nodes += [helper.make_node("Less", [y, zero], [y_neg]),
              helper.make_node("Greater", [y, top], [y_big]),
              helper.make_node("Or", [y_neg, y_big], [y_bad]),
              helper.make_node("Where", [y_bad, top, y], [y_ok]),
              helper.make_node("Cast", [y_ok], [y_u], to=unsigned)]
    direction = attr(node, "direction", b"")
    direction = direction.decode() if isinstance(direction, bytes) else direction
    if direction == "LEFT":
        x_u, shifted, back = f("x_u"), f("shifted"), f("back")
        nodes += [helper.make_node("Cast", [x], [x_u], to=unsigned),
                  helper.make_node("BitShift", [x_u, y_u], [shifted], direction="LEFT"),
                  helper.make_node("Cast", [shifted], [back], to=compute),
                  helper.make_node("Where", [y_bad, zero, back], [z])]
        return nodes + back_to
    x_neg, flipped, t, t_u, shifted, r, r_flip = (f(h) for h in (
        "x_neg", "flipped", "t", "t_u", "shifted", "r", "r_flipped"))
    nodes += [helper.make_node("Less", [x, zero], [x_neg]),
              helper.make_node("Sub", [minus1, x], [flipped]),
              helper.make_node("Where", [x_neg, flipped, x], [t]),
              helper.make_node("Cast", [t], [t_u], to=unsigned),
              helper.make_node("BitShift", [t_u, y_u], [shifted], direction="RIGHT"),
              helper.make_node("Cast", [shifted], [r], to=compute),
              helper.make_node("Sub", [minus1, r], [r_flip]),
              helper.make_node("Where", [x_neg, r_flip, r], [z])]
    return nodes + back_to


@adapter("Clip", 11, reads_constants=True)
def _clip_inputs_to_attributes(node: NodeProto, env: Env) -> list[NodeProto]:
    low = need_const(node, env, 1, "min")
    high = need_const(node, env, 2, "max")
    attrs = {}
    if low is not None:
        attrs["min"] = float(np.asarray(low).reshape(-1)[0])
    if high is not None:
        attrs["max"] = float(np.asarray(high).reshape(-1)[0])
    return [with_inputs(set_attrs(node, **attrs), node.input[:1])]


@adapter("Range", 27)
def _range_stash(node: NodeProto, env: Env) -> list[NodeProto]:
    elem = env.elem_type(node.input[0])
    base = set_attrs(node, drop=["stash_type"])
    if elem not in (TensorProto.FLOAT16, TensorProto.BFLOAT16) or not attr(
            node, "stash_type", 1):
        if elem is None:
            raise Decline("the input type is unknown")
        return [base]
    nodes, cast = [], []
    for name in node.input:
        c = env.fresh("f32")
        nodes.append(helper.make_node("Cast", [name], [c], to=TensorProto.FLOAT))
        cast.append(c)
    r = env.fresh("range")
    nodes.append(with_outputs(with_inputs(base, cast), [r]))
    nodes.append(helper.make_node("Cast", [r], [node.output[0]], to=elem))
    return nodes
