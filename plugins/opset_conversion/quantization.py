"""Adapters for ``QuantizeLinear`` and ``DequantizeLinear``: float16 scales (19),
16-bit and blocked quantization (21), and the widening of 4-bit weights to 8 bits below opset
21 (which has no 4-bit types).
"""

from __future__ import annotations

import numpy as np
from onnx import ModelProto, NodeProto, TensorProto, helper, numpy_helper

from rewriter.plugin import normalize_domain

from .common import Decline, Env, attr, input_at, set_attrs, with_inputs, with_outputs
from .registry import adapter

# x types a DequantizeLinear of an older version does not take (float8 came at 19; 4-bit
# at 21; the FNUZ float8 types and float4 later still)
_FLOAT8 = tuple(getattr(TensorProto, n) for n in ("FLOAT8E4M3FN", "FLOAT8E4M3FNUZ", "FLOAT8E5M2",
                                                  "FLOAT8E5M2FNUZ", "FLOAT8E8M0")
                if hasattr(TensorProto, n))
_NOT_BEFORE_21 = tuple(getattr(TensorProto, n) for n in ("INT4", "UINT4", "FLOAT4E2M1", "INT2",
                                                         "UINT2") if hasattr(TensorProto, n))
_NOT_BEFORE_19 = _FLOAT8 + _NOT_BEFORE_21


def _type_name(elem_type: int) -> str:
    return TensorProto.DataType.Name(elem_type).lower() if elem_type else "unknown"


@adapter("DequantizeLinear", 19)
def _dequantize_half_scale(node: NodeProto, env: Env) -> list[NodeProto]:
    """A float16 scale (opset 19) of 8-bit ``x``: dequantized in float, rounded to float16
    once. Exact: ``|x - zero_point| <= 255`` times an 11-bit scale fits float's 24 bits, so
    the one rounding is float16's own."""
    x_type, scale_type = env.elem_type(node.input[0]), env.elem_type(input_at(node, 1))
    if x_type in _NOT_BEFORE_19 or scale_type == TensorProto.BFLOAT16:
        raise Decline(f"DequantizeLinear(13) takes no {_type_name(x_type)} input or "
                      f"{_type_name(scale_type)} scale")
    if (scale_type != TensorProto.FLOAT16
            or x_type not in (TensorProto.INT8, TensorProto.UINT8)):
        return [node]  # valid at 13 as it is (or types unknown until the model's are)
    scale, wide = env.fresh("scale32"), env.fresh("y32")
    inputs = [node.input[0], scale, *node.input[2:]]
    return [helper.make_node("Cast", [node.input[1]], [scale], to=TensorProto.FLOAT),
            with_outputs(with_inputs(node, inputs), [wide]),
            helper.make_node("Cast", [wide], [node.output[0]], to=TensorProto.FLOAT16)]


@adapter("DequantizeLinear", 21)
def _dequantize_16bit(node: NodeProto, env: Env) -> list[NodeProto]:
    """16-bit ``x`` (opset 21), per tensor (a scalar scale, no blocks): ``(Cast(x) -
    Cast(zero_point)) * scale`` in float (exact up to the product's one rounding, as the
    kernel computes it), cast to a float16 scale's type at the end."""
    x_type, scale_type = env.elem_type(node.input[0]), env.elem_type(input_at(node, 1))
    if x_type in _NOT_BEFORE_21:
        raise Decline(f"DequantizeLinear(19) takes no {_type_name(x_type)} input (4-bit "
                      "weights are widened to 8 bits only where they are initializers of the "
                      "main graph)")
    if attr(node, "block_size", 0):
        return _dequantize_blocked(node, env)
    if (x_type not in (TensorProto.INT16, TensorProto.UINT16) or env.rank(node.input[1]) != 0
            or attr(node, "block_size", 0) or scale_type not in (TensorProto.FLOAT,
                                                                   TensorProto.FLOAT16)):
        return [node]
    nodes, x = [], env.fresh("x32")
    nodes.append(helper.make_node("Cast", [node.input[0]], [x], to=TensorProto.FLOAT))
    if input_at(node, 2):
        zero, shifted = env.fresh("zp32"), env.fresh("shifted")
        nodes += [helper.make_node("Cast", [node.input[2]], [zero], to=TensorProto.FLOAT),
                  helper.make_node("Sub", [x, zero], [shifted])]
        x = shifted
    scale = node.input[1]
    if scale_type == TensorProto.FLOAT16:
        scale = env.fresh("scale32")
        nodes.append(helper.make_node("Cast", [node.input[1]], [scale], to=TensorProto.FLOAT))
        wide = env.fresh("y32")
        nodes += [helper.make_node("Mul", [x, scale], [wide]),
                  helper.make_node("Cast", [wide], [node.output[0]], to=TensorProto.FLOAT16)]
    else:
        nodes.append(helper.make_node("Mul", [x, scale], [node.output[0]]))
    return nodes


