"""What the TensorRT bodies share: the domains and opset ranges, the attributes each op
knows, the body builder with its NMS shorthands, the checks that decline a node."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from rewriter.plugin import Declined, FunctionBuilder

DOMAINS = ("", "TRT", "trt.plugins")
BODY_DOMAIN = "trt"  # the domain of the bodies' FunctionProtos
NMS_OPSETS = (11, None)  # NonMaxSuppression with scores/Range/ScatterND/GatherND/TopK(k input)
ATTENTION_OPSETS = (11, None)  # Range, GatherElements, Clip with inputs
MAX_SELECTED = 4096  # EfficientNMS: candidates per image that enter NMS (numSelectedBoxes)
BATCHED_MAX_TOPK = 4096  # BatchedNMS: topK limit (512 threads x 8 blocks)

FLOAT_TYPE = "tensor(float)"
FLOAT_ELEM_TYPES = {"tensor(float)": TensorProto.FLOAT, "tensor(float16)": TensorProto.FLOAT16}

EFFICIENT_ATTRIBUTES = {"score_threshold", "iou_threshold", "max_output_boxes",
                        "background_class", "score_activation", "class_agnostic", "box_coding",
                        "plugin_version", "plugin_namespace"}
EFFICIENT_ONNX_ATTRIBUTES = {"score_threshold", "iou_threshold", "max_output_boxes_per_class",
                             "center_point_box", "plugin_version", "plugin_namespace"}
BATCHED_ATTRIBUTES = {"shareLocation", "backgroundLabelId", "numClasses", "topK", "keepTopK",
                      "scoreThreshold", "iouThreshold", "isNormalized", "clipBoxes",
                      "scoreBits", "caffeSemantics", "plugin_version", "plugin_namespace"}
FMHA_ATTRIBUTES = {"scale", "dropout_p", "causal", "return_attn_probs"}
DISENTANGLED_ATTRIBUTES = {"span", "factor", "plugin_version", "plugin_namespace"}


class Body(FunctionBuilder):
    """A function body under construction (constants are int64 unless told otherwise), with
    the NMS bodies' shorthands."""

    default_dtype = np.int64

    def vec(self, scalar: str) -> str:
        return self.reshape(scalar, [1])

    def column(self, matrix: str, index: int) -> str:
        return self.take(matrix, index, axis=1)

    def last(self, x: str, start: int, end: int) -> str:
        return self.slice(x, [start], [end], [-1])

    def minimum(self, a: str, b: str) -> str:
        """``Min`` of int64 values (Min takes integers from opset 12: ``Where`` below)."""
        if self.opset >= 12:
            return self.op("Min", a, b)
        return self.op("Where", self.op("Less", a, b), a, b)

    def maximum(self, a: str, b: str) -> str:
        """``Max`` of int64 values (Max takes integers from opset 12: ``Where`` below)."""
        if self.opset >= 12:
            return self.op("Max", a, b)
        return self.op("Where", self.op("Greater", a, b), a, b)

    def greater_equal(self, a: str, b: str) -> str:
        if self.opset >= 12:
            return self.op("GreaterOrEqual", a, b)
        return self.op("Or", self.op("Greater", a, b), self.op("Equal", a, b))


def check_form(ctx, allowed: set[str], float_inputs: int) -> None:
    """Decline a node with an attribute the decomposition does not know, inputs that are
    not float, or a plugin_version other than 1."""
    check_attributes(ctx.node, allowed)
    if not has_float_inputs(ctx, float_inputs):
        raise Declined(f"the first {float_inputs} inputs must be float")
    if not is_plugin_version_one(ctx):
        raise Declined("only plugin_version 1 is decomposed")


def check_attributes(node, allowed: set[str]) -> None:
    """Decline a node with an attribute not in ``allowed``."""
    unknown = sorted(a.name for a in node.attribute if a.name not in allowed)
    if unknown:
        raise Declined(f"unknown attribute(s) {', '.join(unknown)}")


def check_same_float_type(types: list) -> None:
    """Decline unless the first three inputs have one float type (float or float16)."""
    if len(types) < 3 or types[0] not in FLOAT_ELEM_TYPES or len(set(types[:3])) != 1:
        raise Declined("the three inputs must have one float type ("
                       + ", ".join(sorted(FLOAT_ELEM_TYPES)) + ")")


def check_nms_settings(k_name: str, k: int, coding_name: str, coding: int,
                       iou_threshold: float) -> None:
    """Decline an NMS node whose output count, box coding or IoU threshold is out of range."""
    if k <= 0:
        raise Declined(f"{k_name} must be positive (is {k})")
    if coding not in (0, 1):
        raise Declined(f"{coding_name} {coding} (0 or 1 only)")
    if iou_threshold <= 0:
        raise Declined(f"iou_threshold must be positive (is {iou_threshold})")


def is_plugin_version_one(ctx) -> bool:
    """The node's ``plugin_version`` is 1 (the default)."""
    version = ctx.attribute("plugin_version", b"1")
    return (version.decode() if isinstance(version, bytes) else str(version)) == "1"


def has_float_inputs(ctx, count: int) -> bool:
    """The first ``count`` inputs are float32."""
    types = list(ctx.input_types or [])
    return len(types) >= count and all(t == FLOAT_TYPE for t in types[:count])


def as_float32(value: float) -> float:
    """``value`` rounded to float32, as the plugin stores its attributes."""
    return float(np.float32(value))
