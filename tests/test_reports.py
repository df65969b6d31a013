"""One report model, three renderers: the document every ``--json`` prints (validated against
the shipped JSON Schema), its HTML page (parsed) and its Markdown."""

from __future__ import annotations

import json
import math
import os
import time
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from importlib import resources
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from rewriter import progress
from rewriter.api import check, rewrite
from rewriter.comparison.compare import ERROR_BINS, Tolerance, compare_tensor
from rewriter.report.document import SCHEMA_VERSION, document, error_document
from rewriter.report.html import to_html
from rewriter.report.markdown import to_markdown
from rewriter.report.picture import MAX_NODES, replaced_region
from rewriter.report.render import check_as_dict
from rewriter.report.svg import error_chart, subgraph_svg

jsonschema = pytest.importorskip("jsonschema")

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
SVG = "{http://www.w3.org/2000/svg}"


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
def timed_rewrite(plugins, tmp_path_factory):
    """The failing example rewritten and verified, as the CLI times it: (report, stages,
    wall seconds)."""
    out = tmp_path_factory.mktemp("reports") / "fixed.onnx"
    start = time.perf_counter()
    with progress.timed() as stages:
        report = rewrite(EXAMPLES / "failing_export.onnx", ["onnxruntime"], output=out,
                         plugins=plugins, report_details=True).report
    return report, stages, time.perf_counter() - start


@pytest.fixture(scope="module")
def failing_rewrite(timed_rewrite):
    return timed_rewrite[0]


def test_check_document_validates_and_renders(plugins, schema):
    result = check(EXAMPLES / "failing_export.onnx", ["onnxruntime"], plugins=plugins,
                   report_details=True)
    doc = valid(schema, document("check", check_as_dict(result, plugins.registry)))
    assert doc["schema_version"] == SCHEMA_VERSION and doc["runtimes"]["onnx"]
    page = parse(to_html(doc))
    text = " ".join(page.text)
    assert "3 finding(s)" in text and "com.microsoft::NhwcConv(1)" in text
    assert "no-kernel" in text and "unknown-domain" in text  # reason codes
    assert not page.fetches and page.tags.count("table") == 2  # findings, model size
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


def _histogram_by_hand(diff: list[float]) -> list[int]:
    """The documented bins, counted one value at a time: exactly 0, at most 1e-12, each
    decade (1e(k-1), 1e(k)] up to 1e2, above 1e2."""
    counts = [0] * 17
    for d in diff:
        if d == 0:
            counts[0] += 1
        elif d > 1e2:
            counts[16] += 1
        else:
            k = max(-12, math.ceil(round(math.log10(d), 9)))  # d <= 10**k
            counts[k + 13] += 1
    return counts


def test_error_histogram_counts_every_element_in_its_decade():
    rng = np.random.default_rng(0)
    diff = np.concatenate([[0.0, 0.0, 1e-13, 1e-12, 1.5e-12, 1e-3, 1.0, 99.0, 100.0, 101.0,
                            1e9], 10.0 ** rng.uniform(-14, 4, 200)])
    expected = np.zeros(diff.size)
    c = compare_tensor("y", expected, diff, Tolerance(1e-5, 0.0))
    assert c.error_histogram == _histogram_by_hand(diff.tolist())
    assert sum(c.error_histogram) == diff.size and len(ERROR_BINS) + 2 == 17
    # non-finite errors are not in it (they are mismatches of their own)
    c = compare_tensor("y", np.zeros(3), np.array([0.0, np.inf, 1e-3]), Tolerance(1e-5, 0.0))
    assert sum(c.error_histogram) == 2
    # text outputs have none
    assert compare_tensor("s", np.array(["a"]), np.array(["a"]),
                          Tolerance(0, 0)).error_histogram is None


