"""docs/plugins.md's new-author walkthrough, run as written: its two files saved under their
names, its commands run in that folder with the exit codes they state, and the rewritten
models compared with a numpy oracle written from the op's definition."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

pytest.importorskip("onnxscript")
ort = pytest.importorskip("onnxruntime")

DOC = Path(__file__).resolve().parents[1] / "docs" / "plugins.md"


def _section() -> str:
    text = DOC.read_text(encoding="utf-8")
    start = text.index("## 5. Walkthrough")
    return text[start:text.index("\n## ", start + 1)]


def _files(section: str) -> dict[str, str]:
    """Each ```python block, under the name the line before it gives (`name.py`, ...)."""
    return {name: code for name, code in re.findall(
        r"`([\w.]+\.py)`[^\n]*\n\n```python\n(.*?)```", section, flags=re.S)}


def _commands(section: str) -> list[tuple[list[str], int]]:
    """Each ``$ `` line of the console block, and the exit code its comment states (0)."""
    block = re.search(r"```console\n(.*?)```", section, flags=re.S).group(1)
    out = []
    for line in block.splitlines():
        command, _, comment = line.removeprefix("$ ").partition("#")
        code = re.search(r"exit (\d+)", comment)
        out.append((shlex.split(command), int(code.group(1)) if code else 0))
    return out


def _executable(name: str) -> str:
    if name == "python":
        return sys.executable
    beside = Path(sys.executable).parent / name
    return str(beside) if beside.exists() else shutil.which(name) or name


def _scaled_swish(x: np.ndarray, scale: float) -> np.ndarray:
    z = scale * x.astype(np.float64)
    return (x * (1.0 / (1.0 + np.exp(-z)))).astype(np.float32)


def test_the_walkthrough_runs_as_written(tmp_path):
    section = _section()
    files = _files(section)
    assert set(files) == {"acme_swish.py", "make_model.py"}
    assert "CastLike" in files["acme_swish.py"]  # the idiom the walkthrough is about
    for name, code in files.items():
        (tmp_path / name).write_text(code, encoding="utf-8")
    commands = _commands(section)
    assert any("opset:13" in argv for argv, _ in commands)
    for argv, expected in commands:
        argv = [_executable(argv[0]), *argv[1:]]
        done = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=600)
        assert done.returncode == expected, (argv, done.stdout, done.stderr)
        assert "Traceback" not in done.stderr, done.stderr
    x = np.random.default_rng(0).uniform(-6, 6, (3, 8)).astype(np.float32)
    for out, opset_ceiling in (("swish17_at13.onnx", 13), ("swish13_ort.onnx", 13)):
        model = onnx.load(tmp_path / out)
        assert all(n.domain in ("", "ai.onnx") for n in model.graph.node)
        assert {o.version for o in model.opset_import if o.domain in ("", "ai.onnx")} \
            == {opset_ceiling}
        got = ort.InferenceSession(str(tmp_path / out)).run(None, {"x": x})[0]
        np.testing.assert_allclose(got, _scaled_swish(x, 1.5), rtol=1e-6, atol=1e-6)


def test_a_body_op_newer_than_the_model_is_lowered_not_spliced_as_is(tmp_path):
    """The opset-13 model's body uses CastLike (opset 15): every target gets a body that
    exists at opset 13, not only the targets whose check reads schemas."""
    from rewriter import rewrite, testing

    section = _section()
    for name, code in _files(section).items():
        (tmp_path / name).write_text(code, encoding="utf-8")
    subprocess.run([sys.executable, "make_model.py", "13"], cwd=tmp_path, check=True)
    for target in ("onnxruntime", "reference"):
        out = tmp_path / f"{target}.onnx"
        result = rewrite(tmp_path / "swish13.onnx", [target], output=out,
                         plugins=[str(tmp_path / "acme_swish.py")])
        assert result.report.ok, result.report
        model = onnx.load(out)
        onnx.checker.check_model(model, full_check=True)
        assert "CastLike" not in {n.op_type for n in model.graph.node}
    checked = testing.check_plugin(str(tmp_path / "acme_swish.py"))
    assert any("@13" in label for label in checked.checked), checked
