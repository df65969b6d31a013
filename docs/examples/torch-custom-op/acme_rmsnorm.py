"""Plugin: decompose ``com.acme::FusedRMSNorm`` (a fused kernel PyTorch exports as one op)
into standard ONNX operators, so onnxruntime can run the model.

Load it for one run with ``-p acme_rmsnorm.py`` (or ``load_plugins(["acme_rmsnorm.py"])``),
or publish it under the ``onnx_rewriter`` entry-point group.
"""

from onnx import parser

from rewriter.plugin import hookimpl

# y = x / sqrt(mean(x * x, last axis) + epsilon) * weight
FUSED_RMS_NORM = parser.parse_function("""
<domain: "com.acme", opset_import: ["": 18]>
FusedRMSNorm <epsilon: float = 0.000001> (x, weight) => (y) {
    squared = Mul (x, x)
    axes = Constant <value_ints: ints = [-1]> ()
    mean = ReduceMean <keepdims: int = 1> (squared, axes)
    eps = Constant <value_float: float = @epsilon> ()
    eps_x = CastLike (eps, x)
    shifted = Add (mean, eps_x)
    rms = Sqrt (shifted)
    normed = Div (x, rms)
    y = Mul (normed, weight)
}
""")


@hookimpl
def register_decompositions(registry):
    registry.add("com.acme", "FusedRMSNorm", FUSED_RMS_NORM, opsets=(18, None),
                 description="acme:FusedRMSNorm")
