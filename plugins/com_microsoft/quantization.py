"""Block-quantized weights and Q/DQ of com.microsoft, in standard ONNX:

* ``MatMulNBits(A, B, scales[, zero_points][, -][, bias])`` (``K``, ``N``, ``bits`` 2/4/8,
  ``block_size``): ``W[k, n] = (q[n, k] - zp[n, k // block]) * scales[n, k // block]``, ``q``
  unpacked from ``B`` (``N x blocks x blob``, low bits first), default ``zp = 2^(bits-1)``,
  packed (uint8) or unpacked (float) zero points; ``Y = A @ W + bias``. With ``g_idx``
  (GPTQ's act-order) column ``k`` takes the scale and zero point of block ``g_idx[k]``:
  4 bits without zero points or with float ones; declined with packed zero points (which
  onnxruntime 1.32 ignores then) and with 2 or 8 bits (which it refuses or misreads).
  ``accuracy_level`` 4 ("A can be quantized with the same block_size to int8"): ``A`` is
  quantized per row and block along K, ``round(a * (127 / m)) * (m / 127)`` with
  ``m = max|a|`` (MLAS's order: ``a / (m / 127)`` rounds some half-way points otherwise), as
  onnxruntime's CPU kernel computes it (not with float zero points, with g_idx, nor for 2
  bits in blocks of 16, where it does not).
* ``GatherBlockQuantized(data, indices, scales[, zero_points])`` (``bits``, ``block_size``,
  ``gather_axis``, ``quantize_axis``): ``Gather`` of ``(q - zp) * scale`` with each scale
  repeated over its block; int4/uint4 data, or uint8 data packed along the last axis (``bits``
  2/4/8, default ``zp = 2^(bits-1)``); indices out of range give zeros.
* ``DequantizeLinear`` / ``QuantizeLinear`` (``axis``): the ai.onnx ops of the opset that
  takes the types (13 for 8-bit with float scales, 19 for float16 scales, 21 for 16/4-bit).
"""

from __future__ import annotations

import numpy as np
from onnx import FunctionProto, TensorProto

from rewriter.plugin import Arg, Declined, declining
from rewriter.plugin import present as _present

from .common import (
    DOMAIN,
    Body,
    add,
    any_elem_type,
    body_opset,
    formal_inputs,
    input_elem_type,
    sample,
    shared_elem_type,
    single_output,
    unknown_attributes,
)

MATMULNBITS_OPSETS = (13, None)
GATHER_BLOCK_OPSETS = (13, None)  # int4/uint4 data exist only at >= 21
QDQ_OPSETS = (13, None)


