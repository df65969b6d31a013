"""Remedies ``pytorch``: PyTorch export fallbacks (``ATen``, ``org.pytorch.aten``,
``com.microsoft::ATen``/``ATenOp``, ``org.pytorch._caffe2``).

Node forms (one builder per form, dispatching on the aten operator name):

* ``ATen`` in the default domain (torch.onnx ``ONNX_ATEN_FALLBACK``): attribute ``operator``
  (and maybe ``overload_name``); tensor arguments are the inputs in schema order, the other
  arguments are attributes named as in the aten schema.
* ``org.pytorch.aten::<name>``: without attributes every argument is an input in schema
  order (non-tensor ones must be constants); with attributes, as ``ATen`` above.
* ``org.pytorch.aten::ATen`` (what torch 2.x's ``ONNX_ATEN_FALLBACK`` export writes) and
  ``com.microsoft::ATen`` (onnxruntime training): attributes ``operator``/``overload_name``,
  every argument an input (constants for non-tensors, an empty name for ``None``).
* ``com.microsoft::ATenOp`` (older onnxruntime training export): attribute ``name``
  (``"aten::embedding"``), tensor arguments as inputs, the others in the JSON attribute
  ``custom_attributes_json``.

aten operators (overload ``""``, or ``vec`` for upsample; anything else is declined, as is an
unknown argument name or a non-constant non-tensor argument). ``iota(n)`` below is
``NonZero(ConstantOfShape([n], 1))``, which needs no Range (opset 11):

* ``layer_norm(input, normalized_shape, weight?, bias?, eps=1e-5, cudnn_enable)``: with
  ``x`` viewed as ``[-1, prod(normalized_shape)]``: ``(x - mean) / sqrt(var + eps) * weight
  + bias`` (biased variance). ReduceMean over a positive axis, so valid from opset 5.
* ``group_norm(input, num_groups, weight?, bias?, eps=1e-5, cudnn_enabled)``: the same over
  ``x`` viewed as ``[N, num_groups, -1]``, then ``* weight[c] + bias[c]`` per channel.
* ``adaptive_avg_pool{1,2,3}d(self, output_size)``: output size 1 everywhere: ReduceMean over
  the last k axes; otherwise, per spatial axis of length ``L`` and output ``o``, window ``i``
  is ``[floor(i L / o), ceil((i + 1) L / o))`` (computed from the runtime shape) and its mean
  is taken, axis by axis (the rectangle's mean, exactly as torch). Opset >= 11.
* ``embedding(weight, indices, padding_idx, scale_grad_by_freq, sparse)``:
  ``Gather(weight, indices, axis=0)`` (the other arguments only matter for training).
* ``index_select(self, dim, index)``: ``Gather(self, Reshape(index, [-1]), axis=dim)``.
* ``gelu(self, approximate="none")``: ``0.5 x (1 + erf(x / sqrt 2))`` (opset >= 9); ``"tanh"``:
  ``0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))``.
* ``silu(self)``: ``x * sigmoid(x)``.
* ``grid_sampler(input, grid, interpolation_mode, padding_mode, align_corners)``:
  ``GridSample`` (opset >= 16; modes 0/1/2 = bilinear/nearest/bicubic, padding 0/1/2 =
  zeros/border/reflection).
* ``cumsum(self, dim, dtype=None)``: ``CumSum`` (opset >= 11); opset 9-10: ``x @ U`` along
  the last axis (``U[i, j] = i <= j``, transposed there and back; needs the declared rank;
  floats sum in another order than torch). Integers and bool accumulate in int64, as torch.
* ``tril``/``triu(self, diagonal=0)``: ``Where(j - i > diagonal (tril) / < diagonal (triu),
  0, x)`` over the last two axes.
* ``flip(self, dims)``: ``Gather(x, L - 1 - iota(L))`` per dim; ``roll(self, shifts, dims)``:
  ``Gather(x, (iota(L) - shift) mod L)`` per dim (no dims: on the flattened tensor).
* ``masked_fill(self, mask, value)``: ``Where(mask, Cast(value), self)``.
* ``upsample_{nearest1d,2d,3d, linear1d, bilinear2d, trilinear3d, bicubic2d}`` (default and
  ``.vec`` overloads): torch's CPU kernels, axis by axis from the innermost, with indices
  and weights computed in the graph from ``iota(out)`` in float32 (double for double
  linear/cubic): out size ``floor(L * scale)`` (double) or the given size; ``ratio =
  1 / scale`` when a scale is given, else ``L / out`` (``(L - 1) / (out - 1)`` with
  align_corners); nearest: ``min(floor(i * ratio), L - 1)`` (``i`` when out == L, ``i // 2``
  when out == 2L); linear: ``src = max(ratio (i + 0.5) - 0.5, 0)`` (``ratio i`` aligned),
  ``i0 = min(floor(src), L - 1)``, ``i1 = min(i0 + 1, L - 1)``, weights ``1 - t, t`` with
  ``t = clamp(src - i0, 0, 1)``; bicubic: four taps ``clamp(i0 - 1 + j, 0, L - 1)`` with
  A = -0.75 coefficients. Valid from opset 9 (Resize's coordinate modes need 11, which is
  why torch falls back to ATen below it).

Negative dims below opset 11 need the declared rank (Gather's negative indices arrive at 11).
float16 (and bfloat16) inputs are computed in float32 and cast back once, as torch's CPU
kernels do. A model importing no ai.onnx opset (OpenVINO's test models) gets bodies at
opset ``FALLBACK_OPSET``.

``org.pytorch._caffe2::GenerateProposals`` (upright boxes, float) is decomposed from
opset 9, image by image in ``(N, K)`` tensors: scores and deltas in (h, w, a) order, anchors
shifted to every cell (``anchor + (w, h, w, h) / spatial_scale``), ``TopK`` of
``pre_nms_topN`` (all when <= 0; TopK-1's static ``k`` below opset 10 needs a declared
``A*H*W``), caffe2's box transform (``dw, dh`` clipped at ``log(1000/16)``, ``+1`` widths in
legacy_plus_one mode), clip to ``[0, int(width) - p]``, the min-size filter (``min_size *
im_scale`` in double, centres inside the image), then greedy NMS as a ``Loop`` over the K
sorted positions (keep a live box while its image has < ``post_nms_topN``; kill the others
whose ``+p`` IoU > ``nms_thresh`` or is NaN; stop once every image is full): onnxruntime's
NonMaxSuppression (opset 10) would need ``x2 + 1`` tricks and differs in rounding, so it is
not used. Outputs ``rois (R, 5)`` (image index, box) and ``rois_probs (R)`` in image, then
score order. Rotated anchors (A, 5) or an undeclared anchor width are declined; the numpy
kernel (``rewriter_custom_ops.caffe2_generate_proposals``) then runs the node. The ``ATen``
and ``ATenOp`` forms also have numpy kernels (``rewriter_custom_ops.aten_fallback``, which
decline unknown operators through ``accepts``) so that ``compare`` can run an original model
on the reference evaluator; ``org.pytorch.aten::ATen`` has none (its non-tensor arguments
are inputs, some absent, which kernel signatures cannot express).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from onnx import FunctionProto, TensorProto, helper

from rewriter.plugin import Declined, FunctionBuilder, hookimpl
from rewriter.plugin import present as _present

ATEN_DOMAIN = "org.pytorch.aten"
MS_DOMAIN = "com.microsoft"
CAFFE2_DOMAIN = "org.pytorch._caffe2"
BODY_DOMAIN = "pytorch"
FALLBACK_OPSET = 13  # the body opset for a model without an ai.onnx import

_FLOAT_TYPES = {
    "tensor(float)": TensorProto.FLOAT,
    "tensor(float16)": TensorProto.FLOAT16,
    "tensor(double)": TensorProto.DOUBLE,
    "tensor(bfloat16)": TensorProto.BFLOAT16,
}
_REQUIRED = object()


@dataclass(frozen=True)
class Arg:
    """One argument of an aten schema: ``kind`` is tensor, tensor?, int, float, bool, ints,
    floats or str; a trailing ``?`` (``float?``) admits None (absent)."""

    name: str
    kind: str
    default: Any = _REQUIRED

    @property
    def is_tensor(self) -> bool:
        return self.kind.startswith("tensor")


def _schema(*args: tuple) -> tuple[Arg, ...]:
    return tuple(Arg(*a) for a in args)


_POOL = _schema(("self", "tensor"), ("output_size", "ints"))
ATEN_SCHEMAS: dict[str, tuple[Arg, ...]] = {
    "layer_norm": _schema(("input", "tensor"), ("normalized_shape", "ints"),
                          ("weight", "tensor?", None), ("bias", "tensor?", None),
                          ("eps", "float", 1e-5), ("cudnn_enable", "bool", True)),
    "group_norm": _schema(("input", "tensor"), ("num_groups", "int"),
                          ("weight", "tensor?", None), ("bias", "tensor?", None),
                          ("eps", "float", 1e-5), ("cudnn_enabled", "bool", True)),
    "adaptive_avg_pool1d": _POOL,
    "adaptive_avg_pool2d": _POOL,
    "adaptive_avg_pool3d": _POOL,
    "embedding": _schema(("weight", "tensor"), ("indices", "tensor"), ("padding_idx", "int", -1),
                         ("scale_grad_by_freq", "bool", False), ("sparse", "bool", False)),
    "index_select": _schema(("self", "tensor"), ("dim", "int"), ("index", "tensor")),
    "gelu": _schema(("self", "tensor"), ("approximate", "str", "none")),
    "silu": _schema(("self", "tensor"),),
    "grid_sampler": _schema(("input", "tensor"), ("grid", "tensor"),
                            ("interpolation_mode", "int"), ("padding_mode", "int"),
                            ("align_corners", "bool")),
}


def _upsample_schemas(name: str, rank: int, align: bool) -> dict[str, tuple[Arg, ...]]:
    """``upsample_*`` (output size required, one optional scale per axis) and its ``.vec``
    overload (output size or scale factors)."""
    axes = {1: ("scales",), 2: ("scales_h", "scales_w"),
            3: ("scales_d", "scales_h", "scales_w")}[rank]
    corners = (("align_corners", "bool"),) if align else ()
    return {
        name: _schema(("self", "tensor"), ("output_size", "ints"), *corners,
                      *((a, "float?", None) for a in axes)),
        f"{name}.vec": _schema(("input", "tensor"), ("output_size", "ints?", None), *corners,
                               ("scale_factors", "floats?", None)),
    }


ATEN_SCHEMAS.update({
    "cumsum": _schema(("self", "tensor"), ("dim", "int"), ("dtype", "int?", None)),
    "tril": _schema(("self", "tensor"), ("diagonal", "int", 0)),
    "triu": _schema(("self", "tensor"), ("diagonal", "int", 0)),
    "flip": _schema(("self", "tensor"), ("dims", "ints")),
    "roll": _schema(("self", "tensor"), ("shifts", "ints"), ("dims", "ints", [])),
    "masked_fill": _schema(("self", "tensor"), ("mask", "tensor"), ("value", "tensor")),
    **_upsample_schemas("upsample_nearest1d", 1, False),
    **_upsample_schemas("upsample_nearest2d", 2, False),
    **_upsample_schemas("upsample_nearest3d", 3, False),
    **_upsample_schemas("upsample_linear1d", 1, True),
    **_upsample_schemas("upsample_bilinear2d", 2, True),
    **_upsample_schemas("upsample_trilinear3d", 3, True),
    **_upsample_schemas("upsample_bicubic2d", 2, True),
})
_ACCEPTED_OVERLOADS = ("", "default")


@dataclass
class AtenCall:
    """A node resolved against an aten schema: tensor arguments name function inputs
    (``None``: absent), the others are Python values."""

    operator: str
    tensors: dict[str, str | None]
    values: dict[str, Any]
    tensor_types: dict[str, str | None]
    # declared shapes of the tensor arguments (None: unknown; None per unknown dim)
    shapes: dict[str, list[int | None] | None] = field(default_factory=dict)


# -- argument resolution -----------------------------------------------------------------


def _convert(value: Any, kind: str) -> Any:
    """A Python value of the argument's kind from an attribute, JSON or constant value;
    raises ValueError when it does not fit."""
    if kind.endswith("?"):
        return None if value is None else _convert(value, kind[:-1])
    if isinstance(value, np.ndarray):
        if kind == "ints":
            if value.dtype.kind not in "iu":
                raise ValueError("not a list of ints")
            return [int(v) for v in value.reshape(-1)]
        if kind == "floats":
            return [float(v) for v in value.reshape(-1)]
        if value.size != 1:
            raise ValueError("not a scalar")
        value = value.reshape(-1)[0]
        value = value.item() if hasattr(value, "item") else value
    if isinstance(value, bytes):
        value = value.decode()
    if kind == "int":
        if isinstance(value, float) or isinstance(value, str):
            raise ValueError("not an int")
        return int(value)
    if kind == "bool":
        if isinstance(value, str):
            raise ValueError("not a bool")
        return bool(value)
    if kind == "float":
        if isinstance(value, str):
            raise ValueError("not a float")
        return float(value)
    if kind == "ints":
        if isinstance(value, list | tuple):
            return [int(v) for v in value]
        if isinstance(value, int):
            return [value]
        raise ValueError("not a list of ints")
    if kind == "floats":
        if isinstance(value, list | tuple) and not any(isinstance(v, str) for v in value):
            return [float(v) for v in value]
        if isinstance(value, int | float):
            return [float(value)]
        raise ValueError("not a list of floats")
    if kind == "str":
        if not isinstance(value, str):
            raise ValueError("not a string")
        return value
    raise ValueError(f"unknown kind {kind}")


def schema_names(operator: str, overload: Any) -> list[str]:
    """The schemas a node may call, in the order tried: ``op`` then ``op.vec`` for the
    default overload (torch names the ``.vec`` upsample overloads ``""`` too), ``op.vec``
    alone for ``vec``; [] for an unknown operator or overload."""
    if isinstance(overload, bytes):
        overload = overload.decode()
    if overload == "vec":
        names = [f"{operator}.vec"]
    elif overload in _ACCEPTED_OVERLOADS:
        names = [operator, f"{operator}.vec"]
    else:
        return []
    return [n for n in names if n in ATEN_SCHEMAS]


def _first(resolve: Callable[[str], AtenCall | None], names: Sequence[str]) -> AtenCall | None:
    for name in names:
        call = resolve(name)
        if call is not None:
            return call
    return None


def _resolve_named(operator: str, node_inputs: Sequence[str], named: dict[str, Any],
                   input_types: Sequence[str | None]) -> AtenCall | None:
    """Tensor arguments from the inputs in schema order, the others from ``named``."""
    schema = ATEN_SCHEMAS.get(operator)
    if schema is None:
        return None
    names = {a.name for a in schema if not a.is_tensor}
    if any(key not in names for key in named):
        return None  # an argument this schema does not have: never drop it
    tensor_args = [a for a in schema if a.is_tensor]
    if len(node_inputs) > len(tensor_args):
        return None
    call = AtenCall(operator, {}, {}, {})
    for i, arg in enumerate(tensor_args):
        name = node_inputs[i] if i < len(node_inputs) else ""
        if not name and arg.kind == "tensor":
            return None
        call.tensors[arg.name] = f"in{i}" if name else None
        call.tensor_types[arg.name] = input_types[i] if name and i < len(input_types) else None
    for arg in schema:
        if arg.is_tensor:
            continue
        if arg.name in named:
            try:
                call.values[arg.name] = _convert(named[arg.name], arg.kind)
            except ValueError:
                return None
        elif arg.default is _REQUIRED:
            return None
        else:
            call.values[arg.name] = arg.default
    return call


def _resolve_positional(operator: str, node_inputs: Sequence[str], ctx) -> AtenCall | None:
    """Every argument an input in schema order; non-tensor ones must be constants."""
    schema = ATEN_SCHEMAS.get(operator)
    if schema is None or len(node_inputs) > len(schema):
        return None
    types = list(ctx.input_types or [])
    call = AtenCall(operator, {}, {}, {})
    for i, arg in enumerate(schema):
        name = node_inputs[i] if i < len(node_inputs) else ""
        if arg.is_tensor:
            if not name and arg.kind == "tensor":
                return None
            call.tensors[arg.name] = f"in{i}" if name else None
            call.tensor_types[arg.name] = types[i] if name and i < len(types) else None
            continue
        if not name:
            if arg.default is _REQUIRED:
                return None
            call.values[arg.name] = arg.default
            continue
        value = ctx.constant(name)
        if value is None:
            return None  # a computed scalar: the body needs it at build time
        try:
            call.values[arg.name] = _convert(value, arg.kind)
        except ValueError:
            return None
    return call


def _attributes(node, skip: Sequence[str]) -> dict[str, Any]:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute if a.name not in skip}


# -- body construction -------------------------------------------------------------------


class _Body(FunctionBuilder):
    """Collects the nodes of one function body written for ai.onnx ``opset``; ``elem_type``
    is the element type of the computation (float32 for float16 inputs). A subgraph's body
    gets a ``prefix`` that keeps its names apart from its outer scope's."""

    def iota(self, length: str) -> str:
        """``[0, 1, ..., n - 1]`` (int64) for ``length = [n]``, valid from opset 9 (no
        Range before 11): the indices of a tensor of ones."""
        ones = self.fill(length, 1, np.int64)
        return self.reshape(self.op("NonZero", ones), [-1])

    def live_nodes(self, outputs: Sequence[str]) -> list:
        """The nodes ``outputs`` depend on (a builder may compute a value it then drops)."""
        needed, live = set(outputs), []
        for node in reversed(self.nodes):
            if any(name in needed for name in node.output):
                live.append(node)
                needed.update(node.input)
                for attr in node.attribute:  # outer-scope values a subgraph reads
                    if attr.g.node:
                        needed.update(i for n in attr.g.node for i in n.input)
        return live[::-1]

    def positional_function(self, name: str, n_inputs: int, outputs: Sequence[str]
                            ) -> FunctionProto:
        """The body as a function of inputs ``in0..`` and outputs ``out0..``, keeping only
        the nodes the outputs depend on."""
        body = self.live_nodes(outputs)
        out_names = [f"out{i}" for i in range(len(outputs))]
        produced = {name for node in body for name in node.output}
        renames = {value: out for value, out in zip(outputs, out_names) if value in produced}
        for node in body:  # the producing node writes the function output itself
            for names in (node.input, node.output):
                for k, name in enumerate(names):
                    names[k] = renames.get(name, name)
        body += [helper.make_node("Identity", [value], [out])
                 for value, out in zip(outputs, out_names) if value not in produced]
        return helper.make_function(
            BODY_DOMAIN, name, [f"in{i}" for i in range(n_inputs)], out_names, body,
            self.opset_imports())


