"""Normalizations of com.microsoft (and onnxruntime's ai.onnx registrations of two), in
standard ONNX (``s = input + skip (+ bias)``, statistics over the last axis, in float32 for
float16/bfloat16 inputs as onnxruntime does):

* ``SkipLayerNormalization(input, skip, gamma[, beta[, bias]])`` (``epsilon`` = 1e-12):
  ``y = (s - mean) / sqrt(var + eps) * gamma + beta``; outputs ``y, mean, inv_std_var, s``.
  ``LayerNormalization`` at opset >= 17, the formula below that.
* ``SkipSimplifiedLayerNormalization(input, skip, gamma[, bias])`` (``epsilon`` = 1e-12):
  RMS norm ``y = s / sqrt(mean(s^2) + eps) * gamma``; outputs ``y, mean, inv_std_var, s``,
  ``mean`` all zeros (no centring: onnxruntime's kernel writes 0 there).
* ``LayerNormalization(X, Scale[, B])`` in the ai.onnx domain at opsets below 17
  (onnxruntime's own registration, versions 1-16, which no other runtime has; ``axis`` =
  -1, ``epsilon`` = 1e-5, ``stash_type`` = 1): ``Y = (X - mean) / sqrt(var + eps) * Scale
  + B`` over axes ``axis..``, statistics in float32 for float16/bfloat16; outputs ``Y,
  Mean, InvStdDev`` (float). A non-negative ``axis`` needs the input's rank (declared).
* ``SimplifiedLayerNormalization(X, scale)`` (ai.onnx and com.microsoft domains; ``axis`` =
  -1, ``epsilon`` = 1e-5, ``stash_type`` = 1): RMS norm over axes ``axis..``; outputs
  ``Y, inv_std_var``.
"""

from __future__ import annotations

from collections.abc import Sequence

from onnx import FunctionProto, TensorProto

from rewriter.plugin import Declined, declining
from rewriter.plugin import present as _present

from .common import (
    DOMAIN,
    F32_F16,
    LOW_PRECISION,
    Body,
    add,
    body_opset,
    formal_inputs,
    input_elem_type,
    onnxruntime_node,
    sample,
    shared_elem_type,
    trim_outputs,
    unknown_attributes,
)

SKIPLN_OPSETS = (9, None)  # LayerNormalization itself at >= 17
NORM_OPSETS = (9, None)
LAYER_NORM_BEFORE_17_OPSETS = (7, 16)  # ai.onnx LayerNormalization is standard from 17

SKIPLN_DEFAULT_EPSILON = 1e-12  # onnxruntime's kDefaultSkipLayerNormEpsilon
SIMPLIFIED_LN_DEFAULT_EPSILON = 1e-5


def _stash(b: Body, x: str, elem_type: int | None) -> str:
    """``x`` in float32 when it is float16/bfloat16 (statistics are computed in float)."""
    return b.cast(x, TensorProto.FLOAT) if elem_type in LOW_PRECISION else x


def _rms_inverse(b: Body, s: str, axes: Sequence[int], epsilon: float) -> str:
    """``1 / sqrt(mean(s^2 over axes) + epsilon)``, keepdims."""
    mean_square = b.reduce("ReduceMean", b.op("Mul", s, s), axes)
    return b.op("Reciprocal", b.op("Sqrt", b.op("Add", mean_square, b.literal(epsilon, s))))


def _skip_sum(b: Body, node, bias_index: int) -> str:
    s = b.op("Add", "input", "skip")
    return b.op("Add", s, "bias") if _present(node.input, bias_index) else s


