"""``BitCast(x, to)`` in ``Cast`` and arithmetic: bool to a byte, same-width integers, and
an IEEE float and the integer of its width (the sign, exponent and mantissa fields computed
arithmetically; see the package's docstring)."""

from __future__ import annotations

import numpy as np
from onnx import FunctionProto, TensorProto, helper

from rewriter.plugin import Arg, Declined, FunctionBuilder, OpSample

BITCAST_OPSETS = (26, None)  # BitCast is new in opset 26
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


def bitcast_samples() -> list[OpSample]:
    """BitCast's samples: bool to a byte, same-width integers, IEEE float bits."""
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
