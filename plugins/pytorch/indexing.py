"""aten data movement along axes: ``embedding``, ``index_select``, ``cumsum``, ``tril``/``triu``,
``flip``, ``roll``, ``masked_fill`` (see the package's docstring for each one's body).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from onnx import TensorProto

from .body import (
    FLOAT_TYPES,
    Body,
    axis_of,
    compute_type,
    length_of,
    zero_like,
)
from .calls import AtenCall

# torch ScalarType codes (a ``dtype`` argument)
SCALAR_TYPES = {0: TensorProto.UINT8, 1: TensorProto.INT8, 2: TensorProto.INT16,
                3: TensorProto.INT32, 4: TensorProto.INT64, 5: TensorProto.FLOAT16,
                6: TensorProto.FLOAT, 7: TensorProto.DOUBLE, 11: TensorProto.BOOL,
                15: TensorProto.BFLOAT16}


def _embedding(b: Body, call: AtenCall, elem: int) -> list[str] | None:
    return [b.op("Gather", call.tensors["weight"], call.tensors["indices"], axis=0)]


def _index_select(b: Body, call: AtenCall, elem: int) -> list[str] | None:
    dim = call.values["dim"]
    if dim < 0 and b.opset < 11:
        return None  # negative Gather axes arrive at opset 11
    index = b.reshape(call.tensors["index"], [-1])
    return [b.op("Gather", call.tensors["self"], index, axis=dim)]



def _cumsum(b: Body, call: AtenCall, elem: int) -> list[str] | None:
    """``cumsum(self, dim, dtype=None)``: integers and bool accumulate in int64 (torch's
    promotion), float16 in float32; ``dtype`` casts first."""
    axis = axis_of(call, "self", call.values["dim"], b.opset)
    if axis is None:
        return None
    dtype = call.values["dtype"]
    target = elem if elem in FLOAT_TYPES.values() else TensorProto.INT64
    if dtype is not None:
        target = SCALAR_TYPES.get(dtype)
        if target is None:
            return None
    compute = compute_type(target)
    if compute not in (TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.INT32,
                       TensorProto.INT64):
        return None
    x = call.tensors["self"]
    x = x if elem == compute else b.cast(x, compute)
    if b.opset >= 11:
        y = b.op("CumSum", x, b.const(np.array(axis, np.int64)))
    else:
        y = _cumsum_matmul(b, call, x, axis, compute)
        if y is None:
            return None
    return [y if compute == target else b.cast(y, target)]


def _cumsum_matmul(b: Body, call: AtenCall, x: str, axis: int, elem: int) -> str | None:
    """Before CumSum (opset 11): ``x @ U`` along the last axis, ``U[i, j] = (i <= j)`` built
    from the runtime length (floats: the sum order differs from torch's running sum). Needs
    the declared rank."""
    shape = call.shapes.get("self")
    if shape is None:
        return None
    rank = len(shape)
    perm = None
    if axis != rank - 1:
        perm = list(range(rank))
        perm[axis], perm[-1] = perm[-1], perm[axis]
        x = b.op("Transpose", x, perm=perm)
    index = b.iota(length_of(b, x, rank - 1))
    upper = b.op("Not", b.op("Greater", b.reshape(index, [-1, 1]), b.reshape(index, [1, -1])))
    y = b.op("MatMul", x, b.cast(upper, elem))
    return y if perm is None else b.op("Transpose", y, perm=perm)


def _triangle(upper: bool) -> Callable[[Body, AtenCall, int], list[str] | None]:
    """``triu``/``tril(self, diagonal)``: keep ``x[..., i, j]`` where ``j - i >= diagonal``
    (triu) or ``<= diagonal`` (tril), zero elsewhere."""

    def build(b: Body, call: AtenCall, elem: int) -> list[str] | None:
        rows, cols = axis_of(call, "self", -2, b.opset), axis_of(call, "self", -1, b.opset)
        if rows is None or cols is None:
            return None
        x = call.tensors["self"]
        row = b.reshape(b.iota(length_of(b, x, rows)), [-1, 1])
        col = b.reshape(b.iota(length_of(b, x, cols)), [1, -1])
        offset = b.op("Sub", col, row)
        diagonal = b.const(np.array(call.values["diagonal"], np.int64))
        outside = b.op("Less" if upper else "Greater", offset, diagonal)
        return [b.op("Where", outside, zero_like(b, elem), x)]

    return build


def _modulo(b: Body, value: str, length: str) -> str:
    """``value mod length`` (int64, non-negative; Mod arrives at opset 10): through double
    floor division, exact below 2**53."""
    as_double = [b.cast(v, TensorProto.DOUBLE) for v in (value, length)]
    quotient = b.op("Floor", b.op("Div", *as_double))
    return b.op("Sub", value, b.op("Mul", b.cast(quotient, TensorProto.INT64), length))


def _flip(b: Body, call: AtenCall, elem: int) -> list[str] | None:
    """``flip(self, dims)``: ``Gather(x, L - 1 - iota(L))`` along each dim."""
    y = call.tensors["self"]
    axes = [axis_of(call, "self", d, b.opset) for d in call.values["dims"]]
    if any(a is None for a in axes) or len(set(axes)) != len(axes):
        return None
    for axis in axes:
        length = length_of(b, y, axis)
        last = b.op("Sub", length, b.ints([1]))
        y = b.op("Gather", y, b.op("Sub", last, b.iota(length)), axis=axis)
    return [y if axes else b.op("Identity", y)]


def _roll(b: Body, call: AtenCall, elem: int) -> list[str] | None:
    """``roll(self, shifts, dims)``: ``y[i] = x[(i - shift) mod L]`` along each dim (a
    Gather of rotated indices); no dims: the flattened tensor, reshaped back."""
    x = call.tensors["self"]
    shifts, dims = call.values["shifts"], call.values["dims"]
    flat = not dims
    if flat:
        if len(shifts) != 1:
            return None
        y, axes = b.reshape(x, [-1]), [0]
    else:
        if len(shifts) != len(dims):
            return None
        y, axes = x, [axis_of(call, "self", d, b.opset) for d in dims]
        if any(a is None for a in axes):
            return None
    for shift, axis in zip(shifts, axes):
        length = length_of(b, y, axis)
        source = _modulo(b, b.op("Sub", b.iota(length), b.ints([shift])), length)
        y = b.op("Gather", y, source, axis=axis)
    return [b.reshape(y, b.op("Shape", x)) if flat else y]


def _masked_fill(b: Body, call: AtenCall, elem: int) -> list[str] | None:
    """``masked_fill(self, mask, value)``: ``Where(mask, value cast to self's type, self)``."""
    mask_type = call.tensor_types.get("mask")
    if mask_type not in (None, "tensor(bool)"):
        return None
    value = b.cast(call.tensors["value"], elem)
    return [b.op("Where", call.tensors["mask"], value, call.tensors["self"])]


BODIES: dict[str, Callable[[Body, AtenCall, int], list[str] | None]] = {
    "embedding": _embedding,
    "index_select": _index_select,
    "cumsum": _cumsum,
    "tril": _triangle(upper=False),
    "triu": _triangle(upper=True),
    "flip": _flip,
    "roll": _roll,
    "masked_fill": _masked_fill,
}
