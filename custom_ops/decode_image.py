"""com.microsoft.extensions::DecodeImage: encoded bytes -> HxWx3 uint8, BGR by default
(``color_space`` "bgr" or "rgb"). onnxruntime-extensions runs this op natively; this kernel
is the reference (Pillow) used where that library is absent and as the comparison oracle.
For lossless formats (PNG) it is pixel-exact with the native op; JPEG decoders differ."""

from __future__ import annotations

import numpy as np
from rewriter_custom_ops._images import decode

from rewriter.plugin import kernel as _kernel


@_kernel(signatures=["uint8 -> uint8"], attributes={"color_space": "bgr"},
         requires=("PIL",))
def kernel(encoded: np.ndarray, *, color_space: str) -> np.ndarray:
    space = color_space.lower()
    if space not in ("bgr", "rgb"):
        raise ValueError("DecodeImage: color_space must be 'bgr' or 'rgb'")
    return decode(encoded, space.upper())
