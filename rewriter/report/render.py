"""Render results for people (rich tables) and for programs (JSON)."""

from __future__ import annotations

import json
from typing import Any

from rewriter.detect.targets import REASONS
from rewriter.detect.walker import CheckReport, group_findings
from rewriter.errors import one_line
from rewriter.graph.opid import domain_label

MAX_PATHS_SHOWN = 3


def _console(stream=None):
    from rich.console import Console

    return Console(file=stream, highlight=False, soft_wrap=True)


def check_as_dict(report: CheckReport, registry=None) -> dict[str, Any]:
    return {
        "model": report.model_path,
        "ok": report.ok,
        "targets": [
            {
                "target": r.target,
                "description": r.description,
                "runs": r.runs,
                "confirmed": r.confirmed,
                "confirmation": r.confirmation or None,
                "findings": [f.as_dict() for f in r.findings],
                "groups": [
                    {
                        "op": g.op_label,
                        "domain": domain_label(g.domain),
                        "op_type": g.op_type,
                        "version": g.version,
                        "reason": g.reason,
                        "detail": g.detail,
                        "count": g.count,
                        "paths": g.paths,
                        "remedies": g.remedies,
                    }
                    for g in group_findings(r.findings, registry)
                ],
            }
            for r in report.results
        ],
    }


def print_check(report: CheckReport, registry=None, stream=None) -> None:
    from rich.markup import escape

    console = _console(stream)
    console.print(f"[bold]{escape(report.model_path)}[/bold]")
    for r in report.results:
        if r.runs:
            how = (f" (confirmed: {r.confirmation or 'loaded'})" if r.confirmed
                   else " (static check)")
            console.print(f"[green]✓[/green] {r.target}: every node runs{escape(how)}")
            continue
        groups = group_findings(r.findings, registry)
        console.print(
            f"[red]✗[/red] {r.target}: {len(r.findings)} finding(s) in {len(groups)} group(s)"
        )
        for g in groups:
            console.print(
                f"  [bold]{escape(g.op_label)}[/bold] ×{g.count} — "
                f"{REASONS.get(g.reason, g.reason)}"
            )
            console.print(f"    {escape(one_line(g.detail))}")
            shown = one_line(", ".join(g.paths[:MAX_PATHS_SHOWN]))
            more = f" (and {g.count - MAX_PATHS_SHOWN} more)" if g.count > MAX_PATHS_SHOWN else ""
            console.print(f"    at {escape(shown)}{more}")
            remedy = "; ".join(g.remedies) if g.remedies else "none installed"
            console.print(f"    remedy: {escape(remedy)}")


def print_inspect(info: dict[str, Any], stream=None) -> None:
    from rich.markup import escape
    from rich.table import Table

    console = _console(stream)
    console.print(f"[bold]{escape(info['path'])}[/bold]  ({info['file_size']:,} bytes)")
    console.print(
        f"IR version {info['ir_version']}; producer: {info['producer'] or '?'}", markup=False
    )
    opsets = ", ".join(f"{d} {v}" for d, v in info["opset_imports"].items())
    console.print(f"opset imports: {opsets or 'none'}", markup=False)
    io_table = Table(title="inputs and outputs")
    for col in ("", "name", "type", "shape"):
        io_table.add_column(col, overflow="fold")
    for kind in ("inputs", "outputs"):
        for v in info[kind]:
            shape = "?" if v["shape"] is None else "[" + ", ".join(map(str, v["shape"])) + "]"
            io_table.add_row(kind[:-1], escape(v["name"]), v["type"], escape(shape))
    console.print(io_table)
    ops = Table(title=f"operators ({info['nodes']:,} nodes)")
    for col in ("domain", "op_type", "since", "count"):
        ops.add_column(col, justify="right" if col in ("since", "count") else "left")
    for op in info["operators"]:
        label = op["op_type"] + (" (local function)" if op["local_function"] else "")
        since = "?" if op["since_version"] is None else str(op["since_version"])
        ops.add_row(escape(op["domain"]), escape(label), since, f"{op['count']:,}")
    console.print(ops)
    if info["functions"]:
        names = ", ".join(
            f"{f['domain']}:{f['name']} ({f['nodes']} nodes)" for f in info["functions"]
        )
        console.print(f"model-local functions: {names}", markup=False)
    sub = info["subgraphs"]
    console.print(f"subgraphs: {sub['count']} (max depth {sub['max_depth']})")
    t = info["tensors"]
    console.print(
        f"tensors with data: {t['count']:,}, {t['bytes']:,} bytes "
        f"({t['external_bytes']:,} in external data)"
    )
    for f in info["external_data"]:
        console.print(
            f"external data: {f['location']} ({f['size']:,} bytes, {f['tensors']} tensors)",
            markup=False,
        )


