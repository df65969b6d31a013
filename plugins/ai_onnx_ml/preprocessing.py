"""Preprocessing ops of ai.onnx.ml, as onnxruntime's ML kernels compute them. ``X`` is read
as rows of features (a 1-D ``X`` is one row) unless said otherwise; outputs are float32.

* ``Scaler(X)`` (``offset``, ``scale``: one value, or one per feature):
  ``(X - offset) * scale``, in double for a double ``X``, else in float32.
* ``Normalizer(X)`` (``norm``) along axis 1 (axis 0 of a 1-D ``X``), in float32: ``MAX``
  divides by the largest value (not its magnitude), ``L1`` by the sum of magnitudes, ``L2``
  gives ``sign(x) sqrt(x^2 / sum x^2)``; a row whose divisor is 0 is left as it is.
* ``Imputer(X)``: the entries equal to ``replaced_value_float`` (NaN: the NaN entries) or
  ``replaced_value_int64`` take ``imputed_value_floats`` / ``imputed_value_int64s`` (one
  value, or one per feature); the type of ``X`` is kept.
* ``Binarizer(X)`` (``threshold``): ``X > threshold`` as 1 / 0 in ``X``'s type.
* ``FeatureVectorizer(X1, X2, ...)`` (``inputdimensions``): each input's rows cast to
  float32, cut or padded with zeros to its dimension, concatenated along axis 1.
* ``ArrayFeatureExtractor(X, Y)``: ``Gather`` of the indices ``Y`` (flattened) along the
  last axis of ``X``; a 1-D ``X`` gives ``(1, len(Y))``.
"""

from __future__ import annotations

import numpy as np
from onnx import FunctionProto

from rewriter.plugin import Arg, Declined, OpSample

from ._common import (
    DOMAIN,
    DOUBLE,
    FLOAT,
    INT64,
    NUMERIC,
    Body,
    body_opset,
    features_rank,
    input_elem,
    input_rank,
    one_output,
    only_attributes,
    text,
)


def build_scaler(ctx) -> FunctionProto:
    node = ctx.node
    one_output(node, "Scaler")
    only_attributes(node, ["offset", "scale"])
    features_rank(ctx, "Scaler")
    elem = input_elem(ctx)
    if elem not in NUMERIC:
        raise Declined("X must be float, double, int64 or int32")
    scale = list(ctx.attribute("scale", []) or [])
    offset = list(ctx.attribute("offset", []) or [])
    if not scale or len(scale) != len(offset):
        raise Declined("scale and offset must be given with the same length")
    width = (ctx.shape(node.input[0]) or [None])[-1]
    if len(scale) != 1 and width is not None and width != len(scale):
        raise Declined(f"scale has {len(scale)} values for {width} features")
    b = Body(body_opset(ctx))
    work = DOUBLE if elem == DOUBLE else FLOAT
    x = "X" if elem == work else b.cast("X", work)
    y = b.op("Mul", b.op("Sub", x, b.floats(np.float32(offset), work)),
             b.floats(np.float32(scale), work))
    if work != FLOAT:
        y = b.cast(y, FLOAT)
    return b.function(DOMAIN, "scaler", ["X"], [y])


def build_normalizer(ctx) -> FunctionProto:
    node = ctx.node
    one_output(node, "Normalizer")
    only_attributes(node, ["norm"])
    features_rank(ctx, "Normalizer")
    elem = input_elem(ctx)
    if elem not in NUMERIC:
        raise Declined("X must be float, double, int64 or int32")
    norm = text(ctx.attribute("norm"), "MAX")
    axis = -1  # a 1-D X's only axis, a 2-D X's rows (either, when its rank is not known)
    b = Body(body_opset(ctx))
    x = "X" if elem == FLOAT else b.cast("X", FLOAT)
    zero = b.scalar_like(0.0, FLOAT)
    if norm == "MAX":
        lowest = b.scalar_like(float(np.finfo(np.float32).min), FLOAT)
        divisor = b.op("Max", b.reduce_max(x, [axis], keepdims=1), lowest)
        y = b.op("Div", x, divisor)
    elif norm == "L1":
        magnitude = b.op("Abs", "X")
        if elem != FLOAT:
            magnitude = b.cast(magnitude, FLOAT)
        divisor = b.reduce_sum(magnitude, [axis], keepdims=1)
        y = b.op("Div", x, divisor)
    elif norm == "L2":
        square = b.op("Mul", "X", "X")
        if elem != FLOAT:
            square = b.cast(square, FLOAT)
        divisor = b.reduce_sum(square, [axis], keepdims=1)
        root = b.op("Sqrt", b.op("Div", square, divisor))
        y = b.op("Where", b.op("Less", x, zero), b.op("Neg", root), root)
    else:
        raise Declined(f"unknown norm {norm!r} (MAX, L1, L2)")
    y = b.op("Where", b.op("Equal", divisor, zero), x, y)
    return b.function(DOMAIN, "normalizer", ["X"], [y])