def _compute_type(elem: int) -> int:
    """torch's CPU kernels compute float16/bfloat16 in float32."""
    return TensorProto.FLOAT if elem in (TensorProto.FLOAT16, TensorProto.BFLOAT16) else elem


def _in(b: _Body, name: str | None, elem: int) -> str | None:
    """An input converted to the computation type (absent stays None)."""
    if name is None or b.elem_type == elem:
        return name
    return b.cast(name, b.elem_type)


def _out(b: _Body, value: str, elem: int) -> str:
    return value if b.elem_type == elem else b.cast(value, elem)


def _normalize(b: _Body, x: str, axis: int, eps: float) -> str:
    """``(x - mean) / sqrt(var + eps)`` along ``axis`` (biased variance)."""
    mean = b.reduce_mean(x, [axis])
    centred = b.op("Sub", x, mean)
    var = b.reduce_mean(b.op("Mul", centred, centred), [axis])
    std = b.op("Sqrt", b.op("Add", var, b.literal(eps)))
    return b.op("Div", centred, std)


def _layer_norm(b: _Body, call: AtenCall, elem: int) -> list[str] | None:
    shape = call.values["normalized_shape"]
    if not shape or any(d <= 0 for d in shape):
        return None
    x = _in(b, call.tensors["input"], elem)
    y = _normalize(b, b.reshape(x, [-1, int(np.prod(shape))]), 1, call.values["eps"])
    y = b.reshape(y, b.op("Shape", x))
    weight = _in(b, call.tensors["weight"], elem)
    if weight is not None:
        y = b.op("Mul", y, weight)
    bias = _in(b, call.tensors["bias"], elem)
    if bias is not None:
        y = b.op("Add", y, bias)
    return [_out(b, y, elem)]


