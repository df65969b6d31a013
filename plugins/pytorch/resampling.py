"""aten resampling: ``adaptive_avg_pool{1,2,3}d``, ``grid_sampler`` (GridSample) and the
``upsample_*`` family (torch's CPU kernels, axis by axis).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from onnx import TensorProto, helper

from .body import Body, axis_of, from_compute, length_of, to_compute
from .calls import AtenCall


def _adaptive_avg_pool(rank: int) -> Callable[[Body, AtenCall, int], list[str] | None]:
    def build(b: Body, call: AtenCall, elem: int) -> list[str] | None:
        sizes = call.values["output_size"]
        if len(sizes) != rank or any(s <= 0 for s in sizes) or b.opset < 11:
            return None
        x = to_compute(b, call.tensors["self"], elem)
        if all(s == 1 for s in sizes):
            return [from_compute(b, b.reduce_mean(x, list(range(-rank, 0))), elem)]
        shape = b.op("Shape", x)
        y = x
        for k, size in enumerate(sizes):
            axis = k - rank
            length = b.op("Gather", shape, b.ints([axis]), axis=0)
            count = b.ints([size])
            starts = b.op("Div", b.op("Mul", length, b.ints(range(size))), count)
            ends = b.op("Div", b.op("Add", b.op("Mul", length, b.ints(range(1, size + 1))),
                                           b.ints([size - 1])), count)
            pieces = []
            for i in range(size):
                index = b.ints([i])
                start = b.op("Gather", starts, index, axis=0)
                end = b.op("Gather", ends, index, axis=0)
                pieces.append(b.reduce_mean(b.slice(y, start, end, [axis]), [axis]))
            y = pieces[0] if size == 1 else b.op("Concat", *pieces, axis=axis)
        return [from_compute(b, y, elem)]

    return build



_GRID_MODES = {16: ("bilinear", "nearest", "bicubic"), 20: ("linear", "nearest", "cubic")}
_GRID_PADDING = ("zeros", "border", "reflection")


def _grid_sampler(b: Body, call: AtenCall, elem: int) -> list[str] | None:
    mode, padding = call.values["interpolation_mode"], call.values["padding_mode"]
    if b.opset < 16 or mode not in (0, 1, 2) or padding not in (0, 1, 2):
        return None
    names = _GRID_MODES[20 if b.opset >= 20 else 16]
    x, grid = to_compute(b, call.tensors["input"], elem), to_compute(b, call.tensors["grid"], elem)
    y = b.op("GridSample", x, grid, mode=names[mode], padding_mode=_GRID_PADDING[padding],
             align_corners=int(call.values["align_corners"]))
    return [from_compute(b, y, elem)]



def _upsample_scales(values: dict[str, Any], rank: int) -> list[float | None]:
    """The scale of each spatial axis (None: none given, or <= 0, which torch ignores)."""
    given = values.get("scale_factors")
    if given is None:
        names = {1: ("scales",), 2: ("scales_h", "scales_w"),
                 3: ("scales_d", "scales_h", "scales_w")}[rank]
        given = [values.get(n) for n in names]
    if len(given) != rank:
        return []
    return [g if g is not None and g > 0 else None for g in given]


def _cubic_weights(b: Body, t: str, num: Callable[[float], str]) -> list[str]:
    """torch's ``get_cubic_upsample_coefficients`` (A = -0.75) for ``t`` in [0, 1]."""
    a = -0.75

    def near(x: str) -> str:  # ((A + 2) x - (A + 3)) x x + 1
        inner = b.op("Sub", b.op("Mul", num(a + 2), x), num(a + 3))
        return b.op("Add", b.op("Mul", b.op("Mul", inner, x), x), num(1.0))

    def far(x: str) -> str:  # ((A x - 5 A) x + 8 A) x - 4 A
        inner = b.op("Sub", b.op("Mul", num(a), x), num(5 * a))
        inner = b.op("Add", b.op("Mul", inner, x), num(8 * a))
        return b.op("Sub", b.op("Mul", inner, x), num(4 * a))

    rest = b.op("Sub", num(1.0), t)
    one = num(1.0)
    return [far(b.op("Add", t, one)), near(t), near(rest), far(b.op("Add", rest, one))]


