"""Docs that are generated and must stay current: docs/cli.md (from the click commands) and
the example reports in docs/examples/reports/ (the two README examples and a failing case,
as HTML and Markdown). Regenerate them with ``python tests/test_cli_docs.py``."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
REPORTS = ROOT / "docs" / "examples" / "reports"
REGENERATE = "python tests/test_cli_docs.py"

# a vendor op a plugin fixes and one nothing fixes: check's failing case
MYSTERY = """
    <ir_version: 10, opset_import: ["" : 17, "com.microsoft" : 1, "com.acme" : 1]>
    g (float[2,8] x, float[8,8] w) => (float[2,8] y) {
        t = com.microsoft.GemmFastGelu (x, w)
        y = com.acme.Mystery (t)
    }"""


def _normalized(value: Any, folder: str) -> Any:
    """``value`` without what changes from run to run: durations, the temporary folder."""
    if isinstance(value, dict):
        return {k: _normalized(v, folder) for k, v in value.items() if k != "seconds"}
    if isinstance(value, list):
        return [_normalized(v, folder) for v in value]
    if isinstance(value, str):
        return value.replace(folder + os.sep, "").replace(str(ROOT) + os.sep, "")
    return value


def example_documents(folder: Path) -> dict[str, dict]:
    """The report documents of the examples (run from the repository's root, writing into
    ``folder``), normalized: name -> document."""
    from rewriter import progress
    from rewriter.api import check, rewrite
    from rewriter.manager import load_plugins
    from rewriter.report.document import document
    from rewriter.report.render import check_as_dict
    from tests.conftest import model_from_text, write_model

    plugins = load_plugins(autoload=False)
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        docs = {}
        for name, model, out in (("new-opset-rewrite", "examples/new_opset_export.onnx",
                                  "rewritten.onnx"),
                                 ("failing-rewrite", "examples/failing_export.onnx",
                                  "fixed.onnx")):
            with progress.timed() as stages:  # as the CLI times them; seconds normalized
                report = rewrite(model, "onnxruntime", output=folder / out,
                                 plugins=plugins, report_details=True).report
            docs[name] = document("rewrite", report.as_dict(), stages=stages)
        with progress.timed() as stages:
            result = check("examples/failing_export.onnx", "onnxruntime", plugins=plugins,
                           confirm=False, report_details=True)
        docs["failing-check"] = document("check", check_as_dict(result, plugins.registry),
                                         stages=stages)
        mystery = write_model(folder / "mystery_export.onnx", model_from_text(MYSTERY))
        with progress.timed() as stages:
            result = check(mystery, ["onnxruntime", "openvino"], plugins=plugins,
                           confirm=False, report_details=True)
        docs["unfixable-check"] = document("check", check_as_dict(result, plugins.registry),
                                           stages=stages)
    finally:
        os.chdir(cwd)
    return {k: _normalized(v, str(folder)) for k, v in docs.items()}


def rendered(folder: Path) -> dict[str, str]:
    """File name -> text of every example report."""
    from rewriter.report.html import to_html
    from rewriter.report.markdown import to_markdown

    files = {}
    for name, doc in example_documents(folder).items():
        files[f"{name}.html"] = to_html(doc)
        files[f"{name}.md"] = to_markdown(doc)
    return files


def test_cli_reference_is_current():
    from rewriter.cli import reference_markdown

    assert (ROOT / "docs" / "cli.md").read_text() == reference_markdown(), (
        "docs/cli.md is stale: regenerate with " + REGENERATE)


def test_cli_reference_lists_every_option():
    from rewriter.cli import cli

    text = (ROOT / "docs" / "cli.md").read_text()
    for name, command in cli.commands.items():
        assert f"## `onnx-rewriter {name}`" in text
        for param in command.params:
            for opt in getattr(param, "opts", []):
                if opt.startswith("-"):
                    assert f"`{opt}`" in text, (name, opt)


def _comparable(report: str) -> str:
    """A report without the figures of its comparisons (errors, their histogram), which
    differ in the last digits between CPUs (onnxruntime's kernels take the instructions
    the CPU has)."""
    import re

    report = re.sub(r'<svg[^>]*aria-label="absolute error per output".*?</svg>', "<svg/>",
                    report, flags=re.S)
    return re.sub(r"\d\.\d+e[-+]\d+", "<e>", report)


def test_example_reports_are_current(tmp_path):
    import pytest

    from tests.conftest import onnxruntime_is_behind_onnx

    if onnxruntime_is_behind_onnx():
        pytest.skip("the example reports are what an onnxruntime that knows every opset of the "
                    "installed onnx says; an older one finds more")
    expected = rendered(tmp_path)
    stale = [name for name, text in expected.items()
             if not (REPORTS / name).is_file()
             or _comparable((REPORTS / name).read_text()) != _comparable(text)]
    assert not stale, f"stale example reports {stale}: regenerate with {REGENERATE}"
    assert {p.name for p in REPORTS.glob("*.*") if p.suffix in (".html", ".md")} == set(expected)
    doc = json.loads(json.dumps(example_documents(tmp_path)["unfixable-check"]))
    groups = [g for t in doc["targets"] for g in t["groups"]]
    assert any(g["no_remedy"] for g in groups) and any(g["remedies"] for g in groups)
    assert "Mystery" in expected["unfixable-check.html"]
    assert str(tmp_path) not in "".join(expected.values())


if __name__ == "__main__":
    import sys
    import tempfile

    sys.path.insert(0, str(ROOT))
    from rewriter.cli import reference_markdown

    (ROOT / "docs" / "cli.md").write_text(reference_markdown())
    REPORTS.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for file_name, text in rendered(Path(tmp)).items():
            (REPORTS / file_name).write_text(text)
            print(REPORTS / file_name)
