"""com.microsoft.extensions::EncodeImage: HxWx3 uint8 BGR pixels -> encoded bytes in
``format`` "png" (default) or "jpg". Encoded bytes depend on the encoder; decoded PNG pixels
do not. onnxruntime-extensions runs this op natively; this kernel is the Pillow reference."""

from __future__ import annotations

import numpy as np
from rewriter_custom_ops._images import encode

from rewriter.plugin import kernel as _kernel


@_kernel(signatures=["uint8 -> uint8"], attributes={"format": "png", "color_space": "bgr"},
         requires=("PIL",))
def kernel(pixels: np.ndarray, *, format: str, color_space: str) -> np.ndarray:  # noqa: A002
    if color_space.lower() not in ("bgr", "rgb"):
        raise ValueError("EncodeImage: color_space must be 'bgr' or 'rgb'")
    return encode(pixels, format, bgr=color_space.lower() == "bgr")
