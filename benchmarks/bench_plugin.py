"""Decompositions for the custom ops ``benchmarks/generate.py`` puts into its models.

A real plugin (load it with ``-p benchmarks/bench_plugin.py`` or
``load_plugins(["benchmarks/bench_plugin.py"])``), with the bodies written in onnxscript:

* ``com.microsoft::FastGelu(X[, bias])`` - onnxruntime's contrib op: the tanh approximation
  ``y = x * (0.5 + 0.5 * tanh(x * (c + b * x * x)))`` with ``x = X + bias``,
  ``c = sqrt(2/pi)``, ``b = 0.044715 * c``.
* ``com.microsoft::SkipLayerNormalization(input, skip, gamma[, beta[, bias]])`` with
  attribute ``epsilon`` (default 1e-12, as in onnxruntime): ``s = input + skip (+ bias)``,
  ``output = LayerNormalization(s, gamma, beta, axis=-1, epsilon)``; the optional outputs
  ``mean`` and ``inv_std_var`` are LayerNormalization's own, ``input_skip_bias_sum`` is ``s``.
* ``com.acme::FusedSwish(X)`` (a made-up op; attribute ``alpha``, default 1):
  ``y = x * sigmoid(alpha * x)``.

Each builder picks the body variant the node needs (bias or not, which outputs are used)
and, when the input's element type is known, folds the ``CastLike`` of every literal into a
constant of that type, so a call site inlines to the fewest nodes (FastGelu with bias: 12).
``tests/test_bench_plugin.py`` checks every variant against onnxruntime's contrib kernels
(FastGelu, SkipLayerNormalization) and numpy (FusedSwish).
"""

from __future__ import annotations

from onnx import FunctionProto, TensorProto, helper, numpy_helper

from rewriter import hookimpl

# ai.onnx opsets the bodies are valid at: CastLike (15) for the generic-dtype bodies,
# LayerNormalization (17) for SkipLayerNormalization.
FASTGELU_OPSETS = (15, None)
SKIPLN_OPSETS = (17, None)
SWISH_OPSETS = (15, None)

_SQRT_2_OVER_PI = 0.7978845608028654
_GELU_B = 0.044715 * _SQRT_2_OVER_PI
SKIPLN_DEFAULT_EPSILON = 1e-12  # onnxruntime's kDefaultSkipLayerNormEpsilon

_FLOAT_TYPES = {
    "tensor(float)": TensorProto.FLOAT,
    "tensor(float16)": TensorProto.FLOAT16,
    "tensor(double)": TensorProto.DOUBLE,
    "tensor(bfloat16)": TensorProto.BFLOAT16,
}


def _bodies():
    """The onnxscript functions (built on first use: importing onnxscript takes a while)."""
    global _BODIES
    if _BODIES is not None:
        return _BODIES
    from onnxscript import opset17 as op
    from onnxscript import script

    @script(default_opset=op)
    def fast_gelu(X):
        b = op.CastLike(0.035677408136300125, X)
        c = op.CastLike(0.7978845608028654, X)
        half = op.CastLike(0.5, X)
        inner = op.Mul(X, op.Add(c, op.Mul(b, op.Mul(X, X))))
        return op.Mul(X, op.Add(half, op.Mul(half, op.Tanh(inner))))

    @script(default_opset=op)
    def fast_gelu_bias(X, bias):
        x = op.Add(X, bias)
        b = op.CastLike(0.035677408136300125, x)
        c = op.CastLike(0.7978845608028654, x)
        half = op.CastLike(0.5, x)
        inner = op.Mul(x, op.Add(c, op.Mul(b, op.Mul(x, x))))
        return op.Mul(x, op.Add(half, op.Mul(half, op.Tanh(inner))))

    # Every variant takes all five inputs, so a node's inputs bind by position whichever
    # optional ones it leaves out; an absent one is never read. (An absent beta is not passed
    # on as "" to LayerNormalization: onnxruntime 1.32's CPU kernel crashes on that.)
    @script(default_opset=op)
    def skip_layer_norm(input, skip, gamma, beta, bias, epsilon: float = 1e-12):
        s = op.Add(input, skip)
        y, mean, inv_std_var = op.LayerNormalization(s, gamma, axis=-1, epsilon=epsilon)
        return y, mean, inv_std_var, s

    @script(default_opset=op)
    def skip_layer_norm_beta(input, skip, gamma, beta, bias, epsilon: float = 1e-12):
        s = op.Add(input, skip)
        y, mean, inv_std_var = op.LayerNormalization(s, gamma, beta, axis=-1, epsilon=epsilon)
        return y, mean, inv_std_var, s

    @script(default_opset=op)
    def skip_layer_norm_bias(input, skip, gamma, beta, bias, epsilon: float = 1e-12):
        s = op.Add(op.Add(input, skip), bias)
        y, mean, inv_std_var = op.LayerNormalization(s, gamma, axis=-1, epsilon=epsilon)
        return y, mean, inv_std_var, s

    @script(default_opset=op)
    def skip_layer_norm_beta_bias(input, skip, gamma, beta, bias, epsilon: float = 1e-12):
        s = op.Add(op.Add(input, skip), bias)
        y, mean, inv_std_var = op.LayerNormalization(s, gamma, beta, axis=-1, epsilon=epsilon)
        return y, mean, inv_std_var, s

    @script(default_opset=op)
    def fused_swish(X):
        return op.Mul(X, op.Sigmoid(X))

    @script(default_opset=op)
    def fused_swish_alpha(X, alpha: float = 1.0):
        a = op.CastLike(op.Constant(value_float=alpha), X)
        return op.Mul(X, op.Sigmoid(op.Mul(a, X)))

    _BODIES = {f.name: f for f in (fast_gelu, fast_gelu_bias, skip_layer_norm,
                                   skip_layer_norm_beta, skip_layer_norm_bias,
                                   skip_layer_norm_beta_bias, fused_swish, fused_swish_alpha)}
    return _BODIES


