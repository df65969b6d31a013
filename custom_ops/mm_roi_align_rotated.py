"""mmcv/mmdeploy ``MMCVRoIAlignRotated``: RoIAlign over rotated boxes, ``rois`` rows
``[batch, cx, cy, w, h, theta]`` (theta in radians, counter-clockwise unless
``clockwise``).

For RoI ``r`` (``offset = 0.5`` if ``aligned`` else 0): centre ``c = (cx, cy) *
spatial_scale - offset``, size ``(w, h) * spatial_scale`` (at least 1 when not ``aligned``),
cut into ``output_height x output_width`` bins sampled on a ``gh x gw`` grid
(``sampling_ratio``, or ``ceil(size / output)`` when 0). A sample at ``(yy, xx)`` relative
to the box's top-left corner ``(-h/2, -w/2)`` is rotated about the centre,
``y = yy cos t - xx sin t + cy``, ``x = yy sin t + xx cos t + cx`` (``t = -theta`` when
``clockwise``), bilinearly interpolated as Caffe2 does, and the bin is the average of its
samples (divided by ``max(gh * gw, 1)``): mmdeploy's ``ROIAlignRotatedForwardCPU``. A batch
index outside the input gives zeros (mmdeploy reads out of bounds).
"""

from __future__ import annotations

import numpy as np
from rewriter_custom_ops.mm_roi_align import bilinear_sample, bin_offsets, grid_size, pool

from rewriter.plugin import kernel as _kernel

F32 = np.float32


def roi_align_rotated(features: np.ndarray, rois: np.ndarray, *, output_height: int,
                      output_width: int, spatial_scale: float, sampling_ratio: int,
                      aligned: int, clockwise: int) -> np.ndarray:
    """mmdeploy's rotated RoIAlign (see the module docstring)."""
    batch, channels = features.shape[:2]
    scale = F32(spatial_scale)
    offset = F32(0.5) if aligned else F32(0)
    out = np.zeros((rois.shape[0], channels, output_height, output_width), F32)
    for n, roi in enumerate(rois.astype(F32)):
        index = int(roi[0]) if np.isfinite(roi[0]) else -1
        if not 0 <= index < batch:
            continue
        center_w, center_h = F32(roi[1] * scale - offset), F32(roi[2] * scale - offset)
        roi_w, roi_h = F32(roi[3] * scale), F32(roi[4] * scale)
        theta = -roi[5] if clockwise else roi[5]
        cos_t, sin_t = F32(np.cos(theta)), F32(np.sin(theta))
        if not aligned:
            roi_w, roi_h = max(roi_w, F32(1)), max(roi_h, F32(1))
        bin_h, bin_w = F32(roi_h / F32(output_height)), F32(roi_w / F32(output_width))
        grid_h = grid_size(sampling_ratio, roi_h, output_height)
        grid_w = grid_size(sampling_ratio, roi_w, output_width)
        yy = (F32(-roi_h / F32(2)) + bin_offsets(output_height, grid_h, bin_h)).astype(F32)
        xx = (F32(-roi_w / F32(2)) + bin_offsets(output_width, grid_w, bin_w)).astype(F32)
        yy = yy[:, :, None, None]
        xx = xx[None, None]
        y = (yy * cos_t - xx * sin_t + center_h).astype(F32)
        x = (yy * sin_t + xx * cos_t + center_w).astype(F32)
        samples = bilinear_sample(features[index], y, x)
        out[n] = pool(samples, grid_h, grid_w, "avg")
    return out


@_kernel(signatures=["float, float -> float"],
         attributes={"output_height": int, "output_width": int, "spatial_scale": 1.0,
                     "sampling_ratio": 0, "aligned": 1, "clockwise": 0})
def kernel(features: np.ndarray, rois: np.ndarray, *, output_height: int,
           output_width: int, spatial_scale: float, sampling_ratio: int, aligned: int,
           clockwise: int) -> np.ndarray:
    """MMCVRoIAlignRotated(features (N, C, H, W), rois (R, 6)) -> (R, C, oh, ow)."""
    return roi_align_rotated(features, rois, output_height=output_height,
                             output_width=output_width, spatial_scale=spatial_scale,
                             sampling_ratio=sampling_ratio, aligned=aligned,
                             clockwise=clockwise)
