"""Shared fixtures: a fresh plugin manager (third-party autoload off), model builders."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest

CORPUS = Path(__file__).resolve().parents[1].parent / "shared" / "corpus"

# com.acme::FusedSwish (x * sigmoid(alpha * x)) as a function, in the source of the test
# plugins written to files (tests/test_rewrite.py, test_kernels.py, test_compare.py); the
# plugin imports `parser` from onnx.
FUSED_SWISH_SOURCE = '''FUSED_SWISH = parser.parse_function("""
<domain: "com.acme", opset_import: ["": 18]>
FusedSwish <alpha: float = 1.0> (x) => (y) {
    a = Constant <value_float: float = @alpha> ()
    ac = CastLike (a, x)
    ax = Mul (ac, x)
    s = Sigmoid (ax)
    y = Mul (x, s)
}
""")
'''


# com.acme::ErfGelu decomposed deliberately wrong (erf(0.8 x) where erf(x / sqrt 2) belongs),
# and its correct numpy kernel `erf_gelu` (the oracle), in the source of test plugins; the
# plugin imports `parser` from onnx and `kernel` from rewriter.plan.kernels.
WRONG_GELU_SOURCE = '''
import math

import numpy as np

WRONG_GELU = parser.parse_function("""
<domain: "com.acme", opset_import: ["": 18]>
ErfGelu (x) => (y) {
    c = Constant <value_float: float = 0.8> ()
    cx = CastLike (c, x)
    h = Constant <value_float: float = 0.5> ()
    hx = CastLike (h, x)
    one = Constant <value_float: float = 1.0> ()
    onex = CastLike (one, x)
    s = Mul (x, cx)
    e = Erf (s)
    p = Add (e, onex)
    q = Mul (x, p)
    y = Mul (q, hx)
}
""")

_erf = np.vectorize(math.erf, otypes=[np.float64])


@kernel(signatures=["float -> float"])
def erf_gelu(x):
    return (0.5 * x * (1 + _erf(x / math.sqrt(2)))).astype(x.dtype)
'''

# Its numpy kernel, the oracle that runs an original holding com.acme::FusedSwish (plugin
# source to append to FUSED_SWISH_SOURCE; the plugin imports `hookimpl` from rewriter).
FUSED_SWISH_KERNEL_SOURCE = '''
import numpy as np

from rewriter.plugin import kernel


@kernel(signatures=["float -> float"], attributes={"alpha": 1.0})
def fused_swish(x, *, alpha):
    return (x / (1 + np.exp(-alpha * x))).astype(x.dtype)


@hookimpl
def register_kernels(registry):
    registry.add("com.acme", "FusedSwish", f"{__name__}:fused_swish")
'''


@pytest.fixture(scope="session")
def plugins():
    from rewriter.manager import load_plugins

    return load_plugins(autoload=False)


@pytest.fixture(scope="session")
def corpus() -> Path:
    if not CORPUS.is_dir():
        pytest.skip(f"corpus folder {CORPUS} is absent")
    return CORPUS


def model_from_text(text: str) -> onnx.ModelProto:
    """Parse ONNX text format, asserting it is well formed."""
    return onnx.parser.parse_model(text)


def write_model(path: Path, model: onnx.ModelProto) -> Path:
    path.write_bytes(model.SerializeToString())
    return path