def _skip_norm_body(ctx, name: str, formal: Sequence[str], bias_index: int,
                    simplified: bool) -> FunctionProto | None:
    node = ctx.node
    if (not all(_present(node.input, i) for i in range(3)) or not _present(node.output, 0)
            or unknown_attributes(node, ["epsilon"])):
        raise Declined("needs input, skip and gamma, the first output, only epsilon")
    elem = shared_elem_type(ctx, 0, 1, 2)
    epsilon = ctx.attribute("epsilon", SKIPLN_DEFAULT_EPSILON)
    b = Body(body_opset(ctx), elem)
    s = _skip_sum(b, node, bias_index)
    has_beta = not simplified and _present(node.input, 3)
    if not simplified and b.opset >= 17:
        extra = ["beta"] if has_beta else []  # an absent beta is not passed on as ""
        y, mean, inv_std_var = b.op("LayerNormalization", s, "gamma", *extra, outputs=3,
                                    axis=-1, epsilon=epsilon)
    else:
        if elem is None and b.opset < 15:
            raise Declined("element type unknown")
        s32 = _stash(b, s, elem)
        b.elem_type = TensorProto.FLOAT if elem in LOW_PRECISION else elem  # for epsilon
        if simplified:
            centered, mean = s32, ""
        else:
            mean = b.reduce("ReduceMean", s32, [-1])
            centered = b.op("Sub", s32, mean)
        inv_std_var = _rms_inverse(b, centered, [-1], epsilon)
        normalized = b.op("Mul", centered, inv_std_var)
        b.elem_type = elem
        if elem in LOW_PRECISION:
            normalized = b.cast(normalized, elem)
        y = b.op("Mul", normalized, "gamma")
        if has_beta:
            y = b.op("Add", y, "beta")
        if elem == TensorProto.DOUBLE:  # the statistics outputs are float (type U)
            mean = mean and b.cast(mean, TensorProto.FLOAT)
            inv_std_var = b.cast(inv_std_var, TensorProto.FLOAT)
        if simplified and _present(node.output, 1):
            # no centring: onnxruntime writes a mean of 0 (skip_layer_norm.cc)
            mean = b.fill(b.op("Shape", inv_std_var), 0.0, TensorProto.FLOAT)
    outputs = [y, mean or inv_std_var, inv_std_var, s]
    fn = b.function(DOMAIN, name, formal_inputs(node, formal), outputs)
    return trim_outputs(fn, [_present(node.output, i) for i in range(4)])


@declining
def build_skip_layer_norm(ctx) -> FunctionProto | None:
    return _skip_norm_body(ctx, "skip_layer_norm",
                           ["input", "skip", "gamma", "beta", "bias"], 4, simplified=False)


@declining
def build_skip_simplified_layer_norm(ctx) -> FunctionProto | None:
    return _skip_norm_body(ctx, "skip_simplified_layer_norm",
                           ["input", "skip", "gamma", "bias"], 3, simplified=True)


@declining
def build_layer_norm_before_17(ctx) -> FunctionProto | None:
    """onnxruntime's ai.onnx ``LayerNormalization`` (versions 1-16), in ops of the model's
    opset."""
    node = ctx.node
    if (not (_present(node.input, 0) and _present(node.input, 1)) or not _present(node.output, 0)
            or unknown_attributes(node, ["axis", "epsilon", "stash_type"])):
        raise Declined("needs X and Scale, the first output, only axis, epsilon and stash_type")
    axis = ctx.attribute("axis", -1)
    if axis >= 0:
        rank = _declared_rank(ctx, node.input[0])
        if rank is None or axis >= rank:
            raise Declined("a non-negative axis needs the input's rank, which is not declared")
        axis -= rank
    elem = shared_elem_type(ctx, 0, 1)
    if elem is None:
        raise Declined("the element type of X and Scale is unknown")
    stash = ctx.attribute("stash_type", 1) == 1 and elem in LOW_PRECISION
    b = Body(body_opset(ctx), TensorProto.FLOAT if stash else elem)
    x = b.cast("X", TensorProto.FLOAT) if stash else "X"
    axes = list(range(axis, 0))
    mean = b.reduce("ReduceMean", x, axes)
    centered = b.op("Sub", x, mean)
    inv_std_dev = _rms_inverse(b, centered, axes, ctx.attribute("epsilon", 1e-5))
    normalized = b.op("Mul", centered, inv_std_dev)
    if stash:
        normalized = b.cast(normalized, elem)
    y = b.op("Mul", normalized, "Scale")
    if _present(node.input, 2):
        y = b.op("Add", y, "B")
    if elem != TensorProto.FLOAT and not stash:  # Mean and InvStdDev are float (type U)
        mean, inv_std_dev = b.cast(mean, TensorProto.FLOAT), b.cast(inv_std_dev,
                                                                    TensorProto.FLOAT)
    fn = b.function(DOMAIN, "layer_norm_before_17", formal_inputs(node, ["X", "Scale", "B"]),
                    [y, mean, inv_std_dev])
    return trim_outputs(fn, [_present(node.output, i) for i in range(3)])


