"""QOperator ops (``quantize_static(..., quant_format=QuantFormat.QOperator)``, and
onnxruntime's offline optimizer fusing QDQ groups back) as ``DequantizeLinear`` -> the float
op -> ``QuantizeLinear`` with the op's own scales and zero points (registered by the
``com-microsoft`` plugin, whose ``register_decompositions`` hook calls this module's).

A target with QDQ support (OpenVINO's low-precision transformations) keeps the integer
pipeline; any other runs the float op between exact dequantization and the output's
quantization. ``QuantizeLinear`` rounds half to even and saturates, as every kernel below
does (``MlasQuantizeLinear``, ``MlasRequantizeOutput``: ``nearbyintf``, then clamp).

* ``QLinearConv`` (ai.onnx and com.microsoft, whose ``channels_last`` 1 takes NHWC ``x``)
  ``(x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp[, B])``: ``Conv(DQ(x), DQ(w, axis 0),
  DQ(B, x_scale * w_scale, axis 0))``, ``w`` per tensor or per output channel.
* ``QLinearMatMul`` (ai.onnx) ``(a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp)``:
  ``MatMul(DQ(a), DQ(b))``, ``b`` per tensor or per column (last axis).
* ``QGemm(A, a_scale, a_zp, B, b_scale, b_zp[, C][, y_scale, y_zp])`` (``alpha``,
  ``transA``, ``transB``): ``Gemm(DQ(A, alpha * a_scale), DQ(B), C * alpha * a_scale * b_scale)``
  (onnxruntime adds the int32 ``C`` to the accumulator before scaling by ``alpha * a_scale *
  b_scale``; alpha rides on A's scale so that C stays on the product's grid),
  quantized with ``y_scale``/``y_zp``, or float without them; ``B`` per column.
* ``QLinearAdd``, ``QLinearMul`` ``(A, A_scale[, A_zp], B, B_scale[, B_zp], C_scale[,
  C_zp])``, ``QLinearSigmoid``, ``QLinearLeakyRelu`` (``alpha`` 0.01), ``QLinearWhere``:
  the float op; zero points default to 0.
* ``QLinearAveragePool`` (``AveragePool``'s attributes, ``channels_last``),
  ``QLinearGlobalAveragePool`` (``channels_last``: a mean over the spatial axes of NHWC).
* ``QLinearConcat(Y_scale, Y_zp, (X, X_scale, X_zp)...)`` (``axis``).
* ``QLinearSoftmax(X, X_scale[, X_zp], y_scale[, y_zp])`` (``axis``, ``opset``): not
  ``DQ -> Softmax -> Q``: onnxruntime's kernel (``qlinear_softmax.cc``) ignores ``X_zp``,
  computes ``e = float(exp_double((x - max + shift) * X_scale))`` with ``shift =
  max(0, ln(FLT_MAX / D) - 5) / X_scale`` (``D`` the reduced size), sums ``e`` in float and
  gives ``nearbyint(e * floor(1 / y_scale) / sum) + y_zp``, saturated above (255, or 127
  for int8 as onnxruntime 1.32 does: found by the oracle check; older sources wrap); the body
  computes exactly that: from the kernel's own 256-entry table (``Gather`` by ``x - max +
  255``) where ``X_scale`` is a constant and the reduced size known, else in the graph
  (double). ``opset`` below 13 reduces over every axis from ``axis`` (Softmax-1).

Scales and zero points are read as the kernels read them: per tensor, a scalar or a
one-element vector. Below the opset whose ``DequantizeLinear``/``QuantizeLinear`` takes a
form (per axis: 13), the body writes the arithmetic ``(Cast(q) - Cast(zp)) * scale`` and
``Cast(Clip(Round(x / scale) + zp))``. Oracle: onnxruntime's own CPU kernels, on every
attribute form the kernel takes, per tensor and per channel, uint8 and int8.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from onnx import FunctionProto, TensorProto

from rewriter.plugin import Arg, Declined, FunctionBuilder, OpSample, declining
from rewriter.plugin import present as _present

DOMAIN = "com.microsoft"
QOP_OPSETS = (10, None)  # QuantizeLinear/DequantizeLinear and QLinearConv/MatMul from 10
QDQ_AXIS = 13  # DequantizeLinear/QuantizeLinear per axis
QDQ_16BIT = 21
ROUND = 11
PAD_INPUTS = 11  # Pad's pads as an input

_RANGES = {TensorProto.UINT8: (0, 255), TensorProto.INT8: (-128, 127),
           TensorProto.UINT16: (0, 65535), TensorProto.INT16: (-32768, 32767)}
_NAMES = {"tensor(uint8)": TensorProto.UINT8, "tensor(int8)": TensorProto.INT8,
          "tensor(uint16)": TensorProto.UINT16, "tensor(int16)": TensorProto.INT16,
          "tensor(int32)": TensorProto.INT32}
_8BIT = (TensorProto.UINT8, TensorProto.INT8)


class QBody(FunctionBuilder):
    """A body with the dequantize/quantize forms of its opset."""

    def scalar(self, ctx, index: int, formal: str) -> str:
        """Input ``index`` (bound to ``formal``) as a scalar: the kernels read a per-tensor
        scale or zero point given as a one-element vector as a scalar."""
        shape = ctx.shape(ctx.node.input[index])
        if shape == []:
            return formal
        if shape is not None and (len(shape) != 1 or shape[0] not in (1, None)):
            raise Declined(f"{formal} must be a scalar or a one-element vector (per tensor)")
        return self.reshape(formal, [])

    def standard(self, qtype: int, axis: int | None) -> bool:
        """Whether this opset's ``DequantizeLinear``/``QuantizeLinear`` takes the form."""
        if qtype in _8BIT or qtype == TensorProto.INT32:
            return self.opset >= (QDQ_AXIS if axis is not None else 10)
        return self.opset >= QDQ_16BIT

    def _along(self, v: str, axis: int, rank: int | None) -> str:
        """A per-axis vector ``v`` shaped to broadcast along ``axis`` of a rank-``rank``
        tensor."""
        if rank is None:
            raise Declined("a per-axis scale below opset 13 needs the input's rank")
        return self.reshape(v, [-1] + [1] * (rank - 1 - axis % rank))

    def dequantize(self, q: str, scale: str, zp: str, qtype: int, axis: int | None = None,
                   rank: int | None = None) -> str:
        """``(q - zp) * scale`` in float (``zp`` "" for none; ``axis`` None: per tensor)."""
        if self.standard(qtype, axis):  # no trailing "": OpenVINO reads it as a rank-? input
            return self.op("DequantizeLinear", q, scale, *([zp] if zp else []), axis=axis)
        if axis is not None:
            scale = self._along(scale, axis, rank)
            zp = self._along(zp, axis, rank) if zp else ""
        value = self.cast(q, TensorProto.FLOAT)
        if zp:
            value = self.op("Sub", value, self.cast(zp, TensorProto.FLOAT))
        return self.op("Mul", value, scale)

    def quantize(self, x: str, scale: str, zp: str, qtype: int) -> str:
        """``saturate(round_half_even(x / scale) + zp)`` per tensor, of type ``qtype``."""
        if not zp and qtype != TensorProto.UINT8:
            zp = self.const(np.array(0), qtype)
        if self.standard(qtype, None):
            return self.op("QuantizeLinear", x, scale, zp)
        if self.opset < ROUND:
            raise Declined("this quantized type needs Round (opset 11)")
        low, high = _RANGES[qtype]
        y = self.op("Round", self.op("Div", x, scale))
        if zp:
            y = self.op("Add", y, self.cast(zp, TensorProto.FLOAT))
        return self.cast(self.clip(y, float(low), float(high)), qtype)


