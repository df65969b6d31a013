"""Signal processing (new in opset 17):

* ``STFT(signal, frame_step[, window[, frame_length]])`` (``onesided``): frames gathered
  at ``f * frame_step + t``, times the window, and a DFT as two matrix products with
  ``cos``/``sin`` of ``-2 pi (t k mod n) / n``; real or complex (``[..., 2]``) signals.
* ``DFT(input[, dft_length[, axis]])`` (``inverse``, ``onesided``; the axis an attribute
  before opset 20, a constant input from it; one the caller feeds: an ``If`` per signal
  axis): the signal
  axis moved next to the last, cut
  or zero-padded to ``dft_length``, and matrix products with ``cos``/``sin`` tables of
  ``2 pi (t k mod n) / n`` (exact at quarter turns), signed ``-`` forward, ``+`` and
  divided by ``n`` inverse; an inverse one-sided DFT (``irfft``) takes the ``n // 2 + 1``
  bins, the others counted twice by Hermitian symmetry, to a real signal ``[..., n, 1]``.
  OpenVINO 2026.4 computes some DFTs otherwise (``test_dft_axis`` 995 off; one-sided
  outputs without their last dimension).
* ``MelWeightMatrix(num_mel_bins, dft_length, sample_rate, lower_edge_hertz,
  upper_edge_hertz)`` (``output_datatype``): the reference evaluator's triangular filters
  (bin edges ``floor((dft_length + 1) * hz / sample_rate)`` of ``num_mel_bins + 2`` points
  evenly spaced in mel), computed in double.
"""

from __future__ import annotations

import math

import numpy as np
from onnx import FunctionProto, TensorProto, helper

from rewriter.plugin import Arg, Declined, OpSample, declining
from rewriter.plugin import present as _present

from .common import (
    DOMAIN,
    Body,
    attributes_known,
    body_opset,
    float_elem,
    formal_inputs,
)

SIGNAL_OPSETS = (17, None)  # STFT and MelWeightMatrix are new in opset 17


# -- STFT -----------------------------------------------------------------------------------


@declining
def build_stft(ctx) -> FunctionProto | None:
    """``STFT`` as gathered frames times a DFT matrix."""
    node = ctx.node
    elem = float_elem(ctx, 0)
    rank = ctx.rank(node.input[0]) if node.input else None
    if (elem is None or len(node.input) > 4 or not all(_present(node.input, i) for i in (0, 1))
            or not (_present(node.input, 2) or _present(node.input, 3))
            or len(node.output) != 1 or not attributes_known(node, ["onesided"])
            or rank not in (None, 3)):
        raise Declined("needs signal of a known float type (rank 3 where declared), "
                       "frame_step, a window or a frame_length, one output, only onesided")
    onesided = ctx.attribute("onesided", 1)
    b = Body(body_opset(ctx))
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
    cos, sin = _turns(b, product, length)
    cos, sin = b.cast(cos, elem), b.cast(b.op("Neg", sin), elem)  # e^(-2 pi i t k / n)
    out_real = b.op("Sub", b.op("MatMul", real, cos), b.op("MatMul", imag, sin))
    out_imag = b.op("Add", b.op("MatMul", real, sin), b.op("MatMul", imag, cos))
    y = b.op("Concat", b.unsqueeze(out_real, [-1]), b.unsqueeze(out_imag, [-1]), axis=-1)
    return b.function(DOMAIN, "stft", formal_inputs(node, ["signal", "frame_step", "window",
                                                           "frame_length"]), [y])


def _turns(b: Body, product: str, n: str) -> tuple[str, str]:
    """``cos`` and ``sin`` of ``2 pi product / n`` in double (``product`` int64, ``0 <=
    product < n``), exactly 0 / +-1 at quarter turns (``4 product`` a multiple of ``n``), as
    an FFT gives them."""
    zero, four = b.const(np.array(0, np.int64)), b.const(np.array(4, np.int64))
    angle = b.op("Div", b.op("Mul", b.cast(product, TensorProto.DOUBLE),
                             b.const(np.array(2 * math.pi), np.float64)),
                 b.cast(n, TensorProto.DOUBLE))
    quarter = b.op("Mul", product, four)
    exact = b.op("Equal", b.op("Mod", quarter, n), zero)
    turn = b.op("Mod", b.op("Div", quarter, n), four)
    return tuple(b.op("Where", exact, b.op("Gather", b.const(np.array(table), np.float64),
                                           turn, axis=0), b.op(f, angle))
                 for f, table in (("Cos", [1.0, 0.0, -1.0, 0.0]),
                                  ("Sin", [0.0, 1.0, 0.0, -1.0])))


# -- DFT ------------------------------------------------------------------------------------


