"""``Cast`` and ``CastLike`` with their out-of-range values made explicit (part of the
``onnx-standard`` plugin, which registers them).

The spec: a cast to a floating-point type gives +/- infinity for a value out of its range
(infinities included); a cast to a float 8 type with ``saturate`` (the default) gives its
largest finite value instead (+/- ``FLT_MAX``, also for infinities). OpenVINO 2026.4
saturates the casts between float16, float and double (``inf`` came back as
``3.4028235e+38``, measured on the ONNX node cases) and does not saturate those to float 8
(``1e6`` to ``float8e4m3fn`` gave NaN). The body keeps the ``Cast`` for the values in range
and selects the spec's result elsewhere, with comparisons in the source type:

* to float16, float or double: ``Where(hi <= x, +inf, Where(x <= -hi, -inf, Cast(x)))``,
  ``hi`` the least source value that rounds past the target's largest finite value (its
  largest value plus half a unit in the last place, a tie rounding to the even infinity),
  or the source's infinity for a wider target;
* to a float 8 type with ``saturate``: ``Cast(Where(max < x, max, Where(x < -max, -max,
  x)))``, the clamped value rounding to the largest finite value as ``[x]`` does.

NaN compares false, so it is cast as it is; the comparisons are written as ``Less`` and
``LessOrEqual`` only, since OpenVINO 2026.4's ``Greater`` and ``GreaterOrEqual`` hold for a
NaN on either side (measured) while its ``Less`` and ``LessOrEqual`` do not. Other casts
(integers, bool, strings, bfloat16, 4-bit and e8m0 targets, float 8 without ``saturate``)
are declined. Checked against the
reference evaluator's own ``Cast`` (numpy and ml_dtypes, written from the spec)."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper

from rewriter.plugin import Arg, Declined, FunctionBuilder, OpSample

T = TensorProto
_FLOATS = (T.FLOAT16, T.FLOAT, T.DOUBLE)
_FLOAT8 = {T.FLOAT8E4M3FN: 448.0, T.FLOAT8E4M3FNUZ: 240.0, T.FLOAT8E5M2: 57344.0,
           T.FLOAT8E5M2FNUZ: 57344.0}
_INTEGERS = (T.INT8, T.UINT8, T.INT16, T.UINT16, T.INT32, T.UINT32, T.INT64, T.UINT64)
CAST_OPSETS = (13, None)  # Cast of float16/float/double/integers and LessOrEqual (12)


def _elem(type_text: str | None) -> int | None:
    if not type_text or not type_text.startswith("tensor("):
        return None
    return getattr(T, type_text[7:-1].upper(), None)


def _overflow_threshold(source: int, target: int) -> float | None:
    """The least ``source`` value whose cast to the float ``target`` is +infinity; None
    when no finite value is (the target's range holds the source's)."""
    src, dst = helper.tensor_dtype_to_np_dtype(source), helper.tensor_dtype_to_np_dtype(target)
    if dst == np.float64:
        return None
    top = dst.type(np.finfo(dst).max)
    ulp = np.float64(top) - np.float64(np.nextafter(top, dst.type(0)))
    bound = np.float64(top) + ulp / 2  # the midpoint to the next power: a tie goes to inf
    if np.issubdtype(src, np.floating):
        if np.float64(np.finfo(src).max) < bound:
            return None
        value = src.type(bound)  # the nearest source value; the least one not below bound
        if np.float64(value) < bound:
            value = np.nextafter(value, src.type(np.inf))
        return float(value)
    if np.iinfo(src).max < bound:
        return None
    return float(np.ceil(bound))


def build_cast(ctx):
    """The body above for ``Cast(x, to)`` or ``CastLike(x, like)`` of known types."""
    types = list(ctx.input_types or [])
    source = _elem(types[0]) if types else None
    if ctx.node.op_type == "CastLike":
        target = _elem(types[1]) if len(types) > 1 else None
    else:
        target = ctx.attribute("to", None)
    if source not in _FLOATS + _INTEGERS or target is None:
        raise Declined("needs a float16, float, double or integer input and a known target "
                       "type")
    b = FunctionBuilder(ctx.opset)
    inputs = ["x", "like"] if ctx.node.op_type == "CastLike" else ["x"]
    src = helper.tensor_dtype_to_np_dtype(source)

    def const(value, elem=source, dtype=src):
        return b.const(np.array(value, dtype), elem)

    if target in _FLOAT8:
        if source not in _FLOATS:
            raise Declined("casts to float 8 from integers keep the runtime's Cast")
        if not ctx.attribute("saturate", 1):
            raise Declined("saturate=0: the runtime's Cast already gives NaN/inf out of "
                           "range (not rewritten)")
        top = _FLOAT8[target]
        clamped = b.op("Where", b.op("Less", const(top), "x"), const(top),
                       b.op("Where", b.op("Less", "x", const(-top)), const(-top), "x"))
        y = b.op("Cast", clamped, to=target, saturate=1)
        return b.function("onnx_standard", ctx.node.op_type, inputs, [y])
    if target not in _FLOATS:
        raise Declined(f"casts to {helper.tensor_dtype_to_np_dtype(target) if target else '?'}"
                       " keep the runtime's Cast (only float targets have a spec'd "
                       "out-of-range value)")
    hi = _overflow_threshold(source, target)
    if hi is None and source not in _FLOATS:
        raise Declined("no integer value is out of range of the target type: the body would "
                       "be the Cast itself")
    if hi is None:
        hi = float("inf")
    dst = helper.tensor_dtype_to_np_dtype(target)
    y = b.op("Cast", "x", to=target)
    low = const(-hi) if np.issubdtype(src, np.floating) or hi <= -np.iinfo(src).min else None
    z = y
    if low is not None:
        z = b.op("Where", b.op("LessOrEqual", "x", low), const(-np.inf, target, dst), z)
    z = b.op("Where", b.op("LessOrEqual", const(hi), "x"), const(np.inf, target, dst), z)
    return b.function("onnx_standard", ctx.node.op_type, inputs, [z])


def cast_samples(like: bool = False) -> list[OpSample]:
    """Every float pair and float 8 target (``like``: CastLike's, float targets), with
    infinities, NaN, values past the target's range and near its rounding threshold,
    subnormals and signed zeros."""
    samples = []
    special = [np.inf, -np.inf, np.nan, 0.0, -0.0, 1.5, -2.25, 1e-8]
    names = {T.FLOAT16: "float16", T.FLOAT: "float", T.DOUBLE: "double"}
    for source in _FLOATS:
        src = helper.tensor_dtype_to_np_dtype(source)
        for target in _FLOATS + tuple(_FLOAT8):
            if target == source or (like and target in _FLOAT8):
                continue
            values = list(special)
            if target in _FLOAT8:
                top = _FLOAT8[target]
                values += [top, -top, top * 1.01, -top * 1.5, 1e4 if source == T.FLOAT16
                           else 1e6, 0.3, -0.7, 100.0]
            else:
                hi = _overflow_threshold(source, target)
                if hi is not None:
                    # between the target's largest value and hi (not the source value
                    # next to hi: onnxruntime 1.32 casts double to float16 through float,
                    # rounding twice, 65519.99999999999 to inf)
                    top = float(np.finfo(helper.tensor_dtype_to_np_dtype(target)).max)
                    below = src.type((top + hi) / 2)
                    values += [hi, -hi, float(below), -float(below), float(np.finfo(src).max),
                               -float(np.finfo(src).max), 0.1, 3.0]
                else:
                    values += [float(np.finfo(src).max), float(np.finfo(src).tiny), 0.1,
                               -1e3, 7.0, 2.0, -3.5, 0.25]
            target_name = helper.tensor_dtype_to_np_dtype(target).name if target in _FLOATS \
                else helper.tensor_dtype_to_string(target).split(".")[-1].lower()
            kind = names[source]
            biggest = float(np.finfo(src).max)  # past it: the infinities already there
            values = [v for v in values if not np.isfinite(v) or abs(v) <= biggest]
            values += [0.5] * (16 - len(values))
            inputs = [Arg(f"{kind}[16]", values=np.array(values, src))]
            if like:
                inputs.append(Arg(f"{names[target]}[1]"))
            samples.append(OpSample(
                inputs, [target_name if target not in _FLOATS else names[target]],
                {} if like else {"to": target}, opset=21, dtypes=[kind],
                tolerance=(0.0, 0.0), name=f"{kind}-to-{target_name}"))
    return samples


CASTLIKE_OPSET = 15  # CastLike


def build_cast_as_castlike(ctx):
    """``Cast(x, to)`` as ``CastLike(x, like)``, ``like`` an empty constant of type ``to``
    (and ``saturate`` kept): the same cast, which tract 0.23 types as its datum type where
    its ``Cast`` to int64 gives a shape (``TDim``) its API cannot hand out."""
    to = ctx.attribute("to", None)
    if to is None:
        raise Declined("a Cast without 'to'")
    if ctx.opset < CASTLIKE_OPSET:
        raise Declined(f"CastLike needs ai.onnx opset {CASTLIKE_OPSET}; the model imports "
                       f"{ctx.opset}", needs_opset=CASTLIKE_OPSET)
    b = FunctionBuilder(ctx.opset)
    like = b.op("Constant", outputs=[b.fresh("like")],
                value=helper.make_tensor("like", to, [0], []))
    saturate = ctx.attribute("saturate", None) if ctx.opset >= 19 else None
    y = b.op("CastLike", "x", like, saturate=saturate)
    return b.function("onnx_standard", "Cast", ["x"], [y])


def cast_as_castlike_samples() -> list[OpSample]:
    """float to int64 (truncation toward zero, negatives), int32 to int64 and to float."""
    values = np.array([1.5, -2.7, 0.0, 3.9, -0.2, 7.0, 100.25, -64.5], np.float32)
    return [
        OpSample([Arg("float[8]", values=values)], ["int64"], {"to": T.INT64}, opset=15,
                 name="float-to-int64"),
        OpSample([Arg("int32[2, 3]")], ["int64"], {"to": T.INT64}, opset=17,
                 name="int32-to-int64"),
        OpSample([Arg("int64[4]")], ["float"], {"to": T.FLOAT}, opset=21,
                 name="int64-to-float"),
    ]
