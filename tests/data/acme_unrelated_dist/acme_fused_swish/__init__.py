"""An unrelated third-party plugin: ``acme`` registers ``com.acme::FusedSwish`` (as this
repository's test plugins do), a decomposition and its kernel. Installed next to the suite,
it must change no test's result."""

from __future__ import annotations

import numpy as np
from onnx import parser

from rewriter.plugin import hookimpl, kernel

FUSED_SWISH = parser.parse_function("""
<domain: "com.acme", opset_import: ["": 18]>
FusedSwish <alpha: float = 1.0> (x) => (y) {
    a = Constant <value_float: float = @alpha> ()
    ac = CastLike (a, x)
    ax = Mul (ac, x)
    s = Sigmoid (ax)
    y = Mul (x, s)
}
""")


@kernel(signatures=["float -> float"], attributes={"alpha": 1.0})
def fused_swish(x, *, alpha):
    return (x / (1 + np.exp(-alpha * x))).astype(x.dtype)


@hookimpl
def register_decompositions(registry):
    registry.add("com.acme", "FusedSwish", FUSED_SWISH, description="acme (installed)")


@hookimpl
def register_kernels(registry):
    registry.add("com.acme", "FusedSwish", fused_swish)
