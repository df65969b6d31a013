"""The CLI's text at 80 columns (no line over 80 characters but paths; op names never cut)
and on a console that cannot encode its symbols (cp1252: ASCII stand-ins, never a failure
after the model was written)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from rewriter.cli import main

ROOT = Path(__file__).resolve().parents[1]
FAILING = "examples/failing_export.onnx"
NEW_OPSET = "examples/new_opset_export.onnx"


@pytest.fixture
def at_80_columns(monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.chdir(ROOT)


def _too_wide(text: str, *paths: str) -> list[str]:
    return [line for line in text.splitlines()
            if len(line) > 80 and not any(p in line for p in paths)]


@pytest.mark.parametrize("args", [
    ["plugins"], ["plugins", "com-microsoft"], ["ops"], ["ops", "attention"],
    ["check", FAILING, "--no-confirm"], ["check", NEW_OPSET, FAILING, "-t", "onnxruntime",
                                         "-t", "openvino", "-t", "opset:13", "--no-confirm"],
], ids=["plugins", "plugins-NAME", "ops", "ops-FILTER", "check", "check-many"])
def test_no_line_over_80_columns(args, at_80_columns, capsys):
    code = main(args)
    out, err = capsys.readouterr()
    assert code in (0, 1), err
    assert not _too_wide(out + err), _too_wide(out + err)
    assert out.count("\n") >= 3
    if args[0] == "plugins" and len(args) == 1:  # one row per plugin, not a 700-line table
        assert out.count("\n") < 40 and "onnx-rewriter plugins NAME" in out


@pytest.mark.parametrize("model", [NEW_OPSET, FAILING])
def test_rewrite_of_the_readme_examples_fits_80_columns(model, at_80_columns, tmp_path, capsys):
    out_path = tmp_path / "rewritten.onnx"
    for extra in ([], ["--dry-run", "--explain"]):
        args = ["rewrite", model, *(["-o", str(out_path)] if not extra else []), *extra]
        code = main(args)
        out, err = capsys.readouterr()
        assert code == 0, err
        assert not _too_wide(out + err, str(tmp_path)), _too_wide(out + err, str(tmp_path))
        assert out.count("\n") < 40  # --explain grouped like check, not thousands of lines
    assert out_path.exists()


def test_op_names_are_never_cut(at_80_columns, capsys):
    main(["check", FAILING, "--no-confirm"])
    out = capsys.readouterr().out
    for op in ("com.microsoft::GemmFastGelu(1)", "com.microsoft::NhwcConv(1)",
               "org.pytorch.aten::ATen(1)"):
        assert op in out
    assert "…" not in out
    main(["rewrite", FAILING, "--dry-run"])
    out = capsys.readouterr().out
    assert "com.microsoft::GemmFastGelu(1) ×1" in out and "…" not in out


def _cli(args: list[str], tmp_path: Path, **env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rewriter.cli", *args], cwd=ROOT,
                          capture_output=True, timeout=300,
                          env={**os.environ, "COLUMNS": "80", **env})


def test_a_cp1252_console_gets_ascii_symbols_and_the_rewrite_succeeds(tmp_path):
    out_path = tmp_path / "r.onnx"
    proc = _cli(["rewrite", NEW_OPSET, "-o", str(out_path)], tmp_path,
                PYTHONIOENCODING="cp1252")
    stdout = proc.stdout.decode("cp1252")
    assert proc.returncode == 0, proc.stderr.decode("cp1252", "replace")
    assert out_path.exists() and "internal error" not in proc.stderr.decode("cp1252")
    assert "ok verified: equal within tolerance" in stdout and "->" in stdout
    assert "✓" not in stdout
    proc = _cli(["check", FAILING, "--no-confirm"], tmp_path, PYTHONIOENCODING="cp1252")
    stdout = proc.stdout.decode("cp1252")
    assert proc.returncode == 1 and "x onnxruntime: 3 finding(s)" in stdout
    assert not _too_wide(stdout)
