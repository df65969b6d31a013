"""Image ops on ``[N, C, H, W]`` tensors that onnx removed (deprecated in opset 10),
semantics from the removed schemas and onnxruntime's CPU kernels (which WinML models were
written for; float16/float/double):

* ``Crop(input)`` (``border = [left, top, right, bottom]``, required; ``scale = [height,
  width]``, optional): rows ``top .. H - bottom`` and columns ``left .. W - right``, or with
  ``scale`` rows ``top .. top + height`` and columns ``left .. left + width``: one ``Slice``
  of axes 2 and 3 (ends from the declared ``H``/``W`` when known, else counted from the
  end). An image smaller than its borders is an error in onnxruntime and an empty slice
  here.
* ``ImageScaler(input)`` (``scale`` = 1, ``bias`` one value per channel):
  ``scale * input + bias[c]``; without ``bias`` (optional in the schema, refused by
  onnxruntime) ``scale * input``. A ``bias`` whose length is not the declared channel count
  is declined.
* ``MeanVarianceNormalization(input)`` below opset 9 (the experimental form:
  ``across_channels`` = 0, ``normalize_variance`` = 1; from 9 the standard op with ``axes``):
  ``(x - mean) / sqrt(var)`` with the mean and (biased) variance over the batch and the
  spatial axes per channel (``[0, 2, 3]``), or over all four axes with ``across_channels``;
  only ``x - mean`` with ``normalize_variance = 0``. No epsilon. The schema says no more;
  onnxruntime's kernel (``MeanVarianceNormalization_0``) computes it so, and opset 9's
  standard op kept those axes as its default. An input whose declared rank is not 4 is
  declined (onnxruntime refuses fewer axes and mis-shapes more).

Oracle: onnxruntime's CPU kernels (float, opsets 7-9; MVN 7-8), numpy for double, float16
and the forms onnxruntime refuses.
"""

from __future__ import annotations

import numpy as np
from onnx import FunctionProto
from rewriter_plugins.onnx_removed._body import (
    DOMAIN,
    FLOAT_DTYPES,
    REMOVED_OPSETS,
    attributes,
    declared_shape,
    float_body,
)

from rewriter.plugin import Arg, Declined, OpSample

MVN_OPSETS = (7, 8)  # MeanVarianceNormalization-9 is the standard op
_END = np.iinfo(np.int64).max


def _rank_4(ctx, op: str) -> list[int | None] | None:
    shape = declared_shape(ctx, ctx.node.input[0]) if ctx.node.input else None
    if shape is not None and len(shape) != 4:
        raise Declined(f"{op} reads [N, C, H, W]: the input's declared rank is {len(shape)}")
    return shape


def build_crop(ctx) -> FunctionProto | None:
    attrs = attributes(ctx, {"border", "scale"})
    border, size = list(attrs.get("border", [])), attrs.get("scale")
    if len(border) != 4 or (size is not None and len(size) != 2) or min(border) < 0:
        raise Declined("border needs 4 values >= 0 (left, top, right, bottom), scale 2 "
                       "(height, width)")
    if len(ctx.node.input) != 1:
        raise Declined("one input")
    shape = _rank_4(ctx, "Crop")
    left, top, right, bottom = border
    if size is not None:
        ends = [top + size[0], left + size[1]]
    else:
        ends = []
        for dim, cut in ((shape[2] if shape else None, bottom), (shape[3] if shape else None,
                                                                 right)):
            ends.append(dim - cut if dim is not None else (-cut if cut else _END))
    b = float_body(ctx)
    y = b.slice("input", [top, left], ends, [2, 3])
    return b.function(DOMAIN, "crop", ["input"], [y])


def build_image_scaler(ctx) -> FunctionProto | None:
    attrs = attributes(ctx, {"bias", "scale"})
    shape = _rank_4(ctx, "ImageScaler")
    bias = attrs.get("bias")
    if bias is not None and shape is not None and shape[1] is not None and \
            len(bias) != shape[1]:
        raise Declined(f"bias has {len(bias)} values for {shape[1]} channels")
    b = float_body(ctx)
    y = b.op("Mul", b.literal(attrs.get("scale", 1.0)), "input")
    if bias is not None:
        y = b.op("Add", y, b.const(np.asarray(bias).reshape(-1, 1, 1), b.elem_type))
    return b.function(DOMAIN, "image_scaler", ["input"], [y])


