"""The oracles and samples of the mmdeploy decompositions: torch's grid_sample, the numpy
deformable convolution, the kernels of MMCVRoiAlign and TRTBatchedNMS."""

from __future__ import annotations

import numpy as np

from rewriter.plugin import Arg, OpSample

from .common import (
    BATCHED_NMS_OPSETS,
    DEFORM_CONV_OPSETS,
    DEFORM_GATHER_OPSETS,
    GRID_GATHER_OPSETS,
    GRID_SAMPLE_OPSETS,
    ROI_ALIGN_OPSETS,
)
from .deform_conv import DEFORM_ALIASES


def grid_sample_reference(x, grid, interpolation_mode=0, padding_mode=0, align_corners=0):
    """``grid_sampler``: torch's own ``torch.nn.functional.grid_sample`` (the producer)."""
    import torch

    y = torch.nn.functional.grid_sample(
        torch.from_numpy(np.ascontiguousarray(x)), torch.from_numpy(np.ascontiguousarray(grid)),
        mode=["bilinear", "nearest", "bicubic"][interpolation_mode],
        padding_mode=["zeros", "border", "reflection"][padding_mode],
        align_corners=bool(align_corners))
    return y.numpy()


def deform_conv_reference(x, offset, *tensors, **attributes):
    """``MMCVDeformConv2d(input, offset, weight)`` / ``MMCVModulatedDeformConv2d(input,
    offset, mask, weight[, bias])``: the numpy deformable convolution
    (``rewriter_custom_ops.mm_deform_conv``, checked against onnxruntime's DeformConv)."""
    from rewriter_custom_ops.mm_deform_conv import deform_conv2d

    mask, weight, bias = (None, tensors[0], None) if len(tensors) == 1 else (
        tensors[0], tensors[1], tensors[2] if len(tensors) > 2 else None)
    given = {DEFORM_ALIASES[k]: v for k, v in attributes.items() if DEFORM_ALIASES.get(k)}
    pairs = {}
    for name, default in (("stride", 1), ("padding", 0), ("dilation", 1)):
        value = list(given.get(name, [default]))
        pairs[name] = value * 2 if len(value) == 1 else value
    return deform_conv2d(x, offset, weight, mask, bias, strides=pairs["stride"],
                         pads=pairs["padding"] * 2, dilations=pairs["dilation"],
                         groups=given.get("groups", 1),
                         offset_groups=given.get("deform_groups", 1))


def _grid(extreme: bool):
    """Grid points on, beyond and far beyond the borders (onnxruntime 1.32's GridSample
    misplaces (1e6, -1e7) with border padding, so that one only below opset 16)."""
    def draw(rng, shape):
        grid = rng.uniform(-1.3, 1.3, shape)
        grid[0, 0, :4] = [[-1, -1], [1, 1], [0, 0], [50, -80]]
        if extreme:
            grid[0, 0, 4] = [1e6, -1e7]
        return grid
    return draw


def random_rois(rng, shape):
    """Rois ``[batch, x1, y1, x2, y2]`` of two images, some reaching outside."""
    count = shape[0]
    x1, y1 = rng.uniform(-4, 20, count), rng.uniform(-4, 20, count)
    return np.stack([rng.integers(0, 2, count), x1, y1, x1 + rng.uniform(0, 12, count),
                     y1 + rng.uniform(0, 12, count)], 1)


def random_offsets(rng, shape):
    """Offsets near half-pixel positions, a little off them."""
    return np.round(rng.uniform(-3, 3, shape) * 2) / 2 + rng.uniform(-0.3, 0.3, shape)


def random_nms_boxes(rng, shape):
    """Corner boxes in [0, 1], the first one reversed."""
    xy = rng.uniform(0, 1, (*shape[:-1], 2))
    out = np.concatenate([xy, xy + rng.uniform(0.05, 0.6, (*shape[:-1], 2))], -1)
    out[0, 0] = out[0, 0][..., [2, 3, 0, 1]]  # a reversed box overlaps nothing
    return out


def random_nms_scores(rng, shape):
    """Scores in [0, 1], some equal in the last image."""
    scores = rng.uniform(0, 1, shape)
    scores[-1, :3] = 0.5  # equal scores: lower class, then lower box first
    return scores


def _grid_samples(gather: bool) -> list[OpSample]:
    """Every interpolation/padding code (bicubic from opset 16), align_corners alternating,
    at the two opsets of the registration's range."""
    opsets = (11, 13) if gather else (16, 20)
    return [OpSample(["T[2,3,5,7]", Arg("T[2,4,6,2]", values=_grid(gather))],
                     attributes=dict(interpolation_mode=m, padding_mode=p, align_corners=a),
                     opset=opset, tolerance=(1e-4, 1e-5), name=f"mode{m}-pad{p}-align{a}")
            for opset, first_align in zip(opsets, (0, 1)) for m in range(2 if gather else 3)
            for p in range(3) for a in [(first_align + m + p) % 2]]


