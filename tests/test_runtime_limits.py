"""Targets learn their limits from the installed runtime: the highest opset and IR version
onnxruntime has, asked of onnxruntime itself; with an older onnxruntime installed (a real
one, in a virtual environment), ``rewrite`` brings the README's example under them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import venv
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper

import rewriter
from rewriter.detect.targets import resolve_targets

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "new_opset_export.onnx"
OLD_ONNXRUNTIME = "1.23.2"  # what pip resolves on Python 3.10 (onnxruntime 1.24 needs 3.11)


def _registry_max_opsets() -> dict[str, int]:
    from onnxruntime.capi import _pybind_state as C

    out: dict[str, int] = {}
    for s in C.get_all_operator_schema():
        domain = "" if s.domain in ("", "ai.onnx") else s.domain
        out[domain] = max(out.get(domain, 0), s.since_version)
    return out


def _loads(ir_version: int, opset: int = 14) -> bool:
    x = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              ir_version=ir_version)
    try:
        ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    except Exception:  # noqa: BLE001
        return False
    return True


def test_limits_are_the_installed_runtimes(plugins):
    target, = resolve_targets(plugins, ["onnxruntime"])
    registry = _registry_max_opsets()
    newest = onnx.defs.onnx_opset_version()
    # the highest ai.onnx opset it has schemas for and loads (1.30 has schemas for 27 but
    # loads only "official released" opsets, up to 26)
    ir = target.max_ir_version or onnx.IR_VERSION
    loads = next(v for v in range(registry[""], 0, -1) if _loads(ir, v))
    if loads < newest:
        assert target.max_opsets[""] == loads
    else:  # onnxruntime knows every opset onnx writes: no ceiling to convert to
        assert target.max_opsets is None or "" not in target.max_opsets
    if target.max_ir_version is None:
        assert _loads(onnx.IR_VERSION)
    else:
        assert _loads(target.max_ir_version) and not _loads(target.max_ir_version + 1)


def test_ir_too_new_is_lowered_for_a_target_that_loads_less(plugins):
    """The IR-version pass with a target whose limit is below the model's: the result has
    that IR version and runs with the same numbers on the installed onnxruntime."""
    model = onnx.load(EXAMPLE)
    target, = resolve_targets(plugins, ["onnxruntime"])
    if target.max_ir_version is None:
        # this onnxruntime loads every IR version onnx writes: the finding must not exist
        report = rewriter.check(model, ["onnxruntime"], plugins=plugins, confirm=False)
        assert all(f.reason != "ir-too-new" for f in report.findings)
    else:
        assert model.ir_version > target.max_ir_version
        result = rewriter.rewrite(model, ["onnxruntime"], plugins=plugins)
        assert result.model.ir_version <= target.max_ir_version
        assert result.report.verification["compare"] == "ok"


def _venv_with(tmp: Path, requirement: str) -> Path:
    """A virtual environment seeing this Python's packages, with ``requirement`` installed
    over them; skipped when the package index cannot be reached."""
    env_dir = tmp / "venv"
    venv.EnvBuilder(system_site_packages=True, with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path("
                           "'purelib'))"], capture_output=True, text=True, check=True)
    # this interpreter's packages (the project among them) after the venv's own, also when
    # this interpreter is itself a venv (system_site_packages reaches only the base's)
    import site as this_site

    outer = [p for p in this_site.getsitepackages() if Path(p).is_dir()]
    (Path(site.stdout.strip()) / "outer_site.pth").write_text(
        "".join(f"import site; site.addsitedir({p!r})\n" for p in outer))
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target",
         site.stdout.strip(), requirement],
        capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        if "No matching distribution" in proc.stderr or "connection" in proc.stderr.lower():
            pytest.skip(f"cannot install {requirement}: {proc.stderr.strip()[-200:]}")
        raise AssertionError(proc.stderr)
    return python


@pytest.mark.slow
def test_readme_command_with_onnxruntime_1_23(tmp_path):
    """README's first command under a real onnxruntime 1.23 (ai.onnx up to 23, IR up to 11):
    the example (opset 28, IR 13) is rewritten into a model onnxruntime 1.23 runs, with the
    numbers of the reference evaluator running the original."""
    python = _venv_with(tmp_path, f"onnxruntime=={OLD_ONNXRUNTIME}")
    out = tmp_path / "rewritten.onnx"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([str(python), "-m", "rewriter.cli", "rewrite", str(EXAMPLE), "-o",
                           str(out)], capture_output=True, text=True, cwd=tmp_path, env=env,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    rewritten = onnx.load(out)
    assert {o.domain: o.version for o in rewritten.opset_import}[""] <= 23
    assert rewritten.ir_version <= 11
    # run it with onnxruntime 1.23 in the venv; the oracle: the reference evaluator here
    rng = np.random.default_rng(3)
    original = onnx.load(EXAMPLE)
    feeds = {}
    for i in original.graph.input:
        shape = [d.dim_value or 2 for d in i.type.tensor_type.shape.dim]
        feeds[i.name] = rng.standard_normal(shape).astype(np.float32)
    np.savez(tmp_path / "feeds.npz", **feeds)
    script = (
        "import json, sys, numpy as np, onnxruntime as ort\n"
        "feeds = dict(np.load(sys.argv[2]))\n"
        "s = ort.InferenceSession(sys.argv[1], providers=['CPUExecutionProvider'])\n"
        "out = s.run(None, feeds)\n"
        "print(json.dumps({'version': ort.__version__, 'outputs': [o.tolist() for o in out]}))\n"
    )
    ran = subprocess.run([str(python), "-c", script, str(out), str(tmp_path / "feeds.npz")],
                         capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
    assert ran.returncode == 0, ran.stderr[-2000:]
    answer = json.loads(ran.stdout)
    assert answer["version"] == OLD_ONNXRUNTIME
    from onnx.reference import ReferenceEvaluator

    expected = ReferenceEvaluator(original).run(None, feeds)
    for want, got in zip(expected, answer["outputs"]):
        np.testing.assert_allclose(np.asarray(got, dtype=np.float32), want, rtol=1e-4,
                                   atol=1e-5)