def _group_norm(b: _Body, call: AtenCall, elem: int) -> list[str] | None:
    groups = call.values["num_groups"]
    if groups <= 0:
        return None
    x = _in(b, call.tensors["input"], elem)
    y = _normalize(b, b.reshape(x, [0, groups, -1]), 2, call.values["eps"])
    weight = _in(b, call.tensors["weight"], elem)
    bias = _in(b, call.tensors["bias"], elem)
    if weight is not None or bias is not None:
        # per channel: view as [N, C, -1] and broadcast [C, 1]
        channels = b.op("Gather", b.op("Shape", x), b.ints([1]), axis=0)
        view = b.op("Concat", b.ints([0]), channels, b.ints([-1]), axis=0)
        y = b.reshape(y, view)
        if weight is not None:
            y = b.op("Mul", y, b.reshape(weight, [-1, 1]))
        if bias is not None:
            y = b.op("Add", y, b.reshape(bias, [-1, 1]))
    y = b.reshape(y, b.op("Shape", x))
    return [_out(b, y, elem)]


def _adaptive_avg_pool(rank: int) -> Callable[[_Body, AtenCall, int], list[str] | None]:
    def build(b: _Body, call: AtenCall, elem: int) -> list[str] | None:
        sizes = call.values["output_size"]
        if len(sizes) != rank or any(s <= 0 for s in sizes) or b.opset < 11:
            return None
        x = _in(b, call.tensors["self"], elem)
        if all(s == 1 for s in sizes):
            return [_out(b, b.reduce_mean(x, list(range(-rank, 0))), elem)]
        shape = b.op("Shape", x)
        y = x
        for k, size in enumerate(sizes):
            axis = k - rank
            length = b.op("Gather", shape, b.ints([axis]), axis=0)
            count = b.ints([size])
            starts = b.op("Div", b.op("Mul", length, b.ints(range(size))), count)
            ends = b.op("Div", b.op("Add", b.op("Mul", length, b.ints(range(1, size + 1))),
                                           b.ints([size - 1])), count)
            pieces = []
            for i in range(size):
                index = b.ints([i])
                start = b.op("Gather", starts, index, axis=0)
                end = b.op("Gather", ends, index, axis=0)
                pieces.append(b.reduce_mean(b.slice(y, start, end, [axis]), [axis]))
            y = pieces[0] if size == 1 else b.op("Concat", *pieces, axis=axis)
        return [_out(b, y, elem)]

    return build


