"""Elementwise functions of one tensor that onnx removed (its "experimental" ops, deprecated
in opset 10; ``docs/ManagingExperimentalOps.md`` gives each one's standard form). Semantics
from the removed schemas (onnx 1.3 ``onnx/defs/experiments/defs.cc``, kept by onnxruntime in
``onnx_deprecated_operators.cc``), float16/float/double:

* ``Affine(X)`` (``alpha`` = 1, ``beta`` = 0): ``alpha * X + beta``.
* ``Scale(input)`` (``scale`` = 1): ``scale * input``.
* ``ScaledTanh(input)`` (``alpha``, ``beta``, no defaults: onnxruntime refuses the node
  without them, and so is it declined): ``alpha * tanh(beta * input)``.
* ``ParametricSoftplus(X)`` (``alpha``, ``beta``, no defaults): ``alpha * ln(exp(beta * X)
  + 1)``, as ``alpha * Softplus(beta * X)``.
* ``ThresholdedRelu(X)`` below opset 10 (``alpha`` = 1; the op became standard, the same
  formula, in opset 10): ``X`` where ``X > alpha``, else 0. ``Where`` from opset 9; at 8
  ``Max(X, alpha) * (X > alpha)`` (so ``-inf`` gives 0); at 7 the same with ``alpha``
  tiled to ``X``'s shape (``Max``-6 does not broadcast). A NaN gives 0 from 9, and what
  ``Max`` makes of it (onnxruntime: NaN) below.

Oracle: onnxruntime's CPU kernels (float; opsets 7-9), numpy from the same text for double
and float16.
"""

from __future__ import annotations

import numpy as np
from onnx import FunctionProto
from rewriter_plugins.onnx_removed._body import (
    DOMAIN,
    FLOAT_DTYPES,
    REMOVED_OPSETS,
    attributes,
    filled,
    float_body,
)

from rewriter.plugin import Arg, Declined, OpSample

WHERE = 9
MAX_BROADCASTS = 8


def build_affine(ctx) -> FunctionProto | None:
    attrs = attributes(ctx, {"alpha", "beta"})
    b = float_body(ctx)
    y = b.op("Add", b.op("Mul", b.literal(attrs.get("alpha", 1.0)), "X"),
             b.literal(attrs.get("beta", 0.0)))
    return b.function(DOMAIN, "affine", ["X"], [y])


def build_scale(ctx) -> FunctionProto | None:
    attrs = attributes(ctx, {"scale"})
    b = float_body(ctx)
    return b.function(DOMAIN, "scale", ["X"], [b.op("Mul", b.literal(attrs.get("scale", 1.0)),
                                                      "X")])


def _two_parameters(ctx, name: str) -> tuple[float, float]:
    attrs = attributes(ctx, {"alpha", "beta"})
    if "alpha" not in attrs or "beta" not in attrs:
        raise Declined(f"{name} needs alpha and beta (no defaults; onnxruntime refuses the "
                       "node without them)")
    return attrs["alpha"], attrs["beta"]


def build_scaled_tanh(ctx) -> FunctionProto | None:
    from rewriter_plugins.com_microsoft.common import activation  # its fused activations

    alpha, beta = _two_parameters(ctx, "ScaledTanh")
    b = float_body(ctx)
    return b.function(DOMAIN, "scaled_tanh", ["X"],
                      [activation(b, "X", "ScaledTanh", alpha, beta)])


def build_parametric_softplus(ctx) -> FunctionProto | None:
    from rewriter_plugins.com_microsoft.common import activation

    alpha, beta = _two_parameters(ctx, "ParametricSoftplus")
    b = float_body(ctx)
    return b.function(DOMAIN, "parametric_softplus", ["X"],
                      [activation(b, "X", "ParametricSoftplus", alpha, beta)])


