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
* ``com.acme::FusedSwish(X)`` (a made-up op; attribute ``alpha``, default 1; its numpy
  kernel ``rewriter_custom_ops.fused_swish`` is registered too, the oracle of a rewrite):
  ``y = x * sigmoid(alpha * x)``.

The FastGelu and SkipLayerNormalization builders are the built-in ``com-microsoft`` plugin's
(``plugins/com_microsoft/``), registered here again under ``bench:`` rules (a file plugin
is asked before the built-ins). Each builder picks the body variant the node needs (bias or
not, which outputs are used) and, when the input's element type is known, folds the
``CastLike`` of every literal into a constant of that type, so a call site inlines to the
fewest nodes (FastGelu with bias: 12).
``tests/test_bench_plugin.py`` checks every variant against onnxruntime's contrib kernels
(FastGelu, SkipLayerNormalization) and numpy (FusedSwish).
"""

from __future__ import annotations

from onnx import FunctionProto
from rewriter_plugins import com_microsoft
from rewriter_plugins.com_microsoft import (  # noqa: F401 - re-exported for the benchmarks
    SKIPLN_DEFAULT_EPSILON,
    SKIPLN_OPSETS,
    build_fast_gelu,
    build_skip_layer_norm,
    fold_literal_casts,
)
from rewriter_plugins.com_microsoft.common import input_elem_type as _elem_type

from rewriter import hookimpl
from rewriter.plugin import present as _present

# ai.onnx opsets the bodies are valid at: CastLike (15) for the generic-dtype bodies,
# LayerNormalization (17) for SkipLayerNormalization.
GENERIC_OPSETS = getattr(com_microsoft, "ELEMENTWISE_OPSETS", None) or (15, None)
FASTGELU_OPSETS = GENERIC_OPSETS
SWISH_OPSETS = (15, None)

_SQRT_2_OVER_PI = 0.7978845608028654
_GELU_B = 0.044715 * _SQRT_2_OVER_PI


def _bodies():
    """The onnxscript functions (built on first use: importing onnxscript takes a while)."""
    global _BODIES
    if _BODIES is not None:
        return _BODIES
    from onnxscript import opset17 as op
    from onnxscript import script

    @script(default_opset=op)
    def fused_swish(X):
        return op.Mul(X, op.Sigmoid(X))

    @script(default_opset=op)
    def fused_swish_alpha(X, alpha: float = 1.0):
        a = op.CastLike(op.Constant(value_float=alpha), X)
        return op.Mul(X, op.Sigmoid(op.Mul(a, X)))

    _BODIES = {f.name: f for f in (fused_swish, fused_swish_alpha)}
    return _BODIES


_BODIES = None


def _proto(name: str) -> FunctionProto:
    return _bodies()[name].to_function_proto()


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


@hookimpl
def register_kernels(registry):
    # the oracle for com.acme::FusedSwish: the numpy kernel onnxruntime runs the original with
    registry.add("com.acme", "FusedSwish", "rewriter_custom_ops.fused_swish:kernel",
                 description="FusedSwish (numpy)")
