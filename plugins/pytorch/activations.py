"""aten ``gelu`` (``approximate`` none or tanh) and ``silu``.
"""

from __future__ import annotations

from collections.abc import Callable

from .body import Body, from_compute, to_compute
from .calls import AtenCall


def _gelu(b: Body, call: AtenCall, elem: int) -> list[str] | None:
    x = to_compute(b, call.tensors["self"], elem)
    mode = call.values["approximate"]
    half, one = b.literal(0.5), b.literal(1.0)
    if mode == "none":
        if b.opset < 9:
            return None  # Erf arrives at opset 9
        inner = b.op("Erf", b.op("Mul", x, b.literal(0.7071067811865476)))
    elif mode == "tanh":
        cube = b.op("Mul", b.op("Mul", x, x), x)
        poly = b.op("Add", x, b.op("Mul", cube, b.literal(0.044715)))
        inner = b.op("Tanh", b.op("Mul", poly, b.literal(0.7978845608028654)))
    else:
        return None
    y = b.op("Mul", b.op("Mul", half, x), b.op("Add", one, inner))
    return [from_compute(b, y, elem)]


def _silu(b: Body, call: AtenCall, elem: int) -> list[str] | None:
    x = to_compute(b, call.tensors["self"], elem)
    return [from_compute(b, b.op("Mul", x, b.op("Sigmoid", x)), elem)]


BODIES: dict[str, Callable[[Body, AtenCall, int], list[str] | None]] = {
    "gelu": _gelu,
    "silu": _silu,
}