def _embedding(b: _Body, call: AtenCall, elem: int) -> list[str] | None:
    return [b.op("Gather", call.tensors["weight"], call.tensors["indices"], axis=0)]


def _index_select(b: _Body, call: AtenCall, elem: int) -> list[str] | None:
    dim = call.values["dim"]
    if dim < 0 and b.opset < 11:
        return None  # negative Gather axes arrive at opset 11
    index = b.reshape(call.tensors["index"], [-1])
    return [b.op("Gather", call.tensors["self"], index, axis=dim)]


def _gelu(b: _Body, call: AtenCall, elem: int) -> list[str] | None:
    x = _in(b, call.tensors["self"], elem)
    mode = call.values["approximate"]
    half, one = b.literal(0.5), b.literal(1.0)
    if mode == "none":
        if b.opset < 9:
            return None  # Erf arrives at opset 9
        inner = b.op("Erf", b.op("Mul", x, b.literal(0.7071067811865476)))
    elif mode == "tanh":
        cube = b.op("Mul", b.op("Mul", x, x), x)
        poly = b.op("Add", x, b.op("Mul", cube, b.literal(0.044715)))
        inner = b.op("Tanh", b.op("Mul", poly, b.literal(0.7978845608028654)))
    else:
        return None
    y = b.op("Mul", b.op("Mul", half, x), b.op("Add", one, inner))
    return [_out(b, y, elem)]


def _silu(b: _Body, call: AtenCall, elem: int) -> list[str] | None:
    x = _in(b, call.tensors["self"], elem)
    return [_out(b, b.op("Mul", x, b.op("Sigmoid", x)), elem)]


_GRID_MODES = {16: ("bilinear", "nearest", "bicubic"), 20: ("linear", "nearest", "cubic")}
_GRID_PADDING = ("zeros", "border", "reflection")


def _grid_sampler(b: _Body, call: AtenCall, elem: int) -> list[str] | None:
    mode, padding = call.values["interpolation_mode"], call.values["padding_mode"]
    if b.opset < 16 or mode not in (0, 1, 2) or padding not in (0, 1, 2):
        return None
    names = _GRID_MODES[20 if b.opset >= 20 else 16]
    x, grid = _in(b, call.tensors["input"], elem), _in(b, call.tensors["grid"], elem)
    y = b.op("GridSample", x, grid, mode=names[mode], padding_mode=_GRID_PADDING[padding],
             align_corners=int(call.values["align_corners"]))
    return [_out(b, y, elem)]


def _axis(call: AtenCall, arg: str, dim: int, opset: int) -> int | None:
    """``dim`` as an axis of tensor ``arg``: negative axes stay negative from opset 11
    (Gather's and Shape-indexing's negative indices), below they need the declared rank."""
    shape = call.shapes.get(arg)
    if shape is not None:
        return dim + len(shape) if -len(shape) <= dim < 0 else dim if dim < len(shape) else None
    return dim if dim >= 0 or opset >= 11 else None


def _length(b: _Body, x: str, axis: int) -> str:
    """``x.shape[axis]`` as an int64 ``[1]``."""
    return b.op("Gather", b.op("Shape", x), b.ints([axis]), axis=0)


def _zero_like(b: _Body, elem: int) -> str:
    return b.const(np.zeros((), helper.tensor_dtype_to_np_dtype(elem)))


def _cumsum(b: _Body, call: AtenCall, elem: int) -> list[str] | None:
    """``cumsum(self, dim, dtype=None)``: integers and bool accumulate in int64 (torch's
    promotion), float16 in float32; ``dtype`` casts first."""
    axis = _axis(call, "self", call.values["dim"], b.opset)
    if axis is None:
        return None
    dtype = call.values["dtype"]
    target = elem if elem in _FLOAT_TYPES.values() else TensorProto.INT64
    if dtype is not None:
        target = _SCALAR_TYPES.get(dtype)
        if target is None:
            return None
    compute = _compute_type(target)
    if compute not in (TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.INT32,
                       TensorProto.INT64):
        return None
    x = call.tensors["self"]
    x = x if elem == compute else b.cast(x, compute)
    if b.opset >= 11:
        y = b.op("CumSum", x, b.const(np.array(axis, np.int64)))
    else:
        y = _cumsum_matmul(b, call, x, axis, compute)
        if y is None:
            return None
    return [y if compute == target else b.cast(y, target)]


def _cumsum_matmul(b: _Body, call: AtenCall, x: str, axis: int, elem: int) -> str | None:
    """Before CumSum (opset 11): ``x @ U`` along the last axis, ``U[i, j] = (i <= j)`` built
    from the runtime length (floats: the sum order differs from torch's running sum). Needs
    the declared rank."""
    shape = call.shapes.get("self")
    if shape is None:
        return None
    rank = len(shape)
    perm = None
    if axis != rank - 1:
        perm = list(range(rank))
        perm[axis], perm[-1] = perm[-1], perm[axis]
        x = b.op("Transpose", x, perm=perm)
    index = b.iota(_length(b, x, rank - 1))
    upper = b.op("Not", b.op("Greater", b.reshape(index, [-1, 1]), b.reshape(index, [1, -1])))
    y = b.op("MatMul", x, b.cast(upper, elem))
    return y if perm is None else b.op("Transpose", y, perm=perm)


def _triangle(upper: bool) -> Callable[[_Body, AtenCall, int], list[str] | None]:
    """``triu``/``tril(self, diagonal)``: keep ``x[..., i, j]`` where ``j - i >= diagonal``
    (triu) or ``<= diagonal`` (tril), zero elsewhere."""

    def build(b: _Body, call: AtenCall, elem: int) -> list[str] | None:
        rows, cols = _axis(call, "self", -2, b.opset), _axis(call, "self", -1, b.opset)
        if rows is None or cols is None:
            return None
        x = call.tensors["self"]
        row = b.reshape(b.iota(_length(b, x, rows)), [-1, 1])
        col = b.reshape(b.iota(_length(b, x, cols)), [1, -1])
        offset = b.op("Sub", col, row)
        diagonal = b.const(np.array(call.values["diagonal"], np.int64))
        outside = b.op("Less" if upper else "Greater", offset, diagonal)
        return [b.op("Where", outside, _zero_like(b, elem), x)]

    return build


def _modulo(b: _Body, value: str, length: str) -> str:
    """``value mod length`` (int64, non-negative; Mod arrives at opset 10): through double
    floor division, exact below 2**53."""
    as_double = [b.cast(v, TensorProto.DOUBLE) for v in (value, length)]
    quotient = b.op("Floor", b.op("Div", *as_double))
    return b.op("Sub", value, b.op("Mul", b.cast(quotient, TensorProto.INT64), length))


def _flip(b: _Body, call: AtenCall, elem: int) -> list[str] | None:
    """``flip(self, dims)``: ``Gather(x, L - 1 - iota(L))`` along each dim."""
    y = call.tensors["self"]
    axes = [_axis(call, "self", d, b.opset) for d in call.values["dims"]]
    if any(a is None for a in axes) or len(set(axes)) != len(axes):
        return None
    for axis in axes:
        length = _length(b, y, axis)
        last = b.op("Sub", length, b.ints([1]))
        y = b.op("Gather", y, b.op("Sub", last, b.iota(length)), axis=axis)
    return [y if axes else b.op("Identity", y)]


