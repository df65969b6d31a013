"""numpy kernels for PyTorch's aten fallbacks: ``ATen`` (default domain),
``com.microsoft::ATenOp`` and a few ``org.pytorch.aten`` ops, so that ``compare`` can run an
original model on the reference evaluator (the ``pytorch`` plugin decomposes them).

Each computes in float64 and returns the input's element type, with torch's semantics:

* ``layer_norm``: ``(x - mean) / sqrt(var + eps) * weight + bias`` over the trailing
  ``normalized_shape`` dims (biased variance). The ``ATen`` form cannot pass the INTS
  attribute ``normalized_shape`` to a kernel: it is the weight's shape, so the kernel needs
  the weight.
* ``group_norm``: the same over ``[N, G, -1]``, then per-channel weight and bias.
* ``adaptive_avg_pool{1,2,3}d``: window ``i`` of an axis of length ``L`` and output ``o`` is
  ``[floor(i L / o), ceil((i + 1) L / o))``.
* ``embedding``: ``weight[indices]``; ``index_select``: ``take(self, index, axis=dim)``.
* ``gelu``: ``0.5 x (1 + erf(x / sqrt 2))``, or the tanh form; ``silu``: ``x sigmoid(x)``.
* ``cumsum`` (integers accumulate in int64), ``tril``/``triu``, ``flip``, ``roll``: numpy's.

The ``ATen`` and ``ATenOp`` kernels decline (at planning, through ``accepts``) an operator
they do not implement or an overload other than the default.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from rewriter.plugin import kernel as _kernel

_UNSET = -(1 << 62)  # an int attribute the node did not give
_FLOATS = ("float", "double", "float16")


def layer_norm(x: np.ndarray, normalized_shape: Sequence[int], weight=None, bias=None,
               eps: float = 1e-5) -> np.ndarray:
    k = len(normalized_shape)
    if tuple(x.shape[x.ndim - k:]) != tuple(normalized_shape):
        raise ValueError(f"layer_norm: input shape {x.shape} does not end in "
                         f"{tuple(normalized_shape)}")
    v = x.astype(np.float64)
    axes = tuple(range(x.ndim - k, x.ndim))
    mean = v.mean(axis=axes, keepdims=True)
    var = ((v - mean) ** 2).mean(axis=axes, keepdims=True)
    y = (v - mean) / np.sqrt(var + eps)
    if weight is not None:
        y = y * weight.astype(np.float64)
    if bias is not None:
        y = y + bias.astype(np.float64)
    return y.astype(x.dtype)


def group_norm(x: np.ndarray, num_groups: int, weight=None, bias=None,
               eps: float = 1e-5) -> np.ndarray:
    v = x.astype(np.float64).reshape(x.shape[0], num_groups, -1)
    mean = v.mean(axis=2, keepdims=True)
    var = ((v - mean) ** 2).mean(axis=2, keepdims=True)
    y = ((v - mean) / np.sqrt(var + eps)).reshape(x.shape[0], x.shape[1], -1)
    if weight is not None:
        y = y * weight.astype(np.float64).reshape(-1, 1)
    if bias is not None:
        y = y + bias.astype(np.float64).reshape(-1, 1)
    return y.reshape(x.shape).astype(x.dtype)


def adaptive_avg_pool(x: np.ndarray, output_size: Sequence[int]) -> np.ndarray:
    y = x.astype(np.float64)
    rank = len(output_size)
    for k, size in enumerate(output_size):
        axis = x.ndim - rank + k
        length = y.shape[axis]
        pieces = []
        for i in range(size):
            start, end = (i * length) // size, -((-(i + 1) * length) // size)
            window = np.take(y, np.arange(start, end), axis=axis)
            pieces.append(window.mean(axis=axis, keepdims=True))
        y = np.concatenate(pieces, axis=axis)
    return y.astype(x.dtype)


def gelu(x: np.ndarray, approximate: str = "none") -> np.ndarray:
    v = x.astype(np.float64)
    if approximate == "tanh":
        y = 0.5 * v * (1 + np.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v ** 3)))
    elif approximate == "none":
        y = 0.5 * v * (1 + np.vectorize(math.erf, otypes=[np.float64])(v / math.sqrt(2)))
    else:
        raise ValueError(f"gelu: unknown approximate={approximate!r}")
    return y.astype(x.dtype)


def silu(x: np.ndarray) -> np.ndarray:
    v = x.astype(np.float64)
    return (v / (1 + np.exp(-v))).astype(x.dtype)


def index_select(x: np.ndarray, dim: int, index: np.ndarray) -> np.ndarray:
    return np.take(x, index.reshape(-1).astype(np.int64), axis=dim)


def embedding(weight: np.ndarray, indices: np.ndarray) -> np.ndarray:
    return weight[indices.astype(np.int64)]


def run(operator: str, tensors: Sequence[np.ndarray], values: dict[str, Any]) -> np.ndarray:
    """One aten operator on its tensor arguments (in schema order) and named values."""
    if operator == "layer_norm":
        x, *rest = tensors
        shape = values.get("normalized_shape") or None
        if shape is None:
            if not rest:
                raise ValueError("layer_norm without weight: normalized_shape is unknown "
                                 "(kernels receive no list attributes)")
            shape = rest[0].shape
        return layer_norm(x, list(shape), *rest, eps=values.get("eps", 1e-5))
    if operator == "group_norm":
        groups = values.get("num_groups", _UNSET)
        if groups == _UNSET:
            raise ValueError("group_norm: num_groups missing")
        return group_norm(tensors[0], groups, *tensors[1:], eps=values.get("eps", 1e-5))
    if operator.startswith("adaptive_avg_pool") and operator[-2:] in ("1d", "2d", "3d"):
        size = values.get("output_size") or None
        if size is None and len(tensors) == 2:
            size = [int(s) for s in tensors[1].reshape(-1)]
        if size is None:
            raise ValueError(f"{operator}: output_size is unknown (kernels receive no list "
                             "attributes)")
        return adaptive_avg_pool(tensors[0], size)
    if operator == "embedding":
        return embedding(tensors[0], tensors[1])
    if operator == "index_select":
        dim = values.get("dim", _UNSET)
        if dim == _UNSET:
            raise ValueError("index_select: dim missing")
        return index_select(tensors[0], dim, tensors[1])
    if operator == "gelu":
        return gelu(tensors[0], values.get("approximate", "none"))
    if operator == "silu":
        return silu(tensors[0])
    if operator in ("cumsum", "tril", "triu", "flip", "roll"):
        return _movement(operator, tensors[0], values)
    raise NotImplementedError(f"aten::{operator} has no numpy kernel in the pytorch plugin")


def _movement(operator: str, x: np.ndarray, values: dict[str, Any]) -> np.ndarray:
    if operator == "cumsum":
        dim = values.get("dim", _UNSET)
        if dim == _UNSET:
            raise ValueError("cumsum: dim missing")
        acc = x.dtype if x.dtype.kind == "f" else np.int64
        return np.cumsum(x, axis=dim, dtype=acc)
    if operator in ("tril", "triu"):
        fn = np.tril if operator == "tril" else np.triu
        return fn(x, int(values.get("diagonal", 0)))
    if operator == "flip":
        return np.flip(x, axis=tuple(values.get("dims") or ())).copy()
    shifts, dims = list(values.get("shifts") or []), list(values.get("dims") or [])
    return np.roll(x, shifts if dims else shifts[0], axis=tuple(dims) if dims else None)


KERNEL_OPERATORS = ("layer_norm", "group_norm", "adaptive_avg_pool1d", "adaptive_avg_pool2d",
                    "adaptive_avg_pool3d", "embedding", "index_select", "gelu", "silu",
                    "cumsum", "tril", "triu", "flip", "roll")


def _attribute_text(node, name: str) -> str:
    for a in node.attribute:
        if a.name == name:
            return a.s.decode() if isinstance(a.s, bytes) else str(a.s)
    return ""


def _accepts_aten(node) -> str | None:
    """The ``ATen`` kernel takes the operators ``run`` implements, default overload only."""
    operator = _attribute_text(node, "operator")
    if operator not in KERNEL_OPERATORS:
        return f"aten::{operator} has no numpy kernel"
    if _attribute_text(node, "overload_name") not in ("", "default"):
        return f"overload {_attribute_text(node, 'overload_name')!r} is not implemented"
    return None


def _accepts_atenop(node) -> str | None:
    operator, _, overload = _attribute_text(node, "name").removeprefix("aten::").partition(".")
    if operator not in KERNEL_OPERATORS:
        return f"aten::{operator} has no numpy kernel"
    if overload not in ("", "default"):
        return f"overload {overload!r} is not implemented"
    return None


def _signatures() -> list[str]:
    out = []
    for t in _FLOATS:
        out += [f"{t} -> {t}", f"{t}, {t} -> {t}", f"{t}, {t}, {t} -> {t}",
                f"{t}, int64 -> {t}", f"{t}, int32 -> {t}"]
    return out + ["int64 -> int64"]  # cumsum, tril/triu, flip, roll


@_kernel(signatures=_signatures(), attributes={
    "operator": str, "overload_name": "", "eps": 1e-5, "cudnn_enable": 1, "cudnn_enabled": 1,
    "num_groups": _UNSET, "padding_idx": -1, "scale_grad_by_freq": 0, "sparse": 0,
    "approximate": "none", "dim": _UNSET, "normalized_shape": (list[int], []),
    "output_size": (list[int], []), "diagonal": 0, "dims": (list[int], []),
    "shifts": (list[int], [])}, accepts=_accepts_aten)
def aten(*tensors, operator, overload_name, num_groups, eps, dim, approximate,
         normalized_shape=(), output_size=(), diagonal=0, dims=(), shifts=(), **_unused):
    """ATen (default domain): dispatch on ``operator``."""
    values = {"num_groups": num_groups, "eps": eps, "dim": dim, "approximate": approximate,
              "normalized_shape": normalized_shape, "output_size": output_size,
              "diagonal": diagonal, "dims": dims, "shifts": shifts}
    return run(operator, tensors, values)



def _accepts_named_form(node) -> str | None:
    """``org.pytorch.aten::ATen`` as older exporters wrote it (the non-tensor arguments as
    attributes) is the default-domain form; torch's current form passes them as inputs."""
    if not any(a.name not in ("operator", "overload_name") for a in node.attribute):
        return "arguments given as inputs (torch's positional form) have no numpy kernel"
    return _accepts_aten(node)


