"""Quantization and the float4e2m1 type, in forms onnxruntime lacks:

* ``QuantizeLinear`` (from 21) with ``block_size`` (8/16-bit outputs: each scale and zero
  point repeated over its block along ``axis``, cut to the input's size, then
  ``saturate(round(x / scale) + zero_point)``, rounding half to even), or into float4e2m1
  (``Cast(x / scale + zero_point)``, which rounds to nearest even and saturates).
* ``Cast`` and ``CastLike`` from float4e2m1 (a static shape of rank 2 or more) to float or
  float16, for onnxruntime (no CPU kernel casts, reshapes or measures float4e2m1): its
  ``com.microsoft::GatherBlockQuantized`` of every row with unit scales in blocks of 16
  (exact: every float4e2m1 value is a float16).
"""

from __future__ import annotations

import numpy as np
from onnx import FunctionProto, TensorProto

from rewriter.plugin import Arg, Declined, OpSample, declining
from rewriter.plugin import present as _present

from .common import (
    DOMAIN,
    Body,
    attributes_known,
    body_opset,
    float_elem,
    formal_inputs,
    input_elem,
)

BLOCKED_QUANTIZE_OPSETS = (21, None)
FLOAT4_CAST_OPSETS = (23, None)  # float4e2m1 is new in opset 23
FLOAT4_BLOCK = 16  # GatherBlockQuantized's smallest block
_FLOAT4_TARGETS = (TensorProto.FLOAT, TensorProto.FLOAT16)  # GatherBlockQuantized's T2
_FLOAT4_GATHER = ("1.32", "the decomposition's com.microsoft::GatherBlockQuantized takes no "
                  "float4e2m1 data in onnxruntime 1.23.2 and 1.30.0 (\"Type "
                  "'tensor(float4e2m1)' of input parameter ... is invalid\"); 1.21.0 loads "
                  "no model of IR version 11, which float4e2m1 needs")


# -- Cast from float4e2m1 (onnxruntime) -----------------------------------------------------


@declining
def build_cast_from_float4(ctx) -> FunctionProto | None:
    """``Cast`` (``CastLike``) of float4e2m1 values to a float type:
    ``com.microsoft::GatherBlockQuantized`` of every row with unit scales (the one
    onnxruntime CPU kernel that reads float4e2m1; its values are exact in float16)."""
    node = ctx.node
    types = list(ctx.input_types or [])
    like = node.op_type == "CastLike"
    to = input_elem(ctx, 1) if like else ctx.attribute("to")
    if (not types or types[0] != "tensor(float4e2m1)" or len(node.input) != 1 + like
            or len(node.output) != 1
            or not attributes_known(node, ["to", "saturate", "round_mode"])):
        raise Declined("needs a float4e2m1 input (and CastLike's target), one output, only "
                       "to / saturate / round_mode")
    if to not in _FLOAT4_TARGETS:
        raise Declined("casts to float or float16 only")
    shape = ctx.shape(node.input[0])
    if shape is None or len(shape) < 2 or None in shape:
        raise Declined("needs a declared static shape of rank 2 or more (onnxruntime takes "
                       "no Shape of float4e2m1; GatherBlockQuantized reads rank 2 or more)")
    b = Body(body_opset(ctx))
    rows = b.const(np.arange(shape[0], dtype=np.int64))
    blocks = -(-shape[-1] // FLOAT4_BLOCK)
    scales = b.const(np.ones([*shape[:-1], blocks]), to)
    y = b.op("GatherBlockQuantized", "input", rows, scales, domain="com.microsoft",
             gather_axis=0, quantize_axis=-1, block_size=FLOAT4_BLOCK)
    return b.function(DOMAIN, "cast_from_float4e2m1", ["input", "target_type"][:1 + like], [y],
                      opset_imports={"com.microsoft": 1})


# -- blocked QuantizeLinear -----------------------------------------------------------------

_QUANTIZED = {TensorProto.INT8: np.int8, TensorProto.UINT8: np.uint8,
              TensorProto.INT16: np.int16, TensorProto.UINT16: np.uint16}


@declining
def build_quantize_linear(ctx) -> FunctionProto | None:
    """``QuantizeLinear`` (from opset 21) with ``block_size`` (8/16-bit outputs: each scale
    and zero point repeated over its block along ``axis``, ``saturate(round(x / scale) +
    zp)``, round half to even) or into float4e2m1 (``Cast(x / scale + zp)``: the cast
    rounds to nearest even and saturates)."""
    node = ctx.node
    block, axis = ctx.attribute("block_size", 0), ctx.attribute("axis", 1)
    rank = ctx.rank(node.input[0]) if node.input else None
    x_type, scale_type = float_elem(ctx, 0), float_elem(ctx, 1)
    if _present(node.input, 2):
        out_type = input_elem(ctx, 2)
    else:
        out_type = ctx.attribute("output_dtype", 0) or TensorProto.UINT8
    to_float4 = out_type == TensorProto.FLOAT4E2M1
    if (not (block or to_float4) or rank is None or x_type is None or scale_type is None
            or not (out_type in _QUANTIZED or to_float4) or ctx.attribute("saturate", 1) != 1
            or len(node.output) != 1 or len(node.input) > 3
            or not attributes_known(node, ["axis", "block_size", "output_dtype",
                                           "saturate", "precision"])):
        raise Declined("needs blocked or float4 output, a known input rank, float x and scale, a "
                       "quantized output type, saturate=1, one output, known attributes")
    axis %= rank
    b = Body(body_opset(ctx))
    f32 = TensorProto.FLOAT

    def spread(v: str) -> str:  # (.., blocks, ..) -> (.., blocks * block, ..) -> x's size
        shape = b.op("Shape", v)
        count = b.slice(shape, [axis], [axis + 1], [0])
        expanded = b.op("Expand", b.unsqueeze(v, [axis + 1]), b.op(
            "Concat", b.slice(shape, [0], [axis], [0]), count, b.ints([block]),
            b.slice(shape, [axis + 1], [rank], [0]), axis=0))
        merged = b.op("Reshape", expanded, b.op(
            "Concat", b.slice(shape, [0], [axis], [0]), b.ints([-1]),
            b.slice(shape, [axis + 1], [rank], [0]), axis=0))
        size = b.slice(b.op("Shape", "x"), [axis], [axis + 1], [0])
        return b.slice(merged, [0], size, [axis])

    def along_axis(v: str) -> str:  # a scalar, or (C) along ``axis``: broadcastable to x
        if block:
            return spread(v)
        target = b.op("Concat", b.ints([-1]), b.ints([1] * (rank - axis - 1)), axis=0) \
            if rank - axis - 1 else b.ints([-1])
        return b.op("Reshape", v, target)

    q = b.op("Div", b.cast("x", f32), b.cast(along_axis("y_scale"), f32))
    if to_float4:
        if _present(node.input, 2):
            q = b.op("Add", q, b.cast(along_axis("y_zero_point"), f32))
        y = b.cast(q, out_type)
    else:
        q = b.op("Round", q)
        if _present(node.input, 2):
            q = b.op("Add", q, b.cast(along_axis("y_zero_point"), f32))
        info = np.iinfo(_QUANTIZED[out_type])
        q = b.op("Max", b.op("Min", q, b.const(np.array(info.max), np.float32)),
                 b.const(np.array(info.min), np.float32))
        y = b.cast(q, out_type)
    return b.function(DOMAIN, "quantize_linear",
                      formal_inputs(node, ["x", "y_scale", "y_zero_point"]), [y])


# every float4e2m1 value
_FLOAT4_VALUES = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6],
                          np.float32)