def _roll(b: _Body, call: AtenCall, elem: int) -> list[str] | None:
    """``roll(self, shifts, dims)``: ``y[i] = x[(i - shift) mod L]`` along each dim (a
    Gather of rotated indices); no dims: the flattened tensor, reshaped back."""
    x = call.tensors["self"]
    shifts, dims = call.values["shifts"], call.values["dims"]
    flat = not dims
    if flat:
        if len(shifts) != 1:
            return None
        y, axes = b.reshape(x, [-1]), [0]
    else:
        if len(shifts) != len(dims):
            return None
        y, axes = x, [_axis(call, "self", d, b.opset) for d in dims]
        if any(a is None for a in axes):
            return None
    for shift, axis in zip(shifts, axes):
        length = _length(b, y, axis)
        source = _modulo(b, b.op("Sub", b.iota(length), b.ints([shift])), length)
        y = b.op("Gather", y, source, axis=axis)
    return [b.reshape(y, b.op("Shape", x)) if flat else y]


def _masked_fill(b: _Body, call: AtenCall, elem: int) -> list[str] | None:
    """``masked_fill(self, mask, value)``: ``Where(mask, value cast to self's type, self)``."""
    mask_type = call.tensor_types.get("mask")
    if mask_type not in (None, "tensor(bool)"):
        return None
    value = b.cast(call.tensors["value"], elem)
    return [b.op("Where", call.tensors["mask"], value, call.tensors["self"])]


def _upsample_scales(values: dict[str, Any], rank: int) -> list[float | None]:
    """The scale of each spatial axis (None: none given, or <= 0, which torch ignores)."""
    given = values.get("scale_factors")
    if given is None:
        names = {1: ("scales",), 2: ("scales_h", "scales_w"),
                 3: ("scales_d", "scales_h", "scales_w")}[rank]
        given = [values.get(n) for n in names]
    if len(given) != rank:
        return []
    return [g if g is not None and g > 0 else None for g in given]


def _cubic_weights(b: _Body, t: str, num: Callable[[float], str]) -> list[str]:
    """torch's ``get_cubic_upsample_coefficients`` (A = -0.75) for ``t`` in [0, 1]."""
    a = -0.75

    def near(x: str) -> str:  # ((A + 2) x - (A + 3)) x x + 1
        inner = b.op("Sub", b.op("Mul", num(a + 2), x), num(a + 3))
        return b.op("Add", b.op("Mul", b.op("Mul", inner, x), x), num(1.0))

    def far(x: str) -> str:  # ((A x - 5 A) x + 8 A) x - 4 A
        inner = b.op("Sub", b.op("Mul", num(a), x), num(5 * a))
        inner = b.op("Add", b.op("Mul", inner, x), num(8 * a))
        return b.op("Sub", b.op("Mul", inner, x), num(4 * a))

    rest = b.op("Sub", num(1.0), t)
    one = num(1.0)
    return [far(b.op("Add", t, one)), near(t), near(rest), far(b.op("Add", rest, one))]


def _upsample(mode: str, rank: int) -> Callable[[_Body, AtenCall, int], list[str] | None]:
    """``upsample_{nearest,linear,bilinear,trilinear,bicubic}`` as torch's CPU kernels
    compute them, axis by axis from the innermost: source indices and weights from
    ``arange(out)`` in float32 (``area_pixel_compute_scale``/``_source_index``,
    ``nearest_idx``, ``guard_index_and_lambda``), then Gathers weighted and summed."""

    def build(b: _Body, call: AtenCall, elem: int) -> list[str] | None:
        values = call.values
        sizes, scales = values.get("output_size"), _upsample_scales(values, rank)
        align = bool(values.get("align_corners", False))
        if sizes is not None and (len(sizes) != rank or any(v <= 0 for v in sizes)):
            return None
        if len(scales) != rank or (sizes is None and None in scales):
            return None
        arg = "self" if "self" in call.tensors else "input"
        x = _in(b, call.tensors[arg], elem)
        axes = [_axis(call, arg, k - rank, b.opset) for k in range(rank)]
        if any(a is None for a in axes):
            return None
        # torch computes linear/cubic indices in opmath (float, double for double), nearest
        # ones in float
        real = TensorProto.FLOAT if mode == "nearest" else b.elem_type
        real_np = helper.tensor_dtype_to_np_dtype(real)

        def num(value: float) -> str:
            return b.const(np.array(value, real_np))

        y = x
        for k in reversed(range(rank)):
            axis, scale = axes[k], scales[k]
            length = _length(b, x, axis)
            if sizes is not None:
                size = b.ints([sizes[k]])
            else:  # floor(L * scale) in double, as torch's output size
                scaled = b.op("Mul", b.cast(length, TensorProto.DOUBLE),
                                     b.const(np.array([scale], np.float64)))
                size = b.cast(b.op("Floor", scaled), TensorProto.INT64)
            length_f, size_f = b.cast(length, real), b.cast(size, real)
            last = b.op("Sub", length_f, num(1.0))
            dst = b.cast(b.iota(size), real)
            if scale is not None:
                ratio = b.const(np.array([1.0 / scale], real_np))
            else:
                ratio = b.op("Div", length_f, size_f)
            if mode == "nearest":
                general = b.op("Min", b.op("Floor", b.op("Mul", dst, ratio)), last)
                halved = b.op("Floor", b.op("Mul", dst, num(0.5)))
                doubled = b.op("Mul", length, b.ints([2]))
                index = b.op("Where", b.op("Equal", size, length), dst, b.op(
                   "Where", b.op("Equal", size, doubled), halved, general))
                y = b.op("Gather", y, b.cast(index, TensorProto.INT64), axis=axis)
                continue
            if align:
                spans = b.op("Div", last, b.op("Sub", size_f, num(1.0)))
                ratio = b.op("Where", b.op("Greater", size, b.ints([1])), spans,
                                      num(0.0))
                source = b.op("Mul", ratio, dst)
            else:
                source = b.op("Sub", b.op("Mul", ratio, b.op("Add", dst, num(0.5))),
                                     num(0.5))
                if mode == "linear":
                    source = b.op("Max", source, num(0.0))
            start = b.op("Min", b.op("Floor", source), last)
            t = b.op("Min", b.op("Max", b.op("Sub", source, start), num(0.0)),
                            num(1.0))
            if mode == "linear":
                taps = [(start, b.op("Sub", num(1.0), t)),
                        (b.op("Min", b.op("Add", start, num(1.0)), last), t)]
            else:
                taps = [(b.op("Max", b.op("Min", b.op("Add", start, num(j - 1.0)),
                                                 last), num(0.0)), w)
                        for j, w in enumerate(_cubic_weights(b, t, num))]
            trailing = [1] * (rank - 1 - k)
            total = None
            for index, weight in taps:
                picked = b.op("Gather", y, b.cast(index, TensorProto.INT64), axis=axis)
                term = b.op("Mul", picked, b.reshape(weight, [-1, *trailing]))
                total = term if total is None else b.op("Add", total, term)
            y = total
        return [_out(b, y, elem)]

    return build


_BODIES: dict[str, Callable[[_Body, AtenCall, int], list[str] | None]] = {
    "layer_norm": _layer_norm,
    "group_norm": _group_norm,
    "adaptive_avg_pool1d": _adaptive_avg_pool(1),
    "adaptive_avg_pool2d": _adaptive_avg_pool(2),
    "adaptive_avg_pool3d": _adaptive_avg_pool(3),
    "embedding": _embedding,
    "index_select": _index_select,
    "gelu": _gelu,
    "silu": _silu,
    "grid_sampler": _grid_sampler,
    "cumsum": _cumsum,
    "tril": _triangle(upper=False),
    "triu": _triangle(upper=True),
    "flip": _flip,
    "roll": _roll,
    "masked_fill": _masked_fill,
}
_UPSAMPLE = {"nearest1d": ("nearest", 1), "nearest2d": ("nearest", 2),
             "nearest3d": ("nearest", 3), "linear1d": ("linear", 1),
             "bilinear2d": ("linear", 2), "trilinear3d": ("linear", 3),
             "bicubic2d": ("cubic", 2)}