def qtype(ctx, *indices: int, allowed: Sequence[int] = _8BIT) -> int:
    """The quantized element type of the first input among ``indices`` whose type is known."""
    types = list(ctx.input_types or [])
    for i in indices:
        if i < len(types) and types[i] in _NAMES:
            elem = _NAMES[types[i]]
            if elem not in allowed:
                raise Declined(f"input {i} is {types[i]}, the op takes 8-bit types")
            return elem
    raise Declined("the quantized element type is not known")


def _body(ctx) -> QBody:
    return QBody(ctx.opset, TensorProto.FLOAT)


def _names(node, formal: Sequence[str]) -> list[str]:
    return list(formal[:len(node.input)])


def _zp(node, index: int, formal: str) -> str:
    return formal if _present(node.input, index) else ""


def _unknown(node, known: Sequence[str]) -> bool:
    return any(a.name not in known for a in node.attribute)


def _needs(node, indices: Sequence[int], count: int, what: str) -> None:
    if (not all(_present(node.input, i) for i in indices) or len(node.input) > count
            or len(node.output) != 1 or not node.output[0]):
        raise Declined(f"needs {what}; one output")


def _dq_tensor(b: QBody, ctx, index: int, formal: Sequence[str], elem: int) -> str:
    """Input ``index`` dequantized per tensor with the scale and zero point after it."""
    scale = b.scalar(ctx, index + 1, formal[index + 1])
    zp = b.scalar(ctx, index + 2, formal[index + 2]) if _present(ctx.node.input, index + 2) \
        else ""
    return b.dequantize(formal[index], scale, zp, elem)


def _q_tensor(b: QBody, ctx, y: str, index: int, formal: Sequence[str], elem: int) -> str:
    """``y`` quantized per tensor with the scale at ``index`` and zero point after it."""
    scale = b.scalar(ctx, index, formal[index])
    zp = b.scalar(ctx, index + 1, formal[index + 1]) if _present(ctx.node.input, index + 1) \
        else ""
    return b.quantize(y, scale, zp, elem)


def _finish(b: QBody, node, formal: Sequence[str], y: str, name: str,
            output: str = "Y") -> FunctionProto:
    b.op("Identity", y, outputs=[output])
    return b.function(DOMAIN, name, _names(node, formal), [output])


# -- elementwise --------------------------------------------------------------------------

_BINARY = ["A", "A_scale", "A_zero_point", "B", "B_scale", "B_zero_point", "C_scale",
           "C_zero_point"]
_UNARY = ["X", "X_scale", "X_zero_point", "Y_scale", "Y_zero_point"]


def _binary(op_type: str):
    @declining
    def build(ctx) -> FunctionProto:
        node = ctx.node
        _needs(node, (0, 1, 3, 4, 6), 8, "A, B and their scales, C_scale")
        if node.attribute:
            raise Declined("takes no attributes")
        elem = qtype(ctx, 0, 3)
        b = _body(ctx)
        y = b.op(op_type, _dq_tensor(b, ctx, 0, _BINARY, elem),
                 _dq_tensor(b, ctx, 3, _BINARY, elem))
        return _finish(b, node, _BINARY, _q_tensor(b, ctx, y, 6, _BINARY, elem),
                       f"qlinear_{op_type.lower()}")

    build.__name__ = f"build_qlinear_{op_type.lower()}"
    return build


build_qlinear_add = _binary("Add")
build_qlinear_mul = _binary("Mul")


def _unary(op_type: str, attributes: Sequence[str] = ()):
    @declining
    def build(ctx) -> FunctionProto:
        node = ctx.node
        _needs(node, (0, 1, 3), 5, "X, X_scale and Y_scale")
        if _unknown(node, attributes):
            raise Declined(f"takes only {', '.join(attributes) or 'no attributes'}")
        elem = qtype(ctx, 0)
        b = _body(ctx)
        x = _dq_tensor(b, ctx, 0, _UNARY, elem)
        y = (b.op(op_type, x, alpha=float(ctx.attribute("alpha", 0.01)))
             if op_type == "LeakyRelu" else b.op(op_type, x))
        return _finish(b, node, _UNARY, _q_tensor(b, ctx, y, 3, _UNARY, elem),
                       f"qlinear_{op_type.lower()}")

    build.__name__ = f"build_qlinear_{op_type.lower()}"
    return build


