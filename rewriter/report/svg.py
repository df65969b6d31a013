"""The report's inline SVG pictures (no script, nothing fetched): the error distribution
per output and the replaced node with the nodes that replaced it."""

from __future__ import annotations

import math
from html import escape
from typing import Any


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
                         f'stroke-dasharray="3,2"><title>atol {atol:.3g}</title></line>')
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
