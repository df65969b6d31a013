"""A report document (:mod:`rewriter.report.document`) as Markdown (GitHub-flavoured tables),
e.g. for a pull-request comment or a CI job summary. The verdict comes first."""

from __future__ import annotations

from typing import Any

from rewriter.report.document import regime_rows, stage_rows
from rewriter.report.size import byte_text


def _cell(x: Any) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:.3g}"
    return str(x).replace("|", "\\|").replace("\n", " ")


def _table(head: list[str], rows: list[list[Any]]) -> list[str]:
    if not rows:
        return ["(none)", ""]
    return (["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
            + ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows] + [""])


def _comparison(c: dict[str, Any]) -> list[str]:
    out = [f"## Comparison: {c.get('verdict')}", "", _cell(c.get("summary")), "",
           f"Original evaluated on: **{c.get('oracle') or 'nothing'}**", ""]
    if c.get("regimes"):
        out += _table(["input regime", "sets", "", "inputs"], regime_rows(c))
    for t in c.get("targets") or []:
        where = t["target"] + (f" (run on {t['runtime']})"
                               if t.get("runtime") and t["runtime"] != t["target"] else "")
        out += [f"### {where}: {t['status']}", ""]
        if t.get("error"):
            out += [f"{t.get('error_kind')}: {_cell(t['error'])}", ""]
        out += _table(["output", "shape", "dtype", "max abs", "max rel", "mismatch", "cosine",
                       "ok"],
                      [[o["name"], o["shape"]["actual"], o["dtype"]["actual"], o["max_abs"],
                        o["max_rel"], f"{o['mismatch_fraction']:.2%}", o["cosine"],
                        "ok" if o["ok"] else f"differs: {o.get('detail') or ''}"]
                       for o in t.get("outputs") or []])
        loc = t.get("localization")
        if loc:
            out += [f"Localization: {_cell(loc.get('message'))}", ""]
    return out



def _size(doc: dict[str, Any], level: str) -> list[str]:
    """The model size table: input, and the output when there is one."""
    size = doc.get("size") or {}
    labels = (("input", "original"), ("output", "rewritten")) if doc.get("command") == \
        "compare" else (("input", "input"), ("output", "output"))
    columns = [(label, size[key]) for key, label in labels if size.get(key)]
    if not columns:
        return []
    return [f"{level} Model size", ""] + _table(
        ["", *(key for key, _ in columns)],
        [["nodes", *(f"{s['nodes']:,}" for _, s in columns)],
         ["initializer bytes", *(byte_text(s.get("initializer_bytes")) for _, s in columns)],
         ["file bytes (external data included)",
          *(byte_text(s.get("file_bytes")) for _, s in columns)]])


def _stages(doc: dict[str, Any], level: str) -> list[str]:
    """Time per stage, with the total (durations left out of the committed examples)."""
    stages = stage_rows(doc)
    if not stages:
        return []
    rows = [[name, f"{t:.3f}" if t is not None else "-"] for name, t in stages]
    if all(t is not None for _, t in stages):
        rows.append(["**total**", f"**{sum(t for _, t in stages):.3f}**"])
    note = ([] if all(t is not None for _, t in stages) else
            ["-: no duration in the document (the committed examples leave durations out)",
             ""])
    return [f"{level} Time per stage", "", *note] + _table(["stage", "seconds"], rows)


def _picture(picture: dict[str, Any] | None) -> list[str]:
    """The replaced node and the nodes that replaced it, as a table (the HTML draws it)."""
    if not picture:
        return []
    rule = f" by `{picture['rule']}`" if picture.get("rule") else ""
    shown = picture["total"] if len(picture["nodes"]) == picture["total"] else \
        f"{picture['total']} (the first {len(picture['nodes'])} listed)"
    return (["## Rewritten subgraph", "",
             f"`{picture['name'] or '(no name)'}` (`{picture['op']}`, reads "
             f"{', '.join(picture['inputs']) or 'nothing'}; computes "
             f"{', '.join(picture['outputs'])}) was replaced{rule} with {shown} node(s):", ""]
            + _table(["node", "op", "reads", "computes"],
                     [[f"`{n['name']}`" if n["name"] else "-", f"`{n['op']}`",
                       ", ".join(i or "''" for i in n["inputs"]), ", ".join(n["outputs"])]
                      for n in picture["nodes"]]))