build_qlinear_sigmoid = _unary("Sigmoid")
build_qlinear_leaky_relu = _unary("LeakyRelu", ["alpha"])

_WHERE = ["condition", "X", "x_scale", "x_zero_point", "Y", "y_scale", "y_zero_point",
          "z_scale", "z_zero_point"]


@declining
def build_qlinear_where(ctx) -> FunctionProto:
    node = ctx.node
    _needs(node, range(9), 9, "every input")
    if node.attribute:
        raise Declined("takes no attributes")
    elem = qtype(ctx, 1, 4)
    b = _body(ctx)
    y = b.op("Where", "condition", _dq_tensor(b, ctx, 1, _WHERE, elem),
             _dq_tensor(b, ctx, 4, _WHERE, elem))
    return _finish(b, node, _WHERE, _q_tensor(b, ctx, y, 7, _WHERE, elem), "qlinear_where",
                   output="Z")


# -- pooling and concatenation ----------------------------------------------------------

_POOL_ATTRIBUTES = ("auto_pad", "ceil_mode", "count_include_pad", "kernel_shape", "pads",
                    "strides")


def _channels_first(b: QBody, x: str, rank: int) -> str:
    return b.op("Transpose", x, perm=[0, rank - 1, *range(1, rank - 1)])


def _channels_last(b: QBody, x: str, rank: int) -> str:
    return b.op("Transpose", x, perm=[0, *range(2, rank), 1])


def _spatial_rank(ctx, index: int, kernel_shape) -> int:
    """The rank of an NHWC input: from ``kernel_shape``, else its declared shape."""
    if kernel_shape:
        return len(kernel_shape) + 2
    rank = ctx.rank(ctx.node.input[index])
    if rank is None:
        raise Declined("channels_last needs the input's rank (kernel_shape or its shape)")
    return rank


@declining
def build_qlinear_average_pool(ctx) -> FunctionProto:
    node = ctx.node
    _needs(node, (0, 1, 3), 5, "X, x_scale and y_scale")
    if _unknown(node, (*_POOL_ATTRIBUTES, "channels_last")):
        raise Declined("takes AveragePool's attributes (no dilations) and channels_last")
    elem = qtype(ctx, 0)
    attrs = {k: ctx.attribute(k) for k in _POOL_ATTRIBUTES}
    if attrs["ceil_mode"] and ctx.opset < 10:
        raise Declined("ceil_mode needs AveragePool-10")
    b = _body(ctx)
    last = ctx.attribute("channels_last", 0)
    rank = _spatial_rank(ctx, 0, attrs["kernel_shape"]) if last else 0
    x = _channels_first(b, "X", rank) if last else "X"  # integers: exact either side of DQ
    scale = b.scalar(ctx, 1, "X_scale")
    zp = b.scalar(ctx, 2, "X_zero_point") if _present(node.input, 2) else ""
    pads = attrs["pads"] or []
    if (attrs["count_include_pad"] and any(pads) and not attrs["ceil_mode"]
            and ctx.opset >= PAD_INPUTS):
        # padded with the zero point before dequantizing: OpenVINO 2026.4 moves the
        # dequantization after an AveragePool counting its pads, and pads the integers
        # with 0 instead of the zero point (measured: up to 62 units off)
        half = len(pads) // 2
        x = b.op("Pad", x, b.ints([0, 0, *pads[:half], 0, 0, *pads[half:]]),
                 zp or b.const(np.array(0), elem))
        attrs = {**attrs, "pads": None, "count_include_pad": None}
    x = b.dequantize(x, scale, zp, elem)
    y = b.op("AveragePool", x, **attrs)
    if last:
        y = _channels_last(b, y, rank)
    return _finish(b, node, _UNARY, _q_tensor(b, ctx, y, 3, _UNARY, elem),
                   "qlinear_average_pool")


@declining
def build_qlinear_global_average_pool(ctx) -> FunctionProto:
    node = ctx.node
    _needs(node, (0, 1, 3), 5, "X, x_scale and y_scale")
    if _unknown(node, ("channels_last",)):
        raise Declined("takes only channels_last")
    elem = qtype(ctx, 0)
    b = _body(ctx)
    x = _dq_tensor(b, ctx, 0, _UNARY, elem)
    if ctx.attribute("channels_last", 0):
        rank = _spatial_rank(ctx, 0, None)
        y = b.reduce_mean(x, list(range(1, rank - 1)), keepdims=1)
    else:
        y = b.op("GlobalAveragePool", x)
    return _finish(b, node, _UNARY, _q_tensor(b, ctx, y, 3, _UNARY, elem),
                   "qlinear_global_average_pool")


