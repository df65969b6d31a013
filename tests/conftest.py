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


# Its numpy kernel, the oracle that runs an original holding com.acme::FusedSwish (plugin
# source to append to FUSED_SWISH_SOURCE; the plugin imports `hookimpl` from rewriter).
FUSED_SWISH_KERNEL_SOURCE = '''
import numpy as np

from rewriter.kernels import kernel


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