def _check(doc: dict[str, Any], level: str) -> list[str]:
    """One model's ``check``: its verdict, then a table of finding groups per target."""
    n = sum(len(t.get("findings") or []) for t in doc.get("targets") or [])
    out = [f"**{'every target runs the model' if doc.get('ok') else f'{n} finding(s)'}**", ""]
    for t in doc.get("targets") or []:
        out += [f"{level} {t['target']}: {'runs' if t.get('runs') else 'findings'}", ""]
        out += _table(["op", "code", "nodes", "why", "where", "remedy"],
                      [[f"`{g['op']}`", g["reason"], g["count"], g["detail"],
                        ", ".join(g["paths"][:3]),
                        "; ".join(g.get("remedies") or [])
                        or f"none ({g.get('no_remedy') or 'none installed'})"]
                       for g in t.get("groups") or []])
    return out


def to_markdown(doc: dict[str, Any]) -> str:
    """The Markdown for a ``check``, ``rewrite`` or ``compare`` document."""
    command = doc.get("command", "")
    model = (doc.get("model") or doc.get("original") or doc.get("rewritten")
             or f"{len(doc.get('models') or [])} models")
    out = [f"# onnx-rewriter {command}: `{model}`", ""]
    if command == "check" and "models" in doc:
        out += [f"**{line}**" for line in doc.get("summary") or []] + [""]
        for m in doc.get("models") or []:
            out += [f"## `{m['model']}`", ""]
            out += ([f"error: {_cell(m['error'])}", ""] if m.get("error")
                    else _check(m, "###") + _size(m, "###") + _stages(m, "###"))
    elif command == "check":
        out += _check(doc, "##")
    elif command == "rewrite":
        out += [f"**{doc.get('verdict') or 'plan only'}**: {_cell(doc.get('verdict_reason'))}",
                ""]
        if doc.get("output"):
            out += [f"Written to `{doc['output']}`.", ""]
        out += ["## Plan", ""] + _table(
            ["op", "remedy", "plugin", "rule", "nodes"],
            [[f"`{a['op']}`", a["kind"], a["plugin"], a["rule"], a["nodes"]]
             for a in doc.get("applied") or []])
        if doc.get("interface"):
            out += ["## Interface changed (--adapt-interface)", ""] + \
                [f"- {_cell(line)}" for line in doc["interface"]] + [""]
        out += _picture(doc.get("picture"))
        before = (doc.get("before") or {}).get("ops") or {}
        after = (doc.get("after") or {}).get("ops") or {}
        out += ["## Operators before and after", ""] + _table(
            ["op", "before", "after"],
            [[f"`{op}`", before.get(op, 0), after.get(op, 0)]
             for op in sorted(set(before) | set(after))])
        out += ["## Structural checks", ""] + _table(
            ["check", "result"],
            [[k, v] for k, v in (doc.get("verification") or {}).items() if k != "compare"])
        if doc.get("remaining"):
            out += ["## Findings left", ""] + _table(
                ["target", "op", "why"],
                [[f["target"], f"`{f['domain']}::{f['op_type']}`", f["detail"]]
                 for f in doc["remaining"]])
        if doc.get("compare"):
            out += _comparison(doc["compare"])
    elif command == "compare":
        out += [f"**{doc.get('verdict')}**", ""] + _comparison(doc)
    if not (command == "check" and "models" in doc):
        out += _size(doc, "##") + _stages(doc, "##")
    tool = doc.get("tool") or {}
    out += ["---", f"{tool.get('name', '')} {tool.get('version', '')}, report schema "
            f"{doc.get('schema_version')}", ""]
    return "\n".join(out)
