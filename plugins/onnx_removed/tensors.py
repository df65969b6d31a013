"""Slicing and filling ops that onnx removed (deprecated in opset 10), semantics from the
removed schemas (and Caffe2's fillers, which they describe):

* ``DynamicSlice(data, starts, ends[, axes])``: ``Slice``-10's semantics with the bounds as
  inputs (negative counts from the end, beyond the end clamps, ``axes`` default ``0..``).
  Below opset 10 ``Slice`` takes them as attributes, so ``starts``, ``ends`` and ``axes``
  must be constants (initializers or ``Constant`` outputs); computed bounds are declined.
* ``GivenTensorFill([shape])`` (``values``, ``shape``, ``extra_shape``, ``input_as_shape``):
  ``values`` laid out in the output shape: the ``shape`` attribute (no input); the input's
  shape followed by ``extra_shape``; or with ``input_as_shape = 1`` the input's values
  followed by ``extra_shape``. Float output (the input's float type where one is given).
  ``values`` of another size than the shape fails at run time, as in Caffe2.
* ``ConstantFill([input])`` (``value`` = 0, ``dtype`` = float; float, int32, int64, bool;
  ``shape``, ``extra_shape``, ``input_as_shape``): a tensor of ``dtype`` filled with
  ``value``, of the shape chosen as for ``GivenTensorFill``. A computed shape is filled by
  ``Expand`` (opset 8) or a ``Tile`` (7).

Oracle: numpy from that text (onnxruntime has no kernel for the fills, and runs
``DynamicSlice``, which is checked against it too, at opsets 7-9 only).
"""

from __future__ import annotations

import numpy as np
from onnx import FunctionProto, TensorProto, helper
from rewriter_plugins.onnx_removed._body import (
    DOMAIN,
    FLOATS,
    REMOVED_OPSETS,
    attributes,
    filled,
)

from rewriter.plugin import Arg, Declined, FunctionBuilder, OpSample
from rewriter.plugin import present as _present

_FILL_TYPES = (TensorProto.FLOAT, TensorProto.INT32, TensorProto.INT64, TensorProto.BOOL)


def build_dynamic_slice(ctx) -> FunctionProto | None:
    node = ctx.node
    attributes(ctx, set())
    if not 3 <= len(node.input) <= 4 or not all(_present(node.input, i) for i in range(3)):
        raise Declined("needs data, starts and ends (and optionally axes)")
    bounds = [ctx.constant(name) if name else None for name in node.input[1:]]
    if any(v is None for v in bounds[:2]) or (len(bounds) > 2 and node.input[3] and
                                               bounds[2] is None):
        raise Declined("below opset 10 Slice takes starts, ends and axes as attributes: "
                       "they must be constants")
    starts, ends = (v.astype(np.int64).ravel().tolist() for v in bounds[:2])
    axes = bounds[2].astype(np.int64).ravel().tolist() if len(bounds) > 2 and \
        bounds[2] is not None else list(range(len(starts)))
    if not len(starts) == len(ends) == len(axes):
        raise Declined("starts, ends and axes of different lengths")
    b = FunctionBuilder(ctx.opset)
    y = b.slice("data", starts, ends, axes)
    return b.function(DOMAIN, "dynamic_slice", ["data", "starts", "ends", "axes"][
        :len(node.input)], [y])


def _fill_shape(b: FunctionBuilder, attrs: dict, given: bool, name: str) -> str | None:
    """The output shape as an int64 vector from the input (None: the ``shape``
    attribute's, handled as a constant)."""
    if not given:
        if "shape" not in attrs or attrs.get("extra_shape") or attrs.get("input_as_shape"):
            raise Declined(f"{name} without an input needs the shape attribute (and no "
                           "extra_shape or input_as_shape)")
        return None
    if "shape" in attrs:
        raise Declined(f"{name}: the shape attribute and an input exclude each other")
    shape = b.cast("input", TensorProto.INT64) if attrs.get("input_as_shape") else \
        b.op("Shape", "input")
    extra = list(attrs.get("extra_shape", []))
    if extra:
        shape = b.op("Concat", shape, b.const(np.asarray(extra, np.int64)), axis=0)
    return shape


def build_given_tensor_fill(ctx) -> FunctionProto | None:
    attrs = attributes(ctx, {"values", "shape", "extra_shape", "input_as_shape"})
    given = _present(ctx.node.input, 0)
    types = list(ctx.input_types or [])
    elem = FLOATS.get(types[0]) if given and types else TensorProto.FLOAT
    if elem is None or len(ctx.node.input) > 1:
        raise Declined("an input of a float type (the output's), at most one")
    if given and attrs.get("input_as_shape"):
        elem = TensorProto.FLOAT  # the input holds the shape: the values stay float
    b = FunctionBuilder(ctx.opset, elem_type=elem)
    values = np.asarray(attrs.get("values", []), np.float64)
    shape = _fill_shape(b, attrs, given, "GivenTensorFill")
    if shape is None:
        if values.size != int(np.prod(attrs["shape"])):
            raise Declined(f"{values.size} values for the shape {list(attrs['shape'])}")
        y = b.const(values.reshape(attrs["shape"]), elem)
    else:
        y = b.op("Reshape", b.const(values, elem), shape)
    return b.function(DOMAIN, "given_tensor_fill", ["input"][:len(ctx.node.input)], [y])


