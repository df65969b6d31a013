"""Tensor ops in forms the runtimes lack:

* ``Unsqueeze(data, axes)`` with ``axes`` computed at run time: ``Reshape`` to the target
  shape built from ``Shape(data)`` and ``axes`` (its length static), so a runtime that
  needs a static rank gets one.
* ``Pad(data, pads[, constant_value[, axes]])`` with ``mode = "wrap"``: per axis ``i``,
  ``Gather`` of the indices ``(-pads[i] .. d_i + pads[r + i]) mod d_i`` (negative pads
  crop); ``axes`` must be constant; the rank must be known.
* ``TensorScatter(past_cache, update[, write_indices])`` (``mode`` linear or circular,
  ``axis``): each cache position takes the update slice written there
  (``GatherElements``), the cache elsewhere.
* ``Tile(input, repeats)``: ``input`` reshaped to ``[1, d0, 1, d1, ...]``, expanded to
  ``[r0, d0, r1, d1, ...]`` and reshaped to ``[r0 d0, r1 d1, ...]`` (a copy is the outer
  index of each axis; ``allowzero``: a repeat of 0 empties its axis); the rank must be
  known. OpenVINO 2026.4 computes ``Tile`` with
  repeats the caller feeds into uninitialised memory (NaN and 3e36 where onnxruntime has
  the input's values: ``test_tile``), its ``Expand`` right.
"""

from __future__ import annotations

import numpy as np
from onnx import FunctionProto, TensorProto

from rewriter.plugin import Arg, Declined, OpSample, declining
from rewriter.plugin import present as _present

from .common import (
    DOMAIN,
    Body,
    attributes_known,
    body_opset,
    formal_inputs,
)

UNSQUEEZE_OPSETS = (13, None)  # axes as an input
PAD_WRAP_OPSETS = (19, None)  # wrap is new in Pad-19
TENSOR_SCATTER_OPSETS = (24, None)  # block_size is new in QuantizeLinear-21
TILE_OPSETS = (13, None)  # Tile-13; the body needs Reshape's allowzero (14)
_ALLOWZERO = 14


# -- Unsqueeze with run-time axes -----------------------------------------------------------


@declining
def build_unsqueeze(ctx) -> FunctionProto | None:
    """``Unsqueeze`` as ``Reshape`` to a shape of static length."""
    node = ctx.node
    if len(node.input) != 2 or not _present(node.input, 1) or len(node.output) != 1:
        raise Declined("needs data and axes, one output")
    b = Body(body_opset(ctx))
    shape = b.op("Shape", "data")
    rank = b.op("Size", shape)
    axes = b.reshape(b.cast("axes", TensorProto.INT64), [-1])
    out_rank = b.op("Add", rank, b.op("Size", axes))
    axes = b.op("Where", b.op("Less", axes, b.const(np.array(0, np.int64))),
                b.op("Add", axes, out_rank), axes)
    positions = b.op("Range", b.const(np.array(0, np.int64)), out_rank,
                     b.const(np.array(1, np.int64)))
    # (no Unsqueeze in the body: it is the op being replaced)
    hits = b.cast(b.op("Equal", b.reshape(positions, [-1, 1]), b.reshape(axes, [1, -1])),
                  TensorProto.INT32)
    inserted = b.op("Greater", b.reduce("ReduceMax", hits, [1], keepdims=0),
                    b.const(np.array(0), np.int32))
    kept = b.cast(b.op("Not", inserted), TensorProto.INT64)
    source = b.op("Sub", b.op("CumSum", kept, b.const(np.array(0, np.int64))),
                  b.const(np.array(1, np.int64)))
    dims = b.op("Concat", shape, b.ints([1]), axis=0)
    target = b.op("Gather", dims, b.op("Where", inserted, rank, source), axis=0)
    reshape = {"allowzero": 1} if b.opset >= 14 else {}
    y = b.op("Reshape", "data", target, **reshape)
    return b.function(DOMAIN, "unsqueeze", ["data", "axes"], [y])


# -- Pad (wrap) -----------------------------------------------------------------------------


