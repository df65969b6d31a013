"""Decompositions ``onnx-standard``: standard ops a runtime lacks for some element types or
versions, written with other standard ops where the result is the same bit for bit.

* ``BitCast(x, to)`` (onnxruntime 1.32 lacks it for ``bool``, OpenVINO 2026.4 entirely):
  from ``bool`` to ``uint8`` or ``int8`` a ``Cast`` (a ``bool`` is one byte holding 0 or
  1); between same-width integers (8 to 64 bits) a ``Cast``, which keeps the low bits of
  an integer out of range (two's complement: the spec's rule); between an IEEE float
  (float16, float, double) and an integer of its width the fields computed
  arithmetically: the exponent as the count of powers of two (a constant table) not above
  ``|x|``, the mantissa as ``(|x| / 2^e - 1) 2^m`` (exact), subnormals, infinities and the
  sign of -0.0 included; NaN becomes the canonical quiet NaN (its payload cannot be read
  arithmetically), and an integer holding a NaN pattern gives a NaN. The 16- and 32-bit
  forms compute in int32 with bit masks (``BitwiseAnd``; the sign bit set by adding
  ``-2^(w-1)``), never past int32's range nor through an integer ``Div`` (for a target
  ceiling below opset 18, which has no Bitwise ops, in int64 arithmetic instead):
  OpenVINO's CPU plugin computes int64 in int32 and int32 ``Div`` in float (measured: a
  uint32 of 2^31 - 1 came back -1, an int32 -2.5 as 2.4999998). The 64-bit forms (double)
  compute in int64 and double, which OpenVINO's CPU plugin does not hold
  (``openvino_target``'s inexact forms keep them off it). Other pairs (bfloat16, 4-bit
  types) are declined.
* ``DequantizeLinear(x, x_scale[, x_zero_point])`` at opsets 10-18 (the reference evaluator
  of onnx 1.23 implements it from version 19 only): ``y = (Cast(x) - Cast(x_zero_point)) *
  x_scale`` in float, exact for the 8-bit and int32 inputs of these versions (int32 has no
  zero point other than 0); from 13 a 1-D scale (and zero point) applies along ``axis``
  (default 1), reshaped to ``[C, 1, ...]`` so that it broadcasts there (the count of 1s from
  the input's rank at run time, for a non-negative ``axis``).
* **Widened** ops onnxruntime 1.32 has no kernel for at a narrow type: the inputs of that
  type are cast to a wider one, the op runs there with the same attributes, and its outputs
  of the narrow type are cast back. ``bfloat16`` computes in ``float``: exact for what only
  moves, selects or compares values (``Where``, ``Expand``, ``Equal``, ``Max``, ``Min``,
  ``ReduceMax``, ``OneHot``, ...) and for one correctly rounded ``Add``/``Sub``/``Mul``/
  ``Div``/``Sqrt`` (float's 24 bits hold bfloat16's 8 twice and two more, so rounding twice
  rounds as once); ``MatMul``, ``Exp``, ``ReduceSum``... round once at the end instead
  of per step (registered as approximate). Ops with a spec function body (``Softmax``,
  ``Elu``, ``Relu``, ``LessOrEqual``...) are left to it, whose ops are widened in turn.
  ``int16``/``uint16`` ``Max``/``Min`` compute in ``int32`` (exact). ``Pow`` with a
  ``uint32`` exponent takes it as ``int64`` (exact). ``uint64`` exponents and ``TopK`` of
  ``uint64`` are declined (no wider type).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from onnx import FunctionProto, TensorProto, helper

from rewriter.plugin import Arg, Declined, FunctionBuilder, OpSample, hookimpl
from rewriter.plugin import present as _present

BITCAST_OPSETS = (26, None)  # BitCast is new in opset 26
DEQUANTIZE_OPSETS = (10, 18)  # the reference evaluator has DequantizeLinear from 19
QDQ_16BIT_OPSETS = (21, None)  # int16/uint16 Q/DQ from 21 (OpenVINO computes them otherwise)
DEQUANTIZE_LATER_OPSETS = (19, None)
DEQUANTIZE_AXIS = 13  # per-axis scales from opset 13
_BOOL_BITCASTS = {TensorProto.UINT8, TensorProto.INT8}


T = TensorProto
# same-width integers: (signed, unsigned, width)
_INTEGER_PAIRS = {T.INT8: (T.INT8, T.UINT8, 8), T.UINT8: (T.INT8, T.UINT8, 8),
                  T.INT16: (T.INT16, T.UINT16, 16), T.UINT16: (T.INT16, T.UINT16, 16),
                  T.INT32: (T.INT32, T.UINT32, 32), T.UINT32: (T.INT32, T.UINT32, 32),
                  T.INT64: (T.INT64, T.UINT64, 64), T.UINT64: (T.INT64, T.UINT64, 64)}
# IEEE formats: (exponent bits, mantissa bits, the integer types of the same width, the
# float type the arithmetic runs in)
_FLOAT_FORMATS = {T.FLOAT16: (5, 10, (T.INT16, T.UINT16), T.FLOAT),
                  T.FLOAT: (8, 23, (T.INT32, T.UINT32), T.FLOAT),
                  T.DOUBLE: (11, 52, (T.INT64, T.UINT64), T.DOUBLE)}


def _element(ctx) -> int | None:
    types = list(ctx.input_types or [])
    if types and types[0] and types[0].startswith("tensor("):
        return getattr(TensorProto, types[0][7:-1].upper(), None)
    return None


def build_bitcast(ctx) -> FunctionProto | None:
    """``BitCast`` of bool to a byte (``Cast``), between same-width integers (wrapping in
    int64), and between an IEEE float and an integer of its width (the sign, exponent and
    mantissa fields computed arithmetically)."""
    to, source = ctx.attribute("to"), _element(ctx)
    if (source is None or len(ctx.node.attribute) != 1 or len(ctx.node.output) != 1
            or len(ctx.node.input) != 1):
        raise Declined("needs one input of a known element type, only to, one output")
    b = FunctionBuilder(ctx.opset)
    if source == T.BOOL and to in _BOOL_BITCASTS:
        y = b.cast("x", to)
    elif (source in _INTEGER_PAIRS and to in _INTEGER_PAIRS and to != source
          and _INTEGER_PAIRS[source] == _INTEGER_PAIRS[to]):
        y = b.cast("x", to)  # Cast keeps the low bits of an integer out of range
    elif source in _FLOAT_FORMATS and to in _FLOAT_FORMATS[source][2]:
        y = _float_to_bits(b, "x", source, to)
    elif to in _FLOAT_FORMATS and source in _FLOAT_FORMATS[to][2]:
        y = _bits_to_float(b, "x", source, to, ctx.ceiling)
    else:
        raise Declined("only bool to a byte, same-width integers, and an IEEE float and the "
                       "integer of its width")
    return b.function("onnx-standard", "bitcast", ["x"], [y])


def _i64(b: FunctionBuilder, value: int) -> str:
    return b.const(np.array(value, np.int64))


def _i32(b: FunctionBuilder, value: int) -> str:
    return b.const(np.array(value, np.int32))


def _powers(b: FunctionBuilder, exponent_bits: int, mantissa_bits: int, work: int):
    """The powers of two 2^k, k = lowest normal .. highest finite exponent, as a constant
    of ``work`` (exact), and the lowest k. No subnormal power: OpenVINO's CPU plugin reads
    a subnormal constant as 0 (measured: 2^-149 .. 2^-127 of float32 became 0)."""
    bias = 2 ** (exponent_bits - 1) - 1
    low, high = 1 - bias, bias
    dtype = helper.tensor_dtype_to_np_dtype(work)
    table = np.ldexp(np.ones(high - low + 1, dtype), np.arange(low, high + 1)).astype(dtype)
    return b.const(table, work), low


def _float_to_bits(b: FunctionBuilder, x: str, source: int, to: int) -> str:
    """The bits of a float as an integer: sign * 2^(w-1) + exponent field * 2^m + mantissa;
    NaN as the canonical quiet NaN (its payload is not readable arithmetically)."""
    exponent_bits, mantissa_bits, _ints, work = _FLOAT_FORMATS[source]
    dtype = helper.tensor_dtype_to_np_dtype(work)
    bias = 2 ** (exponent_bits - 1) - 1
    width = 1 + exponent_bits + mantissa_bits
    table, low = _powers(b, exponent_bits, mantissa_bits, work)

    def real(value):
        return b.const(np.array(value, dtype), work)

    v = b.cast(x, work) if work != source else x
    zero = real(0.0)
    a = b.op("Abs", v)
    nan = b.op("IsNaN", v)
    negative = b.op("Or", b.op("Less", v, zero), b.op("And", b.op("Equal", v, zero), b.op(
        "Less", b.op("Reciprocal", v), zero)))                           # -0.0 too
    negative = b.op("And", negative, b.op("Not", nan))
    # the count of table entries <= a: floor(log2 a) - low + 1 for a finite a > 0, exactly
    count = b.reduce_sum(b.cast(b.op("GreaterOrEqual", b.unsqueeze(a, [-1]), table),
                                T.INT64), [-1], keepdims=0)
    exponent = b.op("Add", count, _i64(b, low - 1))                      # floor(log2 a)
    normal = b.op("GreaterOrEqual", exponent, _i64(b, 1 - bias))
    scale_m = real(float(2 ** mantissa_bits))
    # a / 2^e as a * 2^h1 * 2^h2 (h1 + h2 = -e, each about e / 2): every factor and product
    # normal, no division (OpenVINO's fused kernels divided FLT_MAX by 2^127 as a product
    # with 2^-127, a subnormal they flush to zero)
    half = bias // 2 + 1
    halves = b.const(np.ldexp(np.ones(2 * half + 1, dtype), np.arange(-half, half + 1))
                     .astype(dtype), work)
    down = b.op("Neg", exponent)
    h1 = b.op("Div", down, _i64(b, 2))
    h2 = b.op("Sub", down, h1)
    scaled = a
    for h in (h1, h2):
        scaled = b.op("Mul", scaled, b.op("Gather", halves, b.op("Add", h, _i64(b, half)),
                                           axis=0))
    mantissa_normal = b.op("Mul", b.op("Sub", scaled, real(1.0)), scale_m)
    mantissa_subnormal = b.op("Mul", b.op("Mul", a, real(float(2.0 ** (bias - 1)))), scale_m)
    mantissa = b.op("Where", normal, mantissa_normal, mantissa_subnormal)
    field = b.op("Where", normal, b.op("Add", exponent, _i64(b, bias)), _i64(b, 0))
    special = b.op("Or", b.op("IsInf", v), nan)
    field = b.op("Where", special, _i64(b, 2 ** exponent_bits - 1), field)
    quiet = real(float(2 ** (mantissa_bits - 1)))
    mantissa = b.op("Where", special, b.op("Where", nan, quiet, zero), mantissa)
    mantissa = b.op("Where", b.op("Equal", a, zero), zero, mantissa)
    if width == 64:  # int64: the sign bit is the most negative value
        rest = b.op("Add", b.op("Mul", field, _i64(b, 2 ** mantissa_bits)),
                    b.cast(mantissa, T.INT64))                           # < 2^63
        bits = b.op("Where", negative, b.op("Add", rest, _i64(b, -2 ** 63)), rest)
        return b.cast(bits, to) if to != T.INT64 else bits  # uint64: Cast keeps the bits
    # 16 and 32 bits in int32, no value past its range (OpenVINO's CPU plugin computes
    # int64 in int32): the fields (< 2^(w-1)), then the sign bit
    rest = b.op("Add", b.op("Mul", b.cast(field, T.INT32), _i32(b, 2 ** mantissa_bits)),
                b.cast(mantissa, T.INT32))
    if width == 16 and to == T.UINT16:  # the unsigned value, in range
        return b.cast(b.op("Where", negative, b.op("Add", rest, _i32(b, 2 ** 15)), rest), to)
    # the sign bit set: rest - 2^31 stays in int32's range (rest < 2^31), as BitwiseOr would
    bits = b.op("Where", negative, b.op("Add", rest, _i32(b, -2 ** (width - 1))), rest)
    return b.cast(bits, to) if to != T.INT32 else bits  # to uint32: Cast keeps the bits


def _bits_to_float(b: FunctionBuilder, x: str, source: int, to: int,
                   ceiling: int | None = None) -> str:
    """The float whose bits an integer holds: ``(1 + mantissa 2^-m) 2^(field - bias)``,
    subnormals ``mantissa 2^(1 - bias - m)``, infinities and NaN for the all-ones field."""
    exponent_bits, mantissa_bits, _ints, work = _FLOAT_FORMATS[to]
    dtype = helper.tensor_dtype_to_np_dtype(work)
    bias = 2 ** (exponent_bits - 1) - 1
    width = 1 + exponent_bits + mantissa_bits
    table, low = _powers(b, exponent_bits, mantissa_bits, work)

    def real(value):
        return b.const(np.array(value, dtype), work)

    if width == 64:
        u = b.cast(x, T.INT64) if source != T.INT64 else x  # uint64: Cast keeps the bits
        negative = b.op("Less", u, _i64(b, 0))
        rest = b.op("Where", negative, b.op("Sub", u, _i64(b, -2 ** 63)), u)
        field = b.op("Div", rest, _i64(b, 2 ** mantissa_bits))
        mantissa = b.op("Sub", rest, b.op("Mul", field, _i64(b, 2 ** mantissa_bits)))
    elif ceiling is None or ceiling >= 18:  # in int32 by bit masks (OpenVINO computes
        # int64 in int32, int32 Div in float, and int32 Sub of large values not exactly)
        # the value in int32 (a uint32's bits kept by Cast), the sign bit tested by a mask
        # (OpenVINO holds an int16 in int32: a Cast from uint16 to int16 kept 32768)
        s = b.cast(x, T.INT32) if source != T.INT32 else x
        sign = b.op("BitwiseAnd", s, _i32(b, -2 ** (width - 1)))
        negative = b.op("Not", b.op("Equal", sign, _i32(b, 0)))
        rest = b.op("BitwiseAnd", s, _i32(b, 2 ** (width - 1) - 1))  # the sign bit cleared
        mantissa = b.op("BitwiseAnd", rest, _i32(b, 2 ** mantissa_bits - 1))
        scaled = b.cast(b.op("Sub", rest, mantissa), work)  # field * 2^m, exact in float
        field = b.cast(b.op("Mul", scaled, real(float(2.0 ** -mantissa_bits))), T.INT64)
        mantissa = b.cast(mantissa, T.INT64)
    else:  # for a ceiling below opset 18 (no Bitwise ops): int64 arithmetic, exact on the
        # runtimes of such ceilings (onnxruntime, the reference evaluator)
        u = b.cast(x, T.INT64)
        if source in (T.INT16, T.INT32):  # the unsigned value of the bits
            u = b.op("Where", b.op("Less", u, _i64(b, 0)),
                     b.op("Add", u, _i64(b, 2 ** width)), u)
        negative = b.op("GreaterOrEqual", u, _i64(b, 2 ** (width - 1)))
        rest = b.op("Where", negative, b.op("Sub", u, _i64(b, 2 ** (width - 1))), u)
        field = b.op("Div", rest, _i64(b, 2 ** mantissa_bits))
        mantissa = b.op("Sub", rest, b.op("Mul", field, _i64(b, 2 ** mantissa_bits)))
    fraction = b.op("Mul", b.cast(mantissa, work), real(float(2.0 ** -mantissa_bits)))
    # 2^(field - bias) from the table (index clamped for the all-zero and all-ones fields)
    index = b.op("Sub", field, _i64(b, bias + low))
    index = b.op("Max", b.op("Min", index, _i64(b, bias - low)), _i64(b, 0))
    value = b.op("Mul", b.op("Add", real(1.0), fraction), b.op("Gather", table, index, axis=0))
    subnormal = b.op("Mul", fraction, real(float(2.0 ** (1 - bias))))
    value = b.op("Where", b.op("Equal", field, _i64(b, 0)), subnormal, value)
    special = b.op("Equal", field, _i64(b, 2 ** exponent_bits - 1))
    value = b.op("Where", special, b.op("Where", b.op("Equal", mantissa, _i64(b, 0)),
                                        real(float("inf")), real(float("nan"))), value)
    value = b.op("Where", negative, b.op("Neg", value), value)
    return b.cast(value, to) if work != to else value


_DEQUANTIZED = {"tensor(int8)", "tensor(uint8)", "tensor(int32)"}
_SIXTEEN_BITS = {"tensor(int16)": T.INT16, "tensor(uint16)": T.UINT16}


def _along_axis(b: FunctionBuilder, value: str, axis: int, x: str) -> str:
    """A 1-D (or scalar) scale or zero point reshaped to ``[-1, 1, ...]`` so that it
    broadcasts along ``axis`` of ``x``: as many 1s as axes behind ``axis`` (from ``x``'s
    rank at run time for a non-negative ``axis``). A scalar becomes ``[1, ...]``."""
    if axis < 0:
        trailing = b.ints([1] * (-axis - 1))
    else:  # 1s for the axes behind ``axis``: rank - axis - 1 of them (0 for a scalar)
        rank = b.op("Size", b.op("Shape", x))
        count = b.op("Max", b.op("Sub", rank, b.ints([axis + 1])), b.ints([0]))
        trailing = b.fill(count, 1, np.int64)
    return b.op("Reshape", value, b.op("Concat", b.ints([-1]), trailing, axis=0))


def _qdq_checked(ctx, quantize: bool) -> None:
    """Decline what the Cast/Sub/Mul forms below do not cover."""
    node = ctx.node
    if (len(node.input) > 3 or not (_present(node.input, 0) and _present(node.input, 1))
            or len(node.output) != 1
            or any(a.name not in (("axis", "saturate", "output_dtype") if quantize else ("axis",))
                   for a in node.attribute) or ctx.attribute("saturate", 1) != 1):
        raise Declined("needs x and scale (zero point optional), axis only (no block_size), one "
                       "output")
    types = list(ctx.input_types or []) + [None] * 3
    if types[1] != "tensor(float)" or (quantize and types[0] != "tensor(float)"):
        raise Declined("needs a float scale" + (" and float x" if quantize else ""))


def build_dequantize_linear(ctx) -> FunctionProto | None:
    """``DequantizeLinear`` as ``(Cast(x) - Cast(zero_point)) * scale``: versions 10-18
    (8-bit and int32 ``x``), and from 19 (no blocks; 16-bit ``x`` from 21) where OpenVINO
    computes it otherwise (see ``openvino_target``): per tensor or per axis."""
    node = ctx.node
    _qdq_checked(ctx, quantize=False)
    x_type = (ctx.input_types or [None])[0]
    if ctx.opset >= 19 and x_type not in _SIXTEEN_BITS and ctx.ceiling is not None:
        raise Declined("8-bit x from opset 19 under an opset ceiling: the opset-conversion pass "
                       "keeps it a DequantizeLinear")
    if x_type not in _DEQUANTIZED and x_type not in _SIXTEEN_BITS:
        raise Declined("x must be int8, uint8, int32, or int16/uint16 (opset 21)")
    b = FunctionBuilder(ctx.opset, TensorProto.FLOAT)
    has_zp = _present(node.input, 2)
    scale, zero_point = "x_scale", "x_zero_point" if has_zp else ""
    constant_scale = ctx.constant(node.input[1])
    if ctx.opset >= DEQUANTIZE_AXIS and (constant_scale is None or constant_scale.ndim):
        axis = ctx.attribute("axis", 1)
        scale = _along_axis(b, scale, axis, "x")
        zero_point = _along_axis(b, zero_point, axis, "x") if has_zp else ""
    if ctx.opset >= 19 or x_type in _SIXTEEN_BITS:
        # the difference in int32, then float (both exact), not Cast(float) -> Sub -> Mul:
        # the form OpenVINO's low-precision transformations take for a dequantization
        x = b.cast("x", TensorProto.INT32)
        if zero_point:
            x = b.op("Sub", x, b.cast(zero_point, TensorProto.INT32))
        x = b.cast(x, TensorProto.FLOAT)
    else:
        x = b.cast("x", TensorProto.FLOAT)
        if zero_point:
            x = b.op("Sub", x, b.cast(zero_point, TensorProto.FLOAT))
    y = b.op("Mul", x, scale)
    inputs = ["x", "x_scale", "x_zero_point"][:len(node.input)]
    return b.function("onnx-standard", "dequantize_linear", inputs, [y])


def build_quantize_linear(ctx) -> FunctionProto | None:
    """``QuantizeLinear``-21 to int16/uint16 (per tensor or per axis, no blocks) as
    ``Cast(Clip(Round(x / scale) + zero_point))`` in float (``Round`` rounds half to even,
    as onnxruntime's kernel; the 16-bit integers are floats exactly)."""
    node = ctx.node
    _qdq_checked(ctx, quantize=True)
    types = list(ctx.input_types or []) + [None] * 3
    out_type = (_SIXTEEN_BITS.get(types[2]) if _present(node.input, 2)
                else ctx.attribute("output_dtype", 0))
    if out_type not in (T.INT16, T.UINT16):
        raise Declined("only int16/uint16 outputs (the runtimes' own kernels take the rest)")
    b = FunctionBuilder(ctx.opset, TensorProto.FLOAT)
    has_zp = _present(node.input, 2)
    scale, zero_point = "y_scale", "y_zero_point" if has_zp else ""
    constant_scale = ctx.constant(node.input[1])
    if constant_scale is None or constant_scale.ndim:
        axis = ctx.attribute("axis", 1)
        scale = _along_axis(b, scale, axis, "x")
        zero_point = _along_axis(b, zero_point, axis, "x") if has_zp else ""
    q = b.op("Round", b.op("Div", "x", scale))
    if zero_point:
        q = b.op("Add", q, b.cast(zero_point, TensorProto.FLOAT))
    info = np.iinfo(helper.tensor_dtype_to_np_dtype(out_type))
    q = b.op("Max", b.op("Min", q, b.const(np.array(info.max, np.float32))),
             b.const(np.array(info.min, np.float32)))
    y = b.cast(q, out_type)
    inputs = ["x", "y_scale", "y_zero_point"][:len(node.input)]
    return b.function("onnx-standard", "quantize_linear", inputs, [y])


def _dequantize_samples() -> list[OpSample]:
    samples = []
    for opset, x_type, axis, per_axis, zp in [
            (10, "uint8", None, False, True), (10, "int8", None, False, False),
            (10, "int32", None, False, True), (13, "uint8", None, False, True),
            (13, "int8", 1, True, True), (13, "uint8", 0, True, True),
            (13, "int8", -1, True, False), (17, "int32", -2, True, True),
            (13, "uint8", None, True, True), (17, "int8", 2, True, True),
            (18, "uint8", 1, None, True)]:  # None: a scalar scale the builder cannot read
        low, high = {"uint8": (0, 256), "int8": (-128, 128), "int32": (-5000, 5000)}[x_type]
        shape = [2, 3, 4]
        channels = shape[axis if axis is not None else 1] if per_axis else None
        spec = f"[{channels}]" if per_axis else "[]"
        zero_point = (Arg(f"int32{spec}", values=np.zeros(channels or (), np.int32),
                          constant=True) if x_type == "int32" else
                      Arg(f"{x_type}{spec}", low=low, high=high, constant=True))
        inputs = [Arg(f"{x_type}[2,3,4]", low=low, high=high),
                  Arg(f"float{spec}", low=0.01, high=0.2, constant=per_axis is False),
                  zero_point if zp else None]
        while inputs[-1] is None:
            inputs.pop()
        samples.append(OpSample(inputs, ["float"], {} if axis is None else {"axis": axis},
                                opset=opset, name=f"{x_type}-axis{axis}"
                                + ("-per-axis" if per_axis else "")))
    return samples


def _qdq_16bit_samples(op_type: str) -> list[OpSample]:
    """16-bit samples at opset 21: per tensor, per axis (0, 1, -1), with and without a zero
    point, the scale constant or fed; QuantizeLinear also on exact ties (half to even) and
    past the type's range (saturation)."""
    samples = []
    for x_type, axis, per_axis, zp in [
            ("uint16", None, False, True), ("int16", None, False, False),
            ("uint16", 1, True, True), ("int16", 0, True, True), ("int16", -1, True, True),
            ("uint16", 1, None, True), ("uint16", -1, True, False)]:
        info = np.iinfo(x_type)
        channels = [2, 3, 4][axis] if per_axis else None
        spec = f"[{channels}]" if per_axis else "[]"
        zero_point = Arg(f"{x_type}{spec}", low=info.min, high=info.max + 1, constant=True)
        scale_low, scale_high = (0.01, 0.2) if op_type == "DequantizeLinear" else (1e-4, 1e-3)
        scale = Arg(f"float{spec}", low=scale_low, high=scale_high, constant=per_axis is False)
        if op_type == "DequantizeLinear":
            x, outputs = Arg(f"{x_type}[2,3,4]", low=info.min, high=info.max + 1), ["float"]
        else:
            x, outputs = Arg("float[2,3,4]", low=-40, high=40), [x_type]
        inputs = [x, scale, zero_point if zp else None]
        while inputs[-1] is None:
            inputs.pop()
        attributes = {} if axis is None else {"axis": axis}
        if not zp and op_type == "QuantizeLinear":
            attributes["output_dtype"] = getattr(T, x_type.upper())
        samples.append(OpSample(inputs, outputs, attributes, opset=21, tolerance=(1e-6, 0),
                                name=f"{x_type}-axis{axis}" + ("-per-axis" if per_axis else "")
                                + ("" if zp else "-no-zero-point")))
    if op_type == "DequantizeLinear":  # 8-bit from 19 (where OpenVINO needs it)
        samples += [OpSample([Arg("uint8[2,3,4]", low=0, high=256),
                              Arg("float[3]", low=0.01, high=0.2, constant=True),
                              Arg("uint8[3]", low=0, high=256, constant=True)], ["float"],
                             {"axis": 1}, opset=21, tolerance=(1e-6, 0), name="uint8-axis1"),
                    OpSample([Arg("int8[2,3,4]", low=-128, high=128),
                              Arg("float[]", values=0.05, constant=True)], ["float"],
                             opset=19, tolerance=(1e-6, 0), name="int8-per-tensor")]
    if op_type == "QuantizeLinear":
        ties = np.array([0.25, 0.75, -0.25, -0.75, 1.25, 2.5, -1.25, 7.75], np.float32)
        for x_type, zp in (("uint16", 1000), ("int16", -3)):
            samples.append(OpSample(
                [Arg("float[8]", values=ties), Arg("float[]", values=0.5, constant=True),
                 Arg(f"{x_type}[]", values=zp, constant=True)], [x_type], opset=21,
                name=f"{x_type}-ties"))
    return samples


def _special_floats(dtype):
    """Normal, subnormal, zero (both signs), infinite and extreme values."""
    def draw(rng, shape):
        values = rng.standard_normal(shape) * 100
        flat = values.reshape(-1)
        specials = [0.0, -0.0, np.inf, -np.inf, 1.0, -2.5,
                    3e-6 if dtype == np.float16 else 3e-39 if dtype == np.float32 else 3e-310,
                    np.finfo(dtype).max, np.finfo(dtype).tiny, 0.1]
        flat[:len(specials)] = specials
        return values.astype(dtype)
    return draw


def _bits_of(source: str, int_type):
    float_type = helper.tensor_dtype_to_np_dtype(getattr(T, source.upper()))
    return lambda rng, shape: _special_floats(float_type)(rng, shape).view(int_type)


def _integer_extremes(name: str):
    """Random integers of type ``name`` over its whole range, its minimum, maximum, -1
    (or its largest half), 0 and the values beside the sign bit included."""
    info = np.iinfo(name)

    def draw(rng, shape):
        values = rng.integers(info.min, info.max, shape, dtype=name, endpoint=True)
        flat = values.reshape(-1)
        if info.min < 0:
            flat[:5] = [info.min, info.max, 0, -1, info.min + 1]
        else:  # 2^(w-1) and 2^(w-1) - 1: the sign bit of the signed type, and below it
            flat[:5] = [0, info.max, info.max // 2 + 1, info.max // 2, 1]
        return values
    return draw


def _bitcast_samples() -> list[OpSample]:
    samples = [OpSample(["T[2,3]"], [name], {"to": to}, name=name, dtypes=["bool"])
               for name, to in (("uint8", T.UINT8), ("int8", T.INT8))]
    for source, to in [("int8", T.UINT8), ("uint8", T.INT8), ("uint16", T.INT16),
                       ("int16", T.UINT16), ("uint32", T.INT32), ("int32", T.UINT32),
                       ("int64", T.UINT64), ("uint64", T.INT64)]:
        target = helper.tensor_dtype_to_np_dtype(to).name
        samples.append(OpSample([Arg(f"{source}[2,5]", values=_integer_extremes(source))],
                                [target], {"to": to}, name=f"{source}-to-{target}"))
    for source, to in [("float", T.INT32), ("float", T.UINT32), ("float16", T.INT16),
                       ("float16", T.UINT16), ("double", T.INT64), ("double", T.UINT64)]:
        float_type = helper.tensor_dtype_to_np_dtype(getattr(T, source.upper()))
        int_type = helper.tensor_dtype_to_np_dtype(to)
        samples.append(OpSample([Arg(f"{source}[3,4]", values=_special_floats(float_type))],
                                [int_type.name], {"to": to}, name=f"{source}-bits-{int_type.name}"))
        samples.append(OpSample([Arg(f"{int_type.name}[3,4]", values=_bits_of(source,
                                                                              int_type))],
                                [source], {"to": getattr(T, source.upper())},
                                name=f"{int_type.name}-to-{source}"))
    return samples


# -- Gemm as MatMul ----------------------------------------------------------------------------


def build_gemm(ctx) -> FunctionProto:
    """``Gemm`` as ``alpha * MatMul(A', B') + beta * C`` (A', B' transposed as asked). The
    same numbers for the rank-2 inputs Gemm takes; an ``A`` of higher rank (onnxscript's
    fusions leave a rank-3 ``MultiHeadAttention`` output feeding a ``Gemm``, which OpenVINO
    runs as a batched product and onnxruntime refuses) is multiplied batch by batch."""
    node = ctx.node
    if len(node.output) != 1 or not (_present(node.input, 0) and _present(node.input, 1)):
        raise Declined("Gemm without both A and B")
    trans_a, trans_b = ctx.attribute("transA", 0), ctx.attribute("transB", 0)
    alpha, beta = ctx.attribute("alpha", 1.0), ctx.attribute("beta", 1.0)
    types = list(ctx.input_types or [])
    elem = getattr(T, types[0][7:-1].upper(), None) if types and types[0] else None
    if elem is None:
        raise Declined("Gemm: the element type of A is unknown")
    b = FunctionBuilder(ctx.opset, elem)
    a = b.op("Transpose", "A", perm=[1, 0]) if trans_a else "A"
    w = b.op("Transpose", "B", perm=[1, 0]) if trans_b else "B"
    y = b.op("MatMul", a, w)
    if alpha != 1.0:
        y = b.op("Mul", y, b.const(np.array(alpha, helper.tensor_dtype_to_np_dtype(elem))))
    names = ["A", "B"]
    if _present(node.input, 2):
        names.append("C")
    if _present(node.input, 2) and beta != 0.0:  # beta 0: C is not read (NaN * 0 stays out)
        c = "C" if beta == 1.0 else b.op(
            "Mul", "C", b.const(np.array(beta, helper.tensor_dtype_to_np_dtype(elem))))
        y = b.op("Add", y, c)
    return b.function("onnx-standard", "gemm", names, [y])


def _gemm_samples() -> list[OpSample]:
    return [OpSample([Arg("T[3,4]"), Arg("T[4,5]")], opset=13, name="plain"),
            OpSample([Arg("T[4,3]"), Arg("T[5,4]"), Arg("T[5]")],
                     attributes={"transA": 1, "transB": 1, "alpha": 0.5, "beta": 2.0},
                     opset=13, name="transposed-bias"),
            OpSample([Arg("T[3,4]"), Arg("T[4,5]"), Arg("T[3,5]")],
                     attributes={"beta": 0.0}, opset=11, name="beta0")]


# -- widened ---------------------------------------------------------------------------------

WIDENED_OPSET = 21  # the samples' opset
_WIDER = {"tensor(bfloat16)": T.FLOAT, "tensor(int16)": T.INT32, "tensor(uint16)": T.INT32,
          "tensor(uint32)": T.INT64}
# op -> (which inputs may be narrow and widened, the input whose type the outputs take: None
# for bool outputs, exact in bfloat16, the narrow types it is offered for)
_BF16 = ("tensor(bfloat16)",)
_WIDENED: dict[str, tuple[tuple[int, ...] | None, int | None, bool, tuple[str, ...]]] = {
    **{op: (None, 0, True, _BF16) for op in (
        "Add", "Sub", "Mul", "Div", "Sqrt", "Neg", "Abs", "Expand", "ReduceMax",
        "ReduceMin", "Transpose", "Reshape", "Concat", "Gather")},
    **{op: (None, 0, True, (*_BF16, "tensor(int16)", "tensor(uint16)"))
       for op in ("Max", "Min")},
    **{op: (None, 0, False, _BF16) for op in (
        "MatMul", "Exp", "Log", "Tanh", "Sigmoid", "Erf", "ReduceSum", "ReduceMean")},
    **{op: (None, None, True, _BF16) for op in ("Equal", "Less", "Greater")},
    "Where": ((1, 2), 1, True, _BF16),
    "OneHot": ((2,), 2, True, _BF16),
    "Pow": ((1,), 0, True, ("tensor(uint32)",)),
}


def build_widened(ctx) -> FunctionProto:
    """The node computed in a wider type: inputs of a narrow type it lacks a kernel for
    (bfloat16, 16-bit integers, a uint32 exponent) cast up, the narrow outputs cast back."""
    op = ctx.node.op_type
    widened, like, _exact, narrow = _WIDENED[op]
    types = list(ctx.input_types or [])
    inputs = list(ctx.node.input)
    if any(not name for name in inputs):
        raise Declined(f"{op} with an optional input left out in the middle")
    positions = widened if widened is not None else range(len(inputs))
    targets = {i: types[i] for i in positions if i < len(types) and types[i] in narrow}
    if not targets:
        shown = ", ".join(t or "unknown" for t in types) or "unknown"
        raise Declined(f"{op}: no input of a type it widens ({', '.join(narrow)}); input "
                       f"types {shown}")
    if like is not None and like not in targets and op != "Pow":
        raise Declined(f"{op}: the output's type is not the widened input's")
    b = FunctionBuilder(ctx.opset)
    names = [f"x{i}" for i in range(len(inputs))]
    args = [b.cast(n, _WIDER[targets[i]]) if i in targets else n for i, n in enumerate(names)]
    attrs = {a.name: helper.get_attribute_value(a) for a in ctx.node.attribute}
    outputs = b.op(op, *args, outputs=len(ctx.node.output), **attrs)
    outputs = [outputs] if isinstance(outputs, str) else outputs
    back = getattr(T, targets[like][7:-1].upper()) if like in targets else None
    if back is not None and op != "Pow":
        outputs = [b.cast(o, back) for o in outputs]
    return b.function("onnx-standard", f"widened_{op.lower()}", names, outputs)


def _widened_samples(op: str) -> list[OpSample]:
    """One sample per op (inputs of the registration's dtype ``T``)."""
    x = Arg("T[2,3,4]")
    custom = {
        "Expand": OpSample([Arg("T[3,1]"), Arg("int64[2]", values=np.array([3, 4]),
                                                constant=True)]),
        "ReduceMax": OpSample([x, Arg("int64[1]", values=np.array([1]), constant=True)],
                              opset=18),
        "ReduceMin": OpSample([x, Arg("int64[1]", values=np.array([-1]), constant=True)],
                              opset=18),
        "ReduceSum": OpSample([x, Arg("int64[1]", values=np.array([1]), constant=True)]),
        "ReduceMean": OpSample([x, Arg("int64[1]", values=np.array([1]), constant=True)],
                               opset=18),
        "Transpose": OpSample([x], attributes={"perm": [2, 0, 1]}),
        "Reshape": OpSample([x, Arg("int64[2]", values=np.array([6, 4]), constant=True)]),
        "Concat": OpSample([x, x], attributes={"axis": 1}),
        "Gather": OpSample([x, Arg("int64[2]", values=np.array([1, 0]), constant=True)],
                           attributes={"axis": 1}),
        "MatMul": OpSample([x, Arg("T[4,5]")]),
        "Sqrt": OpSample([Arg("T[2,3,4]", low=0.0, high=4.0)]),
        "Log": OpSample([Arg("T[2,3,4]", low=0.1, high=4.0)]),
        "Div": OpSample([x, Arg("T[2,3,4]", low=0.5, high=2.0)]),
        "Where": OpSample([Arg("bool[2,3,4]"), x, Arg("T[4]")]),
        "OneHot": OpSample([Arg("int64[2,3]", low=0, high=5),
                            Arg("int64[]", values=np.array(5), constant=True),
                            Arg("T[2]")], attributes={"axis": -1}),
        "Pow": OpSample([Arg("float[2,3]", low=0.5, high=2.0), Arg("T[2,3]", low=0, high=4)],
                        outputs=["float"]),
    }
    _w, like, _e, _n = _WIDENED[op]
    if op in custom:
        sample = custom[op]
    elif op in ("Add", "Sub", "Mul", "Max", "Min"):
        sample = OpSample([x, Arg("T[4]")])
    else:
        sample = OpSample([x] if like is not None else [x, Arg("T[4]")],
                          outputs=["T"] if like is not None else ["bool"])
    # at an opset where every op takes bfloat16 (the registration starts at 1)
    return [sample if sample.opset is not None else replace(sample, opset=WIDENED_OPSET)]


def _dtype_name(narrow: str) -> str:
    return {"tensor(bfloat16)": "bfloat16", "tensor(int16)": "int16",
            "tensor(uint16)": "uint16", "tensor(uint32)": "uint32"}[narrow]


@hookimpl
def register_decompositions(registry):
    registry.add("", "Gemm", build_gemm, opsets=(11, None), dtypes=("float", "double"),
                 exact=False,  # MatMul may sum in another order than Gemm's kernel
                 description="onnx-standard:Gemm as MatMul (a rank-3 A batch by batch)",
                 oracle="onnxruntime", samples=_gemm_samples())
    for op, (_w, _like, exact, narrow) in sorted(_WIDENED.items()):
        kinds = ", ".join(_dtype_name(t) for t in narrow)
        registry.add("", op, build_widened, opsets=(1, None),
                     dtypes=[_dtype_name(t) for t in narrow], exact=exact,
                     description=f"onnx-standard:{op} widened ({kinds} computed in a wider "
                                 "type, cast back)",
                     oracle="reference", samples=_widened_samples(op))
    registry.add("", "DequantizeLinear", build_dequantize_linear, opsets=DEQUANTIZE_OPSETS,
                 dtypes=("float",),
                 description="onnx-standard:DequantizeLinear (versions 10 and 13, in Cast/Sub/"
                             "Mul)",
                 oracle="onnxruntime", samples=_dequantize_samples())
    for op_type, builder, opsets in (
            ("DequantizeLinear", build_dequantize_linear, DEQUANTIZE_LATER_OPSETS),
            ("QuantizeLinear", build_quantize_linear, QDQ_16BIT_OPSETS)):
        registry.add("", op_type, builder, opsets=opsets, dtypes=("float",),
                     description=f"onnx-standard:{op_type} (from {opsets[0]}: 16-bit, and 8-bit "
                                 "x without an opset ceiling; per tensor or per axis, in "
                                 "Cast/Sub/Mul arithmetic)" if op_type == "DequantizeLinear"
                     else f"onnx-standard:{op_type} 16-bit (version 21, per tensor or per "
                          "axis, in Cast/Round/Clip arithmetic)",
                     oracle="onnxruntime", samples=_qdq_16bit_samples(op_type))
    from rewriter_plugins.onnx_standard_shifts import bitshift_samples, build_bitshift

    registry.add("", "BitShift", build_bitshift, opsets=(12, None),
                 dtypes=("uint8", "uint16", "uint32", "uint64", "int8", "int16", "int32",
                         "int64"),
                 description="onnx-standard:BitShift with its out-of-range shifts made "
                             "explicit (the spec's fill where Y < 0 or Y >= the width)",
                 oracle="reference",  # the reference evaluator's own BitShift (numpy)
                 samples=bitshift_samples(), keeps_op=True)
    registry.add("", "BitCast", build_bitcast, opsets=BITCAST_OPSETS,
                 dtypes=("bool", "int8", "uint8", "int16", "uint16", "int32", "uint32",
                         "float16", "float", "double", "int64", "uint64"),
                 description="onnx-standard:BitCast (bool to a byte; same-width integers; "
                             "an IEEE float's bits)",
                 oracle="reference",  # the reference evaluator's own BitCast (numpy view)
                 samples=_bitcast_samples())