def _dequantize_blocked(node: NodeProto, env: Env) -> list[NodeProto]:
    """``block_size`` (opset 21) of 8/16-bit ``x`` (4-bit weights arrive widened to 8 bits,
    see :func:`widen_4bit_initializers`): ``(Cast(x) - Cast(zero_point)) * scale`` with each
    scale and zero point repeated over its block along ``axis`` (``Unsqueeze`` -> ``Expand``
    -> ``Reshape`` -> ``Slice`` to x's size), the difference in int32 and the product in
    float (exact up to the product's one rounding, as onnxruntime's kernel), cast to a
    float16 scale's type at the end. Needs x's static shape."""
    x, scale, zp, y = node.input[0], input_at(node, 1), input_at(node, 2), node.output[0]
    x_type, scale_type = env.elem_type(x), env.elem_type(scale)
    shape, block = env.shape(x), attr(node, "block_size", 0)
    if x_type not in (TensorProto.INT8, TensorProto.UINT8, TensorProto.INT16,
                      TensorProto.UINT16):
        raise Decline(f"blocked DequantizeLinear of {_type_name(x_type)} x (8/16-bit, or 4-bit "
                      "initializers widened to 8 bits, only)")
    if scale_type not in (TensorProto.FLOAT, TensorProto.FLOAT16):
        raise Decline("blocked DequantizeLinear lowered for a float or float16 scale only")
    if shape is None or any(d is None for d in shape) or not shape:
        raise Decline("blocked DequantizeLinear lowered for an x of static shape only")
    rank = len(shape)
    axis = attr(node, "axis", 1) % rank
    blocks = -(-shape[axis] // block)
    nodes: list[NodeProto] = []

    def const(value, hint):
        name, c = _const_node(env, np.asarray(value), hint)
        nodes.append(c)
        return name

    def spread(v: str) -> str:  # (.., blocks, ..) -> (.., blocks * block, ..) -> x's size
        axes = const(np.array([axis + 1], np.int64), "axes")
        wide = [*shape[:axis], blocks, block, *shape[axis + 1:]]
        merged = [*shape[:axis], blocks * block, *shape[axis + 1:]]
        unsqueezed, expanded, reshaped = (env.fresh(h) for h in ("unsq", "expand", "merge"))
        nodes.extend([
            helper.make_node("Unsqueeze", [v, axes], [unsqueezed]),
            helper.make_node("Expand", [unsqueezed, const(np.array(wide, np.int64), "wide")],
                             [expanded]),
            helper.make_node("Reshape", [expanded, const(np.array(merged, np.int64), "merged")],
                             [reshaped])])
        if blocks * block == shape[axis]:
            return reshaped
        cut = env.fresh("cut")
        nodes.append(helper.make_node(
            "Slice", [reshaped, const(np.array([0], np.int64), "start"),
                      const(np.array([shape[axis]], np.int64), "end"),
                      const(np.array([axis], np.int64), "axis")], [cut]))
        return cut

    values = env.fresh("x32")
    nodes.append(helper.make_node("Cast", [x], [values], to=TensorProto.INT32))
    if zp:
        zero, shifted = env.fresh("zp32"), env.fresh("shifted")
        nodes += [helper.make_node("Cast", [spread(zp)], [zero], to=TensorProto.INT32),
                  helper.make_node("Sub", [values, zero], [shifted])]
        values = shifted
    real = env.fresh("real")
    nodes.append(helper.make_node("Cast", [values], [real], to=TensorProto.FLOAT))
    scales = spread(scale)
    if scale_type == TensorProto.FLOAT16:
        wide_scales, product = env.fresh("scale32"), env.fresh("y32")
        nodes += [helper.make_node("Cast", [scales], [wide_scales], to=TensorProto.FLOAT),
                  helper.make_node("Mul", [real, wide_scales], [product]),
                  helper.make_node("Cast", [product], [y], to=TensorProto.FLOAT16)]
    else:
        nodes.append(helper.make_node("Mul", [real, scales], [y]))
    return nodes


_WIDENED_4BIT = {TensorProto.INT4: TensorProto.INT8, TensorProto.UINT4: TensorProto.UINT8}


def widened_4bit(model: ModelProto) -> dict[str, int]:
    """The main graph's int4/uint4 initializers with their data in the file (not graph
    inputs), by name, with the 8-bit type they become below opset 21 (which has no 4-bit
    types): the same values, one per byte."""
    inputs = {v.name for v in model.graph.input}
    widened = {t.name: _WIDENED_4BIT[t.data_type] for t in model.graph.initializer
               if t.data_type in _WIDENED_4BIT and t.data_location != TensorProto.EXTERNAL
               and t.name not in inputs}
    if widened:  # and the values the main graph only moves from them (a reshaped weight)
        for node in model.graph.node:
            if (node.op_type in _MOVES_VALUES and normalize_domain(node.domain) == ""
                    and node.input and node.input[0] in widened and node.output):
                widened[node.output[0]] = widened[node.input[0]]
    return widened


# ops whose output has the element type of their first input, holding its values moved
_MOVES_VALUES = frozenset({"Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten",
                           "Identity", "Slice", "Gather", "Expand"})


def widen_4bit_initializers(model: ModelProto) -> list[str]:
    """Rewrite the initializers :func:`widened_4bit` names as int8/uint8 (and the declared
    types of the values moved from them); the names changed."""
    widened = widened_4bit(model)
    for i, t in enumerate(model.graph.initializer):
        if t.name in widened:
            values = numpy_helper.to_array(t).astype(np.int8 if widened[t.name] == TensorProto.INT8
                                                     else np.uint8)
            model.graph.initializer[i].CopyFrom(numpy_helper.from_array(values, t.name))
    for info in list(model.graph.value_info) + list(model.graph.output):
        if info.name in widened and info.type.HasField("tensor_type"):
            info.type.tensor_type.elem_type = widened[info.name]
    return sorted(widened)


@adapter("QuantizeLinear", 19)
def _quantize_half(node: NodeProto, env: Env) -> list[NodeProto]:
    """A float16 ``x`` and scale (opset 19) quantized to 8 bits: both cast to float first.
    Exact: float16 values are floats, and onnxruntime's kernel divides in float too."""
    x_type, scale_type = env.elem_type(node.input[0]), env.elem_type(input_at(node, 1))
    zp_type = env.elem_type(input_at(node, 2))
    if zp_type in _NOT_BEFORE_19 or TensorProto.BFLOAT16 in (x_type, scale_type):
        raise Decline(f"QuantizeLinear(13) gives no {_type_name(zp_type)} output and takes no "
                      f"{_type_name(x_type)} input or {_type_name(scale_type)} scale")
    if attr(node, "saturate", 1) != 1:
        raise Decline("QuantizeLinear(13) has no saturate (float8 outputs)")
    base = set_attrs(node, drop=["saturate"])
    if TensorProto.FLOAT16 not in (x_type, scale_type):
        return [base]  # valid at 13 as it is (or types unknown until the model's are)
    nodes, inputs = [], list(base.input)
    for i in (0, 1):
        if env.elem_type(inputs[i]) == TensorProto.FLOAT16:
            wide = env.fresh("x32" if i == 0 else "scale32")
            nodes.append(helper.make_node("Cast", [inputs[i]], [wide], to=TensorProto.FLOAT))
            inputs[i] = wide
    return [*nodes, with_inputs(base, inputs)]


_QUANTIZED_16 = {TensorProto.INT16: (-32768, 32767), TensorProto.UINT16: (0, 65535)}


def _const_node(env: Env, value: np.ndarray, hint: str) -> tuple[str, NodeProto]:
    name = env.fresh(hint)
    return name, helper.make_node("Constant", [], [name],
                                  value=numpy_helper.from_array(value))


def _along_axis_shape(x: str, axis: int, env: Env, nodes: list[NodeProto]) -> str:
    """The shape ``[-1, 1, ..., 1]`` that makes a per-axis (1-D) or scalar parameter
    broadcast along ``axis`` of ``x``: as many 1s as axes behind ``axis`` (known for a
    negative axis or a known rank; else computed from ``Shape(x)`` at run time)."""
    rank = env.rank(x)
    if axis < 0 or rank is not None:
        behind = -axis - 1 if axis < 0 else rank - axis - 1
        name, node = _const_node(env, np.array([-1] + [1] * max(behind, 0), np.int64),
                                 "axis_shape")
        nodes.append(node)
        return name
    shape, size, behind, count, ones, out = (env.fresh(h) for h in (
        "x_shape", "x_rank", "behind", "count", "ones", "axis_shape"))
    after, node_after = _const_node(env, np.array(axis + 1, np.int64), "after")
    zero, node_zero = _const_node(env, np.array(0, np.int64), "zero")
    one, node_one = _const_node(env, np.array([1], np.int64), "one")
    minus, node_minus = _const_node(env, np.array([-1], np.int64), "minus_one")
    nodes += [node_after, node_zero, node_one, node_minus,
              helper.make_node("Shape", [x], [shape]),
              helper.make_node("Size", [shape], [size]),
              helper.make_node("Sub", [size, after], [behind]),
              helper.make_node("Max", [behind, zero], [count]),
              helper.make_node("Reshape", [count, one], [count + "_1d"]),
              helper.make_node("Expand", [one, count + "_1d"], [ones]),
              helper.make_node("Concat", [minus, ones], [out], axis=0)]
    return out


@adapter("QuantizeLinear", 21)
def _quantize_16bit(node: NodeProto, env: Env) -> list[NodeProto]:
    """16-bit outputs (opset 21): ``Clip(Round(x / scale) + zero_point)`` in float, cast
    to the 16-bit type, as the spec defines it (``Round`` rounds half to even, as the
    kernel). Exact: the integers up to 65535 are floats. Per tensor, or per axis of an ``x``
    of known rank; no blocks."""
    x_type, scale_type = env.elem_type(node.input[0]), env.elem_type(input_at(node, 1))
    zp = input_at(node, 2)
    out_type = env.elem_type(zp) if zp else attr(node, "output_dtype", 0) or None
    if out_type in _NOT_BEFORE_21:
        raise Decline(f"QuantizeLinear(19) gives no {_type_name(out_type)} output")
    if attr(node, "block_size", 0):
        raise Decline("QuantizeLinear(19) has no block_size (blocked quantization)")
    if out_type not in _QUANTIZED_16:
        return [set_attrs(node, drop=["output_dtype"])] if not zp and out_type in (
            None, TensorProto.UINT8) else [node]
    if x_type not in (TensorProto.FLOAT, TensorProto.FLOAT16) or scale_type not in (
            TensorProto.FLOAT, TensorProto.FLOAT16):
        raise Decline("16-bit QuantizeLinear lowered for float or float16 x and scale only")
    nodes: list[NodeProto] = []

    def wide(name: str, hint: str) -> str:
        if env.elem_type(name) == TensorProto.FLOAT:
            return name
        out = env.fresh(hint)
        nodes.append(helper.make_node("Cast", [name], [out], to=TensorProto.FLOAT))
        return out

    x, scale = wide(node.input[0], "x32"), wide(node.input[1], "scale32")
    zero = wide(zp, "zp32") if zp else None
    if env.rank(node.input[1]) != 0:  # per axis (or unknown): along `axis` of x
        shape = _along_axis_shape(node.input[0], attr(node, "axis", 1), env, nodes)
        reshaped = []
        for name in [scale] + ([zero] if zero else []):
            out = env.fresh("along_axis")
            nodes.append(helper.make_node("Reshape", [name, shape], [out]))
            reshaped.append(out)
        scale, zero = reshaped[0], (reshaped[1] if zero else None)
    low, high = _QUANTIZED_16[out_type]
    ratio, rounded = env.fresh("ratio"), env.fresh("rounded")
    nodes += [helper.make_node("Div", [x, scale], [ratio]),
              helper.make_node("Round", [ratio], [rounded])]
    if zero:
        shifted = env.fresh("shifted")
        nodes.append(helper.make_node("Add", [rounded, zero], [shifted]))
        rounded = shifted
    lo, hi, clipped = env.fresh("low"), env.fresh("high"), env.fresh("clipped")
    nodes += [helper.make_node("Constant", [], [lo], value=numpy_helper.from_array(
                  np.array(low, np.float32))),
              helper.make_node("Constant", [], [hi], value=numpy_helper.from_array(
                  np.array(high, np.float32))),
              helper.make_node("Clip", [rounded, lo, hi], [clipped]),
              helper.make_node("Cast", [clipped], [node.output[0]], to=out_type)]
    return nodes
