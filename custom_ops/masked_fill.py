"""ai.onnx.contrib::MaskedFill: the strings of ``value`` where ``mask`` is true, as a vector
(onnxruntime-extensions takes a vector or scalar and a mask of the same shape)."""

from __future__ import annotations

import numpy as np

from rewriter.plugin import kernel as _kernel


@_kernel(signatures=["string, bool -> string"])
def kernel(value: np.ndarray, mask: np.ndarray) -> np.ndarray:
    if value.ndim > 1:
        raise ValueError("MaskedFill: the input value must be a vector or a scalar")
    if value.shape != mask.shape:
        raise ValueError("MaskedFill: value and mask must have the same shape")
    return np.asarray(value.reshape(-1)[mask.reshape(-1)], dtype=object)
