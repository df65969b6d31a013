"""ai.onnx.contrib::FastGelu (onnxruntime-extensions ships it for CUDA only): the tanh
approximation of Gelu over ``x + bias`` (bias optional, broadcast numpy-style)."""

from __future__ import annotations

import numpy as np

from rewriter.plugin import kernel as _kernel

_SQRT_2_OVER_PI = 0.7978845608028654


@_kernel(signatures=["float -> float", "float, float -> float", "double -> double",
                     "double, double -> double"])
def kernel(x: np.ndarray, bias: np.ndarray | None = None) -> np.ndarray:
    """0.5 z (1 + tanh(sqrt(2/pi) (z + 0.044715 z^3))), z = x + bias."""
    z = x if bias is None else x + bias
    with np.errstate(over="ignore", invalid="ignore"):
        inner = _SQRT_2_OVER_PI * (z + 0.044715 * z * z * z)
        y = 0.5 * z * (1 + np.tanh(inner))
    # z**3 overflows to +-inf for large |z| (or z is infinite), where tanh is +-1 exactly:
    # y is z, or a zero of z's sign (the formula's limit; inf * 0 would give NaN)
    big = np.isinf(inner) & ~np.isnan(z)
    with np.errstate(invalid="ignore"):
        y = np.where(big, np.where(z > 0, z, np.copysign(0.0, z)), y)
    return y.astype(x.dtype, copy=False)