def _dft_axis(ctx, rank: int) -> int | None:
    """The signal axis as a non-negative index (an attribute before opset 20, a constant
    input from it); None for an axis the caller feeds."""
    node = ctx.node
    if ctx.opset < 20:
        axis = ctx.attribute("axis", 1)
    elif _present(node.input, 2):
        value = ctx.constant(node.input[2])
        if value is None:
            return None
        if value.size != 1:
            raise Declined("needs a one-element axis")
        axis = int(value.reshape(-1)[0])
    else:
        axis = -2
    if not (-rank <= axis <= rank - 2) or axis % rank == rank - 1:
        raise Declined(f"axis {axis} is not a signal axis of a rank-{rank} input")
    return axis % rank


@declining
def build_dft(ctx) -> FunctionProto | None:
    """``DFT`` as matrix products with ``cos``/``sin`` tables (see the module's
    docstring)."""
    node = ctx.node
    elem = float_elem(ctx, 0)
    shape = ctx.shape(node.input[0]) if node.input else None
    if (elem is None or shape is None or shape[-1] not in (1, 2) or len(node.output) != 1
            or not attributes_known(node, ["inverse", "onesided", "axis"])):
        raise Declined("needs an input of a known float type and rank whose last dimension "
                       "(1 or 2) is known, one output")
    rank = len(shape)
    axis = _dft_axis(ctx, rank)
    b = Body(body_opset(ctx))
    if axis is not None:
        y = _dft_along(b, ctx, axis, rank, shape[-1], elem)
    else:  # a caller-fed axis: an If per signal axis, the last one's DFT in the end
        fed = b.scalar("axis")
        fed = b.op("Where", b.op("Less", fed, b.const(np.array(0, np.int64))),
                   b.op("Add", fed, b.const(np.array(rank, np.int64))), fed)

        def dispatch(builder: Body, axes: list[int]) -> str:
            if len(axes) == 1:
                return _dft_along(builder, ctx, axes[0], rank, shape[-1], elem)
            then_b, else_b = builder.child(), builder.child()
            then_out = _dft_along(then_b, ctx, axes[0], rank, shape[-1], elem)
            else_out = dispatch(else_b, axes[1:])
            branches = {key: helper.make_graph(
                part.nodes, part.fresh("branch"), [],
                [helper.make_tensor_value_info(out, elem, None)])
                for key, part, out in (("then_branch", then_b, then_out),
                                       ("else_branch", else_b, else_out))}
            return builder.op("If", builder.op("Equal", fed, builder.const(
                np.array(axes[0], np.int64))), **branches)

        y = dispatch(b, list(range(rank - 1)))
    return b.function(DOMAIN, "dft", formal_inputs(node, ["input", "dft_length", "axis"]), [y])


def _dft_along(b: Body, ctx, axis: int, rank: int, parts: int, elem: int) -> str:
    """The DFT of ``input`` along ``axis`` (see :func:`build_dft`)."""
    node = ctx.node
    inverse, onesided = ctx.attribute("inverse", 0), ctx.attribute("onesided", 0)
    zero, one, two = (b.const(np.array(v, np.int64)) for v in (0, 1, 2))
    x = "input"
    last = rank - 2
    perm = list(range(rank))
    perm[axis], perm[last] = last, axis  # a swap: its own inverse
    if axis != last:
        x = b.op("Transpose", x, perm=perm)
    size = b.shape_at(b.op("Shape", x), last)
    irfft = bool(inverse and onesided)
    if _present(node.input, 1):
        n = b.scalar("dft_length")
    else:
        n = b.op("Mul", two, b.op("Sub", size, one)) if irfft else size
    half = b.op("Add", b.op("Div", n, two), one)  # n // 2 + 1
    kept = half if irfft else n  # the input's length along the axis, cut or zero-padded
    x = b.slice(x, [0], b.vector(kept), [last])
    missing = b.op("Max", b.op("Sub", kept, b.shape_at(b.op("Shape", x), last)), zero)
    pads = b.op("Concat", b.ints([0] * (rank + last)), b.vector(missing), b.ints([0]), axis=0)
    x = b.op("Pad", x, pads)
    real = b.squeeze(b.slice(x, [0], [1], [rank - 1]), [rank - 1])          # (..., L)
    imag = b.squeeze(b.slice(x, [1], [2], [rank - 1]), [rank - 1]) if parts == 2 else None
    rows = b.op("Range", zero, kept, one)
    cols = b.op("Range", zero, n if (irfft or not onesided or inverse) else half, one)
    product = b.op("Mod", b.op("Mul", b.unsqueeze(rows, [1]), b.unsqueeze(cols, [0])), n)
    cos, sin = _turns(b, product, n)
    if not inverse:  # e^(-2 pi i t k / n) forward, e^(+...) inverse
        sin = b.op("Neg", sin)
    if inverse:
        scale = b.op("Div", b.const(np.array(1.0), np.float64), b.cast(n, TensorProto.DOUBLE))
        if irfft:  # the other half by Hermitian symmetry: bins 1 .. (n - 1) // 2 twice
            doubled = b.op("And", b.op("Greater", rows, zero),
                           b.op("Less", b.op("Mul", rows, two), n))
            weight = b.op("Add", b.cast(doubled, TensorProto.DOUBLE),
                          b.const(np.array(1.0), np.float64))
            scale = b.op("Mul", b.unsqueeze(weight, [1]), scale)
        cos, sin = b.op("Mul", cos, scale), b.op("Mul", sin, scale)
    cos, sin = b.cast(cos, elem), b.cast(sin, elem)
    out_real = b.op("MatMul", real, cos)
    if imag is not None:
        out_real = b.op("Sub", out_real, b.op("MatMul", imag, sin))
    if irfft:
        y = b.unsqueeze(out_real, [-1])
    else:
        out_imag = b.op("MatMul", real, sin)
        if imag is not None:
            out_imag = b.op("Add", out_imag, b.op("MatMul", imag, cos))
        y = b.op("Concat", b.unsqueeze(out_real, [-1]), b.unsqueeze(out_imag, [-1]), axis=-1)
    return b.op("Transpose", y, perm=perm) if axis != last else y


