"""Linear models of ai.onnx.ml, as onnxruntime's kernels (``linearclassifier.cc``,
``linearregressor.cc``) compute them: ``X`` (rows; a 1-D ``X`` is one row) cast to float32,
``scores = X @ coefficients^T + intercepts`` (coefficients class- or target-major).

* ``LinearClassifier(X) -> (label, scores)``: one score per intercept. More than one: the
  label is the class of the first highest score, the scores go through ``post_transform``
  (``LOGISTIC``, ``SOFTMAX``, ``SOFTMAX_ZERO``, ``PROBIT``). One score: the label is the
  second class label where the score is above 0, else the first (the literal 1 / 0, or
  "1" / "0", unless two labels are given); with two labels the scores become ``[1 - s,
  s]`` (no transform), else ``s`` (``PROBIT`` alone applies).
* ``LinearRegressor(X) -> Y`` (``targets``): the scores; ``post_transform`` as above
  (one target: ``PROBIT`` alone).
"""

from __future__ import annotations

import numpy as np
from onnx import FunctionProto

from rewriter.plugin import Arg, Declined, OpSample

from ._common import (
    DOMAIN,
    FLOAT,
    INT64,
    NUMERIC,
    Body,
    body_opset,
    features_rank,
    input_elem,
    logistic,
    make_string_const,
    only_attributes,
    post_transform,
    probit,
    text,
    texts,
)


def _scores(b: Body, ctx, coefficients: np.ndarray, intercepts: np.ndarray) -> str:
    rank = features_rank(ctx, ctx.node.op_type)
    elem = input_elem(ctx)
    if elem not in NUMERIC:
        raise Declined("X must be float, double, int64 or int32")
    x = b.rows("X", rank, coefficients.shape[1])
    x = x if elem == FLOAT else b.cast(x, FLOAT)
    weights = b.const(np.ascontiguousarray(coefficients.T, np.float32), np.float32)
    return b.op("Add", b.op("MatMul", x, weights), b.const(intercepts.astype(np.float32),
                                                             np.float32))


def _transform(b: Body, scores: str, count: int, transform: str) -> str:
    """``batched_update_scores_inplace`` without a second class."""
    if count == 1:
        return probit(b, scores) if transform == "PROBIT" else scores
    return post_transform(b, scores, transform)


def _matrix(ctx, count_attr: int) -> tuple[np.ndarray, np.ndarray]:
    coefficients = np.asarray(ctx.attribute("coefficients", []) or [], np.float32)
    intercepts = np.asarray(ctx.attribute("intercepts", []) or [], np.float32)
    if count_attr < 1 or not len(coefficients) or len(coefficients) % count_attr:
        raise Declined(f"{len(coefficients)} coefficients for {count_attr} outputs")
    matrix = coefficients.reshape(count_attr, -1)
    if len(intercepts) == 0:
        intercepts = np.zeros(count_attr, np.float32)
    if len(intercepts) != count_attr:
        raise Declined(f"{len(intercepts)} intercepts for {count_attr} outputs")
    return matrix, intercepts


