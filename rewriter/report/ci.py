"""``check``'s findings in the formats CI systems read: GitHub workflow-command annotations,
JUnit XML (one test case per model and target) and SARIF 2.1.0 (one result per finding
group, its rule the reason code). Each takes the ``check`` documents of the models
(:func:`rewriter.report.render.check_as_dict`; a model that could not be checked has
``error``)."""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rewriter.detect.targets import REASONS

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"


def _groups(doc: dict[str, Any]) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    for t in doc.get("targets") or []:
        for g in t.get("groups") or []:
            yield t, g


def _message(target: dict[str, Any], g: dict[str, Any]) -> str:
    remedy = ("; ".join(g["remedies"]) if g["remedies"]
              else f"none ({g.get('no_remedy') or 'no installed plugin offers one'})")
    where = ", ".join(g["paths"][:3]) + (f" and {g['count'] - 3} more" if g["count"] > 3 else "")
    return (f"{g['op']} x{g['count']} cannot run on {target['target']} [{g['reason']}]: "
            f"{g['detail']} (at {where}; remedy: {remedy})")


# -- GitHub -------------------------------------------------------------------------------------

def _escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


def repository_path(path: str, base_dir: str | os.PathLike | None = None) -> str:
    """``path`` relative to ``base_dir`` (default: the current folder), in POSIX form, as
    code scanning and workflow annotations want it; an absolute path when it lies outside
    that folder."""
    base = Path(base_dir if base_dir is not None else os.getcwd()).resolve()
    resolved = Path(path).resolve()
    try:
        return resolved.relative_to(base).as_posix()
    except ValueError:
        return resolved.as_posix()


def github_lines(docs: list[dict[str, Any]], base_dir=None) -> list[str]:
    """One workflow command per finding group: ``::error`` when ``rewrite`` has no remedy
    for it, ``::warning`` when it has (``rewrite`` fixes it); ``::error`` for a model that
    could not be checked. Files are named relative to ``base_dir`` (the repository's root;
    default: the current folder)."""
    lines = []
    for doc in docs:
        file = _escape_property(repository_path(doc["model"], base_dir))
        if doc.get("error"):
            lines.append(f"::error file={file},title={_escape_property('onnx-rewriter: error')}"
                         f"::{_escape_data(doc['error'])}")
            continue
        for t, g in _groups(doc):
            level = "warning" if g["remedies"] else "error"
            title = _escape_property(f"onnx-rewriter {g['reason']}: {g['op']} on {t['target']}")
            lines.append(f"::{level} file={file},title={title}::{_escape_data(_message(t, g))}")
    return lines


# -- JUnit ------------------------------------------------------------------------------------

def junit_xml(docs: list[dict[str, Any]]) -> str:
    """A JUnit XML report: a test suite per model, a test case per target (failed: the
    target cannot run the model; error: the model could not be checked)."""
    suites = ET.Element("testsuites", name="onnx-rewriter check")
    totals = {"tests": 0, "failures": 0, "errors": 0}
    for doc in docs:
        suite = ET.SubElement(suites, "testsuite", name=doc["model"])
        counts = {"tests": 0, "failures": 0, "errors": 0}
        if doc.get("error"):
            case = ET.SubElement(suite, "testcase", classname=doc["model"], name="load")
            ET.SubElement(case, "error", message=doc["error"], type="error").text = doc["error"]
            counts["tests"] += 1
            counts["errors"] += 1
        for t in doc.get("targets") or []:
            case = ET.SubElement(suite, "testcase", classname=doc["model"], name=t["target"])
            counts["tests"] += 1
            if not t["runs"]:
                counts["failures"] += 1
                n = len(t["findings"])
                failure = ET.SubElement(
                    case, "failure", type="findings",
                    message=f"{n} node(s) {t['target']} cannot run, in {len(t['groups'])} "
                    "group(s)")
                failure.text = "\n".join(_message(t, g) for g in t["groups"])
        for key, value in counts.items():
            suite.set(key, str(value))
            totals[key] += value
    for key, value in totals.items():
        suites.set(key, str(value))
    ET.indent(suites)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suites, "unicode") + "\n"


# -- SARIF ------------------------------------------------------------------------------------

def sarif(docs: list[dict[str, Any]], tool_version: str, base_dir=None) -> dict[str, Any]:
    """A SARIF 2.1.0 log: one run, rules = the reason codes, one result per finding group
    (level ``error`` without a remedy, ``warning`` with one), located in the model file
    (relative to ``base_dir``, the repository's root; default: the current folder, as code
    scanning wants) with the node paths as logical locations; models that could not be
    checked are ``toolExecutionNotifications``."""
    codes = sorted({g["reason"] for d in docs for _, g in _groups(d)})
    rules = [{"id": code, "name": code,
              "shortDescription": {"text": REASONS.get(code, code)}} for code in codes]
    index = {code: i for i, code in enumerate(codes)}
    results, notes = [], []
    for doc in docs:
        location = {"physicalLocation": {"artifactLocation": {
            "uri": _uri(repository_path(doc["model"], base_dir))}}}
        if doc.get("error"):
            notes.append({"level": "error", "message": {"text": doc["error"]},
                          "locations": [location]})
            continue
        for t, g in _groups(doc):
            results.append({
                "ruleId": g["reason"], "ruleIndex": index[g["reason"]],
                "level": "warning" if g["remedies"] else "error",
                "message": {"text": _message(t, g)},
                "locations": [{**location, "logicalLocations": [
                    {"fullyQualifiedName": p, "name": g["op_type"]} for p in g["paths"]]}],
                "properties": {"target": t["target"], "op": g["op"], "count": g["count"],
                               "remedies": g["remedies"]},
            })
    return {
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {"name": "onnx-rewriter", "version": tool_version,
                                "rules": rules}},
            "invocations": [{"executionSuccessful": not notes,
                             "toolExecutionNotifications": notes}],
            "results": results,
        }],
    }


def _uri(path: str) -> str:
    """A model path as a SARIF artifact URI (relative paths stay relative)."""
    from pathlib import PurePath
    from urllib.parse import quote

    p = PurePath(path)
    return p.as_uri() if p.is_absolute() else quote(p.as_posix())
