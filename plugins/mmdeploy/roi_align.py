"""``MMCVRoiAlign(input, rois)`` (avg mode) as ``RoiAlign`` on the split rois."""

from __future__ import annotations

from onnx import FunctionProto, TensorProto, helper

from rewriter.plugin import Declined
from rewriter.plugin import present as _present

from .common import (
    ROI_ALIGN_HALF_PIXEL_OPSET,
    ROI_ALIGN_OPSETS,
    is_float,
    make_function,
    node_attributes,
)

_ROI_ALIGN_ATTRS = {"output_height", "output_width", "spatial_scale", "sampling_ratio",
                    "mode", "aligned"}


def build_roi_align(ctx) -> FunctionProto | None:
    """MMCVRoiAlign (avg) -> RoiAlign on the split rois."""
    node = ctx.node
    attrs = node_attributes(node)
    if set(attrs) - _ROI_ALIGN_ATTRS or not is_float(ctx):
        raise Declined("unknown attribute(s), or inputs not float")
    if not (_present(node.input, 0) and _present(node.input, 1)) or len(node.output) != 1:
        raise Declined("needs input and rois given and one output")
    mode = attrs.get("mode", b"avg")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if mode != "avg":
        raise Declined("only mode 'avg' is decomposed")
    aligned = attrs.get("aligned", 1)
    roi_attrs = dict(output_height=attrs.get("output_height", 1),
                     output_width=attrs.get("output_width", 1),
                     spatial_scale=float(attrs.get("spatial_scale", 1.0)),
                     sampling_ratio=attrs.get("sampling_ratio", 0), mode="avg")
    if ctx.opset >= ROI_ALIGN_HALF_PIXEL_OPSET:
        roi_attrs["coordinate_transformation_mode"] = (
            "half_pixel" if aligned else "output_half_pixel")
    elif aligned:
        raise Declined("aligned=1 needs RoiAlign's half_pixel mode (opset 16)")
    body = [
        helper.make_node("Constant", [], ["zero"],
                         value=helper.make_tensor("zero", TensorProto.INT64, [], [0])),
        helper.make_node("Constant", [], ["box_columns"],
                         value=helper.make_tensor("box_columns", TensorProto.INT64, [4],
                                                  [1, 2, 3, 4])),
        helper.make_node("Gather", ["rois", "zero"], ["batch_float"], axis=1),
        helper.make_node("Cast", ["batch_float"], ["batch_indices"], to=TensorProto.INT64),
        helper.make_node("Gather", ["rois", "box_columns"], ["boxes"], axis=1),
        helper.make_node("RoiAlign", ["input", "boxes", "batch_indices"], ["output"],
                         **roi_attrs),
    ]
    return make_function("mmcv_roi_align", ["input", "rois"], ["output"], body,
                     max(ctx.opset, ROI_ALIGN_OPSETS[0]))