def print_plugins(rows: list[dict[str, Any]], stream=None) -> None:
    from rich.markup import escape
    from rich.table import Table

    table = Table(title="plugins")
    for col in ("plugin", "distribution", "registered"):
        table.add_column(col, overflow="fold")
    for row in rows:
        parts = [
            f"{kind}: {', '.join(items)}" for kind, items in row["registered"].items() if items
        ]
        dist = row["distribution"] or "-p (this run)"
        if row["version"]:
            dist += f" {row['version']}"
        if row["builtin"]:
            dist += " (built-in)"
        table.add_row(escape(row["name"]), escape(dist), escape("\n".join(parts) or "nothing"))
    _console(stream).print(table)


def print_operators(rows: list[dict[str, Any]], stream=None) -> None:
    from rich.markup import escape
    from rich.table import Table

    table = Table(title=f"operators ({len(rows)})")
    for col in ("domain", "op", "remedy", "opsets", "dtypes", "accuracy", "oracle"):
        table.add_column(col, overflow="fold")
    for r in rows:
        table.add_row(*(escape(x) for x in (
            r["domain"], r["op_type"], r["remedy"], ", ".join(r["opsets"]) or "any",
            ", ".join(r["dtypes"]) or "-", r["accuracy"], r.get("oracle") or "-")))
    _console(stream).print(table)


def dumps(data: Any) -> str:
    return json.dumps(data, indent=2, sort_keys=False)


def print_rewrite(report, stream=None) -> None:
    from rich.markup import escape
    from rich.table import Table

    console = _console(stream)
    title = "plan (dry run)" if report.dry_run else "rewrite"
    destination = escape(report.output or "(not written)")
    console.print(f"[bold]{escape(report.model)}[/bold] → {destination}")
    if report.applied:
        table = Table(title=f"{title}: remedies by op")
        for col in ("op", "remedy", "plugin", "nodes"):
            table.add_column(col, justify="right" if col == "nodes" else "left")
        for (kind, plugin, rule, op), n in sorted(report.applied.items()):
            table.add_row(escape(op), escape(f"{kind} {rule}"), escape(plugin), str(n))
        console.print(table)
    needs = getattr(report, "kernels", None) or {}
    if needs.get("native"):
        console.print("runs natively in onnxruntime-extensions (no Python at run time): "
                      + escape(", ".join(f"{v['op']}" + (f" as {k}" if k != v["op"] else "")
                                         for k, v in sorted(needs["native"].items()))))
    if needs.get("python"):
        console.print("runs Python kernels: " + escape(", ".join(
            f"{v['op']} ({', '.join(v['inputs'])}) → ai.onnx.contrib::{k} [{v['plugin']}]"
            for k, v in sorted(needs["python"].items()))))
    if needs:
        console.print("run it with `onnx-rewriter run` or rewriter.session(): they register "
                      "what the model's metadata lists")
    if report.before and report.after:
        console.print(
            f"nodes: {report.before.nodes:,} → {report.after.nodes:,}; "
            f"ops: {len(report.before.ops)} kinds → {len(report.after.ops)} kinds"
        )
    comparison = getattr(report, "comparison", None)
    for name, verdict in report.verification.items():
        if name == "compare" and comparison is not None:
            continue  # the verdict line says it
        mark = "[green]✓[/green]" if verdict == "ok" else "[yellow]![/yellow]"
        if not (verdict == "ok" or verdict.startswith(("pre-existing", "skipped"))):
            mark = "[red]✗[/red]"
        shown = verdict
        console.print(f"{mark} {escape(name)}: {escape(one_line(shown))}")
    if report.remaining:
        console.print(f"[red]✗[/red] {len(report.remaining)} finding(s) not fixed:")
        for g in group_findings(report.remaining):
            console.print(f"  {escape(g.op_label)} ×{g.count} on {g.target}: "
                          f"{escape(one_line(g.detail))}")
    if not report.dry_run:
        console.print(verdict_line(report))
    for item in report.explain:
        f, count = item["finding"], item.get("count", 1)
        where = f['path'] + (f" and {count - 1} more like it" if count > 1 else "")
        console.print(f"explain {escape(where)} {escape(f['op_type'])} ({f['target']}):")
        for c in item["candidates"]:
            verdict = "chosen" if c["accepted"] else f"declined: {c['why']}"
            console.print(f"    {escape(c['kind'])} {escape(c['rule'])} "
                          f"{escape('[' + c['plugin'] + ']')} — {escape(one_line(verdict))}")