def build_linear_classifier(ctx) -> FunctionProto:
    node = ctx.node
    if len(node.output) != 2 or not node.output[0]:
        raise Declined("LinearClassifier's label and scores must both be used")
    only_attributes(node, ["coefficients", "intercepts", "multi_class", "post_transform",
                           "classlabels_ints", "classlabels_strings"])
    ints = list(ctx.attribute("classlabels_ints", []) or [])
    strings = texts(ctx.attribute("classlabels_strings", []))
    count = len(ctx.attribute("intercepts", []) or [])
    if count < 1:
        raise Declined("onnxruntime counts the classes by the intercepts: none given")
    matrix, intercepts = _matrix(ctx, count)
    transform = text(ctx.attribute("post_transform"), "NONE")
    labels = strings or ints
    if count > 1 and len(labels) < count:
        raise Declined(f"{len(labels)} class labels for {count} scores")
    if count == 1 and len(labels) != 2:
        raise Declined("one score needs two class labels (onnxruntime refuses the node)")
    second = count == 1
    if second and transform == "PROBIT":
        raise Declined("PROBIT with one score and two labels: the kernel writes half of "
                       "its scores")
    b = Body(body_opset(ctx))
    scores = _scores(b, ctx, matrix, intercepts)
    if count == 1:
        index = b.reshape(b.cast(b.op("Greater", scores, b.scalar_like(0.0, FLOAT)), INT64),
                          [-1])
        names = labels
    else:
        index = b.op("ArgMax", scores, axis=1, keepdims=0)
        names = labels
    if strings:
        label = b.op("Gather", make_string_const(b, list(names)), index, axis=0)
    else:
        label = b.op("Gather", b.const(np.asarray(names, np.int64)), index, axis=0)
    if second:
        p = logistic(b, scores) if transform == "LOGISTIC" else scores
        z = b.op("Concat", b.op("Sub", b.scalar_like(1.0, FLOAT), p), p, axis=1)
    else:
        z = _transform(b, scores, count, transform)
    return b.function(DOMAIN, "linear_classifier", ["X"], [label, z])


def build_linear_regressor(ctx) -> FunctionProto:
    node = ctx.node
    if len(node.output) != 1:
        raise Declined("LinearRegressor has one output")
    only_attributes(node, ["coefficients", "intercepts", "targets", "post_transform"])
    targets = int(ctx.attribute("targets", 1))
    matrix, intercepts = _matrix(ctx, targets)
    b = Body(body_opset(ctx))
    scores = _scores(b, ctx, matrix, intercepts)
    y = _transform(b, scores, targets, text(ctx.attribute("post_transform"), "NONE"))
    return b.function(DOMAIN, "linear_regressor", ["X"], [y])


_COEF3 = [0.5, -1.0, 0.25, 2.0, 0.0, -0.5, -1.5, 1.0, 0.75, 0.1, -0.2, 0.3]
_TRANSFORMS = ("NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO", "PROBIT")

REGISTRATIONS = [
    ("LinearClassifier", build_linear_classifier, ("float", "double", "int64", "int32"), "", [
        OpSample([Arg("T[5,4]", low=-3, high=3)], ["int64", "float"],
                 {"coefficients": _COEF3, "intercepts": [0.1, -0.2, 0.3],
                  "classlabels_ints": [7, 8, 9], "post_transform": tr}, opset=0,
                 name=f"3-classes-{tr.lower()}", dtypes=["float"])
        for tr in _TRANSFORMS] + [
        OpSample([Arg("T[5,4]", low=-3, high=3)], ["string", "float"],
                 {"coefficients": _COEF3[:4], "intercepts": [0.2],
                  "classlabels_strings": ["neg", "pos"], "post_transform": "LOGISTIC"},
                 opset=13, name="binary-strings"),
        OpSample([Arg("T[5,4]", low=-3, high=3)], ["int64", "float"],
                 {"coefficients": _COEF3[:4], "intercepts": [-0.3],
                  "classlabels_ints": [0, 1], "post_transform": "SOFTMAX"},
                 opset=13, name="binary-softmax", dtypes=["float"])]),
    # (onnxruntime's kernel takes float only; the body casts any numeric X)
    ("LinearRegressor", build_linear_regressor, ("float",), "", [
        OpSample([Arg("T[5,4]", low=-3, high=3)], ["float"],
                 {"coefficients": _COEF3, "intercepts": [0.1, -0.2, 0.3], "targets": 3,
                  "post_transform": tr}, opset=0, name=f"3-targets-{tr.lower()}",
                 dtypes=["float"])
        for tr in _TRANSFORMS] + [
        OpSample([Arg("T[4]", low=-3, high=3)], ["float"],
                 {"coefficients": _COEF3[:4], "intercepts": [0.5]}, opset=13, name="1d",
                 dtypes=["float"])]),
]
