"""Adapters for resampling: ``Resize`` (13, 18, 19), ``GridSample`` modes (20) and
``RoiAlign``'s coordinate transformation mode (16).
"""

from __future__ import annotations

import numpy as np
from onnx import NodeProto, TensorProto, helper

from .common import Decline, Env, attr, input_at, set_attrs, with_inputs
from .registry import adapter, ints


@adapter("GridSample", 20)
def _grid_sample_modes(node: NodeProto, env: Env) -> list[NodeProto]:
    mode = attr(node, "mode", b"linear")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    rank = env.rank(node.input[0])
    if rank != 4:
        raise Decline("GridSample before opset 20 takes 4-D input only"
                      + (" (the rank is unknown)" if rank is None else ""))
    renamed = {"linear": "bilinear", "cubic": "bicubic", "nearest": "nearest"}.get(mode)
    if renamed is None:
        raise Decline(f"GridSample mode {mode!r}")
    return [set_attrs(node, mode=renamed)]


@adapter("RoiAlign", 16)
def _roi_align_coordinates(node: NodeProto, env: Env) -> list[NodeProto]:
    mode = attr(node, "coordinate_transformation_mode", b"half_pixel")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    base = set_attrs(node, drop=["coordinate_transformation_mode"])
    if mode == "output_half_pixel":
        return [base]
    # half_pixel samples at roi * scale - 0.5, the older op at roi * scale: shift the rois
    elem = env.elem_type(node.input[1])
    if elem is None:
        raise Decline("the rois type is unknown")
    scale = attr(node, "spatial_scale", 1.0)
    dtype = helper.tensor_dtype_to_np_dtype(elem)
    shift, c_shift = env.constant_node(np.array(0.5 / scale, dtype=dtype), "shift")
    rois = env.fresh("rois")
    return [c_shift, helper.make_node("Sub", [node.input[1], shift], [rois]),
            with_inputs(base, [node.input[0], rois, *node.input[2:]])]


@adapter("Resize", 19)
def _resize_half_pixel_symmetric(node: NodeProto, env: Env) -> list[NodeProto]:
    mode = attr(node, "coordinate_transformation_mode", b"half_pixel")
    if mode in (b"half_pixel_symmetric", "half_pixel_symmetric"):
        raise Decline("Resize coordinate_transformation_mode 'half_pixel_symmetric' exists "
                      "from opset 19")
    return [node]


