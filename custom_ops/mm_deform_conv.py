"""Deformable convolution (v1 and v2) in numpy: the oracle for mmcv's
``MMCVDeformConv2d`` / ``MMCVModulatedDeformConv2d`` and OpenVINO's ``DeformableConv2D``.

``y[n, o, p] = bias[o] + sum_{c in group(o), k} w[o, c, k] * m[n, g(c), k, p] *
x[n, c](p * stride - pad_begin + k * dilation + d[n, g(c), k, p])`` with ``d`` the offsets,
channel ``g * 2K + 2k`` the row (y) and ``g * 2K + 2k + 1`` the column (x) offset of kernel
tap ``k`` in offset group ``g(c) = c // (C / offset_groups)``, and ``m`` the mask (1 for
v1). Two ways to read ``x`` between pixels:

* ``"torch"`` (mmcv, torchvision, ONNX ``DeformConv``): a point with ``-1 < y < H`` and
  ``-1 < x < W`` is interpolated bilinearly from its four neighbours, those outside the
  image counting as 0; other points are 0.
* ``"openvino"`` (``DeformableConvolution-8`` with ``bilinear_interpolation_pad=false``, what
  OpenVINO's ONNX importer builds for ``DeformableConv2D``): a point with ``0 <= y < H`` and
  ``0 <= x < W`` is interpolated between rows ``floor(y)`` and ``min(ceil(y), H - 1)`` (and
  likewise columns), so the last row/column extends to the border; other points are 0.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

F32 = np.float32


def _sample_torch(image: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
    _, height, width = image.shape
    valid = (y > -1) & (y < height) & (x > -1) & (x < width)
    y = np.where(valid, y, 0).astype(F32)
    x = np.where(valid, x, 0).astype(F32)
    y0 = np.floor(y).astype(np.int64)
    x0 = np.floor(x).astype(np.int64)
    ly, lx = (y - y0).astype(F32), (x - x0).astype(F32)
    out = np.zeros((image.shape[0],) + y.shape, F32)
    for dy, wy in ((0, F32(1) - ly), (1, ly)):
        for dx, wx in ((0, F32(1) - lx), (1, lx)):
            yy, xx = y0 + dy, x0 + dx
            inside = valid & (yy >= 0) & (yy < height) & (xx >= 0) & (xx < width)
            value = image[:, np.clip(yy, 0, height - 1), np.clip(xx, 0, width - 1)]
            out += np.where(inside, wy * wx, F32(0)).astype(F32) * value
    return out


def _sample_openvino(image: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
    _, height, width = image.shape
    valid = (y >= 0) & (y < height) & (x >= 0) & (x < width)
    y = np.where(valid, y, 0).astype(F32)
    x = np.where(valid, x, 0).astype(F32)
    y1 = np.floor(y).astype(np.int64)
    x1 = np.floor(x).astype(np.int64)
    y2 = np.minimum(np.ceil(y).astype(np.int64), height - 1)
    x2 = np.minimum(np.ceil(x).astype(np.int64), width - 1)
    dist_y, dist_x = (y - y1).astype(F32), (x - x1).astype(F32)
    value = ((F32(1) - dist_x) * (F32(1) - dist_y) * image[:, y1, x1]
             + (F32(1) - dist_x) * dist_y * image[:, y2, x1]
             + dist_x * (F32(1) - dist_y) * image[:, y1, x2]
             + dist_x * dist_y * image[:, y2, x2])
    return np.where(valid, value, F32(0)).astype(F32)


SAMPLERS = {"torch": _sample_torch, "openvino": _sample_openvino}


def deform_conv2d(x: np.ndarray, offset: np.ndarray, weight: np.ndarray,
                  mask: np.ndarray | None = None, bias: np.ndarray | None = None, *,
                  strides: Sequence[int] = (1, 1), pads: Sequence[int] = (0, 0, 0, 0),
                  dilations: Sequence[int] = (1, 1), groups: int = 1,
                  offset_groups: int = 1, sampler: str = "torch") -> np.ndarray:
    """Deformable 2-D convolution (see the module docstring); ``pads`` is ``(top, left,
    bottom, right)``, output float32 of shape (N, O, oh, ow)."""
    sample = SAMPLERS[sampler]
    n_batch, channels, height, width = x.shape
    out_channels, group_channels, kh, kw = weight.shape
    taps = kh * kw
    out_h = (height + pads[0] + pads[2] - (dilations[0] * (kh - 1) + 1)) // strides[0] + 1
    out_w = (width + pads[1] + pads[3] - (dilations[1] * (kw - 1) + 1)) // strides[1] + 1
    if offset.shape[1] != offset_groups * 2 * taps or tuple(offset.shape[2:]) != (out_h,
                                                                               out_w):
        raise ValueError(f"deformable convolution: offset shape {offset.shape} does not fit "
                         f"{offset_groups} offset group(s) of a {kh}x{kw} kernel and a "
                         f"{out_h}x{out_w} output")
    if channels != group_channels * groups or channels % offset_groups:
        raise ValueError("deformable convolution: channel counts do not fit the groups")
    base_y = (np.arange(out_h) * strides[0] - pads[0])[None, :, None] + (
        np.arange(kh) * dilations[0]).repeat(kw)[:, None, None]
    base_x = (np.arange(out_w) * strides[1] - pads[1])[None, None, :] + (
        np.tile(np.arange(kw) * dilations[1], kh))[:, None, None]
    per_group = channels // offset_groups
    columns = np.zeros((n_batch, channels, taps, out_h, out_w), F32)
    for n in range(n_batch):
        for g in range(offset_groups):
            d = offset[n, g * 2 * taps:(g + 1) * 2 * taps].reshape(taps, 2, out_h, out_w)
            y = (base_y.astype(F32) + d[:, 0].astype(F32)).astype(F32)
            xs = (base_x.astype(F32) + d[:, 1].astype(F32)).astype(F32)
            cols = sample(x[n, g * per_group:(g + 1) * per_group].astype(F32), y, xs)
            if mask is not None:
                cols = cols * mask[n, g * taps:(g + 1) * taps].astype(F32)[None]
            columns[n, g * per_group:(g + 1) * per_group] = cols
    out = np.zeros((n_batch, out_channels, out_h, out_w), np.float64)
    per_out = out_channels // groups
    for grp in range(groups):
        w = weight[grp * per_out:(grp + 1) * per_out].reshape(per_out, -1).astype(np.float64)
        cols = columns[:, grp * group_channels:(grp + 1) * group_channels].reshape(
            n_batch, group_channels * taps, out_h * out_w).astype(np.float64)
        out[:, grp * per_out:(grp + 1) * per_out] = (w @ cols).reshape(
            n_batch, per_out, out_h, out_w)
    if bias is not None:
        out += bias.astype(np.float64)[None, :, None, None]
    return out.astype(F32)
