"""OpenVINO's ``DeformableConv2D(data, deformation, filters[, mask])`` (its ONNX importer's op,
in the default or the ``org.openvinotoolkit`` domain) in standard ops; registered by the
``mmdeploy`` plugin, which also registers the op's kernel (the oracle).

Semantics (OpenVINO's ``DeformableConvolution-8`` with ``bilinear_interpolation_pad =
false``, what the importer builds): ``y[n, o, p] = sum_{c in group(o), k} w[o, c, k] *
m[n, g(c), k, p] * x[n, c](p * stride - pad_begin + k * dilation + d[n, g(c), k, p])`` with
the offsets ``d`` as ``(dy, dx)`` per kernel tap and offset group (``deformable_groups``),
the mask ``m`` 1 when absent. ``x`` is read bilinearly: a point outside ``[0, H) x [0, W)`` is
0; inside, rows ``floor(y)`` and ``min(floor(y) + 1, H - 1)`` (columns likewise), so the last
row and column extend to the border. ONNX ``DeformConv`` differs only there (torchvision's
rule: points with ``-1 < y < H`` mix their in-image neighbours), so the body is the
``onnx-lowering`` plugin's ``DeformConv`` body (:func:`rewriter_plugins.onnx_lowering.
convolution.build_deform_conv`) with OpenVINO's border rule, written at the model's opset
(from 7; below 11 for a declared batch size and output size).

Attributes as the importer reads them: ``strides``, ``dilations`` (2 values), ``pads``
(``[top, left, bottom, right]``), ``group``, ``deformable_groups``; ``auto_pad`` other than
``NOTSET``/``VALID`` is declined (as the kernel declines it).
"""

from __future__ import annotations

import numpy as np
from onnx import FunctionProto, helper

from rewriter.plugin import Arg, Declined, DecompositionContext, OpSample
from rewriter.plugin import present as _present

DOMAINS = ("", "org.openvinotoolkit")
OPSETS = (7, None)  # onnx-lowering's DeformConv body is written at any opset from 7
_ATTRIBUTES = {"strides", "dilations", "pads", "group", "deformable_groups", "auto_pad"}


def _kernel_shape(ctx, name: str) -> list[int] | None:
    dims = ctx.shape(name)  # the constant's shape, else the declared one
    return dims[2:] if dims is not None and len(dims) == 4 and None not in dims[2:] else None


def build_deformable_conv_2d(ctx) -> FunctionProto | None:
    """``DeformableConv2D`` -> ``DeformConv``'s body (onnx-lowering) with OpenVINO's border
    rule, inputs and attributes renamed."""
    from rewriter_plugins.onnx_lowering.convolution import build_deform_conv

    node = ctx.node
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    if set(attrs) - _ATTRIBUTES:
        raise Declined(f"unknown attribute(s) {sorted(set(attrs) - _ATTRIBUTES)}")
    auto_pad = attrs.get("auto_pad", b"NOTSET")
    auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else auto_pad
    if auto_pad not in ("NOTSET", "VALID", ""):
        raise Declined(f"auto_pad={auto_pad} is not implemented (only NOTSET, VALID)")
    strides, dilations = attrs.get("strides", [1, 1]), attrs.get("dilations", [1, 1])
    pads = [0, 0, 0, 0] if auto_pad == "VALID" else attrs.get("pads", [0, 0, 0, 0])
    if len(strides) != 2 or len(dilations) != 2 or len(pads) != 4:
        raise Declined("strides and dilations need 2 values, pads 4")
    if len(node.input) not in (3, 4) or not all(_present(node.input, i)
                                                for i in range(len(node.input))):
        raise Declined("needs data, deformation and filters (and a mask, if any) given")
    if len(node.output) != 1 or (ctx.input_types and ctx.input_types[0] not in (
            None, "tensor(float)")):
        raise Declined("one output, float data")
    kernel = _kernel_shape(ctx, node.input[2])
    if kernel is None:
        raise Declined("the filters' kernel size is unknown (neither declared nor constant)")
    data, deformation, filters = node.input[:3]
    mask = node.input[3] if len(node.input) > 3 else ""
    as_deform_conv = helper.make_node(
        "DeformConv", [data, filters, deformation, "", mask] if mask else
        [data, filters, deformation], [node.output[0]], kernel_shape=kernel,
        strides=list(strides), pads=list(pads), dilations=list(dilations),
        group=attrs.get("group", 1), offset_group=attrs.get("deformable_groups", 1))
    types = list(ctx.input_types or [None] * len(node.input))
    types += [None] * (len(node.input) - len(types))
    reordered = [types[0], types[2], types[1]] + ([None, types[3]] if mask else [])
    fn = build_deform_conv(DecompositionContext(
        as_deform_conv, ctx.opset, ctx.opsets, reordered, declared=ctx.declared,
        constants=ctx.constants), sampling="openvino")
    # the body's formal inputs bind by position: DeformableConv2D's order
    del fn.input[:]
    fn.input.extend(["X", "offset", "W"] + (["mask"] if mask else []))
    fn.domain, fn.name = "mmdeploy", "openvino_deformable_conv_2d"
    return fn


