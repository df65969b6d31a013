"""aten ``layer_norm`` and ``group_norm``: ``(x - mean) / sqrt(var + eps)`` (biased variance)
over the normalized axes, then ``* weight + bias`` (per channel for group_norm).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .body import Body, from_compute, to_compute
from .calls import AtenCall


def _normalize(b: Body, x: str, axis: int, eps: float) -> str:
    """``(x - mean) / sqrt(var + eps)`` along ``axis`` (biased variance)."""
    mean = b.reduce_mean(x, [axis])
    centred = b.op("Sub", x, mean)
    var = b.reduce_mean(b.op("Mul", centred, centred), [axis])
    std = b.op("Sqrt", b.op("Add", var, b.literal(eps)))
    return b.op("Div", centred, std)


def _layer_norm(b: Body, call: AtenCall, elem: int) -> list[str] | None:
    shape = call.values["normalized_shape"]
    if not shape or any(d <= 0 for d in shape):
        return None
    x = to_compute(b, call.tensors["input"], elem)
    y = _normalize(b, b.reshape(x, [-1, int(np.prod(shape))]), 1, call.values["eps"])
    y = b.reshape(y, b.op("Shape", x))
    weight = to_compute(b, call.tensors["weight"], elem)
    if weight is not None:
        y = b.op("Mul", y, weight)
    bias = to_compute(b, call.tensors["bias"], elem)
    if bias is not None:
        y = b.op("Add", y, bias)
    return [from_compute(b, y, elem)]


def _group_norm(b: Body, call: AtenCall, elem: int) -> list[str] | None:
    groups = call.values["num_groups"]
    if groups <= 0:
        return None
    x = to_compute(b, call.tensors["input"], elem)
    y = _normalize(b, b.reshape(x, [0, groups, -1]), 2, call.values["eps"])
    weight = to_compute(b, call.tensors["weight"], elem)
    bias = to_compute(b, call.tensors["bias"], elem)
    if weight is not None or bias is not None:
        # per channel: view as [N, C, -1] and broadcast [C, 1]
        channels = b.op("Gather", b.op("Shape", x), b.ints([1]), axis=0)
        view = b.op("Concat", b.ints([0]), channels, b.ints([-1]), axis=0)
        y = b.reshape(y, view)
        if weight is not None:
            y = b.op("Mul", y, b.reshape(weight, [-1, 1]))
        if bias is not None:
            y = b.op("Add", y, b.reshape(bias, [-1, 1]))
    y = b.reshape(y, b.op("Shape", x))
    return [from_compute(b, y, elem)]


BODIES: dict[str, Callable[[Body, AtenCall, int], list[str] | None]] = {
    "layer_norm": _layer_norm,
    "group_norm": _group_norm,
}
