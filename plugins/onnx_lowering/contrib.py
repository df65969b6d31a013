"""onnxruntime-extensions' ops (``ai.onnx.contrib``):

* ``ai.onnx.contrib::FastGelu(X[, bias])`` (onnxruntime-extensions; CUDA-only there): the
  com-microsoft plugin's body of ``com.microsoft::FastGelu`` (the same formula over
  ``X + bias``). ``ai.onnx.contrib::NegPos(X)``: ``Where(X > 0, 0, X)`` and
  ``Where(X > 0, X, 0)`` (NaN and -0.0 in the first output, as the library's kernel does).
  ``ai.onnx.contrib::MaskedFill(value, mask)``: ``Compress`` of both flattened (OpenVINO
  reshapes and compresses string tensors).
  Oracle: the custom-ops plugin's Python kernels (written from the library's code); runtimes
  without those kernels (OpenVINO) run the bodies.
"""

from __future__ import annotations

import numpy as np
from onnx import FunctionProto

from rewriter.plugin import Arg, Declined, OpSample, declining

from .common import (
    DOMAIN,
    Body,
    body_opset,
    float_elem,
)

CONTRIB = "ai.onnx.contrib"  # onnxruntime-extensions' domain
CONTRIB_OPSETS = (7, None)  # Where is new in opset 9; FastGelu's body takes what it is given


# -- onnxruntime-extensions: FastGelu, NegPos -----------------------------------------------


def build_contrib_fast_gelu(ctx) -> FunctionProto | None:
    """``ai.onnx.contrib::FastGelu``: the body of ``com.microsoft::FastGelu``."""
    from rewriter_plugins.com_microsoft import build_fast_gelu

    return build_fast_gelu(ctx)


@declining
def build_masked_fill(ctx) -> FunctionProto | None:
    """``ai.onnx.contrib::MaskedFill``: the values where ``mask`` is true, as a vector."""
    node = ctx.node
    if (len(node.input) != 2 or not all(node.input) or len(node.output) != 1
            or node.attribute or body_opset(ctx) < 9):
        raise Declined("needs value and mask, one output, no attributes, opset 9+")
    b = Body(body_opset(ctx))
    flat = b.ints([-1])
    y = b.op("Compress", b.reshape("value", flat), b.reshape("mask", flat), axis=0)
    return b.function(DOMAIN, "masked_fill", ["value", "mask"], [y])


@declining
def build_neg_pos(ctx) -> FunctionProto | None:
    """``ai.onnx.contrib::NegPos``: the non-positive and the positive parts."""
    node = ctx.node
    elem = float_elem(ctx, 0)
    if (elem is None or len(node.input) != 1 or len(node.output) != 2 or node.attribute
            or body_opset(ctx) < 9):
        raise Declined("needs X of a known float type, two outputs, no attributes, opset 9+")
    b = Body(body_opset(ctx))
    zero = b.const(np.array(0.0), elem, hint="zero")
    positive = b.op("Greater", "X", zero)
    negative = b.op("Where", positive, zero, "X")
    return b.function(DOMAIN, "neg_pos", ["X"], [negative, b.op("Where", positive, "X", zero)])


def samples() -> dict[str, list[OpSample]]:
    """The samples of this module's ops, by op type."""
    return {
        "FastGelu": [OpSample(["T[3,4]", "T[4]"], opset=18, name="bias"),
                     OpSample([Arg("T[7]", values=[-30.0, -3.0, -0.5, 0.0, 0.5, 3.0, 30.0])],
                              opset=12, name="no-bias")],
        "MaskedFill": [OpSample([Arg("string[5]", values=np.array(
            ["a", "bb", "", "\u03a9", "c d"], dtype=object)),
            Arg("bool[5]", values=[True, False, True, True, False])], ["string"], opset=14),
            OpSample([Arg("string[]", values=np.array("x", dtype=object)),
                      Arg("bool[]", values=True)], ["string"], opset=14, name="scalar")],
        "NegPos": [OpSample([Arg("T[8]", values=[-1.5, -0.0, 0.0, 2.5, np.inf, -np.inf,
                                                 np.nan, 1e-30])], ["T", "T"], opset=12),
                   OpSample(["T[2,3]"], ["T", "T"], opset=18, name="2d")],
    }