for _name, (_mode, _rank) in _UPSAMPLE.items():
    _BODIES[f"upsample_{_name}"] = _BODIES[f"upsample_{_name}.vec"] = _upsample(_mode, _rank)
# the tensor argument whose element type the computation follows
_MAIN_TENSOR = {"embedding": "weight"}
# minimum ai.onnx opset of each body (the builders decline below it); the iota of
# NonZero(ConstantOfShape) and Where need opset 9
MIN_OPSETS = {"layer_norm": 5, "group_norm": 5, "adaptive_avg_pool1d": 11,
              "adaptive_avg_pool2d": 11, "adaptive_avg_pool3d": 11, "embedding": 1,
              "index_select": 5, "gelu": 9, "silu": 6, "grid_sampler": 16, "cumsum": 9,
              "tril": 9, "triu": 9, "flip": 9, "roll": 9, "masked_fill": 9,
              **{name: 9 for name in _BODIES if name.startswith("upsample_")}}
# element types beyond the float ones each operator takes (data movement: any numeric)
_INTEGERS = (TensorProto.INT8, TensorProto.INT16, TensorProto.INT32, TensorProto.INT64,
             TensorProto.UINT8)
_OTHER_TYPES = {"cumsum": (*_INTEGERS, TensorProto.BOOL),
                **{op: (*_INTEGERS, TensorProto.BOOL)
                   for op in ("tril", "triu", "flip", "roll", "masked_fill", "index_select")}}
# torch ScalarType codes (a ``dtype`` argument)
_SCALAR_TYPES = {0: TensorProto.UINT8, 1: TensorProto.INT8, 2: TensorProto.INT16,
                 3: TensorProto.INT32, 4: TensorProto.INT64, 5: TensorProto.FLOAT16,
                 6: TensorProto.FLOAT, 7: TensorProto.DOUBLE, 11: TensorProto.BOOL,
                 15: TensorProto.BFLOAT16}
_ELEM_TYPES = {f"tensor({helper.tensor_dtype_to_string(t).removeprefix('TensorProto.').lower()})":
               t for t in (*_FLOAT_TYPES.values(), *_INTEGERS, TensorProto.BOOL)}


def _body_opset(ctx) -> int:
    opsets = ctx.opsets or {}
    if "" in opsets or "ai.onnx" in opsets:
        return ctx.opset
    return FALLBACK_OPSET


def build_call(call: AtenCall | None, ctx) -> FunctionProto | None:
    """The body for a resolved call (Declined: not this call)."""
    if call is None:
        raise Declined("no ATen schema of the operator takes these arguments (an unknown "
                       "operator, argument or type)")
    if len(ctx.node.output) != 1 or not ctx.node.output[0]:
        raise Declined("the body gives one output; the node uses another")
    opset = _body_opset(ctx)
    if opset < MIN_OPSETS[call.operator]:
        raise Declined(f"aten::{call.operator} needs ai.onnx opset "
                       f"{MIN_OPSETS[call.operator]}; the body would be at {opset}")
    main = _MAIN_TENSOR.get(call.operator) or next(iter(call.tensors))
    elem = _ELEM_TYPES.get(call.tensor_types.get(main) or "")
    if elem is None or (elem not in _FLOAT_TYPES.values()
                        and elem not in _OTHER_TYPES.get(call.operator, ())):
        raise Declined(f"an unknown element type, or one aten::{call.operator} does not take "
                       "here")
    for arg, formal in call.tensors.items():
        if formal is not None:
            call.shapes[arg] = _declared_shape(ctx, ctx.node.input[int(formal[2:])])
    b = _Body(opset, _compute_type(elem))
    outputs = _BODIES[call.operator](b, call, elem)
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
    attrs = _attributes(node, ())
    operator = _text(attrs.pop("operator", b""))
    names = schema_names(operator, attrs.pop("overload_name", b""))
    types = list(ctx.input_types or [])
    call = _first(lambda name: _resolve_named(name, list(node.input), attrs, types), names)
    return build_call(call, ctx)


def build_org_pytorch_aten(ctx) -> FunctionProto | None:
    """``org.pytorch.aten::<op>``: positional arguments, or named ones when attributed."""
    node = ctx.node
    names = schema_names(node.op_type, "")
    if node.attribute:
        attrs, types = _attributes(node, ()), list(ctx.input_types or [])
        call = _first(lambda name: _resolve_named(name, list(node.input), attrs, types), names)
    else:
        call = _first(lambda name: _resolve_positional(name, list(node.input), ctx), names)
    return build_call(call, ctx)


def build_positional_aten(ctx) -> FunctionProto | None:
    """``org.pytorch.aten::ATen`` (torch's ``ONNX_ATEN_FALLBACK`` export) and
    ``com.microsoft::ATen``: attributes ``operator``/``overload_name``, every argument an
    input (constants for non-tensors, an empty name for None); or, as older exporters wrote
    it, the non-tensor arguments as attributes (read as the default-domain ``ATen``)."""
    attrs = _attributes(ctx.node, ())
    operator = _text(attrs.pop("operator", b""))
    names = schema_names(operator, attrs.pop("overload_name", b""))
    if attrs:  # older exporters: tensors as inputs, the other arguments as attributes
        return build_aten(ctx)
    call = _first(lambda name: _resolve_positional(name, list(ctx.node.input), ctx), names)
    return build_call(call, ctx)


build_ms_aten = build_positional_aten


def parse_atenop(node) -> tuple[str, str, dict[str, Any]] | None:
    """``com.microsoft::ATenOp``'s operator name, overload and JSON arguments (None:
    malformed)."""
    attrs = _attributes(node, ())
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
    call = _first(lambda name: _resolve_named(name, list(ctx.node.input), arguments, types),
                  schema_names(operator, overload))
    return build_call(call, ctx)


# -- caffe2 GenerateProposals -------------------------------------------------------------

_PROPOSAL_ATTRIBUTES = ("spatial_scale", "pre_nms_topN", "post_nms_topN", "nms_thresh",
                        "min_size", "angle_bound_on", "angle_bound_lo", "angle_bound_hi",
                        "clip_angle_thresh", "legacy_plus_one")
BBOX_XFORM_CLIP = np.float32(math.log(1000.0 / 16.0))
MIN_PROPOSALS_OPSET = 9  # NonZero, Where, ConstantOfShape, IsNaN


def _declared_shape(ctx, name: str) -> list[int | None] | None:
    """``name``'s shape from its constant value or declared type (None per unknown dim)."""
    constant = ctx.constant(name)
    if constant is not None:
        return list(constant.shape)
    declared = (ctx.declared or {}).get(name)
    if declared is None or not declared.HasField("tensor_type") \
            or not declared.tensor_type.HasField("shape"):
        return None
    return [d.dim_value if d.HasField("dim_value") else None
            for d in declared.tensor_type.shape.dim]


def _proposal_count(ctx, scores: str) -> int | None:
    """``A * H * W`` when the scores' shape says so."""
    shape = _declared_shape(ctx, scores)
    if shape is None or len(shape) != 4 or any(d is None for d in shape[1:]):
        return None
    return int(np.prod(shape[1:]))


