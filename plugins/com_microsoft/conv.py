"""Convolutions of com.microsoft, in standard ONNX:

* ``FusedConv(X, W[, B[, Z]])``: ``act(Conv(X, W, B) + Z)``, activation ``activation`` with
  ``activation_params`` (Relu, Tanh, Sigmoid, LeakyRelu [alpha], Clip [min, max],
  HardSigmoid [alpha, beta]).
* ``NhwcConv(X, W[, B])`` / ``NhwcFusedConv(X, W[, B[, Z]])``: the same on channels-last
  ``X`` (transposed to channels-first and back); the spatial rank comes from
  ``kernel_shape``, the constant weight's shape or declared types (declines otherwise).
  ``NhwcConv``'s weight is channels-last too, ``M x kH x kW x C/group``: that is what its
  producer writes (onnxruntime's ``transformers/fusion_nhwc_conv.py`` transposes the Conv
  weight by ``[0, 2, 3, 1]``) and what its CUDA kernel reads; it is transposed back to
  ``M x C/group x kH x kW`` here. ``NhwcFusedConv``'s weight keeps the Conv layout, as its
  schema says and onnxruntime's NHWC transformer (fp16 Conv -> NhwcFusedConv) leaves it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from onnx import AttributeProto, FunctionProto, TensorProto, helper

from rewriter.plugin import Arg, Declined, OpSample, declining, kernel
from rewriter.plugin import present as _present

from .common import (
    DOMAIN,
    Body,
    activation,
    add,
    body_opset,
    formal_inputs,
    input_elem_type,
    onnxruntime_node,
    sample,
    single_output,
    unknown_attributes,
)

NHWCCONV_OPSETS = (11, None)
CONV_OPSETS = (11, None)


def _conv_activation(b: Body, x: str, kind: str, params: Sequence[float]) -> str:
    """FusedConv's activations (onnxruntime's MLAS set): parameters by position."""
    counts = {"": 0, "Relu": 0, "Tanh": 0, "Sigmoid": 0, "LeakyRelu": 1, "Clip": 2,
              "HardSigmoid": 2}
    if kind not in counts or len(params) != counts[kind]:
        raise Declined(f"activation {kind!r} with {len(params)} parameter(s)")
    return activation(b, x, kind, *params)


_CONV_ATTRIBUTES = {
    "auto_pad": AttributeProto.STRING,
    "dilations": AttributeProto.INTS,
    "group": AttributeProto.INT,
    "kernel_shape": AttributeProto.INTS,
    "pads": AttributeProto.INTS,
    "strides": AttributeProto.INTS,
}
_FUSED_ATTRIBUTES = ("activation", "activation_params")


def _spatial_rank(ctx) -> int | None:
    kernel_shape = ctx.attribute("kernel_shape")
    if kernel_shape:
        return len(kernel_shape)
    weight = ctx.constant(ctx.node.input[1])
    if weight is not None and weight.ndim >= 3:
        return weight.ndim - 2
    for name in ctx.node.input[:2]:
        declared = (ctx.declared or {}).get(name)
        if declared is not None and declared.HasField("tensor_type"):
            tensor_type = declared.tensor_type
            if tensor_type.HasField("shape") and len(tensor_type.shape.dim) >= 3:
                return len(tensor_type.shape.dim) - 2
    return None


def _conv_body(ctx, name: str, channels_last: bool, fused: bool) -> FunctionProto | None:
    """Conv (+ Z) (+ activation), optionally on channels-last tensors."""
    node = ctx.node
    allowed = list(_CONV_ATTRIBUTES) + (list(_FUSED_ATTRIBUTES) if fused else [])
    if (not (_present(node.input, 0) and _present(node.input, 1)) or not single_output(node)
            or unknown_attributes(node, allowed)):
        raise Declined("needs X and W, one output, known attributes")
    if not fused and len(node.input) > 3:
        raise Declined("a plain Conv takes at most 3 inputs")
    has_z = fused and _present(node.input, 3)
    b = Body(body_opset(ctx), input_elem_type(ctx))
    x = "X"
    if channels_last:
        rank = _spatial_rank(ctx)
        if rank is None:
            raise Declined("channels-last needs the input's rank, which is not declared")
        x = b.op("Transpose", "X", perm=[0, rank + 1, *range(1, rank + 1)])
    weight = "W"
    if channels_last and not fused:  # NhwcConv: M x k... x C/group -> M x C/group x k...
        weight = b.op("Transpose", "W", perm=[0, rank + 1, *range(1, rank + 1)])
    weights = [weight, "B"] if _present(node.input, 2) else [weight]
    conv_attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute
                  if a.name in _CONV_ATTRIBUTES}
    y = b.op("Conv", x, *weights, **conv_attrs)
    if channels_last:
        y = b.op("Transpose", y, perm=[0, *range(2, rank + 2), 1])
    if has_z:
        y = b.op("Add", y, "Z")
    if fused:
        kind = ctx.attribute("activation", b"")
        kind = kind.decode() if isinstance(kind, bytes) else kind
        y = _conv_activation(b, y, kind, list(ctx.attribute("activation_params", [])))
    return b.function(DOMAIN, name, formal_inputs(node, ["X", "W", "B", "Z"]), [y])


@declining
def build_nhwc_conv(ctx) -> FunctionProto | None:
    return _conv_body(ctx, "nhwc_conv", channels_last=True, fused=False)


@declining
def build_nhwc_fused_conv(ctx) -> FunctionProto | None:
    return _conv_body(ctx, "nhwc_fused_conv", channels_last=True, fused=True)


@declining
def build_fused_conv(ctx) -> FunctionProto | None:
    return _conv_body(ctx, "fused_conv", channels_last=False, fused=True)


_CONV_KERNEL_ATTRIBUTES = {"auto_pad": "NOTSET", "group": 1,
                           "dilations": (list[int], []), "kernel_shape": (list[int], []),
                           "pads": (list[int], []), "strides": (list[int], [])}


@kernel(signatures=["float, float -> float", "float, float, float -> float"],
        attributes=_CONV_KERNEL_ATTRIBUTES)
def nhwc_conv_kernel(x, w, bias=None, **attributes):
    """``Conv`` of onnx's reference evaluator on ``X`` and the weight (``M x k... x C/group``,
    as onnxruntime's NhwcConv fusion writes it) transposed to channels-first."""
    from onnx.reference import ReferenceEvaluator

    attrs = {name: value for name, value in attributes.items() if value != []}  # []: unset
    rank = x.ndim - 2
    names = ["X", "W", "B"] if bias is not None else ["X", "W"]
    graph = helper.make_graph(
        [helper.make_node("Conv", names, ["Y"], **attrs)], "conv",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in names],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    to_channels_first = [0, rank + 1, *range(1, rank + 1)]
    feeds = {"X": np.transpose(x, to_channels_first), "W": np.transpose(w, to_channels_first)}
    if bias is not None:
        feeds["B"] = bias
    (y,) = ReferenceEvaluator(model).run(None, feeds)
    return np.ascontiguousarray(np.transpose(y, [0, *range(2, rank + 2), 1]))