def build_constant_fill(ctx) -> FunctionProto | None:
    attrs = attributes(ctx, {"value", "dtype", "shape", "extra_shape", "input_as_shape"})
    dtype = attrs.get("dtype", TensorProto.FLOAT)
    if dtype not in _FILL_TYPES or len(ctx.node.input) > 1:
        raise Declined("dtype float, int32, int64 or bool; at most one input")
    given = _present(ctx.node.input, 0)
    b = FunctionBuilder(ctx.opset)
    np_type = helper.tensor_dtype_to_np_dtype(dtype)
    value = np.asarray(attrs.get("value", 0.0)).astype(np_type)
    shape = _fill_shape(b, attrs, given, "ConstantFill")
    if shape is None:
        y = b.const(np.full(attrs["shape"], value, np_type), dtype)
    else:
        y = filled(b, b.const(value, dtype), shape)
    return b.function(DOMAIN, "constant_fill", ["input"][:len(ctx.node.input)], [y])


# -- oracles (numpy, from the removed schemas' text) -----------------------------------------


def _shape_of(source, shape, extra_shape, input_as_shape) -> list[int]:
    if source is None:
        return list(shape)
    base = [int(v) for v in np.ravel(source)] if input_as_shape else list(source.shape)
    return base + list(extra_shape or [])


def dynamic_slice(data, starts, ends, axes=None):
    axes = range(len(starts)) if axes is None else axes
    index = [slice(None)] * data.ndim
    for axis, start, end in zip(axes, starts, ends):
        index[int(axis)] = slice(int(start), int(end))
    return data[tuple(index)]


def given_tensor_fill(source=None, values=(), shape=(), extra_shape=(), input_as_shape=0):
    dtype = source.dtype if source is not None and not input_as_shape else np.float32
    return np.asarray(values, dtype).reshape(_shape_of(source, shape, extra_shape,
                                                       input_as_shape))


def constant_fill(source=None, value=0.0, dtype=TensorProto.FLOAT, shape=(), extra_shape=(),
                  input_as_shape=0):
    np_type = helper.tensor_dtype_to_np_dtype(dtype)
    return np.full(_shape_of(source, shape, extra_shape, input_as_shape),
                   np.asarray(value).astype(np_type), np_type)


# -- registration ----------------------------------------------------------------------------

_OWN = "rewriter_plugins.onnx_removed.tensors:"


def _bounds(values, type_name: str = "int64") -> Arg:
    return Arg(f"{type_name}[{len(values)}]", values=values, constant=True)


def _dynamic_slice_samples() -> list[OpSample]:
    return [
        OpSample(["T[3,4,5]", _bounds([1, -3]), _bounds([3, 1000]), _bounds([0, 2])],
                 opset=7, name="axes"),
        OpSample(["T[4,6]", _bounds([0, 1], "int32"), _bounds([-1, 1000], "int32")],
                 opset=9, name="no-axes-int32"),
        OpSample(["T[2,5,3]", _bounds([-2]), _bounds([-1]), _bounds([-2])], opset=8,
                 dtypes=["int64", "bool"], oracle=_OWN + "dynamic_slice", name="numpy"),
    ]


def _fill_samples(op: str) -> list[OpSample]:
    if op == "GivenTensorFill":
        values = {"values": [1.5, -2.0, 0.25, 3.0, 7.0, -0.5]}
        return [
            OpSample([], ["float"], {**values, "shape": [2, 3]}, opset=7, name="shape"),
            OpSample(["T[3,1]"], ["T"], {**values, "extra_shape": [2]}, opset=8,
                     name="input-shape"),
            OpSample([Arg("float[2]", values=[3, 2])], ["float"],
                     {**values, "input_as_shape": 1}, opset=9, name="input-as-shape"),
            OpSample([Arg("float[1]", values=[2])], ["float"],
                     {**values, "input_as_shape": 1, "extra_shape": [3]}, opset=7,
                     name="input-as-shape-extra"),
        ]
    return [
        OpSample([], ["float"], {"shape": [2, 3], "value": 1.5}, opset=7, name="shape"),
        OpSample([], ["int64"], {"shape": [4], "value": 7.0, "dtype": TensorProto.INT64},
                 opset=8, name="int64"),
        OpSample(["T[3,2]"], ["bool"], {"extra_shape": [2], "value": 1.0,
                                        "dtype": TensorProto.BOOL}, opset=7,
                 name="input-shape-extra-opset7"),
        OpSample(["T[3,2]"], ["float"], {"value": -4.0}, opset=8, name="input-shape"),
        OpSample([Arg("int64[3]", values=[2, 1, 3])], ["int32"],
                 {"input_as_shape": 1, "value": 3.0, "dtype": TensorProto.INT32}, opset=9,
                 name="input-as-shape"),
    ]


def register(registry) -> None:
    registry.add("", "DynamicSlice", build_dynamic_slice, opsets=REMOVED_OPSETS,
                 dtypes=("float", "int64", "bool"), oracle="onnxruntime",
                 samples=_dynamic_slice_samples(),
                 description="onnx-removed:DynamicSlice (Slice of constant bounds)")
    registry.add("", "GivenTensorFill", build_given_tensor_fill, opsets=REMOVED_OPSETS,
                 dtypes=("float", "double"), oracle=_OWN + "given_tensor_fill",
                 samples=_fill_samples("GivenTensorFill"),
                 description="onnx-removed:GivenTensorFill (Constant or Reshape)")
    registry.add("", "ConstantFill", build_constant_fill, opsets=REMOVED_OPSETS,
                 dtypes=("float",), oracle=_OWN + "constant_fill",
                 samples=_fill_samples("ConstantFill"),
                 description="onnx-removed:ConstantFill (Constant, Expand or Tile)")
