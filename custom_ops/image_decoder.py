"""ai.onnx::ImageDecoder (opset 20; onnxruntime has no kernel for it): decode encoded bytes
to HxWxC uint8 in RGB, BGR or Grayscale (HxWx1).

Decoded with Pillow, as the ONNX reference implementation and the spec's test data are
(equal to them on the spec's JPEG). onnxruntime-extensions' native DecodeImage decodes JPEG
differently (up to 56 levels apart on that test image), so it is not mapped natively.
"""

from __future__ import annotations

import numpy as np
from rewriter_custom_ops._images import decode

from rewriter.plugin import kernel as _kernel

_MODES = {"RGB": "RGB", "BGR": "BGR", "Grayscale": "L"}


@_kernel(signatures=["uint8 -> uint8"], attributes={"pixel_format": "RGB"},
         requires=("PIL",))
def kernel(encoded: np.ndarray, *, pixel_format: str) -> np.ndarray:
    mode = _MODES.get(pixel_format)
    if mode is None:
        raise ValueError(f"ImageDecoder: pixel_format {pixel_format!r} is not one of "
                         f"{', '.join(_MODES)}")
    return decode(encoded, mode)