@declining
def build_pad_wrap(ctx) -> FunctionProto | None:
    """``Pad`` in ``wrap`` mode: per axis, ``Gather`` of indices modulo the dimension."""
    node = ctx.node
    mode = ctx.attribute("mode", b"constant")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    rank = ctx.rank(node.input[0]) if node.input else None
    if (mode != "wrap" or rank is None or not _present(node.input, 1) or len(node.output) != 1
            or len(node.input) > 4 or not attributes_known(node, ["mode"])):
        raise Declined("needs mode wrap, data of a declared rank, pads given, one output")
    axes = list(range(rank))
    if _present(node.input, 3):
        constant = ctx.constant(node.input[3])
        if constant is None:
            raise Declined("axes must be a constant")
        axes = [int(a) % rank for a in constant.ravel()]
    b = Body(body_opset(ctx))
    pads = b.cast("pads", TensorProto.INT64)
    shape = b.op("Shape", "data")
    one = b.const(np.array(1, np.int64))
    y = "data"
    for i, axis in enumerate(axes):
        begin = b.shape_at(pads, i)
        end = b.shape_at(pads, i + len(axes))
        size = b.shape_at(shape, axis)
        indices = b.op("Mod", b.op("Range", b.op("Neg", begin), b.op("Add", size, end), one),
                       size)
        y = b.op("Gather", y, indices, axis=axis)
    return b.function(DOMAIN, "pad_wrap", formal_inputs(node, ["data", "pads",
                                                               "constant_value", "axes"]),
                      [y])


# -- TensorScatter -------------------------------------------------------------------------


@declining
def build_tensor_scatter(ctx) -> FunctionProto | None:
    """``TensorScatter(past_cache, update[, write_indices])`` (``mode`` linear or circular):
    for each cache position ``j`` along ``axis`` and batch ``b``, the update slice
    ``s = j - write_indices[b]`` (modulo the cache length when circular) where
    ``0 <= s < sequence_length``, gathered with ``GatherElements``; the cache elsewhere."""
    node = ctx.node
    if len(node.input) < 2 or len(node.output) != 1 or not attributes_known(node, ["mode", "axis"]):
        raise Declined("needs past_cache and update, one output")
    mode = ctx.attribute("mode", "linear")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    rank = ctx.rank(node.input[0])
    if mode not in ("linear", "circular") or rank is None or rank < 2:
        raise Declined("needs mode linear or circular and a cache of a declared rank >= 2")
    axis = ctx.attribute("axis", -2) % rank
    if axis == 0:
        raise Declined("the sequence axis cannot be the batch axis")
    b = Body(body_opset(ctx))
    cache_shape = b.op("Shape", "past_cache")
    length = b.shape_at(cache_shape, axis)  # max_sequence_length
    steps = b.shape_at(b.op("Shape", "update"), axis)  # sequence_length
    zero, one = b.const(np.array(0, np.int64)), b.const(np.array(1, np.int64))
    positions = b.reshape(b.op("Range", zero, length, one), [1, -1])  # [1, M]
    if _present(node.input, 2):
        starts = b.reshape(b.cast("write_indices", TensorProto.INT64), [-1, 1])  # [B, 1]
    else:
        starts = b.reshape(b.cast(b.shape_at(cache_shape, 0), TensorProto.INT64), [1, 1])
        starts = b.op("Mul", starts, zero)
    offset = b.op("Sub", positions, starts)  # [B, M]
    if mode == "circular":
        offset = b.op("Mod", offset, length, fmod=0)
    valid = b.op("And", b.op("GreaterOrEqual", offset, zero), b.op("Less", offset, steps))
    last = b.op("Sub", steps, one)
    index = b.op("Min", b.op("Max", offset, zero), last)
    # [B, M] -> [B, 1, .., M, .., 1]: broadcast over the other axes of the cache
    view = [0] + [1] * (axis - 1) + [-1] + [1] * (rank - axis - 1)
    index = b.op("Expand", b.reshape(index, view), cache_shape)
    gathered = b.op("GatherElements", "update", index, axis=axis)
    y = b.op("Where", b.reshape(valid, view), gathered, "past_cache")
    return b.function(DOMAIN, "tensor_scatter",
                      formal_inputs(node, ["past_cache", "update", "write_indices"]), [y])


# -- Tile as Expand ------------------------------------------------------------------------


