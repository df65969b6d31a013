"""The documented PyTorch example: export a model with a custom operator, rewrite it, and
compare onnxruntime's output with PyTorch's. Skips where torch is not installed (the dev
extra installs the CPU wheel)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import onnx
import pytest

pytest.importorskip("torch")

EXAMPLE = Path(__file__).resolve().parents[1] / "docs" / "examples" / "torch-custom-op"


def test_torch_model_with_a_custom_op_matches_pytorch_after_the_rewrite(plugins, tmp_path):
    from rewriter.api import check

    # a child process: the example registers a torch.library op and an onnx schema
    proc = subprocess.run(
        [sys.executable, str(EXAMPLE / "export_and_compare.py"), "--out", str(tmp_path),
         "--json"], capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    result = json.loads(proc.stdout)

    original = onnx.load(result["original"])
    assert ("com.acme", "FusedRMSNorm") in {(n.domain, n.op_type) for n in original.graph.node}
    assert not check(original, ["onnxruntime"], plugins=plugins, confirm=False).ok
    assert result["applied"] == [
        "com.acme::FusedRMSNorm(1): decomposition acme:FusedRMSNorm (acme_rmsnorm)"]
    assert result["rewrite_verification"]["compare"] == "ok"  # rewrite checked against PyTorch
    assert result["status"] == "equal"
    errors = result["max_abs_error"]
    assert set(errors) == {"onnxruntime", "reference"}
    print(f"max abs error, PyTorch vs rewritten: {errors}")
    assert all(0 <= e < 1e-5 for e in errors.values()), errors
    rewritten = onnx.load(result["rewritten"])
    assert "com.acme" not in {n.domain for n in rewritten.graph.node}