def _greedy_nms(b: _Body, boxes: Sequence[str], areas: str, alive: str, count_init: str,
                thresh: float, post_nms_topN: int, one: str | None) -> str:
    """caffe2's greedy NMS over ``(N, K)`` candidates sorted by score: a Loop over the
    K positions keeps candidate ``k`` of image ``n`` if it is still alive (passed the filter,
    not suppressed) and the image has fewer than ``post_nms_topN`` boxes, then kills every
    candidate whose IoU with it exceeds ``thresh`` (NaN IoU too, as caffe2's ``ovr <=
    thresh`` test). Returns the ``(N, K')`` kept mask (``K' <= K``: the loop stops once every
    image is full)."""
    x1, y1, x2, y2 = boxes
    body = _Body(b.opset, TensorProto.FLOAT, prefix="nms_")
    it, cond_in, alive_in, count_in = "nms_iter", "nms_cond", "nms_alive", "nms_count"
    keep = body.op("Gather", alive_in, it, axis=1)
    if post_nms_topN > 0:
        keep = body.op("And", keep, body.op("Less", count_in, body.literal(post_nms_topN)))

    def at(values: str) -> str:
        return body.unsqueeze(body.op("Gather", values, it, axis=1), [1])

    def overlap(lo: str, hi: str) -> str:
        side = body.op("Sub", body.op("Min", hi, at(hi)), body.op("Max", lo, at(lo)))
        if one is not None:
            side = body.op("Add", side, body.literal(1.0))
        return body.op("Max", side, body.literal(0.0))

    inter = body.op("Mul", overlap(x1, x2), overlap(y1, y2))
    iou = body.op("Div", inter, body.op("Sub", body.op("Add", at(areas), areas), inter))
    drop = body.op("Or", body.op("Greater", iou, body.literal(thresh)),
                         body.op("IsNaN", iou))
    drop = body.op("And", drop, body.unsqueeze(keep, [1]))
    alive_out = body.op("And", alive_in, body.op("Not", drop))
    count_out = body.op("Add", count_in, body.cast(keep, TensorProto.FLOAT))
    if post_nms_topN > 0:
        fewest = body.op("ReduceMin", count_out, keepdims=0)
        cond_out = body.op("Less", fewest, body.literal(post_nms_topN))
    else:
        cond_out = body.op("Identity", cond_in)
    vi = helper.make_tensor_value_info
    graph = helper.make_graph(
        body.nodes, "greedy_nms",
        [vi(it, TensorProto.INT64, []), vi(cond_in, TensorProto.BOOL, []),
         vi(alive_in, TensorProto.BOOL, None), vi(count_in, TensorProto.FLOAT, None)],
        [vi(cond_out, TensorProto.BOOL, []), vi(alive_out, TensorProto.BOOL, None),
         vi(count_out, TensorProto.FLOAT, None), vi(keep, TensorProto.BOOL, None)])
    trips = b.reshape(b.op("Gather", b.op("Shape", x1), b.ints([1]), axis=0), [])
    start = b.const(np.array(True))
    _, _, kept = b.op("Loop", trips, start, alive, count_init, outputs=3, body=graph)
    return b.op("Transpose", kept, perm=[1, 0])


def build_generate_proposals(ctx) -> FunctionProto | None:
    """caffe2 GenerateProposals on upright boxes, from standard ops (opset >= 9)."""
    node = ctx.node
    attrs = _attributes(node, ())
    unknown = sorted(name for name in attrs if name not in _PROPOSAL_ATTRIBUTES)
    if unknown:
        raise Declined(f"unknown attribute(s) {', '.join(unknown)}")
    if len(node.input) != 4 or not all(node.input) or not any(node.output):
        raise Declined("needs scores, bbox_deltas, im_info and anchors, and an output used")
    if list(ctx.input_types or [])[:4] != ["tensor(float)"] * 4:
        raise Declined("the four inputs must be float")
    opset = _body_opset(ctx)
    anchor_shape = _declared_shape(ctx, node.input[3])
    if opset < MIN_PROPOSALS_OPSET or anchor_shape is None or len(anchor_shape) != 2 \
            or anchor_shape[1] != 4:
        raise Declined(f"needs ai.onnx opset {MIN_PROPOSALS_OPSET} and anchors declared (A, 4) "
                       "(rotated anchors (A, 5), or a width the body cannot know)")
    spatial_scale = float(attrs.get("spatial_scale", 0.0625))
    pre_nms_topN = int(attrs.get("pre_nms_topN", 6000))
    post_nms_topN = int(attrs.get("post_nms_topN", 300))
    nms_thresh = float(attrs.get("nms_thresh", 0.7))
    min_size = float(attrs.get("min_size", 16.0))
    plus_one = bool(attrs.get("legacy_plus_one", 1))
    if spatial_scale <= 0:
        raise Declined("spatial_scale must be positive")
    count = _proposal_count(ctx, node.input[0])
    if count is None and opset < 10:
        raise Declined("before opset 10 TopK's k is an attribute: the candidate count must be "
                       "declared")

    b = _Body(opset, TensorProto.FLOAT)
    scores, deltas, im_info, anchors = "in0", "in1", "in2", "in3"
    one = b.literal(1.0) if plus_one else None
    half = b.literal(0.5)

    def plus(x: str) -> str:  # ``x + 1`` in legacy_plus_one mode
        return b.op("Add", x, one) if one is not None else x

    def minus(x: str) -> str:
        return b.op("Sub", x, one) if one is not None else x

    # per image, scores and deltas in (h, w, a) order: (N, HWA) and (N * HWA, 4)
    shape = b.op("Shape", scores)
    flat_scores = b.reshape(b.op("Transpose", scores, perm=[0, 2, 3, 1]), [0, -1])
    split = b.op("Concat", b.op("Gather", shape, b.ints([0, 1]), axis=0), b.ints([4]),
                           b.op("Gather", shape, b.ints([2, 3]), axis=0), axis=0)
    flat_deltas = b.reshape(b.op("Transpose", b.reshape(deltas, split), perm=[0, 3, 4, 1, 2]),
                            [-1, 4])
    # anchors at every cell, (HWA,) per coordinate: anchor[a] + (w, h, w, h) * stride
    stride = b.literal(np.float32(1.0 / spatial_scale))
    height, width = (b.op("Gather", shape, b.ints([k]), axis=0) for k in (2, 3))
    grid = b.op("Concat", height, width, b.ints([1]), axis=0)
    shift_x = b.reshape(b.op("Mul", b.cast(b.iota(width), TensorProto.FLOAT), stride),
                        [1, -1, 1])
    shift_y = b.reshape(b.op("Mul", b.cast(b.iota(height), TensorProto.FLOAT), stride),
                        [-1, 1, 1])
    shift_x, shift_y = (b.op("Expand", s, grid) for s in (shift_x, shift_y))
    cells = []
    for column, shift in enumerate((shift_x, shift_y, shift_x, shift_y)):
        corner = b.reshape(b.take(anchors, column, 1), [1, 1, -1])
        cells.append(b.reshape(b.op("Add", corner, shift), [-1]))

    # the pre_nms_topN best scores of each image, highest first
    k = count if pre_nms_topN <= 0 or (count is not None and pre_nms_topN >= count) else \
        pre_nms_topN if count is not None else None
    if opset < 10:
        top, order = b.op("TopK", flat_scores, outputs=2, k=k, axis=1)
    else:
        if k is not None:
            k_input = b.ints([k])
        else:
            available = b.op("Gather", b.op("Shape", flat_scores), b.ints([1]), axis=0)
            if pre_nms_topN <= 0:
                k_input = available
            else:
                wanted = b.ints([pre_nms_topN])
                k_input = b.op("Where", b.op("Less", available, wanted), available, wanted)
        top, order = b.op("TopK", flat_scores, k_input, outputs=2, axis=1)
    ax1, ay1, ax2, ay2 = (b.op("Gather", c, order, axis=0) for c in cells)  # (N, K)
    per_image = b.op("Gather", b.op("Shape", flat_scores), b.ints([1]), axis=0)
    images = b.op("Gather", shape, b.ints([0]), axis=0)
    offsets = b.op("Mul", b.reshape(b.iota(images), [-1, 1]), per_image)
    picked = b.op("Gather", flat_deltas, b.op("Add", order, offsets), axis=0)  # (N, K, 4)
    dx, dy, dw, dh = (b.take(picked, c, 2) for c in range(4))

    # box transform (caffe2's bbox_transform_upright, float32)
    clip = b.literal(BBOX_XFORM_CLIP)
    new = []
    for lo, hi, delta, log_size in ((ax1, ax2, dx, dw), (ay1, ay2, dy, dh)):
        size = plus(b.op("Sub", hi, lo))
        centre = b.op("Add", lo, b.op("Mul", half, size))
        pred_centre = b.op("Add", b.op("Mul", delta, size), centre)
        pred_half = b.op("Mul", half, b.op("Mul", b.op("Exp", b.op("Min", log_size, clip)),
                                                   size))
        new.append((b.op("Sub", pred_centre, pred_half),
                    minus(b.op("Add", pred_centre, pred_half))))
    # clip to the image: x to [0, int(width) - p], y to [0, int(height) - p]
    limits = [b.reshape(b.take(im_info, c, 1), [-1, 1]) for c in range(3)]  # (N, 1) each
    zero = b.literal(0.0)
    boxes = {}
    for (lo, hi), limit, names in zip(new, (limits[1], limits[0]), (("x1", "x2"), ("y1", "y2"))):
        bound = minus(b.cast(b.cast(limit, TensorProto.INT64), TensorProto.FLOAT))
        for value, name in zip((lo, hi), names):
            boxes[name] = b.op("Max", b.op("Min", value, bound), zero)
    # keep sides >= min_size * im_scale (in double, as caffe2) and centres inside the image
    threshold = b.op("Mul", b.cast(limits[2], TensorProto.DOUBLE),
                            b.const(np.array(min_size, np.float64)))
    sides, alive = [], None
    for lo, hi, limit in (("x1", "x2", limits[1]), ("y1", "y2", limits[0])):
        side = plus(b.op("Sub", boxes[hi], boxes[lo]))
        sides.append(side)
        big = b.op("Not", b.op("Less", b.cast(side, TensorProto.DOUBLE), threshold))
        centre = b.op("Add", boxes[lo], b.op("Div", side, b.literal(2.0)))
        inside = b.op("And", big, b.op("Less", centre, limit))
        alive = inside if alive is None else b.op("And", alive, inside)
    areas = b.op("Mul", *sides)
    no_boxes = b.fill(images, 0, np.float32)
    kept = _greedy_nms(b, [boxes[c] for c in ("x1", "y1", "x2", "y2")], areas, alive, no_boxes,
                       nms_thresh, post_nms_topN, one)

    # the kept candidates, image by image, in score order
    where = b.op("NonZero", kept)  # (2, R)
    image, position = b.take(where, 0, 0), b.take(where, 1, 0)
    candidates = b.op("Gather", b.op("Shape", top), b.ints([1]), axis=0)
    flat_index = b.op("Add", b.op("Mul", image, candidates), position)
    stacked = b.op("Concat", *[b.unsqueeze(boxes[c], [2]) for c in ("x1", "y1", "x2", "y2")],
                   axis=2)
    kept_boxes = b.op("Gather", b.reshape(stacked, [-1, 4]), flat_index, axis=0)
    rois = b.op("Concat", b.unsqueeze(b.cast(image, TensorProto.FLOAT), [1]), kept_boxes,
                axis=1)
    probs = b.op("Gather", b.reshape(top, [-1]), flat_index, axis=0)
    # (not com_microsoft's _trim_outputs: an unnamed Loop output crashes onnxruntime 1.32)
    outputs = [rois, probs] if _present(node.output, 1) else [rois]
    return b.positional_function("caffe2_generate_proposals", 4, outputs)


