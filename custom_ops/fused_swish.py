"""FusedSwish: ``y = x * sigmoid(alpha * x)``, an example kernel for a proprietary op.

Not registered by the built-in plugin (the project does not own any vendor's domain): a
plugin registers it for its op, e.g.
``registry.add("com.acme", "FusedSwish", "rewriter_custom_ops.fused_swish:kernel")``.
"""

from __future__ import annotations

import numpy as np

from rewriter.plugin import kernel as _kernel


@_kernel(signatures=["float -> float", "double -> double"], attributes={"alpha": 1.0})
def kernel(x: np.ndarray, *, alpha: float) -> np.ndarray:
    """x * sigmoid(alpha * x), computed stably for large |alpha * x|."""
    z = (alpha * x).astype(x.dtype, copy=False)
    # sigmoid without overflow: exp of a non-positive number only
    e = np.exp(-np.abs(z))
    s = np.where(z >= 0, 1 / (1 + e), e / (1 + e)).astype(x.dtype, copy=False)
    with np.errstate(invalid="ignore"):
        # sigmoid underflows to 0 exactly where x * s has the limit 0 (x = -inf gives NaN)
        y = np.where(s == 0, np.copysign(np.zeros((), x.dtype), x), x * s)
    return y.astype(x.dtype, copy=False)