def samples() -> dict[str, list[OpSample]]:
    """The samples of this module's ops, by op type."""
    return {
        "QuantizeLinear": [
            OpSample([Arg("T[3,4]", low=-30, high=30), Arg("float[3,2]", low=0.1, high=1.0)],
                     ["int16"], dict(axis=1, block_size=2, output_dtype=TensorProto.INT16),
                     opset=28, name="symmetric", dtypes=["float"]),
            OpSample([Arg("T[3,5]", low=-30, high=30), Arg("float[3,2]", low=0.1, high=1.0),
                      Arg("uint8[3,2]", low=100, high=150)], ["uint8"],
                     dict(axis=-1, block_size=3), opset=21, name="asymmetric-partial",
                     dtypes=["float"]),
            OpSample([Arg("T[4,2,3]", low=-300, high=300),
                      Arg("float[2,2,3]", low=0.5, high=1.0),
                      Arg("int8[2,2,3]", low=-5, high=5)], ["int8"],
                     dict(axis=0, block_size=2), opset=21, name="axis0-saturating",
                     dtypes=["float"]),
            OpSample([Arg("T[3,4]", values=[[0.0, 2.5, 4.8, 8.6], [-30, -20, 6, 9],
                                            [-0.0, -2.5, -4.8, -8.6]]),
                      Arg("float[3]", values=[2.0, 3.0, 4.0])], ["float4e2m1"],
                     dict(axis=0, output_dtype=TensorProto.FLOAT4E2M1), opset=23,
                     name="float4e2m1-per-axis", dtypes=["float"])],
        "Cast": [OpSample([Arg("float4e2m1[3,5]", values=_FLOAT4_VALUES[:15].reshape(3, 5))],
                          [out], attributes={"to": to}, opset=opset, name=f"to-{out}",
                          min_onnxruntime=_FLOAT4_GATHER)
                 for out, to, opset in [("float", TensorProto.FLOAT, 23),
                                        ("float16", TensorProto.FLOAT16, 25)]] + [
            OpSample([Arg("float4e2m1[2,2,17]", values=np.resize(_FLOAT4_VALUES, (2, 2, 17)))],
                     ["float"], attributes={"to": TensorProto.FLOAT}, opset=23,
                     name="two-blocks", min_onnxruntime=_FLOAT4_GATHER)],
        "CastLike": [OpSample([Arg("float4e2m1[3,5]", values=_FLOAT4_VALUES[:15].reshape(3, 5)),
                               Arg(f"{out}[0]")], [out], opset=25, name=f"like-{out}",
                              min_onnxruntime=_FLOAT4_GATHER)
                     for out in ("float", "float16")],
    }
