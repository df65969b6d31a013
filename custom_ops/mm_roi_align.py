"""mmcv/mmdeploy ``MMCVRoiAlign``: RoIAlign over ``rois`` rows ``[batch, x1, y1, x2, y2]``.

For RoI ``r`` (``offset = 0.5`` if ``aligned`` else 0): the box is
``start = (x1, y1) * spatial_scale - offset``, ``size = (x2 - x1, y2 - y1) * spatial_scale``
(at least 1 when not ``aligned``), cut into ``output_height x output_width`` bins; each bin
is sampled on a ``gh x gw`` grid (``sampling_ratio``, or ``ceil(size / output)`` when 0) at
``start + (p + (i + 0.5) / g) * bin``; a sample is Caffe2's bilinear interpolation
(:func:`bilinear_sample`); ``mode="avg"`` averages the samples (divided by
``max(gh * gw, 1)``), ``mode="max"`` keeps the largest (``-10000`` when the grid is empty),
as mmcv's ``ROIAlignForwardCPU``. A batch index outside the input gives zeros (mmcv reads
out of bounds).
"""

from __future__ import annotations

import math

import numpy as np

from rewriter.plugin import kernel as _kernel

F32 = np.float32


def bilinear_sample(feature: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Caffe2/mmcv bilinear interpolation of ``feature`` (C, H, W) at points ``(y, x)``
    (same shape S), giving (C, *S): a point with ``y < -1``, ``y > H``, ``x < -1`` or
    ``x > W`` is 0; otherwise coordinates below 0 become 0, and one at or beyond the last
    row/column uses that row/column alone. Computed in float32, as the C++ kernels do."""
    _, height, width = feature.shape
    y = np.asarray(y, F32)
    x = np.asarray(x, F32)
    outside = (y < -1) | (y > height) | (x < -1) | (x > width) | np.isnan(y) | np.isnan(x)
    y = np.clip(np.nan_to_num(y), 0, height).astype(F32)
    x = np.clip(np.nan_to_num(x), 0, width).astype(F32)
    y_low = y.astype(np.int64)
    x_low = x.astype(np.int64)
    y_last = y_low >= height - 1
    x_last = x_low >= width - 1
    y_low = np.where(y_last, height - 1, y_low)
    x_low = np.where(x_last, width - 1, x_low)
    y_high = np.where(y_last, y_low, y_low + 1)
    x_high = np.where(x_last, x_low, x_low + 1)
    y = np.where(y_last, y_low.astype(F32), y)
    x = np.where(x_last, x_low.astype(F32), x)
    ly = (y - y_low.astype(F32)).astype(F32)
    lx = (x - x_low.astype(F32)).astype(F32)
    hy = (F32(1) - ly).astype(F32)
    hx = (F32(1) - lx).astype(F32)
    keep = (~outside).astype(F32)
    w1, w2, w3, w4 = hy * hx * keep, hy * lx * keep, ly * hx * keep, ly * lx * keep
    feature = feature.astype(F32, copy=False)
    return (w1 * feature[:, y_low, x_low] + w2 * feature[:, y_low, x_high]
            + w3 * feature[:, y_high, x_low] + w4 * feature[:, y_high, x_high]).astype(F32)


def grid_size(sampling_ratio: int, roi_size: float, pooled: int) -> int:
    """Samples per bin along one axis (``ceil(roi / pooled)`` when ``sampling_ratio`` is
    0), as the C++ ``int`` conversion gives it."""
    if sampling_ratio > 0:
        return sampling_ratio
    value = math.ceil(F32(roi_size) / F32(pooled)) if math.isfinite(roi_size) else 0
    return int(value)


def bin_offsets(pooled: int, grid: int, bin_size: np.float32) -> np.ndarray:
    """(pooled, grid) sample offsets ``p * bin + (i + 0.5) * bin / grid`` (float32)."""
    p = np.arange(pooled, dtype=F32)[:, None]
    i = np.arange(max(grid, 0), dtype=F32)[None, :]
    return (p * bin_size + (i + F32(0.5)) * bin_size / F32(max(grid, 1))).astype(F32)


def pool(samples: np.ndarray, grid_h: int, grid_w: int, mode: str) -> np.ndarray:
    """(C, ph, gh, pw, gw) samples to (C, ph, pw) by ``mode`` ("avg" or "max")."""
    channels, ph, _, pw, _ = samples.shape
    if grid_h <= 0 or grid_w <= 0:
        fill = 0.0 if mode == "avg" else -10000.0
        return np.full((channels, ph, pw), fill, F32)
    if mode == "max":
        return np.maximum(samples.max(axis=(2, 4)), F32(-10000)).astype(F32)
    count = F32(max(grid_h * grid_w, 1))
    return (samples.sum(axis=(2, 4), dtype=F32) / count).astype(F32)


def roi_align(features: np.ndarray, rois: np.ndarray, *, output_height: int,
              output_width: int, spatial_scale: float, sampling_ratio: int, mode: str,
              aligned: int) -> np.ndarray:
    """mmcv's RoIAlign (see the module docstring)."""
    if mode not in ("avg", "max"):
        raise ValueError(f"MMCVRoiAlign: mode must be 'avg' or 'max', not {mode!r}")
    batch, channels = features.shape[:2]
    scale = F32(spatial_scale)
    offset = F32(0.5) if aligned else F32(0)
    out = np.zeros((rois.shape[0], channels, output_height, output_width), F32)
    for n, roi in enumerate(rois.astype(F32)):
        index = int(roi[0]) if np.isfinite(roi[0]) else -1
        if not 0 <= index < batch:
            continue
        start_w, start_h = roi[1] * scale - offset, roi[2] * scale - offset
        roi_w = F32(roi[3] * scale - offset - start_w)
        roi_h = F32(roi[4] * scale - offset - start_h)
        if not aligned:
            roi_w, roi_h = max(roi_w, F32(1)), max(roi_h, F32(1))
        bin_h, bin_w = F32(roi_h / F32(output_height)), F32(roi_w / F32(output_width))
        grid_h = grid_size(sampling_ratio, roi_h, output_height)
        grid_w = grid_size(sampling_ratio, roi_w, output_width)
        ys = (start_h + bin_offsets(output_height, grid_h, bin_h)).astype(F32)
        xs = (start_w + bin_offsets(output_width, grid_w, bin_w)).astype(F32)
        y = np.broadcast_to(ys[:, :, None, None], ys.shape + xs.shape)
        x = np.broadcast_to(xs[None, None], ys.shape + xs.shape)
        samples = bilinear_sample(features[index], y, x)
        out[n] = pool(samples, grid_h, grid_w, mode)
    return out


@_kernel(signatures=["float, float -> float"],
         attributes={"output_height": 1, "output_width": 1, "spatial_scale": 1.0,
                     "sampling_ratio": 0, "mode": "avg", "aligned": 1})
def kernel(features: np.ndarray, rois: np.ndarray, *, output_height: int,
           output_width: int, spatial_scale: float, sampling_ratio: int, mode: str,
           aligned: int) -> np.ndarray:
    """MMCVRoiAlign(input (N, C, H, W), rois (R, 5)) -> (R, C, output_height, output_width)."""
    return roi_align(features, rois, output_height=output_height, output_width=output_width,
                     spatial_scale=spatial_scale, sampling_ratio=sampling_ratio, mode=mode,
                     aligned=aligned)
