"""ai.onnx.contrib::NegPos: split a tensor into its non-positive and positive parts (as
onnxruntime-extensions does: NaN and -0.0 go to the first output)."""

from __future__ import annotations

import numpy as np

from rewriter.plugin import kernel as _kernel


@_kernel(signatures=["float -> float, float"])
def kernel(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    positive = x > 0
    zero = np.zeros((), dtype=x.dtype)
    return np.where(positive, zero, x), np.where(positive, x, zero)
