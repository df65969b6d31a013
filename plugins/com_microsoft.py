"""Decompositions ``com-microsoft``: onnxruntime contrib ops (domain ``com.microsoft``) in
standard ONNX, for targets without onnxruntime's contrib kernels (or ops onnxruntime has no
CPU kernel for).

* ``FastGelu(X[, bias])``: the tanh approximation
  ``y = x * (0.5 + 0.5 * tanh(x * (c + b * x * x)))``, ``x = X + bias``, ``c = sqrt(2/pi)``,
  ``b = 0.044715 * c``.
* ``Gelu(X)``: the exact (erf) form ``y = 0.5 * x * (1 + erf(x / sqrt(2)))``.
* ``BiasGelu(A, B)``: ``Gelu(A + B)``.
* ``QuickGelu(X)`` (attribute ``alpha``, default 1.702): ``y = x * sigmoid(alpha * x)``.
* ``SkipLayerNormalization(input, skip, gamma[, beta[, bias]])`` (attribute ``epsilon``,
  default 1e-12): ``s = input + skip (+ bias)``, ``output = LayerNormalization(s, gamma,
  beta, axis=-1, epsilon)``; ``mean`` and ``inv_std_var`` are LayerNormalization's own,
  ``input_skip_bias_sum`` is ``s``.
* ``GemmFastGelu(X, W[, bias])``: ``FastGelu(MatMul(X, W) + bias)``.
* ``NhwcConv(X, W[, B])``: ``Conv`` on ``X`` transposed from channels-last to channels-first
  (``W`` is ``M x C/group x k...`` as for ``Conv``), transposed back; the spatial rank comes
  from ``kernel_shape`` or the constant weight's shape (declines when neither is known).

Every builder picks the body variant the node needs (which optional inputs are present,
which outputs are used) and, when the input's element type is known, folds the ``CastLike``
of each literal into a constant of that type. ``tests/test_com_microsoft.py`` checks each
against onnxruntime's contrib kernels, or numpy where onnxruntime has no CPU kernel.
"""

from __future__ import annotations

from onnx import AttributeProto, FunctionProto, TensorProto, helper, numpy_helper

from rewriter import hookimpl

DOMAIN = "com.microsoft"
# ai.onnx opsets the bodies are valid at: CastLike (15) for the generic-dtype bodies,
# LayerNormalization (17) for SkipLayerNormalization.
GENERIC_OPSETS = (15, None)
SKIPLN_OPSETS = (17, None)
NHWCCONV_OPSETS = (11, None)

QUICKGELU_DEFAULT_ALPHA = 1.702
SKIPLN_DEFAULT_EPSILON = 1e-12  # onnxruntime's kDefaultSkipLayerNormEpsilon

_FLOAT_TYPES = {
    "tensor(float)": TensorProto.FLOAT,
    "tensor(float16)": TensorProto.FLOAT16,
    "tensor(double)": TensorProto.DOUBLE,
    "tensor(bfloat16)": TensorProto.BFLOAT16,
}

_BODIES = None


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

    @script(default_opset=op)
    def gemm_fast_gelu(X, W):
        x = op.MatMul(X, W)
        b = op.CastLike(0.035677408136300125, x)
        c = op.CastLike(0.7978845608028654, x)
        half = op.CastLike(0.5, x)
        inner = op.Mul(x, op.Add(c, op.Mul(b, op.Mul(x, x))))
        return op.Mul(x, op.Add(half, op.Mul(half, op.Tanh(inner))))

    @script(default_opset=op)
    def gemm_fast_gelu_bias(X, W, bias):
        x = op.Add(op.MatMul(X, W), bias)
        b = op.CastLike(0.035677408136300125, x)
        c = op.CastLike(0.7978845608028654, x)
        half = op.CastLike(0.5, x)
        inner = op.Mul(x, op.Add(c, op.Mul(b, op.Mul(x, x))))
        return op.Mul(x, op.Add(half, op.Mul(half, op.Tanh(inner))))

    @script(default_opset=op)
    def gelu(X):
        half = op.CastLike(0.5, X)
        one = op.CastLike(1.0, X)
        inv_sqrt2 = op.CastLike(0.7071067811865476, X)
        return op.Mul(op.Mul(half, X), op.Add(one, op.Erf(op.Mul(X, inv_sqrt2))))

    @script(default_opset=op)
    def bias_gelu(A, B):
        x = op.Add(A, B)
        half = op.CastLike(0.5, x)
        one = op.CastLike(1.0, x)
        inv_sqrt2 = op.CastLike(0.7071067811865476, x)
        return op.Mul(op.Mul(half, x), op.Add(one, op.Erf(op.Mul(x, inv_sqrt2))))

    @script(default_opset=op)
    def quick_gelu(X, alpha: float = 1.702):
        a = op.CastLike(op.Constant(value_float=alpha), X)
        return op.Mul(X, op.Sigmoid(op.Mul(a, X)))

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

    _BODIES = {f.name: f for f in (
        fast_gelu, fast_gelu_bias, gemm_fast_gelu, gemm_fast_gelu_bias, gelu, bias_gelu,
        quick_gelu, skip_layer_norm, skip_layer_norm_beta, skip_layer_norm_bias,
        skip_layer_norm_beta_bias)}
    return _BODIES


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