def _declared_rank(ctx, name: str) -> int | None:
    """The rank of ``name`` from a constant's or the model's declared shape, if known."""
    constant = ctx.constant(name)
    if constant is not None:
        return constant.ndim
    declared = (ctx.declared or {}).get(name)
    if declared is not None and declared.HasField("tensor_type") and declared.tensor_type.HasField(
            "shape"):
        return len(declared.tensor_type.shape.dim)
    return None


@declining
def build_simplified_layer_norm(ctx) -> FunctionProto | None:
    node = ctx.node
    if (not (_present(node.input, 0) and _present(node.input, 1)) or not _present(node.output, 0)
            or unknown_attributes(node, ["axis", "epsilon", "stash_type"])):
        raise Declined("needs X and Scale, the first output, only axis, epsilon and stash_type")
    axis = ctx.attribute("axis", -1)
    if axis >= 0:
        raise Declined("a non-negative axis needs the input's rank, which is not known here")
    elem, scale_elem = input_elem_type(ctx, 0), input_elem_type(ctx, 1)
    stash = ctx.attribute("stash_type", 1) == 1 and elem in LOW_PRECISION
    b = Body(body_opset(ctx), TensorProto.FLOAT if stash else elem)
    x = b.cast("X", TensorProto.FLOAT) if stash else "X"
    inv_std_var = _rms_inverse(b, x, list(range(axis, 0)),
                               ctx.attribute("epsilon", SIMPLIFIED_LN_DEFAULT_EPSILON))
    normalized = b.op("Mul", x, inv_std_var)
    if scale_elem is not None and scale_elem != (TensorProto.FLOAT if stash else elem):
        normalized = b.cast(normalized, scale_elem)
    elif scale_elem is None:
        if b.opset < 15:
            raise Declined("scale type unknown")
        normalized = b.op("CastLike", normalized, "scale")
    y = b.op("Mul", normalized, "scale")
    fn = b.function(DOMAIN, "simplified_layer_norm", ["X", "scale"], [y, inv_std_var])
    return trim_outputs(fn, [_present(node.output, i) for i in range(2)])


def simplified_layer_norm_reference(x, scale, **attributes):
    """``com.microsoft::SimplifiedLayerNormalization``: onnxruntime's own kernel, which it
    registers in the ai.onnx domain (``Y``, ``inv_std_var``)."""
    return tuple(onnxruntime_node("SimplifiedLayerNormalization", "", [x, scale], 2,
                                   **attributes))


_ORACLE = f"{__name__}:"

# min_onnxruntime of the samples older onnxruntime kernels compute otherwise (found on
# 1.21.0, 1.23.2, 1.30.0 and 1.32.0; releases between them were not available to check)
_SKIP_LN_STATISTICS = (
    "1.30", "onnxruntime's CPU SkipLayerNormalization kernels of 1.21.0 and 1.23.2 give no "
    "mean / inv_std_var outputs (None); 1.30.0 and 1.32.0 compute them")
_LAYER_NORM_DOUBLE = (
    "1.30", "onnxruntime 1.21.0 and 1.23.2 compute a double LayerNormalization with float "
    "intermediates: up to 3.5e-7 from the float64 result (1.32.0: 3e-13)")