# int64: cumsum, tril/triu, flip, roll, masked_fill (tested); the rest are float only
_DTYPES = ("float", "float16", "double", "int64")
_INT64_TESTED = ("cumsum", "tril", "triu", "flip", "roll", "masked_fill")


@hookimpl
def register_decompositions(registry):
    """One builder per node form; the opset range is the union of the operators' (each
    builder declines below its operator's ``MIN_OPSETS`` entry)."""
    from rewriter_plugins.pytorch_samples import oracles  # torch's own operators

    ops = ", ".join(sorted({name.partition(".")[0] for name in ATEN_SCHEMAS}))
    for domain, op_type, builder, form in (("", "ATen", build_aten, "named"),
                                           (ATEN_DOMAIN, "ATen", build_positional_aten,
                                            "positional"),
                                           (MS_DOMAIN, "ATen", build_positional_aten,
                                            "ms_aten"),
                                           (MS_DOMAIN, "ATenOp", build_ms_atenop, "atenop")):
        label = f"{domain}::{op_type}" if domain else op_type
        registry.add(domain, op_type, builder, opsets=(1, None), dtypes=_DTYPES,
                     description=f"pytorch:{label} ({ops})", **oracles(form))
    for operator in sorted(name for name in ATEN_SCHEMAS if "." not in name):
        # (1, None): a model importing no ai.onnx opset counts as opset 1 and gets a body
        # at FALLBACK_OPSET; below MIN_OPSETS[operator] the builder declines
        tested = _DTYPES if operator in _INT64_TESTED else _DTYPES[:3]
        registry.add(ATEN_DOMAIN, operator, build_org_pytorch_aten, opsets=(1, None),
                     dtypes=tested, description=f"pytorch:org.pytorch.aten::{operator} "
                     f"(opset >= {MIN_OPSETS[operator]})", **oracles("op_type", operator))
    registry.add(CAFFE2_DOMAIN, "GenerateProposals", build_generate_proposals,
                 opsets=(MIN_PROPOSALS_OPSET, None), dtypes=("float",),
                 description="pytorch:org.pytorch._caffe2::GenerateProposals (upright boxes; "
                 "TopK, greedy NMS in a Loop; static A*H*W below opset 10)",
                 **oracles("proposals"))


_KERNELS = "rewriter_custom_ops.aten_fallback"
_ATEN_KERNELS = {"adaptive_avg_pool1d": "adaptive_avg_pool1d",
                 "adaptive_avg_pool2d": "adaptive_avg_pool2d",
                 "adaptive_avg_pool3d": "adaptive_avg_pool3d", "embedding": "embedding_kernel",
                 "gelu": "gelu_kernel", "silu": "silu_kernel",
                 "index_select": "index_select_kernel"}


@hookimpl
def register_kernels(registry):
    registry.add("", "ATen", f"{_KERNELS}:aten", description="pytorch: numpy aten operators")
    registry.add(ATEN_DOMAIN, "ATen", f"{_KERNELS}:aten_named_form",
                 description="pytorch: numpy aten operators (arguments as attributes)")
    registry.add(MS_DOMAIN, "ATenOp", f"{_KERNELS}:atenop",
                 description="pytorch: numpy aten operators")
    for operator, attr in _ATEN_KERNELS.items():
        registry.add(ATEN_DOMAIN, operator, f"{_KERNELS}:{attr}",
                     description=f"pytorch: numpy aten::{operator}")
    registry.add(CAFFE2_DOMAIN, "GenerateProposals",
                 "rewriter_custom_ops.caffe2_generate_proposals:kernel",
                 description="pytorch: caffe2 GenerateProposals (upright boxes) in numpy")
