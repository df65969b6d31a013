"""ai.onnx.contrib::SuperResolutionPostProcess (once in onnxruntime-extensions, removed
since): scale Y (1, 1, H, W) by 255, resize Cr and Cb bicubically (OpenCV INTER_CUBIC) to
H x W, convert back to BGR, saturate to uint8 and encode as JPEG (quality 95), returned as
(1, N) bytes. The encoder is Pillow's, not OpenCV's: compare decoded pixels, not bytes."""

from __future__ import annotations

import numpy as np
from rewriter_custom_ops._color import resize_bicubic, saturate_u8, ycrcb_to_bgr
from rewriter_custom_ops._images import encode

from rewriter.plugin import kernel as _kernel


@_kernel(signatures=["float, float, float -> uint8"], requires=("PIL",))
def kernel(y: np.ndarray, cr: np.ndarray, cb: np.ndarray) -> np.ndarray:
    if y.ndim != 4 or cr.ndim != 4 or cb.ndim != 4:
        raise ValueError("SuperResolutionPostProcess: expecting 3 channels y, cr and cb "
                         "shaped (1, 1, H, W)")
    luma = y[0, 0].astype(np.float32) * np.float32(255)
    h, w = luma.shape
    bgr = ycrcb_to_bgr(luma, resize_bicubic(cr[0, 0], h, w), resize_bicubic(cb[0, 0], h, w))
    data = encode(saturate_u8(bgr), "jpg", bgr=True, quality=95)
    return data.reshape(1, -1)
