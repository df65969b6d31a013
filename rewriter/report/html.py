"""A report document (:mod:`rewriter.report.document`) as one self-contained HTML page:
inline CSS and SVG, no script, nothing fetched. The verdict comes first."""

from __future__ import annotations

import math
from html import escape
from typing import Any

from rewriter.report.document import stage_rows
from rewriter.report.size import byte_text

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


def _bin_bounds(i: int, count: int) -> tuple[float, float]:
    """(lower, upper) |error| of bin ``i`` of compare's error histogram: exactly 0, at most
    1e-12, per decade up to 1e2, above 1e2 (rewriter.comparison.compare.ERROR_BINS)."""
    if i == 0:
        return 0.0, 0.0
    if i == count - 1:
        return 1e2, math.inf
    return (0.0 if i == 1 else 10.0 ** (i - 14)), 10.0 ** (i - 13)


def error_chart(outputs: list[dict[str, Any]]) -> str:
    """Per output, how its elements' absolute errors are distributed (the comparison's
    ``error_histogram``): a bar per bin (exactly 0, at most 1e-12, per decade up to 1e2,
    above), its height the bin's share of the row's fullest bin; green where every error
    in the bin is within atol, red where none is, amber between; a tick marks atol.
    Empty when no output has a histogram."""
    rows = [o for o in outputs if o.get("error_histogram")]
    if not rows:
        return ""
    label_w, col, row_h, bar_h = 140, 22, 48, 34
    bins = len(rows[0]["error_histogram"])

    def x(value: float) -> float:  # where |error| = value falls on the decade axis
        return label_w + col * (min(max(math.log10(value), -13.0), 2.0) + 14)

    height = 10 + len(rows) * row_h + 14
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{label_w + col * bins + 12}" '
             f'height="{height}" role="img" aria-label="absolute error per output">']
    for decade in range(-12, 3, 2):
        gx = x(10.0 ** decade)
        parts.append(f'<line x1="{gx:.0f}" y1="4" x2="{gx:.0f}" y2="{height - 12}" '
                     'stroke="#eee"/>')
        parts.append(f'<text x="{gx:.0f}" y="{height - 2}" font-size="9" '
                     f'text-anchor="middle" fill="#57606a">1e{decade}</text>')
    parts.append(f'<text x="{label_w + col / 2:.0f}" y="{height - 2}" font-size="9" '
                 'text-anchor="middle" fill="#57606a">0</text>')
    for r, o in enumerate(rows):
        counts = o["error_histogram"]
        total, top = sum(counts) or 1, max(counts) or 1
        base = 10 + r * row_h + bar_h
        atol = o.get("atol") or 0.0
        parts.append(f'<text x="0" y="{base - bar_h / 2 + 4:.0f}" font-size="11">'
                     f'{escape(_fit(str(o["name"]), 22))}</text>')
        parts.append(f'<line x1="{label_w}" y1="{base}" x2="{label_w + col * bins}" '
                     f'y2="{base}" stroke="#d0d7de"/>')
        for i, n in enumerate(counts):
            if not n:
                continue
            lo, hi = _bin_bounds(i, bins)
            color = "#34a853" if hi <= atol else "#d93025" if lo >= atol else "#f9ab00"
            h = max(1.0, bar_h * n / top)
            span = "0" if i == 0 else f"> {lo:g}" if i == bins - 1 else f"{lo:g} to {hi:g}"
            parts.append(f'<rect x="{label_w + col * i + 2}" y="{base - h:.1f}" '
                         f'width="{col - 4}" height="{h:.1f}" fill="{color}"><title>'
                         f'{n:,} of {total:,} elements ({n / total:.2%}): |error| {span}'
                         '</title></rect>')
        if atol > 0:
            tx = x(atol)
            parts.append(f'<line x1="{tx:.1f}" y1="{base - bar_h - 2}" x2="{tx:.1f}" '
                         f'y2="{base + 3}" stroke="#1b1f24" stroke-width="2" '
                         f'stroke-dasharray="3,2"><title>atol {_num(atol)}</title></line>')
    parts.append("</svg>")
    return "".join(parts)


def _fit(text: str, n: int = 20) -> str:
    return text if len(text) <= n else text[:n - 1] + "…"