def build_mean_variance_normalization(ctx) -> FunctionProto | None:
    attrs = attributes(ctx, {"across_channels", "normalize_variance"})
    _rank_4(ctx, "MeanVarianceNormalization")
    axes = [0, 1, 2, 3] if attrs.get("across_channels", 0) else [0, 2, 3]
    b = float_body(ctx)
    centred = b.op("Sub", "input", b.reduce_mean("input", axes))
    if attrs.get("normalize_variance", 1):
        variance = b.reduce_mean(b.op("Mul", centred, centred), axes)
        centred = b.op("Div", centred, b.op("Sqrt", variance))
    return b.function(DOMAIN, "mean_variance_normalization", ["input"], [centred])


# -- oracles (numpy, from the removed schemas' text and onnxruntime's kernels) ------------


def crop(x, border, scale=None):
    left, top, right, bottom = border
    height, width = x.shape[2:4]
    if scale is not None:
        return x[:, :, top:top + scale[0], left:left + scale[1]]
    return x[:, :, top:height - bottom, left:width - right]


def image_scaler(x, bias=None, scale=1.0):
    y = scale * x.astype(np.float64)
    if bias is not None:
        y = y + np.asarray(bias, np.float64).reshape(1, -1, 1, 1)
    return y.astype(x.dtype)


def mean_variance_normalization(x, across_channels=0, normalize_variance=1):
    axes = (0, 1, 2, 3) if across_channels else (0, 2, 3)
    wide = x.astype(np.float64)
    y = wide - wide.mean(axis=axes, keepdims=True)
    if normalize_variance:
        y = y / np.sqrt((y * y).mean(axis=axes, keepdims=True))
    return y.astype(x.dtype)


# -- registration ----------------------------------------------------------------------------

_OWN = "rewriter_plugins.onnx_removed.image:"


def _crop_samples() -> list[OpSample]:
    return [
        OpSample(["T[2,3,7,8]"], attributes={"border": [1, 2, 3, 0]}, opset=7,
                 dtypes=["float"], name="border"),
        OpSample(["T[1,2,9,6]"], attributes={"border": [2, 2, 2, 2]}, opset=9,
                 dtypes=["float"], name="candy-border"),
        OpSample(["T[2,3,7,8]"], attributes={"border": [1, 2, 0, 1], "scale": [3, 4]},
                 opset=8, dtypes=["float"], name="scale"),
        OpSample(["T[2,3,7,8]"], attributes={"border": [0, 1, 2, 3]}, opset=9,
                 dtypes=["double", "float16"], oracle=_OWN + "crop", name="numpy"),
    ]


def _image_scaler_samples() -> list[OpSample]:
    candy = {"bias": [-103.939, -116.779, -123.68], "scale": 1.0}
    return [
        OpSample([Arg("T[2,3,5,4]", low=0, high=255)], attributes=candy, opset=7,
                 dtypes=["float"], name="candy"),
        OpSample(["T[1,4,3,3]"], attributes={"bias": [0.5, -1.0, 2.0, 0.0], "scale": 0.0078},
                 opset=9, dtypes=["float"], name="scale-bias"),
        OpSample(["T[1,4,3,3]"], attributes={"scale": 2.5}, opset=8, dtypes=FLOAT_DTYPES,
                 oracle=_OWN + "image_scaler", name="no-bias"),
        OpSample(["T[1,2,3,3]"], attributes={"bias": [1.0, -2.0], "scale": 3.0}, opset=8,
                 dtypes=["double", "float16"], oracle=_OWN + "image_scaler", name="numpy"),
    ]


def _mvn_samples() -> list[OpSample]:
    return [OpSample(["T[2,3,4,5]"], attributes=attrs, opset=opset, dtypes=["float"],
                     tolerance=(1e-4, 1e-5), name=name)
            for opset, attrs, name in [(7, {}, "defaults"),
                                       (8, {"across_channels": 1}, "across-channels"),
                                       (7, {"normalize_variance": 0}, "mean-only"),
                                       (8, {"across_channels": 1, "normalize_variance": 0},
                                        "across-mean-only")]] + [
        OpSample(["T[2,3,4,5]"], attributes={"across_channels": 1}, opset=8,
                 dtypes=["double", "float16"], oracle=_OWN + "mean_variance_normalization",
                 name="numpy")]


OPS = [  # (op, builder, opsets, samples, note)
    ("Crop", build_crop, REMOVED_OPSETS, _crop_samples(), "Slice of H and W"),
    ("ImageScaler", build_image_scaler, REMOVED_OPSETS, _image_scaler_samples(),
     "scale * x + bias per channel"),
    ("MeanVarianceNormalization", build_mean_variance_normalization, MVN_OPSETS,
     _mvn_samples(), "experimental form, before opset 9"),
]


def register(registry) -> None:
    for op, builder, opsets, samples, note in OPS:
        registry.add("", op, builder, opsets=opsets, dtypes=FLOAT_DTYPES,
                     oracle="onnxruntime", samples=samples,
                     description=f"onnx-removed:{op} ({note})")
