"""ai.onnx.contrib::SuperResolutionPreProcess (once in onnxruntime-extensions, removed
since): decode an image (as BGR), convert it to YCrCb with OpenCV's float formulas and
return Y / 255, Cr and Cb, each shaped (1, 1, H, W)."""

from __future__ import annotations

import numpy as np
from rewriter_custom_ops._color import bgr_to_ycrcb
from rewriter_custom_ops._images import decode

from rewriter.plugin import kernel as _kernel


@_kernel(signatures=["uint8 -> float, float, float"], requires=("PIL",))
def kernel(encoded: np.ndarray):
    y, cr, cb = bgr_to_ycrcb(decode(encoded.reshape(-1), "BGR"))
    h, w = y.shape
    return tuple((c / np.float32(255) if i == 0 else c).reshape(1, 1, h, w)
                 .astype(np.float32) for i, c in enumerate((y, cr, cb)))