_BODIES = None


def _present(names, index: int) -> bool:
    return len(names) > index and bool(names[index])


def fold_literal_casts(fn: FunctionProto, elem_type: int | None) -> FunctionProto:
    """Replace ``CastLike(Constant(value=literal), x)`` by a ``Constant`` of ``elem_type``
    (the known element type of ``x``) and drop constants nothing reads any more. Constants
    whose value is a reference attribute (``value_float = @alpha``) are left alone."""
    if elem_type is None:
        return fn
    literals = {}
    for node in fn.node:
        if (node.op_type == "Constant" and node.domain in ("", "ai.onnx")
                and len(node.attribute) == 1):
            attr = node.attribute[0]
            if attr.name == "value" and not attr.ref_attr_name:
                literals[node.output[0]] = numpy_helper.to_array(attr.t)
    if not literals:
        return fn
    dtype = helper.tensor_dtype_to_np_dtype(elem_type)
    new_nodes = []
    for node in fn.node:
        if (node.op_type == "CastLike" and node.domain in ("", "ai.onnx")
                and node.input[0] in literals):
            value = literals[node.input[0]].astype(dtype)
            tensor = numpy_helper.from_array(value, node.output[0])
            if elem_type == TensorProto.BFLOAT16:
                tensor = helper.make_tensor(node.output[0], elem_type, value.shape,
                                            value.astype("float32").ravel().tolist())
            new_nodes.append(helper.make_node("Constant", [], list(node.output), value=tensor))
        else:
            new_nodes.append(node)
    used = {name for node in new_nodes for name in node.input} | set(fn.output)
    kept = [n for n in new_nodes
            if not (n.op_type == "Constant" and n.output[0] in literals
                    and n.output[0] not in used)]
    out = FunctionProto()
    out.CopyFrom(fn)
    del out.node[:]
    out.node.extend(kept)
    return out


def _trim_outputs(fn: FunctionProto, used: list[bool]) -> FunctionProto:
    """Drop trailing function outputs the call site does not use, and stop computing
    optional node outputs nothing reads any more."""
    keep = max((i for i, u in enumerate(used) if u), default=0) + 1
    out = FunctionProto()
    out.CopyFrom(fn)
    del out.output[keep:]
    needed = set(out.output) | {name for n in out.node for name in n.input}
    for node in out.node:
        for i in range(1, len(node.output)):
            if node.output[i] not in needed:
                node.output[i] = ""
        while len(node.output) > 1 and not node.output[-1]:
            del node.output[-1]
    return out


def _elem_type(ctx) -> int | None:
    types = list(ctx.input_types or [])
    return _FLOAT_TYPES.get(types[0]) if types and types[0] else None


def _proto(name: str) -> FunctionProto:
    return _bodies()[name].to_function_proto()


def build_fast_gelu(ctx) -> FunctionProto | None:
    node = ctx.node
    if not _present(node.input, 0) or len(node.output) != 1 or not node.output[0]:
        return None
    fn = _proto("fast_gelu_bias" if _present(node.input, 1) else "fast_gelu")
    return fold_literal_casts(fn, _elem_type(ctx))


def build_skip_layer_norm(ctx) -> FunctionProto | None:
    node = ctx.node
    if not all(_present(node.input, i) for i in range(3)) or not _present(node.output, 0):
        return None
    name = "skip_layer_norm"
    if _present(node.input, 3):
        name += "_beta"
    if _present(node.input, 4):
        name += "_bias"
    fn = _proto(name)
    return _trim_outputs(fn, [_present(node.output, i) for i in range(4)])


def build_fused_swish(ctx) -> FunctionProto | None:
    node = ctx.node
    if not _present(node.input, 0) or len(node.output) != 1:
        return None
    alpha = ctx.attribute("alpha", 1.0)
    if alpha == 1.0:
        return _proto("fused_swish")
    return fold_literal_casts(_proto("fused_swish_alpha"), _elem_type(ctx))


@hookimpl
def register_decompositions(registry):
    registry.add("com.microsoft", "FastGelu", build_fast_gelu, opsets=FASTGELU_OPSETS,
                 description="bench:FastGelu (tanh approximation)")
    registry.add("com.microsoft", "SkipLayerNormalization", build_skip_layer_norm,
                 opsets=SKIPLN_OPSETS, description="bench:SkipLayerNormalization")
    registry.add("com.acme", "FusedSwish", build_fused_swish, opsets=SWISH_OPSETS,
                 description="bench:FusedSwish")
