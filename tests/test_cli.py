"""The CLI as people and CI read it: every --json a valid report document, --report files,
check over many models with CI formats (GitHub lines, JUnit XML, SARIF 2.1.0), one error
style, an example in every --help, -v/-q logging."""

from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET
from importlib import resources
from pathlib import Path

import onnx
import pytest

from rewriter.cli import cli, main
from tests.conftest import (
    model_from_text,
    onnxruntime_max_ir_version,
    onnxruntime_max_opset,
    write_model,
)

jsonschema = pytest.importorskip("jsonschema")

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
FAILING = EXAMPLES / "failing_export.onnx"
NEW_OPSET = EXAMPLES / "new_opset_export.onnx"
SARIF_SCHEMA = Path(__file__).parent / "data" / "sarif-schema-2.1.0.json"

# a node no plugin remedies: check has findings and no fix
UNFIXABLE = """
    <ir_version: 10, opset_import: ["" : 18, "com.acme" : 1]>
    g (float[2] x) => (float[2] y) { y = com.acme.Mystery (x) }"""


@pytest.fixture(scope="module")
def schema():
    return json.loads(resources.files("rewriter.report").joinpath("schema.json").read_text())


def run(capsys, *args) -> tuple[int, str, str]:
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def valid(schema, text: str) -> dict:
    doc = json.loads(text)
    jsonschema.validate(doc, schema)
    return doc


def test_every_command_json_is_a_valid_report_document(schema, tmp_path, capsys):
    docs = {}
    code, out, _ = run(capsys, "inspect", FAILING, "--json")
    docs["inspect"] = valid(schema, out)
    code, out, _ = run(capsys, "check", FAILING, "--json", "--no-confirm")
    assert code == 1
    docs["check"] = valid(schema, out)
    code, out, _ = run(capsys, "plugins", "--json")
    docs["plugins"] = valid(schema, out)
    code, out, _ = run(capsys, "ops", "gelu", "--json")
    docs["ops"] = valid(schema, out)
    rewritten = tmp_path / "r.onnx"
    code, out, err = run(capsys, "rewrite", NEW_OPSET, "-o", rewritten, "--json")
    assert code == 0, err
    docs["rewrite"] = valid(schema, out)
    code, out, err = run(capsys, "compare", NEW_OPSET, rewritten, "--json")
    assert code == 0, err
    docs["compare"] = valid(schema, out)
    code, out, err = run(capsys, "run", rewritten, "--json")
    docs["run"] = valid(schema, out)
    for command, doc in docs.items():
        assert doc["command"] == command and doc["schema_version"] == 1
        assert doc["tool"]["name"] == "onnx-rewriter" and doc["runtimes"]["onnxruntime"]
    assert docs["compare"]["rewritten"] == str(rewritten)
    assert docs["rewrite"]["compare"]["rewritten"] == str(rewritten)  # not "<input> (rewritten)"
    assert {r["op_type"] for r in docs["ops"]["rows"]} >= {"Gelu", "FastGelu", "BiasGelu"}
    assert all("gelu" in r["op_type"].lower() for r in docs["ops"]["rows"])