def build_imputer(ctx) -> FunctionProto:
    node = ctx.node
    one_output(node, "Imputer")
    only_attributes(node, ["imputed_value_floats", "imputed_value_int64s",
                           "replaced_value_float", "replaced_value_int64"])
    features_rank(ctx, "Imputer")
    elem = input_elem(ctx)
    if elem == FLOAT:
        values = list(ctx.attribute("imputed_value_floats", []) or [])
        replaced = float(ctx.attribute("replaced_value_float", 0.0))
    elif elem == INT64:
        values = list(ctx.attribute("imputed_value_int64s", []) or [])
        replaced = int(ctx.attribute("replaced_value_int64", 0))
    else:
        raise Declined("X must be float or int64")
    if not values:
        raise Declined("no imputed values for X's type")
    width = (ctx.shape(node.input[0]) or [None])[-1]
    if len(values) != 1 and width is not None and width != len(values):
        raise Declined(f"{len(values)} imputed values for {width} features")
    b = Body(body_opset(ctx))
    dtype = np.float32 if elem == FLOAT else np.int64
    if elem == FLOAT and np.isnan(replaced):
        missing = b.op("IsNaN", "X")
    else:
        missing = b.op("Equal", "X", b.const(np.array(replaced, dtype), dtype))
    y = b.op("Where", missing, b.const(np.asarray(values, dtype), dtype), "X")
    return b.function(DOMAIN, "imputer", ["X"], [y])


def build_binarizer(ctx) -> FunctionProto:
    node = ctx.node
    one_output(node, "Binarizer")
    only_attributes(node, ["threshold"])
    elem = input_elem(ctx)
    if elem is None:
        raise Declined("needs X of a known element type")
    b = Body(body_opset(ctx))
    threshold = b.const(np.array(ctx.attribute("threshold", 0.0)), elem, hint="threshold")
    y = b.cast(b.op("Greater", "X", threshold), elem)
    return b.function(DOMAIN, "binarizer", ["X"], [y])


def build_feature_vectorizer(ctx) -> FunctionProto:
    node = ctx.node
    one_output(node, "FeatureVectorizer")
    only_attributes(node, ["inputdimensions"])
    dims = list(ctx.attribute("inputdimensions", []) or [])
    if len(dims) != len(node.input) or not dims:
        raise Declined("inputdimensions must give one dimension per input")
    b = Body(body_opset(ctx))
    parts, names = [], []
    for i, (name, dim) in enumerate(zip(node.input, dims)):
        shape = ctx.shape(name)
        if shape is None or len(shape) not in (1, 2) or shape[-1] is None:
            raise Declined(f"input {i} needs a rank of 1 or 2 and a known last dimension")
        elem = input_elem(ctx, i)
        if elem not in NUMERIC:
            raise Declined(f"input {i} must be float, double, int64 or int32")
        formal = f"X{i}"
        names.append(formal)
        x = b.rows(formal, len(shape))
        x = x if elem == FLOAT else b.cast(x, FLOAT)
        width = shape[-1]
        if width > dim:
            x = b.slice(x, [0], [dim], [1])
        elif width < dim:
            x = b.op("Pad", x, b.ints([0, 0, 0, dim - width]), b.scalar_like(0.0, FLOAT))
        parts.append(x)
    y = parts[0] if len(parts) == 1 else b.op("Concat", *parts, axis=1)
    return b.function(DOMAIN, "feature_vectorizer", names, [y])


def build_array_feature_extractor(ctx) -> FunctionProto:
    node = ctx.node
    rank = input_rank(ctx, 0)
    if (len(node.input) != 2 or len(node.output) != 1 or node.attribute or rank is None
            or rank < 1):
        raise Declined("needs X of a known rank >= 1 and Y, no attributes, one output")
    b = Body(body_opset(ctx))
    y = b.op("Gather", "X", b.reshape(b.cast("Y", INT64), [-1]), axis=rank - 1)
    if rank == 1:
        y = b.unsqueeze(y, [0])
    return b.function(DOMAIN, "array_feature_extractor", ["X", "Y"], [y])


