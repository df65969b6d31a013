"""What the QOperator modules share: the body builder with the dequantize/quantize forms of
its opset (``QBody``), the quantized element type, per-tensor inputs and outputs, layout
transposes, and the helpers of the oracle samples."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from onnx import FunctionProto, TensorProto

from rewriter.plugin import Arg, Declined, FunctionBuilder
from rewriter.plugin import present as _present

DOMAIN = "com.microsoft"
QOP_OPSETS = (10, None)  # QuantizeLinear/DequantizeLinear and QLinearConv/MatMul from 10
QDQ_AXIS = 13  # DequantizeLinear/QuantizeLinear per axis
QDQ_16BIT = 21
ROUND = 11
PAD_INPUTS = 11  # Pad's pads as an input

RANGES = {TensorProto.UINT8: (0, 255), TensorProto.INT8: (-128, 127),
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
        low, high = RANGES[qtype]
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


def float_body(ctx) -> QBody:
    return QBody(ctx.opset, TensorProto.FLOAT)


def formal_names(node, formal: Sequence[str]) -> list[str]:
    return list(formal[:len(node.input)])


def needs_inputs(node, indices: Sequence[int], count: int, what: str) -> None:
    if (not all(_present(node.input, i) for i in indices) or len(node.input) > count
            or len(node.output) != 1 or not node.output[0]):
        raise Declined(f"needs {what}; one output")


def dq_input(b: QBody, ctx, index: int, formal: Sequence[str], elem: int) -> str:
    """Input ``index`` dequantized per tensor with the scale and zero point after it."""
    scale = b.scalar(ctx, index + 1, formal[index + 1])
    zp = b.scalar(ctx, index + 2, formal[index + 2]) if _present(ctx.node.input, index + 2) \
        else ""
    return b.dequantize(formal[index], scale, zp, elem)


def q_output(b: QBody, ctx, y: str, index: int, formal: Sequence[str], elem: int) -> str:
    """``y`` quantized per tensor with the scale at ``index`` and zero point after it."""
    scale = b.scalar(ctx, index, formal[index])
    zp = b.scalar(ctx, index + 1, formal[index + 1]) if _present(ctx.node.input, index + 1) \
        else ""
    return b.quantize(y, scale, zp, elem)


def finish(b: QBody, node, formal: Sequence[str], y: str, name: str,
            output: str = "Y") -> FunctionProto:
    b.op("Identity", y, outputs=[output])
    return b.function(DOMAIN, name, formal_names(node, formal), [output])


UNARY = ["X", "X_scale", "X_zero_point", "Y_scale", "Y_zero_point"]


def channels_first(b: QBody, x: str, rank: int) -> str:
    return b.op("Transpose", x, perm=[0, rank - 1, *range(1, rank - 1)])


def channels_last(b: QBody, x: str, rank: int) -> str:
    return b.op("Transpose", x, perm=[0, *range(2, rank), 1])


# -- oracle samples --------------------------------------------------------------------------

TYPES = ("uint8", "int8")
LIMITS = {"uint8": (0, 256), "int8": (-128, 128)}
_ZERO_POINTS = {"uint8": 128, "int8": -3}


def q_arg(elem: str, shape: str) -> Arg:
    """A quantized tensor over its type's whole range."""
    low, high = LIMITS[elem]
    return Arg(f"{elem}{shape}", low=low, high=high)


def scale_arg(value: float) -> Arg:
    return Arg("float[]", values=np.float32(value), constant=True)


def zp_arg(elem: str, value: int | None = None) -> Arg:
    zp = _ZERO_POINTS[elem] if value is None else value
    return Arg(f"{elem}[]", values=zp, constant=True)