@pytest.mark.parametrize("args", [
    ["check", "missing.onnx", "--json"],
    ["rewrite", "missing.onnx", "-o", "out.onnx", "--json"],
    ["check", "--json", "--no-such-option", "x.onnx"],
    ["check", "--output-format", "json", "-t", "nonsense", str(FAILING)],
], ids=["check-missing", "rewrite-missing", "usage", "bad-target"])
def test_exit_2_prints_a_json_error_object(schema, args, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, err = run(capsys, *args)
    assert code == 2
    doc = valid(schema, out)
    assert doc["command"] == "error" and doc["exit_code"] == 2 and not doc["ok"]
    assert err.startswith("error: ") and err.count("\n") == 1
    assert err[len("error: "):].strip() in doc["error"]


def test_unfixable_rewrite_json_error_lists_the_findings(schema, tmp_path, capsys):
    source = write_model(tmp_path / "m.onnx", model_from_text(UNFIXABLE))
    code, out, err = run(capsys, "rewrite", source, "-o", tmp_path / "o.onnx", "--json")
    doc = valid(schema, out)
    assert code == 1 and doc["exit_code"] == 1 and "no remedy" in doc["error"]
    assert [f["op_type"] for f in doc["remaining"]] == ["Mystery"]


def test_usage_errors_are_one_line(capsys):
    for args in (["check"], ["check", "x.onnx", "--bogus"], ["rewrite", "x.onnx", "--prefer",
                                                              "magic"]):
        code, out, err = run(capsys, *args)
        assert code == 2 and out == ""
        assert err.count("\n") == 1 and err.startswith("error: "), err
        assert "--help" in err


def test_long_errors_are_a_short_line_and_indented_detail(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    model = model_from_text(UNFIXABLE.replace("y = com.acme.Mystery (x)", "\n".join(
        f"t{i} = com.acme.Mystery{i} ({'x' if i == 0 else f't{i - 1}'})" for i in range(8))
        + "\ny = Identity (t7)"))
    source = write_model(tmp_path / "m.onnx", model)
    code, out, err = run(capsys, "rewrite", source, "-o", tmp_path / "o.onnx", "-t",
                         "onnxruntime", "-t", "openvino")
    lines = err.splitlines()
    assert code == 1 and lines[0].startswith("error: 16 finding(s) have no remedy")
    assert len(lines[0]) <= 80 and all(line.startswith("  ") for line in lines[1:])
    for target in ("onnxruntime", "openvino"):  # an item a line, continued below it
        assert sum(line.startswith(f"  {target}: com.acme::Mystery") for line in lines) == 8


def test_every_help_shows_an_example(capsys):
    for name in [None, *cli.commands]:
        code, out, _ = run(capsys, *([name] if name else []), "--help")
        assert code == 0 and "Example" in out, name
        assert "onnx-rewriter " in out.split("Example", 1)[1]


def _corpus_sample(tmp_path: Path) -> Path:
    folder = tmp_path / "models"
    folder.mkdir()
    shutil.copy(FAILING, folder / "failing.onnx")
    shutil.copy(NEW_OPSET, folder / "new_opset.onnx")
    write_model(folder / "unfixable.onnx", model_from_text(UNFIXABLE))
    write_model(folder / "runs.onnx", model_from_text("""
        <ir_version: 10, opset_import: ["" : 18]>
        g (float[2] x) => (float[2] y) { y = Relu (x) }"""))
    return folder


def _ceiling_reasons() -> list[str]:
    """The model-level finding of the installed onnxruntime on the sample's new-opset export
    (IR 13, ai.onnx 28): none on an onnxruntime that loads it; on an older one, each ceiling
    it is above (one finding group each)."""
    model = onnx.load(NEW_OPSET, load_external_data=False)
    opset = max(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
    return (["ir-too-new"] if model.ir_version > onnxruntime_max_ir_version() else []) + (
        ["opset-too-new"] if opset > onnxruntime_max_opset() else [])


def test_check_many_models_summary_and_worst_exit_code(tmp_path, capsys):
    folder = _corpus_sample(tmp_path)
    code, out, err = run(capsys, "check", folder / "*.onnx", "--no-confirm")
    assert code == 1, err
    assert out.count("✗ onnxruntime") == 3
    assert "4 models: 1 runs on every target, 3 with findings" in out
    # the hint carries the user's targets, and names the models it is for
    last = " ".join(out[out.index("2 of 3 with"):].split())
    assert last.startswith("2 of 3 with findings fixable: run `onnx-rewriter rewrite MODEL -o "
                           "OUT -t onnxruntime` for each of "), last
    assert last.count(".onnx") == 2
    assert "[no-kernel]" in out and "[unknown-domain]" in out  # reason codes
    # a folder is its .onnx files; a missing one makes it exit 2, the rest still checked
    code, out, err = run(capsys, "check", folder, tmp_path / "nope.onnx", "--no-confirm",
                         "--report", tmp_path / "many.md")
    assert code == 2 and "5 models: 1 runs on every target, 3 with findings, 1 could not " \
        "be checked" in out
    assert "no such file" in " ".join(out.split())
    report = (tmp_path / "many.md").read_text()  # a section per model, the summary first
    assert report.index("**5 models: 1 runs") < report.index("## `")
    assert report.count("\n## `") == 5 and "| `com.acme::Mystery(1)` | unknown-domain |" in report


def test_github_annotations(tmp_path, capsys):
    folder = _corpus_sample(tmp_path)
    code, out, _ = run(capsys, "check", folder, "--no-confirm", "--output-format", "github")
    lines = out.splitlines()
    # one line per finding group; an older onnxruntime adds one per ceiling, and the
    # export's ops above its opset are no-schema groups (how many: which ops are above it)
    ceilings = _ceiling_reasons()
    assert code == 1 and (len(lines) >= 3 + 2 + 1 + len(ceilings) if ceilings
                          else len(lines) == 3 + 2 + 1)
    for line in lines:  # ::LEVEL file=F,title=T::MESSAGE (properties escape ':' and ',')
        level, rest = line[2:].split(" ", 1)
        props, message = rest.split("::", 1)
        assert level in ("error", "warning") and message
        fields = dict(p.split("=", 1) for p in props.split(","))
        assert set(fields) == {"file", "title"} and ":" not in fields["title"]
    mystery = [line for line in lines if "Mystery" in line]
    assert len(mystery) == 1 and mystery[0].startswith("::error file=")
    assert "%3A%3ANhwcConv" in out and "unfixable.onnx" in mystery[0]


def test_junit_xml_parses(tmp_path, capsys):
    folder = _corpus_sample(tmp_path)
    code, out, _ = run(capsys, "check", folder, tmp_path / "nope.onnx", "--no-confirm",
                       "-t", "onnxruntime", "-t", "reference", "--output-format", "junit")
    root = ET.fromstring(out)
    assert root.tag == "testsuites" and code == 2
    code, out, _ = run(capsys, "check", folder, "--no-confirm", "-t", "onnxruntime", "-t",
                       "reference", "--json")
    failing = sum(not t["runs"] for m in json.loads(out)["models"] for t in m["targets"])
    cases = root.findall("testsuite/testcase")
    assert len(cases) == 4 * 2 + 1  # a case per model and target; one for the missing model
    assert int(root.get("tests")) == len(cases)
    failures = [c for c in cases if c.find("failure") is not None]
    assert int(root.get("failures")) == len(failures) == failing >= 3
    (error,) = [c for c in cases if c.find("error") is not None]
    assert "no such file" in error.find("error").get("message")
    runs = [c for c in cases if c.find("failure") is None and c.find("error") is None]
    assert ("runs.onnx", "reference") in {(Path(c.get("classname")).name, c.get("name"))
                                          for c in runs}
    assert all("x1 cannot run on" in c.find("failure").text for c in failures)


def test_sarif_validates_against_the_sarif_2_1_0_schema(tmp_path, capsys):
    folder = _corpus_sample(tmp_path)
    code, out, _ = run(capsys, "check", folder, "--no-confirm", "--output-format", "sarif")
    log = json.loads(out)
    schema = json.loads(SARIF_SCHEMA.read_text())
    jsonschema.Draft4Validator.check_schema(schema)
    jsonschema.Draft4Validator(schema).validate(log)
    assert log["version"] == "2.1.0" and code == 1
    (run_,) = log["runs"]
    rules = [r["id"] for r in run_["tool"]["driver"]["rules"]]
    ceilings = _ceiling_reasons()  # model-level findings of an older onnxruntime
    # above an older onnxruntime's opset, the export's newest ops have no schema there
    newer = ["no-schema"] if "opset-too-new" in ceilings else []
    assert rules == sorted({"no-kernel", "unknown-domain", *ceilings, *newer})
    results = run_["results"]
    # one per finding group (an older onnxruntime: see test_github_annotations)
    assert len(results) >= 6 + len(ceilings) if ceilings else len(results) == 6
    for r in results:
        assert rules[r["ruleIndex"]] == r["ruleId"]
        (loc,) = r["locations"]
        assert loc["physicalLocation"]["artifactLocation"]["uri"].endswith(".onnx")
        where = loc["logicalLocations"][0]["fullyQualifiedName"]
        assert where.startswith("graph/node") or (r["ruleId"] in ceilings and where == "model")
    mystery = [r for r in results if r["properties"]["op"] == "com.acme::Mystery(1)"]
    assert mystery[0]["level"] == "error" and mystery[0]["properties"]["remedies"] == []


def test_reports_are_written_for_check_rewrite_and_compare(tmp_path, capsys):
    from tests.test_reports import parse

    code, _, err = run(capsys, "check", FAILING, "--no-confirm", "--report", tmp_path / "c.md")
    assert code == 1 and "| `com.microsoft::NhwcConv(1)` | no-kernel |" in \
        (tmp_path / "c.md").read_text()
    out = tmp_path / "fixed.onnx"
    code, _, err = run(capsys, "rewrite", FAILING, "-o", out, "--report", tmp_path / "r.html")
    assert code == 0, err
    text = " ".join(parse((tmp_path / "r.html").read_text()).text)
    assert text.index("verified:") < text.index("Plan") and str(out) in text
    code, _, err = run(capsys, "compare", FAILING, out, "--report", tmp_path / "cmp.html")
    assert code == 0 and "Comparison: verified" in (tmp_path / "cmp.html").read_text()
    # never over an input, and only .html or .md
    copy = shutil.copy(FAILING, tmp_path / "in.onnx")
    before = Path(copy).read_bytes()
    code, _, err = run(capsys, "check", copy, "--report", copy)
    assert code == 2 and Path(copy).read_bytes() == before
    code, _, err = run(capsys, "check", copy, "--report", tmp_path / "r.txt")
    assert code == 2 and "name a .html or .md file" in err


def test_verbose_logs_the_stages_and_quiet_silences_them(capsys):
    import logging

    code, _, err = run(capsys, "-v", "check", FAILING, "--no-confirm")
    assert code == 1 and "INFO rewriter: check" in err and "3 finding(s)" in err
    code, _, err = run(capsys, "-q", "check", FAILING, "--no-confirm")
    assert "INFO" not in err
    logging.getLogger("rewriter").setLevel(logging.NOTSET)


@pytest.mark.slow
def test_check_over_the_corpus_folder_in_one_call(corpus, schema, capsys):
    """Every model of the shared corpus (subfolders too) checked by one call, in parallel."""
    code, out, err = run(capsys, "check", corpus, "--no-confirm", "--json")
    doc = valid(schema, out)
    files = sorted(str(p) for p in corpus.rglob("*.onnx"))
    assert sorted(m["model"] for m in doc["models"]) == files and len(files) > 40
    assert code == doc["exit_code"] == max(m["exit_code"] for m in doc["models"])
    assert not [m for m in doc["models"] if m.get("error")], err
    with_findings = [m for m in doc["models"] if not m["ok"]]
    assert with_findings and doc["summary"][0].startswith(f"{len(files)} models: ")
    assert f"of {len(with_findings)} with findings fixable: run `onnx-rewriter rewrite " \
        "MODEL -o OUT -t onnxruntime` for each of " in doc["summary"][1]


def test_check_hint_carries_the_users_targets_plugins_and_paths(tmp_path, capsys):
    copy = tmp_path / "my model.onnx"
    copy.write_bytes(Path(FAILING).read_bytes())
    code, out, err = run(capsys, "check", copy, "-t", "opset:13", "-t", "onnxruntime",
                         "--no-confirm")
    assert code == 1, err
    last = " ".join(out[out.index("1 of 1 with"):].split())
    out_path = tmp_path / "my model.rewritten.onnx"
    assert last == (f"1 of 1 with findings fixable: run `onnx-rewriter rewrite '{copy}' -o "
                    f"'{out_path}' -t opset:13 -t onnxruntime`")


def test_a_misspelt_target_gets_a_suggestion_and_ort_is_onnxruntime(capsys):
    code, _, err = run(capsys, "check", FAILING, "-t", "openvinoo", "--no-confirm")
    assert code == 2 and "did you mean 'openvino'?" in err and err.count("\n") == 1
    code, out, err = run(capsys, "check", FAILING, "-t", "ort", "--no-confirm")
    assert code == 1 and "✗ onnxruntime" in out, err


def test_explain_says_first_that_no_plugin_remedies_the_op(tmp_path, capsys):
    from onnx import TensorProto, helper

    # an op of the default domain no plugin knows (Crop was one before onnx-removed); a
    # name as short as Crop: the explanation line is wrapped at 80 columns under xdist
    graph = helper.make_graph(
        [helper.make_node("Zork", ["x"], ["y"], border=[1, 1, 1, 1])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 6, 6])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 7)])
    model.ir_version = 3
    source = tmp_path / "zork.onnx"
    onnx.save(model, source)
    code, out, err = run(capsys, "rewrite", source, "-o", tmp_path / "o.onnx", "-t", "opset:13",
                         "--explain")
    assert code == 1, err
    explained = out[out.index("explain ai.onnx::Zork"):].splitlines()
    assert explained[1].strip() == ("no plugin registers a remedy for ai.onnx::Zork (no "
                                    "decomposition, no kernel)")
    # the passes the finding is not about, in one (wrapped) line
    rest = " ".join(" ".join(explained[2:]).split())
    assert rest.startswith("passes that do not apply: ") and "opset-conversion" in rest
    assert rest.count("declined") == 0
    # the verdict line says what happened, without an empty verdict
    assert "✗ 1 finding(s) have no remedy; nothing was changed; nothing written" in out


def test_sarif_and_github_locations_are_relative_to_the_base_dir(tmp_path, capsys):
    folder = _corpus_sample(tmp_path)
    code, out, _ = run(capsys, "check", folder, "--no-confirm", "--output-format", "sarif",
                       "--base-dir", tmp_path)
    uris = {loc["physicalLocation"]["artifactLocation"]["uri"]
            for r in json.loads(out)["runs"][0]["results"] for loc in r["locations"]}
    # repository-relative, as code scanning wants: no scheme, no leading slash
    assert uris and all(u.startswith(f"{folder.name}/") and u.endswith(".onnx")
                        for u in uris), uris
    code, out, _ = run(capsys, "check", folder, "--no-confirm", "--output-format", "github",
                       "--base-dir", folder)
    files = {dict(p.split("=", 1) for p in line.split(" ", 1)[1].split("::")[0].split(","))
             ["file"] for line in out.splitlines()}
    assert files and all("/" not in f and f.endswith(".onnx") for f in files), files