def _deform_sample(modulated: bool, with_bias: bool, groups: int, dg: int,
                   opset: int) -> OpSample:
    n, c, h, w, o, kh, kw = 2, 4, 7, 6, 6, 3, 2
    stride, pad, dilation = (2, 1), (1, 1), (1, 2)
    oh = (h + 2 * pad[0] - (dilation[0] * (kh - 1) + 1)) // stride[0] + 1
    ow = (w + 2 * pad[1] - (dilation[1] * (kw - 1) + 1)) // stride[1] + 1
    inputs = [f"T[{n},{c},{h},{w}]", Arg(f"T[{n},{dg * 2 * kh * kw},{oh},{ow}]",
                                         values=random_offsets)]
    if modulated:
        inputs.append(Arg(f"T[{n},{dg * kh * kw},{oh},{ow}]", low=0, high=1))
    inputs.append(f"T[{o},{c // groups},{kh},{kw}]")
    if with_bias:
        inputs.append(f"T[{o}]")
    attributes = dict(stride=list(stride), padding=list(pad), dilation=list(dilation),
                      groups=groups, deform_groups=dg)
    if not modulated:
        attributes["im2col_step"] = 32  # tunes memory only
    return OpSample(inputs, attributes=attributes, opset=opset, tolerance=(1e-4, 1e-4),
                    name=f"groups{groups}-dg{dg}" + ("-bias" if with_bias else ""))


_BATCHED_NMS_CASES = [  # (per-class boxes, attributes, outputs)
    (False, dict(background_label_id=-1, topk=6, keep_topk=9, score_threshold=0.2,
                 iou_threshold=0.3, is_normalized=0, clip_boxes=0, return_index=1), 3),
    (True, dict(background_label_id=1, topk=20, keep_topk=7, score_threshold=0.1,
                iou_threshold=0.4, clip_boxes=1, return_index=1), 3),
    (False, dict(keep_topk=40, score_threshold=0.3, iou_threshold=0.0), 2),  # 40 > C * N
]


def oracles(first_domain: bool) -> dict[tuple[str, tuple], dict]:
    """Per (op, opsets): oracle and samples; the second domain shares the builders, so one
    sample each there checks the domain is matched."""
    def few(samples):
        return samples if first_domain else samples[:1]

    def deform(modulated, opset):
        variants = [(False, 1, 2), (False, 2, 1)] + ([(True, 1, 2), (True, 2, 1)]
                                                     if modulated else [])
        return few([_deform_sample(modulated, bias, g, dg, opset) for bias, g, dg in variants])

    roi = dict(output_height=2, output_width=3, spatial_scale=0.75, sampling_ratio=0,
               mode="avg")
    own = "rewriter_plugins.mmdeploy.samples:"
    return {
        ("grid_sampler", GRID_SAMPLE_OPSETS): dict(
            oracle=own + "grid_sample_reference", samples=few(_grid_samples(False))),
        ("grid_sampler", GRID_GATHER_OPSETS): dict(
            oracle=own + "grid_sample_reference", samples=few(_grid_samples(True))),
        ("MMCVRoiAlign", ROI_ALIGN_OPSETS): dict(oracle="kernel", samples=few([
            OpSample(["T[2,3,12,10]", Arg("T[9,5]", values=random_rois)],
                     attributes={**roi, "aligned": aligned}, opset=opset,
                     name=f"aligned{aligned}")
            for opset, aligned in ((16, 0), (16, 1), (11, 0), (20, 1))])),
        ("MMCVDeformConv2d", DEFORM_CONV_OPSETS): dict(
            oracle=own + "deform_conv_reference", samples=deform(False, 19)),
        ("MMCVDeformConv2d", DEFORM_GATHER_OPSETS): dict(
            oracle=own + "deform_conv_reference", samples=deform(False, 13)),
        ("MMCVModulatedDeformConv2d", DEFORM_CONV_OPSETS): dict(
            oracle=own + "deform_conv_reference", samples=deform(True, 19)),
        ("MMCVModulatedDeformConv2d", DEFORM_GATHER_OPSETS): dict(
            oracle=own + "deform_conv_reference", samples=deform(True, 13)),
        # labels/index: int64, what torch's exporter declares (the TensorRT plugin's own
        # are int32; the decomposition follows the model's declaration)
        ("TRTBatchedNMS", BATCHED_NMS_OPSETS): dict(oracle="kernel", samples=[
            OpSample([Arg(f"T[2,10,{3 if per_class else 1},4]", values=random_nms_boxes),
                      Arg("T[2,10,3]", values=random_nms_scores)], ["T", "int64", "int64"][:n_out],
                     {"num_classes": 3, **attrs}, opset=opset, name=f"case{i}")
            for opset in (11, 13) for i, (per_class, attrs, n_out)
            in enumerate(_BATCHED_NMS_CASES)]),
    }
