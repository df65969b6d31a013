"""Contoso's proprietary ops for onnx-graph-rewriter, written against ``rewriter.plugin``
(API 1.0) and ``docs/plugins.md`` only.

- ``com.contoso::BiasSoftplus(x, bias?)``: ``softplus(x + bias)``, ``bias`` optional; a
  decomposition written in onnxscript at opset 18 (two bodies: with and without ``bias``),
  checked against the kernel below, which also runs an original holding the op.
- ``com.contoso::Passthrough(x)``: ``x``; a pass turns it into ``Identity`` (its kernel
  runs the original).
"""

from __future__ import annotations

import numpy as np
from onnxscript import opset18 as op
from onnxscript import script
from onnxscript.values import Opset

from rewriter.plugin import (
    Declined,
    DecompositionContext,
    OpSample,
    RewritePass,
    hookimpl,
    kernel,
    present,
)

CONTOSO = Opset("com.contoso", 1)


@script(CONTOSO)
def BiasSoftplus(x, bias):
    return op.Softplus(op.Add(x, bias))


@script(CONTOSO)
def SoftplusOnly(x):
    return op.Softplus(x)


def bias_softplus(ctx: DecompositionContext):
    """The body for this node: with ``bias`` where the node gives it."""
    if len(ctx.node.input) > 2:
        raise Declined("BiasSoftplus takes at most 2 inputs")
    return BiasSoftplus if present(ctx.node.input, 1) else SoftplusOnly


@kernel(signatures=["float, float -> float", "float -> float"])
def bias_softplus_kernel(x, bias=None):
    """softplus(x + bias), computed stably in float64."""
    z = x.astype(np.float64) + (0 if bias is None else bias)
    return np.logaddexp(0.0, z).astype(x.dtype)


@kernel(signatures=["float -> float"])
def passthrough_kernel(x):
    """The original's Passthrough, so a rewrite can be verified against it."""
    return x.copy()


class PassthroughToIdentity(RewritePass):
    """Every ``com.contoso::Passthrough`` node becomes an ``Identity``."""

    def offers(self, finding, ctx):
        if (finding.domain, finding.op_type) == ("com.contoso", "Passthrough"):
            return True, "Passthrough is Identity"
        raise Declined("not a com.contoso::Passthrough node")

    def run(self, model, ctx):
        changed = 0
        for node in model.graph.node:
            if (node.domain, node.op_type) == ("com.contoso", "Passthrough"):
                node.domain, node.op_type = "", "Identity"
                changed += 1
        if not changed:
            return None
        ctx.record("pass", self.plugin, self.name, "com.contoso::Passthrough(1)", changed)
        return model


@hookimpl
def register_decompositions(registry):
    registry.add("com.contoso", "BiasSoftplus", bias_softplus, opsets=(13, None),
                 dtypes=["float"], oracle="kernel", description="softplus(x + bias)",
                 samples=[OpSample(["T[2,3]", "T[2,3]"], name="bias"),
                          OpSample(["T[2,3]", None], name="no-bias"),
                          OpSample(["T[4]"], name="one-input")])


@hookimpl
def register_kernels(registry):
    registry.add("com.contoso", "BiasSoftplus", bias_softplus_kernel)
    registry.add("com.contoso", "Passthrough", passthrough_kernel)


@hookimpl
def register_passes(registry):
    registry.add("contoso-passthrough", PassthroughToIdentity, phase="cleanup")
