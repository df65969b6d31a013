"""Progress on stderr: shown when stderr is a terminal (a real pseudo-terminal here), absent
when it is piped or with --quiet, and never on stdout (--json stays parseable)."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "new_opset_export.onnx"
STAGES = ("load", "detect", "plan", "apply", "validate", "save")

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="pseudo-terminals are POSIX")


def _run(args: list[str], stderr_on_pty: bool) -> tuple[int, str, str]:
    """Run the CLI with stdout piped and stderr on a pseudo-terminal (or piped)."""
    command = [sys.executable, "-m", "rewriter.cli", *args]
    env = dict(os.environ, COLUMNS="100", TERM="xterm")
    if not stderr_on_pty:
        proc = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
        return proc.returncode, proc.stdout, proc.stderr
    master, slave = pty.openpty()
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=slave, env=env)
    os.close(slave)
    chunks = []
    while True:
        ready, _, _ = select.select([master], [], [], 300)
        if not ready:
            break
        try:
            data = os.read(master, 65536)
        except OSError:  # the child closed its end
            break
        if not data:
            break
        chunks.append(data)
    stdout = proc.stdout.read().decode()
    proc.wait(timeout=60)
    os.close(master)
    text = b"".join(chunks).decode(errors="replace")
    return proc.returncode, stdout, re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text)  # colours


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("progress")
    args = ["rewrite", str(EXAMPLE), "--no-verify", "--json", "-o"]
    return {
        "pty": _run([*args, str(folder / "a.onnx")], True),
        "piped": _run([*args, str(folder / "b.onnx")], False),
        "quiet": _run(["-q", *args, str(folder / "c.onnx")], True),
    }


def test_progress_on_a_terminal(outputs):
    code, stdout, stderr = outputs["pty"]
    assert code == 0, stderr
    for stage in STAGES:
        assert f"✓ {stage}" in stderr, (stage, stderr)
    assert json.loads(stdout)["written"] is True  # --json on stdout, untouched


def test_no_progress_when_piped_or_quiet(outputs):
    for name in ("piped", "quiet"):
        code, stdout, stderr = outputs[name]
        assert code == 0, stderr
        assert not any(f"✓ {stage}" in stderr for stage in STAGES), (name, stderr)
        assert json.loads(stdout)["written"] is True
    # the same document on stdout whether progress was shown or not (but the output path
    # and the durations: the same stages, timed alike)
    strip = lambda s: {k: v if k != "stages" else [x["stage"] for x in v]  # noqa: E731
                       for k, v in json.loads(s).items() if k != "output"}
    assert strip(outputs["pty"][1]) == strip(outputs["piped"][1])


def test_each_compare_run_has_a_line_on_a_terminal(tmp_path):
    """A verified rewrite's compare stage names each run (the original on its oracle, the
    rewritten model on the target) with its time; piped, none of it."""
    shown = _run(["rewrite", str(EXAMPLE), "-o", str(tmp_path / "a.onnx")], True)
    piped = _run(["rewrite", str(EXAMPLE), "-o", str(tmp_path / "b.onnx")], False)
    assert shown[0] == piped[0] == 0, (shown[2], piped[2])
    runs = re.findall(r"· (the original on .+?|the rewritten model on .+?)  \d+\.\ds", shown[2])
    assert any(r.startswith("the original on ") for r in runs), shown[2]
    assert "the rewritten model on onnxruntime" in runs, shown[2]
    assert "✓ compare" in shown[2]
    assert "the original on" not in piped[2] and "✓" not in piped[2]