def subgraph_svg(picture: dict[str, Any]) -> str:
    """The replaced node (left) and the nodes that replaced it (right), each as a layered
    graph: the values read on top, a row per depth, the values computed at the bottom;
    an edge per value from its producer (or the value read) to each node reading it."""
    box_w, box_h, gap_x, gap_y, pad = 150, 28, 14, 30, 10

    def layout(nodes: list[dict[str, Any]], outputs: list[str]):
        made = {o: i for i, n in enumerate(nodes) for o in n["outputs"] if o}
        reads = list(dict.fromkeys(i for n in nodes for i in n["inputs"]
                                   if i and i not in made))
        depth: list[int] = []
        for n in nodes:
            depth.append(1 + max([depth[made[i]] for i in n["inputs"] if i in made],
                                 default=0))
        # a node reading nothing made here (a Constant) sits just above its first reader
        for k in range(len(nodes) - 1, -1, -1):
            if not any(i in made for i in nodes[k]["inputs"]):
                readers = [depth[j] for j, m in enumerate(nodes)
                           if any(made.get(i) == k for i in m["inputs"])]
                if readers:
                    depth[k] = max(depth[k], min(readers) - 1)
        rows: list[list[tuple[str, Any]]] = [[("value", v) for v in reads]]
        for d in range(1, max(depth, default=0) + 1):
            rows.append([("node", i) for i, k in enumerate(depth) if k == d])
        rows.append([("value", o) for o in outputs if o])
        return rows, made

    def panel(x0: float, title: str, nodes, outputs) -> tuple[list[str], float, float]:
        rows, made = layout(nodes, outputs)
        width = max(len(r) for r in rows) * (box_w + gap_x) - gap_x
        parts = [f'<text x="{x0:.0f}" y="14" font-size="12" font-weight="600">'
                 f'{escape(title)}</text>']
        where: dict[tuple[str, Any], tuple[float, float]] = {}
        for r, row in enumerate(rows):
            y = 24 + r * (box_h + gap_y)
            offset = x0 + (width - (len(row) * (box_w + gap_x) - gap_x)) / 2
            for k, item in enumerate(row):
                x = offset + k * (box_w + gap_x)
                where[item] = (x, y)
        def edge(src: tuple[float, float], dst: tuple[float, float], value: str) -> str:
            x1, y1 = src[0] + box_w / 2, src[1] + box_h
            x2, y2 = dst[0] + box_w / 2, dst[1]
            if y2 - y1 <= gap_y + 1:  # to the next row: straight
                tag, shape = "line", f'x1="{x1:.0f}" y1="{y1:.0f}" x2="{x2:.0f}" y2="{y2:.0f}"'
            else:  # past rows between: around their boxes, on the source's side
                side = (min(x1, x2) - box_w / 2 - 14 if x1 <= x2
                        else max(x1, x2) + box_w / 2 + 14)
                tag, shape = "path", (f'fill="none" d="M{x1:.0f},{y1:.0f} C{side:.0f},'
                                      f'{y1 + gap_y:.0f} {side:.0f},{y2 - gap_y:.0f} '
                                      f'{x2:.0f},{y2:.0f}"')
            return (f'<{tag} {shape} stroke="#8c959f" marker-end="url(#arrow)">'
                    f'<title>{escape(value)}</title></{tag}>')

        # edges first, under the boxes
        for i, n in enumerate(nodes):
            for v in n["inputs"]:
                if v:
                    src = ("node", made[v]) if v in made else ("value", v)
                    parts.append(edge(where[src], where[("node", i)], v))
        for o in outputs:
            if o in made and ("value", o) in where:
                parts.append(edge(where[("node", made[o])], where[("value", o)], o))
        for (kind, key), (x, y) in where.items():
            if kind == "value":
                parts.append(f'<g class="value"><rect x="{x:.0f}" y="{y + 3:.0f}" '
                             f'width="{box_w}" height="{box_h - 6}" rx="10" fill="#f6f8fa" '
                             f'stroke="#d0d7de"/><text x="{x + box_w / 2:.0f}" '
                             f'y="{y + box_h / 2 + 4:.0f}" font-size="11" text-anchor="middle" '
                             f'fill="#57606a">{escape(_fit(key))}</text>'
                             f'<title>{escape(key)}</title></g>')
            else:
                n = nodes[key]
                domain, _, op_type = n["op"].rpartition("::")
                label = (f'<text x="{x + box_w / 2:.0f}" y="{y + box_h / 2 + 4:.0f}" '
                         f'font-size="12" text-anchor="middle">{escape(_fit(op_type))}</text>')
                if domain not in ("", "ai.onnx"):  # a vendor op: its domain under its name
                    label = (f'<text x="{x + box_w / 2:.0f}" y="{y + 12:.0f}" font-size="12" '
                             f'text-anchor="middle">{escape(_fit(op_type))}</text>'
                             f'<text x="{x + box_w / 2:.0f}" y="{y + 23:.0f}" font-size="9" '
                             f'text-anchor="middle" fill="#57606a">{escape(_fit(domain, 26))}'
                             '</text>')
                parts.append(f'<g class="node"><rect x="{x:.0f}" y="{y:.0f}" width="{box_w}" '
                             f'height="{box_h}" rx="4" fill="#ddf4ff" stroke="#0969da"/>{label}'
                             f'<title>{escape(n["name"] or "(no name)")}: {escape(n["op"])}'
                             f'</title></g>')
        height = 24 + len(rows) * (box_h + gap_y) - gap_y
        return parts, width, height

    original = {k: picture[k] for k in ("name", "op", "inputs", "outputs")}
    left, lw, lh = panel(pad, "before", [original], picture["outputs"])
    right, rw, rh = panel(pad + lw + 60, f"after ({picture['total']} nodes)",
                          picture["nodes"], picture["outputs"])
    width, height = pad + lw + 60 + rw + 40, max(lh, rh) + pad
    arrow_y = min(lh, rh) / 2 + 12
    return "".join([
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
        f'viewBox="0 0 {width:.0f} {height:.0f}" style="max-width:100%;height:auto" '
        'role="img" aria-label="the replaced node and the nodes that replaced it">',
        '<defs><marker id="arrow" viewBox="0 0 8 8" refX="8" refY="4" markerWidth="6" '
        'markerHeight="6" orient="auto"><path d="M0,0 L8,4 L0,8 z" fill="#8c959f"/></marker>'
        '</defs>', *left,
        f'<text x="{pad + lw + 30:.0f}" y="{arrow_y:.0f}" font-size="22" text-anchor="middle" '
        'fill="#57606a">→</text>', *right, "</svg>"])


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
          a["nodes"]] for a in doc.get("applied") or []], numeric={4}),
        _picture(doc.get("picture"))]
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
