"""Encoders of ai.onnx.ml, as onnxruntime's kernels compute them. Every lookup is an
``Equal`` of each element with every key, the first match's value gathered, the default
where none matches; a NaN key matches NaN (LabelEncoder 4). String keys need ``Equal`` on
strings (ai.onnx opset 19): a model that imports no ai.onnx opset gets its body at 19, an
older import is declined.

* ``LabelEncoder(X)`` (1: ``classes_strings``/``default_*`` string <-> int64; 2: ``keys_*``,
  ``values_*`` of int64, float, string; 4: ``keys_tensor``/``values_tensor``/
  ``default_tensor`` too): ``Y[i] = values[k]`` where ``X[i] == keys[k]``, else the default
  (``-1``, ``"_Unused"``, ``-0.0``, or ``default_tensor``); same shape as ``X``.
* ``CategoryMapper(X)``: int64 -> string (``cats_int64s`` -> ``cats_strings``, default
  ``default_string``) or string -> int64 (default ``default_int64``).
* ``OneHotEncoder(X)`` (``cats_int64s`` or ``cats_strings``): float32 ``[..., len(cats)]``,
  1 where the element (numbers truncated to int64) is the category; an element in no
  category gives zeros (``zeros=0``, where onnxruntime fails, is declined).
"""

from __future__ import annotations

import numpy as np
from onnx import FunctionProto, TensorProto, helper, numpy_helper

from rewriter.plugin import Arg, Declined, OpSample

from ._common import (
    DOMAIN,
    INT64,
    NO_IMPORT_OPSET,
    STRING,
    Body,
    body_opset,
    input_elem,
    input_rank,
    ml_opset,
    one_output,
    text,
    texts,
)

STRING_EQUAL_OPSET = 19


def _opset_for(ctx, strings: bool) -> int:
    opset = body_opset(ctx)
    if not strings or opset >= STRING_EQUAL_OPSET:
        return opset
    if opset == NO_IMPORT_OPSET and "" not in (ctx.opsets or {}) and "ai.onnx" not in (
            ctx.opsets or {}):
        return STRING_EQUAL_OPSET
    raise Declined(f"string keys need Equal on strings (ai.onnx opset {STRING_EQUAL_OPSET}); "
                   f"the model imports {opset}")


def _constant(b: Body, values: np.ndarray, hint: str) -> str:
    name = b.fresh(hint)
    if values.dtype == object:
        tensor = helper.make_tensor(name, STRING, list(values.shape),
                                    [str(v).encode() for v in values.ravel()])
    else:
        tensor = numpy_helper.from_array(values, name)
    return b.op("Constant", outputs=[name], value=tensor)


def _lookup(b: Body, x: str, keys: np.ndarray, values: np.ndarray, default: np.ndarray
            ) -> str:
    """``values[k]`` where ``x == keys[k]`` (first k), else ``default`` (a scalar)."""
    flat_keys = _constant(b, keys.reshape(1, -1) if keys.size else keys, "keys")
    expanded = b.unsqueeze(x, [-1])
    match = b.op("Equal", expanded, flat_keys)
    if keys.dtype.kind == "f" and np.isnan(keys).any():
        nan_keys = b.const(np.isnan(keys).reshape(1, -1), np.bool_)
        match = b.op("Or", match, b.op("And", b.op("IsNaN", expanded), nan_keys))
    hits = b.cast(match, TensorProto.INT32)
    found = b.cast(b.reduce_max(hits, [-1], keepdims=0), TensorProto.BOOL)
    index = b.op("ArgMax", hits, axis=-1, keepdims=0)
    # the default as one more value (Gather takes every type, Where not: int16...)
    index = b.op("Where", found, index, b.const(np.array(len(values), np.int64)))
    table = np.concatenate([values.reshape(-1), default.reshape(1).astype(values.dtype)])
    return b.op("Gather", _constant(b, table, "values"), index, axis=0)


