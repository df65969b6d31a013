"""One report model for every command: the data ``--json`` prints, with its schema version,
the tool's and the runtimes' versions. The JSON, HTML and Markdown renderers all read it
(``rewriter/report/schema.json`` describes it; the tests validate every command's output)."""

from __future__ import annotations

from importlib import metadata
from typing import Any

SCHEMA_VERSION = 1
COMMANDS = ("inspect", "check", "rewrite", "compare", "run", "plugins", "ops", "error")
_RUNTIMES = ("onnx", "onnxruntime", "onnxruntime-extensions", "openvino", "onnxscript",
             "onnx-ir")


def versions() -> dict[str, str | None]:
    """The installed version of each runtime the tool can use (None: not installed)."""
    out: dict[str, str | None] = {}
    for name in _RUNTIMES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def tool_version() -> str:
    try:
        return metadata.version("onnx-graph-rewriter")
    except metadata.PackageNotFoundError:  # run from a source tree that is not installed
        return "unknown"


def stage_times(stages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What :func:`rewriter.progress.timed` recorded, as a report shows it (milliseconds)."""
    return [{"stage": s["stage"], "seconds": round(s["seconds"], 3)} for s in stages]


def stage_rows(doc: dict[str, Any]) -> list[tuple[str, float | None]]:
    """(stage, seconds) for a report's time table: the document's ``stages`` (seconds None
    where normalized away), or, for ``compare`` without them, compare's own clock."""
    stages = doc.get("stages")
    if not stages and doc.get("command") == "compare" and "seconds" in doc:
        stages = [{"stage": "compare", "seconds": doc["seconds"]}]
    return [(s["stage"], s.get("seconds")) for s in stages or []]


def document(command: str, data: dict[str, Any] | list[Any],
             stages: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """``data`` (a command's result as a dict, or a list of rows) as a report document:
    ``schema_version``, ``command``, ``tool`` and ``runtimes`` first, then the data (a list
    goes under ``rows``), then ``stages`` when given (:func:`rewriter.progress.timed`)."""
    if command not in COMMANDS:
        raise ValueError(f"unknown command {command!r}")
    head = {"schema_version": SCHEMA_VERSION, "command": command,
            "tool": {"name": "onnx-rewriter", "version": tool_version()},
            "runtimes": versions()}
    tail = {"stages": stage_times(stages)} if stages is not None else {}
    if isinstance(data, list):
        return {**head, "rows": data, **tail}
    return {**head, **data, **tail}


def error_document(message: str, exit_code: int, **extra: Any) -> dict[str, Any]:
    """What ``--json`` prints when a command fails before it has a result (exit 2)."""
    return document("error", {"ok": False, "exit_code": exit_code, "error": message, **extra})


def regime_rows(comparison: dict[str, Any]) -> list[list[str]]:
    """(regime, sets, what happened, inputs) per input regime of a comparison document:
    ran (with a note, e.g. on the test data's own outputs), or skipped and why."""
    rows = []
    for r in comparison.get("regimes") or []:
        if r.get("status") == "skipped":
            state = f"skipped: {r.get('reason') or ''}"
        else:
            state = "ran" + (f"; {r['note']}" if r.get("note") else "")
            if r.get("not_compared"):
                state += "; not compared: " + ", ".join(r["not_compared"])
        rows.append([r["name"], str(r.get("sets", 0)), state, r.get("description", "")])
    return rows