def _single_output(node) -> bool:
    return len(node.output) == 1 and bool(node.output[0])


def build_fast_gelu(ctx) -> FunctionProto | None:
    node = ctx.node
    if not _present(node.input, 0) or not _single_output(node):
        return None
    fn = _proto("fast_gelu_bias" if _present(node.input, 1) else "fast_gelu")
    return fold_literal_casts(fn, _elem_type(ctx))


def build_gelu(ctx) -> FunctionProto | None:
    node = ctx.node
    if not _present(node.input, 0) or not _single_output(node):
        return None
    return fold_literal_casts(_proto("gelu"), _elem_type(ctx))


def build_bias_gelu(ctx) -> FunctionProto | None:
    node = ctx.node
    if not (_present(node.input, 0) and _present(node.input, 1)) or not _single_output(node):
        return None
    return fold_literal_casts(_proto("bias_gelu"), _elem_type(ctx))


def build_quick_gelu(ctx) -> FunctionProto | None:
    node = ctx.node
    if not _present(node.input, 0) or not _single_output(node):
        return None
    return _proto("quick_gelu")  # alpha stays an attribute (default 1.702)


def build_gemm_fast_gelu(ctx) -> FunctionProto | None:
    node = ctx.node
    if not (_present(node.input, 0) and _present(node.input, 1)) or not _single_output(node):
        return None
    fn = _proto("gemm_fast_gelu_bias" if _present(node.input, 2) else "gemm_fast_gelu")
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


_CONV_ATTRIBUTES = {
    "auto_pad": AttributeProto.STRING,
    "dilations": AttributeProto.INTS,
    "group": AttributeProto.INT,
    "kernel_shape": AttributeProto.INTS,
    "pads": AttributeProto.INTS,
    "strides": AttributeProto.INTS,
}


def _spatial_rank(ctx) -> int | None:
    kernel_shape = ctx.attribute("kernel_shape")
    if kernel_shape:
        return len(kernel_shape)
    weight = ctx.constant(ctx.node.input[1])
    if weight is not None and weight.ndim >= 3:
        return weight.ndim - 2
    for name in ctx.node.input[:2]:
        declared = (ctx.declared or {}).get(name)
        if declared is not None and declared.HasField("tensor_type"):
            tensor_type = declared.tensor_type
            if tensor_type.HasField("shape") and len(tensor_type.shape.dim) >= 3:
                return len(tensor_type.shape.dim) - 2
    return None


def build_nhwc_conv(ctx) -> FunctionProto | None:
    node = ctx.node
    if not (_present(node.input, 0) and _present(node.input, 1)) or not _single_output(node):
        return None
    names = [a.name for a in node.attribute]
    if any(name not in _CONV_ATTRIBUTES for name in names):
        return None  # an attribute this body would not honour
    rank = _spatial_rank(ctx)
    if rank is None:
        return None
    to_first = [0, rank + 1, *range(1, rank + 1)]
    to_last = [0, *range(2, rank + 2), 1]
    inputs = ["X", "W", "B"] if _present(node.input, 2) else ["X", "W"]
    conv = helper.make_node("Conv", ["X_nchw", *inputs[1:]], ["Y_nchw"])
    for name in names:
        ref = AttributeProto()
        ref.name = name
        ref.ref_attr_name = name
        ref.type = _CONV_ATTRIBUTES[name]
        conv.attribute.append(ref)
    body = [
        helper.make_node("Transpose", ["X"], ["X_nchw"], perm=to_first),
        conv,
        helper.make_node("Transpose", ["Y_nchw"], ["Y"], perm=to_last),
    ]
    return helper.make_function(
        DOMAIN, "nhwc_conv", inputs, ["Y"], body,
        [helper.make_opsetid("", max(ctx.opset, NHWCCONV_OPSETS[0]))], attributes=names,
    )


@hookimpl
def register_decompositions(registry):
    def add(op_type, builder, opsets):
        registry.add(DOMAIN, op_type, builder, opsets=opsets,
                     description=f"com-microsoft:{op_type}")

    add("FastGelu", build_fast_gelu, GENERIC_OPSETS)
    add("Gelu", build_gelu, GENERIC_OPSETS)
    add("BiasGelu", build_bias_gelu, GENERIC_OPSETS)
    add("QuickGelu", build_quick_gelu, GENERIC_OPSETS)
    add("SkipLayerNormalization", build_skip_layer_norm, SKIPLN_OPSETS)
    add("GemmFastGelu", build_gemm_fast_gelu, GENERIC_OPSETS)
    add("NhwcConv", build_nhwc_conv, NHWCCONV_OPSETS)

    from rewriter_plugins import com_microsoft_attention

    com_microsoft_attention.register_decompositions(registry)