def _oracles() -> dict[str, dict]:
    """Per op: its oracle and the samples it is checked on (``tests/test_oracles.py``)."""
    ort, f32, f16 = "onnxruntime", ["float"], ["float16"]

    def skip_ln(names, outputs, epsilon=1e-5, **kw):
        shapes = {"input": "T[2,3,16]", "skip": "T[2,3,16]", "gamma": "T[16]",
                  "beta": "T[16]", "bias": "T[16]"}
        if any(outputs[1:3]):  # mean / inv_std_var
            kw["min_onnxruntime"] = _SKIP_LN_STATISTICS
        return sample(*[shapes[n] if n else None for n in names], outputs=outputs,
                      attributes={} if epsilon is None else {"epsilon": epsilon}, **kw)

    return {
        "SkipLayerNormalization": dict(oracle=ort, samples=[
            skip_ln(["input", "skip", "gamma"], ["T"], None, dtypes=f32, name="plain"),
            skip_ln(["input", "skip", "gamma", "beta"], ["T"], name="beta"),
            skip_ln(["input", "skip", "gamma", None, "bias"], ["T", "float", "float", "T"],
                    dtypes=f32, name="bias-4-outputs"),
            *[skip_ln(["input", "skip", "gamma", "beta", "bias"], ["T", "float", "float", "T"]
                      if opset != 12 else ["T", None, None, "T"], dtypes=f32 if opset != 12
                      else None, opset=opset, name="all")
              for opset in (12, 13, 17)]]),
        "SkipSimplifiedLayerNormalization": dict(oracle=ort, samples=[
            skip_ln(["input", "skip", "gamma"], ["T"], None, opset=13, name="plain"),
            skip_ln(["input", "skip", "gamma", "bias"], ["T"], opset=13, name="bias"),
            skip_ln(["input", "skip", "gamma", "bias"], ["T", None, "float", "T"], opset=13,
                    dtypes=f32, name="bias-3-outputs"),
            *[skip_ln(["input", "skip", "gamma", *bias], ["T", "float", "float", "T"],
                      opset=opset, name="4-outputs" + ("-bias" if bias else ""))
              for bias, opset in (([], 13), (["bias"], 17))]]),
        "LayerNormalization": dict(oracle=ort, samples=[
            *[sample("T[2,5,8]", "T[8]", "T[8]", outputs=["T", "float", "float"], opset=12,
                     attributes=dict(epsilon=1e-5), dtypes=types, min_onnxruntime=needs)
              for types, needs in ((("float", "float16"), None),
                                   (("double",), _LAYER_NORM_DOUBLE))],
            sample("T[2,5,8]", "T[5,8]", outputs=["T"], opset=16, name="axis-2",
                   attributes=dict(axis=-2, epsilon=1e-3)),
            sample("T[2,5,8]", "T[8]", "T[8]", outputs=["T", None, "float"], opset=9,
                   attributes=dict(axis=2), dtypes=f32, name="axis2"),
            sample("T[3,8]", "T[8]", outputs=["T"], opset=13, dtypes=f32, name="default")]),
        "SimplifiedLayerNormalization": dict(samples=[
            sample("T[2,5,8]", "T[8]", outputs=["T", "float"], dtypes=f32, opset=13,
                   attributes=dict(axis=-1, epsilon=1e-5)),
            sample("T[2,5,8]", "T[5,8]", outputs=["T", "float"], dtypes=f32, opset=18,
                   attributes=dict(axis=-2, epsilon=1e-5), name="axis-2"),
            sample("T[2,5,8]", "T[8]", dtypes=f16, opset=17,
                   attributes=dict(axis=-1, epsilon=1e-5))]),
    }


def _add(registry, op_type, builder, opsets, oracles, dtypes=F32_F16, note="", domain=DOMAIN):
    checked = dict(oracles[op_type])
    if op_type == "SimplifiedLayerNormalization":  # onnxruntime's kernel is ai.onnx's
        checked["oracle"] = ("onnxruntime" if domain == ""
                             else _ORACLE + "simplified_layer_norm_reference")
    add(registry, op_type, builder, opsets, checked, dtypes=dtypes, note=note, domain=domain)


def register(registry) -> None:
    """Registers this module's decompositions (called by the package's hook)."""
    checked = _oracles()
    _add(registry, "SkipLayerNormalization", build_skip_layer_norm, SKIPLN_OPSETS, checked)
    _add(registry, "SkipSimplifiedLayerNormalization", build_skip_simplified_layer_norm,
         NORM_OPSETS, checked)
    _add(registry, "SimplifiedLayerNormalization", build_simplified_layer_norm, NORM_OPSETS,
         checked, domain="", note="negative axis only")
    _add(registry, "LayerNormalization", build_layer_norm_before_17, LAYER_NORM_BEFORE_17_OPSETS,
         checked, dtypes=("float", "float16", "double"), domain="",
         note="onnxruntime's ai.onnx op below opset 17")
    _add(registry, "SimplifiedLayerNormalization", build_simplified_layer_norm, NORM_OPSETS,
         checked, note="negative axis only")