def _upsample(mode: str, rank: int) -> Callable[[Body, AtenCall, int], list[str] | None]:
    """``upsample_{nearest,linear,bilinear,trilinear,bicubic}`` as torch's CPU kernels
    compute them, axis by axis from the innermost: source indices and weights from
    ``arange(out)`` in float32 (``area_pixel_compute_scale``/``_source_index``,
    ``nearest_idx``, ``guard_index_and_lambda``), then Gathers weighted and summed."""

    def build(b: Body, call: AtenCall, elem: int) -> list[str] | None:
        values = call.values
        sizes, scales = values.get("output_size"), _upsample_scales(values, rank)
        align = bool(values.get("align_corners", False))
        if sizes is not None and (len(sizes) != rank or any(v <= 0 for v in sizes)):
            return None
        if len(scales) != rank or (sizes is None and None in scales):
            return None
        arg = "self" if "self" in call.tensors else "input"
        x = to_compute(b, call.tensors[arg], elem)
        axes = [axis_of(call, arg, k - rank, b.opset) for k in range(rank)]
        if any(a is None for a in axes):
            return None
        # torch computes linear/cubic indices in opmath (float, double for double), nearest
        # ones in float
        real = TensorProto.FLOAT if mode == "nearest" else b.elem_type
        real_np = helper.tensor_dtype_to_np_dtype(real)

        def num(value: float) -> str:
            return b.const(np.array(value, real_np))

        y = x
        for k in reversed(range(rank)):
            axis, scale = axes[k], scales[k]
            length = length_of(b, x, axis)
            if sizes is not None:
                size = b.ints([sizes[k]])
            else:  # floor(L * scale) in double, as torch's output size
                scaled = b.op("Mul", b.cast(length, TensorProto.DOUBLE),
                                     b.const(np.array([scale], np.float64)))
                size = b.cast(b.op("Floor", scaled), TensorProto.INT64)
            length_f, size_f = b.cast(length, real), b.cast(size, real)
            last = b.op("Sub", length_f, num(1.0))
            dst = b.cast(b.iota(size), real)
            if scale is not None:
                ratio = b.const(np.array([1.0 / scale], real_np))
            else:
                ratio = b.op("Div", length_f, size_f)
            if mode == "nearest":
                general = b.op("Min", b.op("Floor", b.op("Mul", dst, ratio)), last)
                halved = b.op("Floor", b.op("Mul", dst, num(0.5)))
                doubled = b.op("Mul", length, b.ints([2]))
                index = b.op("Where", b.op("Equal", size, length), dst, b.op(
                   "Where", b.op("Equal", size, doubled), halved, general))
                y = b.op("Gather", y, b.cast(index, TensorProto.INT64), axis=axis)
                continue
            if align:
                spans = b.op("Div", last, b.op("Sub", size_f, num(1.0)))
                ratio = b.op("Where", b.op("Greater", size, b.ints([1])), spans,
                                      num(0.0))
                source = b.op("Mul", ratio, dst)
            else:
                source = b.op("Sub", b.op("Mul", ratio, b.op("Add", dst, num(0.5))),
                                     num(0.5))
                if mode == "linear":
                    source = b.op("Max", source, num(0.0))
            start = b.op("Min", b.op("Floor", source), last)
            t = b.op("Min", b.op("Max", b.op("Sub", source, start), num(0.0)),
                            num(1.0))
            if mode == "linear":
                taps = [(start, b.op("Sub", num(1.0), t)),
                        (b.op("Min", b.op("Add", start, num(1.0)), last), t)]
            else:
                taps = [(b.op("Max", b.op("Min", b.op("Add", start, num(j - 1.0)),
                                                 last), num(0.0)), w)
                        for j, w in enumerate(_cubic_weights(b, t, num))]
            trailing = [1] * (rank - 1 - k)
            total = None
            for index, weight in taps:
                picked = b.op("Gather", y, b.cast(index, TensorProto.INT64), axis=axis)
                term = b.op("Mul", picked, b.reshape(weight, [-1, *trailing]))
                total = term if total is None else b.op("Add", total, term)
            y = total
        return [from_compute(b, y, elem)]

    return build



_UPSAMPLE = {"nearest1d": ("nearest", 1), "nearest2d": ("nearest", 2),
             "nearest3d": ("nearest", 3), "linear1d": ("linear", 1),
             "bilinear2d": ("linear", 2), "trilinear3d": ("linear", 3),
             "bicubic2d": ("cubic", 2)}


BODIES: dict[str, Callable[[Body, AtenCall, int], list[str] | None]] = {
    "adaptive_avg_pool1d": _adaptive_avg_pool(1),
    "adaptive_avg_pool2d": _adaptive_avg_pool(2),
    "adaptive_avg_pool3d": _adaptive_avg_pool(3),
    "grid_sampler": _grid_sampler,
}
for _name, (_mode, _rank) in _UPSAMPLE.items():
    BODIES[f"upsample_{_name}"] = BODIES[f"upsample_{_name}.vec"] = _upsample(_mode, _rank)
