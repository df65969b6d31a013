"""Export a PyTorch model that calls a custom operator, rewrite the ONNX model for
onnxruntime, and compare onnxruntime's outputs with PyTorch's.

    python export_and_compare.py [--out DIR] [--json]

Exit status: 0 when the rewritten model matches PyTorch within tolerance on every target,
1 on a mismatch, 2 when something could not run.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
import torch

HERE = Path(__file__).resolve().parent
PLUGIN = HERE / "acme_rmsnorm.py"
EPSILON = 1e-6


# -- the custom operator: a "fused kernel" PyTorch knows, ONNX does not ----------------------

@torch.library.custom_op("acme::fused_rms_norm", mutates_args=())
def fused_rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


@fused_rms_norm.register_fake
def _(x, weight, eps):
    return torch.empty_like(x)


class TinyBlock(torch.nn.Module):
    """Linear -> fused RMSNorm (the custom op) -> GELU -> Linear."""

    def __init__(self, width: int = 16, out: int = 8) -> None:
        super().__init__()
        self.up = torch.nn.Linear(width, width)
        self.norm_weight = torch.nn.Parameter(torch.rand(width) + 0.5)
        self.down = torch.nn.Linear(width, out)

    def forward(self, x):
        h = torch.ops.acme.fused_rms_norm(self.up(x), self.norm_weight, EPSILON)
        return self.down(torch.nn.functional.gelu(h))


# -- export: the custom op becomes com.acme::FusedRMSNorm ---------------------------------------

@contextlib.contextmanager
def acme_schema():
    """The exporter emits only ops with a schema: declare com.acme::FusedRMSNorm while
    exporting (and withdraw it after, so nothing else in this process sees it)."""
    from onnx.defs import OpSchema

    schema = OpSchema(
        "FusedRMSNorm", "com.acme", 1,
        inputs=[OpSchema.FormalParameter("x", "T"), OpSchema.FormalParameter("weight", "T")],
        outputs=[OpSchema.FormalParameter("y", "T")],
        type_constraints=[("T", ["tensor(float)", "tensor(float16)", "tensor(double)"], "")],
        attributes=[OpSchema.Attribute("epsilon", OpSchema.AttrType.FLOAT, "")],
    )
    onnx.defs.register_schema(schema)
    try:
        yield
    finally:
        onnx.defs.deregister_schema("FusedRMSNorm", 1, "com.acme")


def export(model: torch.nn.Module, example: torch.Tensor, path: Path) -> onnx.ModelProto:
    import onnxscript

    acme = onnxscript.values.Opset("com.acme", 1)

    def fused_rms_norm_to_onnx(x, weight, eps: float):
        return acme.FusedRMSNorm(x, weight, epsilon=eps)

    with acme_schema():
        program = torch.onnx.export(
            model, (example,), dynamo=True, input_names=["x"], output_names=["y"],
            dynamic_shapes={"x": {0: torch.export.Dim("batch"), 1: torch.export.Dim("seq")}},
            custom_translation_table={
                torch.ops.acme.fused_rms_norm.default: fused_rms_norm_to_onnx},
            verbose=False,
        )
    proto = program.model_proto
    onnx.save(proto, path)
    return proto


# -- the workflow ------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="where to write the models (default: a "
                        "temporary folder)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args(argv)

    with contextlib.ExitStack() as stack:
        out = args.out or Path(stack.enter_context(tempfile.TemporaryDirectory()))
        out.mkdir(parents=True, exist_ok=True)
        return run(out, args.json)


def run(out: Path, as_json: bool) -> int:
    import rewriter
    from rewriter.manager import load_plugins

    torch.manual_seed(0)
    model = TinyBlock().eval()
    original = out / "tiny_block.onnx"
    with contextlib.redirect_stdout(sys.stderr):  # the exporter's progress lines
        export(model, torch.randn(2, 5, 16), original)

    # PyTorch is the oracle: its outputs on a few inputs of different shapes
    rng = np.random.default_rng(0)
    inputs = [{"x": rng.standard_normal(shape).astype(np.float32)}
              for shape in ((2, 5, 16), (1, 9, 16), (3, 1, 16))]
    with torch.no_grad():
        expected = [{"y": model(torch.from_numpy(i["x"])).numpy()} for i in inputs]

    plugins = load_plugins([str(PLUGIN)])
    rewritten = out / "tiny_block.onnxruntime.onnx"
    # rewrite, verified against PyTorch's outputs (the original cannot run anywhere as is)
    result = rewriter.rewrite(original, ["onnxruntime"], output=rewritten, plugins=plugins,
                              compare_options={"inputs": inputs, "expected": expected})
    # the same check as a library call, on onnxruntime and on the ONNX reference evaluator
    report = rewriter.compare(rewritten, targets=["onnxruntime", "reference"],
                              inputs=inputs, expected=expected, plugins=plugins)

    max_abs = {t.target: t.max_abs for t in report.targets}
    summary = {
        "original": str(original),
        "rewritten": str(rewritten) if result.report.output else None,
        "applied": [f"{op}: {kind} {rule} ({plugin})"
                    for (kind, plugin, rule, op) in sorted(result.report.applied)],
        "rewrite_verification": result.report.verification,
        "status": report.status,
        "max_abs_error": max_abs,
        "summary": report.summary(),
    }
    if as_json:
        print(json.dumps(summary, indent=2))
    else:
        print(f"exported {original.name}: com.acme::FusedRMSNorm, which onnxruntime cannot run")
        for line in summary["applied"]:
            print(f"rewrote {line}")
        print(f"rewrite's own check against PyTorch: {result.report.verification['compare']}")
        for target, error in max_abs.items():
            print(f"max abs error, PyTorch vs the rewritten model on {target}: {error:.3g}")
        print(report.summary())
    return report.exit_code


if __name__ == "__main__":
    sys.exit(main())
