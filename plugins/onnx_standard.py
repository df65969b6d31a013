"""Decompositions ``onnx-standard``: standard ops a runtime lacks for some element types,
written with other standard ops where the result is the same bit for bit.

* ``BitCast(x, to)`` from ``bool`` to ``uint8`` or ``int8``: a ``bool`` element is stored as
  one byte holding 0 or 1, so reinterpreting it is ``Cast`` (onnxruntime 1.32 has BitCast-26
  but not for ``bool``). Other pairs are declined: reinterpreting bits of other types is no
  arithmetic ``Cast``.
"""

from __future__ import annotations

from onnx import FunctionProto, TensorProto, helper

from rewriter import hookimpl
from rewriter.registry import OpSample

BITCAST_OPSETS = (26, None)  # BitCast is new in opset 26
_BOOL_BITCASTS = {TensorProto.UINT8, TensorProto.INT8}


def build_bitcast(ctx) -> FunctionProto | None:
    """``Cast`` for a bitcast of ``bool`` to a one-byte integer type."""
    to = ctx.attribute("to")
    if list(ctx.input_types or [])[:1] != ["tensor(bool)"] or to not in _BOOL_BITCASTS:
        return None
    if len(ctx.node.attribute) != 1 or len(ctx.node.output) != 1:
        return None
    return helper.make_function(
        "onnx-standard", "bitcast_bool", ["x"], ["y"],
        [helper.make_node("Cast", ["x"], ["y"], to=to)],
        [helper.make_opsetid("", ctx.opset)])


@hookimpl
def register_decompositions(registry):
    registry.add("", "BitCast", build_bitcast, opsets=BITCAST_OPSETS, dtypes=("bool",),
                 description="onnx-standard:BitCast (bool to uint8/int8 as Cast)",
                 oracle="reference",  # the reference evaluator's own BitCast (numpy view)
                 samples=[OpSample(["T[2,3]"], [name], {"to": to}, name=name)
                          for name, to in (("uint8", TensorProto.UINT8),
                                           ("int8", TensorProto.INT8))])