def test_error_chart_draws_the_distribution_against_the_tolerance():
    y = [5, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 0, 1]  # 0, 1e-7, 1e-3, >1e2
    z = [4] + [0] * 16
    svg = error_chart([{"name": "y", "error_histogram": y, "atol": 1e-5, "ok": False},
                       {"name": "z", "error_histogram": z, "atol": 1e-5, "ok": True},
                       {"name": "s", "error_histogram": None, "max_abs": None}])
    root = ET.fromstring(svg)
    bars = root.findall(f".//{SVG}rect")
    assert len(bars) == 5  # one per non-empty bin; "s" has no histogram
    fills = [b.get("fill") for b in bars]
    assert fills[:2] == ["#34a853", "#34a853"]  # 0 and 1e-7: within atol
    assert fills[2:4] == ["#d93025", "#d93025"]  # 1e-3 and above 1e2: beyond it
    titles = [b.find(f"{SVG}title").text for b in bars]
    assert titles[0].startswith("5 of 11 elements") and "above" not in titles[0]
    heights = [float(b.get("height")) for b in bars]
    assert heights[0] == max(heights) and heights[1] < heights[2] < heights[0]
    ticks = [t for t in root.findall(f".//{SVG}line") if t.get("stroke-dasharray")]
    assert len(ticks) == 2  # atol, on each row
    assert error_chart([{"name": "s", "max_abs": None}]) == ""


def test_error_document(schema):
    doc = valid(schema, error_document("x.onnx: no such file", 2))
    assert doc["command"] == "error" and not doc["ok"]
    assert "error: x.onnx: no such file" in " ".join(parse(to_html(doc)).text)


def test_rewrite_report_sizes_match_the_files(failing_rewrite, schema, tmp_path):
    doc = valid(schema, document("rewrite", failing_rewrite.as_dict()))
    source = EXAMPLES / "failing_export.onnx"
    size = doc["size"]
    assert size["input"]["file_bytes"] == os.path.getsize(source)
    assert size["output"]["file_bytes"] == os.path.getsize(doc["output"])
    assert size["input"]["nodes"] == 5 and size["output"]["nodes"] == doc["after"]["nodes"]
    weights = sum(numpy_helper.to_array(t).nbytes for t in onnx.load(source).graph.initializer)
    assert size["input"]["initializer_bytes"] == weights
    written = onnx.load(doc["output"])
    assert size["output"]["initializer_bytes"] == sum(
        numpy_helper.to_array(t).nbytes for t in written.graph.initializer)
    page = " ".join(parse(to_html(doc)).text)
    assert f"{os.path.getsize(source):,}" in page and "Model size" in page
    md = to_markdown(doc)
    assert f"| nodes | 5 | {doc['after']['nodes']} |" in md


def test_sizes_count_external_data(plugins, tmp_path):
    """A model whose weights are external data: its file bytes are both files, in the
    input and in the written output (with its own copy of the data)."""
    model = onnx.load(EXAMPLES / "failing_export.onnx")
    source = tmp_path / "ext.onnx"
    # the weights (not the 16-byte Reshape shape, which strict shape inference must read)
    onnx.save_model(model, source, save_as_external_data=True, all_tensors_to_one_file=True,
                    location="ext.bin", size_threshold=1024)
    assert (tmp_path / "ext.bin").stat().st_size > 0
    out = tmp_path / "out"
    out.mkdir()
    report = rewrite(source, "onnxruntime", output=out / "fixed.onnx", plugins=plugins,
                     verify=False, confirm=False, report_details=True).report
    size = report.as_dict()["size"]
    assert size["input"]["file_bytes"] == (source.stat().st_size
                                           + (tmp_path / "ext.bin").stat().st_size)
    assert size["output"]["file_bytes"] == sum(p.stat().st_size for p in out.iterdir())
    assert len(list(out.iterdir())) == 2  # the model and its data
    loaded = onnx.load(source)  # external data read: the oracle for the bytes
    weights = sum(numpy_helper.to_array(t, str(tmp_path)).nbytes
                  for t in loaded.graph.initializer)
    assert size["input"]["initializer_bytes"] == weights
    result = check(source, "onnxruntime", plugins=plugins, confirm=False,
                   report_details=True)
    assert check_as_dict(result)["size"]["input"] == size["input"]
    in_memory = check(onnx.load(EXAMPLES / "failing_export.onnx"), "onnxruntime",
                      plugins=plugins, confirm=False, report_details=True)
    assert check_as_dict(in_memory)["size"]["input"]["file_bytes"] is None
    # without report_details (the library's default, and the CLI's text output): no walk
    quiet = rewrite(source, "onnxruntime", output=out / "again.onnx", plugins=plugins,
                    verify=False, confirm=False).report
    assert quiet.as_dict()["size"] == {"input": None, "output": None}
    assert quiet.picture is None
    assert check_as_dict(check(source, "onnxruntime", plugins=plugins, confirm=False)
                         )["size"]["input"] is None