def _array(value, kind: str) -> np.ndarray:
    if kind == "strings":
        return np.array(texts(value), dtype=object)
    if kind == "floats":
        return np.asarray(list(value), np.float32)
    return np.asarray(list(value), np.int64)


def _label_encoder_maps(ctx) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """keys, values and the default (a 0-d array) of a LabelEncoder node."""
    version = ml_opset(ctx)
    if version == 1:
        classes = np.array(texts(ctx.attribute("classes_strings", [])), dtype=object)
        if input_elem(ctx) == STRING:
            return classes, np.arange(len(classes), dtype=np.int64), np.array(
                int(ctx.attribute("default_int64", -1)), np.int64)
        return np.arange(len(classes), dtype=np.int64), classes, np.array(
            text(ctx.attribute("default_string"), "_Unused"), dtype=object)
    keys = values = None
    for kind in ("strings", "int64s", "floats"):
        found = ctx.attribute(f"keys_{kind}", None)
        if found is not None:
            keys = _array(found, kind)
        found = ctx.attribute(f"values_{kind}", None)
        if found is not None:
            values = _array(found, kind)
    tensor_keys = ctx.attribute("keys_tensor", None)
    if tensor_keys is not None:
        keys = numpy_helper.to_array(tensor_keys)
    tensor_values = ctx.attribute("values_tensor", None)
    if tensor_values is not None:
        values = numpy_helper.to_array(tensor_values)
    if keys is None or values is None or len(keys) != len(values):
        raise Declined("keys and values must be given with the same length")
    default_tensor = ctx.attribute("default_tensor", None)
    if default_tensor is not None:
        default = numpy_helper.to_array(default_tensor).reshape(())
    elif values.dtype == object:
        default = np.array(text(ctx.attribute("default_string"), "_Unused"), dtype=object)
    elif values.dtype.kind == "f":
        default = np.array(ctx.attribute("default_float", -0.0), values.dtype)
    else:
        default = np.array(ctx.attribute("default_int64", -1), values.dtype)
    return keys, values, default.astype(values.dtype)


def build_label_encoder(ctx) -> FunctionProto:
    node = ctx.node
    one_output(node, "LabelEncoder")
    if input_rank(ctx) is None:
        raise Declined("needs X of a known rank")
    keys, values, default = _label_encoder_maps(ctx)
    if keys.dtype == object and input_elem(ctx) != STRING or (
            keys.dtype != object and input_elem(ctx) == STRING):
        raise Declined("the keys' type is not X's")
    b = Body(_opset_for(ctx, keys.dtype == object))
    x = "X"
    if keys.dtype != object and input_elem(ctx) is not None:
        keys = keys.astype(helper.tensor_dtype_to_np_dtype(input_elem(ctx)))
    y = _lookup(b, x, keys, values, default)
    return b.function(DOMAIN, "label_encoder", ["X"], [y])


def build_category_mapper(ctx) -> FunctionProto:
    node = ctx.node
    one_output(node, "CategoryMapper")
    if input_rank(ctx) is None:
        raise Declined("needs X of a known rank")
    ints = np.asarray(list(ctx.attribute("cats_int64s", []) or []), np.int64)
    strings = np.array(texts(ctx.attribute("cats_strings", [])), dtype=object)
    if len(ints) != len(strings):
        raise Declined("cats_int64s and cats_strings differ in length")
    elem = input_elem(ctx)
    b = Body(_opset_for(ctx, elem == STRING))
    if elem == STRING:
        y = _lookup(b, "X", strings, ints, np.array(int(ctx.attribute("default_int64", -1))))
    elif elem == INT64:
        y = _lookup(b, "X", ints, strings, np.array(
            text(ctx.attribute("default_string"), "_Unused"), dtype=object))
    else:
        raise Declined("X must be int64 or string")
    return b.function(DOMAIN, "category_mapper", ["X"], [y])


