"""A report document (:mod:`rewriter.report.document`) as one self-contained HTML page:
inline CSS and SVG, no script, nothing fetched. The verdict comes first."""

from __future__ import annotations

from html import escape
from typing import Any

from rewriter.report.document import regime_rows, stage_rows
from rewriter.report.size import byte_text
from rewriter.report.svg import error_chart, subgraph_svg

_CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,sans-serif;margin:2em auto;max-width:72em;
padding:0 1em;color:#1b1f24}
h1{font-size:1.3em;word-break:break-all}h2{font-size:1.1em;margin-top:1.6em}
.verdict{padding:.8em 1em;border-radius:6px;font-weight:600}
.ok{background:#e6f4ea;border:1px solid #34a853}.bad{background:#fce8e6;border:1px solid #d93025}
.warn{background:#fef7e0;border:1px solid #f9ab00}
table{border-collapse:collapse;margin:.5em 0;width:100%}
th,td{border-bottom:1px solid #ddd;padding:.3em .5em;text-align:left;vertical-align:top}
th{background:#f6f8fa}td.n{text-align:right;font-variant-numeric:tabular-nums}
code{font:12px ui-monospace,Menlo,Consolas,monospace;word-break:break-all}
.muted{color:#57606a}footer{margin-top:2em;font-size:12px;color:#57606a}
"""

_GOOD = {"verified", "unchanged", "equal"}
_WARN = {"unverified", "error"}


def _cls(verdict: str | None) -> str:
    if verdict in _GOOD:
        return "ok"
    return "warn" if verdict in _WARN else "bad"


def _num(x: Any) -> str:
    if x is None:
        return "-"
    if isinstance(x, str):
        return escape(x)
    return f"{x:.3g}" if isinstance(x, float) else str(x)


def _table(head: list[str], rows: list[list[Any]], numeric: set[int] = frozenset()) -> str:
    if not rows:
        return '<p class="muted">none</p>'
    out = ["<table><thead><tr>", *(f"<th>{escape(h)}</th>" for h in head), "</tr></thead><tbody>"]
    for row in rows:
        out.append("<tr>" + "".join(
            f'<td class="n">{_num(c)}</td>' if i in numeric else f"<td>{c}</td>"
            for i, c in enumerate(row)) + "</tr>")
    out.append("</tbody></table>")
    return "".join(out)


def _code(text: Any) -> str:
    return f"<code>{escape(str(text))}</code>"


def _picture(picture: dict[str, Any] | None) -> str:
    if not picture:
        return ""
    rule = f" by {_code(picture['rule'])}" if picture.get("rule") else ""
    shown = picture["total"] if len(picture["nodes"]) == picture["total"] else \
        f"{picture['total']} (the first {len(picture['nodes'])} drawn)"
    return (f"<h2>Rewritten subgraph</h2><p>{_code(picture['name'] or '(no name)')} "
            f"({_code(picture['op'])}) was replaced{rule} with {shown} node(s):</p>"
            + subgraph_svg(picture))



def _size(doc: dict[str, Any]) -> str:
    """The model size table: input, and the output when there is one."""
    size = doc.get("size") or {}
    labels = (("input", "original"), ("output", "rewritten")) if doc.get("command") == \
        "compare" else (("input", "input"), ("output", "output"))
    columns = [(label, size[key]) for key, label in labels if size.get(key)]
    if not columns:
        return ""
    rows = [[what, *(fmt(s.get(key)) for _, s in columns)]
            for what, key, fmt in (("nodes", "nodes", lambda n: f"{n:,}" if n is not None
                                    else "-"),
                                   ("initializer bytes", "initializer_bytes", byte_text),
                                   ("file bytes (external data included)", "file_bytes",
                                    byte_text))]
    return "<h2>Model size</h2>" + _table(["", *(label for label, _ in columns)], rows,
                                           numeric=set(range(1, len(columns) + 1)))


def _stages(doc: dict[str, Any]) -> str:
    """Time per stage, with the total (durations left out of the committed examples)."""
    stages = stage_rows(doc)
    if not stages:
        return ""
    rows = [[escape(name), f"{t:.3f}" if t is not None else "-"] for name, t in stages]
    if all(t is not None for _, t in stages):
        rows.append(["<b>total</b>", f"{sum(t for _, t in stages):.3f}"])
    note = ('' if all(t is not None for _, t in stages) else
            '<p class="muted">-: no duration in the document (the committed examples leave '
            'durations out)</p>')
    return "<h2>Time per stage</h2>" + note + _table(["stage", "seconds"], rows, numeric={1})


def _comparison(c: dict[str, Any]) -> str:
    out = [f"<h2>Comparison: {escape(c.get('verdict') or '')}</h2>",
           f"<p>{escape(c.get('summary') or '')}</p>"]
    oracle = c.get("oracle")
    out.append(f"<p>Original evaluated on: <b>{escape(oracle or 'nothing')}</b></p>")
    attempts = [[escape(a.get("target", "")), escape(a.get("status", "")),
                 escape(a.get("error") or a.get("note") or "")]
                for a in c.get("oracle_attempts") or []]
    if attempts:
        out.append("<details><summary>runtimes tried for the original</summary>"
                   + _table(["runtime", "status", "why"], attempts) + "</details>")
    inputs = c.get("inputs") or {}
    if inputs:
        shapes = ", ".join(f"{k}: {v}" for k, v in (inputs.get("shapes") or {}).items())
        out.append(f"<p>Inputs: {inputs.get('sets', 0)} set(s), "
                   f"{escape(str(inputs.get('source', '')))}; {_code(shapes)}</p>")
    regimes = regime_rows(c)
    if regimes:
        out.append(_table(["input regime", "sets", "", "inputs"],
                          [[escape(x) for x in row] for row in regimes]))
    for t in c.get("targets") or []:
        where = t["target"] + (f" (run on {t['runtime']})"
                               if t.get("runtime") and t["runtime"] != t["target"] else "")
        out.append(f"<h3>{escape(where)}: {escape(t['status'])}</h3>")
        if t.get("error"):
            out.append(f"<p>{escape(t.get('error_kind') or '')}: {escape(t['error'])}</p>")
        rows = [[escape(o["name"]), escape(str(o["shape"]["actual"])),
                 escape(o["dtype"]["actual"]), o["max_abs"], o["max_rel"],
                 f"{o['mismatch_fraction']:.2%}", o["cosine"],
                 "ok" if o["ok"] else f"<b>differs</b> {escape(o.get('detail') or '')}"]
                for o in t.get("outputs") or []]
        out.append(_table(["output", "shape", "dtype", "max abs", "max rel", "mismatch",
                           "cosine", ""], rows, numeric={3, 4, 5, 6}))
        chart = error_chart(t.get("outputs") or [])
        if chart:
            out.append('<p class="muted">Absolute error per output: elements per size of '
                       '|error| (hover a bar for its count); dashed: atol</p>' + chart)
        loc = t.get("localization")
        if loc:
            out.append(f"<p><b>Localization:</b> {escape(loc.get('message') or '')}</p>")
    return "".join(out)


def _check(doc: dict[str, Any]) -> str:
    out = []
    for t in doc.get("targets") or []:
        state = "runs" if t.get("runs") else f"{len(t.get('findings') or [])} finding(s)"
        out.append(f"<h2>{escape(t['target'])}: {escape(state)}</h2>")
        if t.get("confirmation"):
            out.append(f'<p class="muted">{escape(t["confirmation"])}</p>')
        rows = [[_code(g["op"]), _code(g["reason"]), g["count"], escape(g["detail"]),
                 "<br>".join(_code(p) for p in g["paths"][:3])
                 + (f" (and {g['count'] - 3} more)" if g["count"] > 3 else ""),
                 escape("; ".join(g.get("remedies") or [])
                        or f"none ({g.get('no_remedy') or 'none installed'})")]
                for g in t.get("groups") or []]
        if rows:
            out.append(_table(["op", "code", "nodes", "why", "where", "remedy"], rows,
                              numeric={2}))
    return "".join(out)


def _rewrite(doc: dict[str, Any]) -> str:
    out = ["<h2>Plan</h2>", _table(
        ["op", "remedy", "plugin", "rule", "nodes"],
        [[_code(a["op"]), escape(a["kind"]), escape(a["plugin"]), escape(a["rule"]),
          a["nodes"]] for a in doc.get("applied") or []], numeric={4})]
    if doc.get("interface"):
        out.append("<h2>Interface changed (--adapt-interface)</h2><ul>" + "".join(
            f"<li>{escape(line)}</li>" for line in doc["interface"]) + "</ul>")
    out.append(_picture(doc.get("picture")))
    before = (doc.get("before") or {}).get("ops") or {}
    after = (doc.get("after") or {}).get("ops") or {}
    if before or after:
        out.append(f"<h2>Operators before and after</h2><p>nodes: "
                   f"{(doc.get('before') or {}).get('nodes', '-')} → "
                   f"{(doc.get('after') or {}).get('nodes', '-')}</p>")
        out.append(_table(["op", "before", "after"],
                          [[_code(op), before.get(op, 0), after.get(op, 0)]
                           for op in sorted(set(before) | set(after))], numeric={1, 2}))
    checks = [[escape(k), escape(v)] for k, v in (doc.get("verification") or {}).items()
              if k != "compare"]
    out += ["<h2>Structural checks</h2>", _table(["check", "result"], checks)]
    remaining = doc.get("remaining") or []
    if remaining:
        out.append("<h2>Findings left</h2>" + _table(
            ["target", "op", "why", "where"],
            [[escape(f["target"]), _code(f"{f['domain']}::{f['op_type']}"),
              escape(f["detail"]), _code(f["path"])] for f in remaining]))
    if doc.get("compare"):
        out.append(_comparison(doc["compare"]))
    return "".join(out)


def _check_many(doc: dict[str, Any]) -> str:
    """``check`` of many models: a section per model (its error, or its targets)."""
    out = []
    for m in doc.get("models") or []:
        out.append(f"<h2>{_code(m['model'])}</h2>")
        if m.get("error"):
            out.append(f'<div class="verdict bad">error: {escape(m["error"])}</div>')
        else:
            out.append((_check(m) + _size(m) + _stages(m))
                       .replace("<h2>", "<h3>").replace("</h2>", "</h3>"))
    return "".join(out)


def _banner(doc: dict[str, Any]) -> tuple[str, str]:
    command = doc.get("command")
    if command == "check" and "models" in doc:
        return ("ok" if doc.get("ok") else "bad"), "; ".join(doc.get("summary") or [])
    if command == "check":
        ok = doc.get("ok")
        n = sum(len(t.get("findings") or []) for t in doc.get("targets") or [])
        return ("ok" if ok else "bad",
                "every target runs the model" if ok else f"{n} finding(s)")
    if command == "error":
        return "bad", f"error: {doc.get('error')}"
    verdict = doc.get("verdict") or ("plan only" if doc.get("dry_run") else "")
    reason = doc.get("verdict_reason") or doc.get("summary") or ""
    return _cls(verdict), f"{verdict}: {reason}"


def to_html(doc: dict[str, Any]) -> str:
    """The page for a ``check``, ``rewrite`` or ``compare`` document."""
    command = doc.get("command", "")
    model = (doc.get("model") or doc.get("original") or doc.get("rewritten")
             or f"{len(doc.get('models') or [])} models")
    cls, text = _banner(doc)
    body = {"check": _check_many if "models" in doc else _check, "rewrite": _rewrite,
            "compare": _comparison}.get(command, lambda d: "")(doc)
    output = doc.get("output")
    tool = doc.get("tool") or {}
    runtimes = ", ".join(f"{k} {v}" for k, v in (doc.get("runtimes") or {}).items() if v)
    return (
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<title>onnx-rewriter {escape(command)}: {escape(str(model))}</title>"
        f"<style>{_CSS}</style></head><body>"
        f"<h1>onnx-rewriter {escape(command)} — {escape(str(model))}</h1>"
        f'<div class="verdict {cls}">{escape(text)}</div>'
        + (f"<p>Written to {_code(output)}</p>" if output else "")
        + body + _size(doc) + _stages(doc)
        + f"<footer>{escape(tool.get('name', ''))} {escape(str(tool.get('version', '')))}; "
        f"{escape(runtimes)}; report schema {doc.get('schema_version')}</footer>"
        "</body></html>\n")
