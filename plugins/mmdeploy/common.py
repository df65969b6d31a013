"""What the mmdeploy bodies share: the domains, the opset ranges, the node's attributes, the
body builder and the integer types the model declares."""

from __future__ import annotations

import numpy as np
from onnx import FunctionProto, TensorProto, helper

from rewriter.plugin import FunctionBuilder

DOMAINS = ("mmdeploy", "mmcv")
BODY_DOMAIN = "mmdeploy"  # the domain of the bodies' FunctionProtos
OPENVINO = "org.openvinotoolkit"

GRID_SAMPLE_OPSETS = (16, None)
GRID_GATHER_OPSETS = (11, 15)  # Range, Round; GridSample arrives in 16
ROI_ALIGN_OPSETS = (10, None)
ROI_ALIGN_HALF_PIXEL_OPSET = 16
DEFORM_CONV_OPSETS = (19, None)
DEFORM_GATHER_OPSETS = (11, 18)  # Range; DeformConv arrives in 19
BATCHED_NMS_OPSETS = (11, None)  # ScatterND, GatherND, Range, TopK with a k input


def node_attributes(node) -> dict:
    """The node's attributes by name, as Python values."""
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def is_float(ctx) -> bool:
    """The first input is float (or of a type not known)."""
    types = list(ctx.input_types or [])
    return not types or types[0] in (None, "tensor(float)")


def make_function(name: str, inputs: list[str], outputs: list[str], nodes, opset: int
                  ) -> FunctionProto:
    """The body ``mmdeploy::name`` of ``nodes``, importing ai.onnx ``opset``."""
    return helper.make_function(BODY_DOMAIN, name, inputs, outputs, nodes,
                                [helper.make_opsetid("", opset)])


class Body(FunctionBuilder):
    """A function body under construction (constants are int64 unless told otherwise)."""

    default_dtype = np.int64


INT_TYPES = {TensorProto.INT32, TensorProto.INT64}


def declared_int_type(ctx, name: str) -> int | None:
    """The integer element type the model declares for ``name`` (int64 when it says none,
    as torch's exporter writes; None: a type the plugin cannot produce)."""
    declared = ctx.declared.get(name) if ctx.declared else None
    elem = declared.tensor_type.elem_type if declared is not None else 0
    if not elem:
        return TensorProto.INT64
    return elem if elem in INT_TYPES else None
