"""QOperator ops (``quantize_static(..., quant_format=QuantFormat.QOperator)``, and
onnxruntime's offline optimizer fusing QDQ groups back) as ``DequantizeLinear`` -> the float
op -> ``QuantizeLinear`` with the op's own scales and zero points (registered by the
``com-microsoft`` plugin, whose ``register_decompositions`` hook calls this package's).

A target with QDQ support (OpenVINO's low-precision transformations) keeps the integer
pipeline; any other runs the float op between exact dequantization and the output's
quantization. ``QuantizeLinear`` rounds half to even and saturates, as every kernel below
does (``MlasQuantizeLinear``, ``MlasRequantizeOutput``: ``nearbyintf``, then clamp).

=================  ==========================================================================
module             ops
=================  ==========================================================================
``common``         the body builder with its opset's dequantize/quantize forms, shared helpers
``products``       ``QLinearConv`` (ai.onnx and com.microsoft), ``QLinearMatMul``, ``QGemm``
``elementwise``    ``QLinearAdd``, ``QLinearMul``, ``QLinearSigmoid``, ``QLinearLeakyRelu``,
                   ``QLinearWhere``, ``QLinearConcat``
``pooling``        ``QLinearAveragePool``, ``QLinearGlobalAveragePool``
``softmax``        ``QLinearSoftmax`` (onnxruntime's exp/sum arithmetic)
=================  ==========================================================================

Each module's docstring gives its ops' semantics. Scales and zero points are read as the
kernels read them: per tensor, a scalar or a one-element vector. Below the opset whose
``DequantizeLinear``/``QuantizeLinear`` takes a form (per axis: 13), the body writes the
arithmetic ``(Cast(q) - Cast(zp)) * scale`` and ``Cast(Clip(Round(x / scale) + zp))``.
Oracle: onnxruntime's own CPU kernels, on every attribute form the kernel takes, per tensor
and per channel, uint8 and int8.
"""

from __future__ import annotations

from rewriter.plugin import OpSample

from .common import DOMAIN, QOP_OPSETS, TYPES
from .elementwise import (
    binary_samples,
    build_qlinear_add,
    build_qlinear_concat,
    build_qlinear_leaky_relu,
    build_qlinear_mul,
    build_qlinear_sigmoid,
    build_qlinear_where,
    concat_samples,
    unary_samples,
    where_samples,
)
from .pooling import (
    build_qlinear_average_pool,
    build_qlinear_global_average_pool,
    global_pool_samples,
    pool_samples,
)
from .products import (
    build_qgemm,
    build_qlinear_conv,
    build_qlinear_matmul,
    conv_samples,
    matmul_samples,
    nhwc_conv_samples,
    qgemm_samples,
)
from .softmax import build_qlinear_softmax, softmax_samples


def _oracles() -> dict[str, list[OpSample]]:
    """Per op: samples for onnxruntime's own CPU kernel (``uint8``/``int8``, per tensor and
    per channel, over the attributes the kernel takes)."""
    return {
        "QLinearConv": conv_samples(),
        "QLinearConv@com.microsoft": nhwc_conv_samples(),
        "QLinearMatMul": matmul_samples(),
        "QGemm": qgemm_samples(),
        "QLinearAdd": binary_samples(),
        "QLinearMul": binary_samples(),
        "QLinearSigmoid": unary_samples(),
        "QLinearLeakyRelu": unary_samples(({}, {"alpha": 0.2}, {"alpha": 1.5})),
        "QLinearWhere": where_samples(),
        "QLinearAveragePool": pool_samples(),
        "QLinearGlobalAveragePool": global_pool_samples(),
        "QLinearConcat": concat_samples(),
        "QLinearSoftmax": softmax_samples(),
    }


REGISTRATIONS = (
    ("", "QLinearConv", build_qlinear_conv, "QLinearConv"),
    (DOMAIN, "QLinearConv", build_qlinear_conv, "QLinearConv@com.microsoft"),
    ("", "QLinearMatMul", build_qlinear_matmul, "QLinearMatMul"),
    (DOMAIN, "QGemm", build_qgemm, "QGemm"),
    (DOMAIN, "QLinearAdd", build_qlinear_add, "QLinearAdd"),
    (DOMAIN, "QLinearMul", build_qlinear_mul, "QLinearMul"),
    (DOMAIN, "QLinearSigmoid", build_qlinear_sigmoid, "QLinearSigmoid"),
    (DOMAIN, "QLinearLeakyRelu", build_qlinear_leaky_relu, "QLinearLeakyRelu"),
    (DOMAIN, "QLinearWhere", build_qlinear_where, "QLinearWhere"),
    (DOMAIN, "QLinearAveragePool", build_qlinear_average_pool, "QLinearAveragePool"),
    (DOMAIN, "QLinearGlobalAveragePool", build_qlinear_global_average_pool,
     "QLinearGlobalAveragePool"),
    (DOMAIN, "QLinearConcat", build_qlinear_concat, "QLinearConcat"),
    (DOMAIN, "QLinearSoftmax", build_qlinear_softmax, "QLinearSoftmax"),
)


def register_decompositions(registry) -> None:
    """Called by ``rewriter_plugins.com_microsoft``'s hook."""
    oracles = _oracles()
    for domain, op_type, builder, key in REGISTRATIONS:
        note = "DequantizeLinear, the float op, QuantizeLinear"
        if op_type == "QLinearSoftmax":
            note = "onnxruntime's exp/sum arithmetic"
        registry.add(domain, op_type, builder, opsets=QOP_OPSETS, dtypes=TYPES,
                     description=f"com-microsoft:{op_type} ({note})", oracle="onnxruntime",
                     samples=oracles[key])
