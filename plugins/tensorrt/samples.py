"""The oracle samples of the TensorRT decompositions (the kernels, written from the
plugins' CUDA code, are the oracle)."""

from __future__ import annotations

import numpy as np

from rewriter.plugin import Arg, OpSample


def random_corners(rng, shape) -> np.ndarray:
    """Corner boxes in [0, 1] with much overlap, a fifth given with reversed corners."""
    center = rng.uniform(0.2, 0.8, (*shape[:-1], 2))
    size = rng.uniform(0.05, 0.4, (*shape[:-1], 2))
    boxes = np.concatenate([center - size / 2, center + size / 2], -1)
    flip = rng.random(shape[:-1]) < 0.2
    boxes[flip] = boxes[flip][:, [2, 3, 0, 1]]
    return boxes


def _random_center_size(rng, shape) -> np.ndarray:
    corners = random_corners(rng, shape)
    lo, hi = np.minimum(corners[..., :2], corners[..., 2:]), np.maximum(
        corners[..., :2], corners[..., 2:])
    return np.concatenate([(lo + hi) / 2, hi - lo], -1)


def _random_deltas(rng, shape) -> np.ndarray:
    return rng.standard_normal(shape) * 0.1


def _random_spread_corners(rng, shape) -> np.ndarray:
    """Corners reaching a little outside [0, 1] (clipBoxes has something to clip)."""
    return random_corners(rng, shape) * 1.3 - 0.15


_EFFICIENT = dict(score_threshold=0.3, iou_threshold=0.45, max_output_boxes=25,
                  background_class=-1, score_activation=0, box_coding=0, class_agnostic=0,
                  plugin_version="1")
_EFFICIENT_OUT = ["int32", "T", "T", "int32"]  # num_detections, boxes, scores, classes
_SCORES = Arg("T[2,60,3]", low=0.0, high=1.0)
_EFFICIENT_SAMPLES = [
    OpSample([Arg("T[2,60,4]", values=random_corners), _SCORES], _EFFICIENT_OUT, _EFFICIENT,
             name="default"),
    OpSample([Arg("T[2,60,4]", values=random_corners), _SCORES], _EFFICIENT_OUT,
             {**_EFFICIENT, "class_agnostic": 1}, name="agnostic"),
    OpSample([Arg("T[2,60,4]", values=_random_center_size), _SCORES], _EFFICIENT_OUT,
             {**_EFFICIENT, "background_class": 1, "box_coding": 1},
             name="background-centersize"),
    OpSample([Arg("T[2,60,4]", values=random_corners), Arg("T[2,60,3]", low=-3.0, high=3.0)],
             _EFFICIENT_OUT, {**_EFFICIENT, "score_activation": 1, "score_threshold": 0.45},
             name="sigmoid"),
    OpSample([Arg("T[2,60,4]", values=_random_deltas), _SCORES,
              Arg("T[1,60,4]", values=random_corners)],
             _EFFICIENT_OUT, _EFFICIENT, name="anchors-corner"),
    OpSample([Arg("T[2,60,4]", values=_random_deltas), _SCORES,
              Arg("T[1,60,4]", values=lambda rng, shape: np.abs(random_corners(rng, shape)))],
             _EFFICIENT_OUT, {**_EFFICIENT, "box_coding": 1, "class_agnostic": 1},
             name="anchors-centersize-agnostic"),
    OpSample([Arg("T[2,60,3,4]", values=random_corners), _SCORES], _EFFICIENT_OUT, _EFFICIENT,
             name="per-class-boxes"),
    OpSample([Arg("T[2,60,3,4]", values=random_corners), _SCORES], _EFFICIENT_OUT,
             {**_EFFICIENT, "class_agnostic": 1, "max_output_boxes": 200},
             name="per-class-agnostic-pad"),
]
_EFFICIENT_ONNX = dict(score_threshold=0.2, iou_threshold=0.5, max_output_boxes_per_class=6)
_EFFICIENT_ONNX_SAMPLES = [
    OpSample([Arg("T[2,50,4]", values=random_corners), Arg("T[2,50,4]", low=0.0, high=1.0)],
             ["int32"], _EFFICIENT_ONNX, name="default"),
    OpSample([Arg("T[2,50,4]", values=random_corners), Arg("T[2,50,4]", low=0.0, high=0.1)],
             ["int32"], _EFFICIENT_ONNX, name="none-selected"),
]
# BatchedNMS: num_detections int32; boxes, scores and classes of the input type (TensorRT's
# batchedNMSPlugin getOutputDataType: index 0 kINT32, else inputTypes[0])
_BATCHED = dict(shareLocation=1, backgroundLabelId=-1, numClasses=4, topK=30, keepTopK=20,
                scoreThreshold=0.25, iouThreshold=0.5, isNormalized=1, clipBoxes=1)
_BATCHED_OUT = ["int32", "T", "T", "T"]
_BATCHED_SCORES = Arg("T[2,50,4]", low=0.0, high=1.0)
_BATCHED_SAMPLES = [
    OpSample([Arg("T[2,50,1,4]", values=_random_spread_corners), _BATCHED_SCORES], _BATCHED_OUT,
             _BATCHED, name="shared"),
    OpSample([Arg("T[2,50,1,4]", values=_random_spread_corners), _BATCHED_SCORES], _BATCHED_OUT,
             {**_BATCHED, "backgroundLabelId": 0, "clipBoxes": 0}, name="background-noclip"),
    OpSample([Arg("T[2,50,4,4]", values=_random_spread_corners), _BATCHED_SCORES], _BATCHED_OUT,
             {**_BATCHED, "shareLocation": 0, "topK": 10, "keepTopK": 10},
             name="per-class-topk"),
    OpSample([Arg("T[2,50,1,4]", values=_random_spread_corners), _BATCHED_SCORES], _BATCHED_OUT,
             {**_BATCHED, "keepTopK": 60, "topK": 60, "scoreThreshold": 0.8}, name="padding"),
]
NMS_SAMPLES = {"EfficientNMS_TRT": _EFFICIENT_SAMPLES,
                "EfficientNMS_ONNX_TRT": _EFFICIENT_ONNX_SAMPLES,
                "BatchedNMS_TRT": _BATCHED_SAMPLES[:2],
                "BatchedNMSDynamic_TRT": _BATCHED_SAMPLES[2:]}
ATTENTION_SAMPLES = {
    "fMHAPlugin": [OpSample(["T[2,7,3,8]"] * 3, attributes=dict(scale=0.35, causal=causal),
                            opset=18, tolerance=(2e-3, 2e-3), name=f"causal{causal}")
                   for causal in (0, 1)],
    "DisentangledAttention_TRT": [OpSample(
        ["T[3,40,40]", "T[3,40,16]", "T[3,40,16]"], attributes=dict(span=8, factor=0.2),
        opset=12, tolerance=(1e-6, 1e-6))],
}
