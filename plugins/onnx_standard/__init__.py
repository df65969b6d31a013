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
  of onnx 1.23 implements it from version 19 only): ``y = Cast(Cast(x, int32) -
  Cast(x_zero_point, int32), float) * x_scale`` (not a form OpenVINO's low-precision
  transformations take for a dequantization), exact for the 8-bit and int32 inputs of these
  versions (int32 has no zero point other than 0); from 13 a 1-D scale (and zero point)
  applies along ``axis`` (default 1), reshaped to ``[C, 1, ...]`` so that it broadcasts there
  (the count of 1s from the input's rank at run time, for a non-negative ``axis``).
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

Modules, one op family each:

================ ===============================================================
module           contents
================ ===============================================================
``bitcast``      BitCast (bool to a byte, same-width integers, IEEE float bits)
``quantize``     DequantizeLinear (10-18; from 19 for OpenVINO; in int32), 16-bit QuantizeLinear-21
``gemm``         Gemm as MatMul
``widened``      ops computed in a wider type (bfloat16, 16-bit integers, uint32 exponents)
``shifts``       BitShift with its out-of-range shifts made explicit
``casts``        Cast and CastLike with their out-of-range values made explicit; Cast as
                 CastLike
``comparisons``  Greater and GreaterOrEqual as Less and LessOrEqual, operands swapped
``recurrent``    RNN, GRU and LSTM batch first or reverse as time first and forward
``reductions``   ReduceMax and ReduceMin with their infinite results made explicit
``axes_inputs``  Reduce* given axes as an attribute where it is an input: moved to the input
================ ===============================================================
"""

from __future__ import annotations

from rewriter.plugin import REARRANGED, hookimpl

from .bitcast import BITCAST_OPSETS, bitcast_samples, build_bitcast
from .gemm import build_gemm, gemm_samples
from .quantize import (
    DEQUANTIZE_AXIS,
    DEQUANTIZE_LATER_OPSETS,
    DEQUANTIZE_OPSETS,
    QDQ_16BIT_OPSETS,
    QUANTIZE_OPSETS,
    build_dequantize_linear,
    build_quantize_linear,
    dequantize_samples,
    qdq_16bit_samples,
)
from .widened import WIDENED_OPS, WIDENED_OPSET, build_widened, dtype_name, widened_samples

__all__ = ["BITCAST_OPSETS", "DEQUANTIZE_AXIS", "DEQUANTIZE_LATER_OPSETS", "DEQUANTIZE_OPSETS",
           "QDQ_16BIT_OPSETS", "QUANTIZE_OPSETS", "WIDENED_OPSET", "build_bitcast",
           "build_dequantize_linear", "build_gemm", "build_quantize_linear", "build_widened"]


@hookimpl
def register_decompositions(registry):
    registry.add("", "Gemm", build_gemm, opsets=(11, None), dtypes=("float", "double"),
                 exact=False,  # MatMul may sum in another order than Gemm's kernel
                 description="onnx-standard:Gemm as MatMul (a rank-3 A batch by batch)",
                 oracle="onnxruntime", samples=gemm_samples())
    for op, (_w, _like, exact, narrow) in sorted(WIDENED_OPS.items()):
        kinds = ", ".join(dtype_name(t) for t in narrow)
        registry.add("", op, build_widened, opsets=(1, None),
                     dtypes=[dtype_name(t) for t in narrow], exact=exact,
                     description=f"onnx-standard:{op} widened ({kinds} computed in a wider "
                                 "type, cast back)",
                     oracle="reference", samples=widened_samples(op))
    registry.add("", "DequantizeLinear", build_dequantize_linear, opsets=DEQUANTIZE_OPSETS,
                 dtypes=("float",),
                 description="onnx-standard:DequantizeLinear (versions 10 and 13, in Cast/Sub/"
                             "Mul)",
                 oracle="onnxruntime", samples=dequantize_samples())
    for op_type, builder, opsets in (
            ("DequantizeLinear", build_dequantize_linear, DEQUANTIZE_LATER_OPSETS),
            ("QuantizeLinear", build_quantize_linear, QUANTIZE_OPSETS)):
        registry.add("", op_type, builder, opsets=opsets, dtypes=("float",),
                     description=f"onnx-standard:{op_type} (from {opsets[0]}: 16-bit, and 8-bit "
                                 "x without an opset ceiling; per tensor or per axis, in "
                                 "Cast/Sub/Mul arithmetic)" if op_type == "DequantizeLinear"
                     else f"onnx-standard:{op_type} (16-bit from version 21, 8-bit where "
                          "OpenVINO computes it otherwise; per tensor or per axis, in "
                          "Div/Round/Clip arithmetic)",
                     oracle="onnxruntime", samples=qdq_16bit_samples(op_type))
    from .shifts import bitshift_samples, build_bitshift

    registry.add("", "BitShift", build_bitshift, opsets=(12, None),
                 dtypes=("uint8", "uint16", "uint32", "uint64", "int8", "int16", "int32",
                         "int64"),
                 description="onnx-standard:BitShift with its out-of-range shifts made "
                             "explicit (the spec's fill where Y < 0 or Y >= the width)",
                 oracle="reference",  # the reference evaluator's own BitShift (numpy)
                 samples=bitshift_samples(), keeps_op=True)
    from .casts import CAST_OPSETS, build_cast, cast_samples

    for op_type in ("Cast", "CastLike"):
        registry.add("", op_type, build_cast, opsets=CAST_OPSETS,
                     dtypes=("float16", "float", "double", "int8", "uint8", "int16", "uint16",
                             "int32", "uint32", "int64", "uint64"),
                     description=f"onnx-standard:{op_type} with its out-of-range values made "
                                 "explicit (infinities to float types, saturation to float 8)",
                     oracle="reference",  # the reference evaluator's own Cast (numpy)
                     samples=cast_samples(like=op_type == "CastLike"), keeps_op=True)
    from .casts import CASTLIKE_OPSET, build_cast_as_castlike, cast_as_castlike_samples

    registry.add("", "Cast", build_cast_as_castlike, opsets=(6, None),
                 dtypes=("float", "int32", "int64"),
                 description="onnx-standard:Cast as CastLike (to an empty constant of its "
                             f"type; from opset {CASTLIKE_OPSET})",
                 oracle="onnxruntime", samples=cast_as_castlike_samples())
    from .comparisons import SWAPPED, build_swapped_comparison, comparison_samples

    for op_type, swapped in SWAPPED.items():
        registry.add("", op_type, build_swapped_comparison, opsets=(12, None),
                     dtypes=("float16", "float", "double", "int32", "int64", "bfloat16"),
                     description=f"onnx-standard:{op_type} as {swapped} with the operands "
                                 "swapped (false for NaN; bfloat16 in float)",
                     oracle="onnxruntime", samples=comparison_samples(op_type))
    from .recurrent import RECURRENT, build_time_major, time_major_samples

    for op_type in RECURRENT:
        registry.add("", op_type, build_time_major, opsets=(14, None), dtypes=("float",),
                     description=f"onnx-standard:{op_type} batch first (layout 1) or "
                                 "reverse as time first and forward (transposed, sequences "
                                 "reversed)",
                     oracle="reference",  # the reference evaluator's own RNN/GRU/LSTM
                     samples=time_major_samples(op_type), keeps_op=REARRANGED)
    from .reductions import (
        INFINITE_REDUCTIONS,
        REDUCTION_OPSETS,
        build_infinite_reduction,
        infinite_reduction_samples,
    )

    for op_type in INFINITE_REDUCTIONS:
        registry.add("", op_type, build_infinite_reduction, opsets=REDUCTION_OPSETS,
                     dtypes=("float", "double", "float16"),
                     description=f"onnx-standard:{op_type} with its infinite results made "
                                 "explicit (a slice of one infinity alone, or holding the "
                                 "other)",
                     oracle="onnxruntime", samples=infinite_reduction_samples(op_type),
                     keeps_op=True)
    from .axes_inputs import (
        AXES_INPUT_SINCE,
        axes_input_samples,
        build_axes_input,
        numpy_reduction_reference,
    )

    for op_type, since in AXES_INPUT_SINCE.items():
        registry.add("", op_type, build_axes_input, opsets=(since, None),
                     dtypes=("float", "double", "float16"),
                     description=f"onnx-standard:{op_type} given axes as an attribute where "
                                 "it is an input (invalid: MatMulNBitsQuantizer's opset raise), "
                                 "the attribute moved to the input",
                     oracle=numpy_reduction_reference(op_type),
                     samples=axes_input_samples(op_type), keeps_op=True)
    registry.add("", "BitCast", build_bitcast, opsets=BITCAST_OPSETS,
                 dtypes=("bool", "int8", "uint8", "int16", "uint16", "int32", "uint32",
                         "float16", "float", "double", "int64", "uint64"),
                 description="onnx-standard:BitCast (bool to a byte; same-width integers; "
                             "an IEEE float's bits)",
                 oracle="reference",  # the reference evaluator's own BitCast (numpy view)
                 samples=bitcast_samples())
