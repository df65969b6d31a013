"""Decompositions ``onnx-lowering``: standard ops, or forms of them, that a runtime lacks
(OpenVINO 2026.4's ONNX frontend above all), written with other standard ops. Each is
checked against the ONNX reference evaluator's own implementation of the op (numpy written
from the spec, not a function body) on its samples; ``docs/remedies.md`` lists the forms.

* ``CumProd(x, axis)`` (``exclusive``, ``reverse``): ``x`` viewed as ``(pre, n, post)``
  around the (run-time) axis; ``y[:, i] = prod_j x[:, j]`` over ``j <= i`` (``j < i``
  exclusive; ``j >= i`` / ``j > i`` reversed) as a ``ReduceProd`` of an ``(n, n)``
  triangular selection: exact, ``n^2`` memory.
* ``Mod(A, B)`` with ``fmod = 0`` on floats (allowed from opset 28): the result takes the
  divisor's sign, as ``numpy.mod``: ``r = A - B * trunc(A / B)`` (``A`` itself for a finite
  ``A`` and an infinite ``B``), plus ``B`` where ``r`` is non-zero with the other sign;
  NaN for an infinite ``A`` or a zero ``B``.
* ``Det(X)``: Gaussian elimination with partial pivoting, unrolled for the static ``n`` of
  ``X``'s last two axes (declared or constant; ``n <= 16``); a singular matrix gives 0.
* ``Unsqueeze(data, axes)`` with ``axes`` computed at run time: ``Reshape`` to the target
  shape built from ``Shape(data)`` and ``axes`` (its length static), so a runtime that
  needs a static rank gets one.
* ``Pad(data, pads[, constant_value[, axes]])`` with ``mode = "wrap"``: per axis ``i``,
  ``Gather`` of the indices ``(-pads[i] .. d_i + pads[r + i]) mod d_i`` (negative pads
  crop); ``axes`` must be constant; the rank must be known.
* ``MaxUnpool(X, I[, output_shape])``: ``ScatterElements`` of ``X`` into zeros of the
  inferred shape (``(in - 1) * stride - pads + kernel`` per spatial axis) at the flat
  indices ``I``, padded with zeros (bottom/right) to ``output_shape`` when given.
* ``Dropout(data[, ratio[, training_mode]])`` with a ``training_mode`` computed at run
  time: ``Where(training_mode, Where(u >= ratio, data / (1 - ratio), 0), data)`` with
  ``u = RandomUniformLike(data)``; ``mask`` the kept positions (all true when not
  training). The random draw is not numpy's, so only ``ratio = 0`` or inference reproduce
  a reference run.
* ``OptionalHasElement()`` / ``OptionalHasElement("")`` (no input): ``false``; with a plain
  tensor input: ``true``. ``OptionalGetElement(tensor)``: the tensor.
* ``STFT(signal, frame_step[, window[, frame_length]])`` (``onesided``): frames gathered
  at ``f * frame_step + t``, times the window, and a DFT as two matrix products with
  ``cos``/``sin`` of ``-2 pi (t k mod n) / n``; real or complex (``[..., 2]``) signals.
* ``MelWeightMatrix(num_mel_bins, dft_length, sample_rate, lower_edge_hertz,
  upper_edge_hertz)`` (``output_datatype``): the reference evaluator's triangular filters
  (bin edges ``floor((dft_length + 1) * hz / sample_rate)`` of ``num_mel_bins + 2`` points
  evenly spaced in mel), computed in double.
* ``LinearAttention(query, key, value[, past_state][, decay][, beta])`` (every
  ``update_rule``, GQA): the recurrence of the spec as a ``Loop`` over time carrying the
  state, in float32 as the reference evaluator computes it (the spec's own body is a
  ``Scan`` that OpenVINO's frontend cannot convert). Registered by the ``onnx-functions``
  plugin in place of the spec body (:func:`build_linear_attention`).
* ``Resize`` (from 11; not ``antialias``, ``keep_aspect_ratio_policy`` stretch only): one
  axis at a time as the reference evaluator does it: source coordinates by
  ``coordinate_transformation_mode`` (all six), the 2 (linear, nearest by ``nearest_mode``)
  or 4 (cubic, ``cubic_coeff_a``, ``exclude_outside``) neighbours clamped to the edges,
  weighted and summed; ``tf_crop_and_resize`` gives ``extrapolation_value`` outside.
* ``GridSample`` (any spatial rank; linear, nearest; zeros, border, reflection padding):
  the 2^r corners (1 for nearest) gathered from the input flattened over its spatial axes.
* ``DeformConv`` (2-D): every kernel tap sampled bilinearly at its offset position (zero
  outside), times the mask, then a grouped matrix product with the weights, plus ``B``.
* ``Cast`` and ``CastLike`` from float4e2m1 (a static shape of rank 2 or more) to float or
  float16, for onnxruntime (no CPU kernel casts, reshapes or measures float4e2m1): its
  ``com.microsoft::GatherBlockQuantized`` of every row with unit scales in blocks of 16
  (exact: every float4e2m1 value is a float16).
* ``TopK`` of uint64 (onnxruntime has no kernel): ``TopK`` of int64 keys in the same
  order (``BitwiseXor`` of the bits as int64 with the sign bit), values gathered from ``X``.
  ``Pow`` with a uint64 exponent: ``Pow(X, int64(Y))`` below 2^63 (exact), else
  ``Pow(X, double(Y))``, as numpy and the reference evaluator compute every exponent.
* ``Conv`` (1- to 3-D, from opset 11) whose weights ``W`` are not a constant (OpenVINO's CPU
  plugin convolves with no weights of a dynamic shape): ``X`` padded, viewed as
  ``(N, group, C/group, ...)``; each kernel tap a strided ``Slice``; the taps concatenated
  and multiplied by ``W`` as ``(group, M/group, taps * C/group)``, plus ``B``. Not
  ``auto_pad`` SAME_*; sums in another order than a Conv kernel (oracle onnxruntime's Conv).
* ``QuantizeLinear`` (from 21) with ``block_size`` (8/16-bit outputs: each scale and zero
  point repeated over its block along ``axis``, cut to the input's size, then
  ``saturate(round(x / scale) + zero_point)``, rounding half to even), or into float4e2m1
  (``Cast(x / scale + zero_point)``, which rounds to nearest even and saturates).
* ``Scan`` (from opset 11): a ``Loop`` whose iteration gathers each scan input's slice
  (counting from the end for a reverse direction) and runs the body unchanged; stacked
  outputs are reversed and moved to their ``scan_output_axes`` afterwards (a non-zero
  output axis needs the body output's rank).

* ``ai.onnx.contrib::FastGelu(X[, bias])`` (onnxruntime-extensions; CUDA-only there): the
  com-microsoft plugin's body of ``com.microsoft::FastGelu`` (the same formula over
  ``X + bias``). ``ai.onnx.contrib::NegPos(X)``: ``Where(X > 0, 0, X)`` and
  ``Where(X > 0, X, 0)`` (NaN and -0.0 in the first output, as the library's kernel does).
  ``ai.onnx.contrib::MaskedFill(value, mask)``: ``Compress`` of both flattened (OpenVINO
  reshapes and compresses string tensors).
  Oracle: the custom-ops plugin's Python kernels (written from the library's code); runtimes
  without those kernels (OpenVINO) run the bodies.

A model that imports no ai.onnx opset gets bodies written at opset 17 (which they bring in).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from onnx import FunctionProto, TensorProto, helper

from rewriter.plugin import Arg, Declined, FunctionBuilder, OpSample, declining, hookimpl
from rewriter.plugin import present as _present

DOMAIN = "onnx-lowering"
NO_IMPORT_OPSET = 17
MAX_DET_SIZE = 16
CUMPROD_OPSETS = (26, None)
MOD_OPSETS = (28, None)  # fmod = 0 on floats is valid from Mod-28
DET_OPSETS = (13, None)  # Unsqueeze/Squeeze/Slice in their input forms
UNSQUEEZE_OPSETS = (13, None)  # axes as an input
PAD_WRAP_OPSETS = (19, None)  # wrap is new in Pad-19
MAXUNPOOL_OPSETS = (13, None)
DROPOUT_OPSETS = (12, None)  # ratio and training_mode as inputs
OPTIONAL_OPSETS = (15, None)
SIGNAL_OPSETS = (17, None)  # STFT and MelWeightMatrix are new in opset 17
SCAN_OPSETS = (11, None)
RESIZE_OPSETS = (11, None)  # roi, scales and sizes as inputs
GRID_SAMPLE_OPSETS = (16, None)
DEFORM_CONV_OPSETS = (19, None)
BLOCKED_QUANTIZE_OPSETS = (21, None)
TFIDF_OPSETS = (9, None)
TENSOR_SCATTER_OPSETS = (24, None)  # block_size is new in QuantizeLinear-21
FLOAT4_CAST_OPSETS = (23, None)  # float4e2m1 is new in opset 23
FLOAT4_BLOCK = 16  # GatherBlockQuantized's smallest block
_FLOAT4_TARGETS = (TensorProto.FLOAT, TensorProto.FLOAT16)  # GatherBlockQuantized's T2
_FLOAT4_GATHER = ("1.32", "the decomposition's com.microsoft::GatherBlockQuantized takes no "
                  "float4e2m1 data in onnxruntime 1.23.2 and 1.30.0 (\"Type "
                  "'tensor(float4e2m1)' of input parameter ... is invalid\"); 1.21.0 loads "
                  "no model of IR version 11, which float4e2m1 needs")
CONV_OPSETS = (11, None)  # Pad's pads and Slice's steps as inputs
MAX_CONV_RANK = 3
MAX_CONV_TAPS = 125  # one Slice per kernel tap
CONTRIB = "ai.onnx.contrib"  # onnxruntime-extensions' domain
CONTRIB_OPSETS = (7, None)  # Where is new in opset 9; FastGelu's body takes what it is given

_FLOATS = {"tensor(float)": TensorProto.FLOAT, "tensor(double)": TensorProto.DOUBLE,
           "tensor(float16)": TensorProto.FLOAT16, "tensor(bfloat16)": TensorProto.BFLOAT16}


class _Body(FunctionBuilder):
    default_dtype = np.int64

    def scalar(self, x: str) -> str:
        """``x`` (one element) as an int64 scalar."""
        return self.op("Reshape", self.cast(x, TensorProto.INT64), self.ints([]))

    def vector(self, x: str) -> str:
        """A scalar as a 1-element vector."""
        return self.unsqueeze(x, [0])

    def shape_at(self, shape: str, index: str | int) -> str:
        """``shape[index]`` as an int64 scalar (``index`` a constant or a scalar)."""
        if isinstance(index, int):
            index = self.const(np.array(index, np.int64))
        return self.op("Gather", shape, index, axis=0)


def _opset(ctx) -> int:
    """The ai.onnx opset a body is written for (the model's, or 17 when it imports none)."""
    if "" not in (ctx.opsets or {}) and "ai.onnx" not in (ctx.opsets or {}):
        return NO_IMPORT_OPSET
    return ctx.opset


def _elem(ctx, index: int = 0) -> int | None:
    """The element type of input ``index``, if known (any tensor type)."""
    types = list(ctx.input_types or [])
    if index < len(types) and types[index] and types[index].startswith("tensor("):
        return getattr(TensorProto, types[index][7:-1].upper(), None)
    return None


def _float_elem(ctx, index: int = 0) -> int | None:
    types = list(ctx.input_types or [])
    return _FLOATS.get(types[index]) if index < len(types) else None




def _known(node, attributes: Sequence[str]) -> bool:
    return all(a.name in attributes for a in node.attribute)


def _inputs(node, formal: Sequence[str]) -> list[str]:
    return list(formal[:len(node.input)])


# -- CumProd --------------------------------------------------------------------------------


@declining
def build_cumprod(ctx) -> FunctionProto | None:
    """``CumProd`` along a run-time axis, as a triangular ``ReduceProd``."""
    node = ctx.node
    if (len(node.input) != 2 or not all(_present(node.input, i) for i in range(2))
            or len(node.output) != 1 or not _known(node, ["exclusive", "reverse"])):
        raise Declined("needs x and axis, one output, only exclusive and reverse")
    elem = _elem(ctx, 0)
    if elem is None:
        raise Declined("the element type of x is unknown")
    exclusive, reverse = ctx.attribute("exclusive", 0), ctx.attribute("reverse", 0)
    b = _Body(_opset(ctx))
    shape = b.op("Shape", "x")
    rank = b.op("Size", shape)
    axis = b.scalar("axis")
    axis = b.op("Where", b.op("Less", axis, b.const(np.array(0, np.int64))),
                b.op("Add", axis, rank), axis)
    axis_1 = b.vector(axis)
    # (pre, n, post) around the axis; a leading 1 keeps the product of an empty prefix 1
    pre = b.reduce("ReduceProd", b.op("Concat", b.ints([1]), b.slice(shape, [0], axis_1, [0]),
                                      axis=0), [0])
    n = b.vector(b.shape_at(shape, axis))
    cube = b.reshape("x", b.op("Concat", pre, n, b.ints([-1]), axis=0))
    steps = b.op("Range", b.const(np.array(0, np.int64)), b.scalar(n),
                 b.const(np.array(1, np.int64)))
    rows, cols = b.unsqueeze(steps, [1]), b.unsqueeze(steps, [0])  # i, j
    compare = {(0, 0): "GreaterOrEqual", (1, 0): "Greater", (0, 1): "LessOrEqual",
               (1, 1): "Less"}[(exclusive, reverse)]  # keep j (vs i) where rows <op> cols
    keep = b.op(compare, rows, cols)
    keep = b.op("Reshape", keep, b.op("Concat", b.ints([1]), n, n, b.ints([1]), axis=0))
    one = b.const(np.array(1), elem, hint="one")
    selected = b.op("Where", keep, b.unsqueeze(cube, [1]), one)  # (pre, n, n, post)
    y = b.reduce("ReduceProd", selected, [2], keepdims=0)
    y = b.op("Reshape", y, shape)
    return b.function(DOMAIN, "cumprod", ["x", "axis"], [y])


# -- Mod with fmod = 0 on floats ------------------------------------------------------------


@declining
def build_float_mod(ctx) -> FunctionProto | None:
    """``numpy.mod`` of floats: the result takes the divisor's sign."""
    node = ctx.node
    elem = _float_elem(ctx, 0)
    if (elem is None or ctx.attribute("fmod", 0) != 0 or len(node.input) != 2
            or len(node.output) != 1 or not _known(node, ["fmod"])):
        raise Declined("needs A and B of a known float type, fmod=0, one output")
    b = _Body(_opset(ctx))
    zero = b.const(np.array(0.0), elem, hint="zero")
    quotient = b.op("Div", "A", "B")
    truncated = b.op("Where", b.op("Less", quotient, zero), b.op("Ceil", quotient),
                     b.op("Floor", quotient))
    r = b.op("Sub", "A", b.op("Mul", "B", truncated))
    # a finite A over an infinite B: A itself (B * 0 would be NaN)
    finite_a = b.op("Not", b.op("Or", b.op("IsInf", "A"), b.op("IsNaN", "A")))
    r = b.op("Where", b.op("And", b.op("IsInf", "B"), finite_a), "A", r)
    # then the divisor's sign
    other_sign = b.op("Xor", b.op("Less", r, zero), b.op("Less", "B", zero))
    nonzero = b.op("Not", b.op("Equal", r, zero))
    r = b.op("Where", b.op("And", nonzero, other_sign), b.op("Add", r, "B"), r)
    signed_zero = b.op("Where", b.op("Less", "B", zero), b.op("Neg", zero), zero)
    r = b.op("Where", b.op("Equal", r, zero), signed_zero, r)
    return b.function(DOMAIN, "float_mod", ["A", "B"], [r])


# -- onnxruntime-extensions: FastGelu, NegPos -----------------------------------------------


def build_contrib_fast_gelu(ctx) -> FunctionProto | None:
    """``ai.onnx.contrib::FastGelu``: the body of ``com.microsoft::FastGelu``."""
    from rewriter_plugins.com_microsoft import build_fast_gelu

    return build_fast_gelu(ctx)


@declining
def build_masked_fill(ctx) -> FunctionProto | None:
    """``ai.onnx.contrib::MaskedFill``: the values where ``mask`` is true, as a vector."""
    node = ctx.node
    if (len(node.input) != 2 or not all(node.input) or len(node.output) != 1
            or node.attribute or _opset(ctx) < 9):
        raise Declined("needs value and mask, one output, no attributes, opset 9+")
    b = _Body(_opset(ctx))
    flat = b.ints([-1])
    y = b.op("Compress", b.reshape("value", flat), b.reshape("mask", flat), axis=0)
    return b.function(DOMAIN, "masked_fill", ["value", "mask"], [y])


@declining
def build_neg_pos(ctx) -> FunctionProto | None:
    """``ai.onnx.contrib::NegPos``: the non-positive and the positive parts."""
    node = ctx.node
    elem = _float_elem(ctx, 0)
    if (elem is None or len(node.input) != 1 or len(node.output) != 2 or node.attribute
            or _opset(ctx) < 9):
        raise Declined("needs X of a known float type, two outputs, no attributes, opset 9+")
    b = _Body(_opset(ctx))
    zero = b.const(np.array(0.0), elem, hint="zero")
    positive = b.op("Greater", "X", zero)
    negative = b.op("Where", positive, zero, "X")
    return b.function(DOMAIN, "neg_pos", ["X"], [negative, b.op("Where", positive, "X", zero)])


# -- Det ------------------------------------------------------------------------------------


@declining
def build_det(ctx) -> FunctionProto | None:
    """``Det`` by Gaussian elimination with partial pivoting, unrolled for a static n."""
    node = ctx.node
    elem = _float_elem(ctx, 0)
    shape = ctx.shape(node.input[0]) if node.input else None
    if (elem is None or len(node.input) != 1 or len(node.output) != 1 or node.attribute
            or shape is None or len(shape) < 2):
        raise Declined("needs one input of a known float type with a declared shape of rank 2 or "
                       "more, no attributes, one output")
    n = shape[-1] if shape[-1] == shape[-2] else None
    if not n or n > MAX_DET_SIZE:
        raise Declined(f"the matrices must be declared square, at most {MAX_DET_SIZE} wide")
    b = _Body(_opset(ctx))
    zero = b.const(np.array(0.0), elem, hint="zero")
    a = "X"
    batch = b.slice(b.op("Shape", a), [0], [-2], [0])
    sign = b.fill(b.op("Concat", batch, b.ints([1, 1]), axis=0), 1.0, elem)  # (..., 1, 1)
    rows = b.op("Range", b.const(np.array(0, np.int64)), b.const(np.array(n, np.int64)),
                b.const(np.array(1, np.int64)))
    for k in range(n - 1):
        column = b.slice(a, [k, k], [n, k + 1], [-2, -1])                # (..., n-k, 1)
        pivot_row = b.op("Add", b.op("ArgMax", b.op("Abs", column), axis=-2, keepdims=1),
                         b.const(np.array(k, np.int64)))                 # (..., 1, 1)
        k_const = b.const(np.array(k, np.int64))
        row_index = b.op("Reshape", rows, b.ints([n, 1]))
        swapped = b.op("Where", b.op("Equal", row_index, k_const), pivot_row,
                       b.op("Where", b.op("Equal", row_index, pivot_row), k_const, row_index))
        a = b.op("GatherElements", a, b.op("Expand", swapped, b.op("Shape", a)), axis=-2)
        sign = b.op("Where", b.op("Equal", pivot_row, k_const), sign, b.op("Neg", sign))
        pivot = b.slice(a, [k, k], [k + 1, k + 1], [-2, -1])             # (..., 1, 1)
        below = b.slice(a, [k + 1, k], [n, k + 1], [-2, -1])             # (..., n-k-1, 1)
        factors = b.op("Where", b.op("Equal", pivot, zero), zero, b.op("Div", below, pivot))
        top = b.slice(a, [0], [k + 1], [-2])
        pivot_row_values = b.slice(a, [k], [k + 1], [-2])
        rest = b.op("Sub", b.slice(a, [k + 1], [n], [-2]),
                    b.op("Mul", factors, pivot_row_values))
        a = b.op("Concat", top, rest, axis=-2)
    det = sign
    for k in range(n):
        det = b.op("Mul", det, b.slice(a, [k, k], [k + 1, k + 1], [-2, -1]))
    det = b.squeeze(det, [-2, -1])
    return b.function(DOMAIN, "det", ["X"], [det])


# -- Unsqueeze with run-time axes -----------------------------------------------------------


@declining
def build_unsqueeze(ctx) -> FunctionProto | None:
    """``Unsqueeze`` as ``Reshape`` to a shape of static length."""
    node = ctx.node
    if len(node.input) != 2 or not _present(node.input, 1) or len(node.output) != 1:
        raise Declined("needs data and axes, one output")
    b = _Body(_opset(ctx))
    shape = b.op("Shape", "data")
    rank = b.op("Size", shape)
    axes = b.reshape(b.cast("axes", TensorProto.INT64), [-1])
    out_rank = b.op("Add", rank, b.op("Size", axes))
    axes = b.op("Where", b.op("Less", axes, b.const(np.array(0, np.int64))),
                b.op("Add", axes, out_rank), axes)
    positions = b.op("Range", b.const(np.array(0, np.int64)), out_rank,
                     b.const(np.array(1, np.int64)))
    # (no Unsqueeze in the body: it is the op being replaced)
    hits = b.cast(b.op("Equal", b.reshape(positions, [-1, 1]), b.reshape(axes, [1, -1])),
                  TensorProto.INT32)
    inserted = b.op("Greater", b.reduce("ReduceMax", hits, [1], keepdims=0),
                    b.const(np.array(0), np.int32))
    kept = b.cast(b.op("Not", inserted), TensorProto.INT64)
    source = b.op("Sub", b.op("CumSum", kept, b.const(np.array(0, np.int64))),
                  b.const(np.array(1, np.int64)))
    dims = b.op("Concat", shape, b.ints([1]), axis=0)
    target = b.op("Gather", dims, b.op("Where", inserted, rank, source), axis=0)
    reshape = {"allowzero": 1} if b.opset >= 14 else {}
    y = b.op("Reshape", "data", target, **reshape)
    return b.function(DOMAIN, "unsqueeze", ["data", "axes"], [y])


# -- Reduce* with run-time axes, keepdims = 0 ---------------------------------------------

# Each keepdims = 1 form is written with other ops (the op never appears in its own body):
# ReduceSum as a sum per listed axis (CumSum, its last slice), ReduceMax and ReduceMin on each
# other, the rest on that sum. (The ops with a spec function body, ReduceL1 ... ReduceSumSquare,
# are expanded by onnx-functions first; this form is taken when that body's ReduceSum is
# refused, as OpenVINO refuses one over axes the caller feeds.)
REDUCE_AXES_OPS = ("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceL1",
                   "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare")
EXACT_REDUCE_AXES_OPS = ("ReduceMax", "ReduceMin")  # the others sum in another order


def _listed_axes(b: _Body, rank: int) -> str:
    """A bool vector of ``rank``: whether each axis is listed in ``axes`` (negative ones
    counted from the end)."""
    axes = b.cast("axes", TensorProto.INT64)
    axes = b.op("Where", b.op("Less", axes, b.const(np.array(0, np.int64))),
                b.op("Add", axes, b.const(np.array(rank, np.int64))), axes)
    positions = b.const(np.arange(rank, dtype=np.int64).reshape(rank, 1))
    hits = b.cast(b.op("Equal", positions, b.reshape(axes, [1, -1])), TensorProto.INT64)
    return b.cast(b.reduce("ReduceMax", hits, [1], keepdims=0), TensorProto.BOOL)


def _sum_kept(b: _Body, x: str, listed: str, rank: int) -> str:
    """The sum of ``x`` over the listed axes, keeping them as dimensions of 1: per axis, the
    last slice of its ``CumSum`` where listed, the values unchanged elsewhere (broadcast
    back), then every listed axis cut to its first slice."""
    last = b.const(np.iinfo(np.int64).max, np.int64)
    for axis in range(rank):
        running = b.op("CumSum", x, b.const(np.array(axis, np.int64)))
        total = b.op("Slice", running, b.ints([-1]), b.op("Reshape", last, b.ints([1])),
                     b.ints([axis]))
        x = b.op("Where", b.op("Gather", listed, b.const(np.array(axis, np.int64)), axis=0),
                 total, x)
    ends = b.op("Where", listed, b.const(np.ones(rank, np.int64)), b.op("Shape", x))
    return b.op("Slice", x, b.ints([0] * rank), ends, b.ints(list(range(rank))))


def _reduce_kept(b: _Body, op_type: str, listed: str, rank: int) -> str:
    """``op_type`` of ``data`` over ``axes`` with ``keepdims = 1``, without ``op_type``."""
    def reduced(op: str, x: str) -> str:
        return _sum_kept(b, x, listed, rank) if op == "ReduceSum" else b.op(
            op, x, "axes", keepdims=1)

    if op_type == "ReduceSum":
        return reduced("ReduceSum", "data")
    if op_type in ("ReduceMax", "ReduceMin"):
        other = "ReduceMin" if op_type == "ReduceMax" else "ReduceMax"
        return b.op("Neg", reduced(other, b.op("Neg", "data")))
    if op_type == "ReduceMean":
        dims = b.op("Gather", b.op("Shape", "data"), b.cast("axes", TensorProto.INT64), axis=0)
        count = b.op("CastLike", b.reduce("ReduceProd", dims, [0], keepdims=0), "data")
        return b.op("Div", reduced("ReduceSum", "data"), count)
    if op_type == "ReduceL1":
        return reduced("ReduceSum", b.op("Abs", "data"))
    if op_type in ("ReduceL2", "ReduceSumSquare"):
        squares = reduced("ReduceSum", b.op("Mul", "data", "data"))
        return b.op("Sqrt", squares) if op_type == "ReduceL2" else squares
    if op_type == "ReduceLogSum":
        return b.op("Log", reduced("ReduceSum", "data"))
    # ReduceLogSumExp, as the reference evaluator computes it: the maximum taken out first
    top = reduced("ReduceMax", "data")
    return b.op("Add", b.op("Log", reduced("ReduceSum", b.op("Exp", b.op("Sub", "data", top)))),
                top)


@declining
def build_reduce_axes(ctx) -> FunctionProto | None:
    """A reduction over run-time ``axes`` with ``keepdims = 0``, whose output rank depends on
    ``axes``' values (OpenVINO's CPU plugin compiles no dynamic rank): the reduction with
    ``keepdims = 1`` (:func:`_reduce_kept`), then ``Reshape`` to the kept dimensions, picked
    with ``TopK`` so the target shape has a static length."""
    node = ctx.node
    if (len(node.input) != 2 or not _present(node.input, 1) or len(node.output) != 1
            or not _known(node, ["keepdims", "noop_with_empty_axes"])):
        raise Declined("needs data and run-time axes, one output")
    if ctx.attribute("keepdims", 1) != 0:
        raise Declined("keepdims = 1 keeps the rank already")
    if ctx.constant(node.input[1]) is not None:
        raise Declined("constant axes: the op as it is")
    rank, axes_shape = ctx.rank(node.input[0]), ctx.shape(node.input[1])
    if rank is None or axes_shape is None or len(axes_shape) != 1 or not axes_shape[0]:
        raise Declined("needs data of a declared rank and axes of a declared non-zero length")
    count = axes_shape[0]
    if count > rank:
        raise Declined(f"{count} axes for rank {rank}")
    b = _Body(_opset(ctx))
    listed = _listed_axes(b, rank)
    kept = _reduce_kept(b, node.op_type, listed, rank)
    if count == rank:
        target = b.ints([])
    else:
        # kept axes score rank - i, listed ones 0: the rank - count largest, in order
        score = b.op("Mul", b.cast(b.op("Not", listed), TensorProto.INT64),
                     b.const(np.arange(rank, 0, -1, dtype=np.int64)))
        _, order = b.op("TopK", score, b.ints([rank - count]), outputs=2, largest=1,
                        sorted=1)
        target = b.op("Gather", b.op("Shape", kept), order, axis=0)
    y = b.op("Reshape", kept, target)
    return b.function(DOMAIN, f"{node.op_type}_axes", ["data", "axes"], [y])


# -- Pad (wrap) -----------------------------------------------------------------------------


@declining
def build_pad_wrap(ctx) -> FunctionProto | None:
    """``Pad`` in ``wrap`` mode: per axis, ``Gather`` of indices modulo the dimension."""
    node = ctx.node
    mode = ctx.attribute("mode", b"constant")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    rank = ctx.rank(node.input[0]) if node.input else None
    if (mode != "wrap" or rank is None or not _present(node.input, 1) or len(node.output) != 1
            or len(node.input) > 4 or not _known(node, ["mode"])):
        raise Declined("needs mode wrap, data of a declared rank, pads given, one output")
    axes = list(range(rank))
    if _present(node.input, 3):
        constant = ctx.constant(node.input[3])
        if constant is None:
            raise Declined("axes must be a constant")
        axes = [int(a) % rank for a in constant.ravel()]
    b = _Body(_opset(ctx))
    pads = b.cast("pads", TensorProto.INT64)
    shape = b.op("Shape", "data")
    one = b.const(np.array(1, np.int64))
    y = "data"
    for i, axis in enumerate(axes):
        begin = b.shape_at(pads, i)
        end = b.shape_at(pads, i + len(axes))
        size = b.shape_at(shape, axis)
        indices = b.op("Mod", b.op("Range", b.op("Neg", begin), b.op("Add", size, end), one),
                       size)
        y = b.op("Gather", y, indices, axis=axis)
    return b.function(DOMAIN, "pad_wrap", _inputs(node, ["data", "pads", "constant_value",
                                                        "axes"]), [y])


# -- MaxUnpool ------------------------------------------------------------------------------


@declining
def build_max_unpool(ctx) -> FunctionProto | None:
    """``MaxUnpool`` as a scatter into zeros of the inferred shape (then padded)."""
    node = ctx.node
    kernel = ctx.attribute("kernel_shape")
    elem = _elem(ctx, 0)
    if (not kernel or elem is None or len(node.output) != 1 or len(node.input) > 3
            or not all(_present(node.input, i) for i in range(2))
            or not _known(node, ["kernel_shape", "pads", "strides"])):
        raise Declined("needs X and I, kernel_shape, a known element type, one output, only "
                       "kernel_shape, pads and strides")
    spatial = len(kernel)
    strides = list(ctx.attribute("strides", [1] * spatial))
    pads = list(ctx.attribute("pads", [0] * 2 * spatial))
    b = _Body(_opset(ctx))
    shape = b.op("Shape", "X")
    leading = b.slice(shape, [0], [2], [0])
    inner = b.slice(shape, [2], [2 + spatial], [0])
    inferred = b.op("Add", b.op("Mul", b.op("Sub", inner, b.ints([1] * spatial)),
                                b.ints(strides)),
                    b.ints([kernel[d] - pads[d] - pads[spatial + d] for d in range(spatial)]))
    inferred = b.op("Concat", leading, inferred, axis=0)
    total = b.reduce("ReduceProd", inferred, [0])
    zeros = b.fill(total, 0.0, elem)
    flat = b.op("ScatterElements", zeros, b.reshape(b.cast("I", TensorProto.INT64), [-1]),
                b.reshape("X", [-1]), axis=0)
    y = b.op("Reshape", flat, inferred)
    if _present(node.input, 2):
        extra = b.op("Sub", b.cast("output_shape", TensorProto.INT64), inferred)
        pads_vector = b.op("Concat", b.op("Mul", extra, b.ints([0] * (2 + spatial))), extra,
                           axis=0)
        y = b.op("Pad", y, pads_vector)
    return b.function(DOMAIN, "max_unpool", _inputs(node, ["X", "I", "output_shape"]), [y])


# -- Dropout with a run-time training mode --------------------------------------------------


@declining
def build_dropout(ctx) -> FunctionProto | None:
    """Training ``Dropout`` with ``RandomUniformLike``, chosen at run time."""
    node = ctx.node
    elem = _float_elem(ctx, 0)
    if (elem is None or not _present(node.input, 2) or len(node.input) > 3
            or not _known(node, ["seed"]) or len(node.output) > 2):
        raise Declined("needs data of a known float type and training_mode given, only seed, at "
                       "most 2 outputs")
    b = _Body(_opset(ctx))
    one = b.const(np.array(1.0), elem, hint="one")
    ratio = "ratio" if _present(node.input, 1) else b.const(np.array(0.5), elem, hint="ratio")
    ratio = b.cast(ratio, elem)
    seed = ctx.attribute("seed")
    uniform = b.op("RandomUniformLike", "data", dtype=elem,
                   seed=None if seed is None else float(seed))
    keep = b.op("GreaterOrEqual", uniform, ratio)
    scaled = b.op("Div", "data", b.op("Sub", one, ratio))
    dropped = b.op("Where", keep, scaled, b.const(np.array(0.0), elem, hint="zero"))
    training = b.op("Reshape", b.cast("training_mode", TensorProto.BOOL), b.ints([]))
    y = b.op("Where", training, dropped, "data")
    outputs = [y]
    if len(node.output) > 1 and node.output[1]:
        outputs.append(b.op("Or", b.op("Not", training), keep))
    return b.function(DOMAIN, "dropout", _inputs(node, ["data", "ratio", "training_mode"]),
                      outputs)


# -- Optional ops on plain tensors or nothing -----------------------------------------------


def build_optional_has_element(ctx) -> FunctionProto | None:
    """No input: ``false``; a plain tensor input: ``true``."""
    node = ctx.node
    if len(node.output) != 1 or node.attribute:
        raise Declined("needs one output and no attributes")
    types = list(ctx.input_types or [])
    given = _present(node.input, 0)
    if given and not (types and types[0] and types[0].startswith("tensor(")):
        raise Declined("an optional or sequence value: its emptiness is not known here")
    b = _Body(_opset(ctx))
    y = b.const(np.array(given), np.bool_, hint="has_element")
    return b.function(DOMAIN, "optional_has_element", ["input"] if node.input else [], [y])


def build_optional_get_element(ctx) -> FunctionProto | None:
    """A plain tensor input: itself."""
    node = ctx.node
    types = list(ctx.input_types or [])
    if (len(node.input) != 1 or not _present(node.input, 0) or len(node.output) != 1
            or not (types and types[0] and types[0].startswith("tensor("))):
        raise Declined("needs a tensor input and one output")
    b = _Body(_opset(ctx))
    return b.function(DOMAIN, "optional_get_element", ["input"], [b.op("Identity", "input")])


# -- STFT -----------------------------------------------------------------------------------


@declining
def build_stft(ctx) -> FunctionProto | None:
    """``STFT`` as gathered frames times a DFT matrix."""
    node = ctx.node
    elem = _float_elem(ctx, 0)
    rank = ctx.rank(node.input[0]) if node.input else None
    if (elem is None or len(node.input) > 4 or not all(_present(node.input, i) for i in (0, 1))
            or not (_present(node.input, 2) or _present(node.input, 3))
            or len(node.output) != 1 or not _known(node, ["onesided"]) or rank not in (None, 3)):
        raise Declined("needs signal of a known float type (rank 3 where declared), "
                       "frame_step, a window or a frame_length, one output, only onesided")
    onesided = ctx.attribute("onesided", 1)
    b = _Body(_opset(ctx))
    zero, one = b.const(np.array(0, np.int64)), b.const(np.array(1, np.int64))
    if _present(node.input, 3):
        length = b.scalar("frame_length")
    else:
        length = b.op("Size", "window")
    step = b.scalar("frame_step")
    signal_length = b.shape_at(b.op("Shape", "signal"), 1)
    frames = b.op("Add", b.op("Div", b.op("Sub", signal_length, length), step), one)
    starts = b.op("Mul", b.op("Range", zero, frames, one), step)
    offsets = b.op("Range", zero, length, one)
    index = b.op("Add", b.unsqueeze(starts, [1]), b.unsqueeze(offsets, [0]))   # (F, n)
    parts = b.op("Shape", "signal")
    components = b.shape_at(parts, 2)                                        # 1 or 2
    real = b.op("Gather", b.squeeze(b.slice("signal", [0], [1], [2]), [2]), index, axis=1)
    imag = b.op("Gather", b.squeeze(b.slice("signal", b.vector(b.op("Sub", components, one)),
                                            b.vector(components), [2]), [2]), index, axis=1)
    # imag is the real part again for a real signal: zero it then
    complex_signal = b.cast(b.op("Equal", components, b.const(np.array(2, np.int64))), elem)
    imag = b.op("Mul", imag, complex_signal)
    if _present(node.input, 2):
        real, imag = b.op("Mul", real, "window"), b.op("Mul", imag, "window")
    bins = b.op("Add", b.op("Div", length, b.const(np.array(2, np.int64))), one) if onesided \
        else length
    k = b.op("Range", zero, bins, one)
    product = b.op("Mod", b.op("Mul", b.unsqueeze(offsets, [1]), b.unsqueeze(k, [0])),
                   length)                                                   # (n, K)
    angle = b.op("Div", b.op("Mul", b.cast(product, TensorProto.DOUBLE),
                             b.const(np.array(-2 * math.pi), np.float64)),
                 b.cast(length, TensorProto.DOUBLE))
    # at quarter turns (4 t k a multiple of n) the exact 0 / +-1, as an FFT gives them
    quarter = b.op("Mul", product, b.const(np.array(4, np.int64)))
    exact = b.op("Equal", b.op("Mod", quarter, length), zero)
    turn = b.op("Mod", b.op("Div", quarter, length), b.const(np.array(4, np.int64)))
    cos, sin = (b.op("Where", exact, b.op("Gather", b.const(np.array(table), elem), turn,
                                         axis=0), b.cast(b.op(f, angle), elem))
                for f, table in (("Cos", [1.0, 0.0, -1.0, 0.0]),
                                 ("Sin", [0.0, -1.0, 0.0, 1.0])))
    out_real = b.op("Sub", b.op("MatMul", real, cos), b.op("MatMul", imag, sin))
    out_imag = b.op("Add", b.op("MatMul", real, sin), b.op("MatMul", imag, cos))
    y = b.op("Concat", b.unsqueeze(out_real, [-1]), b.unsqueeze(out_imag, [-1]), axis=-1)
    return b.function(DOMAIN, "stft", _inputs(node, ["signal", "frame_step", "window",
                                                    "frame_length"]), [y])


# -- MelWeightMatrix ------------------------------------------------------------------------


@declining
def build_mel_weight_matrix(ctx) -> FunctionProto | None:
    """The reference evaluator's triangular mel filters, in double."""
    node = ctx.node
    if (len(node.input) != 5 or not all(_present(node.input, i) for i in range(5))
            or len(node.output) != 1 or not _known(node, ["output_datatype"])):
        raise Declined("needs its 5 inputs given, one output, only output_datatype")
    out_type = ctx.attribute("output_datatype", TensorProto.FLOAT)
    b = _Body(_opset(ctx))
    d = TensorProto.DOUBLE

    def f64(value):
        return b.const(np.array(value), np.float64)

    zero, one = b.const(np.array(0, np.int64)), b.const(np.array(1, np.int64))
    mels = b.scalar("num_mel_bins")
    dft = b.scalar("dft_length")
    spectrogram_bins = b.op("Add", b.op("Div", dft, b.const(np.array(2, np.int64))), one)

    def to_mel(hz):
        return b.op("Div", b.op("Mul", f64(2595.0), b.op("Log", b.op("Add", f64(1.0), b.op(
            "Div", b.cast(hz, d), f64(700.0))))), f64(math.log(10)))

    low, high = to_mel("lower_edge_hertz"), to_mel("upper_edge_hertz")
    points = b.op("Add", mels, b.const(np.array(2, np.int64)))
    step = b.op("Div", b.op("Sub", high, low), b.cast(points, d))
    mel_points = b.op("Add", b.op("Mul", b.cast(b.op("Range", zero, points, one), d), step), low)
    hz_points = b.op("Mul", f64(700.0), b.op("Sub", b.op("Exp", b.op(
        "Mul", b.op("Div", mel_points, f64(2595.0)), f64(math.log(10)))), f64(1.0)))
    edges = b.op("Floor", b.op("Div", b.op("Mul", b.cast(b.op("Add", dft, one), d), hz_points),
                             b.cast(b.scalar("sample_rate"), d)))            # (M + 2)
    left = b.slice(edges, [0], b.vector(mels), [0])
    center = b.slice(edges, [1], b.vector(b.op("Add", mels, one)), [0])
    right = b.slice(edges, [2], b.vector(points), [0])
    j = b.unsqueeze(b.cast(b.op("Range", zero, spectrogram_bins, one), d), [1])  # (K, 1)
    left, center, right = (b.unsqueeze(x, [0]) for x in (left, center, right))  # (1, M)
    zero_d = f64(0.0)
    rising_width = b.op("Sub", center, left)
    rising = b.op("Where", b.op("And", b.op("GreaterOrEqual", j, left),
                                b.op("LessOrEqual", j, center)),
                  b.op("Div", b.op("Sub", j, left), rising_width), zero_d)
    peak = b.cast(b.op("Equal", j, center), d)
    rising = b.op("Where", b.op("Equal", rising_width, zero_d), peak, rising)
    falling_width = b.op("Sub", right, center)
    falling_span = b.op("And", b.op("Greater", falling_width, zero_d), b.op(
        "And", b.op("GreaterOrEqual", j, center), b.op("Less", j, right)))
    y = b.op("Where", falling_span, b.op("Div", b.op("Sub", right, j), falling_width), rising)
    y = b.cast(y, out_type)
    return b.function(DOMAIN, "mel_weight_matrix", ["num_mel_bins", "dft_length", "sample_rate",
                                                   "lower_edge_hertz", "upper_edge_hertz"],
                      [y])


# -- LinearAttention -----------------------------------------------------------------------

_UPDATE_RULES = {"linear": (False, False), "gated": (True, False), "delta": (False, True),
                 "gated_delta": (True, True)}  # rule: (decay, delta correction)


def _heads_first(b: _Body, x: str, heads: int, size: int = -1) -> str:
    """(B, T, H * D) -> (B, H, T, D) in float32 (``heads`` -1 with ``size`` 1: one head per
    last-axis entry)."""
    shape = b.ints([0, 0, heads, size])
    return b.op("Transpose", b.op("Reshape", b.cast(x, TensorProto.FLOAT), shape),
                perm=[0, 2, 1, 3])


@declining
def build_linear_attention(ctx) -> FunctionProto | None:
    """``LinearAttention`` as a ``Loop`` over time carrying the state, in float32, as the
    reference evaluator computes it."""
    node = ctx.node
    rule = ctx.attribute("update_rule", b"gated_delta")
    rule = rule.decode() if isinstance(rule, bytes) else rule
    q_heads, kv_heads = ctx.attribute("q_num_heads"), ctx.attribute("kv_num_heads")
    elem = _float_elem(ctx, 0)
    if (rule not in _UPDATE_RULES or not q_heads or not kv_heads or q_heads % kv_heads
            or elem is None or len(node.input) > 6 or len(node.output) > 2
            or not all(_present(node.input, i) for i in range(3))
            or not _known(node, ["update_rule", "q_num_heads", "kv_num_heads", "scale",
                                 "chunk_size"])):
        raise Declined("needs a known update_rule, q_num_heads a multiple of kv_num_heads, query, "
                       "key and value of a known float type, known attributes")
    gated, delta = _UPDATE_RULES[rule]
    if _present(node.input, 4) != gated or _present(node.input, 5) != delta:
        raise Declined("the update rule's inputs (and no others) must be given")
    state_type = _float_elem(ctx, 3) if _present(node.input, 3) else elem
    b = _Body(_opset(ctx))
    f32 = TensorProto.FLOAT
    q4 = _heads_first(b, "query", q_heads)                                  # (B, Hq, T, dk)
    k4 = _heads_first(b, "key", kv_heads)
    v4 = _heads_first(b, "value", kv_heads)
    decay4 = _heads_first(b, "decay", kv_heads) if gated else None        # (B, Hkv, T, 1|dk)
    beta4 = _heads_first(b, "beta", -1, 1) if delta else None                # (B, Hkv|1, T, 1)
    shape_k, shape_v = b.op("Shape", k4), b.op("Shape", v4)
    d_k = b.slice(shape_k, [3], [4], [0])
    if _present(node.input, 3):
        state0 = b.cast("past_state", f32)
    else:
        state0 = b.fill(b.op("Concat", b.slice(shape_k, [0], [2], [0]), d_k,
                             b.slice(shape_v, [3], [4], [0]), axis=0), 0.0, f32)
    scale = ctx.attribute("scale", 0.0)
    if scale:
        scale_value = b.const(np.array(scale), np.float32)
    else:
        scale_value = b.op("Reciprocal", b.op("Sqrt", b.cast(d_k, f32)))
    steps = b.op("Gather", b.op("Shape", q4), b.const(np.array(2, np.int64)), axis=0)

    body = b.child()
    step, cond, state_in = body.fresh("t"), body.fresh("cond"), body.fresh("state")

    def at(x: str) -> str:
        return body.op("Gather", x, step, axis=2)

    q_t, k_t, v_t = at(q4), at(k4), at(v4)                                # (B, H, d)
    state = state_in
    if gated:
        state = body.op("Mul", state, body.unsqueeze(body.op("Exp", at(decay4)), [-1]))
    if delta:  # v_t <- beta_t (v_t - S^T k_t)
        retrieved = body.squeeze(body.op("MatMul", body.unsqueeze(k_t, [2]), state), [2])
        v_t = body.op("Mul", at(beta4), body.op("Sub", v_t, retrieved))
    state = body.op("Add", state, body.op("Mul", body.unsqueeze(k_t, [-1]),
                                          body.unsqueeze(v_t, [-2])))
    read = state
    if q_heads != kv_heads:  # each KV state serves q_heads / kv_heads query heads in turn
        shape = body.op("Shape", state)                                  # (B, Hkv, dk, dv)
        spread = body.op("Expand", body.unsqueeze(state, [2]),
                         body.ints([1, 1, q_heads // kv_heads, 1, 1]))
        read = body.op("Reshape", spread, body.op(
            "Concat", body.slice(shape, [0], [1], [0]), body.ints([q_heads]),
            body.slice(shape, [2], [4], [0]), axis=0))
    out_t = body.op("Mul", body.squeeze(body.op("MatMul", body.unsqueeze(q_t, [2]), read), [2]),
                    scale_value)                                          # (B, Hq, dv)
    cond_out = body.op("Identity", cond)
    graph = helper.make_graph(
        body.nodes, b.fresh("linear_attention_step"),
        [helper.make_tensor_value_info(step, TensorProto.INT64, []),
         helper.make_tensor_value_info(cond, TensorProto.BOOL, []),
         helper.make_tensor_value_info(state_in, f32, None)],
        [helper.make_tensor_value_info(cond_out, TensorProto.BOOL, []),
         helper.make_tensor_value_info(state, f32, None),
         helper.make_tensor_value_info(out_t, f32, None)])
    # (an explicit condition: the reference evaluator runs no trip when it is omitted)
    final_state, outs = b.op("Loop", steps, b.const(np.array(True), TensorProto.BOOL), state0,
                             outputs=2, body=graph)
    # (T, B, Hq, dv) -> (B, T, Hq * dv)
    output = b.op("Reshape", b.op("Transpose", outs, perm=[1, 0, 2, 3]), b.ints([0, 0, -1]))
    outputs = [b.cast(output, elem)]
    if len(node.output) > 1 and node.output[1]:
        outputs.append(b.cast(final_state, state_type or elem))
    return b.function(DOMAIN, "linear_attention", _inputs(node, [
        "query", "key", "value", "past_state", "decay", "beta"]), outputs)


# -- Resize ---------------------------------------------------------------------------------

_RESIZE_ATTRIBUTES = ["mode", "coordinate_transformation_mode", "nearest_mode",
                      "cubic_coeff_a", "exclude_outside", "extrapolation_value", "axes",
                      "antialias", "keep_aspect_ratio_policy"]
_COORDINATE_MODES = {"half_pixel", "half_pixel_symmetric", "pytorch_half_pixel",
                     "align_corners", "asymmetric", "tf_crop_and_resize"}
_NEAREST_MODES = {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"}


def _text(value, default: str) -> str:
    if value is None:
        return default
    return value.decode() if isinstance(value, bytes) else value


def _resize_rank(ctx) -> int | None:
    node = ctx.node
    rank = ctx.rank(node.input[0])
    if rank is not None:
        return rank
    for i in (3, 2):
        if _present(node.input, i):
            shape = ctx.shape(node.input[i])
            if shape and shape[0]:
                return shape[0]
    return None


@declining
def build_resize(ctx) -> FunctionProto | None:
    """``Resize`` one axis at a time, as the reference evaluator computes it: source
    coordinates by ``coordinate_transformation_mode``, the 2 (linear, nearest) or 4 (cubic)
    neighbours clamped to the edges, weighted and summed; ``tf_crop_and_resize`` puts
    ``extrapolation_value`` outside the input."""
    node = ctx.node
    mode = _text(ctx.attribute("mode"), "nearest")
    coordinates = _text(ctx.attribute("coordinate_transformation_mode"), "half_pixel")
    nearest = _text(ctx.attribute("nearest_mode"), "round_prefer_floor")
    elem = _float_elem(ctx, 0)
    if (elem is None or mode not in ("nearest", "linear", "cubic")
            or coordinates not in _COORDINATE_MODES or nearest not in _NEAREST_MODES
            or ctx.attribute("antialias", 0)
            or _text(ctx.attribute("keep_aspect_ratio_policy"), "stretch") != "stretch"
            or not _known(node, _RESIZE_ATTRIBUTES) or len(node.output) != 1
            or len(node.input) > 4 or not _present(node.input, 0)
            or not (_present(node.input, 2) or _present(node.input, 3))):
        raise Declined("needs X of a known float type, scales or sizes, one output, no antialias, "
                       "keep_aspect_ratio_policy stretch, known modes and attributes")
    by_sizes = _present(node.input, 3)
    if coordinates == "tf_crop_and_resize" and not _present(node.input, 1):
        raise Declined("tf_crop_and_resize needs roi")
    rank = _resize_rank(ctx)
    axes = ctx.attribute("axes")
    if axes is None:
        if rank is None:
            raise Declined("the input's rank is not known")
        axes = list(range(rank))
    elif rank is None:
        rank = ctx.rank(node.input[0])
        if rank is None:
            raise Declined("the input's rank is not known")
    axes = [a % rank for a in axes]
    b = _Body(_opset(ctx))
    work = TensorProto.DOUBLE if elem == TensorProto.DOUBLE else TensorProto.FLOAT

    def real(value):
        return b.const(np.array(value), helper.tensor_dtype_to_np_dtype(work))

    zero_i, one_i = b.const(np.array(0, np.int64)), b.const(np.array(1, np.int64))
    y = b.cast("X", work)
    shape = b.op("Shape", "X")
    count = len(axes)
    a_coef = ctx.attribute("cubic_coeff_a", -0.75)
    for k, axis in enumerate(axes):
        size = b.shape_at(shape, axis)
        in_w = b.cast(size, work)
        if by_sizes:
            out_int = b.shape_at(b.cast("sizes", TensorProto.INT64), k)
            scale = b.op("Div", b.cast(out_int, work), in_w)
        else:
            scale = b.cast(b.shape_at("scales", k), work)
            out_int = b.cast(b.op("Floor", b.op("Mul", b.cast(in_w, TensorProto.DOUBLE),
                                                b.cast(scale, TensorProto.DOUBLE))),
                             TensorProto.INT64)
        out_w = b.op("Mul", scale, in_w)
        steps = b.cast(b.op("Range", zero_i, out_int, one_i), work)
        half = real(0.5)
        single = b.op("Equal", out_w, real(1.0))
        extrapolated = None
        if coordinates == "align_corners":
            x = b.op("Where", single, real(0.0), b.op("Div", b.op(
                "Mul", steps, b.op("Sub", in_w, real(1.0))), b.op("Sub", out_w, real(1.0))))
        elif coordinates == "asymmetric":
            x = b.op("Div", steps, scale)
        elif coordinates == "tf_crop_and_resize":
            roi = b.cast("roi", work)
            start, end = b.shape_at(roi, k), b.shape_at(roi, k + count)
            extent = b.op("Mul", b.op("Sub", end, start), b.op("Sub", in_w, real(1.0)))
            x = b.op("Where", single, b.op("Div", extent, real(2.0)), b.op(
                "Div", b.op("Mul", steps, extent), b.op("Sub", out_w, real(1.0))))
            x = b.op("Add", x, b.op("Mul", start, b.op("Sub", in_w, real(1.0))))
            extrapolated = b.op("Or", b.op("Less", x, real(0.0)),
                                b.op("Greater", x, b.op("Sub", in_w, real(1.0))))
        else:
            x = b.op("Sub", b.op("Div", b.op("Add", steps, half), scale), half)
            if coordinates == "pytorch_half_pixel":
                x = b.op("Where", single, real(-0.5), x)
            elif coordinates == "half_pixel_symmetric":
                adjustment = b.op("Div", b.cast(out_int, work), out_w)
                offset = b.op("Mul", b.op("Div", in_w, real(2.0)),
                              b.op("Sub", real(1.0), adjustment))
                x = b.op("Add", offset, x)
        floor = b.op("Floor", x)
        ratio = b.op("Where", b.op("Equal", x, floor), real(1.0), b.op("Sub", x, floor))
        if mode == "cubic":
            taps = 4
            r1 = b.op("Add", ratio, real(1.0))
            t = b.op("Sub", real(1.0), ratio)
            t1 = b.op("Add", t, real(1.0))

            def far(v):  # ((A v - 5A) v + 8A) v - 4A
                return b.op("Sub", b.op("Mul", b.op("Add", b.op("Mul", b.op(
                    "Sub", b.op("Mul", real(a_coef), v), real(5 * a_coef)), v),
                    real(8 * a_coef)), v), real(4 * a_coef))

            def near(v):  # ((A + 2) v - (A + 3)) v v + 1
                return b.op("Add", b.op("Mul", b.op("Mul", b.op("Sub", b.op(
                    "Mul", real(a_coef + 2), v), real(a_coef + 3)), v), v), real(1.0))

            coefficients = [far(r1), near(ratio), near(t), far(t1)]
        else:
            taps = 2
            if mode == "linear":
                coefficients = [b.op("Sub", real(1.0), ratio), ratio]
            else:
                # the nearer neighbour (the first of the two unless x is a whole index)
                if nearest == "round_prefer_floor":
                    first = b.op("LessOrEqual", ratio, half)
                elif nearest == "round_prefer_ceil":
                    first = b.op("Less", ratio, half)
                elif nearest == "floor":
                    first = b.op("Less", ratio, real(1.0))
                else:  # ceil
                    first = b.op("Greater", ratio, real(1.0))
                first = b.op("And", first, b.op("Not", b.op("Equal", ratio, real(1.0))))
                first = b.cast(first, work)
                coefficients = [first, b.op("Sub", real(1.0), first)]
        coefficients = b.op("Concat", *[b.reshape(c, [-1, 1]) for c in coefficients], axis=1)
        # the taps nearest x, the lower one preferred: from floor(x) - taps/2 at a whole x,
        # else from floor(x) - taps/2 + 1 (decided on x itself, as the ratio is)
        start = b.op("Add", floor, b.op("Where", b.op("Equal", x, floor),
                                        real(float(-(taps // 2))),
                                        real(float(-(taps // 2) + 1))))
        index = b.op("Add", b.reshape(b.cast(start, TensorProto.INT64), [-1, 1]),
                     b.reshape(b.ints(list(range(taps))), [1, -1]))       # (out, taps)
        if ctx.attribute("exclude_outside", 0):
            inside = b.op("And", b.op("GreaterOrEqual", index, zero_i),
                          b.op("Less", index, size))
            coefficients = b.op("Where", inside, coefficients, real(0.0))
            total = b.reduce_sum(coefficients, [1])
            total = b.op("Where", b.op("Equal", total, real(0.0)), real(1.0), total)
            coefficients = b.op("Div", coefficients, total)
        last = b.op("Sub", size, one_i)  # (no Min/Max: int64 takes them from opset 12 only)
        index = b.op("Where", b.op("Greater", index, last), last, index)
        index = b.op("Where", b.op("Less", index, zero_i), zero_i, index)
        gathered = b.op("Gather", y, index, axis=axis)               # (..., out, taps, ...)
        trailing = [1] * (rank - axis - 1)
        weights = b.reshape(coefficients, [0, 0, *trailing])
        y = b.reduce_sum(b.op("Mul", gathered, weights), [axis + 1], keepdims=0)
        if extrapolated is not None:
            value = real(float(ctx.attribute("extrapolation_value", 0.0)))
            y = b.op("Where", b.reshape(extrapolated, [-1, *trailing]), value, y)
    y = b.cast(y, elem)
    return b.function(DOMAIN, "resize", _inputs(node, ["X", "roi", "scales", "sizes"]), [y])


# -- GridSample -----------------------------------------------------------------------------


@declining
def build_grid_sample(ctx) -> FunctionProto | None:
    """``GridSample`` of any spatial rank (linear, nearest; zeros, border, reflection
    padding) as the reference evaluator computes it: per output point the 2^r corners (1
    for nearest) gathered from ``X`` flattened over its spatial axes, weighted and summed."""
    node = ctx.node
    mode = _text(ctx.attribute("mode"), "linear")
    mode = {"bilinear": "linear"}.get(mode, mode)  # GridSample-16's names
    padding = _text(ctx.attribute("padding_mode"), "zeros")
    elem, grid_elem = _float_elem(ctx, 0), _float_elem(ctx, 1)
    rank = ctx.rank(node.input[0]) if node.input else None
    if (mode not in ("linear", "nearest") or padding not in ("zeros", "border", "reflection")
            or elem is None or grid_elem is None or rank is None or rank < 3
            or len(node.input) != 2 or len(node.output) != 1
            or not _known(node, ["mode", "padding_mode", "align_corners"])):
        raise Declined("needs linear or nearest, zeros, border or reflection padding, X and grid "
                       "of known float types, X of a known rank >= 3, one output, known "
                       "attributes")
    spatial = rank - 2
    align = bool(ctx.attribute("align_corners", 0))
    b = _Body(_opset(ctx))
    f32 = TensorProto.FLOAT

    def real(value):
        return b.const(np.array(value), np.float32)

    shape = b.op("Shape", "X")
    grid = b.cast("grid", f32)
    out_shape = b.op("Concat", b.slice(shape, [0], [2], [0]),
                     b.slice(b.op("Shape", "grid"), [1], [-1], [0]), axis=0)
    grid = b.op("Reshape", grid, b.op("Concat", b.slice(shape, [0], [1], [0]),
                                      b.ints([-1, spatial]), axis=0))      # (N, Q, r)
    lengths, coordinates = [], []
    for d in range(spatial):
        length = b.cast(b.shape_at(shape, 2 + d), f32)
        g = b.op("Gather", grid, b.const(np.array(spatial - 1 - d, np.int64)), axis=2)
        if align:
            x = b.op("Mul", b.op("Div", b.op("Add", g, real(1.0)), real(2.0)),
                     b.op("Sub", length, real(1.0)))
            low, high = real(0.0), b.op("Sub", length, real(1.0))
        else:
            x = b.op("Div", b.op("Sub", b.op("Mul", b.op("Add", g, real(1.0)), length),
                                 real(1.0)), real(2.0))
            low, high = real(-0.5), b.op("Sub", length, real(0.5))
        if mode == "nearest":
            x = b.op("Round", x)
        outside = b.op("Or", b.op("Less", x, low), b.op("Greater", x, high))
        if padding == "border":
            x = b.op("Where", outside, b.op("Max", b.op("Min", x, b.op(
                "Sub", length, real(1.0))), real(0.0)), x)
        elif padding == "reflection":
            x = b.op("Where", outside, _reflect(b, x, low, high), x)
        lengths.append(length)
        coordinates.append((x, low, high))
    strides = []
    stride = b.const(np.array(1, np.int64))
    for d in reversed(range(spatial)):
        strides.insert(0, stride)
        stride = b.op("Mul", stride, b.shape_at(shape, 2 + d))
    flat = b.op("Reshape", "X", b.op("Concat", b.slice(shape, [0], [2], [0]), b.ints([-1]),
                                     axis=0))                                # (N, C, P)
    corners = [[]]
    for d, (x, low, high) in enumerate(coordinates):
        if mode == "nearest":
            options = [(x, None)]
        else:
            x0 = b.op("Floor", x)
            frac = b.op("Sub", x, x0)
            options = [(x0, b.op("Sub", real(1.0), frac)),
                       (b.op("Add", x0, real(1.0)), frac)]
        corners = [c + [(index, weight, d, low, high)] for c in corners
                   for index, weight in options]
    total = None
    for corner in corners:
        flat_index, weight = None, None
        for index, w, d, low, high in corner:
            length = lengths[d]
            if padding == "reflection":
                index = b.op("Floor", b.op("Where", b.op("Less", index, real(0.0)), b.op(
                    "Ceil", _reflect(b, index, low, high)), _reflect(b, index, low, high)))
            if padding == "zeros":
                valid = b.op("And", b.op("GreaterOrEqual", index, real(0.0)),
                             b.op("Less", index, length))
                w = b.cast(valid, f32) if w is None else b.op("Mul", w, b.cast(valid, f32))
            index = b.op("Max", b.op("Min", index, b.op("Sub", length, real(1.0))), real(0.0))
            term = b.op("Mul", b.cast(index, TensorProto.INT64), strides[d])
            flat_index = term if flat_index is None else b.op("Add", flat_index, term)
            weight = w if weight is None else (weight if w is None else b.op("Mul", weight, w))
        gather_index = b.op("Expand", b.unsqueeze(flat_index, [1]), b.op(
            "Concat", b.slice(shape, [0], [2], [0]), b.slice(b.op("Shape", flat_index), [1],
                                                             [2], [0]), axis=0))
        value = b.op("GatherElements", flat, gather_index, axis=2)          # (N, C, Q)
        if weight is not None:
            value = b.op("Mul", value, b.cast(b.unsqueeze(weight, [1]), elem))
        total = value if total is None else b.op("Add", total, value)
    y = b.op("Reshape", total, out_shape)
    return b.function(DOMAIN, "grid_sample", ["X", "grid"], [y])


def _reflect(b: _Body, x: str, low: str, high: str) -> str:
    """``x`` reflected by the near border until it lies in ``[low, high]``."""
    span = b.op("Sub", high, low)
    below = b.op("Less", x, low)
    distance = b.op("Where", below, b.op("Sub", low, x), b.op("Sub", x, high))
    folds = b.op("Floor", b.op("Div", distance, span))
    rest = b.op("Sub", distance, b.op("Mul", folds, span))
    even = b.op("Equal", b.op("Sub", folds, b.op("Mul", b.op("Floor", b.op(
        "Div", folds, b.const(np.array(2.0), np.float32))), b.const(np.array(2.0), np.float32))),
        b.const(np.array(0.0), np.float32))
    near = b.op("Where", below, b.op("Add", low, rest), b.op("Sub", high, rest))
    far = b.op("Where", below, b.op("Sub", high, rest), b.op("Add", low, rest))
    return b.op("Where", even, near, far)


# -- DeformConv -----------------------------------------------------------------------------


@declining
def build_deform_conv(ctx, sampling: str = "zeros") -> FunctionProto | None:
    """2-D ``DeformConv``: each kernel tap sampled bilinearly (zero outside) at its shifted
    position, times the mask, then a grouped matrix product with the weights, as the
    reference evaluator computes it.

    For other plugins' ops of the same shape: ``sampling="openvino"`` reads the image as
    OpenVINO's ``DeformableConvolution-8`` does (a point outside ``[0, H) x [0, W)`` is 0,
    its far neighbours clamped to the last row/column). The body is written at any opset
    from 7: below 12 without ``GreaterOrEqual``, below 11 (no ``Range``,
    ``GatherElements``) for a declared batch size and output size, the columns gathered as
    rows of the transposed input, below 9 without ``Where`` (a NaN offset there gives an
    invalid index instead of a zero weight)."""
    node = ctx.node
    elem = _float_elem(ctx, 0)
    weight_shape = ctx.shape(node.input[1]) if len(node.input) > 1 else None
    kernel = ctx.attribute("kernel_shape") or (weight_shape[2:] if weight_shape else None)
    if (elem is None or not kernel or len(kernel) != 2 or None in kernel
            or len(node.input) > 5 or not all(_present(node.input, i) for i in range(3))
            or len(node.output) != 1 or ctx.rank(node.input[0]) not in (None, 4)
            or not _known(node, ["dilations", "group", "kernel_shape", "offset_group", "pads",
                                 "strides"])):
        raise Declined("needs a known float type, a 2-D kernel known, X, W and offset given "
                       "(rank-4 X), one output, known attributes")
    kh, kw = kernel
    sh, sw = ctx.attribute("strides", [1, 1])
    dh, dw = ctx.attribute("dilations", [1, 1])
    pads = ctx.attribute("pads", [0, 0, 0, 0])
    group, offset_group = ctx.attribute("group", 1), ctx.attribute("offset_group", 1)
    b = _Body(_opset(ctx))
    static = None  # below opset 11: the batch size and output size, declared
    if b.opset < 11:
        x_dims, off_dims = ctx.shape(node.input[0]), ctx.shape(node.input[2])
        if not x_dims or not off_dims or None in (x_dims[0], *off_dims[2:4]):
            raise Declined("below opset 11 the batch size and the offsets' spatial size must "
                           "be declared (Range and GatherElements arrive in 11)")
        static = (x_dims[0], off_dims[2], off_dims[3])

    def real(value):
        return b.const(np.array(value), elem)

    def at_least(x: str, low: str) -> str:
        if b.opset >= 12:
            return b.op("GreaterOrEqual", x, low)
        return b.op("Not", b.op("Less", x, low))

    x_shape, off_shape = b.op("Shape", "X"), b.op("Shape", "offset")
    n_1, height, width = (b.slice(x_shape, [i], [i + 1], [0]) for i in (0, 2, 3))
    out_hw = b.slice(off_shape, [2], [4], [0])
    offset = b.op("Reshape", "offset", b.op("Concat", n_1, b.ints([offset_group, kh, kw, 2]),
                                            out_hw, axis=0))
    positions = []
    for axis, (stride, dilation, pad, k) in enumerate([(sh, dh, pads[0], kh),
                                                       (sw, dw, pads[1], kw)]):
        if static is None:
            out_len = b.op("Gather", out_hw, b.const(np.array(axis, np.int64)), axis=0)
            steps = b.cast(b.op("Range", b.const(np.array(0, np.int64)), out_len,
                                b.const(np.array(1, np.int64))), elem)
        else:
            steps = b.const(np.arange(static[1 + axis]), elem)
        base = b.op("Add", b.op("Mul", steps, real(float(stride))), real(float(-pad)))
        tap = b.const(np.arange(k, dtype=np.float64) * dilation, elem)         # (kh|kw)
        base_shape = [1, 1, 1, 1, -1, 1] if axis == 0 else [1, 1, 1, 1, 1, -1]
        tap_shape = [1, 1, -1, 1, 1, 1] if axis == 0 else [1, 1, 1, -1, 1, 1]
        grid = b.op("Add", b.reshape(base, base_shape), b.reshape(tap, tap_shape))
        shift = b.op("Gather", offset, b.const(np.array(axis, np.int64)), axis=4)
        positions.append(b.op("Add", grid, shift))           # (N, G, kh, kw, oH, oW)
    h, w = positions
    h0, w0 = b.op("Floor", h), b.op("Floor", w)
    fh, fw = b.op("Sub", h, h0), b.op("Sub", w, w0)
    height_f, width_f = b.cast(b.scalar(height), elem), b.cast(b.scalar(width), elem)
    inside = None  # openvino: the point itself must lie in the image
    if sampling == "openvino":
        inside = b.op("And", b.op("And", at_least(h, real(0.0)), b.op("Less", h, height_f)),
                      b.op("And", at_least(w, real(0.0)), b.op("Less", w, width_f)))
    channels = b.op("Div", b.slice(x_shape, [1], [2], [0]), b.ints([offset_group]))
    flat_x = b.op("Reshape", "X", b.op("Concat", n_1, b.ints([offset_group]), channels,
                                       b.ints([-1]), axis=0))           # (N, G, C/G, H*W)
    if static is not None:  # rows (n, g, pixel) of C/G values, and each (n, g)'s first row
        rows = b.op("Reshape", b.op("Transpose", flat_x, perm=[0, 1, 3, 2]),
                    b.op("Concat", b.ints([-1]), channels, axis=0))
        first_row = b.op("Mul", b.const(np.arange(static[0] * offset_group).reshape(
            static[0], offset_group, 1)), b.op("Mul", height, width))      # (N, G, 1)
    total = None
    for dy, wy in ((0, b.op("Sub", real(1.0), fh)), (1, fh)):
        for dx, wx in ((0, b.op("Sub", real(1.0), fw)), (1, fw)):
            yy = b.op("Add", h0, real(float(dy)))
            xx = b.op("Add", w0, real(float(dx)))
            if inside is not None:  # the far neighbour of the last row/column is itself
                valid = inside
                if dy:
                    yy = b.op("Sub", yy, b.cast(at_least(yy, height_f), elem))
                if dx:
                    xx = b.op("Sub", xx, b.cast(at_least(xx, width_f), elem))
            else:
                valid = b.op("And", b.op("And", at_least(yy, real(0.0)),
                                         b.op("Less", yy, height_f)),
                             b.op("And", at_least(xx, real(0.0)),
                                  b.op("Less", xx, width_f)))
            weight = b.op("Mul", b.op("Mul", wy, wx), b.cast(valid, elem))
            if b.opset >= 9:
                yy = b.op("Where", valid, yy, real(0.0))
                xx = b.op("Where", valid, xx, real(0.0))
            else:
                yy, xx = (b.op("Mul", v, b.cast(valid, elem)) for v in (yy, xx))
            index = b.cast(b.op("Add", b.op("Mul", yy, width_f), xx), TensorProto.INT64)
            if static is None:
                index = b.op("Reshape", index, b.op("Concat", n_1, b.ints(
                    [offset_group, 1, -1]), axis=0))                  # (N, G, 1, K*P)
                index = b.op("Expand", index, b.op("Concat", n_1, b.ints([offset_group]),
                                                   channels, b.ints([1]), axis=0))
                sampled = b.op("GatherElements", flat_x, index, axis=3)  # (N, G, C/G, K*P)
            else:
                index = b.op("Add", b.reshape(index, [static[0], offset_group, -1]),
                             first_row)                                # (N, G, K*P)
                sampled = b.op("Transpose", b.op("Gather", rows, index, axis=0),
                               perm=[0, 1, 3, 2])                      # (N, G, C/G, K*P)
            weight = b.op("Reshape", weight, b.op("Concat", n_1, b.ints([offset_group, 1, -1]),
                                                  axis=0))
            term = b.op("Mul", sampled, weight)
            total = term if total is None else b.op("Add", total, term)
    if _present(node.input, 4):
        mask = b.op("Reshape", "mask", b.op("Concat", n_1, b.ints([offset_group, 1, -1]),
                                            axis=0))
        total = b.op("Mul", total, mask)
    # (N, C, K, P) -> (N, group, C/group * K, P)
    points = b.op("ReduceProd", out_hw, keepdims=1)                       # oH * oW
    columns = b.op("Reshape", total, b.op("Concat", n_1, b.ints([group, -1]), points,
                                          axis=0))
    out_per_group = b.op("Div", b.slice(b.op("Shape", "W"), [0], [1], [0]), b.ints([group]))
    weights = b.op("Reshape", "W", b.op("Concat", b.ints([group]), out_per_group,
                                        b.ints([-1]), axis=0))        # (group, oC/g, C/g K)
    y = b.op("MatMul", weights, columns)                      # (N, group, oC/group, P)
    y = b.op("Reshape", y, b.op("Concat", n_1, b.ints([-1]), out_hw, axis=0))
    if _present(node.input, 3):
        y = b.op("Add", y, b.reshape("B", [1, -1, 1, 1]))
    return b.function(DOMAIN, "deform_conv", _inputs(node, ["X", "W", "offset", "B", "mask"]),
                      [y])


# -- Cast from float4e2m1 (onnxruntime) -----------------------------------------------------


@declining
def build_cast_from_float4(ctx) -> FunctionProto | None:
    """``Cast`` (``CastLike``) of float4e2m1 values to a float type:
    ``com.microsoft::GatherBlockQuantized`` of every row with unit scales (the one
    onnxruntime CPU kernel that reads float4e2m1; its values are exact in float16)."""
    node = ctx.node
    types = list(ctx.input_types or [])
    like = node.op_type == "CastLike"
    to = _elem(ctx, 1) if like else ctx.attribute("to")
    if (not types or types[0] != "tensor(float4e2m1)" or len(node.input) != 1 + like
            or len(node.output) != 1 or not _known(node, ["to", "saturate", "round_mode"])):
        raise Declined("needs a float4e2m1 input (and CastLike's target), one output, only "
                       "to / saturate / round_mode")
    if to not in _FLOAT4_TARGETS:
        raise Declined("casts to float or float16 only")
    shape = ctx.shape(node.input[0])
    if shape is None or len(shape) < 2 or None in shape:
        raise Declined("needs a declared static shape of rank 2 or more (onnxruntime takes "
                       "no Shape of float4e2m1; GatherBlockQuantized reads rank 2 or more)")
    b = _Body(_opset(ctx))
    rows = b.const(np.arange(shape[0], dtype=np.int64))
    blocks = -(-shape[-1] // FLOAT4_BLOCK)
    scales = b.const(np.ones([*shape[:-1], blocks]), to)
    y = b.op("GatherBlockQuantized", "input", rows, scales, domain="com.microsoft",
             gather_axis=0, quantize_axis=-1, block_size=FLOAT4_BLOCK)
    return b.function(DOMAIN, "cast_from_float4e2m1", ["input", "target_type"][:1 + like], [y],
                      opset_imports={"com.microsoft": 1})


# -- uint64: TopK, a Pow exponent (onnxruntime) ---------------------------------------------

_SIGN_BIT = np.int64(np.iinfo(np.int64).min)
_TWO_TO_63 = np.uint64(2**63)


@declining
def build_topk_uint64(ctx) -> FunctionProto | None:
    """``TopK`` of uint64 values: ``TopK`` of int64 keys in the same order (the bits read as
    int64 with the sign bit flipped), the values gathered from ``X`` at its indices."""
    node = ctx.node
    if (_elem(ctx, 0) != TensorProto.UINT64 or len(node.input) != 2 or len(node.output) != 2
            or not all(node.output) or not _known(node, ["axis", "largest", "sorted"])):
        raise Declined("needs uint64 X and K, both outputs, only axis / largest / sorted")
    b = _Body(_opset(ctx))
    keys = b.op("BitwiseXor", b.cast("X", TensorProto.INT64), b.const(_SIGN_BIT))
    attributes = {a.name: a.i for a in node.attribute}
    _, indices = b.op("TopK", keys, "K", outputs=2, **attributes)
    values = b.op("GatherElements", "X", indices, axis=attributes.get("axis", -1))
    return b.function(DOMAIN, "topk_uint64", ["X", "K"], [values, indices])


@declining
def build_pow_uint64_exponent(ctx) -> FunctionProto | None:
    """``Pow(X, Y)`` with a uint64 ``Y``: ``Pow(X, int64(Y))`` below 2^63 (exact), else
    ``Pow(X, double(Y))`` (as numpy and the reference evaluator compute every exponent)."""
    node = ctx.node
    if (_elem(ctx, 1) != TensorProto.UINT64 or _float_elem(ctx, 0) is None
            or len(node.input) != 2 or len(node.output) != 1 or node.attribute):
        raise Declined("needs X of a known float type and a uint64 Y, one output")
    b = _Body(_opset(ctx))
    exact = b.op("Pow", "X", b.cast("Y", TensorProto.INT64))
    rounded = b.op("Pow", "X", b.cast("Y", TensorProto.DOUBLE))
    y = b.op("Where", b.op("Less", "Y", b.const(_TWO_TO_63, np.uint64)), exact, rounded)
    return b.function(DOMAIN, "pow_uint64_exponent", ["X", "Y"], [y])


# -- Conv with weights computed at run time -------------------------------------------------


@declining
def build_conv_run_time_weights(ctx) -> FunctionProto | None:
    """``Conv`` whose weights are not a constant, as one matrix product per group of the
    kernel taps' strided slices (OpenVINO's CPU plugin convolves with no weights of a
    dynamic shape)."""
    node = ctx.node
    elem = _float_elem(ctx, 0)
    weight_shape = ctx.shape(node.input[1]) if len(node.input) > 1 else None
    kernel = ctx.attribute("kernel_shape") or (weight_shape[2:] if weight_shape else None)
    if (elem is None or not kernel or None in kernel or len(node.input) not in (2, 3)
            or not all(_present(node.input, i) for i in range(len(node.input)))
            or len(node.output) != 1 or ctx.attribute("auto_pad", "NOTSET") not in (
                "NOTSET", "VALID", b"NOTSET", b"VALID")
            or not _known(node, ["auto_pad", "dilations", "group", "kernel_shape", "pads",
                                 "strides"])):
        raise Declined("needs X of a known float type, W, an optional B, the kernel's shape "
                       "known, auto_pad NOTSET or VALID, one output")
    if ctx.constant(node.input[1]) is not None:
        raise Declined("the weights are a constant")
    if len(kernel) > MAX_CONV_RANK or math.prod(kernel) > MAX_CONV_TAPS:
        raise Declined(f"at most {MAX_CONV_RANK} spatial axes and {MAX_CONV_TAPS} kernel taps")
    rank = len(kernel)
    strides = ctx.attribute("strides") or [1] * rank
    dilations = ctx.attribute("dilations") or [1] * rank
    pads = ctx.attribute("pads") or [0] * (2 * rank)
    group = ctx.attribute("group", 1)
    b = _Body(_opset(ctx))
    x = "X"
    if any(pads):
        x = b.op("Pad", x, b.ints([0, 0, *pads[:rank], 0, 0, *pads[rank:]]))
    shape = b.op("Shape", x)
    n_1 = b.slice(shape, [0], [1], [0])
    grouped = b.op("Reshape", x, b.op("Concat", n_1, b.ints([group, -1]),
                                      b.slice(shape, [2], [2 + rank], [0]), axis=0))
    big = np.iinfo(np.int64).max
    taps = []
    for tap in np.ndindex(*kernel):  # row-major, as W's kernel axes flatten
        starts = [t * d for t, d in zip(tap, dilations)]
        ends = [-(k - 1 - t) * d or big for t, k, d in zip(tap, kernel, dilations)]
        taps.append(b.slice(grouped, starts, ends, list(range(3, 3 + rank)), strides))
    stacked = b.op("Concat", *taps, axis=2) if len(taps) > 1 else taps[0]  # (N, G, K Cg, O..)
    out_shape = b.op("Shape", stacked)
    columns = b.op("Reshape", stacked, b.op("Concat", b.slice(out_shape, [0], [3], [0]),
                                            b.ints([-1]), axis=0))        # (N, G, K Cg, L)
    w_shape = b.op("Shape", "W")
    weights = b.op("Reshape", "W", b.op("Concat", b.ints([group, -1]),
                                        b.slice(w_shape, [1], [2], [0]),
                                        b.ints([len(taps)]), axis=0))    # (G, Mg, Cg, K)
    weights = b.op("Reshape", b.op("Transpose", weights, perm=[0, 1, 3, 2]),
                   b.ints([0, 0, -1]))                                    # (G, Mg, K Cg)
    y = b.op("MatMul", weights, columns)                                  # (N, G, Mg, L)
    y = b.op("Reshape", y, b.op("Concat", n_1, b.ints([-1]),
                                b.slice(out_shape, [3], [3 + rank], [0]), axis=0))
    if len(node.input) == 3:
        y = b.op("Add", y, b.reshape("B", [-1] + [1] * rank))
    return b.function(DOMAIN, "conv_run_time_weights", _inputs(node, ["X", "W", "B"]), [y])


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
    x_type, scale_type = _float_elem(ctx, 0), _float_elem(ctx, 1)
    if _present(node.input, 2):
        out_type = _elem(ctx, 2)
    else:
        out_type = ctx.attribute("output_dtype", 0) or TensorProto.UINT8
    to_float4 = out_type == TensorProto.FLOAT4E2M1
    if (not (block or to_float4) or rank is None or x_type is None or scale_type is None
            or not (out_type in _QUANTIZED or to_float4) or ctx.attribute("saturate", 1) != 1
            or len(node.output) != 1 or len(node.input) > 3
            or not _known(node, ["axis", "block_size", "output_dtype", "saturate",
                                 "precision"])):
        raise Declined("needs blocked or float4 output, a known input rank, float x and scale, a "
                       "quantized output type, saturate=1, one output, known attributes")
    axis %= rank
    b = _Body(_opset(ctx))
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
                      _inputs(node, ["x", "y_scale", "y_zero_point"]), [y])


# -- Scan as Loop ---------------------------------------------------------------------------


@declining
def build_scan(ctx) -> FunctionProto | None:
    """``Scan`` (9+) as a ``Loop``: each iteration gathers the scan inputs' slices (from the
    end for a reverse direction) and runs the body unchanged; the stacked outputs are
    reversed and moved to their axis afterwards. The body may read outer values (the
    inliner leaves those names alone)."""
    node = ctx.node
    body = ctx.attribute("body")
    scan_inputs = ctx.attribute("num_scan_inputs")
    known = ["body", "num_scan_inputs", "scan_input_axes", "scan_input_directions",
             "scan_output_axes", "scan_output_directions"]
    if body is None or not scan_inputs or not _known(node, known):
        raise Declined("needs a body, num_scan_inputs and known attributes")
    states = len(node.input) - scan_inputs
    scan_outputs = len(body.output) - states
    if (states < 0 or len(body.input) != len(node.input) or scan_outputs < 0
            or not all(node.input) or len(node.output) > states + scan_outputs):
        raise Declined("the node's inputs and outputs do not fit its body's")
    in_axes = list(ctx.attribute("scan_input_axes", [0] * scan_inputs))
    in_dirs = list(ctx.attribute("scan_input_directions", [0] * scan_inputs))
    out_axes = list(ctx.attribute("scan_output_axes", [0] * scan_outputs))
    out_dirs = list(ctx.attribute("scan_output_directions", [0] * scan_outputs))
    out_ranks = []
    for k, axis in enumerate(out_axes):
        rank = None
        value = body.output[states + k]
        if value.type.tensor_type.HasField("shape"):
            rank = len(value.type.tensor_type.shape.dim) + 1
        if axis != 0 and (rank is None or not -rank <= axis < rank):
            raise Declined("moving the stacked axis needs the element's rank")
        out_ranks.append(rank)
    b = _Body(_opset(ctx))
    formals = [f"s{i}" for i in range(states)] + [f"x{j}" for j in range(scan_inputs)]
    one = b.const(np.array(1, np.int64))
    steps = b.op("Gather", b.op("Shape", formals[states]),
                 b.const(np.array(in_axes[0], np.int64)), axis=0)
    loop = b.child()
    step, cond = loop.fresh("t"), loop.fresh("cond")
    last = loop.op("Sub", steps, one)
    for j in range(scan_inputs):
        index = step if in_dirs[j] == 0 else loop.op("Sub", last, step)
        loop.op("Gather", formals[states + j], index, axis=in_axes[j],
                outputs=[body.input[states + j].name])
    loop.nodes.extend(body.node)
    cond_out = loop.op("Identity", cond)
    graph = helper.make_graph(
        loop.nodes, b.fresh("scan_step"),
        [helper.make_tensor_value_info(step, TensorProto.INT64, []),
         helper.make_tensor_value_info(cond, TensorProto.BOOL, []),
         *body.input[:states]],
        [helper.make_tensor_value_info(cond_out, TensorProto.BOOL, []), *body.output],
        initializer=list(body.initializer))
    # (an explicit condition: the reference evaluator runs no trip when it is omitted)
    results = b.op("Loop", steps, b.const(np.array(True), TensorProto.BOOL), *formals[:states],
                   outputs=states + scan_outputs, body=graph)
    results = [results] if isinstance(results, str) else list(results)
    for k in range(scan_outputs):
        y = results[states + k]
        if out_dirs[k]:
            y = b.op("Gather", y, b.op("Range", b.op("Sub", steps, one),
                                       b.const(np.array(-1, np.int64)),
                                       b.const(np.array(-1, np.int64))), axis=0)
        axis = out_axes[k] % out_ranks[k] if out_axes[k] else 0
        if axis:
            perm = list(range(1, out_ranks[k]))
            perm.insert(axis, 0)
            y = b.op("Transpose", y, perm=perm)
        results[states + k] = y
    return b.function(DOMAIN, "scan", formals, results[:len(node.output)])


# -- TfIdfVectorizer on integers ------------------------------------------------------------


@declining
def build_tfidf_vectorizer(ctx) -> FunctionProto | None:
    """``TfIdfVectorizer`` over integer n-grams (``pool_int64s``), as onnxruntime and the
    reference evaluator count them: for each n-gram length ``n`` and skip distance ``d``
    (1 only for unigrams, 1 .. ``max_skip_count + 1`` otherwise), the items
    ``X[..., s + k d]`` of every start ``s`` compared with each pool n-gram; matches summed
    per pool entry, placed at its ``ngram_indexes`` column by a matrix product, then
    weighted by ``mode``."""
    node = ctx.node
    pool = ctx.attribute("pool_int64s", None)
    if pool is None or ctx.attribute("pool_strings", None) is not None:
        raise Declined("needs pool_int64s (strings have no standard-op form)")
    if len(node.input) != 1 or len(node.output) != 1:
        raise Declined("needs one input and one output")
    low, high = ctx.attribute("min_gram_length"), ctx.attribute("max_gram_length")
    skips = ctx.attribute("max_skip_count")
    starts, indexes = list(ctx.attribute("ngram_counts")), list(ctx.attribute("ngram_indexes"))
    mode = ctx.attribute("mode")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    weights = ctx.attribute("weights", None)
    pool = list(pool)
    grams = []  # (n, [pool entries of length n as lists])
    for n, begin in enumerate(starts, start=1):
        end = starts[n] if n < len(starts) else len(pool)
        grams.append((n, [pool[i:i + n] for i in range(begin, end, n)]))
    if sum(len(g) for _, g in grams) != len(indexes) or mode not in ("TF", "IDF", "TFIDF"):
        raise Declined("ngram_counts, ngram_indexes and the pool disagree, or unknown mode")
    size = max(indexes) + 1
    elem = _elem(ctx)
    if elem not in (TensorProto.INT32, TensorProto.INT64):
        raise Declined("needs int32 or int64 items")
    dtype = np.int32 if elem == TensorProto.INT32 else np.int64
    rank = ctx.rank(node.input[0])
    if rank not in (1, 2):
        raise Declined("needs X of a declared rank 1 or 2")
    b = _Body(_opset(ctx))  # (axes counted from the start: opset 9 takes no negative axes)
    last = np.iinfo(np.int64).max
    counts, entry = [], 0
    placement = np.zeros((len(indexes), size), np.float32)  # lengths not counted: zero rows
    for n, entries in grams:
        for _ in entries:
            placement[entry, indexes[entry]] = 1.0 if low <= n <= high else 0.0
            entry += 1
        if not entries:
            continue
        for d in ([1] if n == 1 else range(1, skips + 2)):
            match = None
            for k in range(n):
                tail = (n - 1 - k) * d
                items = b.slice("X", [k * d], [-tail if tail else last], [rank - 1])
                column = b.const(np.array([g[k] for g in entries]), dtype)
                hit = b.op("Equal", b.unsqueeze(items, [rank]), column)
                match = hit if match is None else b.op("And", match, hit)
            found = b.reduce("ReduceSum", b.cast(match, TensorProto.FLOAT), [rank - 1],
                             keepdims=0)
            counts.append(found if d == 1 else b.op("Add", counts.pop(), found))
    total = counts[0] if len(counts) == 1 else b.op("Concat", *counts, axis=rank - 1)
    y = b.op("MatMul", total, b.const(placement, np.float32))
    scale = b.const(np.asarray(weights if weights is not None else np.ones(size)), np.float32)
    if mode == "IDF":
        zero = b.const(np.array(0), np.float32)
        y = b.op("Where", b.op("Greater", y, zero), b.op("Expand", scale, b.op("Shape", y)),
                 zero)
    elif mode == "TFIDF":
        y = b.op("Mul", y, scale)
    return b.function(DOMAIN, "tfidf_vectorizer", ["X"], [y])


# -- TensorScatter -------------------------------------------------------------------------


@declining
def build_tensor_scatter(ctx) -> FunctionProto | None:
    """``TensorScatter(past_cache, update[, write_indices])`` (``mode`` linear or circular):
    for each cache position ``j`` along ``axis`` and batch ``b``, the update slice
    ``s = j - write_indices[b]`` (modulo the cache length when circular) where
    ``0 <= s < sequence_length``, gathered with ``GatherElements``; the cache elsewhere."""
    node = ctx.node
    if len(node.input) < 2 or len(node.output) != 1 or not _known(node, ["mode", "axis"]):
        raise Declined("needs past_cache and update, one output")
    mode = ctx.attribute("mode", "linear")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    rank = ctx.rank(node.input[0])
    if mode not in ("linear", "circular") or rank is None or rank < 2:
        raise Declined("needs mode linear or circular and a cache of a declared rank >= 2")
    axis = ctx.attribute("axis", -2) % rank
    if axis == 0:
        raise Declined("the sequence axis cannot be the batch axis")
    b = _Body(_opset(ctx))
    cache_shape = b.op("Shape", "past_cache")
    length = b.shape_at(cache_shape, axis)  # max_sequence_length
    steps = b.shape_at(b.op("Shape", "update"), axis)  # sequence_length
    zero, one = b.const(np.array(0, np.int64)), b.const(np.array(1, np.int64))
    positions = b.reshape(b.op("Range", zero, length, one), [1, -1])  # [1, M]
    if _present(node.input, 2):
        starts = b.reshape(b.cast("write_indices", TensorProto.INT64), [-1, 1])  # [B, 1]
    else:
        starts = b.reshape(b.cast(b.shape_at(cache_shape, 0), TensorProto.INT64), [1, 1])
        starts = b.op("Mul", starts, zero)
    offset = b.op("Sub", positions, starts)  # [B, M]
    if mode == "circular":
        offset = b.op("Mod", offset, length, fmod=0)
    valid = b.op("And", b.op("GreaterOrEqual", offset, zero), b.op("Less", offset, steps))
    last = b.op("Sub", steps, one)
    index = b.op("Min", b.op("Max", offset, zero), last)
    # [B, M] -> [B, 1, .., M, .., 1]: broadcast over the other axes of the cache
    view = [0] + [1] * (axis - 1) + [-1] + [1] * (rank - axis - 1)
    index = b.op("Expand", b.reshape(index, view), cache_shape)
    gathered = b.op("GatherElements", "update", index, axis=axis)
    y = b.op("Where", b.reshape(valid, view), gathered, "past_cache")
    return b.function(DOMAIN, "tensor_scatter",
                      _inputs(node, ["past_cache", "update", "write_indices"]), [y])


# -- registration ---------------------------------------------------------------------------

_F32 = ("float",)


def _spread(rng, shape):
    """Values around 1 (products stay moderate), some negative."""
    return (rng.uniform(0.5, 1.5, shape) * rng.choice([-1, 1], shape)).astype(np.float64)


def _la_inputs(rule, past, decay_dim, beta_dim, heads):
    """(B=2, T=3) queries of ``heads[0]`` heads, keys/values of ``heads[1]``; head size 4;
    decay per head (``decay_dim`` 1) or per key dim (4), negative (log-space); beta per
    KV head or shared."""
    q_heads, kv_heads = heads
    inputs = [f"T[2,3,{4 * q_heads}]", f"T[2,3,{4 * kv_heads}]", f"T[2,3,{4 * kv_heads}]"]
    inputs.append(f"T[2,{kv_heads},4,4]" if past else None)
    inputs.append(Arg(f"T[2,3,{kv_heads * decay_dim}]", low=-1.0, high=0.0)
                  if decay_dim else None)
    inputs.append(Arg(f"T[2,3,{kv_heads if beta_dim == 2 else 1}]", low=0.0, high=1.0)
                  if beta_dim else None)
    while inputs[-1] is None:
        inputs.pop()
    return inputs


def linear_attention_samples() -> list[OpSample]:
    """``LinearAttention``'s samples (the onnx-functions plugin registers the op with
    :func:`build_linear_attention`, in place of the spec's body)."""
    return [
        OpSample(_la_inputs(rule, past, decay_dim, beta_dim, heads), ["T", "T"],
                 {"update_rule": rule, "q_num_heads": heads[0], "kv_num_heads": heads[1],
                  **({"scale": 0.5} if rule == "linear" else {})},
                 opset=27, name=f"{rule}-{'past' if past else 'nopast'}-q{heads[0]}kv"
                                f"{heads[1]}", dtypes=["float", "float16"],
                 tolerance=(1e-4, 1e-4))
        for rule, past, decay_dim, beta_dim, heads in [
            ("linear", True, None, None, (2, 2)), ("gated", False, 1, None, (2, 2)),
            ("gated", True, 4, None, (4, 2)), ("delta", True, None, 1, (2, 2)),
            ("gated_delta", True, 1, 2, (2, 1)), ("gated_delta", False, 4, 1, (4, 2))]]


def _scan_body(outer: bool = False):
    """state (2) + slice (2) -> new state, and the slice times the new state (an outer
    value ``w`` scaled in when ``outer``)."""
    f = TensorProto.FLOAT
    nodes = [helper.make_node("Add", ["s_in", "x_t"], ["s_out"]),
             helper.make_node("Mul", ["x_t", "s_out"], ["y_t"])]
    if outer:
        nodes[1] = helper.make_node("Mul", ["x_t", "w"], ["y_t"])
    return helper.make_graph(nodes, "scan_body",
                             [helper.make_tensor_value_info("s_in", f, [2]),
                              helper.make_tensor_value_info("x_t", f, [2])],
                             [helper.make_tensor_value_info("s_out", f, [2]),
                              helper.make_tensor_value_info("y_t", f, [2])])


def _resize_samples() -> list[OpSample]:
    samples = []
    cases = [  # (coordinate mode, mode, scales or sizes, axes, extra attributes, opset)
        ("half_pixel_symmetric", "linear", ("scales", [1, 1, 0.6, 0.8]), None, {}, 19),
        ("half_pixel_symmetric", "linear", ("scales", [1, 1, 2.0, 2.5]), None, {}, 19),
        ("tf_crop_and_resize", "linear", ("sizes", [3, 3]), [2, 3],
         {"extrapolation_value": 10.0}, 19),
        ("tf_crop_and_resize", "nearest", ("sizes", [1, 1, 3, 3]), None, {}, 13),
        ("half_pixel", "cubic", ("scales", [1, 1, 0.8, 1.6]), None,
         {"exclude_outside": 1, "cubic_coeff_a": -0.5}, 13),
        ("align_corners", "linear", ("sizes", [1, 1, 1, 7]), None, {}, 13),
        ("asymmetric", "nearest", ("scales", [1, 1, 2.0, 0.5]), None,
         {"nearest_mode": "ceil"}, 13),
        ("pytorch_half_pixel", "nearest", ("sizes", [1, 1, 7, 3]), None,
         {"nearest_mode": "round_prefer_ceil"}, 13),
        ("half_pixel", "nearest", ("scales", [1, 1, 0.75, 1.5]), None,
         {"nearest_mode": "floor"}, 11),
    ]
    for coordinates, mode, (kind, values), axes, extra, opset in cases:
        count = len(axes) if axes else 4
        roi = None
        if coordinates == "tf_crop_and_resize":
            roi = Arg(f"float[{2 * count}]",
                      values=([0.4, -0.2] if axes else [0, 0, 0.4, -0.2])
                      + ([0.9, 1.1] if axes else [1, 1, 0.9, 1.1]))
        elif opset < 13:
            roi = Arg("float[0]", values=np.zeros(0, np.float32), constant=True)
        scales = Arg(f"float[{count}]", values=values) if kind == "scales" else (
            Arg("float[0]", values=np.zeros(0, np.float32), constant=True) if opset < 13
            else None)
        sizes = Arg(f"int64[{count}]", values=values) if kind == "sizes" else None
        inputs = ["T[1,1,4,5]", roi, scales, sizes]
        while inputs[-1] is None:
            inputs.pop()
        attributes = {"mode": mode, "coordinate_transformation_mode": coordinates, **extra}
        if axes:
            attributes["axes"] = axes
        samples.append(OpSample(inputs, attributes=attributes, opset=opset,
                                name=f"{coordinates}-{mode}-{kind}",
                                tolerance=(1e-5, 1e-5)))
    return samples


# uint64 values on both sides of 2^63, ties included
_UINT64_VALUES = np.array([0, 2**64 - 1, 2**63, 2**63 - 1, 1, 7, 2**63 + 5, 7, 2**40, 3,
                           2**64 - 2, 2**63 - 1, 9, 0, 2**62], np.uint64)
# every float4e2m1 value
_FLOAT4_VALUES = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6],
                          np.float32)


def _samples() -> dict[str, list[OpSample]]:
    mod_values = dict(values=[-4.3, 7.2, 5.0, 4.3, -7.2, 8.0, 0.0, -0.0, -3.0, 3.0, -1.0, 1.0,
                              np.inf, 1.0, np.nan])
    mod_divisors = dict(values=[2.1, -3.4, 8.0, -2.1, 3.4, 5.0, -2.0, 2.0, np.inf, np.inf,
                                -np.inf, -np.inf, 2.0, 0.0, 2.0])
    return {
        "CumProd": [
            OpSample([Arg("T[5]", values=_spread), Arg("int64[]", values=0)], opset=26,
                     attributes=attrs, name=name, dtypes=["float", "double", "int32"])
            for name, attrs in [("plain", {}), ("exclusive", {"exclusive": 1}),
                                ("reverse", {"reverse": 1}),
                                ("reverse-exclusive", {"exclusive": 1, "reverse": 1})]] + [
            OpSample([Arg("T[2,3,4]", values=_spread), Arg(f"{t}[]", values=axis)], opset=26,
                     attributes=attrs, name=f"3d-axis{axis}", dtypes=["float", "int64"])
            for axis, t, attrs in [(1, "int32", {}), (-1, "int64", {"exclusive": 1}),
                                   (0, "int64", {"reverse": 1})]],
        "Mod": [OpSample([Arg("T[15]", **mod_values), Arg("T[15]", **mod_divisors)],
                         attributes={"fmod": 0}, opset=28, dtypes=["float", "double"]),
                OpSample(["T[3,4]", Arg("T[4]", low=0.5, high=3.0)], attributes={"fmod": 0},
                         opset=28, name="broadcast", dtypes=["float16", "float"])],
        "Det": [OpSample([f"T[{shape}]"], opset=opset, name=name, dtypes=["float", "double"])
                for shape, opset, name in [("2,2", 22, "2x2"), ("3,3,3", 22, "batched-3x3"),
                                           ("2,2,4,4", 13, "4x4"), ("1,1", 22, "1x1")]] + [
            OpSample([Arg("T[2,3,3]", values=[[[1, 2, 3], [2, 4, 6], [0, 1, 1]],
                                               [[0, 2, 1], [1, 0, 0], [3, 1, 2]]])],
                     opset=22, name="singular-and-zero-pivot", dtypes=["float"])],
        "Unsqueeze": [OpSample(["T[3,4,5]", Arg(f"int64[{len(axes)}]", values=axes)],
                               opset=opset, name=name, dtypes=["float"])
                      for axes, opset, name in [([1], 25, "axis1"), ([-1, 0], 13, "two"),
                                                ([5, 4, 0], 21, "unsorted"),
                                                ([-2], 13, "negative")]] + [
            OpSample(["T[3,4,5]", Arg("int64[2]", values=[1, 3], constant=True)], opset=13,
                     name="constant-axes", dtypes=["int32", "bool"])],
        "Pad": [OpSample([f"T[{shape}]", Arg(f"int64[{len(pads)}]", values=pads)],
                         attributes={"mode": "wrap"}, opset=19, name=name,
                         dtypes=["float", "int32"])
                for shape, pads, name in [("1,3,4,5", [0, 0, 1, 1, 0, 0, 1, 1], "wrap"),
                                          ("3,4", [2, 0, 5, 1], "wide"),
                                          ("2,5", [0, 3, 0, 7], "wider-than-dim")]] + [
            OpSample(["T[3,4,5]", Arg("int64[4]", values=[1, 2, 2, 0]), None,
                      Arg("int64[2]", values=[2, 0], constant=True)],
                     attributes={"mode": "wrap"}, opset=19, name="axes", dtypes=["float"])],
        "MaxUnpool": [
            OpSample(["T[1,1,2,2]", Arg("int64[1,1,2,2]", values=[[[[5, 7], [13, 15]]]])],
                     attributes=dict(kernel_shape=[2, 2], strides=[2, 2]), opset=opset,
                     name="plain", dtypes=["float"]) for opset in (13, 22)] + [
            OpSample(["T[1,1,2,2]", Arg("int64[1,1,2,2]", values=[[[[5, 7], [13, 15]]]]),
                      Arg("int64[4]", values=[1, 1, 5, 5])],
                     attributes=dict(kernel_shape=[2, 2], strides=[2, 2]), opset=22,
                     name="output-shape", dtypes=["float", "int32"]),
            OpSample(["T[2,3,3]", Arg("int64[2,3,3]", values=lambda rng, shape: (
                rng.permutation(30)[:18].reshape(shape)))],
                     attributes=dict(kernel_shape=[2], strides=[2], pads=[0, 1]), opset=22,
                     name="1d-pads", dtypes=["float"])],
        "Dropout": [
            OpSample(["T[3,4,5]", Arg("T[]", values=0.0), Arg("bool[]", values=True)],
                     ["T", "bool"], {"seed": 0}, opset=22, name="zero-ratio-training"),
            OpSample(["T[3,4,5]", Arg("T[]", values=0.7), Arg("bool[]", values=False)],
                     ["T", "bool"], opset=13, name="not-training"),
            OpSample(["T[3,4]", None, Arg("bool[]", values=False)], opset=12,
                     name="default-ratio-not-training")],
        "OptionalHasElement": [OpSample(["T[2,3]"], ["bool"], opset=18, name="tensor",
                                        dtypes=["float"]),
                               OpSample([], ["bool"], opset=18, name="no-input")],
        "OptionalGetElement": [OpSample(["T[2,3]"], opset=18, name="tensor",
                                        dtypes=["float", "int64"])],
        "STFT": [
            OpSample([Arg("T[1,128,1]"), Arg("int64[]", values=8), None,
                      Arg("int64[]", values=16)], opset=17, name="real",
                     tolerance=(1e-4, 1e-4), dtypes=["float", "double"]),
            OpSample([Arg("T[2,64,2]"), Arg("int64[]", values=6),
                      Arg("T[16]", low=0.0, high=1.0)], opset=17, name="complex-window",
                     attributes={"onesided": 0}, tolerance=(1e-4, 1e-4), dtypes=["float"]),
            OpSample([Arg("T[1,40,1]"), Arg("int64[]", values=5), Arg("T[10]", low=0.0,
                                                                      high=1.0),
                      Arg("int64[]", values=10)], opset=17, name="window-and-length",
                     tolerance=(1e-4, 1e-4), dtypes=["float"])],
        "MelWeightMatrix": [
            OpSample([Arg("int32[]", values=8), Arg("int32[]", values=16),
                      Arg("int32[]", values=8192), Arg("float[]", values=0.0),
                      Arg("float[]", values=8192 / 2)], ["float"], opset=17),
            OpSample([Arg("int64[]", values=20), Arg("int64[]", values=512),
                      Arg("int64[]", values=16000), Arg("float[]", values=50.0),
                      Arg("float[]", values=7600.0)], ["double"],
                     {"output_datatype": TensorProto.DOUBLE}, opset=17, name="double")],
        "Resize": _resize_samples(),
        "TensorScatter": [
            OpSample(["T[2,3,6,4]", "T[2,3,2,4]", Arg("int64[2]", values=indices)],
                     attributes={"mode": mode}, opset=24, name=f"{mode}-{label}",
                     dtypes=["float", "float16"])
            for mode, indices, label in [("linear", [1, 4], "decode"),
                                         ("circular", [5, 3], "wrap")]] + [
            OpSample(["T[2,5,3]", "T[2,5,3]"], attributes={"axis": 1}, opset=24,
                     name="prefill-axis1", dtypes=["float"]),
            OpSample(["T[3,4,2]", "T[3,2,2]", Arg("int64[3]", values=[0, 2, 1])],
                     attributes={"axis": -2, "mode": "linear"}, opset=24, name="3d",
                     dtypes=["int32"])],
        "TfIdfVectorizer": [
            OpSample([Arg(f"T[{shape}]", low=2, high=9)], ["float"], dict(
                min_gram_length=low, max_gram_length=2, max_skip_count=skips, mode=mode,
                ngram_counts=[0, 4], ngram_indexes=[0, 1, 2, 3, 4, 5, 6],
                pool_int64s=[2, 3, 5, 4, 5, 6, 7, 8, 6, 7], **extra), opset=9,
                     name=name, dtypes=["int32", "int64"])
            for shape, low, skips, mode, extra, name in [
                ("2,6", 1, 5, "TF", {}, "uni-and-bigrams-skip5"),
                ("12", 2, 5, "TF", {}, "bigrams-skip5"),
                ("3,7", 1, 0, "TFIDF", {"weights": [0.5, 1, 2, 1, 3, 1, 0.25]},
                 "tfidf-weights"),
                ("9", 1, 2, "IDF", {"weights": [1, 2, 3, 4, 5, 6, 7]}, "idf"),
                ("4", 2, 3, "TF", {}, "shorter-than-skips")]],
        **{op: [OpSample([Arg("T[3,4,5]", low=0.5, high=2.0),
                          Arg(f"int64[{len(axes)}]", values=axes)],
                         attributes={"keepdims": 0}, opset=opset, name=name,
                         dtypes=["float"], tolerance=(1e-5, 1e-5))
                for axes, opset, name in [([0, -1], opset_of, "two"), ([1], opset_of, "one"),
                                          ([2, 0, 1], 18, "all")]]
           for op in REDUCE_AXES_OPS
           for opset_of in [13 if op == "ReduceSum" else 18]},
        "GridSample": [
            OpSample(["T[1,2,3,4,5]", Arg("T[1,2,3,4,3]", low=-1.3, high=1.3)],
                     attributes=dict(mode=mode, padding_mode=padding, align_corners=align),
                     opset=22, name=f"3d-{mode}-{padding}-align{align}",
                     tolerance=(1e-5, 1e-5))
            for mode, padding, align in [("linear", "zeros", 0), ("linear", "border", 1),
                                         ("nearest", "zeros", 1), ("nearest", "border", 0),
                                         ("linear", "reflection", 0),
                                         ("nearest", "reflection", 1)]] + [
            OpSample(["T[2,3,4,5]", Arg("T[2,3,2,2]", low=-1.2, high=1.2)],
                     attributes=dict(mode="bilinear", padding_mode="zeros"), opset=16,
                     name="2d-16", dtypes=["float"], tolerance=(1e-5, 1e-5),
                     oracle="onnxruntime")],  # (the reference evaluator lacks "bilinear")
        "DeformConv": [
            OpSample(["T[1,4,5,6]", "T[6,2,3,2]", Arg("T[1,24,2,5]", low=-1.5, high=1.5),
                      "T[6]", Arg("T[1,12,2,5]", low=0.0, high=1.0)],
                     attributes=dict(kernel_shape=[3, 2], group=2, offset_group=2,
                                     strides=[2, 1], pads=[1, 0, 0, 0], dilations=[1, 1]),
                     opset=22, name="groups-mask-bias", tolerance=(1e-5, 1e-5)),
            OpSample(["T[2,1,4,4]", "T[2,1,2,2]", Arg("T[2,8,4,5]", low=-2.0, high=2.0)],
                     attributes=dict(pads=[1, 1, 1, 1], dilations=[2, 1]), opset=19,
                     name="pads-dilations", tolerance=(1e-5, 1e-5))],
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
        "Scan": [
            OpSample(["T[2]", "T[5,2]"], ["T", "T"], {"body": _scan_body(),
                                                     "num_scan_inputs": 1}, opset=11,
                     name="forward"),
            OpSample(["T[2]", "T[2,4]"], ["T", "T"], {
                "body": _scan_body(), "num_scan_inputs": 1, "scan_input_axes": [1],
                "scan_input_directions": [1], "scan_output_axes": [-1],
                "scan_output_directions": [1]}, opset=16, name="reverse-axes",
                     oracle="onnxruntime")],  # (the reference evaluator scans forward only)
        "FastGelu": [OpSample(["T[3,4]", "T[4]"], opset=18, name="bias"),
                     OpSample([Arg("T[7]", values=[-30.0, -3.0, -0.5, 0.0, 0.5, 3.0, 30.0])],
                              opset=12, name="no-bias")],
        "MaskedFill": [OpSample([Arg("string[5]", values=np.array(
            ["a", "bb", "", "\u03a9", "c d"], dtype=object)),
            Arg("bool[5]", values=[True, False, True, True, False])], ["string"], opset=14),
            OpSample([Arg("string[]", values=np.array("x", dtype=object)),
                      Arg("bool[]", values=True)], ["string"], opset=14, name="scalar")],
        "NegPos": [OpSample([Arg("T[8]", values=[-1.5, -0.0, 0.0, 2.5, np.inf, -np.inf,
                                                 np.nan, 1e-30])], ["T", "T"], opset=12),
                   OpSample(["T[2,3]"], ["T", "T"], opset=18, name="2d")],
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
        "TopK": [
            OpSample([Arg("T[3,5]", values=_UINT64_VALUES[:15].reshape(3, 5)),
                      Arg("int64[1]", values=[3])], ["T", "int64"], attributes=attrs,
                     opset=24, name=name, dtypes=["uint64"])
            for attrs, name in [({"axis": 1}, "largest"), ({"axis": 0, "largest": 0}, "smallest"),
                                ({"axis": -1, "sorted": 1}, "sorted")]],
        "Pow": [OpSample([Arg("float[2,4]", values=[[0.5, 1.0, -1.0, 1.5], [2.0, -1.0, 0.9, 1.0]]),
                          Arg("T[2,4]", values=[[3, 2**63 + 1, 2**64 - 1, 0],
                                                [5, 2**63, 2**64 - 2, 7]])],
                         ["float"], opset=15, dtypes=["uint64"])],
        "Conv": [
            OpSample(["T[2,4,7,6]", "T[6,2,3,2]", "T[6]"], attributes=dict(
                kernel_shape=[3, 2], group=2, strides=[2, 1], pads=[1, 0, 2, 1],
                dilations=[1, 2]), opset=22, name="2d-groups-bias", tolerance=(1e-5, 1e-5),
                dtypes=["float"]),
            OpSample(["T[1,3,9]", "T[4,3,3]"], attributes=dict(auto_pad="VALID"), opset=11,
                     name="1d-valid", tolerance=(1e-5, 1e-5), dtypes=["float"]),
            OpSample(["T[1,2,4,5,5]", "T[3,2,2,2,3]", "T[3]"], attributes=dict(
                pads=[0, 1, 1, 1, 0, 1], strides=[1, 2, 2]), opset=18, name="3d",
                     tolerance=(1e-5, 1e-5), dtypes=["float"])],
    }


@hookimpl
def register_decompositions(registry):
    samples = _samples()
    entries = [
        ("", "CumProd", build_cumprod, CUMPROD_OPSETS, ("float", "double", "int32", "int64"),
         "triangular ReduceProd: n^2 memory"),
        ("", "Mod", build_float_mod, MOD_OPSETS, ("float", "double", "float16"),
         "fmod=0 on floats"),
        ("", "Det", build_det, DET_OPSETS, ("float", "double"),
         f"static n <= {MAX_DET_SIZE}"),
        ("", "Unsqueeze", build_unsqueeze, UNSQUEEZE_OPSETS, ("float", "int32", "bool"),
         "axes as computed"),
        ("", "Pad", build_pad_wrap, PAD_WRAP_OPSETS, ("float", "int32"), "wrap mode"),
        ("", "MaxUnpool", build_max_unpool, MAXUNPOOL_OPSETS, ("float", "int32"), ""),
        ("", "Dropout", build_dropout, DROPOUT_OPSETS, ("float", "double"),
         "training mode at run time"),
        ("", "OptionalHasElement", build_optional_has_element, OPTIONAL_OPSETS, ("float",),
         "no input, or a plain tensor"),
        ("", "OptionalGetElement", build_optional_get_element, OPTIONAL_OPSETS,
         ("float", "int64"), "a plain tensor"),
        ("", "STFT", build_stft, SIGNAL_OPSETS, ("float", "double"), ""),
        ("", "MelWeightMatrix", build_mel_weight_matrix, SIGNAL_OPSETS, (), "in double"),
        ("", "Scan", build_scan, SCAN_OPSETS, ("float",), "as a Loop"),
        ("", "QuantizeLinear", build_quantize_linear, BLOCKED_QUANTIZE_OPSETS,
         ("float", "float16"), "block_size; float4e2m1 output"),
        ("", "DeformConv", build_deform_conv, DEFORM_CONV_OPSETS, ("float", "double"), "2-D"),
        ("", "Cast", build_cast_from_float4, FLOAT4_CAST_OPSETS, (),
         "from float4e2m1, by com.microsoft::GatherBlockQuantized: onnxruntime"),
        ("", "CastLike", build_cast_from_float4, FLOAT4_CAST_OPSETS, (),
         "from float4e2m1, by com.microsoft::GatherBlockQuantized: onnxruntime"),
        ("", "TopK", build_topk_uint64, (11, None), ("uint64",),
         "uint64 as int64 keys: onnxruntime"),
        ("", "Pow", build_pow_uint64_exponent, (15, None), ("uint64",),
         "a uint64 exponent: onnxruntime"),
        ("", "Conv", build_conv_run_time_weights, CONV_OPSETS, ("float",),
         "weights computed at run time; not auto_pad SAME"),
        ("", "GridSample", build_grid_sample, GRID_SAMPLE_OPSETS, ("float", "float16"),
         "linear and nearest"),
        ("", "Resize", build_resize, RESIZE_OPSETS, ("float", "double", "float16"),
         "no antialias, stretch only"),
        ("", "TensorScatter", build_tensor_scatter, TENSOR_SCATTER_OPSETS,
         ("float", "float16", "int32"), "linear, circular"),
        ("", "TfIdfVectorizer", build_tfidf_vectorizer, TFIDF_OPSETS, ("int32", "int64"),
         "integer pool"),
    ]
    contrib = [(CONTRIB, "FastGelu", build_contrib_fast_gelu, CONTRIB_OPSETS,
                ("float", "double"), "onnxruntime-extensions; the com.microsoft body"),
               (CONTRIB, "NegPos", build_neg_pos, CONTRIB_OPSETS, ("float",),
                "onnxruntime-extensions"),
               (CONTRIB, "MaskedFill", build_masked_fill, (9, None), ("string",),
                "onnxruntime-extensions; Compress")]
    for domain, op_type, builder, opsets, dtypes, note in contrib:
        registry.add(domain, op_type, builder, opsets=opsets, dtypes=dtypes,
                     description=f"onnx-lowering:{op_type} ({note})", oracle="kernel",
                     samples=samples[op_type])
    entries += [("", op, build_reduce_axes, (13 if op == "ReduceSum" else 18, None),
                 ("float", "double", "float16"), "run-time axes, keepdims=0")
                for op in REDUCE_AXES_OPS]
    for domain, op_type, builder, opsets, dtypes, note in entries:
        # sums in another order than the op's kernels: ReduceSum, ReduceMean
        exact = (builder is not build_reduce_axes or op_type in EXACT_REDUCE_AXES_OPS) and \
            builder is not build_conv_run_time_weights
        oracle = "onnxruntime" if builder is build_conv_run_time_weights else "reference"
        registry.add(domain, op_type, builder, opsets=opsets, dtypes=dtypes, exact=exact,
                     description=f"onnx-lowering:{op_type}" + (f" ({note})" if note else ""),
                     oracle=oracle, samples=samples[op_type])