def test_time_per_stage_is_recorded_once_per_stage(timed_rewrite, schema):
    report, stages, wall = timed_rewrite
    doc = valid(schema, document("rewrite", report.as_dict(), stages=stages))
    names = [s["stage"] for s in doc["stages"]]
    assert names == ["load", "detect", "plan", "apply", "re-check", "cleanup", "validate",
                     "confirm", "compare", "save"]
    seconds = [s["seconds"] for s in doc["stages"]]
    assert all(t >= 0 for t in seconds)
    # stages inside stages are not counted twice: together no longer than the call
    assert sum(seconds) <= wall + 0.01
    assert doc["stages"][names.index("compare")]["seconds"] >= doc["compare"]["seconds"] - 0.01
    page = parse(to_html(doc))
    text = page.text
    at = text.index("Time per stage")
    cells = [c for c in text[at:] if c.strip()]
    assert cells[3:5] == ["load", f"{seconds[0]:.3f}"]
    assert f"{sum(seconds):.3f}" in cells
    assert "| compare |" in to_markdown(doc)


def test_cli_rewrite_json_has_stages_size_and_picture(schema, tmp_path, capsys):
    from rewriter.cli import main

    html = tmp_path / "r.html"
    code = main(["rewrite", str(EXAMPLES / "failing_export.onnx"), "-o",
                 str(tmp_path / "r.onnx"), "--no-verify", "--no-confirm", "--json",
                 "--report", str(html)])
    doc = valid(schema, json.loads(capsys.readouterr().out))
    assert code == 0
    assert [s["stage"] for s in doc["stages"]] == ["load", "detect", "plan", "apply",
                                                    "re-check", "cleanup", "validate", "save"]
    assert doc["size"]["output"]["file_bytes"] == (tmp_path / "r.onnx").stat().st_size
    assert doc["picture"]["op"] == "com.microsoft::NhwcConv"
    text = " ".join(parse(html.read_text()).text)
    assert "Time per stage" in text and "Model size" in text and "Rewritten subgraph" in text


def _svg_of(html: str, label: str) -> ET.Element:
    start = html.index(f'aria-label="{label}"')
    start = html.rindex("<svg", 0, start)
    return ET.fromstring(html[start:html.index("</svg>", start) + 6])


def test_picture_is_the_replaced_node_and_its_replacement(failing_rewrite, schema):
    doc = valid(schema, document("rewrite", failing_rewrite.as_dict()))
    picture = doc["picture"]
    assert (picture["name"], picture["op"]) == ("stem/NhwcConv", "com.microsoft::NhwcConv")
    assert picture["rule"] == "com-microsoft:NhwcConv"
    # the nodes created for the region are named after it (provenance): the same nodes
    written = onnx.load(doc["output"])
    created = [n.name for n in written.graph.node if n.name.startswith("stem/NhwcConv/")]
    # (the body's Constant is an initializer once the cleanup has run)
    assert [n["name"] for n in picture["nodes"]] == created and picture["total"] == 3
    assert picture["nodes"][-1]["outputs"] == picture["outputs"] == ["features"]
    svg = _svg_of(to_html(doc), "the replaced node and the nodes that replaced it")
    groups = svg.findall(f"{SVG}g")
    nodes = [g for g in groups if g.get("class") == "node"]
    assert len(nodes) == 1 + 3
    assert nodes[0].find(f"{SVG}title").text == "stem/NhwcConv: com.microsoft::NhwcConv"
    edges = svg.findall(f"{SVG}line") + svg.findall(f"{SVG}path")
    # before: 3 inputs and 1 output; after: 1 + 3 + 1 inputs and 1 output
    assert len(edges) == 4 + 6
    for e in edges:  # layered: every edge goes down
        if e.tag == f"{SVG}line":
            assert float(e.get("y2")) > float(e.get("y1"))
        else:
            points = e.get("d").replace("M", "").replace("C", " ").split()
            assert float(points[-1].split(",")[1]) > float(points[0].split(",")[1])
    md = to_markdown(doc)
    assert "## Rewritten subgraph" in md and "| `stem/NhwcConv/Conv_0` | `ai.onnx::Conv` |" in md