@adapter("Resize", 18, reads_constants=True)
def _resize_18(node: NodeProto, env: Env) -> list[NodeProto]:
    """``axes`` and ``keep_aspect_ratio_policy`` (opset 18) become full-rank roi, scales
    or sizes: folded when they are constants, computed in the graph otherwise."""
    if attr(node, "antialias", 0):
        raise Decline("Resize(antialias=1) exists from opset 18")
    x, roi, scales, sizes = (input_at(node, i) for i in range(4))
    axes = attr(node, "axes")
    policy = attr(node, "keep_aspect_ratio_policy", b"stretch")
    policy = policy.decode() if isinstance(policy, bytes) else policy
    base = set_attrs(node, drop=["antialias", "axes", "keep_aspect_ratio_policy"])
    if axes is None and (policy == "stretch" or not sizes):
        return [base]
    shape = env.shape(x)
    rank = None if shape is None else len(shape)
    if rank is None:
        raise Decline("Resize with axes or keep_aspect_ratio_policy needs the input's rank")
    axes = list(range(rank)) if axes is None else [a + rank if a < 0 else a for a in axes]
    all_axes = axes == list(range(rank))
    nodes: list[NodeProto] = []
    new_inputs = [x, roi, scales, sizes]
    ax, c_ax = env.constant_node(np.array(axes, dtype=np.int64), "axes")
    nodes.append(c_ax)
    shape_x = None

    def input_shape() -> str:
        nonlocal shape_x
        if shape_x is None:
            shape_x = env.fresh("shape")
            nodes.append(helper.make_node("Shape", [x], [shape_x]))
        return shape_x

    def scatter(into: str, indices: str, updates: str, hint: str) -> str:
        out = env.fresh(hint)
        nodes.append(helper.make_node("ScatterElements", [into, indices, updates], [out],
                                      axis=0))
        return out

    if sizes:
        value = env.const(sizes)
        static = shape is not None and all(d is not None for d in shape)
        if value is not None and static:
            value = ints(value)
            if policy != "stretch":
                ratios = [v / shape[a] for v, a in zip(value, axes)]
                scale = min(ratios) if policy == "not_larger" else max(ratios)
                value = [int(np.floor(scale * shape[a] + 0.5)) for a in axes]
            full = list(shape)
            for a, v in zip(axes, value):
                full[a] = v
            name, const = env.constant_node(np.array(full, dtype=np.int64), "sizes")
            nodes.append(const)
            new_inputs[3] = name
        else:
            wanted = env.fresh("sizes64")
            nodes.append(helper.make_node("Cast", [sizes], [wanted], to=TensorProto.INT64))
            if policy != "stretch":
                dims, dims_f, wanted_f, ratios, scale, scaled, up, down = (env.fresh(h) for h in (
                    "dims", "dims_f", "sizes_f", "ratios", "scale", "scaled", "up", "down"))
                half, c_half = env.constant_node(np.array(0.5, dtype=np.float32), "half")
                reduce = "ReduceMin" if policy == "not_larger" else "ReduceMax"
                nodes += [c_half,
                          helper.make_node("Gather", [input_shape(), ax], [dims], axis=0),
                          helper.make_node("Cast", [dims], [dims_f], to=TensorProto.FLOAT),
                          helper.make_node("Cast", [wanted], [wanted_f], to=TensorProto.FLOAT),
                          helper.make_node("Div", [wanted_f, dims_f], [ratios]),
                          helper.make_node(reduce, [ratios], [scale], axes=[0], keepdims=1),
                          helper.make_node("Mul", [scale, dims_f], [scaled]),
                          helper.make_node("Add", [scaled, half], [up]),
                          helper.make_node("Floor", [up], [down])]
                wanted = env.fresh("sizes64")
                nodes.append(helper.make_node("Cast", [down], [wanted], to=TensorProto.INT64))
            new_inputs[3] = wanted if all_axes else scatter(input_shape(), ax, wanted, "sizes")
    if scales and not all_axes:
        value = env.const(scales)
        if value is not None:
            full = np.ones(rank, dtype=value.dtype)
            for a, v in zip(axes, value.reshape(-1)):
                full[a] = v
            name, const = env.constant_node(full, "scales")
            nodes.append(const)
            new_inputs[2] = name
        else:
            ones, c_ones = env.constant_node(np.ones(rank, dtype=np.float32), "ones")
            nodes.append(c_ones)
            new_inputs[2] = scatter(ones, ax, scales, "scales")
    if roi and not all_axes:
        value = env.const(roi)
        elem = env.elem_type(roi)
        if value is None and elem is None:
            raise Decline("the roi type is unknown")
        dtype = value.dtype if value is not None else helper.tensor_dtype_to_np_dtype(elem)
        full = np.concatenate([np.zeros(rank), np.ones(rank)]).astype(dtype)
        if value is not None:
            value = value.reshape(-1)
            for k, a in enumerate(axes):
                full[a] = value[k]
                full[a + rank] = value[k + len(axes)]
            name, const = env.constant_node(full, "roi")
            nodes.append(const)
            new_inputs[1] = name
        else:
            start, c_start = env.constant_node(full, "roi")
            idx, c_idx = env.constant_node(np.array(axes + [a + rank for a in axes],
                                                    dtype=np.int64), "roi_axes")
            nodes += [c_start, c_idx]
            new_inputs[1] = scatter(start, idx, roi, "roi")
    return nodes + [with_inputs(base, new_inputs)]


@adapter("Resize", 13)
def _resize_13(node: NodeProto, env: Env) -> list[NodeProto]:
    """Resize(11) requires roi and scales; an empty tensor stands for "not given"."""
    mode = attr(node, "coordinate_transformation_mode", b"half_pixel")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if mode == "tf_half_pixel_for_nn":
        raise Decline("tf_half_pixel_for_nn")
    x, roi, scales, sizes = (input_at(node, i) for i in range(4))
    nodes = []
    if not roi:
        roi, c = env.constant_node(np.zeros(0, dtype=np.float32), "roi")
        nodes.append(c)
    if not scales:
        scales, c = env.constant_node(np.zeros(0, dtype=np.float32), "scales")
        nodes.append(c)
    return nodes + [with_inputs(node, [x, roi, scales, sizes])]
