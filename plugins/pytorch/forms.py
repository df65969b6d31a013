"""The node forms of a PyTorch fallback (``ATen``, ``org.pytorch.aten::<op>``,
``org.pytorch.aten::ATen``/``com.microsoft::ATen``, ``com.microsoft::ATenOp``): each read
into an :class:`AtenCall` and built by its operator's body (:data:`BODIES`, gathered from
the op-family modules).
"""

from __future__ import annotations

import json
from typing import Any

from onnx import FunctionProto, TensorProto, helper

from rewriter.plugin import Declined

from . import activations, indexing, normalization, resampling
from .body import FLOAT_TYPES, Body, body_opset, compute_type
from .calls import AtenCall, attributes, first, resolve_named, resolve_positional, schema_names

BODIES = {**normalization.BODIES, **activations.BODIES, **indexing.BODIES,
          **resampling.BODIES}
# the tensor argument whose element type the computation follows
_MAIN_TENSOR = {"embedding": "weight"}
# minimum ai.onnx opset of each body (the builders decline below it); the iota of
# NonZero(ConstantOfShape) and Where need opset 9
MIN_OPSETS = {"layer_norm": 5, "group_norm": 5, "adaptive_avg_pool1d": 11,
              "adaptive_avg_pool2d": 11, "adaptive_avg_pool3d": 11, "embedding": 1,
              "index_select": 5, "gelu": 9, "silu": 6, "grid_sampler": 16, "cumsum": 9,
              "tril": 9, "triu": 9, "flip": 9, "roll": 9, "masked_fill": 9,
              **{name: 9 for name in BODIES if name.startswith("upsample_")}}
# element types beyond the float ones each operator takes (data movement: any numeric)
_INTEGERS = (TensorProto.INT8, TensorProto.INT16, TensorProto.INT32, TensorProto.INT64,
             TensorProto.UINT8)
_OTHER_TYPES = {"cumsum": (*_INTEGERS, TensorProto.BOOL),
                **{op: (*_INTEGERS, TensorProto.BOOL)
                   for op in ("tril", "triu", "flip", "roll", "masked_fill", "index_select")}}
_ELEM_TYPES = {f"tensor({helper.tensor_dtype_to_string(t).removeprefix('TensorProto.').lower()})":
               t for t in (*FLOAT_TYPES.values(), *_INTEGERS, TensorProto.BOOL)}


def build_call(call: AtenCall | None, ctx) -> FunctionProto | None:
    """The body for a resolved call (Declined: not this call)."""
    if call is None:
        raise Declined("no ATen schema of the operator takes these arguments (an unknown "
                       "operator, argument or type)")
    if len(ctx.node.output) != 1 or not ctx.node.output[0]:
        raise Declined("the body gives one output; the node uses another")
    opset = body_opset(ctx)
    if opset < MIN_OPSETS[call.operator]:
        raise Declined(f"aten::{call.operator} needs ai.onnx opset "
                       f"{MIN_OPSETS[call.operator]}; the body would be at {opset}")
    main = _MAIN_TENSOR.get(call.operator) or next(iter(call.tensors))
    elem = _ELEM_TYPES.get(call.tensor_types.get(main) or "")
    if elem is None or (elem not in FLOAT_TYPES.values()
                        and elem not in _OTHER_TYPES.get(call.operator, ())):
        raise Declined(f"an unknown element type, or one aten::{call.operator} does not take "
                       "here")
    for arg, formal in call.tensors.items():
        if formal is not None:
            call.shapes[arg] = ctx.shape(ctx.node.input[int(formal[2:])])
    b = Body(opset, compute_type(elem))
    outputs = BODIES[call.operator](b, call, elem)
    if outputs is None:
        raise Declined(f"aten::{call.operator}: these argument values have no body at opset "
                       f"{opset}")
    name = call.operator.replace(".", "_")
    return b.positional_function(f"aten_{name}", len(ctx.node.input), outputs)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def build_aten(ctx) -> FunctionProto | None:
    """``ATen`` (default domain): ``operator`` names the op, other attributes its arguments."""
    node = ctx.node
    attrs = attributes(node, ())
    operator = _text(attrs.pop("operator", b""))
    names = schema_names(operator, attrs.pop("overload_name", b""))
    types = list(ctx.input_types or [])
    call = first(lambda name: resolve_named(name, list(node.input), attrs, types), names)
    return build_call(call, ctx)


def build_org_pytorch_aten(ctx) -> FunctionProto | None:
    """``org.pytorch.aten::<op>``: positional arguments, or named ones when attributed."""
    node = ctx.node
    names = schema_names(node.op_type, "")
    if node.attribute:
        attrs, types = attributes(node, ()), list(ctx.input_types or [])
        call = first(lambda name: resolve_named(name, list(node.input), attrs, types), names)
    else:
        call = first(lambda name: resolve_positional(name, list(node.input), ctx), names)
    return build_call(call, ctx)


def build_positional_aten(ctx) -> FunctionProto | None:
    """``org.pytorch.aten::ATen`` (torch's ``ONNX_ATEN_FALLBACK`` export) and
    ``com.microsoft::ATen``: attributes ``operator``/``overload_name``, every argument an
    input (constants for non-tensors, an empty name for None); or, as older exporters wrote
    it, the non-tensor arguments as attributes (read as the default-domain ``ATen``)."""
    attrs = attributes(ctx.node, ())
    operator = _text(attrs.pop("operator", b""))
    names = schema_names(operator, attrs.pop("overload_name", b""))
    if attrs:  # older exporters: tensors as inputs, the other arguments as attributes
        return build_aten(ctx)
    call = first(lambda name: resolve_positional(name, list(ctx.node.input), ctx), names)
    return build_call(call, ctx)


build_ms_aten = build_positional_aten


def parse_atenop(node) -> tuple[str, str, dict[str, Any]] | None:
    """``com.microsoft::ATenOp``'s operator name, overload and JSON arguments (None:
    malformed)."""
    attrs = attributes(node, ())
    name = _text(attrs.pop("name", b""))
    raw = attrs.pop("custom_attributes_json", b"{}")
    if attrs or not name.startswith("aten::"):
        return None
    operator, _, overload = name[len("aten::"):].partition(".")
    try:
        arguments = json.loads(_text(raw))
    except ValueError:
        return None
    if not isinstance(arguments, dict):
        return None
    return operator, overload, arguments


def build_ms_atenop(ctx) -> FunctionProto | None:
    """``com.microsoft::ATenOp``: ``name="aten::op"``, JSON arguments."""
    parsed = parse_atenop(ctx.node)
    if parsed is None:
        raise Declined("name is not 'aten::OP' with a JSON object of arguments")
    operator, overload, arguments = parsed
    types = list(ctx.input_types or [])
    call = first(lambda name: resolve_named(name, list(ctx.node.input), arguments, types),
                  schema_names(operator, overload))
    return build_call(call, ctx)


