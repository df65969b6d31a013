"""A plugin written from the 0.x documentation (docs/plugins.md and docs/kernels.md before
the plugin API 1.0), kept frozen as it was written: it imports FunctionBuilder and declining
from ``rewriter.bodies``, Arg and OpSample from ``rewriter.registry`` and kernel from
``rewriter.kernels``. tests/test_compat.py rewrites with it: the 1.x series must keep it
working (with a DeprecationWarning naming rewriter.plugin). Do not modernise this file."""

import numpy as np
from onnx import TensorProto

from rewriter import hookimpl
from rewriter.bodies import FunctionBuilder, declining
from rewriter.kernels import kernel
from rewriter.registry import Arg, OpSample


@declining  # a Declined raised inside means "leave the node alone" (None)
def build_scaled_softsign(ctx):
    b = FunctionBuilder(ctx.opset, elem_type=TensorProto.FLOAT)  # the model's ai.onnx opset
    denom = b.op("Add", b.literal(1.0), b.op("Abs", "X"))
    y = b.op("Div", b.op("Mul", "X", b.literal(ctx.attribute("scale", 1.0))), denom)
    return b.function("com.acme", "scaled_softsign", ["X"], [y])


@kernel(signatures=["float -> float"], attributes={"scale": 1.0})
def scaled_softsign(x, *, scale):
    return (scale * x / (1 + np.abs(x))).astype(np.float32)


@hookimpl
def register_decompositions(registry):
    registry.add("com.acme", "ScaledSoftsign", build_scaled_softsign, opsets=(13, None),
                 dtypes=["float"], oracle="kernel",
                 samples=[OpSample(["T[2,3,8]"], attributes={"scale": 0.5}),
                          OpSample([Arg("T[4]", low=-2.0, high=2.0)])])


@hookimpl
def register_kernels(registry):
    registry.add("com.acme", "ScaledSoftsign", "acme_0x_plugin:scaled_softsign")