def verdict_line(report) -> str:
    """The last line of ``rewrite``: the verdict, why, and what was written (rich markup)."""
    from rich.markup import escape

    verdict, reason = report.verdict, one_line(report.verdict_reason)
    if report.written:
        where = f"written to {report.output}"
    elif report.output is None and verdict in ("mismatch", "unverified") and report.verify:
        flag = "--keep-failed" if verdict == "mismatch" else "--allow-unverified"
        where = f"nothing written ({flag} writes it)"
    else:
        where = "nothing written"
    if verdict == "unverified" and not report.verify:
        line = f"[yellow]![/yellow] not verified ({escape(reason)}); {escape(where)}"
    else:
        mark = {"verified": "[green]✓[/green]", "unchanged": "[green]✓[/green]",
                "mismatch": "[red]✗[/red]"}.get(verdict, "[yellow]![/yellow]")
        line = f"{mark} {verdict}: {escape(reason)}; {escape(where)}"
    if report.remaining:  # the verdict is about what changed; the rest does not run yet
        what = "what --partial changed" if report.written else "what was changed"
        line = (f"[red]✗[/red] {len(report.remaining)} finding(s) left; {what}: "
                + line.split(" ", 1)[1])
    return line


def _num(x, fmt: str = ".3g") -> str:
    if x is None:
        return "-"
    return format(x, fmt) if x == x and abs(x) != float("inf") else str(x)


def print_compare(report, stream=None) -> None:
    """``onnx-rewriter compare``: a verdict per target, a row per output, the localization."""
    from rich.markup import escape
    from rich.table import Table

    console = _console(stream)
    head = escape(report.rewritten)
    if report.original:
        head = f"{escape(report.original)} → {head}"
    console.print(f"[bold]{head}[/bold]")
    inputs = report.inputs or {}
    if inputs:
        how = inputs.get("source", "")
        if how == "generated":
            seeds = inputs.get("seeds", [])
            how = f"generated (seed{'s' if len(seeds) > 1 else ''} " \
                  f"{', '.join(map(str, seeds))})"
        shapes = ", ".join(f"{k}: {v}" for k, v in inputs.get("shapes", {}).items())
        console.print(f"inputs: {inputs.get('sets', 0)} set(s), {escape(how)}; "
                      f"{escape(shapes)}")
    if report.oracle == "expected":
        console.print("reference outputs: given (expected)")
    elif report.oracle:
        console.print(f"original evaluated on: {escape(report.oracle)} (the oracle)")
    for attempt in report.oracle_attempts:
        if attempt["status"] != "ok":
            console.print(f"  (not on {escape(attempt['target'])}: "
                          f"{escape(one_line(attempt['error']))})")
    if report.error or report.oracle_error:
        console.print(f"[yellow]![/yellow] unverified: could not compare: "
                      f"{escape(one_line(report.why_not_run()))}")
        return
    for t in report.targets:
        where = t.target if not t.runtime else f"{t.target} (run on {t.runtime})"
        if t.status == "error":
            mark = "[yellow]![/yellow]"
            console.print(f"{mark} {escape(where)}: could not run "
                          f"({t.error_kind}): {escape(one_line(t.error))}")
            continue
        mark = "[green]✓[/green]" if t.status == "equal" else "[red]✗[/red]"
        verdict = "equal within tolerance" if t.status == "equal" else "mismatch"
        console.print(f"{mark} {escape(where)}: {verdict} (max abs error {_num(t.max_abs)})")
        table = Table(show_edge=False, pad_edge=False, box=None)
        for col in ("output", "shape", "dtype", "max abs", "max rel", "mismatch", "cosine", ""):
            table.add_column(col, justify="right" if col in (
                "max abs", "max rel", "mismatch", "cosine") else "left")
        for c in t.outputs:
            shape = str(list(c.actual_shape)) if c.actual_shape is not None else "-"
            dtype = c.actual_dtype or "-"
            table.add_row(escape(c.name), shape, escape(dtype), _num(c.max_abs),
                          _num(c.max_rel), f"{c.mismatch_fraction:.2%}",
                          _num(c.cosine, ".6f"), "ok" if c.ok else "[red]differs[/red]")
        console.print(table)
        for c in t.outputs:
            if not c.ok:
                console.print(f"  {escape(c.name)}: {escape(one_line(c.detail or 'differs'))}")
        loc = t.localization
        if loc is not None:
            console.print(f"  localization: {escape(one_line(loc.message))}")
            for check in loc.checks:
                r = check.region
                s = r.stamp
                rule = f"{s.rule} [{s.plugin}]" if s else "no provenance"
                errors = [c.max_abs for c in check.outputs if c.max_abs is not None]
                worst = max(errors) if errors else None
                state = "diverges" if check.diverges else "agrees"
                console.print(f"    {escape(r.label)} — {escape(rule)}: {state} "
                              f"(max abs {_num(worst)})")
    console.print(f"{report.verdict}: {escape(report.summary())}")
