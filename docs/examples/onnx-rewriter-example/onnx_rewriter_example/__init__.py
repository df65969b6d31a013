"""An example onnx-graph-rewriter plugin, installed as its own distribution.

It registers, through the public plugin API only:

* target ``example-npu``: an NPU whose SDK runs a short whitelist of standard ONNX
  operators up to opset 13;
* a decomposition of the made-up operator ``com.example::Swish2`` into
  ``x * Sigmoid(x)``.

The distribution's ``pyproject.toml`` declares it in the ``onnx_rewriter`` entry-point
group under the name ``example``.
"""

from __future__ import annotations

import onnx
from onnx import helper

from rewriter.plugin import Finding, NodeQuery, Target, TargetError, hookimpl

NPU_NAME = "example-npu"
MAX_OPSET = 13
SUPPORTED_OPS = frozenset(
    {
        "Add", "Concat", "Conv", "Gemm", "MatMul", "Mul", "Relu", "Reshape", "Softmax",
        "Transpose",
    }
)
_STANDARD = ("", "ai.onnx")


class ExampleNpuTarget(Target):
    """The Example NPU: a fixed whitelist of ai.onnx operators, opset <= 13."""

    name = NPU_NAME
    description = f"Example NPU SDK 1.0 ({len(SUPPORTED_OPS)} ai.onnx ops, opset <= {MAX_OPSET})"

    def check_model(self, model: onnx.ModelProto) -> list[Finding]:
        out = []
        for imp in model.opset_import:
            if imp.domain in _STANDARD and imp.version > MAX_OPSET:
                out.append(
                    Finding(
                        target=self.name,
                        path="model",
                        domain="",
                        op_type="",
                        version=imp.version,
                        reason="opset-too-new",
                        detail=f"model imports ai.onnx opset {imp.version}; the Example NPU "
                        f"compiler accepts up to opset {MAX_OPSET}",
                    )
                )
        return out

    def check_node(self, query: NodeQuery) -> Finding | None:
        op = query.node.op_type
        if query.domain not in _STANDARD:
            return self.finding(
                query, "unknown-domain",
                f"the Example NPU runs only ai.onnx operators, not domain {query.domain!r}",
            )
        if op not in SUPPORTED_OPS:
            return self.finding(
                query, "no-kernel",
                f"the Example NPU has no kernel for {op}; it runs only "
                + ", ".join(sorted(SUPPORTED_OPS)),
            )
        if query.opset is not None:
            try:
                since = onnx.defs.get_schema(op, min(query.opset, onnx.defs.onnx_opset_version()),
                                             "").since_version
            except onnx.defs.SchemaError:
                since = None
            if since is not None and since > MAX_OPSET:
                return self.finding(
                    query, "opset-too-new",
                    f"{op}({since}) is newer than the Example NPU's opset {MAX_OPSET}",
                    version=since,
                )
        return None


def _make_npu(argument: str | None, options=None) -> ExampleNpuTarget:
    if argument:
        raise TargetError(f"target {NPU_NAME!r} takes no argument (got {argument!r})")
    return ExampleNpuTarget()


def swish2_function() -> onnx.FunctionProto:
    """``com.example::Swish2(X) = X * Sigmoid(X)`` as an ONNX function."""
    return helper.make_function(
        domain="com.example",
        fname="Swish2",
        inputs=["X"],
        outputs=["Y"],
        nodes=[
            helper.make_node("Sigmoid", ["X"], ["S"]),
            helper.make_node("Mul", ["X", "S"], ["Y"]),
        ],
        opset_imports=[helper.make_opsetid("", 13)],
        doc_string="Swish2(x) = x * sigmoid(x)",
    )


@hookimpl
def register_targets(registry):
    registry.add(NPU_NAME, _make_npu, description="Example NPU SDK 1.0 (opset <= 13 whitelist)")


@hookimpl
def register_decompositions(registry):
    registry.add(
        "com.example",
        "Swish2",
        swish2_function(),
        opsets=(13, None),
        description="x * Sigmoid(x)",
    )
