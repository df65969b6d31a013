"""One report model, three renderers: the document every ``--json`` prints (validated against
the shipped JSON Schema), its HTML page (parsed) and its Markdown."""

from __future__ import annotations

import json
from html.parser import HTMLParser
from importlib import resources
from pathlib import Path

import pytest

from rewriter.api import check, rewrite
from rewriter.report.document import SCHEMA_VERSION, document, error_document
from rewriter.report.html import error_chart, to_html
from rewriter.report.markdown import to_markdown
from rewriter.report.render import check_as_dict

jsonschema = pytest.importorskip("jsonschema")

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@pytest.fixture(scope="module")
def schema():
    text = resources.files("rewriter.report").joinpath("schema.json").read_text()
    data = json.loads(text)
    jsonschema.Draft202012Validator.check_schema(data)
    return data


def valid(schema, doc) -> dict:
    jsonschema.validate(json.loads(json.dumps(doc)), schema)
    return doc


class _Page(HTMLParser):
    """The page's tags (and whether any loads something from elsewhere), its text."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.text: list[str] = []
        self.fetches: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        for name, value in attrs:
            if name in ("src", "href") and value and "://" in value:
                self.fetches.append(value)
        if tag in ("script", "link", "iframe", "img"):
            self.fetches.append(tag)

    def handle_data(self, data):
        self.text.append(data)


def parse(html: str) -> _Page:
    page = _Page()
    page.feed(html)
    page.close()
    return page


@pytest.fixture(scope="module")
def failing_rewrite(plugins, tmp_path_factory):
    out = tmp_path_factory.mktemp("reports") / "fixed.onnx"
    return rewrite(EXAMPLES / "failing_export.onnx", ["onnxruntime"], output=out,
                   plugins=plugins).report


def test_check_document_validates_and_renders(plugins, schema):
    result = check(EXAMPLES / "failing_export.onnx", ["onnxruntime"], plugins=plugins)
    doc = valid(schema, document("check", check_as_dict(result, plugins.registry)))
    assert doc["schema_version"] == SCHEMA_VERSION and doc["runtimes"]["onnx"]
    page = parse(to_html(doc))
    text = " ".join(page.text)
    assert "3 finding(s)" in text and "com.microsoft::NhwcConv(1)" in text
    assert "no-kernel" in text and "unknown-domain" in text  # reason codes
    assert not page.fetches and page.tags.count("table") == 1
    md = to_markdown(doc)
    assert "| `com.microsoft::GemmFastGelu(1)` | no-kernel | 1 |" in md


def test_rewrite_document_validates_and_renders_the_verdict_first(failing_rewrite, schema):
    doc = valid(schema, document("rewrite", failing_rewrite.as_dict()))
    assert doc["verdict"] == "verified"
    html = to_html(doc)
    page = parse(html)
    text = " ".join(page.text)
    # the verdict banner comes before the plan, the op table, the checks and the comparison
    assert text.index("verified:") < text.index("Plan") < text.index("Operators before")
    assert "Comparison: verified" in text and "svg" in page.tags and not page.fetches
    assert "com-microsoft:NhwcConv" in text and "org.pytorch.aten::ATen" in text
    md = to_markdown(doc)
    assert md.splitlines()[2].startswith("**verified**")
    assert "## Operators before and after" in md


def test_a_mismatch_page_names_the_diverging_region(plugins, schema, tmp_path):
    from rewriter.manager import load_plugins
    from tests.conftest import model_from_text
    from tests.test_verdicts import PLUGIN, WRONG

    path = tmp_path / "acme_report.py"
    path.write_text(PLUGIN)
    report = rewrite(model_from_text(WRONG), ["reference"],
                     plugins=load_plugins([str(path)], autoload=False), confirm=False).report
    doc = valid(schema, document("rewrite", report.as_dict()))
    assert doc["verdict"] == "mismatch"
    text = " ".join(parse(to_html(doc)).text)
    assert "mismatch:" in text and "first diverging region" in text
    assert "acme:ErfGelu (wrong)" in text


def test_error_chart_marks_the_tolerance():
    svg = error_chart([{"name": "y", "max_abs": 1e-3, "atol": 1e-5, "ok": False},
                       {"name": "z", "max_abs": 0.0, "atol": 1e-5, "ok": True}])
    page = parse(svg)
    assert page.tags.count("rect") == 2 and page.tags.count("line") >= 2
    assert error_chart([{"name": "s", "max_abs": None}]) == ""


def test_error_document(schema):
    doc = valid(schema, error_document("x.onnx: no such file", 2))
    assert doc["command"] == "error" and not doc["ok"]
    assert "error: x.onnx: no such file" in " ".join(parse(to_html(doc)).text)