aten_named_form = dataclasses.replace(aten, accepts=_accepts_named_form)


@_kernel(signatures=_signatures(), attributes={"name": str, "custom_attributes_json": "{}"},
         accepts=_accepts_atenop)
def atenop(*tensors, name, custom_attributes_json):
    """com.microsoft::ATenOp: ``name="aten::op"``, JSON arguments."""
    operator = name.removeprefix("aten::").partition(".")[0]
    return run(operator, tensors, json.loads(custom_attributes_json or "{}"))


def _pool_signatures() -> list[str]:
    return [f"{t}, {i} -> {t}" for t in _FLOATS for i in ("int64", "int32")]


def _pool(operator: str):
    @_kernel(signatures=_pool_signatures())
    def pool(x, output_size):
        return run(operator, [x, output_size], {})

    pool.fn.__doc__ = f"org.pytorch.aten::{operator}"
    return pool


adaptive_avg_pool1d = _pool("adaptive_avg_pool1d")
adaptive_avg_pool2d = _pool("adaptive_avg_pool2d")
adaptive_avg_pool3d = _pool("adaptive_avg_pool3d")


@_kernel(signatures=[f"{t}, {i} -> {t}" for t in _FLOATS for i in ("int64", "int32")])
def embedding_kernel(weight, indices):
    """org.pytorch.aten::embedding(weight, indices)."""
    return embedding(weight, indices)


@_kernel(signatures=[f"{t} -> {t}" for t in _FLOATS])
def gelu_kernel(x):
    """org.pytorch.aten::gelu(self) (approximate='none')."""
    return gelu(x)


@_kernel(signatures=[f"{t} -> {t}" for t in _FLOATS])
def silu_kernel(x):
    """org.pytorch.aten::silu(self)."""
    return silu(x)


@_kernel(signatures=[f"{t}, int64, {i} -> {t}" for t in _FLOATS for i in ("int64", "int32")])
def index_select_kernel(x, dim, index):
    """org.pytorch.aten::index_select(self, dim, index)."""
    return index_select(x, int(dim.reshape(-1)[0]), index)