# -- MelWeightMatrix ------------------------------------------------------------------------


@declining
def build_mel_weight_matrix(ctx) -> FunctionProto | None:
    """The reference evaluator's triangular mel filters, in double."""
    node = ctx.node
    if (len(node.input) != 5 or not all(_present(node.input, i) for i in range(5))
            or len(node.output) != 1 or not attributes_known(node, ["output_datatype"])):
        raise Declined("needs its 5 inputs given, one output, only output_datatype")
    out_type = ctx.attribute("output_datatype", TensorProto.FLOAT)
    b = Body(body_opset(ctx))
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


def samples() -> dict[str, list[OpSample]]:
    """The samples of this module's ops, by op type."""
    return {
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
        "DFT": [
            OpSample([Arg("T[2,10,1]")], opset=20, name="real", tolerance=(1e-4, 1e-4)),
            OpSample([Arg("T[2,8,2]")], opset=20, name="complex", tolerance=(1e-4, 1e-4)),
            OpSample([Arg("T[2,10,1]")], attributes={"onesided": 1}, opset=20,
                     name="onesided", tolerance=(1e-4, 1e-4)),
            OpSample([Arg("T[3,7,2]")], attributes={"inverse": 1}, opset=20,
                     name="inverse", tolerance=(1e-4, 1e-4)),
            OpSample([Arg("T[2,6,2]")], attributes={"inverse": 1, "onesided": 1}, opset=20,
                     name="irfft", tolerance=(1e-4, 1e-4)),
            OpSample([Arg("T[2,6,2]"), Arg("int64[]", values=11, constant=True)],
                     attributes={"inverse": 1, "onesided": 1}, opset=20,
                     name="irfft-odd-length", tolerance=(1e-4, 1e-4)),
            OpSample([Arg("T[2,10,1]"), Arg("int64[]", values=16)], opset=20,
                     name="zero-padded", tolerance=(1e-4, 1e-4)),
            OpSample([Arg("T[2,10,2]"), Arg("int32[]", values=6)],
                     attributes={"onesided": 1}, opset=20, name="cut",
                     tolerance=(1e-4, 1e-4)),
            OpSample([Arg("T[2,5,4,1]"), None, Arg("int64[]", values=1, constant=True)],
                     opset=20, name="axis-1", tolerance=(1e-4, 1e-4)),
            OpSample([Arg("T[2,5,4,2]")], attributes={"axis": 2}, opset=17,
                     name="axis-attribute", tolerance=(1e-4, 1e-4)),
            OpSample([Arg("T[2,5,4,2]"), None, Arg("int64[]", values=-3)], opset=20,
                     name="axis-fed", tolerance=(1e-4, 1e-4)),
            OpSample([Arg("T[2,6,5,2]"), None, Arg("int64[]", values=1)],
                     attributes={"inverse": 1, "onesided": 1}, opset=20,
                     name="irfft-axis-fed", tolerance=(1e-4, 1e-4)),
        ],
        "MelWeightMatrix": [
            OpSample([Arg("int32[]", values=8), Arg("int32[]", values=16),
                      Arg("int32[]", values=8192), Arg("float[]", values=0.0),
                      Arg("float[]", values=8192 / 2)], ["float"], opset=17),
            OpSample([Arg("int64[]", values=20), Arg("int64[]", values=512),
                      Arg("int64[]", values=16000), Arg("float[]", values=50.0),
                      Arg("float[]", values=7600.0)], ["double"],
                     {"output_datatype": TensorProto.DOUBLE}, opset=17, name="double")],
    }