@declining
def build_qlinear_concat(ctx) -> FunctionProto:
    node = ctx.node
    count = len(node.input) - 2
    if (count < 3 or count % 3 or not all(_present(node.input, i) for i in range(len(
            node.input))) or len(node.output) != 1 or _unknown(node, ("axis",))
            or ctx.attribute("axis") is None):
        raise Declined("needs Y_scale, Y_zero_point and (X, X_scale, X_zero_point) triples, "
                       "axis; one output")
    formal = ["Y_scale", "Y_zero_point"]
    for k in range(count // 3):
        formal += [f"X{k}", f"X{k}_scale", f"X{k}_zero_point"]
    elem = qtype(ctx, 1, *range(2, len(node.input), 3))
    b = _body(ctx)
    parts = [_dq_tensor(b, ctx, i, formal, elem) for i in range(2, len(formal), 3)]
    y = b.op("Concat", *parts, axis=ctx.attribute("axis"))
    y = b.quantize(y, b.scalar(ctx, 0, "Y_scale"), b.scalar(ctx, 1, "Y_zero_point"), elem)
    return _finish(b, node, formal, y, "qlinear_concat")


# -- softmax --------------------------------------------------------------------------------

_FLT_MAX = float(np.finfo(np.float32).max)
_RESERVE = 5.0  # onnxruntime's reserve_bit for a float lookup table


def _softmax_shift(size: int, x_scale: np.float32) -> float:
    """The kernel's shift: ``max(0, log(FLT_MAX / D) - 5) / X_scale`` (the division and the
    log in float, the rest in double)."""
    bits = float(np.log(np.float32(_FLT_MAX) / np.float32(size)))
    return max(0.0, bits - _RESERVE) / float(x_scale)


def _exp_table(ctx, rank: int | None, axes: Sequence[int]) -> np.ndarray | None:
    """``float(exp((d + shift) * X_scale))`` for ``d = -255 .. 0`` in double, as onnxruntime
    builds its lookup table, where ``X_scale`` is a constant and the reduced size is known;
    exact on a runtime that computes double in float32 (OpenVINO). Else None."""
    x_scale = ctx.constant(ctx.node.input[1])
    shape = ctx.shape(ctx.node.input[0])
    if x_scale is None or x_scale.size != 1 or shape is None or rank is None:
        return None
    dims = [shape[a % rank] for a in axes]
    if any(not isinstance(d, int) or d <= 0 for d in dims):
        return None
    scale = np.float32(x_scale.reshape(()))
    shift = _softmax_shift(int(np.prod(dims)), scale)
    steps = np.arange(-255, 1, dtype=np.float64)
    return np.exp((steps + shift) * np.float64(scale)).astype(np.float32)


def _exp_body(b: QBody, ctx, shifted: str, rank: int | None, axes: Sequence[int]) -> str:
    """The table's values computed in the graph (``X_scale`` an input, or the reduced size
    known at run time only): ``shifted`` (double) to float ``exp((shifted + shift) *
    X_scale)``."""
    size = b.op("ReduceProd", b.op("Gather", b.op("Shape", "X"), b.ints(
        [a % rank for a in axes] if rank else axes)), keepdims=0)
    # log(FLT_MAX / D) in float (the kernel's log of a float), the rest in double
    bits = b.op("Log", b.op("Div", b.literal(_FLT_MAX), b.cast(size, TensorProto.FLOAT)))
    bits = b.op("Sub", b.cast(bits, TensorProto.DOUBLE),
                b.literal(_RESERVE, elem_type=TensorProto.DOUBLE))
    x_scale = b.cast(b.scalar(ctx, 1, "X_scale"), TensorProto.DOUBLE)
    shift = b.op("Div", b.op("Max", bits, b.literal(0.0, elem_type=TensorProto.DOUBLE)),
                 x_scale)
    e = b.op("Exp", b.op("Mul", b.op("Add", shifted, shift), x_scale))
    return b.cast(e, TensorProto.FLOAT)


@declining
def build_qlinear_softmax(ctx) -> FunctionProto:
    """onnxruntime's ``QLinearSoftmax`` arithmetic (see the module docstring)."""
    node = ctx.node
    _needs(node, (0, 1, 3), 5, "X, X_scale and y_scale")
    opset = ctx.attribute("opset")
    if _unknown(node, ("axis", "opset")) or opset is None:
        raise Declined("needs opset; takes axis")
    if ctx.opset < ROUND:
        raise Declined("the body needs Round (opset 11)")
    elem = qtype(ctx, 0)
    axis = ctx.attribute("axis", 1 if opset < 13 else -1)
    rank = ctx.rank(node.input[0])
    if rank is None and (opset < 13 or axis >= 0):
        raise Declined("the reduced axes need X's rank")
    axes = [axis] if opset >= 13 else list(range(axis % rank, rank))
    b = QBody(ctx.opset, TensorProto.FLOAT)
    # x - max in float (exact): OpenVINO 2026.4's CPU plugin gives a wrong int32 x -
    # ReduceMax(x) over a non-last axis (measured: off by up to 255)
    x = b.cast("X", TensorProto.FLOAT)
    shifted = b.op("Sub", x, b.reduce_max(x, axes))  # -255 .. 0
    table = _exp_table(ctx, rank, axes)
    if table is not None:  # the kernel's own table, built as it builds it
        index = b.cast(b.op("Add", shifted, b.literal(255.0)), TensorProto.INT32)
        e = b.op("Gather", b.const(table), index)
    else:
        e = _exp_body(b, ctx, b.cast(shifted, TensorProto.DOUBLE), rank, axes)
    total = b.reduce_sum(e, axes, keepdims=1)
    times = b.op("Floor", b.op("Div", b.literal(1.0), b.scalar(ctx, 3, "Y_scale")))
    y = b.op("Round", b.op("Div", b.op("Mul", e, times), total))
    y = b.cast(y, TensorProto.INT32)
    if _present(node.input, 4):
        y = b.op("Add", y, b.cast(b.scalar(ctx, 4, "Y_zero_point"), TensorProto.INT32))
    y = b.op("Min", y, b.const(np.array(_RANGES[elem][1], np.int32)))  # saturated above
    return _finish(b, node, _UNARY, b.cast(y, elem), "qlinear_softmax")


# -- products -------------------------------------------------------------------------------

_CONV = ["x", "x_scale", "x_zero_point", "w", "w_scale", "w_zero_point", "y_scale",
         "y_zero_point", "B"]
_CONV_ATTRIBUTES = ("auto_pad", "dilations", "group", "kernel_shape", "pads", "strides")


def _per_channel(b: QBody, ctx, index: int, formal: str, channels_axis: int,
                 rank: int | None) -> tuple[str, int | None]:
    """A weight's scale or zero point: per tensor (a scalar, axis None) or a vector along
    ``channels_axis``."""
    shape = ctx.shape(ctx.node.input[index])
    if shape is not None and (shape == [] or shape == [1]):
        return b.scalar(ctx, index, formal), None
    if shape is None or len(shape) != 1:
        raise Declined(f"{formal} must be a scalar or a vector (its shape is not known)")
    return formal, channels_axis if channels_axis >= 0 or rank is None else channels_axis % rank


def _dq_weight(b: QBody, ctx, index: int, formal: Sequence[str], elem: int, axis: int,
               rank: int | None) -> tuple[str, str, int | None]:
    """The weight at ``index`` dequantized (per tensor or per ``axis``), and its scale."""
    scale, scale_axis = _per_channel(b, ctx, index + 1, formal[index + 1], axis, rank)
    zp = ""
    if _present(ctx.node.input, index + 2):
        zp, zp_axis = _per_channel(b, ctx, index + 2, formal[index + 2], axis, rank)
        if zp_axis is not None and scale_axis is None:
            raise Declined(f"{formal[index + 2]} per channel beside a per-tensor scale")
        if zp_axis != scale_axis:  # a scalar zero point beside per-channel scales
            zp = b.op("Expand", zp, b.op("Shape", scale))
    return b.dequantize(formal[index], scale, zp, elem, scale_axis, rank), scale, scale_axis


@declining
def build_qlinear_conv(ctx) -> FunctionProto:
    node = ctx.node
    _needs(node, range(8), 9, "x, w, their scales and zero points, y_scale and y_zero_point")
    contrib = node.domain == DOMAIN
    if _unknown(node, (*_CONV_ATTRIBUTES, *(("channels_last",) if contrib else ()))):
        raise Declined("takes Conv's attributes (and channels_last)")
    x_elem, w_elem = qtype(ctx, 0, 7), qtype(ctx, 3, 5)
    kernel_shape = ctx.attribute("kernel_shape")
    w_rank = ctx.rank(node.input[3]) or (len(kernel_shape) + 2 if kernel_shape else None)
    b = _body(ctx)
    x = _dq_tensor(b, ctx, 0, _CONV, x_elem)
    last = contrib and ctx.attribute("channels_last", 0)
    if last:
        if w_rank is None:
            raise Declined("channels_last needs the weight's rank")
        x = _channels_first(b, x, w_rank)
    w, w_scale, axis = _dq_weight(b, ctx, 3, _CONV, w_elem, 0, w_rank)
    if axis is not None and ctx.opset < QDQ_AXIS:
        # a float weight between DequantizeLinear and QuantizeLinear: onnxruntime's basic
        # optimizer (1.32) quantizes it again per tensor, and its bias with Round below 11
        raise Declined("per-channel weights below opset 13 (no DequantizeLinear per axis)")
    inputs = [x, w]
    if _present(node.input, 8):  # int32, scale x_scale * w_scale, zero point 0
        bias_scale = b.op("Mul", b.scalar(ctx, 1, "x_scale"), w_scale)
        inputs.append(b.dequantize("B", bias_scale, "", TensorProto.INT32,
                                   0 if axis is not None else None, 1))
    y = b.op("Conv", *inputs, **{k: ctx.attribute(k) for k in _CONV_ATTRIBUTES})
    if last:
        y = _channels_last(b, y, w_rank)
    return _finish(b, node, _CONV, _q_tensor(b, ctx, y, 6, _CONV, x_elem), "qlinear_conv")


_MATMUL = ["a", "a_scale", "a_zero_point", "b", "b_scale", "b_zero_point", "y_scale",
           "y_zero_point"]


@declining
def build_qlinear_matmul(ctx) -> FunctionProto:
    node = ctx.node
    _needs(node, range(8), 8, "every input")
    if node.attribute:
        raise Declined("takes no attributes")
    a_elem, b_elem = qtype(ctx, 0, 2), qtype(ctx, 3, 5)
    y_elem = qtype(ctx, 7)
    body = _body(ctx)
    a = _dq_tensor(body, ctx, 0, _MATMUL, a_elem)  # onnxruntime: a per tensor only
    rank = ctx.rank(node.input[3])
    weight, _, _ = _dq_weight(body, ctx, 3, _MATMUL, b_elem, -1, rank)
    y = body.op("MatMul", a, weight)
    return _finish(body, node, _MATMUL, _q_tensor(body, ctx, y, 6, _MATMUL, y_elem),
                   "qlinear_matmul")


_QGEMM = ["A", "a_scale", "a_zero_point", "B", "b_scale", "b_zero_point", "C", "y_scale",
          "y_zero_point"]


@declining
def build_qgemm(ctx) -> FunctionProto:
    node = ctx.node
    _needs(node, range(6), 9, "A, B, their scales and zero points")
    quantized = _present(node.input, 7)
    if quantized != _present(node.input, 8):
        raise Declined("y_scale and y_zero_point go together (float output without both)")
    if _unknown(node, ("alpha", "transA", "transB")):
        raise Declined("takes only alpha, transA and transB")
    a_elem, b_elem = qtype(ctx, 0, 2), qtype(ctx, 3, 5)
    alpha, trans_b = float(ctx.attribute("alpha", 1.0)), ctx.attribute("transB", 0)
    body = _body(ctx)
    # alpha folded into A's scale: the bias C (int32) is then on the grid of the product's
    # scale (alpha * a_scale * b_scale), as QDQ bias is (onnxruntime's optimizer quantizes
    # a float Gemm bias to that grid: C * alpha off it would be rounded)
    a_scale = body.scalar(ctx, 1, "a_scale")
    if alpha != 1.0:
        a_scale = body.op("Mul", body.literal(alpha), a_scale)
    a_zp = body.scalar(ctx, 2, "a_zero_point") if _present(node.input, 2) else ""
    a = body.dequantize("A", a_scale, a_zp, a_elem)
    # per column: axis 1 of B (K, N), axis 0 of B transposed (N, K)
    weight, b_scale, _ = _dq_weight(body, ctx, 3, _QGEMM, b_elem, 0 if trans_b else 1, 2)
    inputs = [a, weight]
    if _present(node.input, 6):  # int32, scale alpha * a_scale * b_scale, zero point 0
        inputs.append(body.op("Mul", body.cast("C", TensorProto.FLOAT),
                              body.op("Mul", a_scale, b_scale)))
    y = body.op("Gemm", *inputs, alpha=1.0, beta=1.0, transA=ctx.attribute("transA", 0),
                transB=trans_b)
    if quantized:
        y = _q_tensor(body, ctx, y, 7, _QGEMM, qtype(ctx, 8))
    return _finish(body, node, _QGEMM, y, "qgemm")


# -- oracle samples --------------------------------------------------------------------------

_TYPES = ("uint8", "int8")
_LIMITS = {"uint8": (0, 256), "int8": (-128, 128)}
_ZERO_POINTS = {"uint8": 128, "int8": -3}


def _q(elem: str, shape: str) -> Arg:
    """A quantized tensor over its type's whole range."""
    low, high = _LIMITS[elem]
    return Arg(f"{elem}{shape}", low=low, high=high)


def _scale(value: float) -> Arg:
    return Arg("float[]", values=np.float32(value), constant=True)


def _zero_point(elem: str, value: int | None = None) -> Arg:
    zp = _ZERO_POINTS[elem] if value is None else value
    return Arg(f"{elem}[]", values=zp, constant=True)


def _weight_quantization(elem: str, count: int, per_channel: bool) -> tuple[Arg, Arg]:
    """A weight's scale and zero point: per tensor, or per channel (``count``; onnxruntime
    takes one zero point repeated: its kernels read a per-channel weight zero point as one)."""
    if not per_channel:
        return Arg("float[]", values=np.float32(0.0123), constant=True), _zero_point(elem, 1)
    return (Arg(f"float[{count}]", low=0.004, high=0.02, constant=True),
            Arg(f"{elem}[{count}]", values=np.full(count, 1), constant=True))


def _conv_samples() -> list[OpSample]:
    cases = [("plain", {}, "[1,4,7,7]", "[6,4,3,3]"),
             ("strided-padded", {"strides": [2, 2], "pads": [1, 0, 1, 2]}, "[2,4,7,7]",
              "[6,4,3,3]"),
             ("dilated", {"dilations": [2, 2], "pads": [2, 1, 2, 1]}, "[1,4,7,7]",
              "[6,4,3,3]"),
             ("same-upper", {"auto_pad": "SAME_UPPER", "strides": [2, 2]}, "[1,4,7,7]",
              "[6,4,3,3]"),
             ("grouped", {"group": 2, "pads": [1, 1, 1, 1]}, "[1,4,6,6]", "[6,2,3,3]"),
             ("depthwise", {"group": 4}, "[1,4,6,6]", "[4,1,3,3]"),
             ("1d", {"strides": [2]}, "[2,4,9]", "[6,4,3]")]
    samples = []
    for x_elem, w_elem in (("uint8", "uint8"), ("uint8", "int8"), ("int8", "int8")):
        for per_channel in (False, True):
            for bias in (False, True):
                for case, attrs, x_shape, w_shape in cases:
                    out = int(w_shape.strip("[]").split(",")[0])
                    w_scale, w_zp = _weight_quantization(w_elem, out, per_channel)
                    inputs = [_q(x_elem, x_shape), _scale(0.0217), _zero_point(x_elem),
                              Arg(f"{w_elem}{w_shape}", low=_LIMITS[w_elem][0],
                                  high=_LIMITS[w_elem][1], constant=True),
                              w_scale, w_zp, _scale(0.0787), _zero_point(x_elem, 5)]
                    if bias:
                        inputs.append(Arg(f"int32[{out}]", low=-3000, high=3000,
                                          constant=True))
                    kind = "per-channel" if per_channel else "per-tensor"
                    for opset in (10, 13) if case == "plain" and not per_channel else (13,):
                        samples.append(OpSample(
                            inputs, [x_elem], attrs, opset=opset,
                            name=f"{x_elem}-{w_elem}-{kind}{'-bias' if bias else ''}-{case}"))
    return samples


def _nhwc_conv_samples() -> list[OpSample]:
    """com.microsoft's ``QLinearConv`` with ``channels_last`` 1 (onnxruntime's NHWC
    transformer writes it): ``x`` NHWC, ``w`` OIHW."""
    samples = []
    for x_elem, w_elem in (("uint8", "uint8"), ("uint8", "int8"), ("int8", "int8")):
        for per_channel in (False, True):
            w_scale, w_zp = _weight_quantization(w_elem, 6, per_channel)
            for attrs in ({}, {"strides": [2, 2], "pads": [1, 1, 1, 1], "group": 2}):
                w_shape = "[6,2,3,3]" if attrs else "[6,4,3,3]"
                samples.append(OpSample(
                    [_q(x_elem, "[1,7,7,4]"), _scale(0.0217), _zero_point(x_elem),
                     Arg(f"{w_elem}{w_shape}", low=_LIMITS[w_elem][0],
                         high=_LIMITS[w_elem][1], constant=True),
                     w_scale, w_zp, _scale(0.0787), _zero_point(x_elem, 5),
                     Arg("int32[6]", low=-3000, high=3000, constant=True)],
                    [x_elem], {"channels_last": 1, **attrs}, opset=13,
                    name=f"{x_elem}-{w_elem}-{'per-channel' if per_channel else 'per-tensor'}"
                         f"{'-grouped' if attrs else ''}"))
    return samples


def _matmul_samples() -> list[OpSample]:
    samples = []
    for a_elem, b_elem in (("uint8", "uint8"), ("uint8", "int8"), ("int8", "int8")):
        for per_column in (False, True):
            b_scale, b_zp = _weight_quantization(b_elem, 5, per_column)
            for a_shape in ("[3,16]", "[2,3,16]"):
                kind = "per-column" if per_column else "per-tensor"
                for opset in (10, 13):
                    samples.append(OpSample(
                        [_q(a_elem, a_shape), _scale(0.0217), _zero_point(a_elem),
                         Arg(f"{b_elem}[16,5]", low=_LIMITS[b_elem][0],
                             high=_LIMITS[b_elem][1], constant=True),
                         b_scale, b_zp, _scale(0.0413), _zero_point(a_elem, 5)],
                        [a_elem], opset=opset,
                        name=f"{a_elem}-{b_elem}-{kind}-{len(a_shape.split(','))}d"))
    return samples


def _qgemm_samples() -> list[OpSample]:
    samples = []
    for a_elem, b_elem in (("uint8", "uint8"), ("uint8", "int8"), ("int8", "int8")):
        for per_column in (False, True):
            for trans_a, trans_b in ((0, 0), (1, 1)):
                for bias, quantized, alpha in ((False, True, 1.0), (True, True, 0.5),
                                               (True, False, 1.0), (False, False, 2.0)):
                    b_scale, b_zp = _weight_quantization(b_elem, 5, per_column)
                    a_shape, b_shape = ("[16,3]" if trans_a else "[3,16]",
                                        "[5,16]" if trans_b else "[16,5]")
                    inputs = [_q(a_elem, a_shape), _scale(0.0217), _zero_point(a_elem),
                              Arg(f"{b_elem}{b_shape}", low=_LIMITS[b_elem][0],
                                  high=_LIMITS[b_elem][1], constant=True),
                              b_scale, b_zp,
                              Arg("int32[5]", low=-3000, high=3000, constant=True)
                              if bias else None]
                    if quantized:
                        inputs += [_scale(0.0413), _zero_point(a_elem, 5)]
                    while inputs[-1] is None:
                        inputs.pop()
                    attrs = {"alpha": alpha, "transA": trans_a, "transB": trans_b}
                    samples.append(OpSample(
                        inputs, [a_elem if quantized else "float"], attrs, opset=13,
                        tolerance=(1e-5, 1e-5),
                        name=f"{a_elem}-{b_elem}-{'per-column' if per_column else 'per-tensor'}"
                             f"-t{trans_a}{trans_b}{'-bias' if bias else ''}"
                             f"-{'quantized' if quantized else 'float'}-alpha{alpha:g}"))
    return samples


def _binary_samples() -> list[OpSample]:
    """Zero points given (onnxruntime 1.32's type inference refuses the op without them)."""
    samples = []
    for elem in _TYPES:
        for case, a_shape, b_shape in (("same-shape", "[2,3,4]", "[2,3,4]"),
                                       ("broadcast", "[2,3,4]", "[4]"),
                                       ("scalar", "[2,3,4]", "[]"),
                                       ("broadcast-both", "[2,1,4]", "[1,3,1]")):
            inputs = [_q(elem, a_shape), _scale(0.0313), _zero_point(elem), _q(elem, b_shape),
                      _scale(0.0471), _zero_point(elem, 7), _scale(0.0593),
                      _zero_point(elem, -1 if elem == "int8" else 100)]
            for opset in (10, 17) if case == "same-shape" else (17,):
                samples.append(OpSample(inputs, [elem], opset=opset, name=f"{elem}-{case}"))
    return samples


def _unary_samples(attributes: Sequence[dict] = ({},)) -> list[OpSample]:
    """Zero points given (onnxruntime 1.32's lookup-table kernels abort without them)."""
    samples = []
    for elem in _TYPES:
        for attrs in attributes:
            label = "-".join(f"{k}{v:g}" for k, v in attrs.items())
            samples.append(OpSample(
                [_q(elem, "[2,3,16]"), _scale(0.0513), _zero_point(elem), _scale(0.00437),
                 _zero_point(elem, 10)], [elem], attrs, opset=17,
                name=f"{elem}{'-' + label if label else ''}"))
    return samples


def _where_samples() -> list[OpSample]:
    return [OpSample([Arg("bool[2,3,4]"), _q(elem, "[2,3,4]"), _scale(0.0307),
                      _zero_point(elem), _q(elem, shape), _scale(0.0519), _zero_point(elem, 7),
                      _scale(0.0411), _zero_point(elem, 2)], [elem], opset=17,
                     name=f"{elem}-{'broadcast' if shape != '[2,3,4]' else 'same-shape'}")
            for elem in _TYPES for shape in ("[2,3,4]", "[4]")]


def _pool_samples() -> list[OpSample]:
    cases = [("plain", {"kernel_shape": [3, 3]}),
             ("strided-padded", {"kernel_shape": [3, 3], "strides": [2, 2],
                                 "pads": [1, 1, 1, 1]}),
             ("count-include-pad", {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1],
                                    "count_include_pad": 1}),
             ("ceil", {"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1}),
             ("same-upper", {"kernel_shape": [2, 3], "auto_pad": "SAME_UPPER"}),
             ("1d", {"kernel_shape": [3], "strides": [2]})]
    samples = []
    for elem in _TYPES:
        for case, attrs in cases:
            for last in (0, 1):
                spatial = "7" if case == "1d" else "7,7"
                shape = f"[2,{spatial},3]" if last else f"[2,3,{spatial}]"
                samples.append(OpSample(
                    [_q(elem, shape), _scale(0.0307), _zero_point(elem), _scale(0.0211),
                     _zero_point(elem, 4)], [elem], {**attrs, "channels_last": last},
                    opset=17, name=f"{elem}-{case}{'-nhwc' if last else ''}"))
    return samples


def _global_pool_samples() -> list[OpSample]:
    return [OpSample([_q(elem, shape), _scale(0.0307), _zero_point(elem), _scale(0.0109),
                      _zero_point(elem, 4)], [elem], {"channels_last": last}, opset=opset,
                     name=f"{elem}-{'nhwc' if last else 'nchw'}-{shape}")
            for elem in _TYPES for last, shape in ((0, "[2,3,5,5]"), (1, "[2,5,5,3]"),
                                                   (0, "[2,3,7]"), (1, "[2,4,6,3]"))
            for opset in ((10, 17) if shape == "[2,3,5,5]" else (17,))]


def _concat_samples() -> list[OpSample]:
    samples = []
    for elem in _TYPES:
        for axis, count in ((1, 2), (-1, 3), (0, 1)):
            inputs = [_scale(0.05), _zero_point(elem, 6)]
            for k in range(count):
                inputs += [_q(elem, "[2,3,4]"), _scale(0.05 if k == 0 else 0.03 + 0.02 * k),
                           _zero_point(elem, 6 if k == 0 else k)]
            samples.append(OpSample(inputs, [elem], {"axis": axis}, opset=17,
                                    name=f"{elem}-axis{axis}-{count}-inputs"))
    return samples


def _softmax_samples() -> list[OpSample]:
    samples = []
    for elem in _TYPES:
        for opset_attribute, axis, shape, y_zp in (
                (13, -1, "[2,3,16]", None), (13, 1, "[2,3,16]", None), (12, 1, "[2,3,4]", None),
                (12, 2, "[2,3,8]", None), (13, -1, "[2,300]", None), (13, -1, "[2,3,16]", 5)):
            shifted = y_zp is not None
            y_zp = y_zp if shifted else -128 if elem == "int8" else 0
            for x_scale in (0.05, 0.3):
                samples.append(OpSample(
                    [_q(elem, shape), _scale(x_scale), _zero_point(elem),
                     _scale(1.0 / 256), _zero_point(elem, y_zp)], [elem],
                    {"axis": axis, "opset": opset_attribute}, opset=17,
                    name=f"{elem}-softmax{opset_attribute}-axis{axis}-{shape}-x{x_scale:g}"
                         f"{f'-y-zp{y_zp}' if shifted else ''}"))
        # X_scale a graph input: the exponentials computed in the graph, not tabulated
        samples.append(OpSample(
            [_q(elem, "[2,3,16]"), Arg("float[]", values=np.float32(0.11)), _zero_point(elem),
             _scale(1.0 / 256), _zero_point(elem, -128 if elem == "int8" else 0)], [elem],
            {"axis": 1, "opset": 13}, opset=17, name=f"{elem}-x-scale-input"))
    return samples


def _oracles() -> dict[str, list[OpSample]]:
    """Per op: samples for onnxruntime's own CPU kernel (``uint8``/``int8``, per tensor and
    per channel, over the attributes the kernel takes)."""
    return {
        "QLinearConv": _conv_samples(),
        "QLinearConv@com.microsoft": _nhwc_conv_samples(),
        "QLinearMatMul": _matmul_samples(),
        "QGemm": _qgemm_samples(),
        "QLinearAdd": _binary_samples(),
        "QLinearMul": _binary_samples(),
        "QLinearSigmoid": _unary_samples(),
        "QLinearLeakyRelu": _unary_samples(({}, {"alpha": 0.2}, {"alpha": 1.5})),
        "QLinearWhere": _where_samples(),
        "QLinearAveragePool": _pool_samples(),
        "QLinearGlobalAveragePool": _global_pool_samples(),
        "QLinearConcat": _concat_samples(),
        "QLinearSoftmax": _softmax_samples(),
    }


REGISTRATIONS = (
    ("", "QLinearConv", build_qlinear_conv, "QLinearConv"),
    (DOMAIN, "QLinearConv", build_qlinear_conv, "QLinearConv@com.microsoft"),
    ("", "QLinearMatMul", build_qlinear_matmul, "QLinearMatMul"),
    (DOMAIN, "QGemm", build_qgemm, "QGemm"),
    (DOMAIN, "QLinearAdd", build_qlinear_add, "QLinearAdd"),
    (DOMAIN, "QLinearMul", build_qlinear_mul, "QLinearMul"),
    (DOMAIN, "QLinearSigmoid", build_qlinear_sigmoid, "QLinearSigmoid"),
    (DOMAIN, "QLinearLeakyRelu", build_qlinear_leaky_relu, "QLinearLeakyRelu"),
    (DOMAIN, "QLinearWhere", build_qlinear_where, "QLinearWhere"),
    (DOMAIN, "QLinearAveragePool", build_qlinear_average_pool, "QLinearAveragePool"),
    (DOMAIN, "QLinearGlobalAveragePool", build_qlinear_global_average_pool,
     "QLinearGlobalAveragePool"),
    (DOMAIN, "QLinearConcat", build_qlinear_concat, "QLinearConcat"),
    (DOMAIN, "QLinearSoftmax", build_qlinear_softmax, "QLinearSoftmax"),
)


def register_decompositions(registry) -> None:
    """Called by ``rewriter_plugins.com_microsoft``'s hook."""
    oracles = _oracles()
    for domain, op_type, builder, key in REGISTRATIONS:
        note = "DequantizeLinear, the float op, QuantizeLinear"
        if op_type == "QLinearSoftmax":
            note = "onnxruntime's exp/sum arithmetic"
        registry.add(domain, op_type, builder, opsets=QOP_OPSETS, dtypes=_TYPES,
                     description=f"com-microsoft:{op_type} ({note})", oracle="onnxruntime",
                     samples=oracles[key])