def test_picture_by_provenance_names_agrees_with_the_walk_over_values(failing_rewrite):
    """Two ways to find what replaced a node: the nodes named after it in the provenance
    table (the fast one, for big graphs), and the values walked back from its outputs."""
    from rewriter.apply.provenance import read_table
    from rewriter.report.picture import _by_provenance, _by_walk

    original = onnx.load(EXAMPLES / "failing_export.onnx")
    written = onnx.load(failing_rewrite.output)
    bases = [b for regions in read_table(written).regions.values() for b in regions]
    assert len(bases) == 3  # NhwcConv, GemmFastGelu, ATen
    by_names = _by_provenance(original, written, bases, read_table(written))
    by_values = _by_walk(original, written)
    assert by_names[0].name == by_values[0].name == "stem/NhwcConv"
    assert [n.name for _, n in by_names[1]] == [n.name for _, n in by_values[1]]


CHAIN = """
    <ir_version: 10, opset_import: ["" : 18, "com.acme" : 1]>
    g (float[2] x) => (float[2] y) {
        a = com.acme.Bar (x)
        y = com.acme.Foo (a)
    }"""


def test_picture_prefers_a_node_replaced_by_several_and_caps_what_it_draws():
    original = onnx.parser.parse_model(CHAIN)
    rewritten = onnx.parser.parse_model(CHAIN)
    graph = rewritten.graph
    del graph.node[:]
    graph.node.add().CopyFrom(onnx.helper.make_node("Baz", ["x"], ["a"], domain="com.acme"))
    count = MAX_NODES + 5
    for k in range(count):  # Foo became a chain of Relu
        graph.node.add().CopyFrom(onnx.helper.make_node(
            "Relu", ["a" if k == 0 else f"t{k}"], ["y" if k == count - 1 else f"t{k + 1}"],
            name=f"Foo/Relu_{k}"))
    picture = replaced_region(original, rewritten)
    assert picture["op"] == "com.acme::Foo" and picture["total"] == count
    assert len(picture["nodes"]) == MAX_NODES and picture["nodes"][0]["name"] == "Foo/Relu_0"
    assert picture["inputs"] == ["a"]
    svg = ET.fromstring(subgraph_svg(picture))
    assert len([g for g in svg.findall(f"{SVG}g") if g.get("class") == "node"]) == 1 + MAX_NODES
    assert replaced_region(original, original) is None


def test_committed_example_reports_show_size_stages_and_picture():
    reports = ROOT / "docs" / "examples" / "reports"
    html = (reports / "failing-rewrite.html").read_text()
    text = " ".join(parse(html).text)
    assert "Model size" in text and "Time per stage" in text and "Rewritten subgraph" in text
    svg = _svg_of(html, "the replaced node and the nodes that replaced it")
    assert svg.findall(f"{SVG}g")
    _svg_of(html, "absolute error per output")
    md = (reports / "failing-check.md").read_text()
    assert "## Model size" in md and "## Time per stage" in md and "| load | - |" in md


def test_cli_compare_report_has_both_sizes_and_its_time(failing_rewrite, schema, tmp_path,
                                                        capsys):
    from rewriter.cli import main

    page = tmp_path / "c.md"
    code = main(["compare", str(EXAMPLES / "failing_export.onnx"), failing_rewrite.output,
                 "--json", "--report", str(page)])
    doc = valid(schema, json.loads(capsys.readouterr().out))
    assert code == 0 and doc["verdict"] == "verified"
    assert doc["size"]["input"]["file_bytes"] == os.path.getsize(EXAMPLES / "failing_export.onnx")
    assert doc["size"]["output"]["file_bytes"] == os.path.getsize(failing_rewrite.output)
    assert doc["size"]["output"]["nodes"] == failing_rewrite.after.nodes
    md = page.read_text()
    assert "|  | original | rewritten |" in md and "## Time per stage" in md
    histogram = doc["targets"][0]["outputs"][0]["error_histogram"]
    assert sum(histogram) == doc["targets"][0]["outputs"][0]["elements"]


def test_check_of_many_models_shows_each_models_size_and_time(plugins, schema):
    from rewriter.cli import _check_document, _check_one

    paths = [str(EXAMPLES / "failing_export.onnx"), str(EXAMPLES / "new_opset_export.onnx")]
    docs = [_check_one(p, ("onnxruntime",), (), False, (), plugins, details=True)
            for p in paths]
    doc = valid(schema, _check_document(docs))
    for m, path in zip(doc["models"], paths):
        assert m["size"]["input"]["file_bytes"] == os.path.getsize(path)
        assert [s["stage"] for s in m["stages"]][:2] == ["load", "detect"]
    html = to_html(doc)
    assert html.count("<h3>Model size</h3>") == 2 and html.count("<h3>Time per stage</h3>") == 2
    assert to_markdown(doc).count("### Model size") == 2
