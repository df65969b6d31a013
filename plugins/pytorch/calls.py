"""aten calls: the schemas of the aten operators the plugin decomposes, and the resolution
of a node's inputs and attributes (or JSON arguments) against them (:class:`AtenCall`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from onnx import helper

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


def first(resolve: Callable[[str], AtenCall | None], names: Sequence[str]) -> AtenCall | None:
    for name in names:
        call = resolve(name)
        if call is not None:
            return call
    return None


def resolve_named(operator: str, node_inputs: Sequence[str], named: dict[str, Any],
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


def resolve_positional(operator: str, node_inputs: Sequence[str], ctx) -> AtenCall | None:
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


def attributes(node, skip: Sequence[str]) -> dict[str, Any]:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute if a.name not in skip}

