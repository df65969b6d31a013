"""com.microsoft's ``Trilu`` (onnxruntime's, before ai.onnx had one), in standard ONNX:

* ``Trilu(X[, k])`` (``upper`` = 1): ai.onnx ``Trilu`` at opset >= 14, else a
  ``Range``-built mask.
"""

from __future__ import annotations

import numpy as np
from onnx import FunctionProto, TensorProto, helper

from rewriter.plugin import Arg, Declined, declining
from rewriter.plugin import present as _present

from .common import (
    DOMAIN,
    Body,
    add,
    any_elem_type,
    body_opset,
    formal_inputs,
    sample,
    single_output,
    unknown_attributes,
)

TRILU_OPSETS = (11, None)


@declining
def build_trilu(ctx) -> FunctionProto | None:
    node = ctx.node
    if (not _present(node.input, 0) or not single_output(node)
            or unknown_attributes(node, ["upper"])):
        raise Declined("takes input (and k), only upper, one output")
    upper = ctx.attribute("upper", 1)
    inputs = formal_inputs(node, ["X", "k"])
    b = Body(body_opset(ctx))
    if b.opset >= 14:
        return b.function(DOMAIN, "trilu", inputs, [b.op("Trilu", *inputs, upper=upper)])
    elem = any_elem_type(ctx, 0)
    if elem is None or elem == TensorProto.BFLOAT16:
        raise Declined("the element type is unknown or bfloat16")
    # column - row compared with k: upper keeps col - row >= k, lower keeps col - row <= k
    shape = b.op("Shape", "X")
    zero, one = b.const(np.array(0, np.int64)), b.const(np.array(1, np.int64))
    rows = b.op("Range", zero, b.op("Gather", shape, b.const(np.array(-2, np.int64))), one)
    cols = b.op("Range", zero, b.op("Gather", shape, b.const(np.array(-1, np.int64))), one)
    offset = b.op("Sub", b.unsqueeze(cols, [0]), b.unsqueeze(rows, [1]))
    k = "k" if _present(node.input, 1) else zero
    keep = (b.op("Not", b.op("Less", offset, k)) if upper
            else b.op("Not", b.op("Greater", offset, k)))
    y = b.op("Where", keep, "X", b.const(np.zeros((), helper.tensor_dtype_to_np_dtype(elem))))
    return b.function(DOMAIN, "trilu", inputs, [y])


def _oracles() -> dict[str, dict]:
    """Trilu's oracle (onnxruntime's own kernel) and samples."""
    ort = "onnxruntime"
    return {
        "Trilu": dict(oracle=ort, samples=[
            sample("T[2,4,5]", *([Arg("int64[]", values=k)] if k is not None else []),
                   opset=opset, attributes={"upper": upper}, name=f"upper{upper}-k{k}")
            for opset, upper, k in [(11, 1, None), (11, 0, 2), (17, 1, -1), (17, 0, None)]]),
    }


def register(registry) -> None:
    """Registers this module's decompositions (called by the package's hook)."""
    checked = _oracles()
    add(registry, "Trilu", build_trilu, TRILU_OPSETS, checked["Trilu"])