@declining
def build_tile(ctx) -> FunctionProto | None:
    """``Tile`` as ``Reshape``, ``Expand``, ``Reshape`` (see the module's docstring)."""
    node = ctx.node
    rank = ctx.rank(node.input[0]) if node.input else None
    if rank is None or rank < 1 or len(node.input) != 2 or len(node.output) != 1:
        raise Declined("needs input of a declared rank (at least 1), repeats, one output")
    if ctx.opset < _ALLOWZERO:
        raise Declined(f"the body needs Reshape's allowzero (opset {_ALLOWZERO}); the model "
                       f"imports {ctx.opset}", needs_opset=_ALLOWZERO)
    b = Body(body_opset(ctx))
    shape = b.op("Shape", "input")
    repeats = b.cast("repeats", TensorProto.INT64)

    def interleaved(outer: str) -> str:  # [outer0, d0, outer1, d1, ...]
        pairs = b.op("Concat", b.reshape(outer, [-1, 1]), b.reshape(shape, [-1, 1]), axis=1)
        return b.reshape(pairs, [2 * rank])

    ones = b.fill(b.const(np.array([rank], np.int64)), 1, np.int64)
    spread = b.op("Expand", b.op("Reshape", "input", interleaved(ones), allowzero=1),
                  interleaved(repeats))
    y = b.op("Reshape", spread, b.op("Mul", shape, repeats), allowzero=1)
    return b.function(DOMAIN, "tile", formal_inputs(node, ["input", "repeats"]), [y])


def samples() -> dict[str, list[OpSample]]:
    """The samples of this module's ops, by op type."""
    return {
        "Unsqueeze": [OpSample(["T[3,4,5]", Arg(f"int64[{len(axes)}]", values=axes)],
                               opset=opset, name=name, dtypes=["float"])
                      for axes, opset, name in [([1], 25, "axis1"), ([-1, 0], 13, "two"),
                                                ([5, 4, 0], 21, "unsorted"),
                                                ([-2], 13, "negative")]] + [
            OpSample(["T[3,4,5]", Arg("int64[2]", values=[1, 3], constant=True)], opset=13,
                     name="constant-axes", dtypes=["int32", "bool"])],
        "Pad": [OpSample([f"T[{shape}]", Arg(f"int64[{len(pads)}]", values=pads)],
                         attributes={"mode": "wrap"}, opset=19, name=name,
                         dtypes=["float", "int32"])
                for shape, pads, name in [("1,3,4,5", [0, 0, 1, 1, 0, 0, 1, 1], "wrap"),
                                          ("3,4", [2, 0, 5, 1], "wide"),
                                          ("2,5", [0, 3, 0, 7], "wider-than-dim")]] + [
            OpSample(["T[3,4,5]", Arg("int64[4]", values=[1, 2, 2, 0]), None,
                      Arg("int64[2]", values=[2, 0], constant=True)],
                     attributes={"mode": "wrap"}, opset=19, name="axes", dtypes=["float"])],
        "Tile": [OpSample([f"T[{shape}]", Arg(f"int64[{len(repeats)}]", values=repeats)],
                          opset=opset, name=name, dtypes=["float", "int32", "bool"])
                 for shape, repeats, opset, name in [
                     ("2,3,4,5", [7, 6, 4, 2], 14, "rank4"), ("3", [4], 21, "rank1"),
                     ("2,1,3", [1, 5, 1], 14, "ones"), ("2,3", [2, 0], 14, "zero-repeat"),
                     ("2,3,4", [1, 0, 3], 14, "zero-inside")]],
        "TensorScatter": [
            OpSample(["T[2,3,6,4]", "T[2,3,2,4]", Arg("int64[2]", values=indices)],
                     attributes={"mode": mode}, opset=24, name=f"{mode}-{label}",
                     dtypes=["float", "float16"])
            for mode, indices, label in [("linear", [1, 4], "decode"),
                                         ("circular", [5, 3], "wrap")]] + [
            OpSample(["T[2,5,3]", "T[2,5,3]"], attributes={"axis": 1}, opset=24,
                     name="prefill-axis1", dtypes=["float"]),
            OpSample(["T[3,4,2]", "T[3,2,2]", Arg("int64[3]", values=[0, 2, 1])],
                     attributes={"axis": -2, "mode": "linear"}, opset=24, name="3d",
                     dtypes=["int32"])],
    }