def build_thresholded_relu(ctx) -> FunctionProto | None:
    attrs = attributes(ctx, {"alpha"})
    b = float_body(ctx)
    alpha = b.literal(attrs.get("alpha", 1.0))
    above = b.op("Greater", "X", alpha)
    if b.opset >= WHERE:
        y = b.op("Where", above, "X", b.literal(0.0))
    else:
        if b.opset < MAX_BROADCASTS:
            alpha = filled(b, alpha, b.op("Shape", "X"))
        y = b.op("Mul", b.op("Max", "X", alpha), b.cast(above, b.elem_type))
    return b.function(DOMAIN, "thresholded_relu", ["X"], [y])


# -- oracles (numpy, from the removed schemas' text) -----------------------------------------


def _as(x: np.ndarray, y) -> np.ndarray:
    return np.asarray(y).astype(x.dtype)


def affine(x, alpha=1.0, beta=0.0):
    return _as(x, alpha * x.astype(np.float64) + beta)


def scale(x, scale=1.0):
    return _as(x, scale * x.astype(np.float64))


def scaled_tanh(x, alpha, beta):
    return _as(x, alpha * np.tanh(beta * x.astype(np.float64)))


def parametric_softplus(x, alpha, beta):
    return _as(x, alpha * np.logaddexp(0.0, beta * x.astype(np.float64)))  # ln(e^bx + 1)


def thresholded_relu(x, alpha=1.0):
    return _as(x, np.where(x > alpha, x, 0))


# -- registration ----------------------------------------------------------------------------

_SPECIAL = [-np.inf, -3.5, -1.0, -0.0, 0.0, 0.5, 1.0, 1.5, 20.0, np.inf]


def _samples(op: str, attributes: dict, oracle: str, special: bool = True) -> list[OpSample]:
    """float at opsets 7 and 9 against onnxruntime's kernel, double and float16 against
    numpy; infinities and signed zeros where the op defines them."""
    numpy_oracle = f"rewriter_plugins.onnx_removed.activations:{oracle}"
    out = [OpSample(["T[2,3,4]"], attributes=attributes, opset=opset, dtypes=["float"],
                    name=f"opset{opset}") for opset in (7, 9)]
    out.append(OpSample(["T[2,3,4]"], attributes=attributes, opset=8,
                        dtypes=["double", "float16"], oracle=numpy_oracle, name="numpy"))
    if special:
        out.append(OpSample([Arg("T[10]", values=_SPECIAL)], attributes=attributes, opset=7,
                            dtypes=["float"], name="special"))
    return out


OPS = [  # (op, builder, samples, note)
    ("Affine", build_affine, _samples("Affine", {"alpha": 150.0, "beta": -0.5}, "affine")
     + [OpSample(["T[5]"], opset=8, dtypes=["float"], name="defaults")],
     "alpha * X + beta"),
    ("Scale", build_scale, _samples("Scale", {"scale": -2.5}, "scale"), "scale * X"),
    ("ScaledTanh", build_scaled_tanh,
     _samples("ScaledTanh", {"alpha": 1.7, "beta": 0.66}, "scaled_tanh"),
     "alpha * Tanh(beta * X)"),
    ("ParametricSoftplus", build_parametric_softplus,
     _samples("ParametricSoftplus", {"alpha": 0.2, "beta": 5.0}, "parametric_softplus"),
     "alpha * Softplus(beta * X)"),
    ("ThresholdedRelu", build_thresholded_relu,
     _samples("ThresholdedRelu", {"alpha": 0.4}, "thresholded_relu")
     + [OpSample([Arg("T[10]", values=_SPECIAL)], opset=opset, dtypes=["float"],
                 name=f"special-default-{opset}") for opset in (8, 9)],
     "X > alpha ? X : 0, before opset 10"),
]


def register(registry) -> None:
    for op, builder, samples, note in OPS:
        registry.add("", op, builder, opsets=REMOVED_OPSETS, dtypes=FLOAT_DTYPES,
                     oracle="onnxruntime", samples=samples,
                     description=f"onnx-removed:{op} ({note})")