def _with_nan(rng, shape):
    values = rng.uniform(-2.0, 2.0, shape)
    values.flat[::3] = np.nan
    return values


# (op, builder, dtypes, note, samples)
REGISTRATIONS = [
    ("Scaler", build_scaler, ("float", "double", "int64", "int32"), "", [
        OpSample(["T[3,4]"], ["float"], {"offset": [0.5, -1.0, 2.0, 0.0],
                                         "scale": [2.0, 0.5, -1.0, 3.0]}, opset=0),
        OpSample([Arg("T[5]", low=-5, high=5)], ["float"], {"offset": [1.5], "scale": [0.25]},
                 opset=13, name="one-value-1d")]),
    ("Normalizer", build_normalizer, ("float", "double", "int64", "int32"), "", [
        OpSample([Arg("T[4,5]", low=-4, high=4)], ["float"], {"norm": norm}, opset=0,
                 name=norm.lower())
        for norm in ("MAX", "L1", "L2")] + [
        OpSample([Arg("T[2,3]", values=[[0, 0, 0], [-1, -2, -3]])], ["float"],
                 {"norm": norm}, opset=13, name=f"{norm.lower()}-zero-and-negative-row")
        for norm in ("MAX", "L1", "L2")] + [
        OpSample([Arg("T[6]", low=-3, high=3)], ["float"], {"norm": "L2"}, opset=17,
                 name="1d", dtypes=["float"])]),
    ("Imputer", build_imputer, ("float", "int64"), "", [
        OpSample([Arg("float[4,3]", values=_with_nan)], ["float"],
                 {"imputed_value_floats": [1.0, 2.0, 3.0], "replaced_value_float": np.nan},
                 opset=0, name="nan-per-feature"),
        OpSample([Arg("float[4,3]", values=np.array([[0, 1, 2], [2, 2, 0], [5, 2, 1],
                                                     [2, 0, 2]], np.float32))],
                 ["float"], {"imputed_value_floats": [-7.0], "replaced_value_float": 2.0},
                 opset=13, name="value-one"),
        OpSample([Arg("int64[3,2]", values=[[0, 4], [-1, 0], [-1, -1]])], ["int64"],
                 {"imputed_value_int64s": [9, 8], "replaced_value_int64": -1}, opset=13,
                 name="int64")]),
    ("Binarizer", build_binarizer, ("float", "double"), "", [
        OpSample(["T[3,4,5]"], attributes={"threshold": 0.3}, opset=0, dtypes=["float"]),
        OpSample([Arg("T[7]", values=[-1.0, 0.3, 0.31, -np.inf, np.inf, -0.0, 2.0])],
                 attributes={"threshold": 0.3}, opset=13, name="edges", dtypes=["float"]),
        OpSample(["T[3,4]"], attributes={"threshold": -0.2}, opset=0, dtypes=["double"],
                 oracle="reference"),  # (onnxruntime's kernel is float only)
        OpSample(["T[6]"], opset=17, name="default", dtypes=["float"])]),
    ("FeatureVectorizer", build_feature_vectorizer, ("float", "double", "int64", "int32"), "", [
        OpSample(["T[2,3]", "T[2,2]", "T[2,4]"], ["float"], {"inputdimensions": [3, 2, 4]},
                 opset=0, name="concat"),
        OpSample([Arg("T[2,3]", low=-9, high=9), Arg("T[2,1]", low=-9, high=9)], ["float"],
                 {"inputdimensions": [2, 3]}, opset=13, name="cut-and-pad")]),
    ("ArrayFeatureExtractor", build_array_feature_extractor, ("float", "int64"), "", [
        OpSample(["T[3,4]", Arg("int64[2]", values=[1, 3])], opset=0, name="2d",
                 dtypes=["float", "int64"]),
        OpSample(["T[5]", Arg("int64[1,2]", values=[[4, 0]])], opset=0, name="1d",
                 dtypes=["float"]),
        OpSample(["T[2,3,4]", Arg("int64[3]", values=[0, 0, 2])], opset=17, name="3d",
                 dtypes=["float"])]),
]