def _unpack_bits(b: Body, packed: str, bits: int) -> str:
    """uint8 ``packed[..., n]`` -> int32 ``[..., n * 8 / bits]``, low bits first."""
    if bits == 8:
        return b.cast(packed, TensorProto.INT32)
    wide = b.cast(packed, TensorProto.INT32)
    parts = []
    for j in range(8 // bits):
        shifted = b.op("Div", wide, b.const(np.array(2 ** (bits * j), np.int32)))
        parts.append(b.unsqueeze(b.op("Mod", shifted, b.const(np.array(2 ** bits,
                                                                        np.int32))), [-1]))
    stacked = b.op("Concat", *parts, axis=-1)
    merged_shape = b.op("Concat", b.shape_part(packed, 0, -1), b.ints([-1]), axis=0)
    return b.op("Reshape", stacked, merged_shape)


@declining
def build_matmul_nbits(ctx) -> FunctionProto | None:
    node = ctx.node
    known = ["K", "N", "bits", "block_size", "accuracy_level", "weight_prepacked"]
    if (not all(_present(node.input, i) for i in range(3)) or not single_output(node)
            or unknown_attributes(node, known) or ctx.attribute("weight_prepacked", 0)):
        raise Declined("needs A, B and scales, one output, known attributes, no prepacked weight")
    k, n = ctx.attribute("K"), ctx.attribute("N")
    bits, block = ctx.attribute("bits", 4), ctx.attribute("block_size")
    if bits not in (2, 4, 8) or not k or not n or not block:
        raise Declined("needs bits 2, 4 or 8, and K, N and block_size")
    elem = shared_elem_type(ctx, 0, 2)
    if elem is None:
        raise Declined("the element type of A and scales is unknown")
    if _present(node.input, 4) and (bits != 4 or any_elem_type(ctx, 3) == TensorProto.UINT8):
        # onnxruntime 1.32 refuses g_idx with 8 bits, computes something else with 2, and
        # ignores packed zero points with it (matmul_nbits_impl.cc reads them into a
        # variable it never uses): no single meaning to reproduce
        raise Declined("g_idx with bits other than 4, or with packed zero points, has no single "
                       "meaning in onnxruntime")
    blocks = -(-k // block)
    b = Body(body_opset(ctx), elem)
    q = b.op("Reshape", _unpack_bits(b, "B", bits), b.ints([n, blocks, block]))
    q = b.cast(q, elem)
    if _present(node.input, 3):
        zp_type = any_elem_type(ctx, 3)
        if zp_type == TensorProto.UINT8:  # packed like B: N x ceil(blocks * bits / 8)
            packed = b.op("Reshape", "zero_points", b.ints([n, -1]))
            zp = b.cast(b.slice(_unpack_bits(b, packed, bits), [0], [blocks], [1]), elem)
        elif zp_type == elem:
            zp = "zero_points"
        else:
            raise Declined("zero_points must be uint8 (packed) or the element type of A")
        zp = b.op("Reshape", zp, b.ints([n, blocks, 1]))
    else:
        zp = b.const(np.array(2 ** (bits - 1)), elem)
    if _present(node.input, 4):  # g_idx: column k takes the scale of block g_idx[k]
        q = b.slice(b.op("Reshape", q, b.ints([n, blocks * block])), [0], [k], [1])
        groups = b.cast("g_idx", TensorProto.INT64)
        scales = b.op("Gather", b.op("Reshape", "scales", b.ints([n, blocks])), groups, axis=1)
        if _present(node.input, 3):  # else the default, a scalar
            zp = b.op("Gather", b.op("Reshape", zp, b.ints([n, blocks])), groups, axis=1)
        weight = b.op("Mul", b.op("Sub", q, zp), scales)
    else:
        scales = b.op("Reshape", "scales", b.ints([n, blocks, 1]))
        weight = b.op("Mul", b.op("Sub", q, zp), scales)
        weight = b.op("Reshape", weight, b.ints([n, blocks * block]))
        if blocks * block != k:
            weight = b.slice(weight, [0], [k], [1])
    a = "A"
    if (ctx.attribute("accuracy_level", 0) == 4 and (bits, block) != (2, 16)
            and not (_present(node.input, 3) and any_elem_type(ctx, 3) == elem)
            and not _present(node.input, 4)):
        # (onnxruntime 1.32 computes 2-bit blocks of 16, float zero points and g_idx in full
        # precision whatever the accuracy level; measured against its CPU kernel,
        # tests/test_matmul_nbits_oracle.py)
        a = _int8_blocks(b, a, k, block, elem)
    y = b.op("MatMul", a, b.op("Transpose", weight, perm=[1, 0]))
    if _present(node.input, 5):
        y = b.op("Add", y, "bias")
    inputs = formal_inputs(node, ["A", "B", "scales", "zero_points", "g_idx", "bias"])
    return b.function(DOMAIN, "matmul_nbits", inputs, [y])


def _int8_blocks(b: Body, a: str, k: int, block: int, elem: int) -> str:
    """``a`` (..., K) as onnxruntime's ``accuracy_level`` 4 computes with it: quantized to
    int8 per row and block of ``block`` along K (symmetric, ``round(a * (127 / max|a|))``
    in float32, rounded half to even), and dequantized again (times ``max|a| / 127``)."""
    blocks = -(-k // block)
    x = b.cast(a, TensorProto.FLOAT) if elem != TensorProto.FLOAT else a
    lead = b.shape_part(x, 0, -1)
    if blocks * block != k:  # zeros up to whole blocks
        pad = b.fill(b.op("Concat", lead, b.ints([blocks * block - k]), axis=0), 0.0,
                     TensorProto.FLOAT)
        x = b.op("Concat", x, pad, axis=-1)
    x = b.op("Reshape", x, b.op("Concat", lead, b.ints([blocks, block]), axis=0))
    float_zero = b.const(np.array(0.0), TensorProto.FLOAT)
    # the block's max |a| by TopK, whose form is the same at every opset from 11 (a
    # ReduceMax of the model's opset may be one a lower target must not get)
    largest, _ = b.op("TopK", b.op("Abs", x), b.ints([1]), outputs=2, axis=-1)
    # as MLAS quantizes a row (MlasQ80BlkQuantRow): a * (127 / max), rounded half to even,
    # times max / 127; not a / (max / 127), which rounds a value of the grid's half-way
    # points otherwise (the genai builder's Gemma 2: embeddings scaled by sqrt(hidden) are
    # multiples of one step, and k * 127 / 8 falls on .5)
    largest = b.op("Where", b.op("Equal", largest, float_zero),
                   b.const(np.array(1.0), TensorProto.FLOAT), largest)
    limit = b.const(np.array(127.0), TensorProto.FLOAT)
    quantized = b.op("Round", b.op("Mul", x, b.op("Div", limit, largest)))
    x = b.op("Mul", quantized, b.op("Div", largest, limit))
    x = b.op("Reshape", x, b.op("Concat", lead, b.ints([blocks * block]), axis=0))
    if blocks * block != k:
        x = b.slice(x, [0], [k], [-1])
    return b.cast(x, elem) if elem != TensorProto.FLOAT else x


def _repeat_blocks(b: Body, scales: str, axis: int, block: int, like: str) -> str:
    """Each entry of ``scales`` along ``axis`` repeated ``block`` times, cut to the size of
    ``like`` along that axis (``axis`` >= 0, or -1)."""
    last = axis == -1
    prefix = b.shape_part(scales, 0, -1 if last else axis)
    count = b.shape_part(scales, axis, None if last else axis + 1)
    suffix = [] if last else [b.shape_part(scales, axis + 1)]
    expanded = b.op("Expand", b.unsqueeze(scales, [-1 if last else axis + 1]),
                    b.op("Concat", prefix, count, b.ints([block]), *suffix, axis=0))
    merged = b.op("Reshape", expanded, b.op("Concat", prefix, b.ints([-1]), *suffix, axis=0))
    size = b.shape_part(like, axis, None if last else axis + 1)
    return b.slice(merged, [0], size, [axis])


@declining
def build_gather_block_quantized(ctx) -> FunctionProto | None:
    node = ctx.node
    known = ["bits", "block_size", "gather_axis", "quantize_axis"]
    if (not all(_present(node.input, i) for i in range(3)) or not single_output(node)
            or unknown_attributes(node, known)):
        raise Declined("needs data, indices and scales, one output, known attributes")
    data_type, out_type = any_elem_type(ctx, 0), input_elem_type(ctx, 2)
    bits, block = ctx.attribute("bits", 4), ctx.attribute("block_size", 128)
    gather_axis, quantize_axis = ctx.attribute("gather_axis", 0), ctx.attribute(
        "quantize_axis", 1)
    # the rank of a constant, or the declared one: onnxruntime-genai's builder feeds the
    # embedding a Reshape of the LM head's MatMulNBits weight (tied embeddings, uint8
    # [vocab, blocks, blob] to [vocab, hidden / 2]), whose shape it declares
    rank = ctx.rank(node.input[0])
    if out_type is None or not block:
        raise Declined("the output type or block_size is unknown")
    if rank is None:
        if gather_axis < 0 or quantize_axis < 0:
            raise Declined("negative axes need the data's rank, which is not known (data is not a "
                           "constant)")
    else:
        gather_axis, quantize_axis = gather_axis % rank, quantize_axis % rank
    if gather_axis == quantize_axis:
        raise Declined("gather_axis and quantize_axis must differ")
    b = Body(body_opset(ctx), out_type)
    if data_type in (TensorProto.INT4, TensorProto.UINT4):
        q = b.cast("data", TensorProto.INT32)
        zp = b.cast("zero_points", TensorProto.INT32) if _present(node.input, 3) else None
        default_zp = 0
    elif data_type == TensorProto.UINT8 and bits in (2, 4, 8):
        # onnxruntime's kernel refuses uint8 data unless gather_axis is 0 and quantize_axis
        # the last axis (packed along it)
        if gather_axis != 0 or rank is None:
            raise Declined("packed uint8 data needs gather_axis 0 and a data of known rank "
                           "(a constant, or a declared shape)")
        q = _unpack_bits(b, "data", bits)
        zp = _unpack_bits(b, "zero_points", bits) if _present(node.input, 3) else None
        default_zp = 2 ** (bits - 1)
    else:
        raise Declined("data must be int4, uint4, or uint8 with bits 2, 4 or 8")
    if zp is not None and data_type == TensorProto.UINT8 and bits != 8:
        # packed zero points carry padding up to a whole byte along the last axis
        zp = b.slice(zp, [0], b.shape_part("scales", -1), [-1])
    # out-of-range indices give zeros: gather index 0 for them, and mask the result
    size = b.shape_part("data", gather_axis, gather_axis + 1)
    indices = b.cast("indices", TensorProto.INT64)
    valid = b.op("And", b.op("Less", indices, size),
                 b.op("Not", b.op("Less", indices, b.op("Neg", size))))
    indices = b.op("Where", valid, indices, b.const(np.array(0, np.int64)))
    # gather first (the table stays quantized), then dequantize the rows taken
    rows = b.op("Gather", q, indices, axis=gather_axis)
    scales = b.op("Gather", "scales", indices, axis=gather_axis)
    if zp is not None:
        zp = b.op("Gather", zp, indices, axis=gather_axis)
    # where the quantized axis lands in the output: before the gathered axis it keeps its
    # index; behind it, count from the back
    if quantize_axis < gather_axis:
        out_axis = quantize_axis
    elif rank is not None and quantize_axis == rank - 1:
        out_axis = -1
    else:
        raise Declined("quantize_axis after gather_axis must be the last axis of a constant data")
    scales = _repeat_blocks(b, scales, out_axis, block, rows)
    values = b.cast(rows, out_type)
    if zp is not None:
        values = b.op("Sub", values, b.cast(_repeat_blocks(b, zp, out_axis, block, rows),
                                            out_type))
    elif default_zp:
        values = b.op("Sub", values, b.const(np.array(default_zp), out_type))
    y = b.op("Mul", values, scales)
    # the mask (shape of indices) gets a 1 for each data axis behind the gathered one
    trailing = b.op("Sub", b.op("Size", b.op("Shape", "data")),
                    b.ints([gather_axis + 1]))
    ones = b.fill(trailing, 1, TensorProto.INT64)
    mask = b.op("Reshape", valid, b.op("Concat", b.op("Shape", "indices"), ones, axis=0))
    y = b.op("Where", mask, y, b.const(np.array(0), out_type))
    inputs = formal_inputs(node, ["data", "indices", "scales", "zero_points"])
    return b.function(DOMAIN, "gather_block_quantized", inputs, [y])


_QDQ_8BIT = (TensorProto.INT8, TensorProto.UINT8)


def _qdq_opset(quantized: int | None, scale: int | None, dequantize: bool) -> int | None:
    """The first ai.onnx opset whose (De)QuantizeLinear takes these element types."""
    if quantized is None or scale is None:
        return None
    if quantized in _QDQ_8BIT or (dequantize and quantized == TensorProto.INT32):
        low = 13
    elif quantized in (TensorProto.INT16, TensorProto.UINT16, TensorProto.INT4,
                       TensorProto.UINT4):
        low = 21
    else:
        return None
    if scale == TensorProto.FLOAT16:
        return max(low, 19)
    return low if scale == TensorProto.FLOAT else None


def _qdq_builder(op_type: str):
    dequantize = op_type == "DequantizeLinear"

    @declining
    def build(ctx) -> FunctionProto | None:
        node = ctx.node
        if (not (_present(node.input, 0) and _present(node.input, 1))
                or not single_output(node) or unknown_attributes(node, ["axis"])):
            raise Declined("needs x and scale, one output, only axis")
        if dequantize:
            quantized = any_elem_type(ctx, 0)
        elif _present(node.input, 2):
            quantized = any_elem_type(ctx, 2)
        else:
            quantized = TensorProto.UINT8  # no zero point: uint8, as the standard op
        needed = _qdq_opset(quantized, input_elem_type(ctx, 1), dequantize)
        b = Body(body_opset(ctx))
        if (needed is not None and b.opset < needed and b.opset >= 13
                and quantized in (TensorProto.INT16, TensorProto.UINT16)):
            # 16-bit before opset 21 (onnxruntime's quantizer writes com.microsoft Q/DQ for
            # that): the standard op's arithmetic, as onnx-standard writes it from 21
            from rewriter_plugins import onnx_standard

            standard = (onnx_standard.build_dequantize_linear if dequantize
                        else onnx_standard.build_quantize_linear)
            return standard(ctx)
        if needed is None or b.opset < needed:
            raise Declined("these element types need a later ai.onnx opset than the model's (or "
                           "none has them)")
        inputs = formal_inputs(node, ["x", "scale", "zero_point"])
        axis = ctx.attribute("axis")
        scale = ctx.constant(node.input[1])
        operands = list(inputs)
        if axis is None and scale is not None and scale.shape == (1,):
            # a one-element scale (and zero point) is per tensor for onnxruntime's kernel
            # (onnxruntime's quantizer writes one for an int32 bias): the standard op's scalar
            scalar = b.ints([])
            operands[1:] = [b.op("Reshape", name, scalar) for name in inputs[1:]]
        elif axis is None and (scale is None or scale.ndim != 0):
            raise Declined("per-tensor needs a scalar scale; unknown: not sure it is one")
        y = b.op(op_type, *operands, axis=axis)
        return b.function(DOMAIN, op_type.lower(), inputs, [y])

    build.__name__ = f"build_{op_type.lower()}"
    return build


build_dequantize_linear = _qdq_builder("DequantizeLinear")
build_quantize_linear = _qdq_builder("QuantizeLinear")


# min_onnxruntime of the samples older onnxruntime kernels compute otherwise (found on
# 1.21.0, 1.23.2, 1.30.0 and 1.32.0; releases between them were not available to check)
_NBITS = {  # onnxruntime's CPU MatMulNBits: "Only 4b quantization is supported" (1.21.0),
    # "Only 4b and 8b" (1.23.2); 1.30.0 takes 2 bits
    2: ("1.30", "onnxruntime 1.23.2's CPU MatMulNBits takes 4 and 8 bits only (1.30.0: 2)"),
    8: ("1.23", "onnxruntime 1.21.0's CPU MatMulNBits takes 4 bits only (1.23.2: 8)"),
}
_GATHER_OUT_OF_RANGE = (
    "1.32", "onnxruntime 1.21.0, 1.23.2 and 1.30.0 refuse an out-of-range index of "
    "GatherBlockQuantized ('indices element out of data bounds', an error by the op's "
    "documentation); 1.32.0 gives zeros for it, as the decomposition does")
_GATHER_BITS = ("1.23", "onnxruntime 1.21.0's GatherBlockQuantized has no bits attribute "
                "(uint8 data)")
_GATHER_UINT8_4BIT = (
    "1.30", "onnxruntime 1.23.2 dequantizes 4-bit data packed in uint8 with packed zero points "
    "otherwise than 1.30.0 and 1.32.0, which agree with the decomposition (192 of 240 values "
    "differ); 1.21.0 has no bits attribute")
_QUANTIZE_FLOAT16 = (
    "1.30", "onnxruntime's QuantizeLinear-19 of float16 (the decomposition's kernel) truncates "
    "x / scale toward zero instead of rounding it before microsoft/onnxruntime#32452: 6 of "
    "24 values one step off on 1.21.0 and 1.23.2 (its com.microsoft kernel rounds)")


def _half_way_rows(rng, shape, block: int = 16):
    """A rows whose blocks are multiples of one step ``c`` with ``max|a| = 8c`` and values
    ``+-4c`` (the genai builder's Gemma 2 feeds its first projection such rows: embeddings
    scaled by sqrt(hidden)): ``a * (127 / max|a|)`` falls on the int8 grid's half-way point
    63.5, where the order of MLAS's arithmetic decides the rounding."""
    steps = rng.integers(-7, 8, size=shape).astype(np.float32)
    blocks = steps.reshape(*shape[:-1], -1, block)
    blocks[..., 0] = rng.choice([-8.0, 8.0], size=blocks.shape[:-1])
    blocks[..., 1:4] = rng.choice([-4.0, 4.0], size=(*blocks.shape[:-1], 3))
    step = rng.uniform(0.05, 0.5, size=(*blocks.shape[:-1], 1)).astype(np.float32)
    return (blocks * step).reshape(shape).astype(np.float32)


def _oracles() -> dict[str, dict]:
    """Per op: onnxruntime's own kernel and the samples (``tests/test_oracles.py``)."""
    ort, f32 = "onnxruntime", ["float"]

    def nbits(bits, k, zero_points, with_bias, opset, g_idx=False, accuracy=0):
        n, block = 5, 16
        blocks = -(-k // block)
        inputs = [f"T[2,3,{k}]", Arg(f"uint8[{n},{blocks},{block * bits // 8}]", low=0,
                                     high=256, constant=True),
                  Arg(f"T[{n},{blocks}]", low=0.01, high=0.11, constant=True)]
        if zero_points == "packed":
            inputs.append(Arg(f"uint8[{n},{-(-blocks * bits // 8)}]", low=0, high=256,
                              constant=True))
        elif zero_points == "float":
            inputs.append(Arg(f"T[{n},{blocks}]", low=0, high=2 ** bits, constant=True))
        if g_idx:  # act-order (GPTQ): the block of each input column, in any order
            inputs += [None] * (4 - len(inputs)) + [Arg(f"int32[{k}]", low=0, high=blocks,
                                                        constant=True)]
        if with_bias:
            inputs += [None] * (5 - len(inputs)) + [Arg(f"T[{n}]", constant=True)]
        attributes = dict(K=k, N=n, bits=bits, block_size=block)
        if accuracy:
            attributes["accuracy_level"] = accuracy
        # (float16 samples keep float16's own tolerance, 1e-2)
        tolerance = (1e-4, 1e-4) if accuracy else (2e-2, 2e-2)
        return sample(*inputs, opset=opset, attributes=attributes, tolerance=tolerance,
                      name=f"{bits}bit-{zero_points}" + ("-g_idx" if g_idx else "")
                      + (f"-accuracy{accuracy}" if accuracy else ""),
                      min_onnxruntime=_NBITS.get(bits))

    def gather_block(data, zero_points, axes, opset, out_of_range=False):
        gather_axis, quantize_axis = axes
        rows, cols, block = 6, 40, 16
        blocks = -(-cols // block)
        shape = [rows, cols] if quantize_axis == 1 else [cols, rows]
        scales = [rows, blocks] if quantize_axis == 1 else [blocks, rows]
        attributes = dict(gather_axis=gather_axis, quantize_axis=quantize_axis,
                          block_size=block)
        if data.startswith("uint8"):
            bits = int(data.split("-")[1])
            attributes["bits"] = bits
            packed = [rows, cols * bits // 8]
            zp = Arg(f"uint8[{rows},{-(-blocks * bits // 8)}]", low=0, high=256,
                     constant=True)
            data_arg = Arg(f"uint8{packed}", low=0, high=256, constant=True)
        else:
            low = -8 if data == "int4" else 0
            zp = Arg(f"{data}{scales}", low=low, high=low + 16, constant=True)
            data_arg = Arg(f"{data}{shape}", low=low, high=low + 16, constant=True)
        # index 7 of 6 rows: the op's documentation calls it an error; onnxruntime 1.32 (and
        # the decomposition) give zeros for it, older releases refuse it
        last = 7 if out_of_range else 4
        inputs = [data_arg, Arg("int64[2,3]", values=[[0, 5, -2], [3, last, 1]]),
                  Arg(f"T{scales}", low=0.01, high=0.11, constant=True)]
        name = f"{data}-axes{gather_axis}{quantize_axis}" + ("-out-of-range" * out_of_range)
        needs = (_GATHER_OUT_OF_RANGE if out_of_range else _GATHER_UINT8_4BIT
                 if data == "uint8-4" else _GATHER_BITS if data.startswith("uint8") else None)
        return sample(*inputs, *([zp] if zero_points else []), opset=opset,
                      attributes=attributes, name=name, min_onnxruntime=needs)

    def qdq(op_type, x_type, axis, opset, dtype):
        info = np.iinfo(x_type)
        channels = "[3]" if axis is not None else "[]"
        if x_type == "int32":
            zp = Arg(f"int32{channels}", values=np.zeros(3 if axis is not None else ()),
                     constant=True)
        else:
            zp = Arg(f"{x_type}{channels}", low=info.min, high=info.max + 1, constant=True)
        scale = Arg(f"T{channels}", low=0.05, high=0.25, constant=True)
        attributes = {} if axis is None else {"axis": axis}
        if op_type == "DequantizeLinear":
            x = Arg(f"{x_type}[2,3,4]", low=max(info.min, -1000), high=min(info.max, 1000))
            outputs = ["T"]
        else:
            x, outputs = Arg("T[2,3,4]", low=-30, high=30), [x_type]
        return sample(x, scale, zp, outputs=outputs, opset=opset, dtypes=[dtype],
                      attributes=attributes, tolerance=(1e-6, 0),
                      name=f"{x_type}-axis{axis}", min_onnxruntime=_QUANTIZE_FLOAT16 if (
                          op_type, dtype, axis) == ("QuantizeLinear", "float16", 1) else None)
    return {
        "MatMulNBits": dict(oracle=ort, samples=[
            nbits(4, 64, None, False, 21), nbits(4, 48, "packed", True, 13),
            nbits(4, 32, "float", False, 21), nbits(8, 40, "packed", True, 21),
            nbits(2, 64, "packed", False, 17), nbits(4, 64, "float", True, 21, g_idx=True),
            nbits(4, 48, None, False, 17, g_idx=True),
            *[nbits(bits, k, zp, False, 21, accuracy=4) for bits, k, zp in [
                (4, 64, None), (4, 40, "packed"), (8, 48, "packed"), (2, 32, None),
                (4, 32, "float")]],
            sample("T[2,3,64]", Arg("uint8[5,2,8]", low=0, high=256, constant=True),
                   Arg("T[5,2]", low=0.01, high=0.11, constant=True), opset=21,
                   attributes=dict(K=64, N=5, bits=2, block_size=32, accuracy_level=4),
                   tolerance=(1e-4, 1e-4), name="2bit-block32-accuracy4",
                   min_onnxruntime=_NBITS[2]),
            # rows on the int8 grid's half-way points (the genai builder's Gemma 2)
            sample(Arg("T[2,3,64]", values=_half_way_rows), Arg("uint8[5,4,8]", low=0,
                                                                high=256, constant=True),
                   Arg("T[5,4]", low=0.01, high=0.11, constant=True), opset=21, dtypes=f32,
                   attributes=dict(K=64, N=5, bits=4, block_size=16, accuracy_level=4),
                   tolerance=(1e-5, 1e-5), name="4bit-accuracy4-half-way")]),
        "GatherBlockQuantized": dict(oracle=ort, samples=[
            gather_block("int4", False, (0, 1), 21), gather_block("uint4", True, (0, 1), 21),
            gather_block("int4", True, (1, 0), 21), gather_block("uint8-4", True, (0, 1), 13),
            gather_block("uint8-8", False, (0, 1), 17),
            gather_block("int4", True, (0, 1), 21, out_of_range=True),
            # onnxruntime-genai's builder, tied embeddings: the LM head's MatMulNBits weight
            # (uint8 [vocab, blocks, 16]) through a Reshape to [vocab, hidden / 2], 4 bits,
            # no zero points, block 32: data not a constant, its shape declared
            sample(Arg("uint8[6,32]", low=0, high=256), Arg("int64[2,3]", values=[[0, 5, -2],
                                                                                 [3, 4, 1]]),
                   Arg("T[6,2]", low=0.01, high=0.11, constant=True), opset=21,
                   attributes=dict(bits=4, block_size=32, gather_axis=0, quantize_axis=1),
                   name="uint8-4-fed-data", min_onnxruntime=_GATHER_BITS)]),
        "DequantizeLinear": dict(oracle=ort, samples=[
            qdq("DequantizeLinear", x_type, axis, opset, dtype)
            for x_type, dtype, axis, opset in [
                ("int8", "float", None, 13), ("uint8", "float", 1, 13),
                ("int32", "float", -2, 13), ("int8", "float16", 1, 19),
                ("int16", "float", None, 21), ("uint16", "float", None, 17),
                ("int16", "float", 1, 13),
                # the QNN recipe at opset 21 (quantize_static, UseQDQContribOps): uint16
                # activations, int32 biases per channel
                ("uint16", "float", None, 21), ("int32", "float", 1, 21)]] + [
            sample(Arg("int32[8]", low=-5000, high=5000), Arg("T[1]", values=[0.03],
                                                             constant=True),
                   Arg("int32[]", values=0, constant=True), outputs=["T"], dtypes=f32,
                   opset=17, name="int32-one-element-scale")]),
        "QuantizeLinear": dict(oracle=ort, samples=[
            qdq("QuantizeLinear", x_type, axis, opset, dtype)
            for x_type, dtype, axis, opset in [
                ("uint8", "float", None, 13), ("int8", "float", 1, 13),
                ("int8", "float16", 1, 19), ("uint16", "float", 1, 21),
                ("uint16", "float", None, 17), ("int16", "float", -2, 13),
                ("uint16", "float", None, 21)]] + [
            sample(Arg("T[12]", low=-3, high=300), Arg("T[]", values=0.7, constant=True),
                   outputs=["uint8"], dtypes=f32, opset=13, name="no-zero-point")]),
    }


def register(registry) -> None:
    """Registers this module's decompositions (called by the package's hook)."""
    checked = _oracles()
    add(registry, "MatMulNBits", build_matmul_nbits, MATMULNBITS_OPSETS,
        checked["MatMulNBits"],
        note="bits 2/4/8; accuracy_level 4 quantizes A per block as onnxruntime does")
    add(registry, "GatherBlockQuantized", build_gather_block_quantized, GATHER_BLOCK_OPSETS,
        checked["GatherBlockQuantized"], note="int4/uint4 or packed uint8 data")
    add(registry, "DequantizeLinear", build_dequantize_linear, QDQ_OPSETS,
        checked["DequantizeLinear"])
    add(registry, "QuantizeLinear", build_quantize_linear, QDQ_OPSETS, checked["QuantizeLinear"])
