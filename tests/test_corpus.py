"""Every real model in ../shared/corpus gets the verdict onnxruntime itself gives."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import onnxruntime as ort
import onnxruntime_extensions
import pytest

from rewriter.api import check
from rewriter.io.model import load_model
from tests.conftest import CORPUS, onnxruntime_max_opset

MODELS = sorted(p.name for p in CORPUS.glob("*.onnx")) if CORPUS.is_dir() else []

# What onnxruntime says when it refuses, and the reasons check may give for it.
_REASONS_FOR = {
    "is not a registered function/op": {"unknown-domain", "no-schema", "domain-not-imported"},
    "No opset import for domain": {"domain-not-imported"},
    "Could not find an implementation": {"no-kernel", "type-binding"},
    "is marked single but has an empty string": {"invalid-node"},
    "No Op registered for": {"no-schema"},
}


def _session_error(path, libraries=()) -> str | None:
    so = ort.SessionOptions()
    so.log_severity_level = 4
    for lib in libraries:
        so.register_custom_ops_library(lib)
    try:
        ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    except Exception as e:  # noqa: BLE001
        return str(e)
    return None


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("with_extensions", [False, True], ids=["ort", "ort+extensions"])
def test_check_verdict_matches_onnxruntime(corpus, plugins, name, with_extensions):
    libraries = [onnxruntime_extensions.get_library_path()] if with_extensions else []
    actual = _session_error(corpus / name, libraries)
    report = check(
        load_model(corpus / name), ["onnxruntime"], plugins=plugins, confirm=False,
        custom_op_libraries=["extensions"] if with_extensions else [],
    )
    findings = report.results[0].findings
    assert (not findings) == (actual is None), (
        f"check says {'runs' if not findings else findings[0].detail}; onnxruntime says "
        f"{actual or 'runs'}"
    )
    if actual is not None:
        reasons = {f.reason for f in findings}
        for marker, allowed in _REASONS_FOR.items():
            if marker in actual:
                assert reasons & allowed, f"onnxruntime: {actual[:200]}; check: {reasons}"
                break


def test_cli_gives_each_corpus_model_a_verdict_without_traceback(corpus, capsys):
    from rewriter.cli import main

    for name in MODELS:
        code = main(["check", str(corpus / name), "--json", "--no-confirm"])
        out, err = capsys.readouterr()
        assert code in (0, 1), f"{name}: exit {code}: {err}"
        assert "Traceback" not in err
        assert json.loads(out)["ok"] == (code == 0)


# name -> what `check` says (exit 0 only when every node runs), in the runtime's words
CLI_CHECKS = {
    "ort_layernorm_opset12.onnx": (0, "every node runs"),
    "onnx_op28_swiglu.onnx": (1, "Could not find an implementation for Swish(24)"),
    # onnxruntime creates the session, then refuses Megatron's 4-D mask when it runs: the
    # confirmation (a session and one run on generated inputs) finds it
    "ort_gpt2_megatron_skiplayernorm.onnx": (1, "4D mask in attention cpu kernel is not "
                                                "supported"),
}


@pytest.mark.parametrize("name", sorted(CLI_CHECKS))
def test_cli_process_exit_code_and_output(corpus, name):
    proc = subprocess.run(
        [sys.executable, "-m", "rewriter.cli", "check", str(corpus / name)],
        capture_output=True, text=True, timeout=120,
        env={**os.environ, "COLUMNS": "1000"},  # one line per reason (text wraps to it)
    )
    assert "Traceback" not in proc.stderr
    expected, words = CLI_CHECKS[name]
    if name == "onnx_op28_swiglu.onnx" and onnxruntime_max_opset() < 28:
        # an older onnxruntime: the opset is above its ceiling before any kernel is asked for
        words = f"model imports ai.onnx opset 28; the runtime supports up to " \
                f"{onnxruntime_max_opset()}"
    assert proc.returncode == expected, proc.stdout + proc.stderr
    assert ("every node runs" in proc.stdout) == (expected == 0)
    assert words in proc.stdout