# -- samples (the oracle: the mmdeploy plugin's kernel of the op) --------------------------


def _offsets(rng, shape):
    """Offsets that reach past every border, on and between pixel centres."""
    return np.round(rng.uniform(-3, 3, shape) * 2) / 2 + rng.uniform(-0.3, 0.3, shape) * (
        rng.uniform(0, 1, shape) < 0.5)


def _sample(opset: int, name: str, *, n=2, c=4, h=6, w=5, o=6, kh=3, kw=3, group=1, dg=1,
            strides=(1, 1), pads=(0, 0, 0, 0), dilations=(1, 1), mask=False) -> OpSample:
    oh = (h + pads[0] + pads[2] - (dilations[0] * (kh - 1) + 1)) // strides[0] + 1
    ow = (w + pads[1] + pads[3] - (dilations[1] * (kw - 1) + 1)) // strides[1] + 1
    inputs = [f"T[{n},{c},{h},{w}]", Arg(f"T[{n},{dg * 2 * kh * kw},{oh},{ow}]",
                                         values=_offsets),
              f"T[{o},{c // group},{kh},{kw}]"]
    if mask:
        inputs.append(Arg(f"T[{n},{dg * kh * kw},{oh},{ow}]", low=0, high=1))
    attributes = dict(strides=list(strides), pads=list(pads), dilations=list(dilations),
                      group=group, deformable_groups=dg)
    return OpSample(inputs, attributes=attributes, opset=opset, tolerance=(1e-4, 1e-4),
                    name=name)


def samples(first_domain: bool) -> list[OpSample]:
    """At opset 7 (the corpus model's: static gather), 11 (Range, GatherElements), 13 and 19
    (GreaterOrEqual); the second domain shares the builder, one sample checks it."""
    out = [
        _sample(7, "opset7-groups-mask", group=2, dg=2, mask=True),
        _sample(7, "opset7-strides-pads-dilations", strides=(2, 1), pads=(1, 0, 2, 1),
                dilations=(1, 2), dg=2),
        _sample(11, "opset11-plain", n=1, c=2, o=3, kh=2, kw=2),
        _sample(13, "opset13-groups-strides", group=2, strides=(2, 2), pads=(1, 1, 1, 1)),
        _sample(19, "opset19-mask-dilations", dg=4, mask=True, dilations=(2, 1),
                pads=(2, 1, 0, 1)),
    ]
    return out if first_domain else out[2:3]


def register(registry) -> None:
    """Called by the mmdeploy plugin's ``register_decompositions`` (its kernel is the
    oracle)."""
    for i, domain in enumerate(DOMAINS):
        registry.add(domain, "DeformableConv2D", build_deformable_conv_2d, opsets=OPSETS,
                     dtypes=("float",), oracle="kernel", samples=samples(i == 0),
                     description="mmdeploy:DeformableConv2D -> onnx-lowering's DeformConv "
                                 "body, OpenVINO's border rule")