def build_one_hot_encoder(ctx) -> FunctionProto:
    node = ctx.node
    one_output(node, "OneHotEncoder")
    if int(ctx.attribute("zeros", 1)) == 0:
        raise Declined("zeros=0 (onnxruntime fails on an unknown category)")
    elem = input_elem(ctx)  # (any rank: each element gets its one-hot row, on a new axis)
    strings = texts(ctx.attribute("cats_strings", []))
    ints = list(ctx.attribute("cats_int64s", []) or [])
    if bool(strings) == bool(ints):
        raise Declined("give cats_int64s or cats_strings (one of them)")
    b = Body(_opset_for(ctx, bool(strings)))
    if strings:
        if elem != STRING:
            raise Declined("string categories need string X")
        cats, x = np.array(strings, dtype=object), "X"
    else:
        if elem == STRING or elem is None:
            raise Declined("integer categories need numeric X")
        cats = np.asarray(ints, np.int64)
        x = "X" if elem == INT64 else b.cast("X", INT64)
    y = b.cast(b.op("Equal", b.unsqueeze(x, [-1]), _constant(b, cats, "cats")),
               TensorProto.FLOAT)
    return b.function(DOMAIN, "one_hot_encoder", ["X"], [y])


_WORDS = np.array(["a", "bb", "", "zz", "a", "c"], dtype=object)

REGISTRATIONS = [
    ("LabelEncoder", build_label_encoder, (), "", [
        OpSample([Arg("string[6]", values=_WORDS)], ["int64"],
                 {"keys_strings": ["a", "bb", "c"], "values_int64s": [3, 4, 5],
                  "default_int64": 9}, opset=0, domain_opset=2, name="string-int64"),
        OpSample([Arg("int64[2,3]", values=[[1, 2, 3], [7, 1, 0]])], ["string"],
                 {"keys_int64s": [1, 7, 3], "values_strings": ["x", "y", "z"]}, opset=0,
                 domain_opset=2, name="int64-string"),
        OpSample([Arg("float[5]", values=[0.5, np.nan, 2.0, -1.0, 0.5])], ["float"],
                 {"keys_floats": [0.5, np.nan, 2.0], "values_floats": [1.0, 2.0, 3.0]},
                 opset=0, domain_opset=4, name="float-nan-key"),
        OpSample([Arg("string[4]", values=np.array(["a", "q", "c", "bb"], dtype=object))],
                 ["int16"], {"keys_tensor": numpy_helper.from_array(
                     np.array(["a", "bb", "c"], dtype=object)),
                     "values_tensor": numpy_helper.from_array(np.array([1, 2, 3], np.int16)),
                     "default_tensor": numpy_helper.from_array(np.array([-4], np.int16))},
                 opset=21, domain_opset=4, name="tensors"),
        OpSample([Arg("string[6]", values=_WORDS)], ["int64"],
                 {"classes_strings": ["a", "bb", "c"], "default_int64": -7}, opset=19,
                 name="v1")]),
    ("CategoryMapper", build_category_mapper, (), "", [
        OpSample([Arg("string[6]", values=_WORDS)], ["int64"],
                 {"cats_strings": ["a", "bb", "c"], "cats_int64s": [3, 4, 5],
                  "default_int64": 9}, opset=0, name="string-int64"),
        OpSample([Arg("int64[2,3]", values=[[1, 2, 3], [7, 1, 0]])], ["string"],
                 {"cats_int64s": [1, 7, 3], "cats_strings": ["x", "y", "z"]}, opset=13,
                 name="int64-string")]),
    ("OneHotEncoder", build_one_hot_encoder, (), "", [
        OpSample([Arg("string[2,3]", values=_WORDS.reshape(2, 3))], ["float"],
                 {"cats_strings": ["a", "bb", "c", "zz"]}, opset=0, name="strings"),
        OpSample([Arg("int64[5]", values=[3, 1, 4, 1, 5])], ["float"],
                 {"cats_int64s": [1, 3, 5, 9]}, opset=13, name="int64"),
        OpSample([Arg("float[2,2]", values=[[1.7, 3.0], [-1.0, 5.2]])], ["float"],
                 {"cats_int64s": [1, 3, 5, -1]}, opset=13, name="float-truncated")]),
]