def nhwc_fused_conv_reference(x, w, bias=None, z=None, **attributes):
    """``NhwcFusedConv``: onnxruntime's own ``FusedConv`` kernel on ``X`` (and ``Z``)
    transposed to channels-first, its result transposed back."""
    rank = x.ndim - 2
    first, last = [0, rank + 1, *range(1, rank + 1)], [0, *range(2, rank + 2), 1]
    z = None if z is None else np.transpose(z, first)
    (y,) = onnxruntime_node("FusedConv", DOMAIN, [np.transpose(x, first), w, bias, z],
                             **attributes)
    return np.ascontiguousarray(np.transpose(y, last))


def register_kernels(registry) -> None:
    """The numpy kernel of ``NhwcConv`` (the oracle of a rewrite)."""
    registry.add(DOMAIN, "NhwcConv", f"{__name__}:nhwc_conv_kernel",
                 description="com-microsoft:NhwcConv (numpy oracle)")


_ORACLE = f"{__name__}:"

# 4 input channels, 6 output channels: a weight read in the wrong layout cannot fit
_NHWC_CONV_SAMPLES = [
    OpSample(["T[2,6,5,4]", Arg("T[6,3,3,4]", constant=True), "T[6]"],
             attributes=dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1]), name="pads"),
    OpSample(["T[2,7,6,4]", "T[6,3,3,2]"], name="strides-dilations-group",
             attributes=dict(kernel_shape=[3, 3], strides=[2, 1], dilations=[1, 2], group=2)),
    OpSample(["T[2,6,6,4]", Arg("T[6,3,3,4]", constant=True), "T[6]"], name="auto-pad",
             attributes=dict(auto_pad="SAME_UPPER", strides=[2, 2])),
    OpSample(["T[2,9,4]", Arg("T[6,3,4]", constant=True), "T[6]"], name="1d"),
]


def _oracles() -> dict[str, dict]:
    """Per op: its oracle and the samples it is checked on (``tests/test_oracles.py``)."""
    ort = "onnxruntime"

    def numpy(name):
        return _ORACLE + name

    conv = dict(strides=[2, 2], pads=[1, 0, 1, 0], group=2, kernel_shape=[3, 3])
    conv_inputs = {"X": "T[2,4,7,6]", "W": "T[6,2,3,3]", "B": "T[6]", "Z": "T[2,6,4,2]"}
    return {
        "FusedConv": dict(oracle=ort, samples=[
            sample(*[conv_inputs[c] if c != "-" else None for c in inputs], opset=11,
                   name=kind or "none", attributes={
                       **conv, **({"activation": kind} if kind else {}),
                       **({"activation_params": params} if params else {})})
            for kind, params, inputs in [
                ("Relu", [], "XWB"), ("Tanh", [], "XW"), ("Sigmoid", [], "XWBZ"),
                ("LeakyRelu", [0.2], "XWB"), ("Clip", [-0.5, 0.7], "XW-Z"),
                ("HardSigmoid", [0.3, 0.4], "XW"), ("", [], "XWBZ")]]),
        "NhwcConv": dict(oracle="kernel", samples=_NHWC_CONV_SAMPLES),
        "NhwcFusedConv": dict(oracle=numpy("nhwc_fused_conv_reference"), samples=[
            sample("T[2,7,6,4]", Arg("T[6,4,3,3]", constant=True), "T[6]", *z,
                   attributes=dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1],
                                   activation="LeakyRelu", activation_params=[0.1]),
                   name="z" if z else "")
            for z in ([], ["T[2,7,6,6]"])]),
    }


def register(registry) -> None:
    """Registers this module's decompositions (called by the package's hook)."""
    checked = _oracles()
    add(registry, "FusedConv", build_fused_conv, CONV_OPSETS, checked["FusedConv"])
    add(registry, "NhwcConv", build_nhwc_conv, NHWCCONV_OPSETS, checked["NhwcConv"],
        dtypes=("float",))
    add(registry, "NhwcFusedConv", build_nhwc_fused_conv, NHWCCONV_OPSETS,
        checked["NhwcFusedConv"], dtypes=("float",))
